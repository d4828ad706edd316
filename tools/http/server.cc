// See server.h.
#include "tools/http/server.h"

#include <poll.h>
#include <pthread.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/ssl.hpp>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <optional>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "tools/http/reactive.h"
#include "tools/http/watchdog.h"

namespace cacheroute::http {
namespace {

using tcp = asio::ip::tcp;
thread_local int current_thread = -1;
constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);

beast::tcp_stream& Lowest(beast::tcp_stream& s) { return s; }
beast::tcp_stream& Lowest(beast::ssl_stream<beast::tcp_stream>& s) { return s.next_layer(); }

void Log(absl::string_view message) {
  std::string line = absl::StrCat("http: ", message, "\n");
  std::fwrite(line.data(), 1, line.size(), stderr);
}

absl::StatusOr<std::string> ReadFile(const std::string& field, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat(field, ": cannot read '", path, "'"));
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace

Response TextResponse(const Request& request, unsigned status, std::string_view content_type,
                      std::string body) {
  Response r{static_cast<bhttp::status>(status), request.version()};
  r.set(bhttp::field::content_type, content_type);
  r.keep_alive(request.keep_alive());
  r.body() = std::move(body);
  r.prepare_payload();
  return r;
}

struct Server::Impl {
  Server* server;
  ServerOptions options;
  Handler handler;
  std::optional<tcp::acceptor> acceptor;
  std::optional<asio::ssl::context> tls;
  std::vector<asio::executor_work_guard<asio::io_context::executor_type>> work;
  size_t next_context = 0;  // Accept's only

  // Connections waiting for their next request, by id: closing them is how StopAccepting ends
  // keep-alive connections without cutting an exchange.
  std::mutex idle_mu;
  std::unordered_map<uint64_t, std::function<void()>> idle;
  uint64_t next_id = 0;

  Impl(Server* s, ServerOptions o, Handler h)
      : server(s),
        options(std::move(o)),
        handler(std::move(h)),
        acceptor(std::in_place, *s->contexts_.front()) {
    for (auto& c : s->contexts_) work.push_back(asio::make_work_guard(*c));
  }

  asio::awaitable<void> Accept();
  template <typename Stream>
  asio::awaitable<void> Serve(std::shared_ptr<Stream> stream, std::string remote);
};

// A connection's stream and whether it waits for its next request (both touched only on the
// connection's thread).
template <typename Stream>
struct Connection {
  Stream stream;
  bool idle = false;
  explicit Connection(Stream s) : stream(std::move(s)) {}
};

namespace {

// The Exchange of one request on a connection of type Stream.
template <typename Stream>
class StreamExchange final : public Exchange {
 public:
  StreamExchange(Stream& stream, Watch& watch, const ServerOptions& options,
                 const std::atomic<bool>& draining, Request request, const std::string& remote)
      : stream_(stream), watch_(watch), options_(options), draining_(draining) {
    request_ = std::move(request);
    remote_ = remote;
  }

  bool keep_alive() const { return keep_alive_; }
  bool failed() const { return failed_; }

  // poll(2) with no wait: POLLRDHUP (Linux) is set once the peer's FIN arrived, even with unread
  // bytes before it (a pipelined request, a TLS close_notify); POLLHUP / POLLERR once it failed.
  bool ClientGone() const override {
    pollfd p{};
    p.fd = Lowest(stream_).socket().native_handle();
    p.events = POLLRDHUP;
    if (p.fd < 0) return true;
    const int n = ::poll(&p, 1, 0);
    return n > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
  }
  bool complete() const { return complete_; }

  asio::awaitable<bool> Send(Response response) override {
    if (answered_) co_return false;
    answered_ = true;
    Finish(response);
    response.prepare_payload();
    watch_.Arm(options_.write_timeout);
    beast::error_code ec;
    if constexpr (std::is_same_v<Stream, beast::tcp_stream>) {
      // Set once per connection (each set is an ioctl); the read loop set it already.
      if (!stream_.socket().non_blocking()) stream_.socket().non_blocking(true, ec);
      ec = co_await ReactiveWrite(stream_.socket(), response);
    } else {
      auto [wec, n] = co_await bhttp::async_write(stream_, response, kNoThrow);
      ec = wec;
    }
    watch_.Disarm();
    complete_ = !ec;
    failed_ = static_cast<bool>(ec);
    co_return !ec;
  }

