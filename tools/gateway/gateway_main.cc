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

#include <cstdio>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/program.h"
#include "tools/gateway/gateway.h"
#include "tools/gateway/gateway_config.h"

int main(int argc, char** argv) {
  namespace gateway = cacheroute::gateway;
  namespace program = cacheroute::base::program;
  absl::StatusOr<gateway::GatewayConfig> config = gateway::LoadGatewayConfig(argc, argv);
  if (!config.ok()) return program::ConfigExit("cacheroute-gateway", config.status());
  // Every client stream and every upstream connection is a descriptor: use all the host allows.
  if (rlimit limit{}; getrlimit(RLIMIT_NOFILE, &limit) == 0 && limit.rlim_cur < limit.rlim_max) {
    limit.rlim_cur = limit.rlim_max;
    setrlimit(RLIMIT_NOFILE, &limit);
  }
  absl::StatusOr<std::unique_ptr<gateway::Gateway>> started = gateway::Gateway::Start(*config);
  if (!started.ok()) return program::StartExit("cacheroute-gateway", started.status());
  program::CatchStopSignals();
  std::string line = absl::StrCat(
      "started gateway port=", (*started)->port(), " listen=", config->listen,
      " policy=", config->policy, " upstreams=", config->upstreams.size(),
      " planner=", config->planner.empty() ? "none" : absl::StrJoin(config->planner, ","), "\n");
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
  while (!program::StopRequested()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const bool drained = (*started)->Drain();
  (*started)->Stop();
  if (!drained) std::fputs("drain_timeout passed with requests in progress: cut\n", stderr);
  std::fputs("stopped gateway\n", stderr);
  return 0;
}
