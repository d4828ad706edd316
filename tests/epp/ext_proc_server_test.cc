// ExtProcServer over real gRPC streams on a loopback port, with a client playing Envoy's ext_proc
// filter: the whole exchange in order, many streams at once, a data plane that vanishes
// mid-stream, bad messages (a clear status, and the server keeps serving), back-pressure, health,
// TLS and graceful drain. The routing side answers with one endpoint and counts what it is told
// (the routing itself is the EPP's, tested with the real gateway pieces in epp_test).
#include "tools/epp/ext_proc_server.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "epp/envoy_stream.h"
#include "epp/ext_proc_messages.h"
#include "tests/support/eventually.h"
#include "tests/support/grpc_health.h"
#include "tests/support/require_ok.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_certs.h"

namespace cacheroute::epp {
namespace {

using ::cacheroute::testing::CheckHealth;
using ::cacheroute::testing::Eventually;
using ::cacheroute::testing::kNotServing;
using ::cacheroute::testing::kServing;

struct Tally {
  std::atomic<int> routed{0};
  std::atomic<int> complete{0};
  std::atomic<int> incomplete{0};
  std::atomic<int> exchanges{0};  // alive
  std::string endpoint = "10.1.2.3:8000";
};

class CountingExchange : public Exchange {
 public:
  explicit CountingExchange(Tally& tally) : tally_(tally) { ++tally_.exchanges; }
  ~CountingExchange() override { --tally_.exchanges; }
  bool NeedsBody(const HeaderList&) override { return true; }
  Route RouteRequest(const RequestView&) override {
    ++tally_.routed;
    Route route;
    route.endpoint = tally_.endpoint;
    route.message = "no upstream is up";
    return route;
  }
  HeaderList ResponseHeaders(const ResponseView&) override { return {}; }
  void ResponseBody(absl::string_view) override {}
  void Finished(bool complete) override { ++(complete ? tally_.complete : tally_.incomplete); }

 private:
  Tally& tally_;
};

struct Fixture {
  explicit Fixture(ExtProcServerOptions options = {}) {
    options.listen = "127.0.0.1:0";
    server = cacheroute::testing::RequireOk(ExtProcServer::Start(
        options, [this] { return std::make_unique<CountingExchange>(tally); }));
    channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server->port()),
                                  grpc::InsecureChannelCredentials());
    stub = ext_proc::ExternalProcessor::NewStub(channel);
  }
  Tally tally;
  std::unique_ptr<ExtProcServer> server;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<ext_proc::ExternalProcessor::Stub> stub;
};

std::string EchoedBody(const ext_proc::ProcessingResponse& r, bool request) {
  const auto& body = request ? r.request_body() : r.response_body();
  return body.response().body_mutation().streamed_response().body();
}

// One whole exchange on `s`, with a body and a streamed answer unique to `n`; CHECKs each answer.
void SendRequest(EnvoyStream& s, int n) {
  REQUIRE(s.Send(Headers()));
  REQUIRE(s.Send(Body(absl::StrCat("{\"user\":\"user-", n, "\"}"), true)));
}
void CheckRouted(EnvoyStream& s, int n, const std::string& endpoint) {
  const ext_proc::ProcessingResponse headers = s.Read();
  REQUIRE(headers.has_request_headers());
  CHECK(headers.dynamic_metadata()
            .fields()
            .at("envoy.lb")
            .struct_value()
            .fields()
            .at("x-gateway-destination-endpoint")
            .string_value() == endpoint);
  CHECK(EchoedBody(s.Read(), true) == absl::StrCat("{\"user\":\"user-", n, "\"}"));
}
void SendResponse(EnvoyStream& s, int n) {
  REQUIRE(s.Send(ResponseHeaders("200")));
  REQUIRE(s.Send(ResponseBody(absl::StrCat("data: ", n, "\n\n"), false)));
  REQUIRE(s.Send(ResponseBody("data: [DONE]\n\n", true)));
}
void CheckResponse(EnvoyStream& s, int n) {
  CHECK(s.Read().has_response_headers());
  CHECK(EchoedBody(s.Read(), false) == absl::StrCat("data: ", n, "\n\n"));
  CHECK(EchoedBody(s.Read(), false) == "data: [DONE]\n\n");
}

TEST_CASE("one request over a real stream: headers, body, response headers, streamed body, end") {
  Fixture f;
  {
    EnvoyStream s(*f.stub);
    SendRequest(s, 1);
    CheckRouted(s, 1, "10.1.2.3:8000");
    SendResponse(s, 1);
    CheckResponse(s, 1);
    CHECK(s.Finish().ok());
  }
  CHECK(Eventually([&] { return f.tally.exchanges == 0; }));
  CHECK(f.tally.routed == 1);
  CHECK(f.tally.complete == 1);
  CHECK(f.tally.incomplete == 0);
  CHECK(f.server->active_streams() == 0);
}

