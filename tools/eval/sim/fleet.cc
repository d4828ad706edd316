// RunFleet: see fleet.h. A run is four steps (FleetRun): build the fleet (engines, gateways, and
// for CacheRoute the control plane, fleet_control.h), the event loop, and the metrics.
//
// The event loop merges four sources in time order: arrivals (the sorted request span), engine
// events (a min-heap of (time, engine) with lazily dropped stale entries: an entry is live only if
// it still equals the engine's NextEventTime), the control plane's steps and, for the policies
// that read them, the engines' KV event batches coming due (fleet_kv_events.h). At equal times a
// control step goes first (a plan made at t applies to arrivals at t), then KV events due, then
// arrivals, then engine steps (so requests arriving at t join the iteration scheduled at t);
// engines by index.
#include "tools/eval/sim/fleet.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <queue>
#include <utility>

#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "cacheroute/dataplane/enum_names.h"
#include "cacheroute/dataplane/key_id.h"
#include "cacheroute/dataplane/policy_registry.h"
#include "cacheroute/dataplane/random.h"
#include "cacheroute/dataplane/rate_recorder.h"
#include "planner/algorithm.h"
#include "tools/eval/sim/calibration.h"
#include "tools/eval/sim/fleet_control.h"
#include "tools/eval/sim/fleet_gateway.h"
#include "tools/eval/sim/fleet_kv_events.h"
#include "tools/eval/sim/fleet_share.h"

