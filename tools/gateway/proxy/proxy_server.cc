// See proxy_server.h.
#include "tools/gateway/proxy/proxy_server.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "tools/frontend/openai_fields.h"
#include "tools/gateway/proxy/error_body.h"

namespace cacheroute::gateway {
namespace {

namespace asio = boost::asio;
namespace bhttp = boost::beast::http;

// How often a held request looks at the fleet's room and its deadline again.
constexpr std::chrono::milliseconds kAdmissionPoll{5};

absl::string_view View(boost::beast::string_view s) { return {s.data(), s.size()}; }

// A request header's value (Beast compares names without case), or none.
std::optional<absl::string_view> Header(const http::Request& request, absl::string_view name) {
  const auto it = request.find(boost::beast::string_view(name.data(), name.size()));
  if (it == request.end()) return std::nullopt;
  return View(it->value());
}

// GET /v1/models/{model}'s answer made from `member`'s answer to GET /v1/models (`status`,
// `body`): the model's entry, 404 model_not_found, or the upstream's own error passed on.
void AnswerModel(const std::string& model, const frontend::Member& member, int& status,
                 std::string& body) {
  if (status != 200) return;
  absl::StatusOr<std::optional<std::string>> entry = frontend::FindModel(body, model);
  if (!entry.ok()) {
    status = 502;
    body =
        frontend::ErrorBody(absl::StrCat("upstream ", member.name, ": ", entry.status().message()),
                            "upstream_error", "upstream_error");
  } else if (!entry->has_value()) {
    status = 404;
    body = frontend::ErrorBody(absl::StrCat("The model `", model, "` does not exist."),
                               "invalid_request_error", "model_not_found");
  } else {
    body = **std::move(entry);
  }
}

}  // namespace

bool ProxyServer::Authorized(const http::Request& request) const {
  const auto it = request.find(bhttp::field::authorization);
  return keys_.Authorized(it == request.end() ? std::nullopt : std::optional(View(it->value())));
}

absl::StatusOr<std::unique_ptr<ProxyServer>> ProxyServer::Start(
    const GatewayConfig& config, frontend::FrontendCore& core,
    std::function<std::string()> render_metrics) {
  // Validated as HOST:PORT (gateway_config.cc); port 0 picks a free one.
  const size_t colon = config.listen.rfind(':');
  std::string host = config.listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  if (host == "localhost") host = "127.0.0.1";
  int port = 0;
  if (!absl::SimpleAtoi(config.listen.substr(colon + 1), &port)) {
    return absl::InvalidArgumentError(
        absl::StrCat("listen: \"", config.listen, "\" is not HOST:PORT"));
  }
  CACHEROUTE_ASSIGN_OR_RETURN(ApiKeys keys, ApiKeys::Load(config.api_key_file));

  // Per-thread state exists before the first request can arrive (the server serves from Start).
  const unsigned threads =
      config.io_threads > 0 ? config.io_threads : std::max(1u, std::thread::hardware_concurrency());
  std::unique_ptr<ProxyServer> proxy(
      new ProxyServer(config, core, std::move(keys), std::move(render_metrics), threads));
  http::ServerOptions options;
  options.host = host;
  options.port = port;
  options.threads = threads;
  options.write_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
      absl::ToChronoMicroseconds(config.write_timeout));
  options.tls_cert_file = config.tls_cert_file;
  options.tls_key_file = config.tls_key_file;
  absl::StatusOr<std::unique_ptr<http::Server>> server = http::Server::Start(
      options,
      [p = proxy.get()](http::Exchange& x) -> asio::awaitable<void> { return p->Handle(x); });
  if (!server.ok()) {
    if (absl::IsInvalidArgument(server.status())) return server.status();
    return absl::UnavailableError(
        absl::StrCat("listen: cannot bind \"", config.listen, "\": ", server.status().message()));
  }
  proxy->server_ = *std::move(server);
  return proxy;
}

ProxyServer::ProxyServer(const GatewayConfig& config, frontend::FrontendCore& core, ApiKeys keys,
                         std::function<std::string()> render_metrics, unsigned threads)
    : core_(core),
      config_(config),
      keys_(std::move(keys)),
      render_metrics_(std::move(render_metrics)),
      pools_(threads, core.routing().router().capacity()),
      forwarder_(config_, keys_.enabled(), pools_, core.health(), metrics_) {}

