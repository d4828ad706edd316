// See forwarder.h.
#include "tools/gateway/proxy/forwarder.h"

#include <unistd.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <memory>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "tools/frontend/openai_fields.h"
#include "tools/gateway/proxy/error_body.h"
#include "tools/http/reactive.h"
#include "tools/http/watchdog.h"

namespace cacheroute::gateway {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);

// A non-streamed answer larger than this is a 502 (it would have to be held in memory).
constexpr size_t kMaxUnaryBody = 64u << 20;
// Body bytes read at a time: SSE events are small; 8,000 streams hold 32 MB of these.
constexpr size_t kChunk = 4096;

// Hop-by-hop headers (RFC 9110 §7.6.1) and Content-Length (set from the body that is sent) are
// never copied from one side to the other; nor is a request's Host (set to the upstream's).
bool HopByHopOrLength(bhttp::field field) {
  switch (field) {
    case bhttp::field::content_length:
    case bhttp::field::connection:
    case bhttp::field::keep_alive:
    case bhttp::field::transfer_encoding:
    case bhttp::field::te:
    case bhttp::field::trailer:
    case bhttp::field::upgrade:
    case bhttp::field::proxy_connection:
      return true;
    default:
      return false;
  }
}

std::chrono::microseconds ToChrono(absl::Duration d) { return absl::ToChronoMicroseconds(d); }

// "upstream NAME (URL)", for error answers only (never built on the way of a success).
std::string Who(const frontend::Member& member) {
  return absl::StrCat("upstream ", member.name, " (", member.url, ")");
}

// The request as it goes to `member`.
bhttp::request<bhttp::string_body> UpstreamRequest(const http::Request& request,
                                                   const frontend::Member& member,
                                                   bool strip_authorization) {
  bhttp::request<bhttp::string_body> upstream{request.method(), request.target(), 11};
  for (const auto& field : request) {
    if (field.name() == bhttp::field::host || HopByHopOrLength(field.name())) continue;
    if (strip_authorization && field.name() == bhttp::field::authorization) continue;
    upstream.insert(field.name_string(), field.value());
  }
  upstream.set(bhttp::field::host, member.host_header);
  upstream.body() = request.body();
  upstream.keep_alive(true);
  upstream.prepare_payload();
  return upstream;
}

// The head of the answer as it goes to the client.
bhttp::response_header<> ClientHeader(const bhttp::response<bhttp::buffer_body>& answer,
                                      const frontend::Member& member, bool planned) {
  bhttp::response_header<> header;
  header.result(answer.result_int());
  for (const auto& field : answer) {
    if (!HopByHopOrLength(field.name())) header.insert(field.name_string(), field.value());
  }
  header.set("X-CacheRoute-Destination", member.name);
  header.set("X-CacheRoute-Planned", planned ? "1" : "0");
  return header;
}

}  // namespace

struct Forwarder::Call {
  Call(uint32_t d, const frontend::Member& member, std::vector<IdleConnection>* idle)
      : d(d), member(member), idle(idle) {}

  const uint32_t d;
  const frontend::Member& member;
  std::vector<IdleConnection>* const idle;  // this thread's pool for `d` (null off the I/O threads)
  std::optional<beast::tcp_stream> connection;
  std::optional<http::Watch> watch;  // timeouts of `connection`'s operations
  beast::flat_buffer buffer;
  std::optional<bhttp::response_parser<bhttp::buffer_body>> parser;
  bool reused = false;  // `connection` came from the pool
};

struct Forwarder::Failure {
  frontend::ErrorKind kind;
  int status;         // 502, or 504 for a timeout
  std::string error;  // what happened, for the log line and the client's message
};

Forwarder::Forwarder(const GatewayConfig& config, bool strip_authorization, UpstreamPools& pools,
                     frontend::DestinationHealth& health, frontend::RequestMetrics& metrics)
    : config_(config),
      strip_authorization_(strip_authorization),
      pools_(pools),
      health_(health),
      metrics_(metrics) {}

