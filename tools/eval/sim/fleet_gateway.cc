// See fleet_gateway.h.
#include "tools/eval/sim/fleet_gateway.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

#include "absl/strings/str_format.h"
#include "cacheroute/dataplane/key_id.h"
#include "cacheroute/dataplane/policy_registry.h"
#include "planner/plan_snapshot.h"

namespace cacheroute::sim {
namespace {

// What a routed request counts as queued prefill at its destination until its first token: its
// policy's estimate of the uncached tokens, or its whole prompt.
double QueuedTokens(const dataplane::Decision& decision, uint32_t prompt_tokens) {
  return decision.expected_uncached_tokens > 0 ? decision.expected_uncached_tokens
                                               : prompt_tokens;
}

// How many recent first tokens the measured KV hit remembers (its decay).
constexpr double kHitMemory = 1000;
// The window over which a destination's intake of new KV tokens is averaged (its decay).
constexpr double kTurnoverWindowS = 60;

}  // namespace

dataplane::Time SimClock::At(double seconds) {
  return dataplane::Time(
      std::chrono::duration_cast<dataplane::Duration>(std::chrono::duration<double>(seconds)));
}

SimGateway::SimGateway(const FleetConfig& config, uint32_t index,
                       const std::vector<Engine>& engines)
    : config_(config),
      id_(absl::StrFormat("gateway-%u", index)),
      random_(dataplane::Mix64(config.seed ^ (kGolden * (index + 1)))),
      view_(config.engines, engines),
      intake_(config.engines),
      names_(planner::DestinationNames(config.engines)) {}

absl::StatusOr<std::unique_ptr<SimGateway>> SimGateway::Create(const FleetConfig& config,
                                                               uint32_t index,
                                                               const SimClock& clock,
                                                               const std::vector<Engine>& engines) {
  std::unique_ptr<SimGateway> g(new SimGateway(config, index, engines));
  g->clock_ = &clock;
  const dataplane::PolicyInfo* info = FindFleetPolicy(config);
  if (info == nullptr) {
    return absl::InternalError(absl::StrFormat("policy %s is not registered", config.policy));
  }
  if (info->uses_table) {
    g->router_ = std::make_unique<dataplane::Router>(
        dataplane::RouterOptions{.destination_count = config.engines, .dispatch = config.dispatch},
        g->random_);
    // Every engine's KV capacity, as a gateway configures it or scrapes it from vLLM's
    // cache_config_info; its usage the view reads at each pick.
    const double kv_tokens = static_cast<double>(config.profile.kv_blocks) * kBlockTokens;
    for (uint32_t d = 0; d < config.engines; ++d) (void)g->router_->SetKvCapacity(d, kv_tokens);
    g->recorder_ = std::make_unique<dataplane::RateRecorder>(dataplane::RateRecorderOptions{
        .shards = 1, .max_keys = config.recorder_max_keys, .max_report_keys = 100000});
  }
  dataplane::Result<std::unique_ptr<dataplane::Policy>> policy =
      info->make({.destinations = config.engines,
                  .random = &g->random_,
                  .router = g->router_.get(),
                  .clock = &clock,
                  .parameters = config.parameters});
  if (!policy.ok()) return absl::InvalidArgumentError(policy.status().message);
  g->policy_ = *std::move(policy);
  return g;
}

dataplane::Decision SimGateway::Route(const dataplane::PickRequest& request,
                                      std::optional<ArmTag>* arm) {
  const dataplane::Decision decision = policy_->Route(request, view_);
  // Every destination is up: never kNoDestination.
  const uint32_t d = decision.destination;
  ++view_.in_flight[d];
  dataplane::DestinationWork& work = view_.work[d];
  work.queued_prefill_tokens += QueuedTokens(decision, request.prompt_tokens);
  work.prefilling += 1;
  work.active_tokens += request.prompt_tokens;
  view_.prefilling += 1;
  arm->reset();
  if (router_ != nullptr) {
    recorder_->Record(request.key_id);
    if (router_->table_fraction() < 1) {
      *arm =
          ArmTag{.arm = decision.reason == dataplane::Reason::kControlArm ? dataplane::Arm::kControl
                                                                          : dataplane::Arm::kTable,
                 .table_fraction = router_->table_fraction()};
    }
  }
  return decision;
}

void SimGateway::MeasurePrefix(uint64_t key_id, std::span<const uint64_t> hashes,
                               uint32_t prompt_tokens) {
  KeyPrefix& k = prefixes_[key_id];
  if (!k.last.empty()) {
    size_t shared = 0;
    const size_t n = std::min(k.last.size(), hashes.size());
    while (shared < n && k.last[shared] == hashes[shared]) ++shared;
    k.reusable += static_cast<double>(std::min<uint64_t>(shared * kBlockTokens, prompt_tokens));
    k.prompt += prompt_tokens;
    k.measured += 1;
  }
  k.last.assign(hashes.begin(), hashes.end());
}

void SimGateway::OnFirstToken(const dataplane::Decision& decision, std::optional<ArmTag>& arm,
                              double ttft_s, uint32_t prompt_tokens, uint32_t cached_tokens,
                              uint32_t output_tokens) {
  const uint32_t d = decision.destination;
  dataplane::DestinationWork& work = view_.work[d];
  work.queued_prefill_tokens -= QueuedTokens(decision, prompt_tokens);
  work.prefilling -= 1;
  work.decoding += 1;
  view_.prefilling -= 1;
  if (arm.has_value()) {
    evidence_.Record(arm->table_fraction, arm->arm, ttft_s, false, prompt_tokens, cached_tokens);
    arm.reset();  // counted
  }
  if (router_ == nullptr) return;
  constexpr double kKeep = 1 - 1 / kHitMemory;
  seen_cached_ = seen_cached_ * kKeep + cached_tokens;
  seen_prompt_ = seen_prompt_ * kKeep + prompt_tokens;
  if (seen_prompt_ > 0) (void)router_->SetMeasuredHit(seen_cached_ / seen_prompt_);
  router_->ObserveServed(decision, prompt_tokens, cached_tokens);
  if (!config_.measure_turnover) return;
  // The destination's cache turnover: its KV capacity over the rate of new tokens it takes in.
  Intake& intake = intake_[d];
  const double now = clock_->now_s;
  intake.tokens_per_s = intake.tokens_per_s * std::exp(-(now - intake.last_s) / kTurnoverWindowS) +
                        (prompt_tokens - cached_tokens + output_tokens) / kTurnoverWindowS;
  intake.last_s = now;
  if (intake.tokens_per_s > 0) {
    const double capacity_tokens = static_cast<double>(config_.profile.kv_blocks) * kBlockTokens;
    (void)router_->SetTurnover(
        d, std::chrono::duration_cast<dataplane::Duration>(std::chrono::duration<double>(
               std::min(capacity_tokens / intake.tokens_per_s, 86400.0))));
  }
}

void SimGateway::End(const dataplane::Decision& decision, uint32_t prompt_tokens,
                     bool had_first_token, std::optional<ArmTag>& arm, bool failed) {
  if (arm.has_value() && failed) {  // failed before its first token
    evidence_.Record(arm->table_fraction, arm->arm, std::nullopt, true, 0, 0);
    arm.reset();
  }
  const uint32_t d = decision.destination;
  --view_.in_flight[d];
  dataplane::DestinationWork& work = view_.work[d];
  if (had_first_token) {
    work.decoding -= 1;
  } else {
    work.queued_prefill_tokens -= QueuedTokens(decision, prompt_tokens);
    work.prefilling -= 1;
    view_.prefilling -= 1;
  }
  work.active_tokens -= prompt_tokens;
}

planner::RateReport SimGateway::Report(uint64_t sequence, int64_t start_ms, int64_t end_ms,
                                       bool with_counts) {
  planner::RateReport report;
  report.gateway_id = id_;
  report.sequence = sequence;
  report.window_start_unix_ms = start_ms;
  report.window_end_unix_ms = end_ms;
  if (with_counts && recorder_ != nullptr) {
    const dataplane::RateSnapshot snapshot = recorder_->Drain();
    report.other_count = static_cast<double>(snapshot.other_count);
    report.counts.reserve(snapshot.counts.size());
    for (const dataplane::KeyCount& k : snapshot.counts) {
      planner::KeyCountReport& count = report.counts.emplace_back();
      count.key_id = k.key_id;
      count.count = static_cast<double>(k.count);
      // Sizes as per-request means over the window, scaled to the key's count.
      if (auto it = prefixes_.find(k.key_id); it != prefixes_.end() && it->second.measured > 0) {
        const double per = count.count / it->second.measured;
        count.prompt_tokens = it->second.prompt * per;
        count.reusable_tokens = it->second.reusable * per;
      }
      if (config_.plan_follows_cache) {
        const dataplane::KeyRecall served = router_->Remembered(k.key_id);
        if (served.known() && served.destination < names_.size()) {
          count.served_at = names_[served.destination];
        }
      }
    }
    for (auto& [key, prefix] : prefixes_) prefix.reusable = prefix.prompt = prefix.measured = 0;
  }
  if (std::optional<dataplane::WindowEvidence> w = evidence_.Drain()) {
    report.evidence = planner::EvidenceReport::From(w->table_fraction, w->evidence);
  }
  return report;
}

}  // namespace cacheroute::sim
