// Planner replicas on etcd (planner/service/ha_replica.h, docs/ha.md): real cacheroute-planner
// processes (so that kill -9 and SIGSTOP are real) against a real single-member etcd
// (tests/support/etcd_process.h), over real gRPC on loopback. Every wait is Eventually with a
// generous bound; nothing asserts on how long anything took.
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cacheroute/dataplane/grpc/table_subscriber.h"
#include "cacheroute/v1/admin.grpc.pb.h"
#include "cacheroute/v1/rates.grpc.pb.h"
#include "cacheroute/v1/table.grpc.pb.h"
#include "planner/coord/etcd_client.h"
#include "tests/support/etcd_process.h"
#include "tests/support/eventually.h"
#include "tests/support/json_reader.h"
#include "tests/support/rate_reports.h"
#include "tests/support/require_ok.h"
#include "tests/support/run_command.h"
#include "tests/support/subscriber_options.h"
#include "tests/support/temp_dir.h"
#include "tools/eval/child_process.h"
#include "tools/eval/planner_replica_client.h"

namespace cacheroute {
namespace {

using testing::Eventually;
using testing::EtcdProcess;
using testing::TempDir;

constexpr char kPrefix[] = "/cacheroute/test/";

// One cacheroute-planner process; its log goes to a file, its ports come from the "started" line.
class Replica : public eval::PlannerReplicaClient {
 public:
  Replica(TempDir& dir, const std::string& id, const std::string& etcd_endpoint,
          const std::string& control_interval = "300ms")
      : id_(id), log_(dir.File(id + ".log")), config_(dir.File(id + ".yaml")) {
    std::ofstream(config_) << "destinations: 4\n"
                           << "listen: 127.0.0.1:0\n"
                           << "metrics_listen: 127.0.0.1:0\n"
                           << "control_interval: " << control_interval << "\n"
                           << "rate_smoothing: 1s\n"
                           << "etcd:\n"
                           << "  endpoints: [" << etcd_endpoint << "]\n"
                           << "  key_prefix: " << kPrefix << "\n"
                           << "  lease_ttl_seconds: 1\n"
                           << "  replica_id: " << id << "\n";
    Start();
  }
  ~Replica() { Kill(); }

  void Start() {
    child_ =
        testing::RequireOk(eval::ChildProcess::Spawn({CACHEROUTE_PLANNER_PATH, "--config", config_},
                                                     {.stdout_path = log_, .stderr_path = log_}));
    const std::string started = testing::RequireOk(
        eval::AwaitLogLine(*child_, log_, " started ", std::chrono::seconds(60)));
    port_ = eval::LogNumber(started, "port").value_or(0);
    metrics_port_ = eval::LogNumber(started, "metrics_port").value_or(0);
    REQUIRE((port_ > 0 && metrics_port_ > 0));
    Connect(absl::StrCat("127.0.0.1:", port_));
  }
  void Kill() {
    if (child_ != nullptr) child_->Kill();
  }
  void Signal(int signal) { REQUIRE(child_->Signal(signal)); }
  // SIGTERM and wait for the clean exit.
  int Terminate() {
    Signal(SIGTERM);
    return child_->Wait();
  }

  const std::string& id() const { return id_; }
  std::string Log() const { return eval::ReadTextFile(log_); }

  // GET /readyz: the HTTP status (0 when unreachable).
  int Ready(std::string* body = nullptr) const {
    httplib::Client client("127.0.0.1", metrics_port_);
    client.set_connection_timeout(2);
    client.set_read_timeout(2);
    auto result = client.Get("/readyz");
    if (!result) return 0;
    if (body != nullptr) *body = result->body;
    return result->status;
  }

 private:
  std::string id_;
  std::string log_;
  std::string config_;
  std::unique_ptr<eval::ChildProcess> child_;
  int port_ = 0;
  int metrics_port_ = 0;
};

// The one replica (of those alive) that says it leads, or null.
Replica* LeaderOf(const std::vector<Replica*>& replicas) {
  Replica* leader = nullptr;
  int leaders = 0;
  for (Replica* r : replicas) {
    if (r->IsLeader()) {
      leader = r;
      ++leaders;
    }
  }
  return leaders == 1 ? leader : nullptr;
}

// The version etcd holds in <prefix>version ("epoch.number"): its number, 0 when none.
uint64_t EtcdVersion(coord::EtcdClient& client, uint64_t* epoch = nullptr) {
  auto got = client.Get(absl::StrCat(kPrefix, "version"));
  if (!got.ok() || !got->kv.has_value()) return 0;
  const std::string& v = got->kv->value;
  if (epoch != nullptr) *epoch = std::stoull(v.substr(0, v.find('.')));
  return std::stoull(v.substr(v.find('.') + 1));
}

// What each test here starts from: a real etcd, a client of it (to read what the replicas
// publish) and a directory for the replicas' configurations and logs.
struct EtcdSetup {
  EtcdProcess etcd;
  std::unique_ptr<coord::EtcdClient> client =
      testing::RequireOk(coord::EtcdClient::Create({.endpoints = {etcd.endpoint()}}));
  TempDir dir{"cacheroute-ha"};
};

// An EtcdSetup with replicas "a" and "b" on its etcd, waited for until one of them leads:
// `leader`, and `other`.
struct TwoReplicas : EtcdSetup {
  TwoReplicas() : a(dir, "a", etcd.endpoint()), b(dir, "b", etcd.endpoint()) {
    REQUIRE(Eventually([&] { return (leader = LeaderOf(all)) != nullptr; }));
    other = leader == &a ? &b : &a;
  }

