// PlannerCore: the planner service without its transport. It owns the rate estimates, the
// membership, the published table versions and their persistence, and it runs one planning step
// (PlanBuilder, Algorithm 1) when asked: every control interval, on Replan, and at once after a
// membership change. The gRPC services are thin wrappers over it; tests drive it directly.
//
// Invariants:
// - Versions are (epoch, number). The epoch is fixed when a state directory is first used (the
//   Unix time in seconds then); numbers grow by one per published table; a restart on the same
//   state directory serves the persisted table at once and numbers onward from it.
// - A new version is published only when the table changed: its routing
//   (TableSnapshot::SameRouting), or some destination's expected load by more than 5% of the
//   mean load (gateways blend those loads into their choices, so they must not go stale).
// - A rejected report or admin call changes nothing.
// - All methods are thread-safe. Listeners are called after a publish, outside the lock, in
//   publication order. (std::mutex rather than absl::Mutex: Debian's abseil is not built for
//   ThreadSanitizer, which could not see absl::Mutex; it sees std::mutex.)
//
// Usage:
//   auto core = PlannerCore::Create(config, &clock);       // restores STATE_DIR if any
//   (*core)->ReportRates(report);
//   absl::StatusOr<PlanOutcome> outcome = (*core)->Replan();
//   std::shared_ptr<const table::TableSnapshot> latest = (*core)->Latest();
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "base/clock.h"
#include "cacheroute/v1/admin.pb.h"
#include "planner/algorithm.h"
#include "planner/plan_builder.h"
#include "planner/rate_aggregator.h"
#include "planner/service/config.h"
#include "planner/service/state_store.h"
#include "proto/table/table_snapshot.h"

namespace cacheroute::service {

struct PlanOutcome {
  table::TableVersion version;  // the latest version after the step
  bool changed = false;         // a new version was published
  bool planned = false;         // a plan was built (not: held past max_plans, a gate decision)
  double build_seconds = 0;
  // The rollout gate's decision of this interval (Replan and ObserveGate with gate_enabled only).
  std::optional<planner::Gate::Decision> gate = std::nullopt;
};

class PlannerCore {
 public:
  using Listener = std::function<void(std::shared_ptr<const table::TableSnapshot>)>;

  // Restores the state directory when the config names one and it holds a state file.
  static absl::StatusOr<std::unique_ptr<PlannerCore>> Create(const PlannerConfig& config,
                                                             base::Clock* clock);

  // Rates. InvalidArgument (naming the field) leaves everything unchanged.
  absl::StatusOr<planner::ReportResult> ReportRates(const planner::RateReport& report);
  // The rollout evidence reported since the last call, for the split at table_fraction, merged
  // over gateways (RateAggregator::TakeEvidence). The rollout gate's input (docs/gate.md); with
  // gate_enabled, Replan takes it itself.
  dataplane::Evidence TakeEvidence(double table_fraction);

  // One planning step now: with gate_enabled, first feeds the interval's rollout evidence to the
  // gate; then closes the rate interval, plans, publishes if the routing (or the gate's rollout)
  // changed, persists. Also what the control-interval ticker calls. Past max_plans plans it keeps
  // the last plan instead of building one (planned false).
  absl::StatusOr<PlanOutcome> Replan();
  // A rollout-gate decision between planning steps (gate_interval): feeds the gate the evidence
  // reported since its last decision and, when its split changes, publishes the latest table with
  // the new split. Before the first table there is nothing to decide (gate unset).
  // FailedPrecondition without gate_enabled.
  absl::StatusOr<PlanOutcome> ObserveGate();

  // Membership. Both replan at once, keeping every key that stays placeable where it was
  // (hysteresis by name); only a leaving destination's keys are placed anew. SetDestinations takes
  // the members in any order: those that stay keep their indices' order, new ones are appended,
  // and the same set again is a no-op (no replan, no version). InvalidArgument for bad names or
  // an unknown destination; FailedPrecondition when draining would leave no destination.
  absl::StatusOr<PlanOutcome> SetDestinations(std::vector<std::string> destinations);
  absl::StatusOr<PlanOutcome> Drain(const std::string& destination, bool undrain);

