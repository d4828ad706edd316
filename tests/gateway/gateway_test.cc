// The gateway end to end over real HTTP: upstreams are httplib servers on loopback ports that
// answer like vLLM and say which of them answered; the gateway runs in-process (Gateway) or as
// the real binary; the planner is the real one in-process (support/planner_fixture.h). Waiting is
// polling with a deadline (Eventually), never a fixed sleep; nothing asserts on wall-clock time.
#include "tools/gateway/gateway.h"

#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <condition_variable>
#include <cstdlib>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cacheroute/dataplane/arm_evidence.h"
#include "cacheroute/dataplane/key_id.h"
#include "support/dns_server.h"
#include "support/free_port.h"
#include "support/planner_fixture.h"
#include "tests/support/planner_config.h"
#include "tests/support/raw_exchange.h"
#include "tests/support/require_ok.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_certs.h"
#include "tools/eval/child_process.h"
#include "tools/frontend/openai_fields.h"

namespace cacheroute::gateway {
namespace {

using testing::Eventually;
using testing::InProcessPlanner;

// A vLLM look-alike: /v1/completions and /v1/chat/completions answer JSON with `usage` and the
// upstream's name ("served_by"), or with "stream": true a few SSE events; /v1/models; /health.
// Stop() and Start() restart it on the same port, as a crashed and restarted engine would.
class FakeUpstream {
 public:
  // On `host` (a loopback address), port `port` (0: a free one).
  explicit FakeUpstream(std::string name, std::string host = "127.0.0.1", int port = 0)
      : name_(std::move(name)), host_(std::move(host)), port_(port) {
    Start();
  }
  ~FakeUpstream() { Stop(); }

  void Start() {
    server_ = std::make_unique<httplib::Server>();
    server_->set_keep_alive_timeout(1);  // Stop() waits for idle keep-alive connections
    server_->set_tcp_nodelay(true);
    const auto answer = [this](const httplib::Request& req, httplib::Response& res) {
      ++requests_;
      std::chrono::milliseconds delay{0};
      int cached = 0;
      {
        std::unique_lock<std::mutex> lock(mu_);
        last_body_ = req.body;
        last_authorization_ = req.get_header_value("Authorization");
        delay = header_delay_;
        cached = cached_tokens_;
        ++arrived_;
        // Held requests wait for Release (bounded, so that a failing test still ends).
        held_cv_.wait_for(lock, std::chrono::seconds(30), [this] { return !holding_; });
      }
      std::this_thread::sleep_for(delay);
      if (frontend::ScanRequestFields(req.body).stream) {
        res.set_chunked_content_provider(
            "text/event-stream", [this](size_t, httplib::DataSink& sink) {
              for (size_t i = 0; i < SseEvents().size(); ++i) {
                const std::string& event = SseEvents()[i];
                if (!sink.write(event.data(), event.size())) return false;
                // Hold the rest back until the client has seen the first event: a gateway that
                // buffered the stream would deadlock here and the test would see it (the wait is
                // bounded so that a failing test still ends).
                if (i == 0) {
                  std::unique_lock<std::mutex> lock(mu_);
                  first_event_seen_cv_.wait_for(lock, std::chrono::seconds(20),
                                                [this] { return first_event_seen_; });
                  held_back_until_seen_ = first_event_seen_;
                }
              }
              sink.done();
              return true;
            });
        return;
      }
      res.set_content(absl::StrCat(R"({"id":"cmpl-1","object":"text_completion","model":"fake",)",
                                   R"("served_by":")", name_, R"(","choices":[{"index":0,)",
                                   R"("text":"hi","finish_reason":"stop"}],"usage":{)",
                                   R"("prompt_tokens":5,"completion_tokens":1,"total_tokens":6,)",
                                   R"("prompt_tokens_details":{"cached_tokens":)", cached, "}}}"),
                      "application/json");
    };
    server_->Post("/v1/completions", answer);
    server_->Post("/v1/chat/completions", answer);
    server_->Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(
          absl::StrCat(R"({"object":"list","data":[{"id":"fake","owned_by":")", name_, R"("}]})"),
          "application/json");
    });
    server_->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      ++health_requests_;
      res.status = health_status_;
      res.set_content("", "text/plain");
    });
    server_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      ++metrics_requests_;
      if (metrics_.empty()) {
        res.status = 404;
        return;
      }
      res.set_content(metrics_, "text/plain; version=0.0.4");
    });
    if (port_ == 0) {
      port_ = server_->bind_to_any_port(host_);
    } else {
      REQUIRE(Eventually([&] { return server_->bind_to_port(host_, port_); }));
    }
    REQUIRE(port_ > 0);
    thread_ = std::thread([this] { server_->listen_after_bind(); });
    REQUIRE(Eventually([&] { return server_->is_running(); }));
  }

  void Stop() {
    if (server_ == nullptr) return;
    server_->stop();
    thread_.join();
    server_.reset();
  }

  static const std::vector<std::string>& SseEvents() {
    static const std::vector<std::string> events = {
        "data: {\"choices\":[{\"index\":0,\"text\":\"Hel\"}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"text\":\"lo\"}]}\n\n",
        "data: {\"choices\":[{\"index\":0,\"text\":\"!\",\"finish_reason\":\"stop\"}],"
        "\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":3,\"total_tokens\":8}}\n\n",
        "data: [DONE]\n\n"};
    return events;
  }
  void SawFirstEvent() {
    std::lock_guard<std::mutex> lock(mu_);
    first_event_seen_ = true;
    first_event_seen_cv_.notify_all();
  }
  bool held_back_until_seen() {
    std::lock_guard<std::mutex> lock(mu_);
    return held_back_until_seen_;
  }

  const std::string& name() const { return name_; }
  std::string url() const { return absl::StrCat("http://", host_, ":", port_); }
  int port() const { return port_; }
  int requests() const { return requests_.load(); }
  std::string last_body() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_body_;
  }
  std::string last_authorization() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_authorization_;
  }
  // How long every completion waits before answering, and the cached_tokens its usage reports
  // (of 5 prompt tokens).
  void set_header_delay(std::chrono::milliseconds delay) {
    std::lock_guard<std::mutex> lock(mu_);
    header_delay_ = delay;
  }
  void set_cached_tokens(int n) {
    std::lock_guard<std::mutex> lock(mu_);
    cached_tokens_ = n;
  }
  // From Hold until Release, completions wait before answering; arrived() counts those that came.
  void Hold() {
    std::lock_guard<std::mutex> lock(mu_);
    holding_ = true;
  }
  void Release() {
    std::lock_guard<std::mutex> lock(mu_);
    holding_ = false;
    held_cv_.notify_all();
  }
  int arrived() {
    std::lock_guard<std::mutex> lock(mu_);
    return arrived_;
  }
  // What GET /health answers, and how often it was asked.
  void set_health_status(int status) {
    std::lock_guard<std::mutex> lock(mu_);
    health_status_ = status;
  }
  int health_requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return health_requests_;
  }
  // What GET /metrics answers ("" = 404), and how often it was asked.
  void set_metrics(std::string text) {
    std::lock_guard<std::mutex> lock(mu_);
    metrics_ = std::move(text);
  }
  int metrics_requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return metrics_requests_;
  }

 private:
  const std::string name_;
  const std::string host_;
  int port_ = 0;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::atomic<int> requests_{0};
  std::mutex mu_;
  std::condition_variable first_event_seen_cv_;
  bool first_event_seen_ = false;              // guarded by mu_
  bool held_back_until_seen_ = false;          // guarded by mu_
  std::string last_body_;                      // guarded by mu_
  std::string last_authorization_;             // guarded by mu_
  std::string metrics_;                        // guarded by mu_
  int metrics_requests_ = 0;                   // guarded by mu_
  int health_status_ = 200;                    // guarded by mu_
  int health_requests_ = 0;                    // guarded by mu_
  std::chrono::milliseconds header_delay_{0};  // guarded by mu_
  int cached_tokens_ = 0;                      // guarded by mu_
  std::condition_variable held_cv_;
  bool holding_ = false;  // guarded by mu_
  int arrived_ = 0;       // guarded by mu_
};

struct Fleet {
  explicit Fleet(int n) {
    for (int i = 0; i < n; ++i) upstreams.push_back(std::make_unique<FakeUpstream>(Name(i)));
  }
  static std::string Name(int i) { return absl::StrCat("u", i); }
  std::vector<std::string> Names() const {
    std::vector<std::string> names;
    for (const auto& u : upstreams) names.push_back(u->name());
    return names;
  }
  std::vector<frontend::Upstream> Config() const {
    std::vector<frontend::Upstream> config;
    for (const auto& u : upstreams) config.push_back({u->name(), u->url()});
    return config;
  }
  std::vector<std::unique_ptr<FakeUpstream>> upstreams;
};

GatewayConfig ConfigFor(const Fleet& fleet, std::string policy = "cacheroute") {
  GatewayConfig config;
  config.listen = "127.0.0.1:0";
  config.upstreams = fleet.Config();
  config.policy = std::move(policy);
  config.report_interval = absl::Milliseconds(50);
  config.probe_interval = absl::Milliseconds(20);
  config.connect_timeout = absl::Seconds(1);
  config.read_timeout = absl::Seconds(30);
  config.failure_threshold = 2;
  return config;
}

