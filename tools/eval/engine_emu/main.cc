// cacheroute-engine-emu: an HTTP server that looks like one vLLM OpenAI-compatible model server
// and behaves like the simulator's engine model (docs/engine-emu.md). Prints
// "started engine-emu port=N ..." on stdout once it accepts requests; stops cleanly on SIGINT or
// SIGTERM.
#include <pthread.h>
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <string>

#include "absl/strings/str_join.h"
#include "tools/eval/engine_emu/server.h"
#include "tools/eval/sim/engine_profile.h"

int main(int argc, char** argv) {
  using cacheroute::engine_emu::EmuOptions;
  using cacheroute::engine_emu::EmuServer;

  EmuOptions options;
  std::string profile_name = "llama-8b-h100";
  double time_scale = 1.0;
  uint32_t kv_blocks = 0;
  uint32_t max_waiting = 0;
  double request_timeout = 0;

  CLI::App app{"cacheroute-engine-emu: a vLLM-compatible HTTP server backed by the engine model"};
  app.add_option("--host", options.host, "Address to listen on")->capture_default_str();
  app.add_option("--port", options.port, "Port to listen on; 0 picks a free one")
      ->capture_default_str();
  app.add_option("--profile", profile_name,
                 "Engine profile: " + absl::StrJoin(cacheroute::sim::EngineProfileNames(), ", "))
      ->capture_default_str();
  app.add_option("--model", options.model, "Served model name (/v1/models, the model field)")
      ->capture_default_str();
  app.add_option("--time-scale", time_scale,
                 "Real seconds waited per modelled second: 1 real time, 0.1 ten times faster, "
                 "0 no waiting")
      ->capture_default_str();
  app.add_option("--kv-blocks", kv_blocks, "KV cache blocks of 16 tokens (0: the profile's)");
  app.add_option("--max-waiting", max_waiting,
                 "Reject with 503 when this many requests wait (0: unbounded)")
      ->capture_default_str();
  app.add_option("--request-timeout", request_timeout,
                 "Abort a request not finished this many modelled seconds after arrival (504); "
                 "0: never");
  app.add_option("--max-model-len", options.max_model_len,
                 "Largest prompt + max_tokens accepted (400 above)")
      ->capture_default_str();
  app.add_option("--engine-label", options.engine_label, "The engine label of every metric")
      ->capture_default_str();
  app.add_option("--io-threads,--http-threads", options.io_threads,
                 "I/O threads serving every connection (0: one per core); they do not bound "
                 "concurrent connections. --http-threads is the old name")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  absl::StatusOr<cacheroute::sim::EngineProfile> profile =
      cacheroute::sim::FindEngineProfile(profile_name);
  if (!profile.ok()) {
    std::cerr << "cacheroute-engine-emu: --profile: " << profile.status().message() << "\n";
    return 2;
  }
  if (kv_blocks > 0) profile->kv_blocks = kv_blocks;
  options.runner.profile = *profile;
  options.runner.time_scale = time_scale;
  options.runner.engine.max_waiting = max_waiting;
  if (request_timeout > 0) options.runner.engine.timeout_s = request_timeout;

  // Every thread inherits the blocked mask, so only sigwait below sees SIGINT and SIGTERM.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  absl::StatusOr<std::unique_ptr<EmuServer>> server = EmuServer::Start(options);
  if (!server.ok()) {
    std::cerr << "cacheroute-engine-emu: " << server.status().message() << "\n";
    return server.status().code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  std::cout << "started engine-emu port=" << (*server)->port() << " profile=" << profile->name
            << " model=" << options.model << " time_scale=" << time_scale
            << " kv_blocks=" << profile->kv_blocks << std::endl;

  int received = 0;
  sigwait(&signals, &received);
  std::cout << "stopping engine-emu signal=" << received << std::endl;
  (*server)->Stop();
  std::cout << "stopped engine-emu" << std::endl;
  return 0;
}