  // Tables. Latest() is null before the first plan. Get() serves the kept history.
  std::shared_ptr<const table::TableSnapshot> Latest() const;
  absl::StatusOr<std::shared_ptr<const table::TableSnapshot>> Get(table::TableVersion v) const;

  v1::GetStatusResponse Status() const;
  // The rollout gate: holds it in `state` ("" releases it) and publishes that state's split at
  // once (a new version; persisted, so a forced state survives a restart). FailedPrecondition
  // without gate_enabled; InvalidArgument naming `state` for an unknown one.
  absl::StatusOr<v1::GateStatus> ForceGate(const std::string& state, const std::string& why);
  v1::ExplainResponse Explain(uint64_t key_id) const;

  // Table-stream bookkeeping for Status and metrics.
  void RecordSubscriber(const std::string& gateway_id, bool subscribed);
  void RecordAck(const std::string& gateway_id, table::TableVersion acked);

  uint64_t AddListener(Listener listener);
  void RemoveListener(uint64_t id);

  // --- Replicas (docs/ha.md; HaReplica drives these). Without a hook the core runs alone.
  // Runs under the core's lock before each new version becomes visible, with the table and the
  // membership and gate state that go with it (a PlannerState without table and rates). When it
  // fails, nothing is published (no history, no listener) and the call returns its error.
  using PublishHook =
      std::function<absl::Status(const table::TableSnapshot& table, const v1::PlannerState& meta)>;
  void SetPublishHook(PublishHook hook);
  // Validation of ReportRates alone (the rejected counter counts a failure); changes nothing else.
  absl::Status ValidateReport(const planner::RateReport& report);
  // A table another replica published: installed as the latest (persisted, listeners notified)
  // only when its version is later than the latest's. Returns whether it was installed.
  bool InstallPublished(std::shared_ptr<const table::TableSnapshot> snapshot);
  // A replica that has just become leader: adopts `meta` (membership, drained, gate) when given,
  // installs `table` if it is later than its own latest, and publishes the latest again as the
  // next version (through the hook), or plans when there is no table at all.
  absl::StatusOr<PlanOutcome> TakeOver(std::shared_ptr<const table::TableSnapshot> table,
                                       const std::optional<v1::PlannerState>& meta);
  // A follower's control interval: closes the rate interval and drops the rollout evidence, as
  // the leader's planning step does, so that its estimates stay those of a leader. With
  // `plan_step` false, a gate step's: drops the evidence only.
  void FollowerTick(bool plan_step = true);

  struct Counters {
    uint64_t plans = 0;
    uint64_t versions_published = 0;
    uint64_t reports_accepted = 0;
    uint64_t reports_duplicate = 0;
    uint64_t key_counts_accepted = 0;
    std::map<std::string, uint64_t> reports_rejected;  // by reason (the field at fault)
    uint64_t persist_errors = 0;
  };
  Counters counters() const;

 private:
  PlannerCore(const PlannerConfig& config, base::Clock* clock, std::optional<StateStore> store);

