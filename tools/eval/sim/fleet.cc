// RunFleet: see fleet.h.
//
// The event loop merges three sources in time order: arrivals (the sorted request span), engine
// events (a min-heap of (time, engine) with lazily dropped stale entries: an entry is live only if
// it still equals the engine's NextEventTime) and CacheRoute's control ticks. At equal times a
// control tick goes first (a plan made at t applies to arrivals at t), then arrivals, then engine
// steps (so requests arriving at t join the iteration scheduled at t); engines by index.
#include "tools/eval/sim/fleet.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <memory>
#include <optional>
#include <queue>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/enum_names.h"
#include "cacheroute/dataplane/evidence_recorder.h"
#include "cacheroute/dataplane/key_id.h"
#include "cacheroute/dataplane/policies.h"
#include "cacheroute/dataplane/random.h"
#include "cacheroute/dataplane/rate_recorder.h"
#include "cacheroute/dataplane/router.h"
#include "planner/plan_builder.h"
#include "planner/rate_aggregator.h"

namespace cacheroute::sim {
namespace {

using dataplane::Mix64;

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

// The dataplane's time, driven by the simulation.
class SimClock final : public dataplane::Clock {
 public:
  dataplane::Time Now() const override { return At(now_s); }
  static dataplane::Time At(double seconds) {
    return dataplane::Time(
        std::chrono::duration_cast<dataplane::Duration>(std::chrono::duration<double>(seconds)));
  }
  double now_s = 0;
};

// What a gateway knows of the fleet: its own requests in flight per destination; all up.
class InFlightView final : public dataplane::LoadView {
 public:
  explicit InFlightView(uint32_t destinations) : counts(destinations, 0) {}
  uint32_t size() const override { return static_cast<uint32_t>(counts.size()); }
  double Load(uint32_t d) const override { return static_cast<double>(counts[d]); }
  bool Up(uint32_t) const override { return true; }
  std::vector<int64_t> counts;
};

struct Gateway {
  Gateway(uint32_t destinations, uint64_t seed) : random(seed), view(destinations) {}
  dataplane::SeededRandom random;
  InFlightView view;
  std::unique_ptr<dataplane::Router> router;
  std::unique_ptr<dataplane::RateRecorder> recorder;
  std::unique_ptr<dataplane::Policy> policy;
  dataplane::EvidenceRecorder evidence;  // with the gate
  // The served KV hit this gateway has seen (cached / prompt tokens at each first token), decayed
  // over about the last kHitMemory requests, for Router::SetMeasuredHit.
  double seen_cached = 0, seen_prompt = 0;
};

constexpr double kHitMemory = 1000;

enum class Outcome : uint8_t { kPending, kCompleted, kRejected, kTimedOut };

struct RequestState {
  double first_token = -1;
  double finish = -1;
  uint32_t cached = 0;
  uint32_t gateway = 0;
  uint32_t destination = 0;
  Outcome outcome = Outcome::kPending;
  int8_t arm = -1;             // with the gate: the request's dataplane::Arm; -1 when no rollout
  double table_fraction = 1;   // the split it was routed under
  std::vector<uint64_t> hashes;  // alive from dispatch to the request's last event
};

absl::Status Invalid(std::string_view field, std::string_view requirement, double value) {
  return absl::InvalidArgumentError(
      absl::StrFormat("fleet config %s must be %s, got %g", field, requirement, value));
}

std::unique_ptr<dataplane::Policy> MakePolicy(const FleetConfig& config, Gateway& gateway,
                                              const SimClock& clock) {
  switch (config.policy) {
    case PolicyKind::kFlatLb:
      return std::make_unique<dataplane::FlatLbPolicy>(gateway.random);
    case PolicyKind::kSticky:
      return std::make_unique<dataplane::StickyPolicy>(config.engines);
    case PolicyKind::kChwbl:
      return std::make_unique<dataplane::ChwblPolicy>(config.engines, gateway.random,
                                                      config.chwbl_epsilon);
    case PolicyKind::kDualMap:
      return std::make_unique<dataplane::DualMapPolicy>(config.engines, gateway.random,
                                                        config.dualmap_queue_bound);
    case PolicyKind::kPreble:
      return std::make_unique<dataplane::PreblePolicy>(gateway.random,
                                                       config.preble_overload_factor);
    case PolicyKind::kCacheRoute:
      return std::make_unique<dataplane::CacheRoutePolicy>(*gateway.router, clock);
  }
  return nullptr;
}

// Nearest rank: the smallest value with at least p·n values at or below it.
double Percentile(std::vector<double>& values, double p) {
  if (values.empty()) return 0;
  const size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(values.size())));
  const size_t index = std::min(values.size() - 1, rank == 0 ? 0 : rank - 1);
  std::nth_element(values.begin(), values.begin() + static_cast<std::ptrdiff_t>(index),
                   values.end());
  return values[index];
}

