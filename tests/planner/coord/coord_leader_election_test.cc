// Tests for planner/coord/leader_election: two candidates in this process, each with its own
// EtcdClient (its own connection), against a real etcd (tests/support/etcd_process.h).
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "planner/coord/leader_election.h"
#include "tests/support/etcd_process.h"
#include "tests/support/eventually.h"

namespace cacheroute::coord {
namespace {

using testing::EtcdProcess;
using testing::Eventually;
using namespace std::chrono_literals;
using Kind = LeadershipChange::Kind;

constexpr const char* kPrefix = "/cacheroute/test/";

std::unique_ptr<EtcdClient> Connect(const std::string& endpoint,
                                    absl::Duration timeout = absl::Seconds(1)) {
  EtcdClient::Options options;
  options.endpoints = {endpoint};
  options.call_timeout = timeout;
  absl::StatusOr<std::unique_ptr<EtcdClient>> client = EtcdClient::Create(std::move(options));
  REQUIRE(client.ok());
  return *std::move(client);
}

// One replica: its client, its election and what its callback saw.
class Candidate {
 public:
  Candidate(const std::string& endpoint, const std::string& id, int64_t ttl_seconds,
            base::Clock* clock = nullptr)
      : id_(id), address_("10.0.0." + id.substr(id.size() - 1) + ":50051") {
    client_ = Connect(endpoint);
    LeaderElection::Options options;
    options.key_prefix = kPrefix;
    options.id = id;
    options.address = address_;
    options.lease_ttl_seconds = ttl_seconds;
    options.clock = clock;
    options.retry_interval = absl::Milliseconds(100);
    options.on_change = [this](const LeadershipChange& change) {
      std::lock_guard<std::mutex> lock(mu_);
      changes_.push_back(change);
    };
    election_ = std::make_unique<LeaderElection>(client_.get(), std::move(options));
  }
  ~Candidate() { election_.reset(); }  // before the client

  void Start() { REQUIRE(election_->Start().ok()); }
  LeaderElection& election() { return *election_; }
  LeaderInfo info() const { return LeaderInfo{id_, address_}; }

  std::vector<LeadershipChange> changes() {
    std::lock_guard<std::mutex> lock(mu_);
    return changes_;
  }
  int Count(Kind kind) {
    std::lock_guard<std::mutex> lock(mu_);
    int n = 0;
    for (const LeadershipChange& c : changes_) n += c.kind == kind;
    return n;
  }
  std::optional<LeadershipChange> Last(Kind kind) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = changes_.rbegin(); it != changes_.rend(); ++it) {
      if (it->kind == kind) return *it;
    }
    return std::nullopt;
  }

 private:
  std::string id_;
  std::string address_;
  std::unique_ptr<EtcdClient> client_;
  std::unique_ptr<LeaderElection> election_;
  std::mutex mu_;
  std::vector<LeadershipChange> changes_;
};

// Waits until exactly one of the two leads and the other names it; returns the leader.
Candidate* WaitForOneLeader(Candidate& a, Candidate& b) {
  Candidate* leader = nullptr;
  const bool settled = Eventually(
      [&] {
        const bool la = a.election().IsLeader();
        const bool lb = b.election().IsLeader();
        if (la == lb) return false;
        leader = la ? &a : &b;
        Candidate* follower = la ? &b : &a;
        return follower->election().CurrentLeader() == leader->info();
      },
      30s);
  REQUIRE(settled);
  return leader;
}

// Candidates "r1" and "r2" with the same lease TTL (and clock), both started and settled on one
// leader: `leader` leads, `other` names it.
struct TwoCandidates {
  TwoCandidates(const std::string& endpoint, int64_t ttl_seconds, base::Clock* clock = nullptr)
      : a(endpoint, "r1", ttl_seconds, clock), b(endpoint, "r2", ttl_seconds, clock) {
    a.Start();
    b.Start();
    leader = WaitForOneLeader(a, b);
    other = leader == &a ? &b : &a;
  }

  Candidate a;
  Candidate b;
  Candidate* leader;
  Candidate* other;
};

// What each test of how a leader's term ends starts from: a real etcd and TwoCandidates on it,
// `old` the first leader, `other` the candidate following it, and `old_term` the first term.
struct ElectionSetup {
  explicit ElectionSetup(int64_t ttl_seconds, base::Clock* clock = nullptr)
      : two(etcd.endpoint(), ttl_seconds, clock),
        old(two.leader),
        other(two.other),
        old_term(*old->election().term()) {}

  EtcdProcess etcd;
  TwoCandidates two;
  Candidate* old;
  Candidate* other;
  Term old_term;
};

