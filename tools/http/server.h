// http::Server: an event-driven HTTP/1.1 server on Boost.Beast and Asio, shared by the gateway
// and the engine emulator. A request is handed to the Handler, a C++20 coroutine, and served on
// its connection's I/O thread from its first byte to its last.
//
// The Handler answers each Exchange exactly once, with Send (a whole response) or with
// StartStream, SendChunk… and EndStream (chunked transfer encoding; each chunk is written to the
// client before SendChunk returns). A handler that returns without answering gets a 500; one that
// throws, too (logged). Every write returns false once the client is gone; the handler should
// then stop and release what it holds.
//
// Keep-alive follows the request (HTTP/1.1 default on). Timeouts: `idle_timeout` for a
// connection waiting for the first byte of its next request, `read_timeout` for reading the rest
// of that request, header and body (a client sending its header slowly is cut there, unanswered),
// `write_timeout` for any single write to the client. A body larger than `body_limit` gets 413, a
// header over 64 KiB 431, a malformed request 400; each closes the connection, and refusals()
// counts them and the read timeouts for the embedder's metrics. A streamed answer to an HTTP/1.0
// request has no chunked encoding (HTTP/1.0 has none): its body ends when the server closes the
// connection (RFC 9112, section 6.3). StopAccepting closes the listener
// and idle keep-alive connections; exchanges in progress continue (`Connection: close`) and
// active() counts them. TLS: with tls_cert_file and tls_key_file (PEM) every connection is TLS.
// Threads, back-pressure and draining: docs/gateway.md, "The HTTP server".
//
// Usage:
//   auto server = http::Server::Start({.host = "127.0.0.1", .port = 0},
//       [](http::Exchange& x) -> asio::awaitable<void> {
//         co_await x.Send(http::TextResponse(x.request(), 200, "text/plain", "ok\n"));
//       });
//   (*server)->port(); … (*server)->StopAccepting(); … (*server)->Stop();
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/beast/http.hpp>

#include "absl/status/statusor.h"

namespace cacheroute::http {

class Watchdog;
namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;

using Request = bhttp::request<bhttp::string_body>;
using Response = bhttp::response<bhttp::string_body>;

// One request on one client connection.
class Exchange {
 public:
  virtual ~Exchange() = default;
  const Request& request() const { return request_; }
  // The client's address, "HOST:PORT".
  const std::string& remote() const { return remote_; }

  // A whole response. Content-Length is set from the body. False when the client is gone.
  virtual asio::awaitable<bool> Send(Response response) = 0;
  // A streamed response: `header` (its status and fields; chunked is set here for HTTP/1.1, and
  // for HTTP/1.0 the body is close-delimited), then chunks.
  virtual asio::awaitable<bool> StartStream(bhttp::response_header<> header) = 0;
  virtual asio::awaitable<bool> SendChunk(std::string_view data) = 0;
  virtual asio::awaitable<bool> EndStream() = 0;
  // True once Send or StartStream was called.
  bool answered() const { return answered_; }
  // True when the client has closed its side of the connection (or it failed), seen without
  // reading from it: a handler holding a request before it answers (the gateway's admission
  // queue) looks at it to let go of a request nobody waits for. A client that half-closes and
  // still reads counts as gone.
  virtual bool ClientGone() const { return false; }

 protected:
  Request request_;
  std::string remote_;
  bool answered_ = false;
};

using Handler = std::function<asio::awaitable<void>(Exchange&)>;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;              // 0: a free port (port() tells which)
  unsigned threads = 0;      // I/O threads; 0: the hardware's cores
  size_t body_limit = 32u << 20;
  std::chrono::milliseconds idle_timeout{std::chrono::seconds(300)};
  std::chrono::milliseconds read_timeout{std::chrono::seconds(60)};  // from a request's 1st byte
  std::chrono::milliseconds write_timeout{std::chrono::seconds(60)};
  std::string tls_cert_file;  // PEM certificate chain; with tls_key_file, TLS on
  std::string tls_key_file;
};

// Requests the server refused or cut itself, without calling the Handler, since Start.
struct RefusalCounts {
  uint64_t malformed = 0;         // answered 400
  uint64_t body_too_large = 0;    // answered 413
  uint64_t header_too_large = 0;  // answered 431
  uint64_t read_timeouts = 0;     // begun but not complete within read_timeout: closed, unanswered
};

// A response with `body`, keep-alive and version from `request`.
Response TextResponse(const Request& request, unsigned status, std::string_view content_type,
                      std::string body);

class Server {
 public:
  // Binds and starts the I/O threads. InvalidArgument for bad options (a TLS file that cannot be
  // read, one of the pair missing), Unavailable when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<Server>> Start(ServerOptions options, Handler handler);
  ~Server();  // Stop()
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  int port() const { return port_; }
  bool tls() const;
  // The first I/O thread's context (a handler's own sockets and timers use the executor of the
  // coroutine they run in: `co_await asio::this_coro::executor`).
  asio::io_context& context() { return *contexts_.front(); }

  // Closes the listener and every idle connection; exchanges in progress go on. Idempotent.
  void StopAccepting();
  bool accepting() const { return !stopped_accepting_.load(); }
  // Exchanges in progress (a request read, its response not yet complete).
  size_t active() const { return active_.load(); }
  // Open client connections.
  size_t connections() const { return connections_.load(); }
  RefusalCounts refusals() const;
  // I/O threads, and the index in [0, threads()) of the calling one (-1 off every server's I/O
  // threads): what a handler keys per-thread state by, which then needs no lock.
  unsigned threads() const { return static_cast<unsigned>(contexts_.size()); }
  static int CurrentThread();

  // Stops every thread; exchanges still in progress are cut. Idempotent.
  void Stop();

  struct Impl;

 private:
  Server() = default;

  std::vector<std::unique_ptr<asio::io_context>> contexts_;  // one per I/O thread
  std::vector<std::unique_ptr<Watchdog>> watchdogs_;   // one per I/O thread
  std::unique_ptr<Impl> impl_;
  std::vector<std::thread> threads_;
  int port_ = 0;
  std::atomic<bool> stopped_accepting_{false};
  std::atomic<bool> stopped_{false};
  std::atomic<size_t> active_{0};
  std::atomic<size_t> connections_{0};
  std::atomic<uint64_t> malformed_{0};
  std::atomic<uint64_t> body_too_large_{0};
  std::atomic<uint64_t> header_too_large_{0};
  std::atomic<uint64_t> read_timeouts_{0};
  std::mutex stop_mu_;
  friend struct Impl;
};

}  // namespace cacheroute::http
