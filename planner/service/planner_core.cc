// See planner_core.h.
#include "planner/service/planner_core.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "planner/byte_aware.h"
#include "planner/plan_snapshot.h"
#include "planner/service/proto_convert.h"

namespace cacheroute::service {
namespace {

constexpr size_t kMaxDestinations = 1u << 20;
constexpr size_t kMaxDestinationName = 256;
// A table whose routing is unchanged is republished when a destination's expected load moved by
// more than this fraction of the mean load.
constexpr double kLoadDrift = 0.05;

// The parsed algorithm of a validated config.
planner::Algorithm AlgorithmOf(const PlannerConfig& config) {
  absl::StatusOr<planner::Algorithm> algorithm = planner::ParseAlgorithm(config.algorithm);
  return algorithm.ok() ? *algorithm : planner::kDefaultAlgorithm;
}

planner::RateAggregatorOptions AggregatorOptions(const PlannerConfig& config) {
  planner::RateAggregatorOptions options;
  options.smoothing = config.rate_smoothing;
  options.key_ttl = config.key_ttl;
  options.max_keys_per_report = config.max_keys_per_report;
  return options;
}

absl::Status ValidateDestinationNames(const std::vector<std::string>& names) {
  if (names.empty()) return absl::InvalidArgumentError("destinations: must not be empty");
  if (names.size() > kMaxDestinations) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "destinations: %d entries, more than the limit of %d", names.size(), kMaxDestinations));
  }
  absl::flat_hash_set<std::string> seen;
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i].empty() || names[i].size() > kMaxDestinationName) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "destinations[%d]: must be 1 to %d bytes, got \"%s\"", i, kMaxDestinationName, names[i]));
    }
    if (!seen.insert(names[i]).second) {
      return absl::InvalidArgumentError(
          absl::StrFormat("destinations[%d]: duplicate name \"%s\"", i, names[i]));
    }
  }
  return absl::OkStatus();
}

// True when some destination's expected load moved by more than kLoadDrift of the new mean
// load: the routing is the same, but gateways that blend the planner's expected loads into their
// choices would work from stale numbers.
bool LoadsDrifted(const table::TableSnapshot& old_table, const table::TableSnapshot& new_table) {
  const std::vector<double>& before = old_table.expected_loads();
  const std::vector<double>& after = new_table.expected_loads();
  if (before.size() != after.size()) return true;
  double sum = 0;
  for (double load : after) sum += load;
  const double mean = after.empty() ? 0 : sum / after.size();
  for (size_t i = 0; i < after.size(); ++i) {
    if (std::abs(after[i] - before[i]) > kLoadDrift * mean) return true;
  }
  return false;
}

}  // namespace

std::string RejectReason(const absl::Status& status) {
  absl::string_view message = status.message();
  const size_t colon = message.find(':');
  absl::string_view field = colon == absl::string_view::npos ? "other" : message.substr(0, colon);
  // "counts[3].count" → "count"; "gateway_id" stays.
  const size_t dot = field.rfind('.');
  if (dot != absl::string_view::npos) field = field.substr(dot + 1);
  const size_t bracket = field.find('[');
  if (bracket != absl::string_view::npos) field = field.substr(0, bracket);
  return field.empty() ? "other" : std::string(field);
}

PlannerCore::PlannerCore(const PlannerConfig& config, base::Clock* clock,
                         std::optional<StateStore> store)
    : config_(config),
      algorithm_(AlgorithmOf(config)),
      clock_(clock),
      store_(std::move(store)),
      rates_(AggregatorOptions(config), clock->Now()),
      builder_(clock),
      destinations_(config.destinations),
      drained_(config.destinations.size(), false) {
  if (config.gate_enabled) gate_.emplace(config.gate);
}

absl::StatusOr<std::unique_ptr<PlannerCore>> PlannerCore::Create(const PlannerConfig& config,
                                                                 base::Clock* clock) {
  if (absl::Status s = ValidatePlannerConfig(config); !s.ok()) return s;
  if (absl::Status s = planner::RateAggregator::ValidateOptions(AggregatorOptions(config));
      !s.ok()) {
    return s;
  }
  std::optional<StateStore> store;
  std::optional<v1::PlannerState> state;
  if (!config.state_dir.empty()) {
    CACHEROUTE_ASSIGN_OR_RETURN(StateStore opened, StateStore::Open(config.state_dir));
    CACHEROUTE_ASSIGN_OR_RETURN(state, opened.Load());
    store.emplace(std::move(opened));
  }
  std::unique_ptr<PlannerCore> core(new PlannerCore(config, clock, std::move(store)));
  std::lock_guard<std::mutex> lock(core->mu_);
  if (state.has_value()) {
    if (absl::Status s = core->RestoreLocked(*state); !s.ok()) return s;
  } else {
    core->epoch_ = static_cast<uint64_t>(std::max<int64_t>(1, absl::ToUnixSeconds(clock->Now())));
    core->last_number_ = 0;
  }
  return core;
}