  absl::Status RestoreLocked(const v1::PlannerState& state) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Plans and, if the routing changed, publishes; the new snapshot (if any) goes to *published
  // so the caller can notify listeners after unlocking.
  // With `force`, publishes even an unchanged table (replicas: membership must reach etcd).
  absl::StatusOr<PlanOutcome> ReplanLocked(std::shared_ptr<const table::TableSnapshot>* published,
                                           bool force = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Replan past max_plans: closes the rate interval and publishes the latest table again only if
  // the gate's rollout changed it.
  absl::StatusOr<PlanOutcome> HoldLocked(std::shared_ptr<const table::TableSnapshot>* published)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The gate's decision on the evidence reported since the last one (gate_ set).
  planner::Gate::Decision ObserveGateLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Publishes the latest table under the next version with the gate's current rollout when that
  // changes its routing (or `force`); null when nothing was published.
  absl::StatusOr<std::shared_ptr<const table::TableSnapshot>> RepublishWithGateLocked(bool force)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The plan's config for the active destination count, from config_ (PlanConfigFor).
  planner::PlanConfig PlanConfigLocked(uint32_t active) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Adds `snapshot` (the next version) to the history as the latest; returns it for Notify.
  // Fails (publishing nothing) when the publish hook does.
  absl::StatusOr<std::shared_ptr<const table::TableSnapshot>> PublishLocked(
      std::shared_ptr<const table::TableSnapshot> snapshot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Destinations, drained flags and gate as a PlannerState without table and rates.
  v1::PlannerState MetaLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status RestoreGateLocked(const v1::GateRecord& g) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void InstallLocked(std::shared_ptr<const table::TableSnapshot> snapshot)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The gate's state and split as the published tables carry them (gate_ set).
  table::TableRollout GateRolloutLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PersistLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  v1::GateStatus GateStatusLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Notify(std::shared_ptr<const table::TableSnapshot> published);
  std::vector<uint32_t> ActiveLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // last_rates_ (and, with byte-aware planning, last_tokens_) from the rate estimator.
  void RefreshRatesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const PlannerConfig config_;
  const planner::Algorithm algorithm_;  // config_.algorithm, parsed
  base::Clock* const clock_;
  const std::optional<StateStore> store_;

  mutable std::mutex mu_;
  planner::RateAggregator rates_ ABSL_GUARDED_BY(mu_);
  planner::PlanBuilder builder_ ABSL_GUARDED_BY(mu_);
  // The rollout gate (config_.gate_enabled); its state rides on every published table.
  std::optional<planner::Gate> gate_ ABSL_GUARDED_BY(mu_);
  std::optional<planner::Gate::Decision> last_gate_decision_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> destinations_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> drained_ ABSL_GUARDED_BY(mu_);
  uint64_t epoch_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t last_number_ ABSL_GUARDED_BY(mu_) = 0;
  // Newest last; at most config_.history entries.
  std::vector<std::shared_ptr<const table::TableSnapshot>> history_ ABSL_GUARDED_BY(mu_);
  // The inputs and stats of the last planning step, for Explain and Status.
  std::vector<planner::KeyRate> last_rates_ ABSL_GUARDED_BY(mu_);
  // With byte-aware planning: the sizes the last plan used, at last_rates_' indices; else empty.
  std::vector<planner::KeyTokens> last_tokens_ ABSL_GUARDED_BY(mu_);
  planner::PlanStats last_stats_ ABSL_GUARDED_BY(mu_);
  // The last plan built and the active destinations it was built over (for placement hysteresis).
  std::optional<planner::Plan> last_plan_ ABSL_GUARDED_BY(mu_);
  // The names of the destinations last_plan_ was built over (its index i is the i-th of them).
  std::vector<std::string> last_plan_active_ ABSL_GUARDED_BY(mu_);
  int64_t last_plan_unix_ms_ ABSL_GUARDED_BY(mu_) = 0;
  struct StreamInfo {
    bool subscribed = false;
    table::TableVersion acked;
  };
  std::map<std::string, StreamInfo> streams_ ABSL_GUARDED_BY(mu_);
  Counters counters_ ABSL_GUARDED_BY(mu_);
  PublishHook publish_hook_ ABSL_GUARDED_BY(mu_);

  // Listeners have their own lock so a listener may call back into the core.
  mutable std::mutex listeners_mu_;
  std::map<uint64_t, Listener> listeners_ ABSL_GUARDED_BY(listeners_mu_);
  uint64_t next_listener_ ABSL_GUARDED_BY(listeners_mu_) = 1;
  // Held by each planning step from before it publishes until its listeners have run, so
  // listeners see versions in order. Lock order: notify_mu_, then mu_ or listeners_mu_.
  std::mutex notify_mu_;
};

// The readable reason a report was rejected, for the rejected-by-reason counter: the field
// named at the start of the status message ("counts[3].count: …" → "count").
std::string RejectReason(const absl::Status& status);

}  // namespace cacheroute::service
