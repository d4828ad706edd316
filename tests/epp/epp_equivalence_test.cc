// cacheroute-epp and cacheroute-gateway choose the same endpoints for the same request sequence
// and table. Both run in-process over the same four engines, following one real planner whose
// table splits the hot keys over several members and plans spills; the same 240 requests go to
// both, keys from the header, from `user` and from the system prompt, admitted and not, and some
// of them are held open (their answers withheld) so that later picks see the same loads in both
// and the load-dependent rules (least-loaded member of a set, spill, the tail's second choice)
// decide. Every pick is compared, in order.
#include <httplib.h>

#include <catch2/catch.hpp>
#include <condition_variable>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "epp/envoy_stream.h"
#include "epp/ext_proc_messages.h"
#include "tests/support/eventually.h"
#include "tests/support/planner_config.h"
#include "tests/support/planner_fixture.h"
#include "tests/support/require_ok.h"
#include "tools/epp/epp.h"
#include "tools/frontend/openai_fields.h"
#include "tools/gateway/gateway.h"

namespace cacheroute::epp {
namespace {

using ::cacheroute::testing::Eventually;
using ::cacheroute::testing::InProcessPlanner;

// The answer every engine gives: a completion naming the engine, with usage (half the prompt
// cached, so both front ends measure the same served hit and keep the dispatch margins at 1).
std::string Completion(const std::string& engine) {
  return absl::StrCat(R"({"id":"c","object":"text_completion","served_by":")", engine,
                      R"(","choices":[{"index":0,"text":"hi"}],"usage":{"prompt_tokens":10,)",
                      R"("completion_tokens":1,"prompt_tokens_details":{"cached_tokens":5}}})");
}

// An engine whose answers to requests marked "hold" wait until Release: the gateway's request
// then stays in flight at it.
class HoldingEngine {
 public:
  explicit HoldingEngine(std::string name) : name_(std::move(name)) {
    const auto answer = [this](const httplib::Request& req, httplib::Response& res) {
      if (absl::StrContains(req.body, "\"hold\":true")) {
        std::unique_lock<std::mutex> lock(mu_);
        ++holding_;
        const uint64_t generation = generation_;
        // Bounded, so that a failing test still ends.
        released_.wait_for(lock, std::chrono::seconds(60),
                           [&] { return generation_ != generation; });
        --holding_;
      }
      res.set_content(Completion(name_), "application/json");
    };
    server_.Post("/v1/completions", answer);
    server_.Post("/v1/chat/completions", answer);
    server_.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("", "text/plain");
    });
    server_.new_task_queue = [] { return new httplib::ThreadPool(64); };
    port_ = server_.bind_to_any_port("127.0.0.1");
    REQUIRE(port_ > 0);
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    REQUIRE(Eventually([&] { return server_.is_running(); }));
  }
  ~HoldingEngine() {
    Release();
    server_.stop();
    thread_.join();
  }
  std::string url() const { return absl::StrCat("http://127.0.0.1:", port_); }
  int holding() {
    std::lock_guard<std::mutex> lock(mu_);
    return holding_;
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    ++generation_;
    released_.notify_all();
  }

 private:
  const std::string name_;
  httplib::Server server_;
  std::thread thread_;
  int port_ = 0;
  std::mutex mu_;
  std::condition_variable released_;
  int holding_ = 0;          // guarded by mu_
  uint64_t generation_ = 0;  // guarded by mu_
};

enum class Source { kHeader, kUser, kSystem };

struct Request {
  std::string key;  // for the header and `user`; the system prompt's text for kSystem
  Source source;
  bool hold;
  bool release_before;  // release every held request before this one
};