// The same, as gateway `gateway_id` following `planner`.
GatewayConfig ConfigFor(const Fleet& fleet, const InProcessPlanner& planner,
                        std::string gateway_id) {
  GatewayConfig config = ConfigFor(fleet);
  config.planner = {planner.target()};
  config.gateway_id = std::move(gateway_id);
  return config;
}

std::unique_ptr<Gateway> StartGateway(const GatewayConfig& config) {
  return cacheroute::testing::RequireOk(Gateway::Start(config));
}

// One slot a destination: C = R, the R hottest keys are admitted.
service::PlannerConfig PlannerFor(std::vector<std::string> destinations) {
  service::PlannerConfig config = testing::LoopbackPlannerConfig(std::move(destinations));
  config.q_cap = 1e9;                     // every admitted key gets one destination
  config.algorithm = "cacheroute-paper";  // Algorithm 1's tables: no key split, no spill
  return config;
}

struct Reply {
  int status = 0;  // 0: no HTTP answer at all
  std::string destination;
  std::string planned;
  std::string body;
};

Reply Send(httplib::Client& client, const std::string& key,
           const std::string& path = "/v1/completions", bool key_in_header = true) {
  httplib::Headers headers;
  std::string body = R"({"model":"fake","prompt":"Hello","max_tokens":1)";
  if (!key.empty()) {
    if (key_in_header) {
      headers.emplace("X-CacheRoute-Key", key);
    } else {
      absl::StrAppend(&body, R"(,"user":")", key, "\"");
    }
  }
  body += "}";
  httplib::Result result = client.Post(path.c_str(), headers, body, "application/json");
  Reply reply;
  if (!result) return reply;
  reply.status = result->status;
  reply.destination = result->get_header_value("X-CacheRoute-Destination");
  reply.planned = result->get_header_value("X-CacheRoute-Planned");
  reply.body = result->body;
  return reply;
}

httplib::Client ClientFor(const Gateway& gateway) {
  httplib::Client client("127.0.0.1", gateway.port());
  client.set_keep_alive(true);
  client.set_tcp_nodelay(true);
  client.set_read_timeout(30, 0);
  return client;
}

std::string TableDestination(const Gateway& gateway, const std::string& key) {
  auto table = gateway.table();
  if (table == nullptr) return "";
  std::vector<uint32_t> set = table->Find(dataplane::KeyId(key)).ToVector();
  if (set.size() != 1) return "";
  return gateway.DestinationNames()[set[0]];
}

uint64_t TableNumber(const Gateway& gateway) {
  auto table = gateway.table();
  return table ? table->version().number : 0;
}

// Sends `per_key` requests for each hot key and one for each of `cold` cold keys, waits until
// the gateway has reported all of them to the planner, plans, and waits for the new table.
void PlanFromTraffic(InProcessPlanner& planner, Gateway& gateway,
                     const std::vector<std::string>& hot, int per_key, int cold) {
  httplib::Client client = ClientFor(gateway);
  uint64_t sent = 0;
  for (int i = 0; i < per_key; ++i) {
    for (const std::string& key : hot) {
      REQUIRE(Send(client, key).status == 200);
      ++sent;
    }
  }
  for (int i = 0; i < cold; ++i) {
    REQUIRE(Send(client, absl::StrCat("cold-", i)).status == 200);
    ++sent;
  }
  REQUIRE(Eventually([&] {
    return gateway.ReporterStats()->requests_reported >= sent &&
           gateway.ReporterStats()->pending == 0;
  }));
  const uint64_t number = planner.Replan().version().number();
  const bool arrived = Eventually([&] { return TableNumber(gateway) >= number; });
  const dataplane::TableSubscriberStats stats = *gateway.SubscriberStats();
  INFO("want " << number << ", have " << TableNumber(gateway) << "; acks " << stats.acks
               << ", nacks " << stats.nacks << ", connects " << stats.connects << ", last error "
               << stats.last_error);
  REQUIRE(arrived);
}

// Gateway `gateway_id` in front of `fleet`, following `planner`, with a first table planned from
// ten requests for each of the `hot` keys.
std::unique_ptr<Gateway> StartPlannedGateway(const Fleet& fleet, InProcessPlanner& planner,
                                             std::string gateway_id,
                                             const std::vector<std::string>& hot) {
  std::unique_ptr<Gateway> gateway = StartGateway(ConfigFor(fleet, planner, std::move(gateway_id)));
  PlanFromTraffic(planner, *gateway, hot, 10, 0);
  return gateway;
}

const std::vector<std::string> kHot = {"tenant-a", "tenant-b", "tenant-c", "tenant-d"};

TEST_CASE("planned keys go to their table destination, other keys spread by P2C") {
  Fleet fleet(4);
  InProcessPlanner planner(PlannerFor(fleet.Names()));
  GatewayConfig config = ConfigFor(fleet, planner, "gw-test");
  config.key_from = {"header", "user"};  // a request without either has no key
  std::unique_ptr<Gateway> gateway = StartGateway(config);
  REQUIRE(Eventually([&] { return gateway->SubscriberStats()->connected; }));

  // Before any table: P2C, not planned.
  httplib::Client client = ClientFor(*gateway);
  Reply first = Send(client, "tenant-a");
  CHECK(first.status == 200);
  CHECK(first.planned == "0");
  CHECK(first.body.find(absl::StrCat("\"served_by\":\"", first.destination, "\"")) !=
        std::string::npos);

  PlanFromTraffic(planner, *gateway, kHot, 20, 40);
  for (const std::string& key : kHot) {
    const std::string expected = TableDestination(*gateway, key);
    REQUIRE_FALSE(expected.empty());
    for (int i = 0; i < 5; ++i) {
      // The key in the header or in the body's `user` field routes the same.
      Reply reply = Send(client, key, i % 2 ? "/v1/chat/completions" : "/v1/completions",
                         /*key_in_header=*/i % 3 != 0);
      CHECK(reply.status == 200);
      CHECK(reply.planned == "1");
      CHECK(reply.destination == expected);
      CHECK(reply.body.find(absl::StrCat("\"served_by\":\"", expected, "\"")) != std::string::npos);
    }
  }
  std::map<std::string, int> cold;
  for (int i = 0; i < 200; ++i) {
    Reply reply = Send(client, absl::StrCat("other-", i));
    CHECK(reply.status == 200);
    CHECK(reply.planned == "0");
    ++cold[reply.destination];
  }
  CHECK(cold.size() == 4);  // P2C over an idle fleet is uniform: each gets about 50
  // Keyless requests are routed too (P2C), and not counted in the rates.
  Reply keyless = Send(client, "");
  CHECK(keyless.status == 200);
  CHECK(keyless.planned == "0");

  const std::string metrics = gateway->RenderMetrics();
  CHECK(metrics.find("cacheroute_gateway_picks_total{reason=\"planned\"} 20") != std::string::npos);
  CHECK(metrics.find("cacheroute_gateway_picks_total{reason=\"no_key\"} 1") != std::string::npos);
  CHECK(metrics.find(absl::StrCat("cacheroute_gateway_table_version{epoch=\"",
                                  gateway->table()->version().epoch, "\"} ",
                                  gateway->table()->version().number)) != std::string::npos);
}

TEST_CASE("several planner addresses: the gateway reports to and follows the one that answers") {
  Fleet fleet(4);
  InProcessPlanner planner(PlannerFor(fleet.Names()));
  GatewayConfig config = ConfigFor(fleet);
  // Host names: one channel per address, the first nobody listens on (planner_channels.h).
  const std::string port = planner.target().substr(planner.target().rfind(':') + 1);
  config.planner = {absl::StrCat("localhost:", cacheroute::testing::FreeLoopbackPort()),
                    absl::StrCat("localhost:", port)};
  config.gateway_id = "gw-two";
  std::unique_ptr<Gateway> gateway = StartGateway(config);
  REQUIRE(Eventually([&] { return gateway->SubscriberStats()->connected; }));
  PlanFromTraffic(planner, *gateway, kHot, 20, 40);
  httplib::Client client = ClientFor(*gateway);
  for (const std::string& key : kHot) {
    const Reply reply = Send(client, key);
    CHECK(reply.planned == "1");
    CHECK(reply.destination == TableDestination(*gateway, key));
  }
}