TEST_CASE("Start validates the options and runs once") {
  auto client = Connect("127.0.0.1:1", absl::Milliseconds(100));
  LeaderElection::Options good;
  good.key_prefix = kPrefix;
  good.id = "r0";
  good.address = "127.0.0.1:50051";
  {
    LeaderElection::Options bad = good;
    bad.id = "";
    CHECK(LeaderElection(client.get(), bad).Start().code() == absl::StatusCode::kInvalidArgument);
    bad.id = "two\nlines";
    CHECK(LeaderElection(client.get(), bad).Start().code() == absl::StatusCode::kInvalidArgument);
    bad = good;
    bad.lease_ttl_seconds = 0;
    CHECK(LeaderElection(client.get(), bad).Start().code() == absl::StatusCode::kInvalidArgument);
    bad = good;
    bad.key_prefix = "";
    CHECK(LeaderElection(client.get(), bad).Start().code() == absl::StatusCode::kInvalidArgument);
  }
  LeaderElection election(client.get(), good);
  CHECK(election.leader_key() == std::string(kPrefix) + "leader");
  REQUIRE(election.Start().ok());
  CHECK(election.Start().code() == absl::StatusCode::kFailedPrecondition);
  // etcd is unreachable: nobody leads, and fenced writes are refused locally.
  CHECK_FALSE(election.IsLeader());
  CHECK(election.CurrentLeader().empty());
  CHECK(election.FencedTxn({TxnOp::Put("/x", "1")}).status().code() ==
        absl::StatusCode::kFailedPrecondition);
  election.Stop();
  election.Stop();  // idempotent
}

TEST_CASE("one of two candidates leads; the other follows it; only the leader's writes pass") {
  CACHEROUTE_SKIP_WITHOUT_ETCD();
  EtcdProcess etcd;
  TwoCandidates two(etcd.endpoint(), 2);
  Candidate* leader = two.leader;
  Candidate* follower = two.other;

  std::optional<Term> term = leader->election().term();
  REQUIRE(term.has_value());
  CHECK_FALSE(follower->election().term().has_value());
  auto raw = Connect(etcd.endpoint());
  absl::StatusOr<GetResult> key = raw->Get(leader->election().leader_key());
  REQUIRE(key.ok());
  REQUIRE(key->kv.has_value());
  CHECK(key->kv->value == leader->info().id + "\n" + leader->info().address);
  CHECK(key->kv->lease == term->lease_id);
  CHECK(key->kv->create_revision == term->create_revision);

  std::optional<LeadershipChange> became = leader->Last(Kind::kBecameLeader);
  REQUIRE(became.has_value());
  CHECK(became->term == *term);
  CHECK(became->leader == leader->info());
  std::optional<LeadershipChange> learned = follower->Last(Kind::kLeaderChanged);
  REQUIRE(learned.has_value());
  CHECK(learned->leader == leader->info());
  CHECK(follower->Count(Kind::kBecameLeader) == 0);

  absl::StatusOr<TxnResult> write = leader->election().FencedTxn({TxnOp::Put("/table", "t1")});
  REQUIRE(write.ok());
  CHECK(write->succeeded);
  absl::StatusOr<TxnResult> refused = follower->election().FencedTxn({TxnOp::Put("/table", "t2")});
  CHECK(refused.status().code() == absl::StatusCode::kFailedPrecondition);
  CHECK_THAT(std::string(refused.status().message()), Catch::StartsWith("not the leader"));
  CHECK(raw->Get("/table")->kv->value == "t1");

  // Keepalives hold the lease over several TTLs: the same term, no step-down.
  std::this_thread::sleep_for(5s);
  CHECK(leader->election().IsLeader());
  CHECK(leader->election().term() == term);
  CHECK(leader->Count(Kind::kLostLeadership) == 0);
}

TEST_CASE("a leader stopped without resigning is replaced after its TTL; its term is fenced out") {
  CACHEROUTE_SKIP_WITHOUT_ETCD();
  ElectionSetup setup(3);
  std::vector<Compare> old_fence =
      LeaderElection::FenceCompares(setup.old->election().leader_key(), setup.old_term);

  setup.old->election().Stop();  // as a crashed replica: etcd is not told
  CHECK_FALSE(setup.old->election().IsLeader());
  std::optional<LeadershipChange> lost = setup.old->Last(Kind::kLostLeadership);
  REQUIRE(lost.has_value());
  CHECK(lost->term == setup.old_term);

  REQUIRE(Eventually([&] { return setup.other->election().IsLeader(); }, 30s));
  const Term new_term = *setup.other->election().term();
  CHECK(new_term.create_revision > setup.old_term.create_revision);
  CHECK(new_term.lease_id != setup.old_term.lease_id);

  // The old term can write neither through its election nor with its fence in any transaction.
  CHECK(setup.old->election().FencedTxn({TxnOp::Put("/table", "old")}).status().code() ==
        absl::StatusCode::kFailedPrecondition);
  auto raw = Connect(setup.etcd.endpoint());
  TxnRequest stale;
  stale.compares = old_fence;
  stale.success = {TxnOp::Put("/table", "old")};
  absl::StatusOr<TxnResult> refused = raw->Txn(stale);
  REQUIRE(refused.ok());
  CHECK_FALSE(refused->succeeded);
  REQUIRE(setup.other->election().FencedTxn({TxnOp::Put("/table", "new")}).ok());
  CHECK(raw->Get("/table")->kv->value == "new");
}