namespace cacheroute::sim {
namespace {

using dataplane::Mix64;

enum class Outcome : uint8_t { kPending, kCompleted, kRejected, kTimedOut, kShed };

struct RequestState {
  double first_token = -1;
  double finish = -1;
  uint32_t cached = 0;
  uint32_t gateway = 0;
  uint32_t destination = 0;
  Outcome outcome = Outcome::kPending;
  // As routed, from its pick to its end: counted in flight and in its gateway's ledger.
  std::optional<frontend::RequestLifecycle> request;
  std::vector<uint64_t> hashes;  // alive from dispatch to the request's last event
};

absl::Status Invalid(std::string_view field, std::string_view requirement, double value) {
  return absl::InvalidArgumentError(
      absl::StrFormat("fleet config %s: must be %s, got %g", field, requirement, value));
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

bool UsesTable(const FleetConfig& config) {
  const dataplane::PolicyInfo* info = FindFleetPolicy(config);
  return info != nullptr && info->uses_table;
}

std::string RunLabel(const FleetConfig& config) {
  std::string label = config.policy;
  if (UsesTable(config) && config.ablation != PlanAblation::kFull) {
    label += "+";
    label += PlanAblationName(config.ablation);
  }
  return label;
}

// The config's q_cap, or one calibrated from the profile and the requests' mean lengths.
double QCapFor(const FleetConfig& config, std::span<const SimRequest> requests) {
  if (config.q_cap > 0) return config.q_cap;
  double prompt = 0, output = 0;
  for (const SimRequest& r : requests) {
    prompt += r.input_length;
    output += r.output_length;
  }
  const double n = std::max<double>(1, static_cast<double>(requests.size()));
  const double q_cap = CalibrateQCap(config.profile, prompt / n, prompt / n, output / n);
  return std::isfinite(q_cap) && q_cap > 0 ? q_cap : 1;  // 1: a profile that costs nothing
}

// A request's decode in prefill-token equivalents, for byte-aware planning's work estimates: the
// mean output's decode steps at the profile's cost per sequence, over its cost per prompt token.
double RequestOverheadTokens(const FleetConfig& config, std::span<const SimRequest> requests) {
  if (config.profile.prefill_per_token_s <= 0 || requests.empty()) return 0;
  double output = 0;
  for (const SimRequest& r : requests) output += r.output_length;
  return output / static_cast<double>(requests.size()) * config.profile.decode_per_seq_s /
         config.profile.prefill_per_token_s;
}

// One run of RunFleet.
class FleetRun {
 public:
  FleetRun(const FleetConfig& config, std::span<const SimRequest> requests)
      : config_(config),
        requests_(requests),
        gateway_choice_(Mix64(config.seed ^ 0x5851f42d4c957f2dULL)),
        states_(requests.size()),
        scheduled_(config.engines, kForever) {}

  absl::Status Build();
  absl::Status Loop();
  RunResult Finish();

 private:
  using Timer = std::pair<double, uint32_t>;

  // The per-request flow: a gateway admits (with shedding), routes, its engine queues.
  void Arrive(size_t index);
  void Dispatch(size_t index);
  // Shedding: each gateway's queue, pumped after every event (room comes as prefills end and as
  // shared work arrives; deadlines pass); the earliest deadline of any waiter.
  void PumpAdmission(dataplane::Time now);
  // In simulated seconds (kForever: none); `exact`, the deadline itself, which the seconds may
  // round below.
  double NextAdmissionDeadline(dataplane::Time* exact) const;
  void OnEngineEvents(uint32_t d, std::span<const EngineEvent> events);
  void EndRequest(uint64_t index, Outcome outcome);
  uint32_t GatewayFor(size_t index);
  // Engine timers.
  double NextEngineTime();
  void Schedule(uint32_t d);
  // Metrics over the window.
  void SummarizeRequests();
  void SummarizeEngines();
  // Routing precision (RunResult::routing_precision), at dispatch to `d`.
  void MeasurePrecision(size_t index, uint32_t d);

  const FleetConfig& config_;
  const std::span<const SimRequest> requests_;
  const bool table_ = UsesTable(config_);
  const bool gated_ = table_ && config_.gate;
  SimClock clock_;
  std::vector<Engine> engines_;
  std::vector<std::unique_ptr<SimGateway>> gateways_;
  dataplane::SeededRandom gateway_choice_;
  std::unique_ptr<SimControlPlane> control_;  // CacheRoute only
  std::unique_ptr<SimShare> share_;           // sharing gateways only
  std::unique_ptr<KvEventFeed> kv_events_;    // the policies that read KV events only
  std::vector<RequestState> states_;
  std::priority_queue<Timer, std::vector<Timer>, std::greater<>> timers_;
  std::vector<double> scheduled_;
  size_t next_ = 0;  // the next arrival
  uint64_t table_arm_requests_ = 0;
  uint64_t precision_requests_ = 0;  // measured requests some engine holds a prefix of
  uint64_t precise_requests_ = 0;    // of which sent to an engine holding the longest
  RunResult result_;
};

absl::Status FleetRun::Build() {
  result_.policy = RunLabel(config_);
  result_.seed = config_.seed;
  result_.engines.resize(config_.engines);
  if (config_.record_dispatches) result_.dispatches.resize(requests_.size());
  if (config_.shed && !(config_.admission.saturation_tokens > 0)) {
    return Invalid("admission.saturation_tokens", "> 0", config_.admission.saturation_tokens);
  }
  engines_.reserve(config_.engines);
  for (uint32_t d = 0; d < config_.engines; ++d)
    engines_.emplace_back(config_.profile, config_.engine);
  // Dynamo's replica sync: one count of the blocks in flight for every gateway's policy.
  std::shared_ptr<dataplane::DynamoActiveBlocks> synced_blocks;
  if (config_.replica_sync) {
    synced_blocks = std::make_shared<dataplane::DynamoActiveBlocks>(
        config_.engines, config_.parameters.dynamo.request_expiry);
  }
  for (uint32_t g = 0; g < config_.gateways; ++g) {
    CACHEROUTE_ASSIGN_OR_RETURN(std::unique_ptr<SimGateway> gateway,
                                SimGateway::Create(config_, g, clock_, engines_, synced_blocks));
    gateways_.push_back(std::move(gateway));
  }
  if (SharesFleet(config_)) share_ = std::make_unique<SimShare>(config_, clock_, gateways_);
  if (FindFleetPolicy(config_)->reads_kv_events) {
    kv_events_ = std::make_unique<KvEventFeed>(config_.engines, config_.kv_event_delay_s);
    for (uint32_t d = 0; d < config_.engines; ++d) engines_[d].set_kv_event_log(kv_events_->log(d));
    result_.kv_event_subscriptions = uint64_t{config_.gateways} * config_.engines;
  }
  if (table_) {
    result_.q_cap = QCapFor(config_, requests_);
    CACHEROUTE_ASSIGN_OR_RETURN(
        control_, SimControlPlane::Create(config_, result_.q_cap,
                                          RequestOverheadTokens(config_, requests_), clock_));
  }
  return absl::OkStatus();
}

absl::Status FleetRun::Loop() {
  for (;;) {
    const double t_arrival = next_ < requests_.size() ? requests_[next_].arrival_s : kForever;
    const double t_engine = NextEngineTime();
    // Plans are only needed while requests still arrive.
    const double t_control =
        control_ != nullptr && next_ < requests_.size() ? control_->next_step_s() : kForever;
    // KV events too: they matter only to the arrivals still to come.
    const double t_events =
        kv_events_ != nullptr && next_ < requests_.size() ? kv_events_->next_due_s() : kForever;
    dataplane::Time deadline{};
    const double t_admission = NextAdmissionDeadline(&deadline);
    if (t_control == kForever && t_arrival == kForever && t_engine == kForever &&
        t_admission == kForever) {
      break;
    }
    if (t_admission < std::min({t_control, t_arrival, t_engine, t_events})) {
      clock_.now_s = t_admission;
      PumpAdmission(std::max(deadline, clock_.Now()));
      continue;
    }
    // Sharing, while requests arrive (it matters only to their picks), first at equal times (news
    // before the next pick).
    if (share_ != nullptr && next_ < requests_.size() &&
        share_->next_event_s() <= std::min({t_control, t_arrival, t_engine, t_events})) {
      clock_.now_s = share_->next_event_s();
      share_->Step();
      continue;
    }
    if (t_control <= t_arrival && t_control <= t_engine && t_control <= t_events) {
      clock_.now_s = t_control;
      if (absl::Status s = control_->Step(gateways_, result_); !s.ok()) return s;
    } else if (t_events <= t_arrival && t_events <= t_engine) {
      clock_.now_s = t_events;
      kv_events_->DeliverDue(t_events, [this](uint32_t d, std::span<const dataplane::KvEvent> e) {
        for (const std::unique_ptr<SimGateway>& g : gateways_) g->ApplyKvEvents(d, e);
      });
    } else if (t_arrival <= t_engine) {
      clock_.now_s = t_arrival;
      Arrive(next_++);
    } else {
      const uint32_t d = timers_.top().second;
      timers_.pop();
      scheduled_[d] = kForever;
      clock_.now_s = t_engine;
      OnEngineEvents(d, engines_[d].Step(t_engine));
      if (kv_events_ != nullptr) kv_events_->Collect(d, t_engine);
      Schedule(d);
    }
    if (config_.shed) PumpAdmission(clock_.Now());
  }
  return absl::OkStatus();
}

double FleetRun::NextAdmissionDeadline(dataplane::Time* exact) const {
  double next = kForever;
  if (!config_.shed) return next;
  for (const std::unique_ptr<SimGateway>& g : gateways_) {
    const std::optional<dataplane::Time> t = g->admission()->NextDeadline();
    if (!t.has_value()) continue;
    const double s = std::chrono::duration<double>(t->time_since_epoch()).count();
    if (s < next) {
      next = s;
      *exact = *t;
    }
  }
  return next;
}

void FleetRun::PumpAdmission(dataplane::Time now) {
  for (const std::unique_ptr<SimGateway>& g : gateways_) {
    frontend::AdmissionQueue& queue = *g->admission();
    if (queue.queued() > 0) queue.Pump(g->AdmissionRoom(), now);
  }
}

uint32_t FleetRun::GatewayFor(size_t index) {
  return config_.gateway_assignment == GatewayAssignment::kRoundRobin
             ? static_cast<uint32_t>(index % config_.gateways)
             : dataplane::UniformIndex(gateway_choice_, config_.gateways);
}

void FleetRun::Arrive(size_t index) {
  RequestState& state = states_[index];
  state.gateway = GatewayFor(index);
  if (!config_.shed) {
    Dispatch(index);
    return;
  }
  SimGateway& gateway = *gateways_[state.gateway];
  const frontend::AdmissionResult r = gateway.admission()->Offer(
      0, requests_[index].input_length, gateway.AdmissionRoom(), clock_.Now(),
      [this, index](frontend::Verdict verdict, frontend::ShedCause) {
        if (verdict == frontend::Verdict::kAdmit) {
          Dispatch(index);
        } else {
          states_[index].outcome = Outcome::kShed;
        }
      });
  if (r.verdict == frontend::Verdict::kAdmit) Dispatch(index);
  if (r.verdict == frontend::Verdict::kShed) state.outcome = Outcome::kShed;
}

void FleetRun::Dispatch(size_t index) {
  const SimRequest& request = requests_[index];
  RequestState& state = states_[index];
  AppendSimRequestBlockHashes(request, state.hashes);
  state.request.emplace(gateways_[state.gateway]->Route({.key_id = request.key_id,
                                                         .prompt_tokens = request.input_length,
                                                         .block_hashes = state.hashes}));
  const dataplane::Decision& decision = state.request->decision();
  const uint32_t d = decision.destination;
  state.destination = d;
  if (config_.record_dispatches) {
    result_.dispatches[index] = {.time = clock_.now_s,
                                 .gateway = state.gateway,
                                 .destination = d,
                                 .reason = decision.reason,
                                 .spilled = decision.spilled};
  }
  if (request.arrival_s >= config_.warmup_s) {
    ++result_.engines[d].requests;
    if (gated_ && decision.reason != dataplane::Reason::kControlArm) ++table_arm_requests_;
    if (decision.planned) ++result_.planned;
  }
  MeasurePrecision(index, d);
  const SubmitResult submitted = engines_[d].Submit({.id = index,
                                                     .prompt_tokens = request.input_length,
                                                     .output_tokens = request.output_length,
                                                     .block_hashes = state.hashes},
                                                    clock_.now_s);
  if (submitted != SubmitResult::kQueued) EndRequest(index, Outcome::kRejected);
  if (kv_events_ != nullptr) kv_events_->Collect(d, clock_.now_s);
  Schedule(d);
}

void FleetRun::OnEngineEvents(uint32_t d, std::span<const EngineEvent> events) {
  for (const EngineEvent& e : events) {
    RequestState& state = states_[e.request_id];
    const SimRequest& request = requests_[e.request_id];
    switch (e.kind) {
      case EngineEventKind::kFirstToken:
        state.first_token = e.time;
        state.cached = e.cached_tokens;
        gateways_[state.gateway]->OnFirstToken(*state.request);
        if (request.arrival_s >= config_.warmup_s) {
          result_.engines[d].prefill_work_tokens += e.prompt_tokens - e.cached_tokens;
        }
        break;
      case EngineEventKind::kFinished:
        state.finish = e.time;
        EndRequest(e.request_id, Outcome::kCompleted);
        break;
      case EngineEventKind::kTimedOut:
        state.finish = e.time;
        EndRequest(e.request_id, Outcome::kTimedOut);
        break;
    }
    result_.simulated_s = std::max(result_.simulated_s, e.time);
  }
}

void FleetRun::EndRequest(uint64_t index, Outcome outcome) {
  RequestState& state = states_[index];
  state.outcome = outcome;
  const SimRequest& request = requests_[index];
  std::optional<frontend::Usage> usage;
  if (outcome == Outcome::kCompleted) {
    usage = frontend::Usage{.prompt_tokens = request.input_length,
                            .cached_tokens = state.cached,
                            .completion_tokens = request.output_length};
  }
  // What a gateway answers: the engine's answer, a refusal (503), or its own timeout (504).
  const int status = outcome == Outcome::kCompleted  ? 200
                     : outcome == Outcome::kRejected ? 503
                                                     : 504;
  gateways_[state.gateway]->End(*state.request, status, usage);
  state.request.reset();
  std::vector<uint64_t>().swap(state.hashes);
}

double FleetRun::NextEngineTime() {
  while (!timers_.empty() && timers_.top().first != scheduled_[timers_.top().second]) timers_.pop();
  return timers_.empty() ? kForever : timers_.top().first;
}

void FleetRun::Schedule(uint32_t d) {
  const double t = engines_[d].NextEventTime();
  if (t != scheduled_[d] && t != kForever) timers_.push({t, d});
  scheduled_[d] = t;
}

void FleetRun::SummarizeRequests() {
  std::vector<double> ttft, e2e;
  double cached_tokens = 0, prompt_tokens = 0;
  double last_arrival = config_.warmup_s;
  for (size_t i = 0; i < requests_.size(); ++i) {
    if (requests_[i].arrival_s < config_.warmup_s) continue;
    last_arrival = std::max(last_arrival, requests_[i].arrival_s);
    ++result_.requests;
    const RequestState& state = states_[i];
    switch (state.outcome) {
      case Outcome::kCompleted:
        ++result_.completed;
        ttft.push_back(state.first_token - requests_[i].arrival_s);
        if (state.first_token - requests_[i].arrival_s <= config_.goodput_slo_s) ++result_.within_slo;
        e2e.push_back(state.finish - requests_[i].arrival_s);
        cached_tokens += state.cached;
        prompt_tokens += requests_[i].input_length;
        break;
      case Outcome::kRejected:
        ++result_.rejected;
        break;
      case Outcome::kTimedOut:
        ++result_.timed_out;
        break;
      case Outcome::kShed:
        ++result_.shed;
        break;
      case Outcome::kPending:
        break;  // unreachable: the loop runs until every engine is idle
    }
  }
  result_.failed = result_.rejected + result_.timed_out;
  result_.failure_rate =
      result_.requests > 0 ? static_cast<double>(result_.failed) / result_.requests : 0;
  result_.ttft_p50_s = Percentile(ttft, 0.50);
  result_.ttft_p90_s = Percentile(ttft, 0.90);
  result_.ttft_p99_s = Percentile(ttft, 0.99);
  result_.e2e_p50_s = Percentile(e2e, 0.50);
  result_.e2e_p99_s = Percentile(e2e, 0.99);
  result_.kv_hit = prompt_tokens > 0 ? cached_tokens / prompt_tokens : 0;
  const double span = last_arrival - config_.warmup_s;
  result_.throughput_rps = span > 0 ? result_.completed / span : 0;
  result_.goodput_qps = span > 0 ? result_.within_slo / span : 0;
  result_.offered_qps =
      config_.offered_qps > 0 ? config_.offered_qps : (span > 0 ? result_.requests / span : 0);
}

void FleetRun::SummarizeEngines() {
  double max_work = 0, total_work = 0;
  for (uint32_t d = 0; d < config_.engines; ++d) {
    result_.engines[d].stats = engines_[d].stats();
    result_.engines[d].cache = engines_[d].cache().stats();
    const double work = static_cast<double>(result_.engines[d].prefill_work_tokens);
    max_work = std::max(max_work, work);
    total_work += work;
  }
  result_.imbalance = total_work > 0 ? max_work / (total_work / config_.engines) : 1;
}

// Every engine's cache is asked before `d` admits the request (admission publishes its blocks
// there). PrefixCache's queries leave its LRU state alone, so the run is the same without them.
// A request qualifies when some engine holds any of its prefix: `d` does, or one beats it.
void FleetRun::MeasurePrecision(size_t index, uint32_t d) {
  const SimRequest& request = requests_[index];
  if (request.arrival_s < config_.warmup_s) return;
  const std::span<const uint64_t> hashes = states_[index].hashes;
  const uint32_t held = engines_[d].cache().Match(hashes, request.input_length);
  const bool beaten = std::any_of(engines_.begin(), engines_.end(), [&](const Engine& engine) {
    return engine.cache().MatchExceeds(hashes, request.input_length, held);
  });
  if (held == 0 && !beaten) return;
  ++precision_requests_;
  if (!beaten) ++precise_requests_;
}

RunResult FleetRun::Finish() {
  SummarizeRequests();
  SummarizeEngines();
  result_.precision_requests = precision_requests_;
  result_.routing_precision = precision_requests_ > 0 ? static_cast<double>(precise_requests_) /
                                                            static_cast<double>(precision_requests_)
                                                      : std::numeric_limits<double>::quiet_NaN();
  if (control_ != nullptr) control_->Finish(result_);
  if (share_ != nullptr) {
    const planner::ShareExchangeStats stats = share_->stats();
    result_.share_bytes_published = stats.bytes_published;
    result_.share_placements = stats.placements_published;
  }
  if (kv_events_ != nullptr) {
    result_.kv_events = kv_events_->events();
    result_.kv_event_bytes_per_s =
        result_.simulated_s > 0 ? kv_events_->bytes() * config_.gateways / result_.simulated_s : 0;
  }
  if (gated_) {
    result_.table_arm_share =
        result_.requests > 0 ? static_cast<double>(table_arm_requests_) / result_.requests : 0;
  }
  return std::move(result_);
}

}  // namespace

constexpr dataplane::EnumName<PlanAblation> kPlanAblationNames[] = {
    {PlanAblation::kFull, "full"},
    {PlanAblation::kAffinityOnly, "affinity"},
    {PlanAblation::kReplication, "replication"},
    {PlanAblation::kNone, "none"},
};
static_assert(dataplane::IsEnumTable(kPlanAblationNames, PlanAblation::kNone));

std::string_view PlanAblationName(PlanAblation ablation) {
  return dataplane::NameOf(kPlanAblationNames, ablation);
}

void AppendPromptBlockHashes(std::span<const uint64_t> hash_ids, uint32_t block_size,
                             uint32_t input_length, std::vector<uint64_t>& out) {
  if (block_size == 0 || block_size % kBlockTokens != 0) return;
  const uint32_t per_id = block_size / kBlockTokens;
  const uint64_t blocks =
      std::min<uint64_t>(input_length / kBlockTokens, uint64_t{per_id} * hash_ids.size());
  uint64_t parent = kRootBlockHash;
  for (uint64_t b = 0; b < blocks; ++b) {
    const uint64_t content = Mix64(hash_ids[b / per_id] ^ (kGolden * (b % per_id + 1)));
    parent = ChainBlockHash(parent, content);
    out.push_back(parent);
  }
}

void AppendSimRequestBlockHashes(const SimRequest& request, std::vector<uint64_t>& out) {
  AppendPromptBlockHashes(request.hash_ids, request.block_size, request.input_length, out);
}

const dataplane::PolicyInfo* FindFleetPolicy(const FleetConfig& config) {
  return dataplane::BuiltinPolicies().Find(config.policy);
}

bool SharesFleet(const FleetConfig& config) {
  const dataplane::PolicyInfo* info = FindFleetPolicy(config);
  return config.share && config.gateways > 1 && info != nullptr && info->uses_table &&
         config.dispatch.rule == dataplane::DispatchRule::kTokenWork;
}

absl::Status ValidateDispatchOptions(const dataplane::DispatchOptions& dispatch,
                                     std::string_view name) {
  const dataplane::Status s = dataplane::CheckDispatchWeights(dispatch, name);
  return s.ok ? absl::OkStatus() : absl::InvalidArgumentError(s.message);
}

absl::Status ValidateFleetConfig(const FleetConfig& config) {
  if (const dataplane::PolicyInfo* info = FindFleetPolicy(config);
      info == nullptr || info->name != config.policy) {
    // The registry's canonical names only: a run is labelled by its policy.
    return absl::InvalidArgumentError(
        absl::StrFormat("fleet config policy: must be one of %s, got \"%s\"",
                        absl::StrJoin(dataplane::BuiltinPolicies().Names(), ", "), config.policy));
  }
  if (config.engines == 0) return Invalid("engines", ">= 1", 0);
  if (config.engines > 65535) return Invalid("engines", "<= 65535", config.engines);
  if (config.gateways == 0) return Invalid("gateways", ">= 1", 0);
  if (absl::Status s = ValidateEngineProfile(config.profile); !s.ok()) return s;
  if (absl::Status s = ValidateEngineOptions(config.engine); !s.ok()) return s;
  if (!std::isfinite(config.warmup_s) || config.warmup_s < 0) {
    return Invalid("warmup_s", "finite and >= 0", config.warmup_s);
  }
  if (!std::isfinite(config.kv_event_delay_s) || config.kv_event_delay_s < 0) {
    return Invalid("kv_event_delay_s", "finite and >= 0", config.kv_event_delay_s);
  }
  if (!std::isfinite(config.offered_qps) || config.offered_qps < 0) {
    return Invalid("offered_qps", "finite and >= 0", config.offered_qps);
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
  if (!(config.plan_kv_budget_share >= 0 && config.plan_kv_budget_share <= 1)) {
    return Invalid("plan_kv_budget_share", "in [0, 1]", config.plan_kv_budget_share);
  }
  if (!(config.share_interval_s >= 0.001 && config.share_interval_s <= 10)) {
    return Invalid("share_interval_s", "in [0.001, 10]", config.share_interval_s);
  }
  if (!(config.share_delay_s >= 0 && config.share_delay_s <= 10)) {
    return Invalid("share_delay_s", "in [0, 10]", config.share_delay_s);
  }
  if (!(config.share_loss >= 0 && config.share_loss <= 1)) {
    return Invalid("share_loss", "in [0, 1]", config.share_loss);
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
  return ValidateDispatchOptions(config.dispatch, "fleet config dispatch");
}

void UseAlgorithm(FleetConfig& config, planner::Algorithm algorithm) {
  config.policy = planner::AlgorithmName(algorithm);
  config.dispatch = dataplane::DispatchFor(config.policy);
  config.algorithm = algorithm;
}

absl::StatusOr<RunResult> RunFleet(const FleetConfig& config,
                                   std::span<const SimRequest> requests) {
  const auto wall_start = std::chrono::steady_clock::now();
  if (absl::Status s = ValidateFleetConfig(config); !s.ok()) return s;
  if (absl::Status s = ValidateRequests(requests); !s.ok()) return s;
  FleetRun run(config, requests);
  if (absl::Status s = run.Build(); !s.ok()) return s;
  if (absl::Status s = run.Loop(); !s.ok()) return s;
  RunResult result = run.Finish();
  result.wall_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - wall_start).count();
  result.sim_requests_per_s =
      result.wall_s > 0 ? static_cast<double>(requests.size()) / result.wall_s : 0;
  return result;
}

}  // namespace cacheroute::sim