TEST_CASE("many streams at once, interleaved phase by phase, each gets its own answers") {
  Fixture f;
  constexpr int kStreams = 300;
  std::vector<std::unique_ptr<EnvoyStream>> streams;
  for (int i = 0; i < kStreams; ++i) {
    streams.push_back(std::make_unique<EnvoyStream>(*f.stub));
    REQUIRE(streams.back()->Send(Headers()));
  }
  CHECK(Eventually([&] { return f.server->active_streams() == kStreams; }));
  for (int i = kStreams - 1; i >= 0; --i) {
    REQUIRE(streams[i]->Send(Body(absl::StrCat("{\"user\":\"user-", i, "\"}"), true)));
  }
  for (int i = 0; i < kStreams; ++i) CheckRouted(*streams[i], i, "10.1.2.3:8000");
  for (int i = 0; i < kStreams; ++i) SendResponse(*streams[i], i);
  for (int i = 0; i < kStreams; ++i) {
    CheckResponse(*streams[i], i);
    CHECK(streams[i]->Finish().ok());
  }
  streams.clear();
  CHECK(Eventually([&] { return f.tally.exchanges == 0; }));
  CHECK(f.tally.routed == kStreams);
  CHECK(f.tally.complete == kStreams);
}

TEST_CASE(
    "a data plane that vanishes mid-stream: the request finishes incomplete, serving goes on") {
  Fixture f;
  {
    EnvoyStream s(*f.stub);
    SendRequest(s, 1);
    CheckRouted(s, 1, "10.1.2.3:8000");
    REQUIRE(s.Send(ResponseHeaders("200")));
    CHECK(s.Read().has_response_headers());
    s.Cancel();
    CHECK_FALSE(s.Finish().ok());
  }
  CHECK(Eventually([&] { return f.tally.incomplete == 1; }));
  CHECK(Eventually([&] { return f.tally.exchanges == 0; }));
  // One that goes away before it was even routed is not finished at all (nothing to release).
  {
    EnvoyStream s(*f.stub);
    REQUIRE(s.Send(Headers()));
    s.Cancel();
  }
  CHECK(Eventually([&] { return f.tally.exchanges == 0; }));
  CHECK(f.tally.incomplete == 1);
  EnvoyStream next(*f.stub);
  SendRequest(next, 2);
  CheckRouted(next, 2, "10.1.2.3:8000");
  CHECK(next.Finish().ok());
}