absl::Status ValidateRequests(std::span<const SimRequest> requests) {
  double previous = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const SimRequest& r = requests[i];
    auto bad = [i](std::string_view field, std::string_view requirement, double value) {
      return absl::InvalidArgumentError(
          absl::StrFormat("requests[%u].%s must be %s, got %g", i, field, requirement, value));
    };
    if (!std::isfinite(r.arrival_s) || r.arrival_s < previous) {
      return bad("arrival_s", absl::StrFormat("finite and >= the previous arrival (%g)", previous),
                 r.arrival_s);
    }
    previous = r.arrival_s;
    if (r.input_length == 0) return bad("input_length", ">= 1", 0);
    if (r.output_length == 0) return bad("output_length", ">= 1", 0);
    if (r.block_size == 0 || r.block_size % kBlockTokens != 0) {
      return bad("block_size", "a positive multiple of 16", r.block_size);
    }
  }
  return absl::OkStatus();
}

std::string RunLabel(const FleetConfig& config) {
  std::string label(PolicyName(config.policy));
  if (config.policy == PolicyKind::kCacheRoute && config.ablation != PlanAblation::kFull) {
    label += "+";
    label += PlanAblationName(config.ablation);
  }
  return label;
}

}  // namespace

constexpr dataplane::EnumName<PolicyKind> kPolicyKindNames[] = {
    {PolicyKind::kFlatLb, "flat-lb"},
    {PolicyKind::kSticky, "sticky"},
    {PolicyKind::kChwbl, "chwbl"},
    {PolicyKind::kDualMap, "dualmap"},
    {PolicyKind::kPreble, "preble"},
    {PolicyKind::kCacheRoute, "cacheroute"},
};
static_assert(dataplane::IsEnumTable(kPolicyKindNames, PolicyKind::kCacheRoute));

std::string_view PolicyName(PolicyKind policy) {
  return dataplane::NameOf(kPolicyKindNames, policy);
}

std::vector<PolicyKind> AllPolicies() {
  std::vector<PolicyKind> all;
  for (const auto& entry : kPolicyKindNames) all.push_back(entry.value);
  return all;
}

absl::StatusOr<PolicyKind> ParsePolicyKind(std::string_view name) {
  if (std::optional<PolicyKind> p = dataplane::ParseName(kPolicyKindNames, name)) return *p;
  return absl::InvalidArgumentError(absl::StrFormat("unknown policy \"%s\" (known: %s)", name,
                                                    dataplane::JoinNames(kPolicyKindNames)));
}

constexpr dataplane::EnumName<PlanAblation> kPlanAblationNames[] = {
    {PlanAblation::kFull, "full"},
    {PlanAblation::kAffinityOnly, "affinity"},
    {PlanAblation::kReplication, "replication"},
};
static_assert(dataplane::IsEnumTable(kPlanAblationNames, PlanAblation::kReplication));

std::string_view PlanAblationName(PlanAblation ablation) {
  return dataplane::NameOf(kPlanAblationNames, ablation);
}

void AppendSimRequestBlockHashes(const SimRequest& request, std::vector<uint64_t>& out) {
  if (request.block_size == 0 || request.block_size % kBlockTokens != 0) return;
  const uint32_t per_id = request.block_size / kBlockTokens;
  const uint64_t blocks = std::min<uint64_t>(request.input_length / kBlockTokens,
                                             uint64_t{per_id} * request.hash_ids.size());
  uint64_t parent = kRootBlockHash;
  for (uint64_t b = 0; b < blocks; ++b) {
    const uint64_t content = Mix64(request.hash_ids[b / per_id] ^ (kGolden * (b % per_id + 1)));
    parent = ChainBlockHash(parent, content);
    out.push_back(parent);
  }
}