absl::Status PlannerCore::RestoreLocked(const v1::PlannerState& state) {
  std::vector<std::string> names(state.destinations().begin(), state.destinations().end());
  if (absl::Status s = ValidateDestinationNames(names); !s.ok()) {
    return absl::DataLossError(absl::StrCat("state file: ", s.message()));
  }
  if (state.drained_size() != state.destinations_size()) {
    return absl::DataLossError("state file: drained and destinations differ in size");
  }
  absl::StatusOr<planner::RateAggregator> rates =
      RateAggregatorFromProto(state.rates(), AggregatorOptions(config_));
  if (!rates.ok())
    return absl::DataLossError(absl::StrCat("state file: ", rates.status().message()));
  absl::StatusOr<std::shared_ptr<const table::TableSnapshot>> table =
      table::TableSnapshot::FromProto(state.table());
  if (!table.ok())
    return absl::DataLossError(absl::StrCat("state file: ", table.status().message()));
  destinations_ = std::move(names);
  drained_.assign(state.drained().begin(), state.drained().end());
  rates_ = *std::move(rates);
  epoch_ = (*table)->version().epoch;
  last_number_ = (*table)->version().number;
  if (epoch_ == 0 || last_number_ == 0) {
    return absl::DataLossError("state file: the table has no version");
  }
  history_.push_back(*std::move(table));
  if (gate_.has_value() && state.has_gate()) {
    if (absl::Status s = RestoreGateLocked(state.gate()); !s.ok()) {
      return absl::DataLossError(absl::StrCat("state file: ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status PlannerCore::RestoreGateLocked(const v1::GateRecord& g) {
  const std::optional<planner::GateState> saved = planner::ParseGateState(g.state());
  if (!saved.has_value()) {
    return absl::DataLossError(absl::StrCat("gate.state \"", g.state(), "\" is unknown"));
  }
  std::optional<planner::GateState> forced;
  if (!g.forced_state().empty()) {
    forced = planner::ParseGateState(g.forced_state());
    if (!forced.has_value()) {
      return absl::DataLossError(
          absl::StrCat("gate.forced_state \"", g.forced_state(), "\" is unknown"));
    }
  }
  gate_ = planner::Gate::Restore(config_.gate, {.state = *saved,
                                                .forced = forced,
                                                .forced_why = g.forced_why(),
                                                .intervals_in_state = g.intervals_in_state(),
                                                .interval = g.interval()});
  return absl::OkStatus();
}

dataplane::Evidence PlannerCore::TakeEvidence(double table_fraction) {
  std::lock_guard<std::mutex> lock(mu_);
  return rates_.TakeEvidence(table_fraction);
}

absl::StatusOr<planner::ReportResult> PlannerCore::ReportRates(const planner::RateReport& report) {
  std::lock_guard<std::mutex> lock(mu_);
  absl::StatusOr<planner::ReportResult> result = rates_.Apply(report, clock_->Now());
  if (!result.ok()) {
    ++counters_.reports_rejected[RejectReason(result.status())];
  } else if (result->duplicate) {
    ++counters_.reports_duplicate;
  } else {
    ++counters_.reports_accepted;
    counters_.key_counts_accepted += result->accepted_keys;
  }
  return result;
}

std::vector<uint32_t> PlannerCore::ActiveLocked() const {
  std::vector<uint32_t> active;
  for (uint32_t i = 0; i < destinations_.size(); ++i) {
    if (!drained_[i]) active.push_back(i);
  }
  return active;
}

absl::StatusOr<PlanOutcome> PlannerCore::ReplanLocked(
    std::shared_ptr<const table::TableSnapshot>* published, bool force) {
  const std::vector<uint32_t> active = ActiveLocked();
  if (active.empty()) return absl::FailedPreconditionError("every destination is drained");
  const absl::Time now = clock_->Now();
  rates_.CloseInterval(now);
  RefreshRatesLocked();
  const planner::PlanConfig plan_config = PlanConfigLocked(static_cast<uint32_t>(active.size()));
  // Hysteresis against the previous plan (none after a restart). After a membership change, a
  // drain or an undrain it is re-mapped by name to the new active indices, so only the keys of a
  // destination that left are placed anew and every other key stays where its cache is warm.
  std::vector<std::string> active_names;
  active_names.reserve(active.size());
  for (uint32_t d : active) active_names.push_back(destinations_[d]);
  std::optional<planner::Plan> remapped;
  const planner::Plan* previous = last_plan_.has_value() ? &*last_plan_ : nullptr;
  if (previous != nullptr && last_plan_active_ != active_names) {
    std::vector<uint32_t> index(last_plan_active_.size(), planner::kNoSpill);
    for (size_t i = 0; i < last_plan_active_.size(); ++i) {
      const auto it = std::find(active_names.begin(), active_names.end(), last_plan_active_[i]);
      if (it != active_names.end()) index[i] = static_cast<uint32_t>(it - active_names.begin());
    }
    remapped = previous->Remapped(index, static_cast<uint32_t>(active.size()));
    previous = &*remapped;
  }
  // Where the gateways last served each key, by its index among the active destinations.
  std::vector<planner::KeyWarmth> warm;
  if (config_.follow_served) {
    absl::flat_hash_map<std::string_view, uint32_t> active_index;
    for (uint32_t i = 0; i < active_names.size(); ++i) active_index[active_names[i]] = i;
    for (const planner::KeyRate& r : last_rates_) {
      const std::string_view served = rates_.ServedAt(r.key);
      if (served.empty()) continue;
      if (auto it = active_index.find(served); it != active_index.end()) {
        warm.push_back({.key = r.key, .destination = it->second});
      }
    }
  }
  CACHEROUTE_ASSIGN_OR_RETURN(
      planner::Plan plan, builder_.Build(last_rates_, plan_config, previous, warm, last_tokens_));
  ++counters_.plans;
  last_stats_ = plan.stats();
  last_plan_unix_ms_ = absl::ToUnixMillis(now);

  const std::shared_ptr<const table::TableSnapshot> latest =
      history_.empty() ? nullptr : history_.back();
  const table::TableVersion next{epoch_, last_number_ + 1};
  std::shared_ptr<const table::TableSnapshot> candidate = planner::SnapshotFromPlan(
      next, plan, destinations_, active,
      [this](uint64_t key_id) ABSL_NO_THREAD_SAFETY_ANALYSIS { return rates_.KeyName(key_id); },
      last_plan_unix_ms_, config_.table_ttl_seconds);
  if (gate_.has_value()) candidate = candidate->WithRollout(GateRolloutLocked());
  PlanOutcome outcome{.version = latest ? latest->version() : table::TableVersion{},
                      .changed = false,
                      .planned = true,
                      .build_seconds = plan.stats().build_seconds};
  if (force || latest == nullptr || !latest->SameRouting(*candidate) ||
      LoadsDrifted(*latest, *candidate)) {
    CACHEROUTE_ASSIGN_OR_RETURN(std::shared_ptr<const table::TableSnapshot> done,
                                PublishLocked(std::move(candidate)));
    outcome.version = next;
    outcome.changed = true;
    *published = std::move(done);
  }
  last_plan_ = std::move(plan);
  last_plan_active_ = std::move(active_names);
  PersistLocked();
  return outcome;
}

planner::PlanConfig PlannerCore::PlanConfigLocked(uint32_t active) const {
  return planner::PlanConfigFor(
      algorithm_,
      {.destinations = active,
       .q_cap = config_.q_cap,
       .slots_per_destination = config_.slots_per_destination,
       .unkeyed_rate = rates_.UnkeyedRate(),
       .replicate = config_.replicate,
       .placement =
           config_.placement == "hashed" ? planner::Placement::kHashed : planner::Placement::kLpt,
       .placement_seed = config_.placement_seed,
       .stickiness = config_.placement_stickiness,
       // Byte-aware planning, when the engines' KV capacity is configured.
       .kv_budget_tokens = config_.kv_tokens_per_destination * config_.planned_prefix_share,
       .kv_capacity_tokens = config_.kv_tokens_per_destination,
       .request_overhead_tokens = config_.request_overhead_tokens});
}

void PlannerCore::RefreshRatesLocked() {
  if (config_.kv_tokens_per_destination > 0) {
    rates_.Estimates(last_rates_, last_tokens_);
  } else {
    last_rates_ = rates_.Rates();
    last_tokens_.clear();
  }
}

absl::StatusOr<PlanOutcome> PlannerCore::HoldLocked(
    std::shared_ptr<const table::TableSnapshot>* published) {
  rates_.CloseInterval(clock_->Now());
  RefreshRatesLocked();
  PlanOutcome outcome{.version = history_.back()->version()};
  CACHEROUTE_ASSIGN_OR_RETURN(std::shared_ptr<const table::TableSnapshot> done,
                              RepublishWithGateLocked(/*force=*/false));
  if (done != nullptr) {
    outcome.version = done->version();
    outcome.changed = true;
    *published = std::move(done);
  }
  PersistLocked();
  return outcome;
}

planner::Gate::Decision PlannerCore::ObserveGateLocked() {
  planner::Gate::Decision decision = gate_->Observe(rates_.TakeEvidence(gate_->table_fraction()));
  last_gate_decision_ = decision;
  return decision;
}

absl::StatusOr<std::shared_ptr<const table::TableSnapshot>> PlannerCore::RepublishWithGateLocked(
    bool force) {
  if (history_.empty()) return nullptr;
  const std::shared_ptr<const table::TableSnapshot>& latest = history_.back();
  std::shared_ptr<const table::TableSnapshot> candidate =
      gate_.has_value() ? latest->WithRollout(GateRolloutLocked()) : latest;
  if (!force && candidate->SameRouting(*latest)) return nullptr;
  return PublishLocked(candidate->WithVersion({epoch_, last_number_ + 1}));
}

absl::StatusOr<std::shared_ptr<const table::TableSnapshot>> PlannerCore::PublishLocked(
    std::shared_ptr<const table::TableSnapshot> snapshot) {
  if (publish_hook_) {
    if (absl::Status s = publish_hook_(*snapshot, MetaLocked()); !s.ok()) return s;
  }
  InstallLocked(snapshot);
  ++counters_.versions_published;
  return snapshot;
}

void PlannerCore::InstallLocked(std::shared_ptr<const table::TableSnapshot> snapshot) {
  epoch_ = snapshot->version().epoch;
  last_number_ = snapshot->version().number;
  history_.push_back(std::move(snapshot));
  if (history_.size() > config_.history) history_.erase(history_.begin());
}

v1::PlannerState PlannerCore::MetaLocked() const {
  v1::PlannerState state;
  state.set_format(1);
  for (const std::string& name : destinations_) state.add_destinations(name);
  for (bool d : drained_) state.add_drained(d);
  if (gate_.has_value()) {
    const planner::Gate::Persisted g = gate_->Save();
    v1::GateRecord* record = state.mutable_gate();
    record->set_state(std::string(planner::GateStateName(g.state)));
    if (g.forced.has_value())
      record->set_forced_state(std::string(planner::GateStateName(*g.forced)));
    record->set_forced_why(g.forced_why);
    record->set_intervals_in_state(g.intervals_in_state);
    record->set_interval(g.interval);
  }
  return state;
}

void PlannerCore::SetPublishHook(PublishHook hook) {
  std::lock_guard<std::mutex> lock(mu_);
  publish_hook_ = std::move(hook);
}

absl::Status PlannerCore::ValidateReport(const planner::RateReport& report) {
  std::lock_guard<std::mutex> lock(mu_);
  absl::Status status = rates_.ValidateReport(report);
  if (!status.ok()) ++counters_.reports_rejected[RejectReason(status)];
  return status;
}

bool PlannerCore::InstallPublished(std::shared_ptr<const table::TableSnapshot> snapshot) {
  if (snapshot == nullptr) return false;
  std::lock_guard<std::mutex> order(notify_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!history_.empty() && !(history_.back()->version() < snapshot->version())) return false;
    InstallLocked(snapshot);
    // Status and /metrics (table age) report the plan that built the table being served.
    last_plan_unix_ms_ = std::max(last_plan_unix_ms_, snapshot->built_unix_ms());
    PersistLocked();
  }
  Notify(std::move(snapshot));
  return true;
}

absl::StatusOr<PlanOutcome> PlannerCore::TakeOver(std::shared_ptr<const table::TableSnapshot> table,
                                                  const std::optional<v1::PlannerState>& meta) {
  std::lock_guard<std::mutex> order(notify_mu_);
  std::shared_ptr<const table::TableSnapshot> published;
  absl::StatusOr<PlanOutcome> outcome;
  std::shared_ptr<const table::TableSnapshot> installed;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (meta.has_value() && meta->destinations_size() > 0 &&
        meta->drained_size() == meta->destinations_size()) {
      std::vector<std::string> names(meta->destinations().begin(), meta->destinations().end());
      if (ValidateDestinationNames(names).ok()) {
        destinations_ = std::move(names);
        drained_.assign(meta->drained().begin(), meta->drained().end());
      }
    }
    if (meta.has_value() && meta->has_gate() && gate_.has_value()) {
      const std::optional<planner::Gate> before = gate_;
      if (!RestoreGateLocked(meta->gate()).ok()) gate_ = before;
    }
    if (table != nullptr && (history_.empty() || history_.back()->version() < table->version())) {
      InstallLocked(table);
      installed = table;
    }
    if (history_.empty()) {
      outcome = ReplanLocked(&published);
    } else {
      absl::StatusOr<std::shared_ptr<const table::TableSnapshot>> done =
          RepublishWithGateLocked(/*force=*/true);
      if (done.ok()) {
        published = *done;
        outcome = PlanOutcome{.version = published->version(), .changed = true};
        PersistLocked();
      } else {
        outcome = done.status();
      }
    }
  }
  // Listeners see the adopted table first when nothing new could be published.
  if (published == nullptr) {
    Notify(std::move(installed));
  } else {
    Notify(std::move(published));
  }
  return outcome;
}

void PlannerCore::FollowerTick(bool plan_step) {
  std::lock_guard<std::mutex> lock(mu_);
  if (gate_.has_value()) rates_.TakeEvidence(gate_->table_fraction());
  if (!plan_step) return;
  rates_.CloseInterval(clock_->Now());
  RefreshRatesLocked();
}

table::TableRollout PlannerCore::GateRolloutLocked() const {
  return {std::string(planner::GateStateName(gate_->state())), gate_->table_fraction()};
}

void PlannerCore::PersistLocked() {
  if (!store_.has_value() || history_.empty()) return;
  v1::PlannerState state = MetaLocked();
  *state.mutable_table() = history_.back()->ToProto();
  *state.mutable_rates() = RateAggregatorToProto(rates_);
  if (!store_->Save(state).ok()) ++counters_.persist_errors;
}

// Callers hold notify_mu_ from before they publish until this returns, so listeners see versions
// in publication order.
void PlannerCore::Notify(std::shared_ptr<const table::TableSnapshot> published) {
  if (published == nullptr) return;
  std::vector<Listener> listeners;
  {
    std::lock_guard<std::mutex> lock(listeners_mu_);
    for (const auto& [id, listener] : listeners_) listeners.push_back(listener);
  }
  for (const Listener& listener : listeners) listener(published);
}

absl::StatusOr<PlanOutcome> PlannerCore::Replan() {
  std::lock_guard<std::mutex> order(notify_mu_);
  std::shared_ptr<const table::TableSnapshot> published;
  absl::StatusOr<PlanOutcome> outcome;
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::optional<planner::Gate::Decision> decision;
    // Only a publish hook can refuse the step and so need the gate as it was before it.
    const std::optional<planner::Gate> gate_before =
        publish_hook_ ? gate_ : std::optional<planner::Gate>();
    // The evidence of the interval that ends now, gathered under the split published for it.
    if (gate_.has_value()) decision = ObserveGateLocked();
    const bool hold = config_.max_plans > 0 && counters_.plans >= config_.max_plans &&
                      last_plan_.has_value() && !history_.empty();
    outcome = hold ? HoldLocked(&published) : ReplanLocked(&published);
    if (outcome.ok()) {
      outcome->gate = std::move(decision);
    } else if (publish_hook_) {
      gate_ = gate_before;  // a refused publish: the gate's move did not reach the gateways
    }
  }
  Notify(std::move(published));
  return outcome;
}

absl::StatusOr<PlanOutcome> PlannerCore::ObserveGate() {
  std::lock_guard<std::mutex> order(notify_mu_);
  std::shared_ptr<const table::TableSnapshot> published;
  PlanOutcome outcome;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!gate_.has_value()) {
      return absl::FailedPreconditionError(
          "the planner runs no rollout gate (planner.yaml: gate.enabled is false)");
    }
    if (history_.empty()) return outcome;  // the gate starts with the first table
    outcome.version = history_.back()->version();
    const std::optional<planner::Gate> before = gate_;
    outcome.gate = ObserveGateLocked();
    if (outcome.gate->changed) {
      absl::StatusOr<std::shared_ptr<const table::TableSnapshot>> done =
          RepublishWithGateLocked(/*force=*/false);
      if (!done.ok()) {
        gate_ = before;  // a refused publish: the gate's move did not reach the gateways
        return done.status();
      }
      if (*done != nullptr) {
        outcome.version = (*done)->version();
        outcome.changed = true;
        published = *std::move(done);
      }
    }
    PersistLocked();
  }
  Notify(std::move(published));
  return outcome;
}

