// cacheroute-epp end to end: the Epp in-process (and the binary once) with a client playing
// Envoy's ext_proc filter over real streams, members that answer /health like vLLM (EngineStub)
// and the real planner in-process: routing by key from the header, `user` and the system prompt,
// the planner's table followed and kept while the planner is away, rate reports, an immediate 503
// when no member is up with readiness following, the response's signals (time to first token,
// served KV hit), the subset hint, /metrics and /healthz, drain; members from an InferencePool
// through a Kubernetes API-server double.
#include "tools/epp/epp.h"

#include <httplib.h>
#include <signal.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cacheroute/dataplane/key_id.h"
#include "epp/envoy_stream.h"
#include "epp/ext_proc_messages.h"
#include "tests/support/engine_stub.h"
#include "tests/support/eventually.h"
#include "tests/support/grpc_health.h"
#include "tools/eval/kube_api/kube_api_server.h"
#include "tests/support/planner_config.h"
#include "tests/support/planner_fixture.h"
#include "tests/support/require_ok.h"
#include "tools/eval/child_process.h"
#include "tools/frontend/openai_fields.h"

namespace cacheroute::epp {
namespace {

using ::cacheroute::testing::EngineStub;
using ::cacheroute::testing::Eventually;
using ::cacheroute::testing::InProcessPlanner;
using ProcessingMode = ::envoy::extensions::filters::http::ext_proc::v3::ProcessingMode;

struct Fleet {
  explicit Fleet(int n) {
    for (int i = 0; i < n; ++i) engines.push_back(std::make_unique<EngineStub>());
  }
  std::vector<std::string> Names() const {
    std::vector<std::string> names;
    for (size_t i = 0; i < engines.size(); ++i) names.push_back(absl::StrCat("u", i));
    return names;
  }
  std::vector<frontend::Upstream> Upstreams() const {
    std::vector<frontend::Upstream> upstreams;
    for (size_t i = 0; i < engines.size(); ++i) {
      upstreams.push_back({absl::StrCat("u", i), engines[i]->url()});
    }
    return upstreams;
  }
  std::vector<std::unique_ptr<EngineStub>> engines;
};

EppConfig ConfigFor(const Fleet& fleet) {
  EppConfig config;
  config.listen = "127.0.0.1:0";
  config.metrics_listen = "127.0.0.1:0";
  config.dataplane.upstreams = fleet.Upstreams();
  config.dataplane.report_interval = absl::Milliseconds(50);
  config.dataplane.probe_interval = absl::Milliseconds(20);
  config.dataplane.connect_timeout = absl::Seconds(1);
  return config;
}

EppConfig ConfigFor(const Fleet& fleet, const InProcessPlanner& planner) {
  EppConfig config = ConfigFor(fleet);
  config.dataplane.planner = {planner.target()};
  config.dataplane.gateway_id = "epp-test";
  return config;
}

struct Client {
  explicit Client(const Epp& epp)
      : channel(grpc::CreateChannel(absl::StrCat("127.0.0.1:", epp.port()),
                                    grpc::InsecureChannelCredentials())),
        stub(ext_proc::ExternalProcessor::NewStub(channel)) {}
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<ext_proc::ExternalProcessor::Stub> stub;
};

// What the EPP answered a request with.
struct Answer {
  std::string endpoint;     // x-gateway-destination-endpoint ("" when none)
  std::string destination;  // the member's name, from the response headers' answer
  std::string planned;
  int immediate = 0;  // an immediate response's status
  std::string immediate_body;
};

// The endpoint header of a request_headers (or, `in_body`, request_body) answer, read as Envoy
// reads it: from raw_value, or only from value when it sends header values there (`raw` off).
std::string Endpoint(const ext_proc::ProcessingResponse& r, bool raw = true, bool in_body = false) {
  const auto& common = in_body ? r.request_body().response() : r.request_headers().response();
  for (const auto& h : common.header_mutation().set_headers()) {
    if (h.header().key() == "x-gateway-destination-endpoint") {
      return raw ? h.header().raw_value() : h.header().value();
    }
  }
  return "";
}

// One request through the EPP as Envoy sends it in FULL_DUPLEX_STREAMED mode, the answer a
// unary completion with `usage`.
Answer Exchange(Client& client, const HeaderList& extra_headers, const std::string& body,
                const std::string& answer_body =
                    R"({"usage":{"prompt_tokens":10,)"
                    R"("prompt_tokens_details":{"cached_tokens":4}}})") {
  EnvoyStream s(*client.stub);
  REQUIRE(s.Send(Headers(false, extra_headers)));
  REQUIRE(s.Send(Body(body, true)));
  Answer answer;
  const ext_proc::ProcessingResponse first = s.Read();
  if (first.has_immediate_response()) {
    answer.immediate = first.immediate_response().status().code();
    answer.immediate_body = first.immediate_response().body();
    CHECK(s.Finish().ok());
    return answer;
  }
  REQUIRE(first.has_request_headers());
  answer.endpoint = Endpoint(first);
  CHECK(first.dynamic_metadata()
            .fields()
            .at("envoy.lb")
            .struct_value()
            .fields()
            .at("x-gateway-destination-endpoint")
            .string_value() == answer.endpoint);
  CHECK(s.Read().has_request_body());
  ext_proc::ProcessingRequest headers = ResponseHeaders("200");
  headers.mutable_response_headers()->mutable_headers()->mutable_headers(1)->set_raw_value(
      "application/json");
  REQUIRE(s.Send(headers));
  REQUIRE(s.Send(ResponseBody(answer_body, true)));
  const ext_proc::ProcessingResponse response_headers = s.Read();
  for (const auto& h :
       response_headers.response_headers().response().header_mutation().set_headers()) {
    if (h.header().key() == "x-cacheroute-destination") answer.destination = h.header().raw_value();
    if (h.header().key() == "x-cacheroute-planned") answer.planned = h.header().raw_value();
  }
  CHECK(s.Read().has_response_body());
  CHECK(s.Finish().ok());
  return answer;
}

std::string UserBody(const std::string& user) {
  return absl::StrCat(R"({"model":"m","prompt":"Hello","user":")", user, "\"}");
}

// The name of the member the EPP answers `endpoint` for.
std::string NameOf(const Epp& epp, const std::string& endpoint) {
  const std::vector<std::string> endpoints = epp.DestinationEndpoints();
  const std::vector<std::string> names = epp.DestinationNames();
  for (size_t d = 0; d < endpoints.size(); ++d) {
    if (endpoints[d] == endpoint) return names[d];
  }
  return "";
}

uint64_t TableNumber(const Epp& epp) {
  auto table = epp.table();
  return table ? table->version().number : 0;
}

TEST_CASE("every request gets a member's IP:PORT, the same in the header and the metadata") {
  Fleet fleet(3);
  std::unique_ptr<Epp> epp = testing::RequireOk(Epp::Start(ConfigFor(fleet)));
  Client client(*epp);
  const std::vector<std::string> endpoints = epp->DestinationEndpoints();
  REQUIRE(endpoints.size() == 3);
  CHECK(endpoints[0] == fleet.engines[0]->url().substr(std::string("http://").size()));
  std::set<std::string> seen;
  for (int i = 0; i < 60; ++i) {
    const Answer a = Exchange(client, {}, UserBody(absl::StrCat("tenant-", i)));
    REQUIRE_FALSE(a.endpoint.empty());
    CHECK(a.destination == NameOf(*epp, a.endpoint));
    CHECK(a.planned == "0");
    seen.insert(a.endpoint);
  }
  CHECK(seen.size() == 3);  // 60 keys over 3 members: every one gets some
  // One key, however it comes (header, user), goes to one member: its hashed pair's first.
  const Answer by_header = Exchange(client, {{"x-cacheroute-key", "tenant-x"}}, "{}");
  for (int i = 0; i < 5; ++i) {
    CHECK(Exchange(client, {}, UserBody("tenant-x")).endpoint == by_header.endpoint);
  }
  const std::string metrics = epp->RenderMetrics();
  CHECK(absl::StrContains(
      metrics, "cacheroute_epp_requests_total{endpoint=\"chat_completions\",code=\"2xx\"} 66\n"));
  CHECK(absl::StrContains(metrics, "cacheroute_epp_streams_total 66\n"));
  CHECK(absl::StrContains(metrics, "cacheroute_epp_messages_total{phase=\"response_body\"} 66\n"));
}

TEST_CASE("the planner's table: rates reported, planned keys routed by it, kept while it is away") {
  Fleet fleet(4);
  service::PlannerConfig planner_config = testing::LoopbackPlannerConfig(fleet.Names());
  planner_config.q_cap = 1e9;                     // one destination per admitted key
  planner_config.algorithm = "cacheroute-paper";  // Algorithm 1: the four hottest keys, no split
  InProcessPlanner planner(planner_config);
  std::unique_ptr<Epp> epp = testing::RequireOk(Epp::Start(ConfigFor(fleet, planner)));
  REQUIRE(Eventually([&] { return epp->SubscriberStats()->connected; }));
  Client client(*epp);
  const std::vector<std::string> hot = {"tenant-a", "tenant-b", "tenant-c", "tenant-d"};
  for (int round = 0; round < 10; ++round) {
    for (const std::string& key : hot) REQUIRE(Exchange(client, {}, UserBody(key)).immediate == 0);
  }
  // Every keyed request reaches the planner as the gateway's would.
  REQUIRE(Eventually([&] {
    return epp->ReporterStats()->requests_reported >= 40 && epp->ReporterStats()->pending == 0;
  }));
  const uint64_t number = planner.Replan().version().number();
  REQUIRE(Eventually([&] { return TableNumber(*epp) >= number; }));
  std::set<std::string> destinations;
  for (const std::string& key : hot) {
    const std::vector<uint32_t> set = epp->table()->Find(dataplane::KeyId(key)).ToVector();
    REQUIRE(set.size() == 1);
    const std::string expected = epp->DestinationNames()[set[0]];
    destinations.insert(expected);
    const Answer a = Exchange(client, {}, UserBody(key));
    CHECK(a.destination == expected);
    CHECK(a.planned == "1");
    CHECK(NameOf(*epp, a.endpoint) == expected);
  }
  CHECK(destinations.size() == 4);  // one slot each: the four keys on four members

  // The planner goes away: the last table keeps routing (table_ttl is a minute).
  planner.Stop();
  REQUIRE(Eventually([&] { return !epp->SubscriberStats()->connected; }));
  for (const std::string& key : hot) CHECK(Exchange(client, {}, UserBody(key)).planned == "1");
  CHECK(absl::StrContains(epp->RenderMetrics(), "cacheroute_epp_planner_connected 0\n"));
}

TEST_CASE("POST /debug/explain on the metrics listener: why a request would go where it would") {
  Fleet fleet(2);
  std::unique_ptr<Epp> epp = testing::RequireOk(Epp::Start(ConfigFor(fleet)));
  httplib::Client metrics("127.0.0.1", epp->metrics_port());
  httplib::Result explained =
      metrics.Post("/debug/explain", httplib::Headers{{"x-cacheroute-key", "tenant-a"}},
                   R"({"prompt":"hello"})", "application/json");
  REQUIRE(explained);
  CHECK(explained->status == 200);
  CHECK(absl::StrContains(explained->body, "\"rule\": \"token_work\""));
  CHECK(absl::StrContains(explained->body, "\"reason\": \"no_table\""));
  httplib::Result keyless =
      metrics.Post("/debug/explain", R"({"messages":[]})", "application/json");
  REQUIRE(keyless);
  CHECK(keyless->status == 400);
  CHECK(absl::StrContains(keyless->body, "\"code\":\"no_routing_key\""));
}

TEST_CASE("no member up: an immediate 503 in OpenAI's shape; readiness and /healthz follow") {
  Fleet fleet(2);
  EppConfig config = ConfigFor(fleet);
  config.dataplane.health_check_interval = absl::Milliseconds(20);
  config.dataplane.health_check_timeout = absl::Seconds(1);
  config.dataplane.failure_threshold = 1;
  std::unique_ptr<Epp> epp = testing::RequireOk(Epp::Start(config));
  Client client(*epp);
  httplib::Client metrics("127.0.0.1", epp->metrics_port());
  REQUIRE(Eventually([&] { return epp->ready(); }));
  CHECK(testing::CheckHealth(client.channel, "readiness").serving == testing::kServing);
  CHECK(metrics.Get("/healthz")->status == 200);

  for (auto& engine : fleet.engines) engine->set_health(500);
  REQUIRE(Eventually([&] { return !epp->ready(); }));
  const Answer refused = Exchange(client, {}, UserBody("tenant-a"));
  CHECK(refused.immediate == 503);
  CHECK(refused.immediate_body ==
        R"({"error":{"code":"no_upstream","message":"no upstream is up","param":null,)"
        R"("type":"service_unavailable"}})");
  REQUIRE(Eventually([&] {
    return testing::CheckHealth(client.channel, "readiness").serving == testing::kNotServing;
  }));
  CHECK(testing::CheckHealth(client.channel, "liveness").serving == testing::kServing);
  CHECK(metrics.Get("/healthz")->status == 503);

  fleet.engines[1]->set_health(200);  // the prober brings it back
  REQUIRE(Eventually([&] { return epp->ready(); }));
  CHECK(NameOf(*epp, Exchange(client, {}, UserBody("tenant-a")).endpoint) == "u1");
  CHECK(absl::StrContains(epp->RenderMetrics(),
                          "cacheroute_epp_immediate_responses_total{status=\"503\"} 1\n"));
}

TEST_CASE("the response's signals: a stream's first token, the served KV hit, the in-flight end") {
  Fleet fleet(2);
  std::unique_ptr<Epp> epp = testing::RequireOk(Epp::Start(ConfigFor(fleet)));
  Client client(*epp);
  CHECK_FALSE(epp->measured_hit().has_value());
  Exchange(client, {}, UserBody("a"));  // unary: usage 4 of 10 prompt tokens cached
  REQUIRE(epp->measured_hit().has_value());
  CHECK(*epp->measured_hit() == Approx(0.4));

  // A streamed answer: held open, it counts in flight; its first chunk is its first token.
  EnvoyStream s(*client.stub);
  REQUIRE(s.Send(Headers(false, {{"x-cacheroute-key", "streamer"}})));
  // Routed once the body is in, though the key is in the header: the prompt is counted too.
  REQUIRE(s.Send(Body(R"({"prompt":"stream me"})", true)));
  const ext_proc::ProcessingResponse routed = s.Read();
  CHECK(s.Read().has_request_body());
  const std::string name = NameOf(*epp, Endpoint(routed));
  const uint32_t d = name == "u0" ? 0 : 1;
  REQUIRE(s.Send(ResponseHeaders("200")));  // text/event-stream
  CHECK(s.Read().has_response_headers());
  REQUIRE(s.Send(ResponseBody("data: {\"choices\":[]}\n\n", false)));
  CHECK(s.Read().has_response_body());
  CHECK(epp->RouterStats().in_flight[d] == 1);
  CHECK(absl::StrContains(epp->RenderMetrics(), "cacheroute_epp_open_streams 1\n"));
  REQUIRE(
      s.Send(ResponseBody("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":10,"
                          "\"prompt_tokens_details\":{\"cached_tokens\":10}}}\n\n",
                          true)));
  CHECK(s.Read().has_response_body());
  CHECK(s.Finish().ok());
  CHECK(epp->RouterStats().in_flight[d] == 0);
  const std::string metrics = epp->RenderMetrics();
  CHECK(absl::StrContains(metrics, absl::StrCat("cacheroute_epp_time_to_first_token_seconds_count{"
                                                "destination=\"",
                                                name, "\"} 1\n")));
  CHECK(absl::StrContains(metrics, "cacheroute_epp_open_streams 0\n"));
  CHECK(*epp->measured_hit() > 0.4);  // 14 of 20 over the window

  // A stream cut before any response: released, counted as abandoned, never as answered.
  {
    EnvoyStream cut(*client.stub);
    REQUIRE(cut.Send(Headers(true)));
    CHECK(cut.Read().has_request_headers());
    cut.Cancel();
  }
  REQUIRE(Eventually([&] { return epp->active_streams() == 0; }));
  CHECK(epp->RouterStats().in_flight[0] + epp->RouterStats().in_flight[1] == 0);
  CHECK(absl::StrContains(epp->RenderMetrics(), "cacheroute_epp_abandoned_total 1\n"));
}

TEST_CASE("an Envoy sending header values in `value` reads a non-empty endpoint from `value`") {
  // envoy.reloadable_features.send_header_raw_value off: Envoy sends values in `value` and reads
  // only `value` from header mutations.
  Fleet fleet(2);
  std::unique_ptr<Epp> epp = testing::RequireOk(Epp::Start(ConfigFor(fleet)));
  Client client(*epp);
  const std::vector<std::string> endpoints = epp->DestinationEndpoints();
  for (const BodySendMode mode : {ProcessingMode::FULL_DUPLEX_STREAMED, ProcessingMode::BUFFERED}) {
    CAPTURE(mode);
    EnvoyStream s(*client.stub);
    REQUIRE(s.Send(InValueField(WithConfig(Headers(false, {{"x-cacheroute-key", "v"}}), mode,
                                           ProcessingMode::FULL_DUPLEX_STREAMED))));
    const bool buffered = mode == ProcessingMode::BUFFERED;
    if (buffered) CHECK(s.Read().has_request_headers());  // answered at once, empty
    REQUIRE(s.Send(Body(R"({"prompt":"p"})", true)));
    const ext_proc::ProcessingResponse routed = s.Read();
    const std::string endpoint = Endpoint(routed, /*raw=*/false, /*in_body=*/buffered);
    CHECK(std::find(endpoints.begin(), endpoints.end(), endpoint) != endpoints.end());
    CHECK(Endpoint(routed, /*raw=*/true, /*in_body=*/buffered).empty());
    if (!buffered) CHECK(s.Read().has_request_body());
    REQUIRE(s.Send(InValueField(ResponseHeaders("200", true))));
    const ext_proc::ProcessingResponse answered = s.Read();
    const auto& added = answered.response_headers().response().header_mutation().set_headers();
    REQUIRE(added.size() == 2);
    CHECK(added[0].header().value() == NameOf(*epp, endpoint));
    CHECK(s.Finish().ok());
  }
}

TEST_CASE("max_request_body: 413 for a body held for routing, FULL_DUPLEX_STREAMED or BUFFERED") {
  Fleet fleet(2);
  EppConfig config = ConfigFor(fleet);
  config.max_request_body = 100 << 10;  // 100 KB
  std::unique_ptr<Epp> epp = testing::RequireOk(Epp::Start(config));
  Client client(*epp);
  const std::string big = absl::StrCat(R"({"prompt":")", std::string(200 << 10, 'x'), R"("})");
  for (const BodySendMode mode : {ProcessingMode::FULL_DUPLEX_STREAMED, ProcessingMode::BUFFERED}) {
    CAPTURE(mode);
    EnvoyStream s(*client.stub);
    REQUIRE(s.Send(WithConfig(Headers(), mode, ProcessingMode::FULL_DUPLEX_STREAMED)));
    if (mode == ProcessingMode::BUFFERED) CHECK(s.Read().has_request_headers());
    REQUIRE(s.Send(Body(big, true)));  // in one message, as BUFFERED sends it
    const ext_proc::ProcessingResponse refused = s.Read();
    REQUIRE(refused.has_immediate_response());
    CHECK(refused.immediate_response().status().code() == 413);
    CHECK(absl::StrContains(refused.immediate_response().body(), "\"code\":\"body_too_large\""));
    CHECK(s.Finish().ok());
  }
  CHECK(absl::StrContains(epp->RenderMetrics(),
                          "cacheroute_epp_immediate_responses_total{status=\"413\"} 2\n"));
  CHECK(epp->RouterStats().in_flight[0] + epp->RouterStats().in_flight[1] == 0);
}

TEST_CASE("GIE's subset hint: a pick outside it moves inside; none up inside is a 503") {
  Fleet fleet(3);
  std::unique_ptr<Epp> epp = testing::RequireOk(Epp::Start(ConfigFor(fleet)));
  Client client(*epp);
  const std::vector<std::string> endpoints = epp->DestinationEndpoints();
  for (int i = 0; i < 30; ++i) {
    EnvoyStream s(*client.stub);
    REQUIRE(s.Send(WithSubset(Headers(false, {{"x-cacheroute-key", absl::StrCat("k", i)}}),
                              StringList({endpoints[2]}))));
    REQUIRE(s.Send(Body(R"({"prompt":"p"})", true)));
    CHECK(Endpoint(s.Read()) == endpoints[2]);
    CHECK(s.Read().has_request_body());
    CHECK(s.Finish().ok());
  }
  EnvoyStream s(*client.stub);
  REQUIRE(s.Send(WithSubset(Headers(true), StringList({"10.255.255.1:8000"}))));
  const ext_proc::ProcessingResponse refused = s.Read();
  REQUIRE(refused.has_immediate_response());
  CHECK(refused.immediate_response().status().code() == 503);
  CHECK(absl::StrContains(refused.immediate_response().body(), "subset hint"));
  CHECK(s.Finish().ok());
  CHECK(absl::StrContains(epp->RenderMetrics(), "cacheroute_epp_subset_refusals_total 1\n"));
}

TEST_CASE("fallback_endpoints: the pick, then other up members least loaded first") {
  Fleet fleet(3);
  EppConfig config = ConfigFor(fleet);
  config.fallback_endpoints = 2;
  std::unique_ptr<Epp> epp = testing::RequireOk(Epp::Start(config));
  Client client(*epp);
  const std::vector<std::string> endpoints = epp->DestinationEndpoints();
  // The endpoints a request is answered with (header; the metadata must say the same).
  const auto list_for = [&](EnvoyStream& s, const ext_proc::ProcessingRequest& headers) {
    REQUIRE(s.Send(headers));
    REQUIRE(s.Send(Body(R"({"prompt":"p"})", true)));
    const ext_proc::ProcessingResponse routed = s.Read();
    CHECK(s.Read().has_request_body());
    const std::string header = Endpoint(routed);
    CHECK(routed.dynamic_metadata()
              .fields()
              .at("envoy.lb")
              .struct_value()
              .fields()
              .at("x-gateway-destination-endpoint")
              .string_value() == header);
    return std::vector<std::string>(absl::StrSplit(header, ','));
  };
  // A request held open: its member has one in flight. Every member is named once.
  EnvoyStream held(*client.stub);
  const std::vector<std::string> first =
      list_for(held, Headers(false, {{"x-cacheroute-key", "held"}}));
  REQUIRE(first.size() == 3);
  CHECK(std::set<std::string>(first.begin(), first.end()) ==
        std::set<std::string>(endpoints.begin(), endpoints.end()));
  const std::string busy = first[0];
  // A request picked elsewhere names the idle member before the busy one.
  bool elsewhere = false;
  for (int i = 0; i < 50 && !elsewhere; ++i) {
    EnvoyStream s(*client.stub);
    const std::vector<std::string> list =
        list_for(s, Headers(false, {{"x-cacheroute-key", absl::StrCat("k", i)}}));
    REQUIRE(list.size() == 3);
    if (list[0] == busy) continue;
    elsewhere = true;
    CHECK(list[1] != busy);
    CHECK(list[2] == busy);
  }
  CHECK(elsewhere);
  // Within GIE's subset hint only.
  EnvoyStream hinted(*client.stub);
  const std::vector<std::string> in_subset =
      list_for(hinted, WithSubset(Headers(false, {{"x-cacheroute-key", "s"}}),
                                  StringList({endpoints[0], endpoints[2]})));
  CHECK(std::set<std::string>(in_subset.begin(), in_subset.end()) ==
        std::set<std::string>{endpoints[0], endpoints[2]});
  CHECK(in_subset.size() == 2);
}

TEST_CASE("a served endpoint naming another member credits the request's outcome to it") {
  Fleet fleet(3);
  std::unique_ptr<Epp> epp = testing::RequireOk(Epp::Start(ConfigFor(fleet)));
  Client client(*epp);
  const std::vector<std::string> endpoints = epp->DestinationEndpoints();
  const std::vector<std::string> names = epp->DestinationNames();
  const auto index_of = [&](const std::string& endpoint) {
    return static_cast<uint32_t>(std::find(endpoints.begin(), endpoints.end(), endpoint) -
                                 endpoints.begin());
  };
  // One streamed request; the data plane reports `served` on its response headers ("next": the
  // member after the one picked, "picked": that one).
  const auto stream_with = [&](const std::string& served, uint32_t* picked, uint32_t* credited) {
    EnvoyStream s(*client.stub);
    REQUIRE(s.Send(Headers(false, {{"x-cacheroute-key", "retried"}})));
    REQUIRE(s.Send(Body(R"({"prompt":"p"})", true)));
    *picked = index_of(Endpoint(s.Read()));
    REQUIRE(*picked < endpoints.size());
    CHECK(s.Read().has_request_body());
    const std::string target = served == "next"     ? endpoints[(*picked + 1) % 3]
                               : served == "picked" ? endpoints[*picked]
                                                    : served;
    REQUIRE(s.Send(WithServed(ResponseHeaders("200"), String(target))));
    const ext_proc::ProcessingResponse answer = s.Read();
    std::string destination;
    for (const auto& h : answer.response_headers().response().header_mutation().set_headers()) {
      if (h.header().key() == "x-cacheroute-destination") destination = h.header().raw_value();
    }
    *credited =
        static_cast<uint32_t>(std::find(names.begin(), names.end(), destination) - names.begin());
    // In flight at the member credited, not at the one picked.
    const dataplane::RouterStats mid = epp->RouterStats();
    CHECK(mid.in_flight[*credited] == 1);
    CHECK(mid.in_flight[0] + mid.in_flight[1] + mid.in_flight[2] == 1);
    REQUIRE(
        s.Send(ResponseBody("data: {\"choices\":[],\"usage\":{\"prompt_tokens\":10,"
                            "\"prompt_tokens_details\":{\"cached_tokens\":6}}}\n\n",
                            true)));
    CHECK(s.Read().has_response_body());
    CHECK(s.Finish().ok());
  };

  uint32_t picked = 0, credited = 0;
  stream_with("next", &picked, &credited);
  CHECK(credited == (picked + 1) % 3);
  std::string metrics = epp->RenderMetrics();
  CHECK(absl::StrContains(metrics, "cacheroute_epp_served_redirects_total 1\n"));
  CHECK(absl::StrContains(metrics, "cacheroute_epp_served_unknown_total 0\n"));
  // Its first token and its usage are the served member's.
  CHECK(absl::StrContains(metrics, absl::StrCat("cacheroute_epp_time_to_first_token_seconds_count{"
                                                "destination=\"",
                                                names[credited], "\"} 1\n")));
  CHECK(absl::StrContains(metrics, absl::StrCat("cacheroute_epp_time_to_first_token_seconds_count{"
                                                "destination=\"",
                                                names[picked], "\"} 0\n")));
  CHECK(absl::StrContains(metrics, absl::StrCat("cacheroute_epp_cached_tokens_total{destination=\"",
                                                names[credited], "\",planned=\"0\"} 6\n")));
  CHECK(epp->RouterStats().in_flight[credited] == 0);

  // Unknown values are ignored: the picked member keeps the request; each is counted.
  for (const std::string unknown : {"10.255.0.1:1", "not an endpoint"}) {
    stream_with(unknown, &picked, &credited);
    CHECK(credited == picked);
  }
  metrics = epp->RenderMetrics();
  CHECK(absl::StrContains(metrics, "cacheroute_epp_served_redirects_total 1\n"));
  CHECK(absl::StrContains(metrics, "cacheroute_epp_served_unknown_total 2\n"));
  // The member picked, named as served: nothing moves.
  stream_with("picked", &picked, &credited);
  CHECK(credited == picked);
  CHECK(absl::StrContains(epp->RenderMetrics(), "cacheroute_epp_served_redirects_total 1\n"));
}

TEST_CASE("the cacheroute-epp binary serves on the port it logs and drains on SIGTERM") {
  Fleet fleet(2);
  const std::string log = "epp_test_binary.log";
  auto child = testing::RequireOk(eval::ChildProcess::Spawn(
      {CACHEROUTE_EPP_PATH, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
       "--upstream", absl::StrCat("u0=", fleet.engines[0]->url()), "--upstream",
       absl::StrCat("u1=", fleet.engines[1]->url())},
      {.stderr_path = log, .truncate = true}));
  const std::string started = testing::RequireOk(
      eval::AwaitLogLine(*child, log, "started epp port=", std::chrono::seconds(30)));
  const int port = eval::LogNumber(started, "port").value_or(0);
  REQUIRE(port > 0);
  CHECK(eval::LogNumber(started, "members") == 2);
  auto channel =
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials());
  auto stub = ext_proc::ExternalProcessor::NewStub(channel);
  EnvoyStream open(*stub);
  REQUIRE(open.Send(Headers(true)));
  CHECK_FALSE(Endpoint(open.Read()).empty());
  // SIGTERM with a stream open: it still finishes, then the process exits 0.
  child->Signal(SIGTERM);
  REQUIRE(Eventually(
      [&] { return testing::CheckHealth(channel, "readiness").serving != testing::kServing; }));
  REQUIRE(open.Send(ResponseHeaders("200", /*end_of_stream=*/true)));
  CHECK(open.Read().has_response_headers());
  CHECK(open.Finish().ok());
  const int status = child->Stop(SIGTERM, std::chrono::seconds(30));
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  std::remove(log.c_str());
}

