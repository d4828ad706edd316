// LeaderElection: one leader among the planner replicas, by etcd lease + transaction, with a
// local lease deadline and fenced writes (docs/ha.md, "etcd client and election").
//
// Usage:
//   LeaderElection election(client, {.key_prefix = "/cacheroute/prod/", .id = "planner-0",
//                                    .address = "10.0.0.5:50051", .on_change = OnChange});
//   election.Start();                          // campaigns in the background
//   if (election.IsLeader()) election.FencedTxn({TxnOp::Put("/cacheroute/prod/table", t)});
//   election.Resign();                         // graceful shutdown: hands over at once
//
// Invariants:
// - The leader key is key_prefix + "leader", holding "<id>\n<address>", attached to this
//   replica's lease; a term is {lease_id, create_revision of that key}.
// - IsLeader() is true only while now < (send time of the last successful keepalive or grant) +
//   granted TTL, by the injected clock; past it the replica steps down by itself (callback)
//   without waiting for etcd, and starts over with a new lease.
// - FencedTxn succeeds only if the leader key still has this term's create_revision and lease:
//   a replica that lost its lease can never write through it (FailedPrecondition otherwise).
// - Callbacks run on the election's thread (or the caller of Stop/Resign), one at a time, never
//   under a lock: they may call the getters, not Start/Stop/Resign. Getters and FencedTxn are
//   thread-safe; Start/Stop/Resign are for the owner's thread. The EtcdClient outlives this.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "planner/coord/etcd_client.h"

namespace cacheroute::coord {

struct LeaderInfo {
  std::string id;       // empty: no leader known
  std::string address;  // its advertised gRPC address
  bool empty() const { return id.empty(); }
  bool operator==(const LeaderInfo&) const = default;
};

struct Term {
  int64_t lease_id = 0;
  int64_t create_revision = 0;  // of the leader key: the fencing token
  bool operator==(const Term&) const = default;
};

struct LeadershipChange {
  enum class Kind {
    kBecameLeader,    // this replica leads `term`
    kLostLeadership,  // this replica's `term` ended (deadline, lease or key lost, Stop, Resign)
    kLeaderChanged,   // a follower learned a new leader (`leader`, empty when the key is gone)
  };
  Kind kind = Kind::kLeaderChanged;
  Term term;
  LeaderInfo leader;   // the leader known after the change
  std::string reason;  // for people: why
};

class LeaderElection {
 public:
  struct Options {
    std::string key_prefix;  // e.g. "/cacheroute/<cluster>/"
    std::string id;          // this replica's id: non-empty, no newline
    std::string address;     // this replica's advertised gRPC address: no newline
    int64_t lease_ttl_seconds = 5;
    // For the local lease deadline; not owned. Null: a monotonic clock (steady_clock), which an
    // NTP step cannot move; base::RealClock is the wall clock and could.
    base::Clock* clock = nullptr;
    std::function<void(const LeadershipChange&)> on_change;
    // Wall-clock pause after a failed etcd call before the next attempt.
    absl::Duration retry_interval = absl::Milliseconds(500);
  };

  LeaderElection(EtcdClient* client, Options options);
  ~LeaderElection();  // Stop()
  LeaderElection(const LeaderElection&) = delete;
  LeaderElection& operator=(const LeaderElection&) = delete;

  // Validates the options and starts the background thread. Once per object.
  absl::Status Start();
  // Stops the thread and the watch without touching etcd: a leader's key stays until its lease
  // expires (TTL). Fires kLostLeadership if this replica was leading. Idempotent.
  void Stop();
  // Stop(), then deletes the leader key (if still this term's) and revokes the lease, so another
  // replica takes over at once. Errors are etcd's; the lease then expires on its own.
  absl::Status Resign();

  bool IsLeader() const;
  std::optional<Term> term() const;  // while IsLeader()
  LeaderInfo CurrentLeader() const;  // this replica while IsLeader(); else the last one known
  const std::string& leader_key() const { return leader_key_; }

  // The compares that fence a transaction to a term: the leader key's create_revision and lease.
  static std::vector<Compare> FenceCompares(const std::string& leader_key, const Term& term);
  // FenceCompares for the current term; FailedPrecondition when not the leader.
  absl::StatusOr<std::vector<Compare>> FenceCompares() const;
  // Runs `ops` in one transaction fenced to the current term. FailedPrecondition("not the
  // leader ...") when this replica does not lead or etcd says the term is over.
  absl::StatusOr<TxnResult> FencedTxn(std::vector<TxnOp> ops);

 private:
  using Changes = std::vector<LeadershipChange>;
  struct WatchItem {
    uint64_t generation = 0;
    std::vector<WatchEvent> events;
    bool broken = false;
  };

  void Run();
  bool LeadingLocked() const;
  void CheckDeadlineLocked(Changes& changes);
  void StepDownLocked(const std::string& reason, Changes& changes);
  void SetLeaderLocked(LeaderInfo leader, Changes& changes);
  void ApplyCampaignLocked(const TxnResult& result, int64_t lease, Changes& changes);
  void ProcessWatchLocked(Changes& changes);
  void KeepAlive(int64_t lease);
  void SleepWall(absl::Duration d);
  void JoinThread();
  void Fire(const Changes& changes);

  EtcdClient* const client_;
  const Options options_;
  const std::string leader_key_;
  const std::string value_;  // what this replica writes in the leader key
  class SteadyClock final : public base::Clock {
   public:
    absl::Time Now() override;
  };
  SteadyClock steady_clock_;
  base::Clock* const clock_;

  std::thread thread_;
  std::unique_ptr<Watcher> watcher_;  // the election thread's (or, once joined, the owner's)

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool started_ = false;
  bool stop_ = false;
  int64_t lease_id_ = 0;            // 0: none yet
  int64_t lease_ttl_ = 0;           // as granted
  absl::Time lease_deadline_;       // by clock_: the last keepalive's send time + TTL
  int64_t abandoned_lease_ = 0;     // to revoke (best effort) before starting over
  std::chrono::steady_clock::time_point next_keepalive_;
  bool need_campaign_ = true;
  bool leading_ = false;
  Term term_;
  LeaderInfo leader_;
  uint64_t watch_generation_ = 0;
  std::deque<WatchItem> watch_queue_;
};

}  // namespace cacheroute::coord
