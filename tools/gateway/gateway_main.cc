// cacheroute-gateway: the OpenAI-compatible HTTP gateway (gateway.h). See docs/gateway.md and
// deploy/gateway.yaml.
//
//   cacheroute-gateway --config deploy/gateway.yaml
//   cacheroute-gateway --listen 127.0.0.1:0 --policy sticky --upstream a=http://127.0.0.1:8001
//
// SIGTERM or SIGINT drains (Gateway::Drain: /healthz 503, the listener closes, requests in
// progress finish within drain_timeout), then stops and sends the last rate report.
//
// Exit codes: 0 after a clean shutdown, 2 for a bad configuration or flag, 1 when the gateway
// cannot start (address in use).
#include <sys/resource.h>

#include <csignal>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tools/gateway/gateway.h"
#include "tools/gateway/gateway_config.h"

namespace {

volatile std::sig_atomic_t stop_requested = 0;
void OnSignal(int) { stop_requested = 1; }

}  // namespace

int main(int argc, char** argv) {
  namespace gateway = cacheroute::gateway;
  absl::StatusOr<gateway::GatewayConfig> config = gateway::LoadGatewayConfig(argc, argv);
  if (!config.ok()) {
    if (config.status().code() == absl::StatusCode::kNotFound) {  // --help
      std::cout << config.status().message();
      return 0;
    }
    std::cerr << "cacheroute-gateway: error: " << config.status().message() << "\n";
    return 2;
  }
  // Every client stream and every upstream connection is a descriptor: use all the host allows.
  if (rlimit limit{}; getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
  absl::StatusOr<std::unique_ptr<gateway::Gateway>> started = gateway::Gateway::Start(*config);
  if (!started.ok()) {
    std::cerr << "cacheroute-gateway: error: " << started.status().message() << "\n";
    return started.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  std::string line = absl::StrCat(
      "started gateway port=", (*started)->port(), " listen=", config->listen,
      " policy=", config->policy, " upstreams=", config->upstreams.size(),
      " planner=", config->planner.empty() ? "none" : absl::StrJoin(config->planner, ","), "\n");
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
  while (!stop_requested) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const bool drained = (*started)->Drain();
  (*started)->Stop();
  if (!drained) std::fputs("drain_timeout passed with requests in progress: cut\n", stderr);
  std::fputs("stopped gateway\n", stderr);
  return 0;
}