TEST_CASE(
    "rollout gate end to end: the gateway splits keys by the table's rollout, reports "
    "each arm, and the planner promotes an equal canary") {
  Fleet fleet(4);
  service::PlannerConfig planner_config = PlannerFor(fleet.Names());
  planner_config.gate_enabled = true;
  planner_config.gate.min_samples = 50;
  planner_config.gate.window_intervals = 1;
  planner_config.gate.canary_fraction = 0.5;
  planner_config.gate.promote_after = 1;
  planner_config.gate.z = 5;  // an equal canary must never look worse by chance here
  InProcessPlanner planner(planner_config);
  GatewayConfig config = ConfigFor(fleet, planner, "gw-gate");
  std::unique_ptr<Gateway> gateway = StartGateway(config);
  REQUIRE(Eventually([&] { return gateway->SubscriberStats()->connected; }));

  // The first interval ends shadow: the table comes with a 50% canary.
  PlanFromTraffic(planner, *gateway, kHot, 20, 40);
  REQUIRE(gateway->table()->table_fraction() == 0.5);

  httplib::Client client = ClientFor(*gateway);
  uint64_t sent = 0;
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < 200; ++i) {
      const std::string key = absl::StrCat("key-", i);
      const Reply reply = Send(client, key);
      REQUIRE(reply.status == 200);
      ++sent;
      // A key on the control arm is never routed by the table.
      const bool table_arm = dataplane::ArmOf(KeyId(key), 0.5) == dataplane::Arm::kTable;
      if (!table_arm) CHECK(reply.planned == "0");
    }
  }
  const std::string metrics = gateway->RenderMetrics();
  CHECK(metrics.find("cacheroute_gateway_picks_total{reason=\"control_arm\"} 0\n") ==
        std::string::npos);
  // A gateway records a request's evidence just after its answer; one more request, sent a
  // little later, goes into a report that carries every earlier request's evidence.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  REQUIRE(Send(client, "flush").status == 200);
  ++sent;
  REQUIRE(Eventually([&] {
    return gateway->ReporterStats()->requests_reported >= sent + 80 + 40 &&
           gateway->ReporterStats()->pending == 0;
  }));

  const uint64_t number = planner.Replan().version().number();
  const v1::GateStatus gate = planner.Status().gate();
  INFO(gate.why());
  CHECK(gate.verdict() == "not_worse");
  CHECK(gate.table_samples() + gate.control_samples() >= 400);
  CHECK(gate.table_samples() >= 50);
  CHECK(gate.control_samples() >= 50);
  CHECK(gate.state() == "enabled");
  REQUIRE(Eventually([&] { return TableNumber(*gateway) >= number; }));
  CHECK(gateway->table()->table_fraction() == 1.0 - planner_config.gate.control_fraction);
}

TEST_CASE("a table update arrives while traffic flows and no request fails") {
  Fleet fleet(3);
  InProcessPlanner planner(PlannerFor(fleet.Names()));
  std::unique_ptr<Gateway> gateway =
      StartPlannedGateway(fleet, planner, "gw-flow", {"k0", "k1", "k2"});
  const uint64_t before = TableNumber(*gateway);

  std::atomic<bool> stop{false};
  std::atomic<int> ok{0}, failed{0}, after_update{0};
  std::vector<std::thread> senders;
  for (int t = 0; t < 4; ++t) {
    senders.emplace_back([&, t] {
      httplib::Client client = ClientFor(*gateway);
      for (int i = 0; !stop.load(); ++i) {
        const bool updated = TableNumber(*gateway) > before;
        Reply reply = Send(client, absl::StrCat("k", (i + t) % 6));
        (reply.status == 200 ? ok : failed).fetch_add(1);
        if (updated && reply.status == 200) after_update.fetch_add(1);
      }
    });
  }
  REQUIRE(Eventually([&] { return ok.load() > 50; }));
  // Another gateway's traffic makes k3 … k5 the hot keys: a new table with other assignments.
  planner.Report("gw-other", 1, {{"k3", 1e6}, {"k4", 1e6}, {"k5", 1e6}});
  const uint64_t number = planner.Replan().version().number();
  REQUIRE(number > before);
  REQUIRE(Eventually([&] { return TableNumber(*gateway) >= number; }));
  const int at_update = ok.load();
  REQUIRE(Eventually([&] { return ok.load() > at_update + 50 && after_update.load() > 50; }));
  stop = true;
  for (std::thread& t : senders) t.join();
  CHECK(failed.load() == 0);
  CHECK(TableDestination(*gateway, "k3") != "");
  for (const dataplane::RouterStats stats = gateway->RouterStats(); int64_t n : stats.in_flight) {
    CHECK(n == 0);
  }
}

TEST_CASE("an upstream killed mid-run: 502 only for its requests, marked down, then back") {
  Fleet fleet(3);
  GatewayConfig config = ConfigFor(fleet, "flatlb");
  std::unique_ptr<Gateway> gateway = StartGateway(config);
  httplib::Client client = ClientFor(*gateway);
  for (int i = 0; i < 30; ++i) REQUIRE(Send(client, absl::StrCat("t", i)).status == 200);

  const uint32_t killed = gateway->DestinationIndex("u1");
  fleet.upstreams[killed]->Stop();
  int bad_gateway = 0;
  int i = 0;
  const bool marked_down = Eventually([&] {
    Reply reply = Send(client, absl::StrCat("t", i++));
    if (reply.destination == "u1") {
      CHECK(reply.status == 502);
      CHECK(reply.body.find("\"error\"") != std::string::npos);
      CHECK(reply.body.find("upstream u1 (" + fleet.upstreams[killed]->url() + ")") !=
            std::string::npos);
      ++bad_gateway;
    } else {
      CHECK(reply.status == 200);
    }
    return !gateway->RouterStats().up[killed];
  });
  REQUIRE(marked_down);
  CHECK(bad_gateway == 2);  // exactly failure_threshold requests paid for the outage

  std::map<std::string, int> after;
  for (int j = 0; j < 60; ++j) {
    Reply reply = Send(client, absl::StrCat("t", j));
    CHECK(reply.status == 200);
    ++after[reply.destination];
  }
  CHECK(after.count("u1") == 0);
  CHECK(after.size() == 2);
  const std::string metrics = gateway->RenderMetrics();
  CHECK(metrics.find("cacheroute_gateway_destination_up{destination=\"u1\"} 0") !=
        std::string::npos);
  CHECK(metrics.find("cacheroute_gateway_upstream_errors_total{destination=\"u1\"} 2") !=
        std::string::npos);

  fleet.upstreams[killed]->Start();  // same port; the prober's GET /health brings it back
  // -> bool: up[killed] is a vector<bool> proxy into a temporary.
  REQUIRE(Eventually([&]() -> bool { return gateway->RouterStats().up[killed]; }));
  REQUIRE(Eventually([&] {
    Reply reply = Send(client, "back");
    CHECK(reply.status == 200);
    return reply.destination == "u1";
  }));
}

TEST_CASE("the planner stopped mid-run leaves the gateway routing on its last table") {
  Fleet fleet(3);
  InProcessPlanner planner(PlannerFor(fleet.Names()));
  std::unique_ptr<Gateway> gateway =
      StartPlannedGateway(fleet, planner, "gw-orphan", {"x", "y", "z"});
  std::map<std::string, std::string> planned;
  for (const char* key : {"x", "y", "z"}) planned[key] = TableDestination(*gateway, key);

  planner.Stop();
  REQUIRE(Eventually([&] { return !gateway->SubscriberStats()->connected; }));
  httplib::Client client = ClientFor(*gateway);
  for (int i = 0; i < 10; ++i) {
    for (const auto& [key, destination] : planned) {
      Reply reply = Send(client, key);
      CHECK(reply.status == 200);
      CHECK(reply.planned == "1");
      CHECK(reply.destination == destination);
    }
  }
  // Rates queue up for the planner meanwhile; reports fail without affecting requests.
  REQUIRE(Eventually([&] { return gateway->ReporterStats()->failed_attempts > 0; }));
}

TEST_CASE("stream: true passes the SSE chunks through as they arrive, unchanged") {
  Fleet fleet(1);
  std::unique_ptr<Gateway> gateway = StartGateway(ConfigFor(fleet, "sticky"));
  FakeUpstream& upstream = *fleet.upstreams[0];

  httplib::Client client("127.0.0.1", gateway->port());
  client.set_read_timeout(30, 0);
  httplib::Request request;
  request.method = "POST";
  request.path = "/v1/chat/completions";
  request.headers = {{"Content-Type", "application/json"},
                     {"Authorization", "Bearer sk-test"},
                     {"X-CacheRoute-Key", "thread-9"}};
  request.body = R"({"model":"fake","messages":[{"role":"user","content":"Hi"}],"stream":true})";
  std::string received;
  int status = 0;
  std::string content_type, destination;
  request.response_handler = [&](const httplib::Response& response) {
    status = response.status;
    content_type = response.get_header_value("Content-Type");
    destination = response.get_header_value("X-CacheRoute-Destination");
    return true;
  };
  request.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    received.append(data, size);
    if (received.size() >= FakeUpstream::SseEvents()[0].size()) upstream.SawFirstEvent();
    return true;
  };
  httplib::Response response;
  httplib::Error error = httplib::Error::Success;
  REQUIRE(client.send(request, response, error));
  CHECK(status == 200);
  CHECK(content_type == "text/event-stream");
  CHECK(destination == "u0");
  std::string expected;
  for (const std::string& event : FakeUpstream::SseEvents()) expected += event;
  CHECK(received == expected);
  CHECK(upstream.held_back_until_seen());  // the first event reached us before the rest was sent
  CHECK(upstream.last_body() == request.body);
  CHECK(upstream.last_authorization() == "Bearer sk-test");
  REQUIRE(Eventually([&] { return gateway->RouterStats().in_flight[0] == 0; }));

  // A stream towards a dead upstream is a 502 like any other request.
  upstream.Stop();
  std::string body;
  request.response_handler = nullptr;
  request.content_receiver = nullptr;
  httplib::Response failed;
  REQUIRE(client.send(request, failed, error));
  CHECK(failed.status == 502);
  CHECK(failed.body.find("upstream u0") != std::string::npos);
  CHECK(gateway->RouterStats().in_flight[0] == 0);
}