asio::awaitable<int> Forwarder::Forward(http::Exchange& x, const frontend::Member& member,
                                        frontend::RequestLifecycle& request,
                                        const Rewrite* rewrite) {
  // The upstream's part ends on every path, a destroyed coroutine's included.
  struct Done {
    frontend::RequestLifecycle& request;
    ~Done() { request.UpstreamDone(); }
  } done{request};
  Call call{request.destination(), member, pools_.Idle(request.destination(), member)};
  call.buffer.reserve(8192);  // headers and a small answer in one read
  bhttp::request<bhttp::string_body> upstream =
      UpstreamRequest(x.request(), member, strip_authorization_);
  if (rewrite != nullptr) upstream.target(rewrite->target);

  if (std::optional<Failure> failure = co_await Open(call, upstream)) {
    health_.RecordError(call.d, member, failure->kind, failure->error);
    request.UpstreamDone();
    const bool timeout = failure->status == 504;
    co_await SendError(x, failure->status,
                       absl::StrCat(Who(member), timeout ? ": " : " failed: ", failure->error),
                       timeout ? "upstream_timeout" : "upstream_error",
                       timeout ? "upstream_timeout" : "upstream_error", member.name);
    co_return failure->status;
  }
  health_.RecordSuccess(call.d);

  const auto& answer = call.parser->get();
  bhttp::response_header<> header = ClientHeader(answer, member, request.planned());
  const bool streamed = rewrite == nullptr && (answer.chunked() || !answer.has_content_length());
  const Relayed relayed = streamed ? co_await RelayStream(x, call, header, request)
                                   : co_await RelayUnary(x, call, header, request, rewrite);
  Recycle(call, relayed.reusable);
  co_return relayed.status;
}

asio::awaitable<std::optional<Forwarder::Failure>> Forwarder::Open(
    Call& call, bhttp::request<bhttp::string_body>& upstream) {
  for (int attempt = 0;; ++attempt) {
    call.watch.reset();
    call.connection.reset();
    call.reused = false;
    if (attempt == 0 && UpstreamPools::TakeIdle(call.idle, call.connection)) {
      call.watch.emplace(http::Watchdog::Current(), call.connection->socket());
      call.reused = true;
    }
    if (!call.reused) {
      if (std::optional<Failure> failure = co_await Connect(call)) co_return failure;
    }
    tcp::socket& socket = call.connection->socket();
    call.watch->Arm(ToChrono(config_.write_timeout));
    beast::error_code nb;
    // Once per connection: a pooled one is non-blocking already (each set is an ioctl).
    if (!socket.non_blocking()) socket.non_blocking(true, nb);
    const beast::error_code write_ec = co_await http::ReactiveWrite(socket, upstream);
    call.watch->Disarm();
    const bool write_timed_out = call.watch->fired();
    beast::error_code ec = write_ec;
    call.parser.emplace();
    call.parser->body_limit(boost::none);
    call.buffer.clear();
    if (!ec) {
      call.watch->Arm(ToChrono(config_.header_timeout));
      // The answer to a request just written is not there yet.
      ec = co_await http::ReactiveReadHeader(socket, call.buffer, *call.parser,
                                             /*expect_data=*/false);
      call.watch->Disarm();
    }
    if (!ec) co_return std::nullopt;
    const bool timed_out = write_timed_out || call.watch->fired();
    if (call.reused && !timed_out && !call.parser->got_some()) continue;  // a stale keep-alive
    co_return HeadFailure(ec, static_cast<bool>(write_ec), timed_out);
  }
}

asio::awaitable<std::optional<Forwarder::Failure>> Forwarder::Connect(Call& call) {
  const auto executor = co_await asio::this_coro::executor;
  call.connection.emplace(executor);
  call.watch.emplace(http::Watchdog::Current(), call.connection->socket());
  call.watch->Arm(ToChrono(config_.connect_timeout));
  auto [ec, endpoint] = co_await call.connection->async_connect(call.member.endpoints, kNoThrow);
  call.watch->Disarm();
  if (ec) {
    co_return Failure{frontend::ErrorKind::kConnect, 502,
                      call.watch->fired() ? "connect timed out"
                                          : absl::StrCat("could not connect: ", ec.message())};
  }
  beast::error_code ignored;
  call.connection->socket().set_option(tcp::no_delay(true), ignored);
  // The connect left the socket registered for EPOLLOUT (Asio keeps a write interest once an
  // operation waited for it), and edge-triggered EPOLLOUT fires after every write whose data the
  // peer acknowledged: an extra wake-up of this thread per request on a connection that is pooled
  // for many. Registering the descriptor afresh drops that interest; a later write that must wait
  // adds it back.
  call.watch.reset();  // it refers to the socket that is replaced
  const int fd = call.connection->socket().release(ignored);
  if (!ignored) {
    call.connection.emplace(executor);
    call.connection->socket().assign(endpoint.protocol(), fd, ignored);
    if (ignored) ::close(fd);  // not usable: the request fails as a reset
  }
  call.watch.emplace(http::Watchdog::Current(), call.connection->socket());
  co_return std::nullopt;
}

Forwarder::Failure Forwarder::HeadFailure(const beast::error_code& ec, bool write_failed,
                                          bool timed_out) const {
  if (timed_out) {
    return {
        frontend::ErrorKind::kHeaderTimeout, 504,
        absl::StrCat(
            write_failed ? "sending the request" : "the response headers", " took longer than ",
            absl::FormatDuration(write_failed ? config_.write_timeout : config_.header_timeout))};
  }
  const bool protocol =
      ec.category() == bhttp::make_error_code(bhttp::error::bad_version).category() &&
      ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message;
  if (protocol)
    return {frontend::ErrorKind::kProtocol, 502,
            absl::StrCat("malformed response: ", ec.message())};
  return {frontend::ErrorKind::kReset, 502,
          absl::StrCat("connection closed before the response headers (", ec.message(), ")")};
}