  asio::awaitable<bool> StartStream(bhttp::response_header<> header) override {
    if (answered_) co_return false;
    answered_ = true;
    bhttp::response<bhttp::empty_body> response{std::move(header)};
    Finish(response);
    close_delimited_ = request_.version() < 11;
    if (close_delimited_) {
      // HTTP/1.0 has no chunked coding: the body runs until the connection closes.
      keep_alive_ = false;
      response.keep_alive(false);
      response.chunked(false);
      response.erase(bhttp::field::content_length);
    } else {
      response.chunked(true);
    }
    bhttp::response_serializer<bhttp::empty_body> serializer{response};
    watch_.Arm(options_.write_timeout);
    auto [ec, n] = co_await bhttp::async_write_header(stream_, serializer, kNoThrow);
    watch_.Disarm();
    failed_ = static_cast<bool>(ec);
    co_return !ec;
  }

  asio::awaitable<bool> SendChunk(std::string_view data) override {
    if (failed_ || !answered_ || complete_) co_return false;
    if (data.empty()) co_return true;  // an empty chunk would end the body
    watch_.Arm(options_.write_timeout);
    const asio::const_buffer bytes(data.data(), data.size());
    beast::error_code ec;
    if (close_delimited_) {
      auto [wec, n] = co_await asio::async_write(stream_, bytes, kNoThrow);
      ec = wec;
    } else {
      auto [wec, n] = co_await asio::async_write(stream_, bhttp::make_chunk(bytes), kNoThrow);
      ec = wec;
    }
    watch_.Disarm();
    failed_ = static_cast<bool>(ec);
    co_return !ec;
  }

  asio::awaitable<bool> EndStream() override {
    if (failed_ || !answered_ || complete_) co_return false;
    if (close_delimited_) {  // closing the connection ends the body
      complete_ = true;
      co_return true;
    }
    watch_.Arm(options_.write_timeout);
    auto [ec, n] = co_await asio::async_write(stream_, bhttp::make_chunk_last(), kNoThrow);
    watch_.Disarm();
    failed_ = static_cast<bool>(ec);
    complete_ = !ec;
    co_return !ec;
  }

 private:
  template <typename Message>
  void Finish(Message& m) {
    keep_alive_ = request_.keep_alive() && !draining_.load();
    m.version(request_.version());
    m.keep_alive(keep_alive_);
  }