TEST_CASE("a client that hangs up mid-stream ends the request without blaming the upstream") {
  Fleet fleet(1);
  std::unique_ptr<Gateway> gateway = StartGateway(ConfigFor(fleet, "flatlb"));
  FakeUpstream& upstream = *fleet.upstreams[0];
  httplib::Client client("127.0.0.1", gateway->port());
  httplib::Request request;
  request.method = "POST";
  request.path = "/v1/completions";
  request.headers = {{"Content-Type", "application/json"}};
  request.body = R"({"model":"fake","prompt":"Hi","stream":true,"user":"t"})";
  request.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
    upstream.SawFirstEvent();
    return false;  // hang up after the first chunk
  };
  httplib::Response response;
  httplib::Error error = httplib::Error::Success;
  CHECK_FALSE(client.send(request, response, error));
  REQUIRE(Eventually([&] { return gateway->RouterStats().in_flight[0] == 0; }));
  const std::string metrics = gateway->RenderMetrics();
  CHECK(metrics.find("cacheroute_gateway_upstream_errors_total{destination=\"u0\"} 0") !=
        std::string::npos);
  CHECK(gateway->RouterStats().up[0]);
  // The gateway and the upstream serve the next request as usual.
  httplib::Client next = ClientFor(*gateway);
  CHECK(Send(next, "t").status == 200);
}

TEST_CASE("/v1/models, /healthz and /metrics") {
  Fleet fleet(2);
  std::unique_ptr<Gateway> gateway = StartGateway(ConfigFor(fleet, "chwbl"));
  httplib::Client client = ClientFor(*gateway);
  httplib::Result models = client.Get("/v1/models");
  REQUIRE(models);
  CHECK(models->status == 200);
  CHECK(
      models->body.find("\"owned_by\":\"" + models->get_header_value("X-CacheRoute-Destination")) !=
      std::string::npos);
  httplib::Result health = client.Get("/healthz");
  REQUIRE(health);
  CHECK(health->status == 200);
  REQUIRE(Send(client, "m").status == 200);
  httplib::Result metrics = client.Get("/metrics");
  REQUIRE(metrics);
  CHECK(metrics->status == 200);
  for (const char* line : {
           "cacheroute_gateway_requests_total{endpoint=\"models\",code=\"2xx\"} 1",
           "cacheroute_gateway_requests_total{endpoint=\"completions\",code=\"2xx\"} 1",
           "cacheroute_gateway_picks_total{reason=\"policy\"} 1",
           "cacheroute_gateway_in_flight{destination=\"u0\"} 0",
           "cacheroute_gateway_destination_up{destination=\"u1\"} 1",
           "cacheroute_gateway_request_duration_seconds_bucket{le=\"+Inf\"} 2",
           "cacheroute_gateway_request_duration_seconds_count 2",
           "cacheroute_gateway_table_version{epoch=\"0\"} 0",
           "cacheroute_gateway_measured_kv_hit_ratio 0",
           "cacheroute_gateway_refusals_total{status=\"401\",reason=\"unauthorized\"} 0",
       }) {
    INFO(line);
    CHECK(metrics->body.find(line) != std::string::npos);
  }
  // Every family has HELP and TYPE.
  size_t families = 0;
  for (size_t pos = 0; (pos = metrics->body.find("# TYPE ", pos)) != std::string::npos; ++pos) {
    ++families;
  }
  size_t helps = 0;
  for (size_t pos = 0; (pos = metrics->body.find("# HELP ", pos)) != std::string::npos; ++pos) {
    ++helps;
  }
  CHECK(families == helps);
  CHECK(families >= 10);
  // Prometheus' own linter, where installed (Debian package `prometheus`).
  if (access("/usr/bin/promtool", X_OK) == 0) {
    const std::string path = "gateway_test_metrics.txt";
    {
      std::ofstream out(path);
      out << metrics->body;
    }
    const int status = std::system(("/usr/bin/promtool check metrics < " + path).c_str());
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    std::remove(path.c_str());
  } else {
    WARN("promtool not installed: skipping `promtool check metrics`");
  }

  fleet.upstreams[0]->Stop();
  fleet.upstreams[1]->Stop();
  for (int i = 0; i < 4; ++i) Send(client, absl::StrCat("k", i));  // 2 failures each: both down
  REQUIRE(Eventually([&] {
    Send(client, "k");
    auto up = gateway->RouterStats().up;
    return !up[0] && !up[1];
  }));
  Reply none = Send(client, "k");
  CHECK(none.status == 503);
  CHECK(none.body.find("no upstream is up") != std::string::npos);
  health = client.Get("/healthz");
  REQUIRE(health);
  CHECK(health->status == 503);
}

// The real binary: started with port 0, its port read from the "started gateway" log line.
// A planner that requires a bearer token on every RPC (token_required_for_reads): the gateway
// with planner_token_file reports rates and gets tables; one without the token gets neither.
TEST_CASE("POST /debug/explain: why a request would go where it would, routing nothing") {
  Fleet fleet(3);
  InProcessPlanner planner(PlannerFor(fleet.Names()));
  std::unique_ptr<Gateway> gateway = StartGateway(ConfigFor(fleet, planner, "gw-explain"));
  PlanFromTraffic(planner, *gateway, kHot, 20, 10);
  const std::string key = kHot[0];
  const std::string planned = TableDestination(*gateway, key);
  REQUIRE_FALSE(planned.empty());
  httplib::Client client = ClientFor(*gateway);
  const uint64_t routed_before = gateway->RouterStats().planned;
  std::vector<int> sent_before;
  for (const auto& u : fleet.upstreams) sent_before.push_back(u->requests());
  httplib::Result explained =
      client.Post("/debug/explain", httplib::Headers{{"X-CacheRoute-Key", key}},
                  R"({"model":"fake","prompt":"Hello","max_tokens":1})", "application/json");
  REQUIRE(explained);
  CHECK(explained->status == 200);
  CHECK(explained->get_header_value("Content-Type") == "application/json");
  CHECK_THAT(explained->body, Catch::Contains("\"reason\": \"planned\""));
  CHECK_THAT(explained->body, Catch::Contains("\"destination\": \"" + planned + "\""));
  CHECK_THAT(explained->body, Catch::Contains("\"uncached_prefill\""));
  CHECK(gateway->RouterStats().planned == routed_before);  // nothing was routed or sent
  for (size_t i = 0; i < fleet.upstreams.size(); ++i) {
    CHECK(fleet.upstreams[i]->requests() == sent_before[i]);
  }
  // Without a key: 400 in OpenAI's shape.
  httplib::Result keyless = client.Post(
      "/debug/explain", R"({"messages":[{"role":"user","content":"x"}]})", "application/json");
  REQUIRE(keyless);
  CHECK(keyless->status == 400);
  CHECK_THAT(keyless->body, Catch::Contains("\"code\":\"no_routing_key\""));
  httplib::Result get = client.Get("/debug/explain");
  REQUIRE(get);
  CHECK(get->status == 405);
  CHECK(get->get_header_value("Allow") == "POST");

  GatewayConfig sticky_config = ConfigFor(fleet, "sticky");
  std::unique_ptr<Gateway> sticky = StartGateway(sticky_config);
  httplib::Client sticky_client = ClientFor(*sticky);
  httplib::Result refused = sticky_client.Post(
      "/debug/explain", httplib::Headers{{"X-CacheRoute-Key", key}}, "{}", "application/json");
  REQUIRE(refused);
  CHECK(refused->status == 400);
  CHECK_THAT(refused->body, Catch::Contains("\"code\":\"policy_not_explained\""));
}

TEST_CASE("planner_token_file: the token gets rates and tables through, its absence does not") {
  testing::TempDir dir("gateway_token_test");
  Fleet fleet(3);
  service::PlannerConfig planner_config = PlannerFor(fleet.Names());
  planner_config.token = "s3cret-token";
  planner_config.token_required_for_reads = true;
  InProcessPlanner planner(planner_config);

  GatewayConfig with_token = ConfigFor(fleet, planner, "gw-token");
  with_token.planner_token_file = dir.Write("token", "s3cret-token\n");
  auto gateway = StartGateway(with_token);
  PlanFromTraffic(planner, *gateway, kHot, 3, 2);
  CHECK(TableDestination(*gateway, kHot[0]) != "");

  GatewayConfig without = ConfigFor(fleet, planner, "gw-plain");
  auto plain = StartGateway(without);
  httplib::Client client = ClientFor(*plain);
  REQUIRE(Send(client, "tenant-a").status == 200);  // routed by P2C all the same
  REQUIRE(Eventually([&] {
    return plain->ReporterStats()->failed_attempts > 0 && plain->SubscriberStats()->disconnects > 0;
  }));
  INFO(plain->ReporterStats()->last_error << " / " << plain->SubscriberStats()->last_error);
  CHECK(absl::StrContains(plain->ReporterStats()->last_error, "token"));
  CHECK(plain->ReporterStats()->reports_sent == 0);
  CHECK(plain->SubscriberStats()->acks == 0);
  CHECK(plain->table() == nullptr);

  GatewayConfig missing = with_token;
  missing.gateway_id = "gw-missing";
  missing.planner_token_file = dir.File("no-such-token");
  absl::StatusOr<std::unique_ptr<Gateway>> failed = Gateway::Start(missing);
  REQUIRE_FALSE(failed.ok());
  CHECK(absl::IsInvalidArgument(failed.status()));
  CHECK(absl::StrContains(failed.status().message(), "planner_token_file"));
  CHECK(absl::StrContains(failed.status().message(), "no-such-token"));
}