absl::Status ValidateFleetConfig(const FleetConfig& config) {
  if (config.engines == 0) return Invalid("engines", ">= 1", 0);
  if (config.engines > 65535) return Invalid("engines", "<= 65535", config.engines);
  if (config.gateways == 0) return Invalid("gateways", ">= 1", 0);
  if (absl::Status s = ValidateEngineProfile(config.profile); !s.ok()) return s;
  if (absl::Status s = ValidateEngineOptions(config.engine); !s.ok()) return s;
  if (!std::isfinite(config.warmup_s) || config.warmup_s < 0) {
    return Invalid("warmup_s", "finite and >= 0", config.warmup_s);
  }
  if (!std::isfinite(config.offered_qps) || config.offered_qps < 0) {
    return Invalid("offered_qps", "finite and >= 0", config.offered_qps);
  }
  if (!(config.chwbl_epsilon >= 0) || std::isinf(config.chwbl_epsilon)) {
    return Invalid("chwbl_epsilon", "finite and >= 0", config.chwbl_epsilon);
  }
  if (!(config.dualmap_queue_bound >= 0) || std::isinf(config.dualmap_queue_bound)) {
    return Invalid("dualmap_queue_bound", "finite and >= 0", config.dualmap_queue_bound);
  }
  if (!(config.preble_overload_factor > 0) || std::isinf(config.preble_overload_factor)) {
    return Invalid("preble_overload_factor", "finite and > 0", config.preble_overload_factor);
  }
  if (!(config.control_interval_s >= 0.001 && config.control_interval_s <= 3600)) {
    return Invalid("control_interval_s", "in [0.001, 3600]", config.control_interval_s);
  }
  if (!(config.gate_interval_s == 0 ||
        (config.gate_interval_s >= 0.001 && config.gate_interval_s <= 3600))) {
    return Invalid("gate_interval_s", "0 or in [0.001, 3600]", config.gate_interval_s);
  }
  if (!std::isfinite(config.q_cap) || config.q_cap < 0) {
    return Invalid("q_cap", "finite and >= 0 (0: calibrate)", config.q_cap);
  }
  if (config.slots_per_destination == 0) return Invalid("slots_per_destination", ">= 1", 0);
  if (!(config.rate_smoothing_s > 0) || std::isinf(config.rate_smoothing_s)) {
    return Invalid("rate_smoothing_s", "finite and > 0", config.rate_smoothing_s);
  }
  if (!(config.stickiness >= 0) || std::isinf(config.stickiness)) {
    return Invalid("stickiness", "finite and >= 0", config.stickiness);
  }
  if (config.recorder_max_keys == 0 ||
      config.recorder_max_keys > dataplane::RateRecorder::kMaxKeys) {
    return Invalid("recorder_max_keys", "in [1, 2^24]", config.recorder_max_keys);
  }
  return absl::OkStatus();
}