  Stream& stream_;
  Watch& watch_;
  const ServerOptions& options_;
  const std::atomic<bool>& draining_;
  bool keep_alive_ = false;
  bool failed_ = false;
  bool complete_ = false;
  bool close_delimited_ = false;  // a stream to an HTTP/1.0 client: no chunks, close ends it
};

// Reads at least one byte of the next request into `buffer` (unless it holds some already): the
// wait that idle_timeout bounds, apart from reading the request itself. `expect_data`: as in
// reactive.h (false for a keep-alive client's next request, which cannot be there yet).
template <typename Stream>
asio::awaitable<beast::error_code> AwaitFirstByte(Stream& stream, beast::flat_buffer& buffer,
                                                  bool expect_data) {
  constexpr size_t kRead = 8192;
  if (buffer.size() > 0) co_return beast::error_code{};
  if constexpr (std::is_same_v<Stream, beast::tcp_stream>) {
    for (;;) {
      if (expect_data) {
        beast::error_code ec;
        const size_t n = stream.socket().read_some(buffer.prepare(kRead), ec);
        if (!ec) {
          buffer.commit(n);
          co_return ec;
        }
        if (!WouldBlock(ec)) co_return ec;
      }
      if (beast::error_code ec = co_await WaitReady(stream.socket(), tcp::socket::wait_read)) {
        co_return ec;
      }
      expect_data = true;
    }
  } else {
    auto [ec, n] = co_await stream.async_read_some(buffer.prepare(kRead), kNoThrow);
    buffer.commit(n);
    co_return ec;
  }
}

template <typename Stream>
asio::awaitable<void> Close(Stream& stream, Watch& watch) {
  if constexpr (std::is_same_v<Stream, beast::ssl_stream<beast::tcp_stream>>) {
    watch.Arm(std::chrono::seconds(2));
    co_await stream.async_shutdown(kNoThrow);
    watch.Disarm();
  }
  beast::error_code ec;
  Lowest(stream).socket().shutdown(tcp::socket::shutdown_send, ec);
  Lowest(stream).close();
}

}  // namespace

template <typename Stream>
asio::awaitable<void> Server::Impl::Serve(std::shared_ptr<Stream> connection_ptr,
                                          std::string remote) {
  auto state = std::make_shared<Connection<Stream>>(std::move(*connection_ptr));
  connection_ptr.reset();
  Stream& stream = state->stream;
  struct Count {
    std::atomic<size_t>& n;
    explicit Count(std::atomic<size_t>& c) : n(c) { ++n; }
    ~Count() { --n; }
  } connection(server->connections_);
  Watch watch(Watchdog::Current(), Lowest(stream).socket());
  // Plain TCP is read and written reactively (reactive.h); TLS through Asio's operations.
  constexpr bool kPlain = std::is_same_v<Stream, beast::tcp_stream>;
  if constexpr (kPlain) {
    beast::error_code nb;
    stream.socket().non_blocking(true, nb);
  }

  if constexpr (std::is_same_v<Stream, beast::ssl_stream<beast::tcp_stream>>) {
    watch.Arm(options.read_timeout);
    auto [ec] = co_await stream.async_handshake(asio::ssl::stream_base::server, kNoThrow);
    watch.Disarm();
    if (ec) co_return;
  }
  beast::flat_buffer buffer;
  buffer.reserve(8192);  // a typical request in one read (the default 512 bytes takes several)
  // Registered once: StopAccepting closes the connection if it is waiting for a request then.
  uint64_t id;
  {
    auto executor = co_await asio::this_coro::executor;
    std::weak_ptr<Connection<Stream>> weak = state;
    std::lock_guard<std::mutex> lock(idle_mu);
    id = next_id++;
    idle.emplace(id, [executor, weak] {
      asio::post(executor, [weak] {
        std::shared_ptr<Connection<Stream>> c = weak.lock();
        if (c && c->idle) Lowest(c->stream).cancel();
      });
    });
  }
  // Waits for the next request unless StopAccepting came first (both on this thread's turn).
  bool first_request = true;
  for (;;) {
    if (server->stopped_accepting_.load()) break;
    state->idle = true;
    bhttp::request_parser<bhttp::string_body> parser;
    parser.body_limit(options.body_limit);
    parser.header_limit(64u << 10);
    // Beast reads a whole header before it parses any of it, so the wait for a request's first
    // byte is its own step: idle_timeout bounds only that, read_timeout all of the request.
    watch.Arm(options.idle_timeout);
    // A keep-alive client's next request is not there yet, unless it was pipelined.
    beast::error_code ec = co_await AwaitFirstByte(stream, buffer, /*expect_data=*/first_request);
    first_request = false;
    watch.Disarm();
    state->idle = false;
    if (!ec) {
      watch.Arm(options.read_timeout);
      if constexpr (kPlain) {
        while (!ec && !parser.is_done()) {
          ec = co_await ReactiveReadSome(stream.socket(), buffer, parser);
        }
      } else {
        auto [ec_rest, n_rest] = co_await bhttp::async_read(stream, buffer, parser, kNoThrow);
        ec = ec_rest;
      }
      if (ec && watch.fired()) ++server->read_timeouts_;
      watch.Disarm();
    }
    if (ec) {
      // A request that is too large or malformed gets an answer; a closed or timed-out
      // connection gets none.
      const bool too_large = ec == bhttp::error::body_limit || ec == bhttp::error::header_limit;
      const bool malformed =
          !too_large && parser.got_some() && ec != bhttp::error::end_of_stream &&
          ec != asio::error::eof && ec != beast::error::timeout &&
          ec != asio::error::operation_aborted && ec != asio::error::connection_reset &&
          ec != asio::ssl::error::stream_truncated;
      if (too_large || malformed) {
        const unsigned status = ec == bhttp::error::body_limit     ? 413
                                : ec == bhttp::error::header_limit ? 431
                                                                   : 400;
        ++(status == 413   ? server->body_too_large_
           : status == 431 ? server->header_too_large_
                           : server->malformed_);
        const std::string message =
            status == 413   ? absl::StrCat("request body larger than ", options.body_limit, " bytes")
            : status == 431 ? absl::StrCat("request header larger than ", 64u << 10, " bytes")
                            : absl::StrCat("malformed HTTP request: ", ec.message());
        Request stub;
        stub.version(11);
        StreamExchange<Stream> x(stream, watch, options, server->stopped_accepting_, std::move(stub),
                                 remote);
        Response r = TextResponse(
            x.request(), status, "application/json",
            absl::StrCat(R"({"error":{"message":")", message,
                         R"(","type":"invalid_request_error","param":null,"code":)", status, "}}"));
        r.keep_alive(false);
        co_await x.Send(std::move(r));
      }
      break;
    }
    struct Active {
      std::atomic<size_t>& n;
      explicit Active(std::atomic<size_t>& c) : n(c) { ++n; }
      ~Active() { --n; }
    } active(server->active_);
    StreamExchange<Stream> x(stream, watch, options, server->stopped_accepting_, parser.release(), remote);
    try {
      co_await handler(x);
    } catch (const std::exception& e) {
      Log(absl::StrCat("handler for ",
                       absl::string_view(x.request().target().data(), x.request().target().size()),
                       " threw: ", e.what()));
    }
    if (!x.answered()) {
      co_await x.Send(TextResponse(
          x.request(), 500, "application/json",
          R"({"error":{"message":"internal error: no response","type":"internal_error","param":null,"code":500}})"));
    }
    if (x.failed() || !x.complete() || !x.keep_alive()) break;
  }
  {
    std::lock_guard<std::mutex> lock(idle_mu);
    idle.erase(id);
  }
  co_await Close(stream, watch);
}