absl::StatusOr<PlanOutcome> PlannerCore::SetDestinations(std::vector<std::string> destinations) {
  if (absl::Status s = ValidateDestinationNames(destinations); !s.ok()) return s;
  std::lock_guard<std::mutex> order(notify_mu_);
  std::shared_ptr<const table::TableSnapshot> published;
  absl::StatusOr<PlanOutcome> outcome;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Order does not matter (every gateway may list its members differently): members that stay
    // keep their index order, new ones follow in the order given. The same set changes nothing.
    std::vector<std::string> ordered;
    ordered.reserve(destinations.size());
    for (const std::string& name : destinations_) {
      if (std::find(destinations.begin(), destinations.end(), name) != destinations.end()) {
        ordered.push_back(name);
      }
    }
    for (const std::string& name : destinations) {
      if (std::find(destinations_.begin(), destinations_.end(), name) == destinations_.end()) {
        ordered.push_back(name);
      }
    }
    destinations = std::move(ordered);
    if (destinations == destinations_ && !history_.empty()) {
      return PlanOutcome{.version = history_.back()->version(), .changed = false};
    }
    // A destination that stays keeps its drained flag.
    std::vector<bool> drained(destinations.size(), false);
    for (size_t i = 0; i < destinations.size(); ++i) {
      auto it = std::find(destinations_.begin(), destinations_.end(), destinations[i]);
      if (it != destinations_.end()) drained[i] = drained_[it - destinations_.begin()];
    }
    if (std::all_of(drained.begin(), drained.end(), [](bool d) { return d; })) {
      return absl::FailedPreconditionError("every destination of the new membership is drained");
    }
    std::vector<std::string> old_destinations = destinations_;
    std::vector<bool> old_drained = drained_;
    destinations_ = std::move(destinations);
    drained_ = std::move(drained);
    // With replicas the new membership must reach etcd even when the routing stays the same.
    outcome = ReplanLocked(&published, /*force=*/publish_hook_ != nullptr);
    if (!outcome.ok()) {  // e.g. the publish was refused: the membership stays as it was
      destinations_ = std::move(old_destinations);
      drained_ = std::move(old_drained);
    }
  }
  Notify(std::move(published));
  return outcome;
}