// The request's path, headers (beyond Envoy's pseudo-headers) and body, as a client sends it.
struct Http {
  std::string path;
  HeaderList headers;
  std::string body;
};
Http HttpOf(const Request& r) {
  const std::string hold = r.hold ? R"("hold":true,)" : "";
  switch (r.source) {
    case Source::kHeader:
      return {"/v1/completions",
              {{"x-cacheroute-key", r.key}},
              absl::StrCat(R"({)", hold, R"("model":"m","prompt":"Hello","max_tokens":1})")};
    case Source::kUser:
      return {"/v1/completions",
              {},
              absl::StrCat(R"({)", hold, R"("model":"m","prompt":"Hello","user":")", r.key, "\"}")};
    case Source::kSystem:
      return {"/v1/chat/completions",
              {},
              absl::StrCat(R"({)", hold, R"("model":"m","messages":[{"role":"system","content":")",
                           r.key, R"("},{"role":"user","content":"hi"}]})")};
  }
  return {};
}

// The routing key the request carries (what the planner is told about).
std::string KeyOf(const Request& r) {
  if (r.source != Source::kSystem) return r.key;
  return *frontend::ScanRequestFields(HttpOf(r).body).system;
}

// 240 requests from a fixed seed: hot keys (admitted, split over members), warm ones (admitted,
// one member each) and cold ones (not admitted: the tail rule), each by a random source; a
// third of them held, all released every 30 requests.
std::vector<Request> Sequence() {
  std::mt19937 random(35);
  const std::vector<std::string> hot = {"hot-0", "hot-1"};
  std::vector<Request> requests;
  for (int i = 0; i < 240; ++i) {
    Request r;
    const int kind = static_cast<int>(random() % 10);
    r.key = kind < 5   ? hot[random() % hot.size()]
            : kind < 8 ? absl::StrCat("warm-", random() % 4)
                       : absl::StrCat("cold-", random() % 50);
    r.source = static_cast<Source>(random() % 3);
    r.hold = random() % 3 == 0;
    r.release_before = i > 0 && i % 30 == 0;
    requests.push_back(r);
  }
  return requests;
}

// The gateway's side: sends each request and gives the destination it chose. A held request is
// sent from a thread of its own and its destination read from the engine it waits at.
class GatewaySide {
 public:
  GatewaySide(gateway::Gateway& gateway, std::vector<std::unique_ptr<HoldingEngine>>& engines)
      : gateway_(gateway), engines_(engines), client_("127.0.0.1", gateway.port()) {
    client_.set_keep_alive(true);
  }
  ~GatewaySide() { ReleaseAll(); }

  std::string Send(const Request& r) {
    const Http http = HttpOf(r);
    httplib::Headers headers;
    for (const auto& [k, v] : http.headers) headers.emplace(k, v);
    if (!r.hold) {
      httplib::Result result =
          client_.Post(http.path.c_str(), headers, http.body, "application/json");
      REQUIRE(result);
      REQUIRE(result->status == 200);
      return result->get_header_value("X-CacheRoute-Destination");
    }
    // Held: the pick is made once the engine has the request.
    const std::vector<int> before = Holding();
    auto destination = std::make_shared<std::promise<std::string>>();
    held_.push_back(std::async(std::launch::async, [this, http, headers] {
      httplib::Client client("127.0.0.1", gateway_.port());
      client.set_read_timeout(120, 0);
      httplib::Result result =
          client.Post(http.path.c_str(), headers, http.body, "application/json");
      return result && result->status == 200;
    }));
    int changed = -1;
    REQUIRE(Eventually([&] {
      const std::vector<int> now = Holding();
      for (size_t e = 0; e < now.size(); ++e) {
        if (now[e] > before[e]) changed = static_cast<int>(e);
      }
      return changed >= 0;
    }));
    return gateway_.DestinationNames()[changed];
  }

  void ReleaseAll() {
    for (auto& e : engines_) e->Release();
    for (auto& f : held_) CHECK(f.get());
    held_.clear();
    // The gateway releases a request's in-flight count before its last bytes go out.
    REQUIRE(Eventually([&] {
      uint64_t total = 0;
      for (uint64_t n : gateway_.RouterStats().in_flight) total += n;
      return total == 0;
    }));
  }

