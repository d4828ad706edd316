// cacheroute-planner: the central planner service. See README.md ("Running the planner") and
// deploy/planner.yaml for the configuration.
//
//   cacheroute-planner --config deploy/planner.yaml
//   cacheroute-planner --destinations 30 --listen 127.0.0.1:0 --state-dir /tmp/cr-state
//
// Exit codes: 0 after a clean shutdown (SIGINT/SIGTERM), 2 for a bad configuration, 1 when the
// service cannot start (state directory unreadable, address in use).
#include <csignal>
#include <cstdio>
#include <iostream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "planner/clock.h"
#include "planner/service/config.h"
#include "planner/service/logging.h"
#include "planner/service/planner_server.h"

namespace {

// Signals only set a flag; a watcher thread turns it into a clean shutdown.
volatile std::sig_atomic_t stop_requested = 0;
void OnSignal(int) { stop_requested = 1; }

}  // namespace

int main(int argc, char** argv) {
  namespace service = cacheroute::service;
  absl::StatusOr<service::PlannerConfig> config = service::LoadPlannerConfig(argc, argv);
  if (!config.ok()) {
    if (config.status().code() == absl::StatusCode::kNotFound) {  // --help
      std::cout << config.status().message();
      return 0;
    }
    std::cerr << "cacheroute-planner: error: " << config.status().message() << "\n";
    return 2;
  }
  service::SetLogFormat(config->log_format);
  if (config->token.empty()) {
    service::LogEvent("warning", "no_token",
                      {{"detail",
                        "no bearer token configured: anyone who can reach the port may "
                        "report rates and change membership"}});
  }

  cacheroute::planner::RealClock clock;
  absl::StatusOr<std::unique_ptr<service::PlannerServer>> server =
      service::PlannerServer::Start(*config, &clock);
  if (!server.ok()) {
    std::cerr << "cacheroute-planner: error: " << server.status().message() << "\n";
    return server.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  const auto latest = (*server)->core().Latest();
  service::LogEvent("info", "started",
                    {{"listen", config->listen},
                     {"port", absl::StrCat((*server)->port())},
                     {"metrics_port", absl::StrCat((*server)->metrics_port())},
                     {"etcd", config->etcd.enabled ? absl::StrJoin(config->etcd.endpoints, ",")
                                                   : "off"},
                     {"destinations", absl::StrCat(config->destinations.size())},
                     {"state_dir", config->state_dir},
                     {"tls", config->tls.cert_file.empty() ? "off" : "on"},
                     {"restored_version", latest ? latest->version().ToString() : "none"}});

  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  service::PlannerServer* raw = server->get();
  std::thread watcher([raw] {
    while (!stop_requested) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    raw->Shutdown();
  });
  raw->Wait();
  watcher.join();
  service::LogEvent("info", "stopped");
  return 0;
}