void ProxyServer::Stop() {
  if (server_ != nullptr) server_->Stop();
  pools_.Clear();  // their sockets use the server's contexts
}

void ProxyServer::RenderServer(base::Exposition& page) const {
  const http::RefusalCounts http = server_ != nullptr ? server_->refusals() : http::RefusalCounts{};
  metrics_.RenderServer(page,
                        {.active_requests = server_ != nullptr ? server_->active() : 0,
                         .client_connections = server_ != nullptr ? server_->connections() : 0,
                         .draining = draining_.load(),
                         .malformed = http.malformed,
                         .body_too_large = http.body_too_large,
                         .header_too_large = http.header_too_large,
                         .read_timeouts = http.read_timeouts});
}

asio::awaitable<void> ProxyServer::Refuse(http::Exchange& x, frontend::Refusal refusal,
                                          absl::string_view message, absl::string_view allow) {
  metrics_.Refused(refusal);
  // OpenAI's codes where it has one (invalid_api_key); otherwise a name of the same kind.
  const absl::string_view code = refusal == frontend::Refusal::kUnauthorized ? "invalid_api_key"
                                 : refusal == frontend::Refusal::kNoRoute    ? "unknown_url"
                                                                             : "method_not_allowed";
  http::Response response =
      http::TextResponse(x.request(), StatusOf(refusal), "application/json",
                         frontend::ErrorBody(message, "invalid_request_error", code));
  if (!allow.empty()) {
    response.set(bhttp::field::allow, std::string_view(allow.data(), allow.size()));
  }
  co_await x.Send(std::move(response));
}

asio::awaitable<void> ProxyServer::Handle(http::Exchange& x) {
  const http::Request& request = x.request();
  const absl::string_view target = View(request.target());
  const absl::string_view path = target.substr(0, target.find('?'));
  const bool post = request.method() == bhttp::verb::post;
  const bool get = request.method() == bhttp::verb::get;
  if (path == "/healthz" && get) {
    co_await HandleHealthz(x);
    co_return;
  }
  if (path == "/metrics" && get) {
    co_await x.Send(http::TextResponse(request, 200, "text/plain; version=0.0.4; charset=utf-8",
                                       render_metrics_()));
    co_return;
  }
  const bool explain = path == "/debug/explain";
  if (explain && !post) {
    co_await Refuse(
        x, frontend::Refusal::kMethodNotAllowed,
        absl::StrCat("method ", View(request.method_string()), " is not allowed on ", path),
        "POST");
    co_return;
  }
  if (explain) {
    if (keys_.enabled() && !Authorized(request)) {
      co_await Refuse(x, frontend::Refusal::kUnauthorized,
                      "missing or unknown API key: send Authorization: Bearer <key> with a key of "
                      "the gateway's api_key_file");
      co_return;
    }
    co_await HandleExplain(x);
    co_return;
  }
  const bool completion = path == "/v1/completions" || path == "/v1/chat/completions";
  const std::optional<std::string> model = frontend::ModelIdOfPath(path);
  const bool models = path == "/v1/models" || model.has_value();
  if ((completion && !post) || (models && !get)) {
    co_await Refuse(
        x, frontend::Refusal::kMethodNotAllowed,
        absl::StrCat("method ", View(request.method_string()), " is not allowed on ", path),
        completion ? "POST" : "GET");
    co_return;
  }
  if (!completion && !models) {
    co_await Refuse(x, frontend::Refusal::kNoRoute, absl::StrCat("no route for ", path));
    co_return;
  }
  if (keys_.enabled() && !Authorized(request)) {
    co_await Refuse(x, frontend::Refusal::kUnauthorized,
                    "missing or unknown API key: send Authorization: Bearer <key> with a key of "
                    "the gateway's api_key_file");
    co_return;
  }
  co_await HandleRouted(x,
                        models                      ? frontend::Endpoint::kModels
                        : path == "/v1/completions" ? frontend::Endpoint::kCompletions
                                                    : frontend::Endpoint::kChatCompletions,
                        model);
}

asio::awaitable<void> ProxyServer::HandleExplain(http::Exchange& x) {
  const absl::StatusOr<std::string> explained = core_.Explain(
      [&x](absl::string_view name) { return Header(x.request(), name); }, x.request().body());
  if (!explained.ok()) {
    co_await SendError(
        x, 400, explained.status().message(), "invalid_request_error",
        absl::IsFailedPrecondition(explained.status()) ? "policy_not_explained" : "no_routing_key");
    co_return;
  }
  co_await x.Send(http::TextResponse(x.request(), 200, "application/json", *explained));
}