 private:
  std::vector<int> Holding() {
    std::vector<int> holding;
    for (auto& e : engines_) holding.push_back(e->holding());
    return holding;
  }

  gateway::Gateway& gateway_;
  std::vector<std::unique_ptr<HoldingEngine>>& engines_;
  httplib::Client client_;
  std::vector<std::future<bool>> held_;
};

// The EPP's side: each request an ext_proc stream as Envoy sends it; a held one stays open until
// released, then gets the same answer the engine would have given.
class EppSide {
 public:
  explicit EppSide(Epp& epp)
      : epp_(epp),
        stub_(ext_proc::ExternalProcessor::NewStub(grpc::CreateChannel(
            absl::StrCat("127.0.0.1:", epp.port()), grpc::InsecureChannelCredentials()))) {}
  ~EppSide() { ReleaseAll(); }

  std::string Send(const Request& r) {
    const Http http = HttpOf(r);
    auto stream = std::make_unique<EnvoyStream>(*stub_);
    ext_proc::ProcessingRequest headers = Headers(false, http.headers);
    headers.mutable_request_headers()->mutable_headers()->mutable_headers(1)->set_raw_value(
        http.path);
    REQUIRE(stream->Send(headers));
    REQUIRE(stream->Send(Body(http.body, true)));
    const ext_proc::ProcessingResponse routed = stream->Read();
    REQUIRE(routed.has_request_headers());
    CHECK(stream->Read().has_request_body());
    std::string endpoint;
    for (const auto& h : routed.request_headers().response().header_mutation().set_headers()) {
      if (h.header().key() == "x-gateway-destination-endpoint") endpoint = h.header().raw_value();
    }
    const std::vector<std::string> endpoints = epp_.DestinationEndpoints();
    const auto it = std::find(endpoints.begin(), endpoints.end(), endpoint);
    REQUIRE(it != endpoints.end());
    const std::string name = epp_.DestinationNames()[it - endpoints.begin()];
    if (r.hold) {
      held_.push_back({std::move(stream), name});
    } else {
      Answer(*stream, name);
    }
    return name;
  }

  void ReleaseAll() {
    for (auto& [stream, name] : held_) Answer(*stream, name);
    held_.clear();
  }

 private:
  static void Answer(EnvoyStream& s, const std::string& engine) {
    ext_proc::ProcessingRequest headers = ResponseHeaders("200");
    headers.mutable_response_headers()->mutable_headers()->mutable_headers(1)->set_raw_value(
        "application/json");
    REQUIRE(s.Send(headers));
    REQUIRE(s.Send(ResponseBody(Completion(engine), true)));
    CHECK(s.Read().has_response_headers());
    CHECK(s.Read().has_response_body());
    CHECK(s.Finish().ok());
  }

  Epp& epp_;
  std::unique_ptr<ext_proc::ExternalProcessor::Stub> stub_;
  std::vector<std::pair<std::unique_ptr<EnvoyStream>, std::string>> held_;
};