  Replica a;
  Replica b;
  std::vector<Replica*> all = {&a, &b};
  Replica* leader = nullptr;
  Replica* other = nullptr;
};

// A gateway's table subscription: a Router fed by the real TableSubscriber, and a sampler that
// records whether the Router ever lost its table and whether versions ever went back.
struct Subscriber {
  explicit Subscriber(std::shared_ptr<grpc::Channel> channel)
      : random(5),
        router({.destination_count = 4, .capacity = 0, .table_ttl = std::chrono::seconds(60)},
               random),
        subscriber(channel, router, Options()) {
    REQUIRE(subscriber.Start().ok);
    sampler = std::thread([this] {
      while (!stop) {
        auto table = router.table();
        if (table == nullptr) {
          if (seen_table) lost_table = true;
        } else {
          seen_table = true;
          const uint64_t v = table->version().number;
          if (v < last_version) went_back = true;
          last_version = v;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    });
  }
  static dataplane::TableSubscriberOptions Options() {
    dataplane::TableSubscriberOptions options =
        testing::QuickSubscriberOptions("gw-sub", {"0", "1", "2", "3"});
    options.refresh_period = std::chrono::milliseconds(50);
    return options;
  }
  ~Subscriber() {
    stop = true;
    sampler.join();
    subscriber.Stop();
  }
  dataplane::SeededRandom random;
  dataplane::Router router;
  dataplane::TableSubscriber subscriber;
  std::thread sampler;
  std::atomic<bool> stop{false};
  std::atomic<bool> seen_table{false};
  std::atomic<bool> lost_table{false};
  std::atomic<bool> went_back{false};
  std::atomic<uint64_t> last_version{0};
};

TEST_CASE("kill -9 of the leader: a follower takes over, versions go on, no report lost or doubled") {
  CACHEROUTE_SKIP_WITHOUT_ETCD();
  EtcdSetup setup;
  std::vector<std::unique_ptr<Replica>> owned;
  for (const char* id : {"p0", "p1", "p2"}) {
    owned.push_back(std::make_unique<Replica>(setup.dir, id, setup.etcd.endpoint()));
  }
  std::vector<Replica*> all = {owned[0].get(), owned[1].get(), owned[2].get()};
  Replica* leader = nullptr;
  REQUIRE(Eventually([&] { return (leader = LeaderOf(all)) != nullptr; }));
  for (Replica* r : all) {
    INFO(r->id() << "\n" << r->Log());
    REQUIRE(Eventually([&] { return r->Ready() == 200; }));
    CHECK(r->Status()->ha().leader_id() == leader->id());
  }
  std::vector<Replica*> followers;
  for (Replica* r : all) {
    if (r != leader) followers.push_back(r);
  }

  // Admin writes on a follower reach the leader; the forced gate state rides on the table.
  v1::ReplanResponse replanned;
  REQUIRE(followers[0]->Replan(&replanned).ok());
  v1::GateStatus gate;
  REQUIRE(followers[0]->ForceGate("canary", "test", &gate).ok());
  CHECK(gate.forced_state() == "canary");
  REQUIRE(Eventually([&] { return followers[1]->Version() == EtcdVersion(*setup.client); }));

  // A gateway streams from a follower that survives; a reporter sends numbered reports to
  // every replica in turn, retrying a failed one (same sequence) on the next replica.
  Subscriber subscriber(followers[0]->channel());
  REQUIRE(Eventually([&] { return subscriber.seen_table.load(); }));
  std::atomic<bool> stop_reports{false};
  std::atomic<uint64_t> acknowledged{0};
  std::atomic<Replica*> dead{nullptr};
  std::thread reporter([&] {
    uint64_t sequence = 1;
    size_t next = 0;
    while (!stop_reports) {
      Replica* target = all[next++ % all.size()];
      if (target == dead.load()) continue;
      const v1::ReportRatesRequest report =
          testing::MakeRateReport("gw-rep", sequence, absl::Now(), {{"hot", 5}, {"warm", 1}});
      if (target->Report(report).ok()) acknowledged = sequence++;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  REQUIRE(Eventually([&] { return acknowledged.load() >= 50; }));

  dead = leader;
  leader->Kill();
  // Everything the old leader ever published is at or below what etcd holds now.
  uint64_t epoch = 0;
  const uint64_t before = EtcdVersion(*setup.client, &epoch);
  REQUIRE(before > 0);
  Replica* successor = nullptr;
  REQUIRE(Eventually([&] { return (successor = LeaderOf(followers)) != nullptr; }));
  REQUIRE(Eventually([&] { return successor->Version() > before; }));
  const uint64_t at_ack = acknowledged.load();
  REQUIRE(Eventually([&] { return acknowledged.load() >= at_ack + 50; }));
  stop_reports = true;
  reporter.join();

  // The new leader's first version follows every earlier one, in the same epoch; the gate's
  // forced state survived; the gateway never lost its table and never went back.
  auto status = successor->Status();
  REQUIRE(status.has_value());
  CHECK(status->version().number() > before);
  CHECK(status->version().epoch() == epoch);  // the history carried over
  CHECK(status->gate().forced_state() == "canary");
  REQUIRE(Eventually([&] { return subscriber.last_version.load() > before; }));
  CHECK_FALSE(subscriber.lost_table.load());
  CHECK_FALSE(subscriber.went_back.load());

  // Every acknowledged report counted exactly once by both survivors (sequences 1 … N, each
  // acknowledged once; a retried one is a duplicate, not a second count).
  const uint64_t n = acknowledged.load();
  for (Replica* r : followers) {
    INFO(r->id());
    REQUIRE(Eventually([&] {
      auto s = r->Status();
      return s && s->reports_accepted() >= n;
    }));
    auto s = r->Status();
    CHECK(s->reports_accepted() == n);
    bool found = false;
    for (const auto& g : s->gateways()) {
      if (g.gateway_id() == "gw-rep") {
        found = true;
        CHECK(g.last_sequence() == n);
      }
    }
    CHECK(found);
  }

  // cacheroutectl, given the dead leader's address first, answers from the next replica and shows
  // its part: the successor leads; the other follows it.
  const auto ctl = [](const std::string& planners, const std::string& format) {
    const testing::CommandResult run = testing::RunCommand(
        CACHEROUTECTL_PATH, {"--planner", planners, "status", "--format", format});
    return run.out + run.err;
  };
  const std::string json = ctl(absl::StrCat(dead.load()->address(), ",", successor->address()), "json");
  INFO(json);
  const std::optional<client::testing::JsonValue> doc = client::testing::ParseJson(json);
  REQUIRE(doc.has_value());
  const client::testing::JsonValue* replica = doc->Find("replica");
  REQUIRE(replica != nullptr);
  CHECK(replica->Find("role")->string == "leader");
  CHECK(replica->Find("replica_id")->string == successor->id());
  CHECK(replica->Find("ready")->boolean);
  CHECK(doc->Find("reports_accepted")->number == static_cast<double>(n));
  for (Replica* r : followers) {
    if (r == successor) continue;
    const std::string text = ctl(r->address(), "table");
    INFO(text);
    CHECK(absl::StrContains(text, absl::StrCat(r->id(), ", follower; leader ", successor->id())));
    CHECK(absl::StrContains(text, "table watch live"));
  }
}

TEST_CASE("a leader frozen past its lease publishes nothing after SIGCONT and follows") {
  CACHEROUTE_SKIP_WITHOUT_ETCD();
  TwoReplicas setup;
  Replica* leader = setup.leader;
  Replica* other = setup.other;
  REQUIRE(Eventually([&] { return other->Ready() == 200 && EtcdVersion(*setup.client) > 0; }));
  const std::string published_by = absl::StrCat(kPrefix, "published_by");

  leader->Signal(SIGSTOP);
  REQUIRE(Eventually([&] { return other->IsLeader(); }));
  REQUIRE(Eventually([&] {
    auto got = setup.client->Get(published_by);
    return got.ok() && got->kv.has_value() && got->kv->value == other->id();
  }));
  // From here on, every publish must be the new leader's.
  auto from = setup.client->Get(published_by);
  REQUIRE(from.ok());
  std::mutex mu;
  std::vector<std::string> writers;
  auto watch = setup.client->Watch(published_by, from->revision + 1,
                                   {.on_events =
                                        [&](const std::vector<coord::WatchEvent>& events, int64_t) {
                                          std::lock_guard<std::mutex> lock(mu);
                                          for (const auto& e : events)
                                            writers.push_back(e.kv.value);
                                        },
                                    .on_broken = [](const absl::Status&, int64_t) {}});
  REQUIRE(watch.ok());

  leader->Signal(SIGCONT);
  // The resumed replica follows: a Replan sent to it goes to the new leader.
  REQUIRE(Eventually([&] {
    auto s = leader->Status();
    return s && s->ha().role() == "follower" && s->ha().leader_id() == other->id();
  }));
  v1::ReplanResponse replanned;
  CHECK(leader->Replan(&replanned).ok());
  const uint64_t after = EtcdVersion(*setup.client);
  REQUIRE(Eventually([&] { return leader->Version() >= after && other->Version() >= after; }));
  (*watch)->Cancel();
  std::lock_guard<std::mutex> lock(mu);
  for (const std::string& w : writers) CHECK(w == other->id());
  CHECK(other->IsLeader());
  CHECK_FALSE(leader->IsLeader());
}

TEST_CASE("etcd paused: replicas keep serving the last table, publish nothing, then resume") {
  CACHEROUTE_SKIP_WITHOUT_ETCD();
  TwoReplicas setup;
  Replica& a = setup.a;
  Replica& b = setup.b;
  const std::vector<Replica*>& all = setup.all;
  Replica* leader = setup.leader;
  REQUIRE(Eventually([&] { return a.Ready() == 200 && b.Ready() == 200; }));
  REQUIRE(Eventually([&] { return a.Version() == b.Version() && a.Version() > 0; }));
  const uint64_t version = a.Version();
  Subscriber subscriber(b.channel());
  REQUIRE(Eventually([&] { return subscriber.seen_table.load(); }));

  setup.etcd.Pause();
  // Leadership lapses (nobody can renew); a write is refused and publishes nothing; a report
  // is not accepted (the gateway keeps it and retries).
  REQUIRE(Eventually([&] { return !a.IsLeader() && !b.IsLeader(); }));
  v1::GateStatus gate;
  CHECK_FALSE(leader->ForceGate("enabled", "test", &gate).ok());
  const v1::ReportRatesRequest report =
      testing::MakeRateReport("gw-down", 1, absl::Now(), {{"k", 1}});
  const grpc::Status reported = a.Report(report);
  CHECK(reported.error_code() == grpc::StatusCode::UNAVAILABLE);
  // Both keep serving the last table for the whole outage (about 30 s).
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < until) {
    for (Replica* r : all) {
      auto s = r->Status();
      REQUIRE(s.has_value());
      CHECK(s->version().number() == version);
    }
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
  CHECK_FALSE(subscriber.lost_table.load());
  // Both stay ready: a replica that has synced with etcd keeps serving the last table through an
  // outage, and readiness says so (else the Service would drop every replica at once); its
  // status says the watch is down.
  CHECK(a.Ready() == 200);
  CHECK(b.Ready() == 200);
  auto b_status = b.Status();
  REQUIRE(b_status.has_value());
  CHECK_FALSE(b_status->ha().table_watch_live());

  setup.etcd.Resume();
  REQUIRE(Eventually([&] { return (leader = LeaderOf(all)) != nullptr; }, std::chrono::seconds(60)));
  REQUIRE(
      Eventually([&] { return EtcdVersion(*setup.client) > version; }, std::chrono::seconds(60)));
  REQUIRE(Eventually(
      [&] { return a.Version() == EtcdVersion(*setup.client) && b.Version() == a.Version(); },
      std::chrono::seconds(60)));
  REQUIRE(Eventually([&] { return a.Ready() == 200 && b.Ready() == 200; },
                     std::chrono::seconds(60)));
  CHECK(a.Report(report).ok());
  CHECK_FALSE(subscriber.went_back.load());
  CHECK_FALSE(subscriber.lost_table.load());
}

TEST_CASE("SIGTERM: the leader resigns and another replica leads without waiting for the lease") {
  CACHEROUTE_SKIP_WITHOUT_ETCD();
  TwoReplicas setup;
  Replica* leader = setup.leader;
  Replica* other = setup.other;
  const uint64_t version = leader->Version();
  const int status = leader->Terminate();
  CHECK(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  INFO(other->Log());
  REQUIRE(Eventually([&] { return other->IsLeader(); }));
  REQUIRE(Eventually([&] { return other->Version() > version; }));
}

}  // namespace
}  // namespace cacheroute