TEST_CASE("a deleted leader key ends the term; the leader campaigns again under a new term") {
  CACHEROUTE_SKIP_WITHOUT_ETCD();
  EtcdProcess etcd;
  Candidate a(etcd.endpoint(), "r1", 2);
  a.Start();
  REQUIRE(Eventually([&] { return a.election().IsLeader(); }, 30s));
  const Term first = *a.election().term();
  auto raw = Connect(etcd.endpoint());
  REQUIRE(*raw->Delete(a.election().leader_key()) == 1);
  REQUIRE(Eventually([&] { return a.Count(Kind::kBecameLeader) == 2; }, 30s));
  CHECK(a.Count(Kind::kLostLeadership) == 1);
  const Term second = *a.election().term();
  CHECK(second.lease_id == first.lease_id);  // the lease was never lost
  CHECK(second.create_revision > first.create_revision);
  TxnRequest stale;
  stale.compares = LeaderElection::FenceCompares(a.election().leader_key(), first);
  stale.success = {TxnOp::Put("/table", "stale")};
  CHECK_FALSE(raw->Txn(stale)->succeeded);
  CHECK_FALSE(raw->Get("/table")->kv.has_value());
}

TEST_CASE("keepalives blocked: the leader steps down at its local deadline; etcd back, a leader again") {
  CACHEROUTE_SKIP_WITHOUT_ETCD();
  base::ManualClock clock(absl::FromUnixSeconds(1'800'000'000));
  ElectionSetup setup(2, &clock);

  setup.etcd.Pause();  // SIGSTOP: no keepalive can succeed from now on
  clock.Advance(absl::Seconds(3));
  // The deadline has passed by the injected clock: not the leader, before any etcd call fails.
  CHECK_FALSE(setup.old->election().IsLeader());
  CHECK_FALSE(setup.old->election().term().has_value());
  CHECK(setup.old->election().FencedTxn({TxnOp::Put("/table", "x")}).status().code() ==
        absl::StatusCode::kFailedPrecondition);
  // And it steps down by itself, callback included, with etcd still paused.
  REQUIRE(Eventually([&] { return setup.old->Count(Kind::kLostLeadership) == 1; }, 30s));
  std::optional<LeadershipChange> lost = setup.old->Last(Kind::kLostLeadership);
  CHECK(lost->term == setup.old_term);
  CHECK_THAT(lost->reason, Catch::Contains("deadline"));
  // The follower cannot reach etcd either: it keeps the leader it knew.
  CHECK(setup.other->election().CurrentLeader() == setup.old->info());
  CHECK_FALSE(setup.other->election().IsLeader());

  setup.etcd.Resume();
  Candidate* leader = WaitForOneLeader(setup.two.a, setup.two.b);
  CHECK(leader->election().term()->create_revision > setup.old_term.create_revision);
  auto raw = Connect(setup.etcd.endpoint());
  CHECK(raw->Get(leader->election().leader_key())->kv->lease == leader->election().term()->lease_id);
}

TEST_CASE("etcd killed and restarted: the leader steps down, the follower keeps it, all resumes") {
  CACHEROUTE_SKIP_WITHOUT_ETCD();
  ElectionSetup setup(2);

  setup.etcd.Kill();
  REQUIRE(Eventually([&] { return setup.old->Count(Kind::kLostLeadership) == 1; }, 30s));
  CHECK_FALSE(setup.old->election().IsLeader());
  CHECK(setup.other->election().CurrentLeader() == setup.old->info());
  CHECK_FALSE(setup.other->election().IsLeader());

  setup.etcd.Start();  // the same data: the old leader key comes back with it, until its lease goes
  Candidate* leader = WaitForOneLeader(setup.two.a, setup.two.b);
  CHECK(leader->election().term()->create_revision > setup.old_term.create_revision);
  CHECK(leader->election().FencedTxn({TxnOp::Put("/table", "after")}).ok());
}

TEST_CASE("Resign hands leadership over at once, long before the lease would expire") {
  CACHEROUTE_SKIP_WITHOUT_ETCD();
  ElectionSetup setup(60);

  REQUIRE(setup.old->election().Resign().ok());
  CHECK_FALSE(setup.old->election().IsLeader());
  std::optional<LeadershipChange> lost = setup.old->Last(Kind::kLostLeadership);
  REQUIRE(lost.has_value());
  CHECK(lost->reason == "resigned");
  // A 60 s lease, and the other replica leads well within that.
  REQUIRE(Eventually([&] { return setup.other->election().IsLeader(); }, 20s));
  CHECK(setup.other->election().CurrentLeader() == setup.other->info());
  auto raw = Connect(setup.etcd.endpoint());
  CHECK(raw->KeepAliveOnce(setup.old_term.lease_id).status().code() == absl::StatusCode::kNotFound);
  // Resigning again is harmless and does not touch the new term.
  CHECK(setup.old->election().Resign().ok());
  CHECK(setup.other->election().IsLeader());
}

}  // namespace
}  // namespace cacheroute::coord