absl::StatusOr<PlanOutcome> PlannerCore::Drain(const std::string& destination, bool undrain) {
  std::lock_guard<std::mutex> order(notify_mu_);
  std::shared_ptr<const table::TableSnapshot> published;
  absl::StatusOr<PlanOutcome> outcome;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = std::find(destinations_.begin(), destinations_.end(), destination);
    if (it == destinations_.end()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("destination: \"%s\" is not a member", destination));
    }
    const size_t index = it - destinations_.begin();
    if (!undrain) {
      size_t active = 0;
      for (bool d : drained_) active += d ? 0 : 1;
      if (!drained_[index] && active == 1) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "destination: \"%s\" is the last active destination; draining it would leave none",
            destination));
      }
    }
    const bool was_drained = drained_[index];
    drained_[index] = !undrain;
    outcome = ReplanLocked(&published, /*force=*/publish_hook_ != nullptr);
    if (!outcome.ok()) drained_[index] = was_drained;
  }
  Notify(std::move(published));
  return outcome;
}

std::shared_ptr<const table::TableSnapshot> PlannerCore::Latest() const {
  std::lock_guard<std::mutex> lock(mu_);
  return history_.empty() ? nullptr : history_.back();
}

absl::StatusOr<std::shared_ptr<const table::TableSnapshot>> PlannerCore::Get(
    table::TableVersion v) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (history_.empty()) return absl::UnavailableError("no table has been planned yet");
  if (v.IsZero()) return history_.back();
  for (const auto& snapshot : history_) {
    if (snapshot->version() == v) return snapshot;
  }
  return absl::NotFoundError(
      absl::StrFormat("version: %s is not kept (the last %d versions are, from %s to %s)",
                      v.ToString(), config_.history, history_.front()->version().ToString(),
                      history_.back()->version().ToString()));
}