TEST_CASE("the EPP and cacheroute-gateway choose the same endpoints for one sequence and table") {
  std::vector<std::unique_ptr<HoldingEngine>> engines;
  std::vector<frontend::Upstream> upstreams;
  std::vector<std::string> names;
  for (int i = 0; i < 4; ++i) {
    names.push_back(absl::StrCat("u", i));
    engines.push_back(std::make_unique<HoldingEngine>(names.back()));
    upstreams.push_back({names.back(), engines.back()->url()});
  }
  // CacheRoute's own planner: hot keys split over several members (q_cap below their rates),
  // spills planned; the gate off, so no key is held back on a control arm.
  service::PlannerConfig planner_config = testing::LoopbackPlannerConfig(names);
  planner_config.q_cap = 4;
  planner_config.slots_per_destination = 4;
  InProcessPlanner planner(planner_config);

  // Rates per 10 s: a hot key 7/s (two members at q_cap 4), a warm one 2/s (one member); the
  // sixteen slots (4 members, 4 slots each) hold exactly those, the system-prompt keys included
  // (each text is a key of its own); cold keys are never reported, so never admitted.
  const std::vector<Request> sequence = Sequence();
  std::map<std::string, double> rates;
  for (const Request& r : sequence) {
    if (r.key.rfind("hot", 0) == 0) rates[KeyOf(r)] = 70;
    if (r.key.rfind("warm", 0) == 0) rates[KeyOf(r)] = 20;
  }
  planner.Report("load", 1,
                 std::vector<std::pair<std::string, double>>(rates.begin(), rates.end()));
  const uint64_t number = planner.Replan().version().number();

  gateway::GatewayConfig dataplane;
  dataplane.upstreams = upstreams;
  dataplane.planner = {planner.target()};
  dataplane.report_interval = absl::Hours(1);  // the planner plans only when asked anyway
  // The two front ends must decide alone to be compared: sharing through the planner would give
  // each the other's placements and work (docs/dispatch.md, "Several gateways").
  dataplane.share = false;
  dataplane.listen = "127.0.0.1:0";
  dataplane.read_timeout = absl::Seconds(120);
  gateway::GatewayConfig gateway_config = dataplane;
  gateway_config.gateway_id = "gateway";
  std::unique_ptr<gateway::Gateway> gateway =
      testing::RequireOk(gateway::Gateway::Start(gateway_config));
  EppConfig epp_config;
  epp_config.listen = "127.0.0.1:0";
  epp_config.metrics_listen = "127.0.0.1:0";
  epp_config.dataplane = dataplane;
  epp_config.dataplane.gateway_id = "epp";
  std::unique_ptr<Epp> epp = testing::RequireOk(Epp::Start(epp_config));
  REQUIRE(Eventually([&] {
    return gateway->table() != nullptr && gateway->table()->version().number == number &&
           epp->table() != nullptr && epp->table()->version().number == number;
  }));
  REQUIRE(gateway->DestinationNames() == epp->DestinationNames());
  // The table really splits and spills: the comparison covers those rules.
  const auto hot_set = epp->table()->Find(dataplane::KeyId("hot-0"));
  REQUIRE(hot_set.size() >= 2);

  GatewaySide by_gateway(*gateway, engines);
  EppSide by_epp(*epp);
  std::set<std::string> hot_destinations;  // hot-0's, sent by its header or user
  int differences = 0;
  for (size_t i = 0; i < sequence.size(); ++i) {
    const Request& r = sequence[i];
    if (r.release_before) {
      by_gateway.ReleaseAll();
      by_epp.ReleaseAll();
    }
    const std::string via_gateway = by_gateway.Send(r);
    const std::string via_epp = by_epp.Send(r);
    INFO("request " << i << ": key " << r.key << ", source " << static_cast<int>(r.source)
                    << (r.hold ? ", held" : ""));
    CHECK(via_epp == via_gateway);
    differences += via_epp != via_gateway;
    if (r.key == "hot-0" && r.source != Source::kSystem) hot_destinations.insert(via_epp);
  }
  by_gateway.ReleaseAll();
  by_epp.ReleaseAll();
  CHECK(differences == 0);
  // Both made the same kinds of decisions: planned ones and the tail's, by the same counts.
  const dataplane::RouterStats g = gateway->RouterStats();
  const dataplane::RouterStats e = epp->RouterStats();
  CHECK(e.planned > 0);
  CHECK(e.fallback[static_cast<int>(dataplane::Reason::kNotAdmitted)] > 0);
  CHECK(g.planned == e.planned);
  CHECK(g.spilled == e.spilled);
  CHECK(g.fallback == e.fallback);
  // Load decided some picks: at zero load a set's lowest index always wins, yet hot-0 went to
  // more than one member of its set.
  CHECK(hot_destinations.size() >= 2);
}

}  // namespace
}  // namespace cacheroute::epp