TEST_CASE("members from an InferencePool: the pool's ready pods, following their readiness") {
  Fleet fleet(2);  // one pod, 127.0.0.1, serving on the pool's two target ports
  std::vector<int> ports;
  for (const auto& engine : fleet.engines) {
    ports.push_back(std::stoi(engine->url().substr(engine->url().rfind(':') + 1)));
  }
  eval::KubeApiServer api;
  REQUIRE(api.ok());
  api.SetPool("serving", "vllm-pool", {{"app", "vllm"}}, ports);
  api.SetPod("serving", "vllm-0", {{"app", "vllm"}}, "127.0.0.1", true);
  EppConfig config = ConfigFor(fleet);
  config.dataplane.upstreams.clear();
  config.dataplane.upstreams_inference_pool = "vllm-pool";
  config.dataplane.inference_pool_namespace = "serving";
  config.dataplane.kube_api_server = api.url();
  std::unique_ptr<Epp> epp = testing::RequireOk(Epp::Start(config));
  Client client(*epp);
  std::vector<std::string> expected;
  for (const auto& engine : fleet.engines) expected.push_back(engine->url().substr(7));
  std::sort(expected.begin(), expected.end());
  REQUIRE(Eventually([&] { return epp->DestinationEndpoints().size() == 2; }));
  std::vector<std::string> endpoints = epp->DestinationEndpoints();
  std::sort(endpoints.begin(), endpoints.end());
  CHECK(endpoints == expected);
  const Answer routed = Exchange(client, {}, UserBody("tenant-a"));
  CHECK(std::find(expected.begin(), expected.end(), routed.endpoint) != expected.end());

  api.SetPod("serving", "vllm-0", {{"app", "vllm"}}, "127.0.0.1", false);  // unready: none
  REQUIRE(Eventually([&] { return epp->DestinationEndpoints().empty(); }));
  CHECK(Exchange(client, {}, UserBody("tenant-a")).immediate == 503);
  api.SetPod("serving", "vllm-0", {{"app", "vllm"}}, "127.0.0.1", true);
  REQUIRE(Eventually([&] { return epp->DestinationEndpoints().size() == 2; }));
  CHECK_FALSE(Exchange(client, {}, UserBody("tenant-a")).endpoint.empty());
  // The watch's restarts and relists are on /metrics.
  const std::string metrics = epp->RenderMetrics();
  CHECK(absl::StrContains(metrics, "cacheroute_epp_membership_watch_restarts_total 0\n"));
  CHECK(absl::StrContains(metrics, "cacheroute_epp_membership_watch_relists_total 0\n"));
  api.DropWatches();
  CHECK(Eventually([&] {
    return !absl::StrContains(epp->RenderMetrics(),
                              "cacheroute_epp_membership_watch_restarts_total 0\n");
  }));
}

