// ServedLearning: what served requests taught a Router, for the token-work rule's estimates
// (docs/dispatch.md, "What the gateway measures"): the template every destination holds (the
// cached tokens of requests expected to find only it), the yield of the key memory's promises (how
// much of the key's previous prompt beyond the template was found cached where it promised it),
// and the mean prompt (the length taken for requests whose length is unknown). Each is a running
// mean over about the last 256 requests that showed it. Also keeps the caller's measured KV hit,
// for reporting only.
//
// Thread safety: Observe runs on the control or response path of any thread and never locks; the
// estimates are relaxed atomics (two observers at once may lose one of their updates, which a
// running mean of 256 does not notice).
//
// Usage:
//   learning.Observe(request.decision(), usage.prompt_tokens, usage.cached_tokens);
//   const double shared = std::min(prompt, learning.template_tokens());
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <string>

#include "cacheroute/dataplane/dispatch.h"
#include "cacheroute/dataplane/status.h"

namespace cacheroute::dataplane {

class ServedLearning {
 public:
  // The yield never drops below this, so that a key's memory keeps some credit to be measured by.
  static constexpr double kMinYield = 0.05;

  // What a served request showed: its prompt and cached tokens (the engine's usage), `decision`
  // its own. A request of no prompt tokens shows nothing.
  void Observe(const Decision& decision, uint32_t prompt_tokens, uint32_t cached_tokens) {
    if (prompt_tokens == 0) return;
    constexpr double kKeep = 1.0 - 1.0 / 256;  // about the last 256 requests
    const double cached = std::min(cached_tokens, prompt_tokens);
    Blend(mean_prompt_tokens_, prompt_tokens, kKeep);
    const double shared = template_tokens_.load(std::memory_order_relaxed);
    if (decision.expected == CacheExpectation::kTemplate) {
      Blend(template_tokens_, cached, kKeep);
      return;
    }
    if (decision.expected != CacheExpectation::kKey) return;
    // The warm credit the decision gave beyond the template, undone from its expected uncached
    // tokens and the yield it was made with.
    const double yield = warm_yield_.load(std::memory_order_relaxed);
    const double expected_uncached = decision.expected_uncached_tokens;
    const double credited = std::max(0.0, prompt_tokens - expected_uncached - shared);
    if (credited <= 0 || yield <= 0) return;
    Blend(warm_found_, std::max(0.0, cached - shared), kKeep);
    Blend(warm_credited_, credited / yield, kKeep);
    const double found = warm_found_.load(std::memory_order_relaxed);
    const double offered = warm_credited_.load(std::memory_order_relaxed);
    if (offered > 0) {
      warm_yield_.store(std::clamp(found / offered, kMinYield, 1.0), std::memory_order_relaxed);
    }
  }

  // 0 until a request was observed.
  double mean_prompt_tokens() const { return mean_prompt_tokens_.load(std::memory_order_relaxed); }
  double template_tokens() const { return template_tokens_.load(std::memory_order_relaxed); }
  // The share of a warm destination's credit that was found cached (1 until measured).
  double warm_yield() const { return warm_yield_.load(std::memory_order_relaxed); }

  // The served KV hit measured by the caller, in [0, 1], kept for reporting.
  Status SetMeasuredHit(double hit) {
    if (!(hit >= 0 && hit <= 1)) {
      return Status::Error("measured hit " + std::to_string(hit) + " is not in [0, 1]");
    }
    measured_hit_.store(hit, std::memory_order_relaxed);
    return Status::Ok();
  }
  double measured_hit() const { return measured_hit_.load(std::memory_order_relaxed); }

 private:
  static void Blend(std::atomic<double>& mean, double value, double keep) {
    const double old = mean.load(std::memory_order_relaxed);
    mean.store(old == 0 ? value : old * keep + value * (1 - keep), std::memory_order_relaxed);
  }

  std::atomic<double> template_tokens_{0.0};
  std::atomic<double> mean_prompt_tokens_{0.0};
  std::atomic<double> warm_yield_{1.0};
  std::atomic<double> warm_found_{0.0};
  std::atomic<double> warm_credited_{0.0};
  std::atomic<double> measured_hit_{0.0};
};

}  // namespace cacheroute::dataplane
