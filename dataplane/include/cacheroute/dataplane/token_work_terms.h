// The token-work rule's arithmetic (docs/dispatch.md, "One cost per candidate"): what a request
// expects cached at a candidate, and the candidate's cost term by term, in prefill tokens:
//
//   cost(d) = Q(d) + κ·p̄·W(d) + (1 + γ·D(d) + β·P̄)·u(d) + μ·max(0, M(d) + Q(d) + u(d) − K(d)),
//   u(d) = p − c(d).
//
// Pure functions of their arguments: the rule (token_work_rule.h) reads the signals, calls them
// and compares Total(); Router::Explain keeps the same CostTerms for the operator. A new term is
// one more CostTerm, its function here, its line in CostOf (and its weight in CostFactorsFor and
// KeepsColdFloor), its weight in DispatchOptions and its test
// (tests/dataplane/dataplane_token_work_terms_test.cc).
//
// Invariant (the rule's cold-floor skip relies on it): with DestinationWork's signals ≥ 0 and γ, κ,
// μ ≥ 0, every term but the uncached prefill is ≥ 0 and that one is ≥ prefill_scale · u(d), so a
// candidate expecting only the template costs at least prefill_scale · (p − template). Total() adds
// the terms in CostTerm order; the floating-point result depends on that order.
//
// Usage:
//   const CostFactors factors = CostFactorsFor(options, fleet_prefilling, n, mean_prompt);
//   const CacheEstimate cached = ExpectedCached(template_tokens, key_warm, key_cached, …);
//   const double cost = CostOf(factors, signals, prompt - cached.tokens).Total();
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string_view>

#include "cacheroute/dataplane/dispatch.h"
#include "cacheroute/dataplane/dispatch_options.h"
#include "cacheroute/dataplane/enum_names.h"
#include "cacheroute/dataplane/hot_path.h"
#include "cacheroute/dataplane/key_memory.h"

namespace cacheroute::dataplane {

// The cost terms, in the order Total() adds them.
enum class CostTerm : uint8_t { kQueuedWork, kQueueWait, kUncachedPrefill, kMemoryShort };
inline constexpr int kCostTermCount = 4;

inline constexpr EnumName<CostTerm> kCostTermNames[] = {
    {CostTerm::kQueuedWork, "queued_work"},
    {CostTerm::kQueueWait, "queue_wait"},
    {CostTerm::kUncachedPrefill, "uncached_prefill"},
    {CostTerm::kMemoryShort, "memory_short"},
};
static_assert(IsEnumTable(kCostTermNames, kCostTermCount));

inline std::string_view CostTermName(CostTerm t) { return NameOf(kCostTermNames, t); }

// One candidate's cost, term by term, in prefill tokens.
struct CostTerms {
  std::array<double, kCostTermCount> tokens{};