TEST_CASE("shed with a queue: many held requests wait off gRPC's threads; the picker keeps "
          "answering, room admits one, the rest time out with 429") {
  Fleet fleet(1);
  EppConfig config = ConfigFor(fleet);
  config.dataplane.shed = true;
  config.dataplane.shed_saturation_tokens = 1;  // one request's prefill saturates the engine
  config.dataplane.shed_queue_capacity = 64;
  // Long enough for all the waiters to be queued at once on a slow (sanitizer) build.
  config.dataplane.shed_queue_timeout = absl::Seconds(10);
  std::unique_ptr<Epp> epp = testing::RequireOk(Epp::Start(config));
  Client client(*epp);
  REQUIRE(Eventually([&] { return epp->ready(); }));
  const std::string body =
      absl::StrCat(R"({"model":"m","prompt":")", std::string(4000, 'x'), R"("})");

  // The first request is routed and stays before its first token: the fleet is saturated.
  EnvoyStream first(*client.stub);
  REQUIRE(first.Send(Headers(false, {})));
  REQUIRE(first.Send(Body(body, true)));
  REQUIRE(first.Read().has_request_headers());
  REQUIRE(first.Read().has_request_body());  // the body, echoed

  // More waiters than gRPC has callback threads, each on a thread of the test reading its answer.
  constexpr int kWaiters = 40;
  std::mutex mu;
  int routed = 0, shed = 0, other = 0;
  std::vector<std::thread> waiters;
  for (int i = 0; i < kWaiters; ++i) {
    waiters.emplace_back([&] {
      EnvoyStream s(*client.stub);
      bool ok = s.Send(Headers(false, {})) && s.Send(Body(body, true));
      const std::optional<ext_proc::ProcessingResponse> answer = ok ? s.TryRead() : std::nullopt;
      std::lock_guard<std::mutex> lock(mu);
      if (answer.has_value() && answer->has_request_headers()) {
        ++routed;
      } else if (answer.has_value() && answer->has_immediate_response() &&
                 answer->immediate_response().status().code() == 429) {
        ++shed;
      } else {
        ++other;
      }
      s.Cancel();
    });
  }
  REQUIRE(Eventually([&] {
    return absl::StrContains(epp->RenderMetrics(),
                             absl::StrCat("cacheroute_epp_admission_queue_length ", kWaiters, "\n"));
  }));
  // With every waiter held, the first stream's response path is still answered at once.
  REQUIRE(first.Send(ResponseHeaders("200")));
  CHECK(first.Read().has_response_headers());
  // Its end frees the room: one waiter is admitted; the others' 10 s run out: 429.
  REQUIRE(first.Send(ResponseBody("data: [DONE]\n\n", true)));
  CHECK(first.Read().has_response_body());
  for (std::thread& t : waiters) t.join();
  CHECK(routed >= 1);
  CHECK(routed + shed == kWaiters);
  CHECK(other == 0);
  CHECK(absl::StrContains(
      epp->RenderMetrics(),
      "cacheroute_epp_admission_shed_total{priority=\"0\",reason=\"queue_timeout\"} "));
}