asio::awaitable<void> Server::Impl::Accept() {
  asio::steady_timer backoff(*server->contexts_.front());
  for (;;) {
    asio::io_context& context = *server->contexts_[next_context++ % server->contexts_.size()];
    auto [ec, socket] = co_await acceptor->async_accept(context.get_executor(), kNoThrow);
    if (ec == asio::error::operation_aborted || !acceptor->is_open()) co_return;
    if (ec) {
      // Out of file descriptors or a transient error: wait and go on, never give up the listener.
      Log(absl::StrCat("accept: ", ec.message()));
      backoff.expires_after(std::chrono::milliseconds(50));
      co_await backoff.async_wait(kNoThrow);
      continue;
    }
    beast::error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    const auto endpoint = socket.remote_endpoint(ignored);
    std::string remote = absl::StrCat(endpoint.address().to_string(), ":", endpoint.port());
    auto executor = socket.get_executor();
    if (tls) {
      asio::co_spawn(executor,
                     Serve(std::make_shared<beast::ssl_stream<beast::tcp_stream>>(
                               beast::tcp_stream(std::move(socket)), *tls),
                           std::move(remote)),
                     asio::detached);
    } else {
      asio::co_spawn(executor,
                     Serve(std::make_shared<beast::tcp_stream>(std::move(socket)),
                           std::move(remote)),
                     asio::detached);
    }
  }
}