// A planner behind mutual TLS: planner_tls_ca_file with this gateway's certificate and key gets
// through; the CA alone (no client certificate) does not.
TEST_CASE("planner_tls_*: a gateway reaches a planner behind mutual TLS") {
  testing::TempDir dir("gateway_tls_test");
  const testing::Certs certs = testing::MakeCerts(dir.path().string());
  Fleet fleet(3);
  service::PlannerConfig planner_config = PlannerFor(fleet.Names());
  planner_config.tls.cert_file = certs.server_cert;
  planner_config.tls.key_file = certs.server_key;
  planner_config.tls.client_ca_file = certs.ca;
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = dir.Read("ca.pem");
  ssl.pem_cert_chain = dir.Read("client.pem");
  ssl.pem_private_key = dir.Read("client.key");
  InProcessPlanner planner(planner_config, grpc::SslCredentials(ssl));

  GatewayConfig config = ConfigFor(fleet, planner, "gw-mtls");
  config.planner_tls_ca_file = certs.ca;
  config.planner_tls_cert_file = certs.client_cert;
  config.planner_tls_key_file = certs.client_key;
  auto gateway = StartGateway(config);
  PlanFromTraffic(planner, *gateway, kHot, 3, 2);
  CHECK(TableDestination(*gateway, kHot[0]) != "");

  GatewayConfig no_client_cert = ConfigFor(fleet, planner, "gw-ca-only");
  no_client_cert.planner_tls_ca_file = certs.ca;
  auto refused = StartGateway(no_client_cert);
  httplib::Client client = ClientFor(*refused);
  REQUIRE(Send(client, "tenant-a").status == 200);
  REQUIRE(Eventually([&] { return refused->ReporterStats()->failed_attempts > 0; }));
  CHECK(refused->ReporterStats()->reports_sent == 0);
  CHECK(refused->table() == nullptr);
}

// Engine-reported load: with load_scrape_interval set, each upstream's vllm:num_requests_waiting
// joins the gateway's own in-flight count, so power of two choices keeps away from a queue the
// gateway did not cause (another gateway's traffic); a failed scrape counts 0.
std::string WaitingMetric(int waiting) {
  return absl::StrCat(
      "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
      "# TYPE vllm:num_requests_waiting gauge\n"
      "vllm:num_requests_waiting{model_name=\"fake\"} ",
      waiting, ".0\n");
}

TEST_CASE("engine-reported queue depth steers power of two choices away from a busy engine") {
  Fleet fleet(2);
  fleet.upstreams[0]->set_metrics(WaitingMetric(50));
  fleet.upstreams[1]->set_metrics(WaitingMetric(0));
  GatewayConfig config = ConfigFor(fleet, "flatlb");
  config.load_scrape_interval = absl::Milliseconds(20);
  auto gateway = StartGateway(config);
  REQUIRE(Eventually([&] {
    return absl::StrContains(gateway->RenderMetrics(),
                             "cacheroute_gateway_reported_load{destination=\"u0\"} 50\n");
  }));
  httplib::Client client = ClientFor(*gateway);
  // One request at a time: the gateway's own in-flight counts stay 0, so only the reported
  // queue tells the two apart.
  for (int i = 0; i < 40; ++i) {
    const Reply reply = Send(client, absl::StrCat("key-", i));
    REQUIRE(reply.status == 200);
    CHECK(reply.destination == "u1");
  }
  CHECK(fleet.upstreams[0]->requests() == 0);

  // u1's queue grows past u0's: traffic moves to u0.
  fleet.upstreams[1]->set_metrics(WaitingMetric(80));
  REQUIRE(Eventually([&] {
    return absl::StrContains(gateway->RenderMetrics(),
                             "cacheroute_gateway_reported_load{destination=\"u1\"} 80\n");
  }));
  for (int i = 0; i < 20; ++i) CHECK(Send(client, absl::StrCat("key-", i)).destination == "u0");

  // u1's /metrics breaks (404): its reported load falls to 0 and the failures are counted.
  fleet.upstreams[1]->set_metrics("");
  REQUIRE(Eventually([&] {
    return absl::StrContains(gateway->RenderMetrics(),
                             "cacheroute_gateway_reported_load{destination=\"u1\"} 0\n");
  }));
  CHECK(absl::StrContains(gateway->RenderMetrics(),
                          "cacheroute_gateway_load_scrape_failures_total{destination=\"u0\"} 0\n"));
  CHECK_FALSE(
      absl::StrContains(gateway->RenderMetrics(),
                        "cacheroute_gateway_load_scrape_failures_total{destination=\"u1\"} 0\n"));
  for (int i = 0; i < 20; ++i) CHECK(Send(client, absl::StrCat("key-", i)).destination == "u1");
}

TEST_CASE("without load_scrape_interval the gateway never asks upstreams for /metrics") {
  Fleet fleet(2);
  fleet.upstreams[0]->set_metrics(WaitingMetric(50));
  auto gateway = StartGateway(ConfigFor(fleet, "flatlb"));
  httplib::Client client = ClientFor(*gateway);
  std::set<std::string> used;
  for (int i = 0; i < 60; ++i) used.insert(Send(client, absl::StrCat("key-", i)).destination);
  CHECK(used == std::set<std::string>{"u0", "u1"});
  CHECK(fleet.upstreams[0]->metrics_requests() == 0);
  CHECK(absl::StrContains(gateway->RenderMetrics(),
                          "cacheroute_gateway_reported_load{destination=\"u0\"} 0\n"));
}

TEST_CASE("slow is not dead: a response slower than header_timeout is a 504, never marked down") {
  Fleet fleet(1);
  GatewayConfig config = ConfigFor(fleet, "flatlb");
  config.header_timeout = absl::Milliseconds(100);
  config.failure_threshold = 1;  // one failure would mark it down
  std::unique_ptr<Gateway> gateway = StartGateway(config);
  FakeUpstream& upstream = *fleet.upstreams[0];
  upstream.set_header_delay(std::chrono::milliseconds(600));
  httplib::Client client = ClientFor(*gateway);
  for (int i = 0; i < 3; ++i) {
    Reply reply = Send(client, "t");
    CHECK(reply.status == 504);
    CHECK(reply.destination == "u0");
    CHECK(reply.body.find("took longer than") != std::string::npos);
  }
  CHECK(gateway->RouterStats().up[0]);
  upstream.set_header_delay(std::chrono::milliseconds(0));
  CHECK(Send(client, "t").status == 200);
  const std::string metrics = gateway->RenderMetrics();
  CHECK(metrics.find("cacheroute_gateway_upstream_error_kinds_total{destination=\"u0\","
                     "kind=\"header_timeout\"} 3") != std::string::npos);
  CHECK(metrics.find("cacheroute_gateway_destination_marked_down_total{destination=\"u0\"} 0") !=
        std::string::npos);
  CHECK(metrics.find("cacheroute_gateway_destination_up{destination=\"u0\"} 1") !=
        std::string::npos);
}

TEST_CASE("key_from system: requests sharing a system prompt get one key with no header") {
  Fleet fleet(4);
  GatewayConfig config = ConfigFor(fleet, "sticky");
  std::unique_ptr<Gateway> gateway = StartGateway(config);
  httplib::Client client = ClientFor(*gateway);
  const auto chat = [&](const std::string& system, int question) {
    const std::string body =
        absl::StrCat(R"({"model":"fake","messages":[{"role":"system","content":")", system,
                     R"("},{"role":"user","content":"question )", question, R"("}]})");
    httplib::Result r = client.Post("/v1/chat/completions", body, "application/json");
    REQUIRE(r);
    CHECK(r->status == 200);
    return r->get_header_value("X-CacheRoute-Destination");
  };
  std::set<std::string> acme, all;
  for (int q = 0; q < 12; ++q) acme.insert(chat("You are ACME's support bot.", q));
  CHECK(acme.size() == 1);  // one key: sticky sends it to one destination
  for (int t = 0; t < 24; ++t) all.insert(chat(absl::StrCat("Tenant ", t, "'s assistant."), 0));
  CHECK(all.size() > 1);  // other system prompts are other keys
  const std::string metrics = gateway->RenderMetrics();
  CHECK(metrics.find("cacheroute_gateway_picks_total{reason=\"no_key\"} 0") != std::string::npos);
}

TEST_CASE("served KV hit: usage.cached_tokens is counted per destination and measured") {
  Fleet fleet(1);
  std::unique_ptr<Gateway> gateway = StartGateway(ConfigFor(fleet, "flatlb"));
  fleet.upstreams[0]->set_cached_tokens(3);
  httplib::Client client = ClientFor(*gateway);
  for (int i = 0; i < 4; ++i) REQUIRE(Send(client, "t").status == 200);
  const std::string metrics = gateway->RenderMetrics();
  CHECK(
      metrics.find("cacheroute_gateway_prompt_tokens_total{destination=\"u0\",planned=\"0\"} 20") !=
      std::string::npos);
  CHECK(
      metrics.find("cacheroute_gateway_cached_tokens_total{destination=\"u0\",planned=\"0\"} 12") !=
      std::string::npos);
  REQUIRE(gateway->measured_hit().has_value());
  CHECK(*gateway->measured_hit() == Approx(0.6));
  CHECK(
      metrics.find("cacheroute_gateway_time_to_first_token_seconds_count{destination=\"u0\"} 0") !=
      std::string::npos);  // no stream yet
}