TEST_CASE("shed: a saturated fleet gets an immediate 429 with Retry-After; room frees, admitted") {
  Fleet fleet(1);
  EppConfig config = ConfigFor(fleet);
  config.dataplane.shed = true;
  config.dataplane.shed_saturation_tokens = 1;  // one request's prefill saturates the engine
  config.dataplane.shed_queue_capacity = 0;     // no waiting: shed at once
  config.dataplane.shed_retry_after = absl::Seconds(2);
  std::unique_ptr<Epp> epp = testing::RequireOk(Epp::Start(config));
  Client client(*epp);
  REQUIRE(Eventually([&] { return epp->ready(); }));
  const std::string body =
      absl::StrCat(R"({"model":"m","prompt":")", std::string(4000, 'x'), R"("})");

  // The first request is routed and stays before its first token: its prefill is queued.
  auto first = std::make_unique<EnvoyStream>(*client.stub);
  REQUIRE(first->Send(Headers(false, {})));
  REQUIRE(first->Send(Body(body, true)));
  REQUIRE(first->Read().has_request_headers());

  EnvoyStream s(*client.stub);
  REQUIRE(s.Send(Headers(false, {})));
  REQUIRE(s.Send(Body(body, true)));
  const ext_proc::ProcessingResponse shed = s.Read();
  REQUIRE(shed.has_immediate_response());
  CHECK(shed.immediate_response().status().code() == 429);
  std::string retry_after;
  for (const auto& h : shed.immediate_response().headers().set_headers()) {
    if (h.header().key() == "retry-after") retry_after = h.header().raw_value();
  }
  CHECK(retry_after == "2");
  CHECK_THAT(shed.immediate_response().body(),
             Catch::Contains(R"("code":"rate_limit_exceeded")") &&
                 Catch::Contains(R"("type":"requests")"));
  CHECK(s.Finish().ok());

  // The first request's stream ends: its work leaves the ledger and the next one is admitted.
  first->Finish();
  first.reset();
  // (The stream's end reaches the EPP asynchronously: until it does, a request is still shed.)
  CHECK(Eventually([&] { return !Exchange(client, {}, body).endpoint.empty(); }));
  CHECK(absl::StrContains(
      epp->RenderMetrics(),
      "cacheroute_epp_admission_shed_total{priority=\"0\",reason=\"queue_full\"} "));
}

}  // namespace
}  // namespace cacheroute::epp
