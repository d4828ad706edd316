// See fleet_gateway.h.
#include "tools/eval/sim/fleet_gateway.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_format.h"
#include "cacheroute/dataplane/key_id.h"
#include "cacheroute/dataplane/policy_registry.h"

namespace cacheroute::sim {
namespace {

// How many recent first tokens the measured KV hit remembers (its decay).
constexpr double kHitMemory = 1000;

}  // namespace

dataplane::Time SimClock::At(double seconds) {
  return dataplane::Time(
      std::chrono::duration_cast<dataplane::Duration>(std::chrono::duration<double>(seconds)));
}

SimGateway::SimGateway(const FleetConfig& config, uint32_t index)
    : id_(absl::StrFormat("gateway-%u", index)),
      random_(dataplane::Mix64(config.seed ^ (kGolden * (index + 1)))),
      view_(config.engines) {}

absl::StatusOr<std::unique_ptr<SimGateway>> SimGateway::Create(const FleetConfig& config,
                                                               uint32_t index,
                                                               const SimClock& clock) {
  std::unique_ptr<SimGateway> g(new SimGateway(config, index));
  const dataplane::PolicyInfo* info = dataplane::BuiltinPolicies().Find(PolicyName(config.policy));
  if (info == nullptr) {
    return absl::InternalError(
        absl::StrFormat("policy %s is not registered", std::string(PolicyName(config.policy))));
  }
  if (info->uses_table) {
    g->router_ = std::make_unique<dataplane::Router>(
        dataplane::RouterOptions{.destination_count = config.engines, .dispatch = config.dispatch},
        g->random_);
    g->recorder_ = std::make_unique<dataplane::RateRecorder>(dataplane::RateRecorderOptions{
        .shards = 1, .max_keys = config.recorder_max_keys, .max_report_keys = 100000});
  }
  dataplane::Result<std::unique_ptr<dataplane::Policy>> policy =
      info->make({.destinations = config.engines,
                  .random = &g->random_,
                  .router = g->router_.get(),
                  .clock = &clock,
                  .parameters = {.chwbl_epsilon = config.chwbl_epsilon,
                                 .dualmap_queue_bound = config.dualmap_queue_bound,
                                 .preble_overload_factor = config.preble_overload_factor}});
  if (!policy.ok()) return absl::InvalidArgumentError(policy.status().message);
  g->policy_ = *std::move(policy);
  return g;
}

dataplane::Decision SimGateway::Route(uint64_t key_id, std::optional<ArmTag>* arm) {
  const dataplane::Decision decision = policy_->Pick(key_id, view_);
  // Every destination is up: never kNoDestination.
  ++view_.in_flight[decision.destination];
  arm->reset();
  if (router_ != nullptr) {
    recorder_->Record(key_id);
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

void SimGateway::OnFirstToken(std::optional<ArmTag>& arm, double ttft_s, uint32_t prompt_tokens,
                              uint32_t cached_tokens) {
  if (arm.has_value()) {
    evidence_.Record(arm->table_fraction, arm->arm, ttft_s, false, prompt_tokens, cached_tokens);
    arm.reset();  // counted
  }
  if (router_ == nullptr) return;
  constexpr double kKeep = 1 - 1 / kHitMemory;
  seen_cached_ = seen_cached_ * kKeep + cached_tokens;
  seen_prompt_ = seen_prompt_ * kKeep + prompt_tokens;
  if (seen_prompt_ > 0) (void)router_->SetMeasuredHit(seen_cached_ / seen_prompt_);
}

void SimGateway::End(uint32_t destination, std::optional<ArmTag>& arm, bool failed) {
  if (arm.has_value() && failed) {  // failed before its first token
    evidence_.Record(arm->table_fraction, arm->arm, std::nullopt, true, 0, 0);
    arm.reset();
  }
  --view_.in_flight[destination];
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
    }
    for (auto& [key, prefix] : prefixes_) prefix.reusable = prefix.prompt = prefix.measured = 0;
  }
  if (std::optional<dataplane::WindowEvidence> w = evidence_.Drain()) {
    report.evidence = planner::EvidenceReport::From(w->table_fraction, w->evidence);
  }
  return report;
}

}  // namespace cacheroute::sim