absl::StatusOr<std::unique_ptr<Server>> Server::Start(ServerOptions options, Handler handler) {
  if (options.port < 0 || options.port > 65535) {
    return absl::InvalidArgumentError(absl::StrCat("port: must be 0..65535, got ", options.port));
  }
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tls_cert_file and tls_key_file: give both or neither, got '", options.tls_cert_file,
        "' and '", options.tls_key_file, "'"));
  }
  std::unique_ptr<Server> server(new Server());
  const unsigned threads =
      options.threads > 0 ? options.threads : std::max(1u, std::thread::hardware_concurrency());
  for (unsigned i = 0; i < threads; ++i) {
    server->contexts_.push_back(std::make_unique<asio::io_context>(/*concurrency_hint=*/1));
  }
  server->impl_ = std::make_unique<Impl>(server.get(), std::move(options), std::move(handler));
  Impl& impl = *server->impl_;
  if (!impl.options.tls_cert_file.empty()) {
    CACHEROUTE_ASSIGN_OR_RETURN(std::string cert,
                                ReadFile("tls_cert_file", impl.options.tls_cert_file));
    CACHEROUTE_ASSIGN_OR_RETURN(std::string key,
                                ReadFile("tls_key_file", impl.options.tls_key_file));
    impl.tls.emplace(asio::ssl::context::tls_server);
    impl.tls->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                          asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 |
                          asio::ssl::context::no_tlsv1_1);
    beast::error_code ec;
    impl.tls->use_certificate_chain(asio::buffer(cert), ec);
    if (ec) {
      return absl::InvalidArgumentError(absl::StrCat("tls_cert_file: '", impl.options.tls_cert_file,
                                                     "' is not a PEM certificate chain: ",
                                                     ec.message()));
    }
    impl.tls->use_private_key(asio::buffer(key), asio::ssl::context::pem, ec);
    if (ec) {
      return absl::InvalidArgumentError(absl::StrCat(
          "tls_key_file: '", impl.options.tls_key_file, "' is not a PEM private key for ",
          "the certificate: ", ec.message()));
    }
  }
  beast::error_code ec;
  const asio::ip::address address = asio::ip::make_address(impl.options.host, ec);
  if (ec) {
    return absl::InvalidArgumentError(
        absl::StrCat("host: '", impl.options.host, "' is not an IP address"));
  }
  const tcp::endpoint endpoint(address, static_cast<unsigned short>(impl.options.port));
  impl.acceptor->open(endpoint.protocol(), ec);
  if (!ec) impl.acceptor->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) impl.acceptor->bind(endpoint, ec);
  if (!ec) impl.acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", impl.options.host, ":",
                                               impl.options.port, ": ", ec.message()));
  }
  server->port_ = impl.acceptor->local_endpoint().port();
  asio::co_spawn(impl.acceptor->get_executor(), impl.Accept(), asio::detached);
  for (size_t i = 0; i < server->contexts_.size(); ++i) {
    server->watchdogs_.push_back(std::make_unique<Watchdog>(*server->contexts_[i]));
    server->threads_.emplace_back(
        [c = server->contexts_[i].get(), w = server->watchdogs_.back().get(), i] {
          Watchdog::SetCurrent(w);
          current_thread = static_cast<int>(i);
          const std::string name = absl::StrCat("http-io-", i);  // as top and perf show it
          pthread_setname_np(pthread_self(), name.substr(0, 15).c_str());
          c->run();
          current_thread = -1;
          Watchdog::SetCurrent(nullptr);
        });
  }
  return server;
}

int Server::CurrentThread() { return current_thread; }

bool Server::tls() const { return impl_ && impl_->tls.has_value(); }

RefusalCounts Server::refusals() const {
  return {.malformed = malformed_.load(),
          .body_too_large = body_too_large_.load(),
          .header_too_large = header_too_large_.load(),
          .read_timeouts = read_timeouts_.load()};
}

void Server::StopAccepting() {
  if (stopped_accepting_.exchange(true)) return;
  asio::post(impl_->acceptor->get_executor(), [impl = impl_.get()] {
    beast::error_code ec;
    impl->acceptor->close(ec);
  });
  std::lock_guard<std::mutex> lock(impl_->idle_mu);
  for (auto& [id, close] : impl_->idle) close();
}

void Server::Stop() {
  std::lock_guard<std::mutex> lock(stop_mu_);
  if (stopped_.exchange(true)) return;
  StopAccepting();
  impl_->work.clear();
  for (auto& c : contexts_) c->stop();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
}

Server::~Server() {
  if (!impl_) return;
  Stop();
  // The listener goes before its context; the context (and with it every connection's coroutine
  // frame, which refers to impl_ and the counters) before impl_.
  impl_->acceptor.reset();
  for (auto& w : watchdogs_) w->Shutdown();
  contexts_.clear();  // connections' frames go here; their Watches leave the watchdogs
  watchdogs_.clear();
  impl_.reset();
}

}  // namespace cacheroute::http