v1::GetStatusResponse PlannerCore::Status() const {
  std::lock_guard<std::mutex> lock(mu_);
  v1::GetStatusResponse out;
  if (!history_.empty()) {
    const table::TableSnapshot& latest = *history_.back();
    *out.mutable_version() = latest.version().ToProto();
    for (double load : latest.expected_loads()) out.add_expected_loads(load);
  }
  out.set_plan_unix_ms(last_plan_unix_ms_);
  out.set_build_seconds(last_stats_.build_seconds);
  out.set_keys_known(rates_.known_keys());
  out.set_keys_admitted(last_stats_.admitted_keys);
  out.set_slots_used(last_stats_.slots_used);
  out.set_slot_capacity(last_stats_.slot_capacity);
  out.set_imbalance(last_stats_.imbalance);
  out.set_total_rate(last_stats_.total_rate);
  out.set_cold_tail_rate(last_stats_.cold_tail_rate);
  out.set_q_cap(config_.q_cap);
  out.set_slots_per_destination(config_.slots_per_destination);
  if (last_stats_.byte_aware) {
    v1::ByteAwareStatus* b = out.mutable_byte_aware();
    b->set_kv_budget_tokens(last_stats_.kv_budget);
    b->set_kv_used_tokens(last_stats_.kv_used);
    b->set_saved_work(last_stats_.saved_work);
    b->set_possible_saved_work(last_stats_.possible_saved_work);
    b->set_total_work(last_stats_.total_work);
    b->set_work_imbalance(last_stats_.work_imbalance);
    b->set_measured_keys(last_stats_.measured_keys);
    b->set_turnover_seconds(last_stats_.turnover_seconds);
  }
  for (size_t i = 0; i < destinations_.size(); ++i) {
    out.add_destinations(destinations_[i]);
    out.add_drained(drained_[i]);
  }
  std::map<std::string, v1::GatewayStatus> gateways;
  for (const planner::GatewayInfo& g : rates_.Gateways()) {
    v1::GatewayStatus& status = gateways[g.gateway_id];
    status.set_gateway_id(g.gateway_id);
    status.set_last_sequence(g.last_sequence);
    status.set_last_report_unix_ms(absl::ToUnixMillis(g.last_report));
  }
  for (const auto& [id, info] : streams_) {
    v1::GatewayStatus& status = gateways[id];
    status.set_gateway_id(id);
    status.set_subscribed(info.subscribed);
    *status.mutable_acked_version() = info.acked.ToProto();
  }
  for (auto& [id, status] : gateways) *out.add_gateways() = std::move(status);
  if (gate_.has_value()) *out.mutable_gate() = GateStatusLocked();
  out.set_reports_accepted(counters_.reports_accepted);
  out.set_reports_duplicate(counters_.reports_duplicate);
  return out;
}