TEST_CASE("api_key_file: /v1/ needs a listed bearer key, which is not passed upstream") {
  Fleet fleet(1);
  testing::TempDir dir("gateway_api_keys");
  const std::string keys = (dir.path() / "keys").string();
  std::ofstream(keys) << "# one per line\nsk-alpha\n\n  sk-beta  \n";
  GatewayConfig config = ConfigFor(fleet, "flatlb");
  config.api_key_file = keys;
  std::unique_ptr<Gateway> gateway = StartGateway(config);
  httplib::Client client = ClientFor(*gateway);
  Reply refused = Send(client, "t");
  CHECK(refused.status == 401);
  CHECK(refused.body.find("\"error\"") != std::string::npos);
  CHECK(refused.body.find("API key") != std::string::npos);
  CHECK(refused.body.find(R"("code":"invalid_api_key")") != std::string::npos);
  CHECK(fleet.upstreams[0]->requests() == 0);
  client.set_default_headers({{"Authorization", "Bearer sk-wrong"}});
  CHECK(Send(client, "t").status == 401);
  client.set_default_headers({{"Authorization", "Bearer sk-beta"}});
  CHECK(Send(client, "t").status == 200);
  CHECK(fleet.upstreams[0]->last_authorization().empty());
  // The scheme's name in any case (RFC 9110, section 11.1), as some clients send it.
  for (const char* scheme : {"bearer", "BEARER"}) {
    client.set_default_headers({{"Authorization", absl::StrCat(scheme, " sk-alpha")}});
    INFO(scheme);
    CHECK(Send(client, "t").status == 200);
  }
  CHECK(client.Get("/v1/models")->status == 200);
  httplib::Client anonymous = ClientFor(*gateway);
  CHECK(anonymous.Get("/healthz")->status == 200);  // health and metrics stay open
  CHECK(anonymous.Get("/v1/models")->status == 401);

  config.api_key_file = (dir.path() / "missing").string();
  absl::StatusOr<std::unique_ptr<Gateway>> bad = Gateway::Start(config);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("api_key_file") != std::string::npos);
}

// The value of the sample `line` ("name{labels}") on a /metrics page; -1 when absent.
double SampleValue(const std::string& page, const std::string& line) {
  const size_t at = page.find("\n" + line + " ");
  if (at == std::string::npos) return -1;
  return std::stod(page.substr(at + line.size() + 2));
}

// A flatlb gateway in front of `fleet` that needs the API key sk-alpha (its file in `dir`).
std::unique_ptr<Gateway> StartKeyedGateway(const Fleet& fleet, const testing::TempDir& dir) {
  GatewayConfig config = ConfigFor(fleet, "flatlb");
  config.api_key_file = dir.Write("keys", "sk-alpha\n");
  return StartGateway(config);
}

TEST_CASE("every refusal is counted by status and reason, in OpenAI's shape; 405 says Allow") {
  Fleet fleet(1);
  testing::TempDir dir("gateway_refusals");
  std::unique_ptr<Gateway> gateway = StartKeyedGateway(fleet, dir);
  const int port = gateway->port();
  const std::string key = "Authorization: Bearer sk-alpha\r\n";
  struct Case {
    int status;
    std::string reason;
    std::string request;
    std::string allow;  // the Allow header a 405 must carry
    std::string code;   // the error body's code ("": the HTTP layer's answer, no JSON body)
  };
  const std::vector<Case> cases = {
      {401, "unauthorized",
       "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
       "Connection: close\r\n\r\n{}",
       "", "\"code\":\"invalid_api_key\""},
      {404, "no_route",
       "GET /v1/embeddings HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + key + "\r\n", "",
       "\"code\":\"unknown_url\""},
      {405, "method_not_allowed",
       "DELETE /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n" + key + "\r\n",
       "POST", "\"code\":\"method_not_allowed\""},
      {405, "method_not_allowed",
       "POST /v1/models/fake HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\nConnection: close\r\n" +
           key + "\r\n",
       "GET", "\"code\":\"method_not_allowed\""},
      {400, "malformed", "GARBAGE\r\n\r\n", "", ""},
      {413, "body_too_large",
       "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 40000000\r\n\r\n", "", ""},
      {431, "header_too_large",
       absl::StrCat("GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: ", std::string(70000, 'x'),
                    "\r\n\r\n"),
       "", ""},
  };
  httplib::Client client = ClientFor(*gateway);
  std::map<std::string, double> expected;
  for (const Case& c : cases) {
    const std::string answer = testing::RawExchange(port, c.request);
    INFO(c.status << " " << c.reason << ": " << answer.substr(0, 400));
    CHECK(absl::StartsWith(answer, absl::StrCat("HTTP/1.1 ", c.status, " ")));
    if (!c.allow.empty()) CHECK(absl::StrContains(answer, "\r\nAllow: " + c.allow + "\r\n"));
    if (!c.code.empty()) CHECK(absl::StrContains(answer, c.code));  // a string, as OpenAI's are
    const std::string sample = absl::StrCat("cacheroute_gateway_refusals_total{status=\"", c.status,
                                            "\",reason=\"", c.reason, "\"}");
    expected[sample] += 1;
    httplib::Result metrics = client.Get("/metrics");
    REQUIRE(metrics);
    CHECK(SampleValue(metrics->body, sample) == expected[sample]);
  }
  // None of them reached the upstream or counted as an answered request.
  CHECK(fleet.upstreams[0]->requests() == 0);
  httplib::Result metrics = client.Get("/metrics");
  REQUIRE(metrics);
  CHECK(SampleValue(metrics->body,
                    "cacheroute_gateway_requests_total{endpoint=\"completions\",code=\"4xx\"}") ==
        0);
}

TEST_CASE("GET /v1/models/{id}: the upstream list's entry, or 404 model_not_found") {
  Fleet fleet(2);
  testing::TempDir dir("gateway_model_retrieve");
  std::unique_ptr<Gateway> gateway = StartKeyedGateway(fleet, dir);
  httplib::Client client = ClientFor(*gateway);
  client.set_default_headers({{"Authorization", "Bearer sk-alpha"}});
  httplib::Result model = client.Get("/v1/models/fake");
  REQUIRE(model);
  CHECK(model->status == 200);
  const std::string destination = model->get_header_value("X-CacheRoute-Destination");
  CHECK(model->body == absl::StrCat(R"({"id":"fake","owned_by":")", destination, R"("})"));
  CHECK(model->get_header_value("Content-Type") == "application/json");
  httplib::Result unknown = client.Get("/v1/models/no-such-model");
  REQUIRE(unknown);
  CHECK(unknown->status == 404);
  CHECK(absl::StrContains(unknown->body, R"("code":"model_not_found")"));
  CHECK(absl::StrContains(unknown->body, "no-such-model"));
  CHECK(absl::StrContains(unknown->body, R"("type":"invalid_request_error")"));
  // The SDKs percent-encode the id: "%66ake" is "fake".
  httplib::Result encoded = client.Get("/v1/models/%66ake");
  REQUIRE(encoded);
  CHECK(encoded->status == 200);
  httplib::Result anonymous = ClientFor(*gateway).Get("/v1/models/fake");
  REQUIRE(anonymous);
  CHECK(anonymous->status == 401);
  httplib::Result metrics = client.Get("/metrics");
  REQUIRE(metrics);
  CHECK(SampleValue(metrics->body,
                    "cacheroute_gateway_requests_total{endpoint=\"models\",code=\"2xx\"}") == 2);
  CHECK(SampleValue(metrics->body,
                    "cacheroute_gateway_requests_total{endpoint=\"models\",code=\"4xx\"}") == 1);
}

TEST_CASE("drain: /healthz turns 503, the listener closes, an open stream still finishes") {
  Fleet fleet(1);
  GatewayConfig config = ConfigFor(fleet, "sticky");
  config.drain_delay = absl::Milliseconds(300);
  std::unique_ptr<Gateway> gateway = StartGateway(config);
  FakeUpstream& upstream = *fleet.upstreams[0];

  // A stream the upstream holds after its first event.
  std::string received;
  std::atomic<bool> first_seen{false};
  std::thread client_thread([&] {
    httplib::Client client("127.0.0.1", gateway->port());
    client.set_read_timeout(30, 0);
    httplib::Request request;
    request.method = "POST";
    request.path = "/v1/completions";
    request.headers = {{"Content-Type", "application/json"}};
    request.body = R"({"model":"fake","prompt":"Hi","stream":true,"user":"t"})";
    request.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
      received.append(data, size);
      first_seen = true;
      return true;
    };
    httplib::Response response;
    httplib::Error error = httplib::Error::Success;
    client.send(request, response, error);
  });
  REQUIRE(Eventually([&] { return first_seen.load(); }));
  REQUIRE(gateway->open_streams() == 1);

  std::atomic<bool> drained{false}, drain_result{false};
  std::thread drainer([&] {
    drain_result = gateway->Drain();
    drained = true;
  });
  // During drain_delay the gateway still serves, and says it is going.
  REQUIRE(Eventually([&] {
    httplib::Client probe("127.0.0.1", gateway->port());
    httplib::Result r = probe.Get("/healthz");
    return r && r->status == 503;
  }));
  // Then new connections are refused while the stream is still open.
  REQUIRE(Eventually([&] {
    httplib::Client probe("127.0.0.1", gateway->port());
    probe.set_connection_timeout(0, 200'000);
    return !probe.Get("/healthz");
  }));
  CHECK_FALSE(drained.load());
  upstream.SawFirstEvent();  // the upstream sends the rest
  client_thread.join();
  drainer.join();
  CHECK(drain_result.load());
  std::string expected;
  for (const std::string& event : FakeUpstream::SseEvents()) expected += event;
  CHECK(received == expected);
  CHECK(gateway->RouterStats().in_flight[0] == 0);
}

