// cacheroute-epp: the endpoint picker for the Gateway API Inference Extension (epp.h). See
// docs/epp.md and deploy/epp.yaml.
//
//   cacheroute-epp --config deploy/epp.yaml
//   cacheroute-epp --listen 127.0.0.1:0 --metrics-listen 127.0.0.1:0 --policy cacheroute
//       --upstream engine-0=http://10.0.0.1:8000 --upstream engine-1=http://10.0.0.2:8000
//   (one command line)
//
// Logs "started epp port=N metrics_port=M …" once serving. SIGTERM or SIGINT drains (Epp::Drain:
// readiness NOT_SERVING, then no new streams, streams in progress finish within drain_timeout),
// then stops and sends the last rate report.
//
// Exit codes: 0 after a clean shutdown, 2 for a bad configuration or flag, 1 when it cannot
// start (address in use).
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/program.h"
#include "tools/epp/epp.h"
#include "tools/epp/epp_config.h"

int main(int argc, char** argv) {
  namespace epp = cacheroute::epp;
  namespace program = cacheroute::base::program;
  absl::StatusOr<epp::EppConfig> config = epp::LoadEppConfig(argc, argv);
  if (!config.ok()) return program::ConfigExit("cacheroute-epp", config.status());
  absl::StatusOr<std::unique_ptr<epp::Epp>> started = epp::Epp::Start(*config);
  if (!started.ok()) return program::StartExit("cacheroute-epp", started.status());
  program::CatchStopSignals();
  const epp::Epp& e = **started;
  const std::string line = absl::StrCat(
      "started epp port=", e.port(), " metrics_port=", e.metrics_port(), " listen=", config->listen,
      " policy=", config->dataplane.policy, " members=", e.DestinationNames().size(), " planner=",
      config->dataplane.planner.empty() ? "none" : absl::StrJoin(config->dataplane.planner, ","),
      "\n");
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
  while (!program::StopRequested()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const size_t cut = (*started)->Drain();
  (*started)->Stop();
  if (cut > 0) std::fprintf(stderr, "drain_timeout passed with %zu streams open: cut\n", cut);
  std::fputs("stopped epp\n", stderr);
  return 0;
}