v1::GateStatus PlannerCore::GateStatusLocked() const {
  v1::GateStatus out;
  out.set_state(std::string(planner::GateStateName(gate_->state())));
  out.set_table_fraction(gate_->table_fraction());
  if (gate_->forced().has_value()) {
    out.set_forced_state(std::string(planner::GateStateName(*gate_->forced())));
    out.set_forced_why(gate_->forced_why());
  }
  if (last_gate_decision_.has_value()) {
    const planner::Gate::Decision& d = *last_gate_decision_;
    out.set_interval(d.interval);
    out.set_verdict(std::string(planner::VerdictKindName(d.verdict.kind)));
    out.set_why(d.why);
    out.set_table_quantile_seconds(d.verdict.table_quantile);
    out.set_control_quantile_seconds(d.verdict.control_quantile);
    out.set_table_failure_rate(d.verdict.table_failure_rate);
    out.set_control_failure_rate(d.verdict.control_failure_rate);
    out.set_table_samples(d.verdict.table_samples);
    out.set_control_samples(d.verdict.control_samples);
    out.set_table_kv_hit(d.verdict.table_kv_hit);
    out.set_control_kv_hit(d.verdict.control_kv_hit);
  }
  return out;
}

absl::StatusOr<v1::GateStatus> PlannerCore::ForceGate(const std::string& state,
                                                      const std::string& why) {
  std::lock_guard<std::mutex> order(notify_mu_);
  std::shared_ptr<const table::TableSnapshot> published;
  v1::GateStatus status;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!gate_.has_value()) {
      return absl::FailedPreconditionError(
          "the planner runs no rollout gate (planner.yaml: gate.enabled is false)");
    }
    std::optional<planner::GateState> forced;
    if (!state.empty()) {
      forced = planner::ParseGateState(state);
      if (!forced.has_value()) {
        return absl::InvalidArgumentError(
            absl::StrCat("state: \"", state,
                         "\" is not shadow, canary, enabled, rolled_back or \"\" (release)"));
      }
    }
    const std::optional<planner::Gate> before = gate_;
    gate_->Force(forced, why);
    // The new split goes out at once, as a new version of the latest table; with replicas the
    // forced state must reach etcd even when the split is unchanged.
    absl::StatusOr<std::shared_ptr<const table::TableSnapshot>> done =
        RepublishWithGateLocked(/*force=*/publish_hook_ != nullptr);
    if (!done.ok()) {
      gate_ = before;
      return done.status();
    }
    published = *std::move(done);
    PersistLocked();
    status = GateStatusLocked();
  }
  Notify(std::move(published));
  return status;
}