TEST_CASE("bad messages end their stream with a clear status; other streams are unaffected") {
  Fixture f;
  EnvoyStream bystander(*f.stub);
  REQUIRE(bystander.Send(Headers()));

  EnvoyStream empty(*f.stub);
  REQUIRE(empty.Send(ext_proc::ProcessingRequest()));
  const grpc::Status malformed = empty.Finish();
  CHECK(malformed.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK(absl::StrContains(malformed.error_message(), "ProcessingRequest sets none of"));

  EnvoyStream early(*f.stub);
  REQUIRE(early.Send(Body("{}", true)));
  const grpc::Status out_of_order = early.Finish();
  CHECK(out_of_order.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  CHECK(out_of_order.error_message() == "request_body before request_headers");

  REQUIRE(bystander.Send(Body("{\"user\":\"user-7\"}", true)));
  CheckRouted(bystander, 7, "10.1.2.3:8000");
  CHECK(bystander.Finish().ok());
  base::Exposition page("cacheroute_epp_");
  f.server->RenderMetrics(page);
  const std::string metrics = page.Take();
  CHECK(absl::StrContains(metrics, "cacheroute_epp_stream_errors_total{code=\"3\"} 1\n"));
  CHECK(absl::StrContains(metrics, "cacheroute_epp_stream_errors_total{code=\"9\"} 1\n"));
  CHECK(absl::StrContains(metrics, "cacheroute_epp_messages_total{phase=\"none\"} 1\n"));
}

TEST_CASE("no endpoint: an immediate 503 and the server ends the stream with OK") {
  Fixture f;
  f.tally.endpoint.clear();
  EnvoyStream s(*f.stub);
  SendRequest(s, 1);
  const ext_proc::ProcessingResponse answer = s.Read();
  REQUIRE(answer.has_immediate_response());
  CHECK(answer.immediate_response().status().code() == 503);
  CHECK_FALSE(s.TryRead().has_value());
  CHECK(s.Finish().ok());
  base::Exposition page("cacheroute_epp_");
  f.server->RenderMetrics(page);
  CHECK(absl::StrContains(page.Take(),
                          "cacheroute_epp_immediate_responses_total{status=\"503\"} 1\n"));
}

TEST_CASE("answers queued beyond kMaxQueuedAnswers pause reading; all arrive in order") {
  Fixture f;
  EnvoyStream s(*f.stub);
  SendRequest(s, 1);
  CheckRouted(s, 1, "10.1.2.3:8000");
  REQUIRE(s.Send(ResponseHeaders("200")));
  constexpr int kChunks = 4 * ExtProcServer::kMaxQueuedAnswers;
  for (int i = 0; i < kChunks; ++i) {
    REQUIRE(s.Send(ResponseBody(absl::StrCat("data: ", i, "\n\n"), i + 1 == kChunks)));
  }
  CHECK(s.Read().has_response_headers());
  for (int i = 0; i < kChunks; ++i) {
    CHECK(EchoedBody(s.Read(), false) == absl::StrCat("data: ", i, "\n\n"));
  }
  CHECK(s.Finish().ok());
  CHECK(Eventually([&] { return f.tally.complete == 1; }));
}

TEST_CASE("health: liveness always, readiness with SetReady, both services GIE names") {
  Fixture f;
  CHECK(CheckHealth(f.channel, "liveness").serving == kServing);
  for (const char* service : {"", "readiness", "envoy.service.ext_proc.v3.ExternalProcessor"}) {
    INFO(service);
    CHECK(CheckHealth(f.channel, service).serving == kNotServing);
  }
  f.server->SetReady(true);
  for (const char* service : {"", "readiness", "envoy.service.ext_proc.v3.ExternalProcessor"}) {
    INFO(service);
    CHECK(CheckHealth(f.channel, service).serving == kServing);
  }
  CHECK(CheckHealth(f.channel, "no-such-service").status.error_code() ==
        grpc::StatusCode::NOT_FOUND);
}

TEST_CASE("drain: not ready at once, streams in progress finish, new ones are refused") {
  Fixture f;
  f.server->SetReady(true);
  EnvoyStream open(*f.stub);
  SendRequest(open, 1);
  CheckRouted(open, 1, "10.1.2.3:8000");
  std::future<size_t> cut = std::async(
      std::launch::async, [&] { return f.server->Drain(absl::ZeroDuration(), absl::Seconds(60)); });
  CHECK(Eventually([&] { return f.server->draining(); }));
  // The open stream is still served to its end.
  SendResponse(open, 1);
  CheckResponse(open, 1);
  CHECK(open.Finish().ok());
  CHECK(cut.get() == 0);
  EnvoyStream refused(*f.stub, std::chrono::seconds(5));
  refused.Send(Headers());
  CHECK_FALSE(refused.Finish().ok());
  CHECK(f.tally.complete == 1);
}

TEST_CASE("drain: a stream still open at the timeout is cut and counted") {
  Fixture f;
  EnvoyStream open(*f.stub);
  SendRequest(open, 1);
  CheckRouted(open, 1, "10.1.2.3:8000");
  CHECK(f.server->Drain(absl::ZeroDuration(), absl::Milliseconds(200)) == 1);
  CHECK_FALSE(open.Finish().ok());
  CHECK(Eventually([&] { return f.tally.incomplete == 1; }));
}

TEST_CASE("TLS: a client trusting the CA is served; with a client CA, only clients it signed") {
  testing::TempDir dir("epp_tls");
  const testing::Certs certs = testing::MakeCerts(dir.path().string());
  ExtProcServerOptions options;
  options.tls_cert_file = certs.server_cert;
  options.tls_key_file = certs.server_key;
  options.tls_client_ca_file = certs.ca;
  Fixture f(options);
  const std::string target = absl::StrCat("localhost:", f.server->port());
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = dir.Read("ca.pem");
  ssl.pem_cert_chain = dir.Read("client.pem");
  ssl.pem_private_key = dir.Read("client.key");
  auto stub =
      ext_proc::ExternalProcessor::NewStub(grpc::CreateChannel(target, grpc::SslCredentials(ssl)));
  EnvoyStream s(*stub);
  SendRequest(s, 1);
  CheckRouted(s, 1, "10.1.2.3:8000");
  CHECK(s.Finish().ok());

  grpc::SslCredentialsOptions no_client_cert;
  no_client_cert.pem_root_certs = ssl.pem_root_certs;
  auto anonymous = ext_proc::ExternalProcessor::NewStub(
      grpc::CreateChannel(target, grpc::SslCredentials(no_client_cert)));
  EnvoyStream refused(*anonymous, std::chrono::seconds(5));
  refused.Send(Headers());
  CHECK(refused.Finish().error_code() == grpc::StatusCode::UNAVAILABLE);
  // Plaintext towards a TLS listener gets nowhere either.
  EnvoyStream plain(*f.stub, std::chrono::seconds(5));
  plain.Send(Headers());
  CHECK_FALSE(plain.Finish().ok());
}

TEST_CASE("a TLS file that cannot be read is InvalidArgument naming its option") {
  ExtProcServerOptions options;
  options.listen = "127.0.0.1:0";
  options.tls_cert_file = "/nonexistent/cert.pem";
  options.tls_key_file = "/nonexistent/key.pem";
  const absl::Status status =
      ExtProcServer::Start(options, [] { return std::unique_ptr<Exchange>(); }).status();
  CHECK(status.code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(status.message(), "tls_cert_file"));
}

}  // namespace
}  // namespace cacheroute::epp
