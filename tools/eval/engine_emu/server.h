// EmuServer: the engine emulator's HTTP front end, a vLLM OpenAI-compatible server in appearance
// (openai_api.h for the bodies, metrics.h for /metrics) over one EngineRunner.
//
//   POST /v1/completions, POST /v1/chat/completions   (stream: true → SSE chunks, data: [DONE])
//   GET  /v1/models, GET /health, GET /metrics        (anything else: 404)
//
// Serving. An http::Server (tools/http/server.h): a few I/O threads serve every connection, and a
// request waiting for the engine is a suspended coroutine woken by its PendingRequest's OnAdvance
// callback, never a blocked thread. Thousands of open streams cost sockets and memory only.
//
// Streaming. The engine model reports a request's first token and its end, not every token in
// between, so a stream sends one chunk with the first token when it is produced, then every
// remaining token (one SSE event each) when the request finishes, then the usage chunk (with
// stream_options.include_usage) and data: [DONE].
//
// Status codes: 400 for bad requests and prompts that cannot fit the KV cache, 404 for another
// model's name or path, 503 when --max-waiting requests already wait or the server is shutting
// down, 504 when the engine's request timeout fired. A stream that fails after its first chunk
// gets an {"error": …} event, then data: [DONE].
//
// Usage:
//   auto server = EmuServer::Start({.host = "127.0.0.1", .port = 0, .runner = {...}});
//   std::cout << "started engine-emu port=" << (*server)->port() << "\n";
//   ...
//   (*server)->Stop();
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "tools/eval/engine_emu/engine_runner.h"
#include "tools/eval/engine_emu/openai_api.h"

namespace cacheroute::http {
class Server;
}

namespace cacheroute::engine_emu {

struct EmuOptions {
  std::string host = "127.0.0.1";  // an IP address or a name (its first address)
  int port = 0;                    // 0: pick a free one
  std::string model = "cacheroute-emu";
  std::string engine_label = "0";   // the `engine` label of every metric
  uint32_t max_model_len = 131072;  // prompt + max_tokens must fit
  // I/O threads serving every connection; 0: one per core. They do not bound concurrent
  // connections or requests.
  int io_threads = 0;
  // The old name (once one thread per connection): used as io_threads when io_threads is 0.
  int http_threads = 0;
  RunnerOptions runner;
};

class EmuServer {
 public:
  // Binds, starts the engine thread and the I/O threads. InvalidArgument for bad options,
  // Unavailable when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<EmuServer>> Start(EmuOptions options);
  ~EmuServer();  // Stop()
  EmuServer(const EmuServer&) = delete;
  EmuServer& operator=(const EmuServer&) = delete;

  int port() const { return port_; }
  EngineRunner& runner() { return *runner_; }

  // Stops accepting, ends pending requests (503, or an error event on a stream), waits up to
  // kStopGrace for those answers to be written, then cuts what is left and joins every thread.
  // Idempotent.
  void Stop();
  static constexpr std::chrono::milliseconds kStopGrace{2000};

 private:
  struct Routes;  // the request handlers (server.cc)
  EmuServer();

  EmuOptions options_;
  RequestLimits limits_;
  int64_t created_ = 0;
  int port_ = 0;
  std::atomic<uint64_t> next_id_{0};
  std::unique_ptr<EngineRunner> runner_;
  std::unique_ptr<http::Server> http_;  // after runner_: stopped and destroyed first
  std::mutex stop_mu_;
  bool stopped_ = false;
};

}  // namespace cacheroute::engine_emu