v1::ExplainResponse PlannerCore::Explain(uint64_t key_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  v1::ExplainResponse out;
  out.set_key_id(key_id);
  out.set_key(std::string(rates_.KeyName(key_id)));
  if (history_.empty()) {
    out.set_reason("no plan yet");
    return out;
  }
  const table::TableSnapshot& latest = *history_.back();
  *out.mutable_version() = latest.version().ToProto();
  // The key's rate as planned: from the inputs of the last planning step.
  const auto it = std::find_if(last_rates_.begin(), last_rates_.end(),
                               [&](const planner::KeyRate& kr) { return kr.key == key_id; });
  if (it == last_rates_.end()) {
    out.set_reason("unknown key: no gateway reported it (or it expired) before the last plan");
    return out;
  }
  const double rate = it->rate;
  out.set_known(true);
  out.set_rate(rate);
  uint64_t rank = 1;
  for (const planner::KeyRate& kr : last_rates_) {
    if (kr.rate > rate || (kr.rate == rate && kr.key < key_id)) ++rank;
  }
  out.set_rank(rank);
  const auto active = static_cast<uint32_t>(ActiveLocked().size());
  const planner::PlanConfig plan_config = PlanConfigLocked(active);
  const std::optional<planner::KeyEstimate> estimate = planner::EstimateKey(
      last_rates_, last_tokens_, plan_config, static_cast<size_t>(it - last_rates_.begin()));
  if (estimate.has_value()) {
    out.set_byte_aware(true);
    out.set_k(estimate->k);
    out.set_k_capped(estimate->capped);
    out.set_reusable_tokens(estimate->reusable);
    out.set_prompt_tokens(estimate->prompt);
    out.set_reusable_measured(estimate->measured);
    out.set_saved_work(estimate->saved);
    out.set_work(estimate->work);
  } else {
    bool capped = false;
    out.set_k(planner::AssignmentCount(rate, config_.q_cap, active, &capped));
    out.set_k_capped(capped);
  }
  if (const table::TableEntry* entry = latest.Find(key_id); entry != nullptr) {
    out.set_admitted(true);
    for (uint32_t d : entry->destinations) {
      out.add_destinations(d);
      out.add_expected_loads(latest.expected_loads()[d]);
    }
    return out;
  }
  if (rate == 0) {
    out.set_reason("zero rate: keys with no traffic are never admitted");
  } else if (estimate.has_value() && estimate->saved <= 0) {
    out.set_reason(absl::StrFormat(
        "no reusable prefix: its requests share %.0f tokens with the key's previous one, so "
        "affinity saves no prefill work",
        estimate->reusable));
  } else if (estimate.has_value()) {
    out.set_reason(absl::StrFormat(
        "KV budget: the admitted keys save more prefill work per second and use %.0f of %.0f "
        "planned-prefix tokens; this key would save %.4g tokens/s and needs %.0f (%.0f reusable "
        "tokens × k = %d)",
        last_stats_.kv_used, last_stats_.kv_budget, estimate->saved, estimate->cost,
        estimate->reusable, estimate->k));
  } else {
    out.set_reason(absl::StrFormat(
        "slots exhausted: admission stopped after the %d hottest keys, which use %d of %d "
        "slots; this key is rank %d and needs %d",
        last_stats_.admitted_keys, last_stats_.slots_used, last_stats_.slot_capacity, rank,
        out.k()));
  }
  return out;
}

void PlannerCore::RecordSubscriber(const std::string& gateway_id, bool subscribed) {
  std::lock_guard<std::mutex> lock(mu_);
  streams_[gateway_id].subscribed = subscribed;
}

void PlannerCore::RecordAck(const std::string& gateway_id, table::TableVersion acked) {
  std::lock_guard<std::mutex> lock(mu_);
  streams_[gateway_id].acked = acked;
}

uint64_t PlannerCore::AddListener(Listener listener) {
  std::lock_guard<std::mutex> lock(listeners_mu_);
  const uint64_t id = next_listener_++;
  listeners_.emplace(id, std::move(listener));
  return id;
}

void PlannerCore::RemoveListener(uint64_t id) {
  // Waits for a notification in progress, so the listener is not running once this returns.
  std::lock_guard<std::mutex> order(notify_mu_);
  std::lock_guard<std::mutex> lock(listeners_mu_);
  listeners_.erase(id);
}

PlannerCore::Counters PlannerCore::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

}  // namespace cacheroute::service