asio::awaitable<void> ProxyServer::HandleHealthz(http::Exchange& x) {
  const bool any_up = core_.routing().AnyUp();
  const bool ok = any_up && !draining_.load();
  co_await x.Send(http::TextResponse(x.request(), ok ? 200 : 503, "text/plain",
                                     ok       ? "ok\n"
                                     : any_up ? "draining\n"
                                              : "no upstream is up\n"));
}

asio::awaitable<frontend::AdmissionResult> ProxyServer::Admit(http::Exchange& x) {
  frontend::AdmissionQueue& queue = *core_.admission();
  // What the queue's wake tells the waiting coroutine, on its own thread's context (one per I/O
  // thread), which the wake posts to: no lock.
  struct Waiting {
    explicit Waiting(const asio::any_io_executor& executor) : timer(executor) {}
    asio::steady_timer timer;
    std::optional<frontend::AdmissionResult> outcome;
  };
  auto waiting = std::make_shared<Waiting>(co_await asio::this_coro::executor);
  const frontend::AdmissionResult offered = core_.OfferAdmission(
      [&x](absl::string_view name) { return Header(x.request(), name); }, x.request().body(),
      [waiting](frontend::Verdict v, frontend::ShedCause c) {
        asio::post(waiting->timer.get_executor(), [waiting, v, c] {
          waiting->outcome = frontend::AdmissionResult{v, c, 0};
          waiting->timer.cancel();
        });
      });
  if (offered.verdict != frontend::Verdict::kQueued) co_return offered;
  while (!waiting->outcome.has_value()) {
    waiting->timer.expires_after(kAdmissionPoll);
    co_await waiting->timer.async_wait(asio::as_tuple(asio::use_awaitable));
    if (waiting->outcome.has_value()) break;
    // A client that went away leaves the queue at once (false: it was woken meanwhile, and the
    // wake's outcome is on its way here).
    if (x.ClientGone() && queue.Withdraw(offered.ticket, core_.routing().clock().Now())) {
      co_return frontend::AdmissionResult{frontend::Verdict::kShed,
                                          frontend::ShedCause::kClientGone, 0};
    }
    // Room comes as prefills end (their first tokens), deadlines as time passes: look again.
    core_.PumpAdmission();
  }
  co_return *waiting->outcome;
}

asio::awaitable<void> ProxyServer::HandleRouted(http::Exchange& x, frontend::Endpoint endpoint,
                                                const std::optional<std::string>& model) {
  const dataplane::Clock& clock = core_.routing().clock();
  const dataplane::Time start = clock.Now();
  if (core_.admission() != nullptr && endpoint != frontend::Endpoint::kModels) {
    const frontend::AdmissionResult admitted = co_await Admit(x);
    if (admitted.verdict == frontend::Verdict::kShed) {
      const int retry_after = core_.admission()->retry_after_seconds();
      http::Response response =
          http::TextResponse(x.request(), 429, "application/json",
                             frontend::ShedErrorBody(admitted.cause, retry_after));
      response.set(bhttp::field::retry_after, std::to_string(retry_after));
      co_await x.Send(std::move(response));
      metrics_.Answered(endpoint, 429, clock.Now() - start);
      co_return;
    }
  }
  frontend::RoutedRequest routed =
      endpoint == frontend::Endpoint::kModels
          ? core_.RouteAny(start)
          : core_.Route([&x](absl::string_view name) { return Header(x.request(), name); },
                        x.request().body(), start);
  const frontend::Member* member = routed.member();
  int status = 503;
  if (member == nullptr) {
    co_await SendError(x, 503, "no upstream is up", "service_unavailable", "no_upstream");
  } else if (model.has_value()) {
    const Forwarder::Rewrite rewrite{
        .target = "/v1/models",
        .answer = [&](int& s, std::string& body) { AnswerModel(*model, *member, s, body); }};
    status = co_await forwarder_.Forward(x, *member, routed.lifecycle, &rewrite);
  } else {
    status = co_await forwarder_.Forward(x, *member, routed.lifecycle);
  }
  metrics_.Answered(endpoint, status, clock.Now() - start);
  routed.lifecycle.Finish(status);
  core_.PumpAdmission();  // its work left the ledger: room for a waiter
}

}  // namespace cacheroute::gateway
