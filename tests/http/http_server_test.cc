// http::Server (tools/http/server.h) over real loopback sockets: whole and chunked responses,
// keep-alive, the limits, slow and HTTP/1.0 clients, a handler that forgets to answer, draining,
// TLS. Clients are httplib's or raw sockets; waiting is polling with a deadline, never a fixed
// sleep (one client pauses on purpose: that is its scenario).
// pkg-config's cpp-httplib flags may define it already.
#ifndef CPPHTTPLIB_OPENSSL_SUPPORT
#define CPPHTTPLIB_OPENSSL_SUPPORT
#endif
#include <arpa/inet.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <catch2/catch.hpp>
#include <functional>
#include <string>
#include <thread>

#include "tests/support/raw_exchange.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_certs.h"
#include "tools/http/server.h"

namespace cacheroute::http {
namespace {

bool Eventually(const std::function<bool()>& done) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return done();
}

using testing::RawExchange;

// Answers /hello whole, /stream as `n` chunks (query n=…, default 3) with a pause between them
// until `release` is set, /silent without answering, /echo with the body.
struct Fixture {
  std::atomic<bool> release{true};
  std::atomic<int> handled{0};
  std::unique_ptr<Server> server;

  explicit Fixture(ServerOptions options = {}) {
    absl::StatusOr<std::unique_ptr<Server>> s =
        Server::Start(options, [this](Exchange& x) -> asio::awaitable<void> {
          ++handled;
          const std::string target(x.request().target());
          if (target == "/hello") {
            co_await x.Send(TextResponse(x.request(), 200, "text/plain", "hi\n"));
          } else if (target == "/echo") {
            co_await x.Send(TextResponse(x.request(), 200, "text/plain", x.request().body()));
          } else if (target.rfind("/stream", 0) == 0) {
            bhttp::response_header<> header;
            header.result(bhttp::status::ok);
            header.set(bhttp::field::content_type, "text/event-stream");
            if (!co_await x.StartStream(std::move(header))) co_return;
            asio::steady_timer timer(co_await asio::this_coro::executor);
            for (int i = 0; i < 3; ++i) {
              if (!co_await x.SendChunk("data: " + std::to_string(i) + "\n\n")) co_return;
              while (!release.load()) {
                timer.expires_after(std::chrono::milliseconds(5));
                co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
              }
            }
            co_await x.EndStream();
          }
          // "/silent": no answer; the server answers 500.
        });
    INFO(s.status().ToString());
    REQUIRE(s.ok());
    server = *std::move(s);
  }
};

TEST_CASE("whole and chunked responses, over one keep-alive connection") {
  Fixture f;
  httplib::Client client("127.0.0.1", f.server->port());
  client.set_keep_alive(true);
  for (int i = 0; i < 5; ++i) {
    httplib::Result r = client.Get("/hello");
    REQUIRE(r);
    CHECK(r->status == 200);
    CHECK(r->body == "hi\n");
    r = client.Get("/stream");
    REQUIRE(r);
    CHECK(r->status == 200);
    CHECK(r->get_header_value("Content-Type") == "text/event-stream");
    CHECK(r->body == "data: 0\n\ndata: 1\n\ndata: 2\n\n");
  }
  CHECK(f.server->connections() == 1);
  httplib::Result echo = client.Post("/echo", std::string(100000, 'x'), "text/plain");
  REQUIRE(echo);
  CHECK(echo->body.size() == 100000);
}

TEST_CASE("a handler that does not answer gets a 500; limits give 413 and 400") {
  ServerOptions options;
  options.body_limit = 1000;
  Fixture f(options);
  httplib::Client client("127.0.0.1", f.server->port());
  httplib::Result r = client.Get("/silent");
  REQUIRE(r);
  CHECK(r->status == 500);
  r = client.Post("/echo", std::string(2000, 'x'), "text/plain");
  REQUIRE(r);
  CHECK(r->status == 413);
  CHECK(r->body.find("\"error\"") != std::string::npos);
  // A request line that is not HTTP: 400, and the connection is closed.
  const std::string answer = RawExchange(f.server->port(), "NOT HTTP AT ALL\r\n\r\n");
  CHECK(answer.rfind("HTTP/1.1 400", 0) == 0);
  // A header over 64 KiB: 431.
  const std::string huge = RawExchange(
      f.server->port(), "GET /hello HTTP/1.1\r\nX-Big: " + std::string(70000, 'x') + "\r\n\r\n");
  CHECK(huge.rfind("HTTP/1.1 431", 0) == 0);
  CHECK(f.server->active() == 0);
  // Each refusal is counted for the embedder's metrics; the handler saw none of them.
  const RefusalCounts refused = f.server->refusals();
  CHECK(refused.body_too_large == 1);
  CHECK(refused.malformed == 1);
  CHECK(refused.header_too_large == 1);
  CHECK(refused.read_timeouts == 0);
  CHECK(f.handled.load() == 1);  // /silent
}

TEST_CASE("a request whose header never completes is cut at read_timeout, not idle_timeout") {
  ServerOptions options;
  options.idle_timeout = std::chrono::hours(1);
  options.read_timeout = std::chrono::milliseconds(300);
  Fixture f(options);
  // Half a header, then silence: the server closes without an answer (RawExchange gives up
  // after 20 s, long before the idle timeout).
  const std::string answer =
      RawExchange(f.server->port(), "GET /hello HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: 1\r\n");
  CHECK(answer.empty());
  CHECK(f.handled.load() == 0);
  REQUIRE(Eventually([&] { return f.server->connections() == 0; }));
  CHECK(f.server->refusals().read_timeouts == 1);

  // A keep-alive connection waiting for its next request is bound by idle_timeout alone: idle
  // for several read timeouts (the client's pause is the scenario, not a synchronization), it
  // is still served.
  httplib::Client client("127.0.0.1", f.server->port());
  client.set_keep_alive(true);
  REQUIRE(client.Get("/hello"));
  std::this_thread::sleep_for(3 * options.read_timeout);
  httplib::Result again = client.Get("/hello");
  REQUIRE(again);
  CHECK(again->status == 200);
  CHECK(f.server->connections() == 1);
  CHECK(f.server->refusals().read_timeouts == 1);
}

TEST_CASE("a streamed answer to HTTP/1.0 is close-delimited, not chunked") {
  Fixture f;
  const std::string answer = RawExchange(f.server->port(), "GET /stream HTTP/1.0\r\n\r\n");
  INFO(answer);
  REQUIRE(answer.rfind("HTTP/1.0 200", 0) == 0);
  const size_t end = answer.find("\r\n\r\n");
  REQUIRE(end != std::string::npos);
  const std::string head = answer.substr(0, end);
  CHECK(head.find("Transfer-Encoding") == std::string::npos);
  CHECK(head.find("chunked") == std::string::npos);
  CHECK(head.find("Content-Length") == std::string::npos);
  // The body is the chunks' bytes as they are, ended by the server closing the connection.
  CHECK(answer.substr(end + 4) == "data: 0\n\ndata: 1\n\ndata: 2\n\n");
  // HTTP/1.1 keeps chunked encoding.
  const std::string chunked =
      RawExchange(f.server->port(), "GET /stream HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  CHECK(chunked.find("Transfer-Encoding: chunked") != std::string::npos);
}

TEST_CASE("StopAccepting closes the listener and idle connections, not a stream in progress") {
  Fixture f;
  f.release = false;
  httplib::Client idle("127.0.0.1", f.server->port());
  idle.set_keep_alive(true);
  REQUIRE(idle.Get("/hello"));  // answered: its connection now waits for the next request
  std::string body;
  std::atomic<bool> done{false};
  std::thread streamer([&] {
    httplib::Client client("127.0.0.1", f.server->port());
    httplib::Result r = client.Get("/stream");
    if (r) body = r->body;
    done = true;
  });
  REQUIRE(Eventually([&] { return f.server->active() == 1 && f.handled.load() == 2; }));
  f.server->StopAccepting();
  REQUIRE(Eventually([&] { return f.server->connections() == 1; }));  // the idle one closed
  httplib::Client late("127.0.0.1", f.server->port());
  late.set_connection_timeout(0, 200'000);
  CHECK_FALSE(late.Get("/hello"));
  CHECK_FALSE(done.load());
  f.release = true;
  streamer.join();
  CHECK(body == "data: 0\n\ndata: 1\n\ndata: 2\n\n");
  REQUIRE(Eventually([&] { return f.server->active() == 0; }));
  f.server->Stop();
}

TEST_CASE("Stop with a stream still open ends it and returns") {
  Fixture f;
  f.release = false;
  std::thread streamer([&] {
    httplib::Client client("127.0.0.1", f.server->port());
    client.set_read_timeout(30, 0);
    (void)client.Get("/stream");
  });
  REQUIRE(Eventually([&] { return f.server->active() == 1; }));
  f.server->Stop();
  streamer.join();
}

TEST_CASE("TLS: with a certificate and key every connection is TLS; bad files are named") {
  testing::TempDir dir("http_server_tls");
  const testing::Certs certs = testing::MakeCerts(dir.path().string());
  ServerOptions options;
  options.tls_cert_file = certs.server_cert;
  options.tls_key_file = certs.server_key;
  Fixture f(options);
  CHECK(f.server->tls());
  httplib::SSLClient client("127.0.0.1", f.server->port());
  client.set_ca_cert_path(certs.ca.c_str());
  client.enable_server_certificate_verification(true);
  httplib::Result r = client.Get("/stream");
  REQUIRE(r);
  CHECK(r->body == "data: 0\n\ndata: 1\n\ndata: 2\n\n");
  httplib::Client plain("127.0.0.1", f.server->port());
  plain.set_read_timeout(2, 0);
  httplib::Result refused = plain.Get("/hello");
  CHECK((!refused || refused->status != 200));

  ServerOptions bad;
  bad.tls_cert_file = certs.server_cert;
  absl::StatusOr<std::unique_ptr<Server>> s =
      Server::Start(bad, [](Exchange&) -> asio::awaitable<void> { co_return; });
  REQUIRE_FALSE(s.ok());
  CHECK(s.status().message().find("tls_key_file") != std::string::npos);
  bad.tls_key_file = (dir.path() / "missing.pem").string();
  s = Server::Start(bad, [](Exchange&) -> asio::awaitable<void> { co_return; });
  REQUIRE_FALSE(s.ok());
  CHECK(s.status().message().find("missing.pem") != std::string::npos);
}

}  // namespace
}  // namespace cacheroute::http
