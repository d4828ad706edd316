// EmuServer: the engine emulator's HTTP front end, a vLLM OpenAI-compatible server in appearance
// (openai_api.h for the bodies, metrics.h for /metrics) over one EngineRunner.
//
//   POST /v1/completions, POST /v1/chat/completions   (stream: true → SSE chunks, data: [DONE])
//   GET  /v1/models, GET /health, GET /metrics
//
// Streaming. The engine model reports a request's first token and its end, not every token in
// between, so a stream sends one chunk with the first token when it is produced, then every
// remaining token (one chunk each) when the request finishes, then the usage chunk (with
// stream_options.include_usage) and data: [DONE].
//
// Status codes: 400 for bad requests and prompts that cannot fit the KV cache, 404 for another
// model's name, 503 when --max-waiting requests already wait or the server is shutting down, 504
// when the engine's request timeout fired.
//
// Usage:
//   auto server = EmuServer::Start({.host = "127.0.0.1", .port = 0, .runner = {...}});
//   std::cout << "started engine-emu port=" << (*server)->port() << "\n";
//   ...
//   (*server)->Stop();
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "tools/engine_emu/engine_runner.h"
#include "tools/engine_emu/openai_api.h"

namespace httplib {
class Server;
}

namespace cacheroute::engine_emu {

struct EmuOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: pick a free one
  std::string model = "cacheroute-emu";
  std::string engine_label = "0";   // the `engine` label of every metric
  uint32_t max_model_len = 131072;  // prompt + max_tokens must fit
  // HTTP worker threads. Each open connection (keep-alive) holds one, and each in-flight request
  // blocks one until it ends, so this bounds concurrent clients.
  int http_threads = 1024;
  RunnerOptions runner;
};

class EmuServer {
 public:
  // Binds, starts the engine thread and the HTTP threads. InvalidArgument for bad options,
  // Unavailable when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<EmuServer>> Start(EmuOptions options);
  ~EmuServer();  // Stop()
  EmuServer(const EmuServer&) = delete;
  EmuServer& operator=(const EmuServer&) = delete;

  int port() const { return port_; }
  EngineRunner& runner() { return *runner_; }

  // Stops accepting, ends pending requests (503) and joins every thread. Idempotent.
  void Stop();

 private:
  EmuServer() = default;
  void Routes();

  EmuOptions options_;
  RequestLimits limits_;
  int64_t created_ = 0;
  int port_ = 0;
  std::unique_ptr<EngineRunner> runner_;
  std::unique_ptr<httplib::Server> http_;
  std::thread listener_;
};

}  // namespace cacheroute::engine_emu