TEST_CASE("the cacheroute-gateway binary serves on the port it logs") {
  Fleet fleet(2);
  testing::TempDir dir("gateway_test");
  const std::string log = dir.File("gateway.log");
  std::vector<std::string> args = {CACHEROUTE_GATEWAY_PATH, "--listen", "127.0.0.1:0", "--policy",
                                   "cacheroute"};
  for (const frontend::Upstream& u : fleet.Config()) {
    args.push_back("--upstream");
    args.push_back(u.name + "=" + u.url);
  }
  std::unique_ptr<eval::ChildProcess> child =
      testing::RequireOk(eval::ChildProcess::Spawn(std::move(args), {.stderr_path = log}));
  const std::string started = testing::RequireOk(
      eval::AwaitLogLine(*child, log, "started gateway port=", std::chrono::seconds(60)));
  INFO(eval::ReadTextFile(log));
  // cacheroute without a planner says so (before it starts serving)
  CHECK(eval::ReadTextFile(log).find("no_planner") != std::string::npos);
  const int port = eval::LogNumber(started, "port").value_or(0);
  REQUIRE(port > 0);
  httplib::Client client("127.0.0.1", port);
  Reply reply = Send(client, "tenant-1");
  CHECK(reply.status == 200);
  CHECK((reply.destination == "u0" || reply.destination == "u1"));
  const int status = child->Stop(SIGTERM, std::chrono::seconds(60));
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

// The planner's current destination names.
std::vector<std::string> PlannerDestinations(InProcessPlanner& planner) {
  const v1::GetStatusResponse status = planner.Status();
  return {status.destinations().begin(), status.destinations().end()};
}

// Writes `upstreams` as an upstreams_file, atomically (a temporary file, then rename), as a
// ConfigMap update or a configuration tool would.
void WriteUpstreamsFile(const std::string& path, const std::vector<frontend::Upstream>& upstreams) {
  std::string text = "upstreams:\n";
  for (const frontend::Upstream& u : upstreams)
    absl::StrAppend(&text, "  - {name: ", u.name, ", url: \"", u.url, "\"}\n");
  {
    std::ofstream out(path + ".tmp");
    out << text;
  }
  REQUIRE(std::rename((path + ".tmp").c_str(), path.c_str()) == 0);
}

// Requests of `n` distinct cold keys; the destinations that answered, with their counts.
std::map<std::string, int> SpreadOf(Gateway& gateway, int n, const std::string& prefix) {
  httplib::Client client = ClientFor(gateway);
  std::map<std::string, int> seen;
  for (int i = 0; i < n; ++i) {
    const Reply reply = Send(client, absl::StrCat(prefix, i));
    REQUIRE(reply.status == 200);
    ++seen[reply.destination];
  }
  return seen;
}

TEST_CASE("upstreams_file: members added and removed reach the gateway and the planner's table") {
  Fleet fleet(3);
  testing::TempDir dir("gateway-members-file");
  const std::string path = dir.File("upstreams.yaml");
  const std::vector<frontend::Upstream> all = fleet.Config();
  WriteUpstreamsFile(path, {all[0], all[1]});
  service::PlannerConfig planner_config = PlannerFor({"u0", "u1"});
  planner_config.slots_per_destination = 4;  // every hot key admitted, with 2 members or 3
  InProcessPlanner planner(planner_config);
  GatewayConfig config = ConfigFor(fleet, planner, "gw-members");
  config.upstreams.clear();
  config.upstreams_file = path;
  config.membership_interval = absl::Milliseconds(50);
  std::unique_ptr<Gateway> gateway = StartGateway(config);
  CHECK(gateway->DestinationNames() == std::vector<std::string>{"u0", "u1"});
  PlanFromTraffic(planner, *gateway, kHot, 20, 8);
  for (const std::string& key : kHot) CHECK_FALSE(TableDestination(*gateway, key).empty());

  // u2 joins: the gateway routes to it, and the planner, told by the gateway, plans on it.
  WriteUpstreamsFile(path, all);
  REQUIRE(Eventually([&] { return gateway->DestinationNames().size() == 3; }));
  REQUIRE(Eventually([&] { return PlannerDestinations(planner).size() == 3; }));
  CHECK(PlannerDestinations(planner) == std::vector<std::string>{"u0", "u1", "u2"});
  CHECK(SpreadOf(*gateway, 60, "joined-").count("u2") == 1);
  PlanFromTraffic(planner, *gateway, kHot, 20, 0);
  CHECK(gateway->table()->destination_count() == 3);

  // u0 leaves: no request reaches it any more; its planned keys are placed again, the other
  // keys stay where they were (but for balance).
  std::map<std::string, std::string> before;
  for (const std::string& key : kHot) before[key] = TableDestination(*gateway, key);
  WriteUpstreamsFile(path, {all[1], all[2]});
  REQUIRE(Eventually([&] { return gateway->DestinationNames().size() == 2; }));
  REQUIRE(Eventually([&] { return PlannerDestinations(planner).size() == 2; }));
  const int u0_requests = fleet.upstreams[0]->requests();
  const std::map<std::string, int> spread = SpreadOf(*gateway, 40, "after-");
  CHECK(spread.count("u0") == 0);
  CHECK(fleet.upstreams[0]->requests() == u0_requests);
  REQUIRE(Eventually(
      [&] { return gateway->table() != nullptr && gateway->table()->destination_count() == 2; }));
  // (Hysteresis keeps a key in place unless that would leave its destination more than 10%
  // above the mean, so with four keys on two members one may move for balance: planner_core_test
  // measures the rule on 60 keys.)
  int moved = 0;
  for (const std::string& key : kHot) {
    const std::string now = TableDestination(*gateway, key);
    INFO(key << " was on " << before[key] << ", now " << now);
    CHECK(now != "u0");
    if (before[key] != "u0" && now != before[key]) ++moved;
  }
  CHECK(moved <= 1);

  // A file that breaks keeps the members it had.
  {
    std::ofstream out(path);
    out << "upstreams: [ {name: u1\n";
  }
  const std::map<std::string, int> kept = SpreadOf(*gateway, 20, "broken-");
  CHECK(kept.count("u0") == 0);
  CHECK(gateway->DestinationNames().size() == 2);
  CHECK(absl::StrContains(gateway->RenderMetrics(), "cacheroute_gateway_members 2\n"));
}

TEST_CASE("upstreams_dns: addresses that come and go reach the gateway and the planner") {
  // Two engines on one port of two loopback addresses, as pods behind a headless Service.
  FakeUpstream a("a", "127.0.0.2");
  FakeUpstream b("b", "127.0.0.3", a.port());
  const std::string name_a = absl::StrCat("127.0.0.2:", a.port());
  const std::string name_b = absl::StrCat("127.0.0.3:", a.port());
  testing::DnsServer dns;
  dns.SetA("engines.serving.test", {"127.0.0.2"});
  InProcessPlanner planner(PlannerFor({"seed"}));
  GatewayConfig config;
  config.listen = "127.0.0.1:0";
  config.upstreams_dns = absl::StrCat("engines.serving.test:", a.port());
  config.dns_server = absl::StrCat("127.0.0.1:", dns.port());
  config.membership_interval = absl::Milliseconds(50);
  config.planner = {planner.target()};
  config.gateway_id = "gw-dns";
  config.report_interval = absl::Milliseconds(50);
  std::unique_ptr<Gateway> gateway = StartGateway(config);
  CHECK(gateway->DestinationNames() == std::vector<std::string>{name_a});
  REQUIRE(
      Eventually([&] { return PlannerDestinations(planner) == std::vector<std::string>{name_a}; }));
  CHECK(SpreadOf(*gateway, 10, "one-") == std::map<std::string, int>{{name_a, 10}});

  dns.SetA("engines.serving.test", {"127.0.0.3", "127.0.0.2"});
  REQUIRE(Eventually([&] { return gateway->DestinationNames().size() == 2; }));
  REQUIRE(Eventually([&] { return PlannerDestinations(planner).size() == 2; }));
  CHECK(SpreadOf(*gateway, 60, "two-").size() == 2);
  const uint64_t number = planner.Replan().version().number();
  REQUIRE(Eventually([&] { return TableNumber(*gateway) >= number; }));
  CHECK(gateway->SubscriberStats()->nacks == 0);

  dns.SetA("engines.serving.test", {"127.0.0.3"});
  REQUIRE(
      Eventually([&] { return gateway->DestinationNames() == std::vector<std::string>{name_b}; }));
  REQUIRE(
      Eventually([&] { return PlannerDestinations(planner) == std::vector<std::string>{name_b}; }));
  CHECK(SpreadOf(*gateway, 20, "b-") == std::map<std::string, int>{{name_b, 20}});

  // The name gone from DNS (NXDOMAIN) or the server silent: the members are kept.
  dns.Remove("engines.serving.test");
  CHECK(SpreadOf(*gateway, 10, "gone-") == std::map<std::string, int>{{name_b, 10}});
  CHECK(gateway->DestinationNames() == std::vector<std::string>{name_b});
}

TEST_CASE(
    "active health checks: a failing /health marks an up upstream down, a slow one does not") {
  Fleet fleet(2);
  GatewayConfig config = ConfigFor(fleet, "flatlb");
  config.health_check_interval = absl::Milliseconds(30);
  config.health_check_timeout = absl::Seconds(2);
  std::unique_ptr<Gateway> gateway = StartGateway(config);
  fleet.upstreams[0]->set_health_status(503);
  // A queue at u1: its completions take 300 ms, its /health answers at once.
  fleet.upstreams[1]->set_header_delay(std::chrono::milliseconds(300));
  REQUIRE(Eventually([&] { return !gateway->RouterStats().up[0]; }));
  CHECK(
      absl::StrContains(gateway->RenderMetrics(),
                        "cacheroute_gateway_health_check_failures_total{destination=\"u0\"} 2\n"));
  {
    httplib::Client client = ClientFor(*gateway);
    for (int i = 0; i < 3; ++i) CHECK(Send(client, absl::StrCat("k", i)).destination == "u1");
  }
  const int checks = fleet.upstreams[1]->health_requests();
  REQUIRE(Eventually([&] { return fleet.upstreams[1]->health_requests() >= checks + 5; }));
  CHECK(gateway->RouterStats().up[1]);
  // /health healthy again: the prober brings u0 back.
  fleet.upstreams[0]->set_health_status(200);
  REQUIRE(Eventually([&]() -> bool { return gateway->RouterStats().up[0]; }));  // not the proxy
}

}  // namespace
}  // namespace cacheroute::gateway

