// See server.h.
#include "tools/eval/engine_emu/server.h"

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/address.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <chrono>
#include <ctime>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "tools/eval/engine_emu/metrics.h"
#include "tools/http/server.h"

namespace cacheroute::engine_emu {

namespace asio = http::asio;
namespace bhttp = http::bhttp;

namespace {

constexpr char kJson[] = "application/json";
constexpr int kMaxIoThreads = 1024;

bool PastWaiting(Phase phase) { return phase != Phase::kWaiting; }
bool Ended(Phase phase) { return phase != Phase::kWaiting && phase != Phase::kFirstToken; }

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

// Callers pass a named ApiError: GCC 12 destroys a braced temporary argument of a coroutine twice.
asio::awaitable<void> SendError(http::Exchange& x, const ApiError& error) {
  co_await x.Send(http::TextResponse(x.request(), static_cast<unsigned>(error.code), kJson,
                                     ErrorJson(error)));
}

// A coroutine's wait for its request's phase. Its executor (its connection's I/O thread, or a
// strand) runs one handler at a time. The OnAdvance callback posts there a cancel of a timer that
// never expires by itself; since the phase check and the start of the wait run without a break,
// a cancel posted after a phase change either finds the wait pending or runs before the check,
// which then sees the new phase. A spare cancel only costs one more check.
class EngineWait {
 public:
  EngineWait(std::shared_ptr<PendingRequest> request, const asio::any_io_executor& executor)
      : request_(std::move(request)),
        timer_(std::make_shared<asio::steady_timer>(executor,
                                                    asio::steady_timer::time_point::max())) {
    // The callback holds the timer weakly: the coroutine may be gone when it runs.
    std::weak_ptr<asio::steady_timer> weak = timer_;
    request_->OnAdvance([executor, weak] {
      asio::post(executor, [weak] {
        if (std::shared_ptr<asio::steady_timer> timer = weak.lock()) timer->cancel();
      });
    });
  }
  ~EngineWait() { request_->OnAdvance(nullptr); }
  EngineWait(const EngineWait&) = delete;
  EngineWait& operator=(const EngineWait&) = delete;

  // The phase, once `done` holds for it.
  asio::awaitable<Phase> Until(bool (*done)(Phase)) {
    for (;;) {
      const Phase phase = request_->phase();
      if (done(phase)) co_return phase;
      timer_->expires_at(asio::steady_timer::time_point::max());
      co_await timer_->async_wait(asio::as_tuple(asio::use_awaitable));
    }
  }

 private:
  std::shared_ptr<PendingRequest> request_;
  std::shared_ptr<asio::steady_timer> timer_;
};

// http::Server listens on an IP address; a host name (localhost) is resolved to its first.
absl::StatusOr<std::string> ListenAddress(const std::string& host) {
  boost::system::error_code ec;
  asio::ip::make_address(host, ec);
  if (!ec) return host;
  asio::io_context context;
  asio::ip::tcp::resolver resolver(context);
  const auto results = resolver.resolve(host, "", ec);
  if (ec || results.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("host: cannot resolve '", host, "': ", ec.message()));
  }
  return results.begin()->endpoint().address().to_string();
}

}  // namespace

struct EmuServer::Routes {
  static asio::awaitable<void> Handle(EmuServer& s, http::Exchange& x);
  static asio::awaitable<void> Complete(EmuServer& s, Endpoint endpoint, http::Exchange& x);
};

asio::awaitable<void> EmuServer::Routes::Handle(EmuServer& s, http::Exchange& x) {
  const http::Request& request = x.request();
  const std::string_view target(request.target().data(), request.target().size());
  const std::string_view path = target.substr(0, target.find('?'));
  if (request.method() == bhttp::verb::get) {
    if (path == "/health") {
      http::Response response{bhttp::status::ok, request.version()};
      response.keep_alive(request.keep_alive());
      co_await x.Send(std::move(response));
      co_return;
    }
    if (path == "/v1/models") {
      co_await x.Send(http::TextResponse(
          request, 200, kJson, ModelsJson(s.options_.model, s.created_, s.options_.max_model_len)));
      co_return;
    }
    if (path == "/metrics") {
      co_await x.Send(http::TextResponse(
          request, 200, "text/plain; version=0.0.4; charset=utf-8",
          RenderMetrics(s.runner_->Metrics(), s.options_.model, s.options_.engine_label)));
      co_return;
    }
  } else if (request.method() == bhttp::verb::post) {
    if (path == "/v1/completions") {
      co_await Complete(s, Endpoint::kCompletions, x);
      co_return;
    }
    if (path == "/v1/chat/completions") {
      co_await Complete(s, Endpoint::kChat, x);
      co_return;
    }
  }
  const absl::string_view method(request.method_string().data(), request.method_string().size());
  const ApiError not_found{.code = 404,
                           .type = "NotFoundError",
                           .message = absl::StrCat("no route for ", method, " ",
                                                   absl::string_view(path.data(), path.size())),
                           .param = ""};
  co_await SendError(x, not_found);
}