void Forwarder::BeginBodyRead(Call& call, char* chunk) const {
  call.parser->get().body().data = chunk;
  call.parser->get().body().size = kChunk;
  call.watch->Arm(ToChrono(config_.read_timeout));
}

size_t Forwarder::EndBodyRead(Call& call, beast::error_code& ec) const {
  call.watch->Disarm();
  if (ec == bhttp::error::need_buffer) ec = {};
  return kChunk - call.parser->get().body().size;
}

void Forwarder::RecordBodyError(Call& call, const beast::error_code& ec) {
  const bool idle = call.watch->fired();
  health_.RecordError(
      call.d, call.member, idle ? frontend::ErrorKind::kIdleTimeout : frontend::ErrorKind::kReset,
      idle ? absl::StrCat("no body bytes for ", absl::FormatDuration(config_.read_timeout))
           : absl::StrCat("the body broke off: ", ec.message()),
      /*may_mark_down=*/false);
}

asio::awaitable<Forwarder::Relayed> Forwarder::RelayStream(http::Exchange& x, Call& call,
                                                           bhttp::response_header<>& header,
                                                           frontend::RequestLifecycle& request) {
  const int status = static_cast<int>(header.result_int());
  metrics_.StreamOpened();
  bool client_gone = !co_await x.StartStream(std::move(header));
  bool broken = false;
  frontend::UsageScanner usage;
  std::unique_ptr<char[]> chunk(new char[kChunk]);
  while (!call.parser->is_done() && !client_gone) {
    BeginBodyRead(call, chunk.get());
    beast::error_code ec =
        co_await http::ReactiveReadSome(call.connection->socket(), call.buffer, *call.parser);
    const size_t got = EndBodyRead(call, ec);
    if (got > 0) {
      request.FirstToken(/*streamed=*/true);
      usage.Feed(absl::string_view(chunk.get(), got));
      if (!co_await x.SendChunk(std::string_view(chunk.get(), got))) client_gone = true;
    }
    if (ec) {
      broken = true;
      RecordBodyError(call, ec);
      break;
    }
  }
  metrics_.StreamClosed();
  request.UpstreamDone();
  if (!broken && !client_gone) co_await x.EndStream();
  if (usage.usage()) request.Usage(*usage.usage());
  co_return Relayed{status, !broken && !client_gone};
}

asio::awaitable<Forwarder::Relayed> Forwarder::RelayUnary(http::Exchange& x, Call& call,
                                                          bhttp::response_header<>& header,
                                                          frontend::RequestLifecycle& request,
                                                          const Rewrite* rewrite) {
  int status = static_cast<int>(header.result_int());
  std::string body;
  std::unique_ptr<char[]> chunk(new char[kChunk]);
  while (!call.parser->is_done()) {
    BeginBodyRead(call, chunk.get());
    beast::error_code ec =
        co_await http::ReactiveReadSome(call.connection->socket(), call.buffer, *call.parser);
    const size_t got = EndBodyRead(call, ec);
    if (got > 0 && body.size() + got > kMaxUnaryBody) {
      ec = bhttp::error::body_limit;
    } else if (got > 0) {
      body.append(chunk.get(), got);
    }
    if (ec) {
      RecordBodyError(call, ec);
      request.UpstreamDone();
      co_await SendError(x, 502,
                         absl::StrCat(Who(call.member), " failed: the response body broke off"),
                         "upstream_error", "upstream_error", call.member.name);
      co_return Relayed{502, false};
    }
  }
  if (absl::StrContains(body, "\"usage\"")) {
    if (std::optional<frontend::Usage> usage = frontend::ReadUsage(body)) request.Usage(*usage);
  }
  request.FirstToken(/*streamed=*/false);  // its client sees nothing earlier
  if (rewrite != nullptr) {
    rewrite->answer(status, body);
    header.result(static_cast<unsigned>(status));
  }
  http::Response response{header.result(), x.request().version()};
  response.base() = std::move(header);
  response.body() = std::move(body);
  request.UpstreamDone();
  co_await x.Send(std::move(response));
  co_return Relayed{status, true};
}

void Forwarder::Recycle(Call& call, bool reusable) {
  call.watch.reset();
  if (reusable && call.parser->is_done() && call.parser->keep_alive() &&
      UpstreamPools::Return(call.idle, std::move(*call.connection))) {
    return;
  }
  beast::error_code ignored;
  call.connection->socket().close(ignored);
}

}  // namespace cacheroute::gateway
