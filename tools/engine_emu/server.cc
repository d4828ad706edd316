// See server.h.
#include "tools/engine_emu/server.h"

#include <httplib.h>

#include <atomic>
#include <ctime>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "planner/service/http_listen.h"
#include "tools/engine_emu/metrics.h"

namespace cacheroute::engine_emu {
namespace {

constexpr char kJson[] = "application/json";

void ReplyError(httplib::Response& res, const ApiError& error) {
  res.status = error.code;
  res.set_content(ErrorJson(error), kJson);
}

// The error for a request that ended without finishing.
ApiError PhaseError(Phase phase, const EmuOptions& options) {
  switch (phase) {
    case Phase::kRejectedQueueFull:
      return {.code = 503,
              .type = "ServiceUnavailableError",
              .message = absl::StrCat("the engine's waiting queue is full (",
                                      options.runner.engine.max_waiting, " requests waiting)"),
              .param = ""};
    case Phase::kRejectedTooLarge:
      return {.code = 400,
              .type = "BadRequestError",
              .message = absl::StrCat("prompt + max_tokens needs more KV blocks than the engine "
                                      "has (",
                                      options.runner.profile.kv_blocks, " blocks of 16 tokens)"),
              .param = ""};
    case Phase::kTimedOut:
      return {.code = 504,
              .type = "TimeoutError",
              .message = "the request timed out in the engine",
              .param = ""};
    default:
      return {.code = 503,
              .type = "ServiceUnavailableError",
              .message = "the server is shutting down",
              .param = ""};
  }
}

std::string Sse(const std::string& json) { return "data: " + json + "\n\n"; }

}  // namespace

absl::StatusOr<std::unique_ptr<EmuServer>> EmuServer::Start(EmuOptions options) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("port must be in [0, 65535], got ", options.port));
  }
  if (options.http_threads < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("http_threads must be >= 1, got ", options.http_threads));
  }
  if (options.model.empty()) return absl::InvalidArgumentError("model must not be empty");
  std::unique_ptr<EmuServer> server(new EmuServer());
  server->options_ = std::move(options);
  server->limits_ = {.model = server->options_.model,
                     .max_model_len = server->options_.max_model_len};
  server->created_ = static_cast<int64_t>(std::time(nullptr));
  absl::StatusOr<std::unique_ptr<EngineRunner>> runner =
      EngineRunner::Start(server->options_.runner);
  if (!runner.ok()) return runner.status();
  server->runner_ = *std::move(runner);

  server->http_ = std::make_unique<httplib::Server>();
  const int threads = server->options_.http_threads;
  server->http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // vLLM (uvicorn) keeps a connection open for any number of requests.
  server->http_->set_keep_alive_max_count(1u << 30);
  // Headers and body go out in separate writes; without TCP_NODELAY, Nagle holds the body back
  // until the client acks the headers, which a delayed ACK postpones by up to 40 ms.
  server->http_->set_tcp_nodelay(true);
  server->Routes();
  const std::string& host = server->options_.host;
  if (server->options_.port == 0) {
    server->port_ = server->http_->bind_to_any_port(host);
  } else {
    server->port_ =
        server->http_->bind_to_port(host, server->options_.port) ? server->options_.port : -1;
  }
  if (server->port_ <= 0) {
    server->runner_->Stop();
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", host, ":", server->options_.port));
  }
  server->listener_ = service::ListenInBackground(*server->http_);
  return server;
}

EmuServer::~EmuServer() { Stop(); }

void EmuServer::Stop() {
  if (runner_ != nullptr) runner_->Stop();  // pending requests answer 503 at once
  if (http_ != nullptr) http_->stop();
  if (listener_.joinable()) listener_.join();
}

void EmuServer::Routes() {
  http_->Get("/health", [](const httplib::Request&, httplib::Response& res) { res.status = 200; });
  http_->Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(ModelsJson(options_.model, created_, options_.max_model_len), kJson);
  });
  http_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(RenderMetrics(runner_->Metrics(), options_.model, options_.engine_label),
                    "text/plain; version=0.0.4; charset=utf-8");
  });

  auto next_id = std::make_shared<std::atomic<uint64_t>>(0);
  auto complete = [this, next_id](Endpoint endpoint, const httplib::Request& req,
                                  httplib::Response& res) {
    ParsedRequest parsed;
    if (std::optional<ApiError> e = ParseRequest(endpoint, req.body, limits_, parsed)) {
      ReplyError(res, *e);
      return;
    }
    ResponseHeader header{
        .endpoint = endpoint,
        .id = absl::StrCat(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-", "emu", port_, "-",
                           next_id->fetch_add(1, std::memory_order_relaxed)),
        .created = static_cast<int64_t>(std::time(nullptr)),
        .model = options_.model};
    std::shared_ptr<PendingRequest> pending =
        runner_->Submit(parsed.prompt_tokens, parsed.max_tokens, std::move(parsed.block_hashes));

    if (!parsed.stream) {
      const Phase phase = pending->WaitDone();
      if (phase != Phase::kFinished) {
        ReplyError(res, PhaseError(phase, options_));
        return;
      }
      res.set_content(ResponseJson(header, {.prompt_tokens = parsed.prompt_tokens,
                                            .completion_tokens = parsed.max_tokens,
                                            .cached_tokens = pending->cached_tokens()}),
                      kJson);
      return;
    }

    // Streaming: the status is decided at the first token, so a rejection is still an HTTP error.
    const Phase first = pending->WaitFirstToken();
    if (first != Phase::kFirstToken && first != Phase::kFinished) {
      ReplyError(res, PhaseError(first, options_));
      return;
    }
    auto sent_first = std::make_shared<bool>(false);
    const bool include_usage = parsed.include_usage;
    const uint32_t prompt_tokens = parsed.prompt_tokens;
    const uint32_t max_tokens = parsed.max_tokens;
    res.set_chunked_content_provider(
        "text/event-stream", [this, pending, header, sent_first, include_usage, prompt_tokens,
                              max_tokens](size_t, httplib::DataSink& sink) {
          if (!*sent_first) {
            *sent_first = true;
            const std::string chunk =
                Sse(ChunkJson(header, GeneratedText(0, 1), /*first=*/true, max_tokens == 1));
            return sink.write(chunk.data(), chunk.size());
          }
          std::string out;
          const Phase phase = pending->WaitDone();
          if (phase == Phase::kFinished) {
            for (uint32_t i = 1; i < max_tokens; ++i) {
              out += Sse(ChunkJson(header, GeneratedText(i, i + 1), false, i + 1 == max_tokens));
            }
            if (include_usage) {
              out += Sse(UsageChunkJson(header, {.prompt_tokens = prompt_tokens,
                                                 .completion_tokens = max_tokens,
                                                 .cached_tokens = pending->cached_tokens()}));
            }
          } else {
            // Mid-stream failure: vLLM sends an error object as an event.
            const ApiError error = PhaseError(phase, options_);
            out += Sse(absl::StrCat("{\"error\":", ErrorJson(error), "}"));
          }
          out += "data: [DONE]\n\n";
          if (!sink.write(out.data(), out.size())) return false;
          sink.done();
          return true;
        });
  };
  http_->Post("/v1/completions", [complete](const httplib::Request& req, httplib::Response& res) {
    complete(Endpoint::kCompletions, req, res);
  });
  http_->Post("/v1/chat/completions",
              [complete](const httplib::Request& req, httplib::Response& res) {
                complete(Endpoint::kChat, req, res);
              });
}

}  // namespace cacheroute::engine_emu
