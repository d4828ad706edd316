// HaReplica: one planner replica among several coordinated through etcd (docs/ha.md, "The
// planner service on etcd"). It runs the LeaderElection, makes every publish of its PlannerCore
// one FencedTxn (table, version and membership/gate state), installs the tables other replicas
// publish (a watch on <prefix>table), replicates rate reports through etcd (<prefix>reports/)
// and runs the control loop (ControlSchedule): the leader plans and decides the gate, a follower
// only closes its rate interval and drops the evidence.
//
// Contract:
// - Only the leader publishes: a publish whose transaction fails (not the leader, etcd down)
//   publishes nothing locally either. A new leader adopts <prefix>table and <prefix>state first
//   and republishes under the next version, so versions only grow across failover.
// - ReportRates returns OK only once the report is in etcd (then every replica applies it exactly
//   once, in etcd's order, by its watch and the (gateway, sequence) rule); UNAVAILABLE otherwise.
// - Broken watches resume from their next revision; etcd calls that fail are retried by the loop,
//   so a replica resumes by itself after an etcd outage.
// - Thread-safe. Start once; Resign (graceful: hands leadership over at once) or Stop before the
//   core goes. Callbacks of the election only set flags; the loop thread does the work.
#pragma once

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cacheroute/v1/admin.pb.h"
#include "cacheroute/v1/rates.pb.h"
#include "planner/coord/leader_election.h"
#include "planner/rate_aggregator.h"
#include "planner/service/config.h"
#include "planner/service/planner_core.h"

namespace cacheroute::service {

class HaReplica {
 public:
  struct Options {
    EtcdConfig etcd;  // enabled and valid; replica_id and advertise non-empty
    absl::Duration control_interval = absl::Seconds(10);
    absl::Duration gate_interval = absl::ZeroDuration();  // PlannerConfig::gate_interval
    bool run_ticker = true;  // false: no planning steps of its own (tests drive Replan)
  };

  // Connects lazily: nothing here needs etcd to be up. Installs the core's publish hook.
  static absl::StatusOr<std::unique_ptr<HaReplica>> Create(Options options, PlannerCore* core);
  ~HaReplica();  // Stop()
  HaReplica(const HaReplica&) = delete;
  HaReplica& operator=(const HaReplica&) = delete;

  absl::Status Start();
  void Stop();            // leaves the leader key to expire with the lease (as a crash would)
  absl::Status Resign();  // Stop, then deletes the leader key and revokes the lease

  // The report (already validated) goes to etcd; OK once it is there. Waits (bounded) for this
  // replica's own watch to apply it, so the result says whether it was a duplicate.
  absl::StatusOr<planner::ReportResult> ReportRates(const v1::ReportRatesRequest& request);

  bool IsLeader() const;
  coord::LeaderInfo Leader() const;
  // "" when the replica can serve: it has a table and leads, or follows with a live table watch.
  std::string NotReadyReason() const;
  v1::HaStatus Status() const;

 private:
  struct State;
  HaReplica() = default;
  void StopLoop();
  std::unique_ptr<State> state_;
};

}  // namespace cacheroute::service
