// cacheroute-planner: the central planner service. See docs/planner-service.md and
// deploy/planner.yaml for the configuration.
//
//   cacheroute-planner --config deploy/planner.yaml
//   cacheroute-planner --destinations 30 --listen 127.0.0.1:0 --state-dir /tmp/cr-state
//
// Exit codes: 0 after a clean shutdown (SIGINT/SIGTERM), 2 for a bad configuration, 1 when the
// service cannot start (state directory unreadable, address in use).
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/clock.h"
#include "base/logging.h"
#include "base/program.h"
#include "planner/service/config.h"
#include "planner/service/planner_server.h"

int main(int argc, char** argv) {
  namespace service = cacheroute::service;
  namespace base = cacheroute::base;
  absl::StatusOr<service::PlannerConfig> config = service::LoadPlannerConfig(argc, argv);
  if (!config.ok()) return base::program::ConfigExit("cacheroute-planner", config.status());
  base::SetLogFormat(config->log_format);
  if (config->token.empty()) {
    base::LogEvent("warning", "no_token",
                   {{"detail",
                     "no bearer token configured: anyone who can reach the port may "
                     "report rates and change membership"}});
  }

  base::RealClock clock;
  absl::StatusOr<std::unique_ptr<service::PlannerServer>> server =
      service::PlannerServer::Start(*config, &clock);
  if (!server.ok()) return base::program::StartExit("cacheroute-planner", server.status());
  const auto latest = (*server)->core().Latest();
  base::LogEvent(
      "info", "started",
      {{"listen", config->listen},
       {"port", absl::StrCat((*server)->port())},
       {"metrics_port", absl::StrCat((*server)->metrics_port())},
       {"etcd", config->etcd.enabled ? absl::StrJoin(config->etcd.endpoints, ",") : "off"},
       {"destinations", absl::StrCat(config->destinations.size())},
       {"state_dir", config->state_dir},
       {"tls", config->tls.cert_file.empty() ? "off" : "on"},
       {"restored_version", latest ? latest->version().ToString() : "none"}});

  // A watcher thread turns a signal into a clean shutdown.
  base::program::CatchStopSignals();
  service::PlannerServer* raw = server->get();
  std::thread watcher([raw] {
    while (!base::program::StopRequested())
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    raw->Shutdown();
  });
  raw->Wait();
  watcher.join();
  base::LogEvent("info", "stopped");
  return 0;
}