asio::awaitable<void> EmuServer::Routes::Complete(EmuServer& s, Endpoint endpoint,
                                                  http::Exchange& x) {
  ParsedRequest parsed;
  if (std::optional<ApiError> e = ParseRequest(endpoint, x.request().body(), s.limits_, parsed)) {
    co_await SendError(x, *e);
    co_return;
  }
  const ResponseHeader header{
      .endpoint = endpoint,
      .id = absl::StrCat(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-", "emu", s.port_, "-",
                         s.next_id_.fetch_add(1, std::memory_order_relaxed)),
      .created = static_cast<int64_t>(std::time(nullptr)),
      .model = s.options_.model};
  const uint32_t prompt_tokens = parsed.prompt_tokens;
  const uint32_t max_tokens = parsed.max_tokens;
  std::shared_ptr<PendingRequest> pending =
      s.runner_->Submit(prompt_tokens, max_tokens, std::move(parsed.block_hashes));
  const asio::any_io_executor executor = co_await asio::this_coro::executor;
  EngineWait wait(pending, executor);

  if (!parsed.stream) {
    const Phase phase = co_await wait.Until(Ended);
    if (phase != Phase::kFinished) {
      const ApiError error = PhaseError(phase, s.options_);
      co_await SendError(x, error);
      co_return;
    }
    const Usage usage{.prompt_tokens = prompt_tokens,
                      .completion_tokens = max_tokens,
                      .cached_tokens = pending->cached_tokens()};
    co_await x.Send(http::TextResponse(x.request(), 200, kJson, ResponseJson(header, usage)));
    co_return;
  }

  // Streaming: the status is decided at the first token, so a rejection is still an HTTP error.
  const Phase first = co_await wait.Until(PastWaiting);
  if (first != Phase::kFirstToken && first != Phase::kFinished) {
    const ApiError error = PhaseError(first, s.options_);
    co_await SendError(x, error);
    co_return;
  }
  bhttp::response_header<> head;
  head.result(bhttp::status::ok);
  head.set(bhttp::field::content_type, "text/event-stream");
  if (!co_await x.StartStream(std::move(head))) co_return;
  const std::string first_chunk =
      Sse(ChunkJson(header, GeneratedText(0, 1), /*first=*/true, max_tokens == 1));
  if (!co_await x.SendChunk(first_chunk)) co_return;  // the client is gone

  const Phase phase = co_await wait.Until(Ended);
  std::string rest;
  if (phase == Phase::kFinished) {
    for (uint32_t i = 1; i < max_tokens; ++i) {
      rest += Sse(ChunkJson(header, GeneratedText(i, i + 1), false, i + 1 == max_tokens));
    }
    if (parsed.include_usage) {
      rest += Sse(UsageChunkJson(header, {.prompt_tokens = prompt_tokens,
                                          .completion_tokens = max_tokens,
                                          .cached_tokens = pending->cached_tokens()}));
    }
  } else {
    // Mid-stream failure: vLLM sends an error object as an event.
    rest += Sse(ErrorJson(PhaseError(phase, s.options_)));
  }
  rest += "data: [DONE]\n\n";
  if (!co_await x.SendChunk(rest)) co_return;
  co_await x.EndStream();
}

EmuServer::EmuServer() = default;

absl::StatusOr<std::unique_ptr<EmuServer>> EmuServer::Start(EmuOptions options) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("port must be in [0, 65535], got ", options.port));
  }
  if (options.io_threads < 0 || options.io_threads > kMaxIoThreads) {
    return absl::InvalidArgumentError(absl::StrCat("io_threads must be in [0, ", kMaxIoThreads,
                                                   "], got ", options.io_threads));
  }
  if (options.http_threads < 0 || options.http_threads > kMaxIoThreads) {
    return absl::InvalidArgumentError(absl::StrCat("http_threads must be in [0, ", kMaxIoThreads,
                                                   "], got ", options.http_threads));
  }
  if (options.model.empty()) return absl::InvalidArgumentError("model must not be empty");
  std::unique_ptr<EmuServer> server(new EmuServer());
  server->options_ = std::move(options);
  server->limits_ = {.model = server->options_.model,
                     .max_model_len = server->options_.max_model_len};
  server->created_ = static_cast<int64_t>(std::time(nullptr));
  CACHEROUTE_ASSIGN_OR_RETURN(server->runner_, EngineRunner::Start(server->options_.runner));

  const EmuOptions& o = server->options_;
  http::ServerOptions http_options;
  absl::StatusOr<std::string> address = ListenAddress(o.host);
  if (!address.ok()) {
    server->runner_->Stop();
    return address.status();
  }
  http_options.host = *std::move(address);
  http_options.port = o.port;
  http_options.threads = static_cast<unsigned>(o.io_threads > 0 ? o.io_threads : o.http_threads);
  absl::StatusOr<std::unique_ptr<http::Server>> http = http::Server::Start(
      std::move(http_options), [s = server.get()](http::Exchange& x) -> asio::awaitable<void> {
        return Routes::Handle(*s, x);
      });
  if (!http.ok()) {
    server->runner_->Stop();
    return http.status();
  }
  server->http_ = *std::move(http);
  server->port_ = server->http_->port();
  return server;
}

EmuServer::~EmuServer() { Stop(); }

void EmuServer::Stop() {
  std::lock_guard<std::mutex> lock(stop_mu_);
  if (stopped_) return;
  stopped_ = true;
  // Idle keep-alive connections close; answers still to come carry Connection: close.
  if (http_ != nullptr) http_->StopAccepting();
  // Every pending request ends with kShutdown; its OnAdvance wakes its coroutine, which answers.
  if (runner_ != nullptr) runner_->Stop();
  if (http_ == nullptr) return;
  const auto deadline = std::chrono::steady_clock::now() + kStopGrace;
  while (http_->active() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  http_->Stop();
}

}  // namespace cacheroute::engine_emu