namespace cacheroute::gateway {
namespace {

// A completion with a long prompt (its prefill saturates a destination at shed_saturation_tokens
// 1) and the objective header when `objective` is set.
httplib::Result SendObjective(httplib::Client& client, const std::string& objective) {
  httplib::Headers headers;
  if (!objective.empty()) headers.emplace("x-gateway-inference-objective", objective);
  const std::string body = absl::StrCat(R"({"model":"fake","prompt":")", std::string(4000, 'x'),
                                        R"(","max_tokens":1})");
  return client.Post("/v1/completions", headers, body, "application/json");
}

std::string MetricsPage(const Gateway& gateway) {
  httplib::Client client = ClientFor(gateway);
  httplib::Result page = client.Get("/metrics");
  return page ? page->body : "";
}

TEST_CASE("shed: a saturated fleet answers 429 with Retry-After, queues by priority, admits") {
  Fleet fleet(1);
  GatewayConfig config = ConfigFor(fleet);
  config.shed = true;
  config.shed_saturation_tokens = 1;  // any queued prefill saturates the one destination
  config.shed_queue_capacity = 1;
  config.shed_queue_timeout = absl::Seconds(60);
  config.shed_retry_after = absl::Milliseconds(2500);
  config.objectives = {{"batch", -1}, {"chat", 5}};
  std::unique_ptr<Gateway> gateway = StartGateway(config);
  FakeUpstream& upstream = *fleet.upstreams[0];

  // A: admitted, held at the engine before its first byte: its prefill is queued there.
  upstream.Hold();
  std::thread a([&] {
    httplib::Client client = ClientFor(*gateway);
    httplib::Result r = SendObjective(client, "");
    CHECK((r && r->status == 200));
  });
  REQUIRE(Eventually([&] { return upstream.arrived() == 1; }));

  // B, sheddable: 429 at once, in OpenAI's rate-limit shape, with Retry-After in whole seconds.
  httplib::Client client = ClientFor(*gateway);
  httplib::Result b = SendObjective(client, "batch");
  REQUIRE(b);
  CHECK(b->status == 429);
  CHECK(b->get_header_value("Retry-After") == "3");
  CHECK_THAT(b->body, Catch::Contains(R"("type":"requests")") &&
                          Catch::Contains(R"("code":"rate_limit_exceeded")") &&
                          Catch::Contains("sheddable"));

  // C, priority 0: waits in the queue (its one place) without reaching the engine.
  std::thread c([&] {
    httplib::Client own = ClientFor(*gateway);
    httplib::Result r = SendObjective(own, "");
    CHECK((r && r->status == 200));
  });
  REQUIRE(Eventually(
      [&] { return absl::StrContains(MetricsPage(*gateway), "admission_queue_length 1\n"); }));
  CHECK(upstream.arrived() == 1);

  // D, priority 0 too: the queue is full of its priority, so 429 queue_full.
  httplib::Result d = SendObjective(client, "");
  REQUIRE(d);
  CHECK(d->status == 429);
  CHECK_THAT(d->body, Catch::Contains("queue_full"));

  // A's first byte frees the room: C is admitted and answered.
  upstream.Release();
  a.join();
  c.join();
  CHECK(upstream.arrived() == 2);

  const std::string page = MetricsPage(*gateway);
  CHECK_THAT(page, Catch::Contains("cacheroute_gateway_admission_admitted_total{priority=\"0\"} 2"));
  CHECK_THAT(page, Catch::Contains("cacheroute_gateway_admission_queued_total{priority=\"0\"} 1"));
  CHECK_THAT(page, Catch::Contains("cacheroute_gateway_admission_shed_total{priority=\"-1\","
                                   "reason=\"sheddable\"} 1"));
  CHECK_THAT(page, Catch::Contains("cacheroute_gateway_admission_shed_total{priority=\"0\","
                                   "reason=\"queue_full\"} 1"));
  CHECK_THAT(page, Catch::Contains("cacheroute_gateway_admission_queue_length 0"));
}

TEST_CASE("shed: a queued request whose client closes leaves the queue, never reaching the engine") {
  Fleet fleet(1);
  GatewayConfig config = ConfigFor(fleet);
  config.shed = true;
  config.shed_saturation_tokens = 1;  // any queued prefill saturates the one destination
  config.shed_queue_capacity = 4;
  config.shed_queue_timeout = absl::Seconds(600);  // only the client's going can end its wait
  std::unique_ptr<Gateway> gateway = StartGateway(config);
  FakeUpstream& upstream = *fleet.upstreams[0];

  // A: admitted, held at the engine before its first byte: the fleet stays saturated.
  upstream.Hold();
  std::atomic<int> a_status{0};
  std::thread a([&] {
    httplib::Client client = ClientFor(*gateway);
    httplib::Result r = SendObjective(client, "");
    a_status = r ? r->status : -1;
  });
  REQUIRE(Eventually([&] { return upstream.arrived() == 1; }));

  // B, on a raw connection: its whole request sent, it waits in the queue; then its client closes.
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(gateway->port()));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0);
  const std::string body = absl::StrCat(R"({"model":"fake","prompt":")", std::string(4000, 'x'),
                                        R"(","max_tokens":1})");
  const std::string request = absl::StrCat(
      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
      "Content-Length: ",
      body.size(), "\r\n\r\n", body);
  REQUIRE(::send(fd, request.data(), request.size(), MSG_NOSIGNAL) ==
          static_cast<ssize_t>(request.size()));
  REQUIRE(Eventually(
      [&] { return absl::StrContains(MetricsPage(*gateway), "admission_queue_length 1\n"); }));
  ::close(fd);

  // It leaves the queue without waiting for room or for its deadline, counted as client_gone.
  REQUIRE(Eventually(
      [&] { return absl::StrContains(MetricsPage(*gateway), "admission_queue_length 0\n"); }));
  const std::string page = MetricsPage(*gateway);
  CHECK_THAT(page, Catch::Contains("cacheroute_gateway_admission_shed_total{priority=\"0\","
                                   "reason=\"client_gone\"} 1"));
  CHECK_THAT(page, Catch::Contains("cacheroute_gateway_admission_admitted_total{priority=\"0\"} 1"));

  // A's end frees the room; nobody is left to admit: the engine saw A alone.
  upstream.Release();
  a.join();
  CHECK(a_status == 200);
  CHECK(upstream.arrived() == 1);
}

TEST_CASE("shed off (the default): a busy fleet sends every request on") {
  Fleet fleet(1);
  std::unique_ptr<Gateway> gateway = StartGateway(ConfigFor(fleet));
  FakeUpstream& upstream = *fleet.upstreams[0];
  upstream.Hold();
  std::vector<std::thread> clients;
  for (int i = 0; i < 3; ++i) {
    clients.emplace_back([&] {
      httplib::Client own = ClientFor(*gateway);
      httplib::Result r = SendObjective(own, "batch");
      CHECK((r && r->status == 200));
    });
  }
  REQUIRE(Eventually([&] { return upstream.arrived() == 3; }));
  upstream.Release();
  for (std::thread& t : clients) t.join();
  CHECK_THAT(MetricsPage(*gateway), !Catch::Contains("admission_"));
}

}  // namespace
}  // namespace cacheroute::gateway