absl::StatusOr<RunResult> RunFleet(const FleetConfig& config,
                                   std::span<const SimRequest> requests) {
  const auto wall_start = std::chrono::steady_clock::now();
  if (absl::Status s = ValidateFleetConfig(config); !s.ok()) return s;
  if (absl::Status s = ValidateRequests(requests); !s.ok()) return s;
  const uint32_t r_count = config.engines;
  const bool cacheroute = config.policy == PolicyKind::kCacheRoute;

  RunResult result;
  result.policy = RunLabel(config);
  result.seed = config.seed;

  double q_cap = config.q_cap;
  if (cacheroute && q_cap == 0) {
    double prompt = 0, output = 0;
    for (const SimRequest& r : requests) {
      prompt += r.input_length;
      output += r.output_length;
    }
    const double n = std::max<double>(1, static_cast<double>(requests.size()));
    q_cap = CalibrateQCap(config.profile, prompt / n, prompt / n, output / n);
    if (!std::isfinite(q_cap) || q_cap <= 0) q_cap = 1;  // a profile that costs nothing
  }
  result.q_cap = cacheroute ? q_cap : 0;

  std::vector<Engine> engines;
  engines.reserve(r_count);
  for (uint32_t d = 0; d < r_count; ++d) engines.emplace_back(config.profile, config.engine);

  SimClock clock;
  std::vector<std::unique_ptr<Gateway>> gateways;
  for (uint32_t g = 0; g < config.gateways; ++g) {
    auto gateway = std::make_unique<Gateway>(r_count, Mix64(config.seed ^ (kGolden * (g + 1))));
    if (cacheroute) {
      gateway->router = std::make_unique<dataplane::Router>(
          dataplane::RouterOptions{.destination_count = r_count, .dispatch = config.dispatch}, gateway->random);
      gateway->recorder = std::make_unique<dataplane::RateRecorder>(dataplane::RateRecorderOptions{
          .shards = 1, .max_keys = config.recorder_max_keys, .max_report_keys = 100000});
    }
    gateway->policy = MakePolicy(config, *gateway, clock);
    gateways.push_back(std::move(gateway));
  }
  dataplane::SeededRandom gateway_choice(Mix64(config.seed ^ 0x5851f42d4c957f2dULL));

  // CacheRoute's control plane.
  const absl::Time epoch = absl::UnixEpoch();
  planner::RateAggregator aggregator({.smoothing = absl::Seconds(config.rate_smoothing_s)}, epoch);
  planner::PlanBuilder builder;
  planner::PlanConfig plan_config{.destinations = r_count,
                                  .q_cap = q_cap > 0 ? q_cap : 1,
                                  .slots_per_destination = config.slots_per_destination,
                                  .replicate = config.ablation != PlanAblation::kAffinityOnly,
                                  .placement = config.ablation == PlanAblation::kFull
                                                   ? planner::Placement::kLpt
                                                   : planner::Placement::kHashed,
                                  .placement_seed = config.seed,
                                  .stickiness = config.stickiness,
                                  .spill = config.plan_spill,
                                  .balance_share = config.plan_balance_share};
  uint64_t control_tick = 0;
  std::optional<planner::Plan> previous_plan;
  std::optional<planner::Gate> gate;
  if (cacheroute && config.gate) gate.emplace(config.gate_options);
  double churn_sum = 0;
  uint32_t churn_transitions = 0;
  uint64_t report_sequence = 0;  // per gateway, one per report round
  uint64_t table_number = 0;
  double last_report = 0;
  // One report from every gateway: its evidence, and with `with_counts` its rate counts.
  auto report_round = [&](double now, bool with_counts) -> absl::Status {
    ++report_sequence;
    const absl::Time at = epoch + absl::Seconds(now);
    const int64_t end_ms = absl::ToUnixMillis(at);
    const int64_t start_ms = absl::ToUnixMillis(
        at - absl::Seconds(with_counts ? config.control_interval_s : now - last_report));
    last_report = now;
    for (uint32_t g = 0; g < gateways.size(); ++g) {
      planner::RateReport report;
      report.gateway_id = absl::StrFormat("gateway-%u", g);
      report.sequence = report_sequence;
      report.window_start_unix_ms = start_ms;
      report.window_end_unix_ms = std::max(end_ms, start_ms + 1);
      if (with_counts) {
        const dataplane::RateSnapshot snapshot = gateways[g]->recorder->Drain();
        report.other_count = static_cast<double>(snapshot.other_count);
        report.counts.reserve(snapshot.counts.size());
        for (const dataplane::KeyCount& k : snapshot.counts) {
          planner::KeyCountReport& count = report.counts.emplace_back();
          count.key_id = k.key_id;
          count.count = static_cast<double>(k.count);
        }
      }
      if (std::optional<dataplane::WindowEvidence> w = gateways[g]->evidence.Drain()) {
        report.evidence = planner::EvidenceReport::From(w->table_fraction, w->evidence);
      }
      if (absl::StatusOr<planner::ReportResult> r = aggregator.Apply(report, at); !r.ok()) {
        return r.status();
      }
    }
    return absl::OkStatus();
  };
  // The gate's decision on the evidence reported since the last one; true when its split changed.
  auto observe_gate = [&](double now) {
    const planner::Gate::Decision decision =
        gate->Observe(aggregator.TakeEvidence(gate->table_fraction()));
    if (decision.changed) {
      ++result.gate_changes;
      result.gate_history.push_back({.time = now,
                                     .state = std::string(planner::GateStateName(decision.state)),
                                     .why = decision.why});
    }
    return decision.changed;
  };
  // Every gateway installs `plan` with the gate's split (all keys on the table without the gate).
  auto install = [&](const planner::Plan& plan, double now,
                     std::vector<dataplane::TableEntry>* entries_out,
                     std::vector<double>* loads_out) -> absl::Status {
    std::vector<dataplane::TableEntry> entries(plan.size());
    for (size_t i = 0; i < plan.size(); ++i) {
      entries[i].key_id = plan.key(i);
      entries[i].destinations.assign(plan.destinations(i).begin(), plan.destinations(i).end());
      entries[i].spill = plan.spill(i);
    }
    std::vector<double> loads(plan.loads().begin(), plan.loads().end());
    dataplane::Result<dataplane::RoutingTable> table = dataplane::RoutingTable::Build(
        {.epoch = 1, .number = ++table_number}, r_count, loads, entries,
        gate.has_value() ? gate->table_fraction() : 1.0);
    if (!table.ok()) return absl::InternalError(table.status().message);
    auto shared = std::make_shared<const dataplane::RoutingTable>(*std::move(table));
    for (auto& gateway : gateways) {
      if (dataplane::Status s = gateway->router->Install(shared, SimClock::At(now)); !s.ok) {
        return absl::InternalError(s.message);
      }
    }
    if (entries_out != nullptr) *entries_out = std::move(entries);
    if (loads_out != nullptr) *loads_out = std::move(loads);
    return absl::OkStatus();
  };
  // Between control ticks: evidence only, and the held plan re-installed when the split changed.
  auto gate_tick = [&](double now) -> absl::Status {
    if (absl::Status s = report_round(now, /*with_counts=*/false); !s.ok()) return s;
    if (!previous_plan.has_value()) return absl::OkStatus();  // the gate starts with the first plan
    if (!observe_gate(now)) return absl::OkStatus();
    return install(*previous_plan, now, nullptr, nullptr);
  };
  auto replan = [&](double now) -> absl::Status {
    ++control_tick;
    const absl::Time at = epoch + absl::Seconds(now);
    if (absl::Status s = report_round(now, /*with_counts=*/true); !s.ok()) return s;
    if (gate.has_value()) observe_gate(now);
    aggregator.CloseInterval(at);
    // Past max_plans the plan is held; with the gate the table is still re-installed with the
    // gate's split.
    const bool hold = config.max_plans > 0 && result.plans >= config.max_plans &&
                      previous_plan.has_value();
    absl::StatusOr<planner::Plan> plan = absl::InternalError("unset");
    if (hold) {
      plan = *previous_plan;
    } else {
      const std::vector<planner::KeyRate> rates = aggregator.Rates();
      plan_config.unkeyed_rate = aggregator.UnkeyedRate();
      plan = builder.Build(rates, plan_config,
                           previous_plan.has_value() ? &*previous_plan : nullptr);
    }
    if (!plan.ok()) return plan.status();
    if (previous_plan.has_value()) {
      absl::flat_hash_map<uint64_t, size_t> before;
      for (size_t i = 0; i < previous_plan->size(); ++i) before[previous_plan->key(i)] = i;
      uint64_t common = 0, moved = 0;
      for (size_t i = 0; i < plan->size(); ++i) {
        auto it = before.find(plan->key(i));
        if (it == before.end()) continue;
        ++common;
        const std::span<const uint32_t> a = previous_plan->destinations(it->second);
        const std::span<const uint32_t> b = plan->destinations(i);
        moved += !std::equal(a.begin(), a.end(), b.begin(), b.end());
      }
      if (common > 0) {
        churn_sum += static_cast<double>(moved) / common;
        ++churn_transitions;
      }
    }
    std::vector<dataplane::TableEntry> entries;
    std::vector<double> loads;
    if (absl::Status s = install(*plan, now, &entries, &loads); !s.ok()) return s;
    if (!hold) ++result.plans;
    previous_plan = *std::move(plan);
    if (config.record_dispatches) {
      result.plan_records.push_back(
          {.time = now, .entries = std::move(entries), .expected_loads = std::move(loads)});
    }
    return absl::OkStatus();
  };

  std::vector<RequestState> states(requests.size());
  uint64_t table_arm_requests = 0;
  if (config.record_dispatches) result.dispatches.resize(requests.size());
  result.engines.resize(r_count);

  using Timer = std::pair<double, uint32_t>;
  std::priority_queue<Timer, std::vector<Timer>, std::greater<>> timers;
  std::vector<double> scheduled(r_count, kForever);
  auto schedule = [&](uint32_t d) {
    const double t = engines[d].NextEventTime();
    if (t != scheduled[d] && t != kForever) timers.push({t, d});
    scheduled[d] = t;
  };

  auto end_request = [&](uint64_t index, Outcome outcome) {
    RequestState& state = states[index];
    state.outcome = outcome;
    if (state.arm >= 0 && outcome != Outcome::kCompleted) {  // failed before its first token
      gateways[state.gateway]->evidence.Record(state.table_fraction,
                                               static_cast<dataplane::Arm>(state.arm),
                                               std::nullopt, true, 0, 0);
      state.arm = -1;
    }
    --gateways[state.gateway]->view.counts[state.destination];
    std::vector<uint64_t>().swap(state.hashes);
  };

  auto handle = [&](uint32_t d, std::span<const EngineEvent> events) {
    for (const EngineEvent& e : events) {
      RequestState& state = states[e.request_id];
      switch (e.kind) {
        case EngineEventKind::kFirstToken: {
          state.first_token = e.time;
          state.cached = e.cached_tokens;
          Gateway& gateway = *gateways[state.gateway];
          if (state.arm >= 0) {
            gateway.evidence.Record(state.table_fraction, static_cast<dataplane::Arm>(state.arm),
                                    e.time - requests[e.request_id].arrival_s, false,
                                    e.prompt_tokens, e.cached_tokens);
            state.arm = -1;  // counted
          }
          if (gateway.router != nullptr) {
            constexpr double kKeep = 1 - 1 / kHitMemory;
            gateway.seen_cached = gateway.seen_cached * kKeep + e.cached_tokens;
            gateway.seen_prompt = gateway.seen_prompt * kKeep + e.prompt_tokens;
            if (gateway.seen_prompt > 0) {
              (void)gateway.router->SetMeasuredHit(gateway.seen_cached / gateway.seen_prompt);
            }
          }
          if (requests[e.request_id].arrival_s >= config.warmup_s) {
            result.engines[d].prefill_work_tokens += e.prompt_tokens - e.cached_tokens;
          }
          break;
        }
        case EngineEventKind::kFinished:
          state.finish = e.time;
          end_request(e.request_id, Outcome::kCompleted);
          break;
        case EngineEventKind::kTimedOut:
          state.finish = e.time;
          end_request(e.request_id, Outcome::kTimedOut);
          break;
      }
      result.simulated_s = std::max(result.simulated_s, e.time);
    }
  };

  double next_control = cacheroute ? config.control_interval_s : kForever;
  // Gate ticks between control ticks (one at the same time as a control tick is that tick).
  const bool gate_ticks = gate.has_value() && config.gate_interval_s > 0;
  double next_gate = gate_ticks ? config.gate_interval_s : kForever;
  size_t next = 0;
  for (;;) {
    const double t_arrival = next < requests.size() ? requests[next].arrival_s : kForever;
    while (!timers.empty() && timers.top().first != scheduled[timers.top().second]) timers.pop();
    const double t_engine = timers.empty() ? kForever : timers.top().first;
    // Plans are only needed while requests still arrive.
    const double t_control =
        next < requests.size() ? std::min(next_control, next_gate) : kForever;
    if (t_control == kForever && t_arrival == kForever && t_engine == kForever) break;

    if (t_control <= t_arrival && t_control <= t_engine) {
      clock.now_s = t_control;
      constexpr double kSameTick = 1e-9;
      if (next_control <= next_gate + kSameTick) {
        if (absl::Status s = replan(next_control); !s.ok()) return s;
        if (next_gate <= next_control + kSameTick) next_gate += config.gate_interval_s;
        next_control += config.control_interval_s;
        if (config.max_plans > 0 && result.plans >= config.max_plans && !gate.has_value()) {
          next_control = kForever;
        }
      } else {
        if (absl::Status s = gate_tick(next_gate); !s.ok()) return s;
        next_gate += config.gate_interval_s;
      }
      continue;
    }
    if (t_arrival <= t_engine) {
      const double now = t_arrival;
      clock.now_s = now;
      const SimRequest& request = requests[next];
      RequestState& state = states[next];
      const uint32_t g = config.gateway_assignment == GatewayAssignment::kRoundRobin
                             ? static_cast<uint32_t>(next % config.gateways)
                             : dataplane::UniformIndex(gateway_choice, config.gateways);
      Gateway& gateway = *gateways[g];
      const dataplane::Decision decision = gateway.policy->Pick(request.key_id, gateway.view);
      const uint32_t d = decision.destination;  // every destination is up: never kNoDestination
      state.gateway = g;
      state.destination = d;
      if (gate.has_value() && gateway.router->table_fraction() < 1) {
        state.table_fraction = gateway.router->table_fraction();
        state.arm = static_cast<int8_t>(decision.reason == dataplane::Reason::kControlArm
                                            ? dataplane::Arm::kControl
                                            : dataplane::Arm::kTable);
      }
      ++gateway.view.counts[d];
      if (gateway.recorder != nullptr) gateway.recorder->Record(request.key_id);
      if (config.record_dispatches) {
        result.dispatches[next] = {
            .time = now, .gateway = g, .destination = d, .reason = decision.reason};
      }
      const bool in_window = request.arrival_s >= config.warmup_s;
      if (in_window) {
        ++result.engines[d].requests;
        if (gate.has_value() && decision.reason != dataplane::Reason::kControlArm) {
          ++table_arm_requests;
        }
        if (decision.planned) ++result.planned;
      }
      AppendSimRequestBlockHashes(request, state.hashes);
      const SubmitResult submitted = engines[d].Submit({.id = next,
                                                        .prompt_tokens = request.input_length,
                                                        .output_tokens = request.output_length,
                                                        .block_hashes = state.hashes},
                                                       now);
      if (submitted != SubmitResult::kQueued) end_request(next, Outcome::kRejected);
      schedule(d);
      ++next;
      continue;
    }
    const uint32_t d = timers.top().second;
    timers.pop();
    scheduled[d] = kForever;
    clock.now_s = t_engine;
    handle(d, engines[d].Step(t_engine));
    schedule(d);
  }

  // Metrics over the window.
  std::vector<double> ttft, e2e;
  double cached_tokens = 0, prompt_tokens = 0;
  double last_arrival = config.warmup_s;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (requests[i].arrival_s < config.warmup_s) continue;
    last_arrival = std::max(last_arrival, requests[i].arrival_s);
    ++result.requests;
    const RequestState& state = states[i];
    switch (state.outcome) {
      case Outcome::kCompleted:
        ++result.completed;
        ttft.push_back(state.first_token - requests[i].arrival_s);
        e2e.push_back(state.finish - requests[i].arrival_s);
        cached_tokens += state.cached;
        prompt_tokens += requests[i].input_length;
        break;
      case Outcome::kRejected:
        ++result.rejected;
        break;
      case Outcome::kTimedOut:
        ++result.timed_out;
        break;
      case Outcome::kPending:
        break;  // unreachable: the loop runs until every engine is idle
    }
  }
  result.plan_churn = churn_transitions > 0 ? churn_sum / churn_transitions : 0;
  if (gate.has_value()) {
    result.gate_state = std::string(planner::GateStateName(gate->state()));
    result.table_arm_share =
        result.requests > 0 ? static_cast<double>(table_arm_requests) / result.requests : 0;
  }
  result.failed = result.rejected + result.timed_out;
  result.failure_rate =
      result.requests > 0 ? static_cast<double>(result.failed) / result.requests : 0;
  result.ttft_p50_s = Percentile(ttft, 0.50);
  result.ttft_p90_s = Percentile(ttft, 0.90);
  result.ttft_p99_s = Percentile(ttft, 0.99);
  result.e2e_p50_s = Percentile(e2e, 0.50);
  result.e2e_p99_s = Percentile(e2e, 0.99);
  result.kv_hit = prompt_tokens > 0 ? cached_tokens / prompt_tokens : 0;
  const double span = last_arrival - config.warmup_s;
  result.throughput_rps = span > 0 ? result.completed / span : 0;
  result.offered_qps =
      config.offered_qps > 0 ? config.offered_qps : (span > 0 ? result.requests / span : 0);

  double max_work = 0, total_work = 0;
  for (uint32_t d = 0; d < r_count; ++d) {
    result.engines[d].stats = engines[d].stats();
    result.engines[d].cache = engines[d].cache().stats();
    const double work = static_cast<double>(result.engines[d].prefill_work_tokens);
    max_work = std::max(max_work, work);
    total_work += work;
  }
  result.imbalance = total_work > 0 ? max_work / (total_work / r_count) : 1;

  result.wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  result.sim_requests_per_s =
      result.wall_s > 0 ? static_cast<double>(requests.size()) / result.wall_s : 0;
  return result;
}

}  // namespace cacheroute::sim