  double operator[](CostTerm t) const { return tokens[static_cast<int>(t)]; }
  // The cost: the terms added in CostTerm order.
  CACHEROUTE_HOT_STEP double Total() const {
    double total = tokens[0];
    for (int t = 1; t < kCostTermCount; ++t) total += tokens[t];
    return total;
  }
};

// What one decision's terms share, from DispatchOptions and the fleet.
struct CostFactors {
  double prefill_scale = 1;  // 1 + β·P̄ (PrefillScale)
  double decode_stall = 0;   // γ
  double wait_tokens = 0;    // κ·p̄ (WaitTokens)
  double memory_short = 0;   // μ
};

// What the rule read of one candidate.
struct CandidateSignals {
  // Q(d): the work queued there, in tokens: the ledger's queued prefill, or, for a view without the
  // ledger, its load × the fleet's mean prompt.
  double queued_tokens = 0;
  // The ledger's queued prefill alone (0 without a ledger): what the memory term counts as ahead
  // of the request in the KV cache.
  double queued_prefill_tokens = 0;
  double prefilling = 0;   // W(d): requests waiting for their first token there
  double decoding = 0;     // D(d): requests decoding there
  double kv_capacity = 0;  // K(d), tokens; 0: unknown, or the memory term is off
  double kv_usage = 0;     // the engine's scraped share of K(d) held (read only where K(d) > 0)
};

// p: the request's prompt tokens, or for a request of unknown length (0) the fleet's mean prompt
// (at least 1).
inline double PromptTokens(uint32_t request_prompt_tokens, double mean_prompt_tokens) {
  return request_prompt_tokens > 0 ? request_prompt_tokens : std::max(1.0, mean_prompt_tokens);
}

// p̄: the fleet's mean prompt, at least one token: the unit of κ and of a load without a ledger.
inline double RequestTokens(double mean_prompt_tokens) { return std::max(1.0, mean_prompt_tokens); }

// 1 + β·P̄: every uncached token also delays the requests waiting for their first token wherever
// it is added, P̄ being the fleet's count of them per destination (`queue_stall` β).
inline double PrefillScale(double queue_stall, double fleet_prefilling, uint32_t destinations) {
  const double waiting = fleet_prefilling / std::max(1u, destinations);
  return 1 + queue_stall * waiting;
}

// κ·p̄: what each request waiting at a destination adds to its cost (`queue_wait` κ).
inline double WaitTokens(double queue_wait, double mean_prompt_tokens) {
  return queue_wait * RequestTokens(mean_prompt_tokens);
}

// The factors of one decision: the weights of `options`, scaled by the fleet (its requests
// waiting for a first token, over `destinations`) and its mean prompt.
inline CostFactors CostFactorsFor(const DispatchOptions& options, double fleet_prefilling,
                                  uint32_t destinations, double mean_prompt_tokens) {
  return {.prefill_scale = PrefillScale(options.queue_stall, fleet_prefilling, destinations),
          .decode_stall = options.decode_stall,
          .wait_tokens = WaitTokens(options.queue_wait, mean_prompt_tokens),
          .memory_short = options.memory_short};
}

// Whether the factors keep the cold floor (the invariant above) for signals ≥ 0: every term but
// the uncached prefill is then ≥ 0, and that one ≥ prefill_scale · u(d).
inline bool KeepsColdFloor(const CostFactors& f) {
  return f.decode_stall >= 0 && f.wait_tokens >= 0 && f.memory_short >= 0;
}

// Q(d), the queued-work term: the tokens ahead of the request at d.
CACHEROUTE_HOT_STEP double QueuedWorkTerm(const CandidateSignals& s) { return s.queued_tokens; }

// κ·p̄·W(d), the queue-wait term: each request waiting for its first token at d needs a scheduling
// slot and its KV before this one, however much of it is cached (llm-d's queue score in tokens).
CACHEROUTE_HOT_STEP double QueueWaitTerm(const CostFactors& f, const CandidateSignals& s) {
  return f.wait_tokens * s.prefilling;
}

// (1 + β·P̄ + γ·D(d))·u(d), the uncached-prefill term: the request's own uncached tokens, scaled by
// the fleet's waiting (β) and by the decoding requests a prefill chunk at d stalls (γ).
CACHEROUTE_HOT_STEP double UncachedPrefillTerm(const CostFactors& f, const CandidateSignals& s,
                                               double uncached) {
  return (f.prefill_scale + f.decode_stall * s.decoding) * uncached;
}

// μ·max(0, M(d) + Q(d) + u(d) − K(d)), the memory term: the tokens d's KV cache is short of holding
// the request behind its queue (M(d): the scraped usage × K(d)); such a request waits at the head
// of the engine's queue until running requests free blocks. 0 where K(d) is unknown.
CACHEROUTE_HOT_STEP double MemoryShortTerm(const CostFactors& f, const CandidateSignals& s,
                                           double uncached) {
  const double kv = s.kv_capacity;
  if (!(kv > 0)) return 0;
  const double short_by =
      std::clamp(s.kv_usage, 0.0, 1.0) * kv + s.queued_prefill_tokens + uncached - kv;
  return short_by > 0 ? f.memory_short * short_by : 0;
}

// Every term of a candidate expecting `uncached` tokens to prefill.
CACHEROUTE_HOT_STEP CostTerms CostOf(const CostFactors& f, const CandidateSignals& s,
                                     double uncached) {
  return {{QueuedWorkTerm(s), QueueWaitTerm(f, s), UncachedPrefillTerm(f, s, uncached),
           MemoryShortTerm(f, s, uncached)}};
}

// What a request expects cached at a candidate, and why.
struct CacheEstimate {
  double tokens = 0;
  CacheExpectation source = CacheExpectation::kTemplate;
};

// The template every destination holds, at most the prompt.
inline double TemplateTokens(double prompt_tokens, double template_tokens) {
  return std::min(prompt_tokens, template_tokens);
}

// What the key memory promises where the key is warm (its planned members, and where it last went
// while that is fresh): the template, and beyond it the key's previous prompt (at most this one)
// scaled by the measured yield of such promises. Only the template for a key not remembered.
inline double KeyCachedTokens(double prompt_tokens, double shared, double warm_yield,
                              const KeyRecall& recall) {
  return recall.known()
             ? shared +
                   warm_yield *
                       std::max(0.0, std::min<double>(prompt_tokens, recall.prompt_tokens) - shared)
             : shared;
}

// Where the longest remembered prefix went: a chained block hash names the whole prefix, so the
// credit needs no yield; at least one token is left to compute.
inline double PrefixCachedTokens(double prompt_tokens, const KnownPrefix& prefix) {
  return std::min(prompt_tokens - 1, static_cast<double>(prefix.tokens));
}

// c(d): the largest of the template (`shared`), the key's promise where the key is warm at d, and
// the remembered prefix where it went to d; a tie keeps the earlier in that order.
CACHEROUTE_HOT_STEP CacheEstimate ExpectedCached(double shared, bool key_warm, double key_cached,
                                                 bool prefix_here, double prefix_cached) {
  CacheEstimate e{shared, CacheExpectation::kTemplate};
  if (key_warm && key_cached > e.tokens) e = {key_cached, CacheExpectation::kKey};
  if (prefix_here && prefix_cached > e.tokens) e = {prefix_cached, CacheExpectation::kPrefix};
  return e;
}

}  // namespace cacheroute::dataplane
