// The paper's dispatch rule (DispatchRule::kPaper; "CacheRoute: Planned Prefix-Affinity Routing for
// Large-Scale LLM Serving", §3.1, Algorithm 1): an admitted key goes to the least-loaded up member
// of its planned set T(b), ties to the member listed first (which keeps a lightly loaded key on one
// warm destination); a key with no usable set (no or stale table, not admitted, its whole set
// down) goes to the lighter of two distinct random up destinations (power of two choices, the
// first drawn on a tie). PowerOfTwoDecision is also what the control arm of a rollout and the
// token-work rule's last resort take.
//
// Through the Router's own view (RouterLoads) the fallback draws both candidates from one 64-bit
// value (32-bit multiply-shift indices, the second over the other n − 1) and reads their loads on
// the shard the caller already has; when either is down it draws again by the general rule, so
// the pair is a uniform pair of distinct up destinations either way. Any other view takes the
// general rule (PowerOfTwoChoices) only. Loads are read only when two members compete.
//
// The trace (explanation.h) sees each member with its load, or the random pair; NoTrace keeps
// nothing.
//
// Usage (the Router's):
//   NoTrace trace;
//   Decision d = DecidePaperRule(lookup, loads, random, thread_shard, trace);
#pragma once

#include <cstdint>
#include <type_traits>

#include "cacheroute/dataplane/dispatch.h"
#include "cacheroute/dataplane/explanation.h"
#include "cacheroute/dataplane/random.h"
#include "cacheroute/dataplane/router_loads.h"
#include "cacheroute/dataplane/shard_ledger.h"
#include "cacheroute/dataplane/table_slots.h"

namespace cacheroute::dataplane {

// Power of two choices over any view, for a request that is not planned for `reason`.
template <typename View, typename Trace>
Decision PowerOfTwoDecision(const View& loads, Random& random, Reason reason, Trace& trace) {
  const TwoChoices two = DrawTwoChoices(loads, random);
  if constexpr (Trace::kOn) {
    for (uint32_t d : {two.first, two.second}) {
      if (d != kNoDestination) trace.Loaded(CandidateKind::kTwoChoices, d, true, loads.Load(d));
    }
  }
  return {two.chosen, false, reason};
}

// The paper's fallback: power of two choices, by one draw through the Router's own view.
template <typename View, typename Trace>
Decision PaperFallback(const View& loads, Reason reason, Random& random,
                       const router_internal::ThreadShard& thread_shard, Trace& trace) {
  if constexpr (std::is_same_v<View, RouterLoads>) {
    const uint32_t n = loads.size();
    if (n >= 2) {
      const uint64_t r = random.Next();
      const auto a = static_cast<uint32_t>((uint64_t{static_cast<uint32_t>(r)} * n) >> 32);
      auto b = static_cast<uint32_t>(((r >> 32) * (n - 1)) >> 32);
      b += b >= a ? 1 : 0;
      if (loads.Up(a) && loads.Up(b)) {
        const uint32_t chosen = loads.Load(thread_shard, b) < loads.Load(thread_shard, a) ? b : a;
        if constexpr (Trace::kOn) {
          trace.Loaded(CandidateKind::kTwoChoices, a, true, loads.Load(thread_shard, a));
          trace.Loaded(CandidateKind::kTwoChoices, b, true, loads.Load(thread_shard, b));
        }
        return {chosen, false, reason};
      }
    }
  }
  return PowerOfTwoDecision(loads, random, reason, trace);
}

template <typename View, typename Trace>
Decision DecidePaperRule(const TableLookup& lookup, const View& loads, Random& random,
                         const router_internal::ThreadShard& thread_shard, Trace& trace) {
  if (lookup.set.empty()) return PaperFallback(loads, lookup.reason, random, thread_shard, trace);
  uint32_t best = kNoDestination;
  double best_load = 0;
  bool best_load_read = false;
  for (uint32_t d : lookup.set) {
    if constexpr (Trace::kOn) {
      const bool up = Usable(loads, d);
      trace.Loaded(CandidateKind::kPlanned, d, up, up ? loads.Load(d) : 0);
    }
    if (!Usable(loads, d)) continue;
    if (best == kNoDestination) {
      best = d;
      continue;
    }
    if (!best_load_read) {
      best_load = loads.Load(best);
      best_load_read = true;
    }
    const double load = loads.Load(d);
    if (load < best_load) {
      best = d;
      best_load = load;
    }
  }
  if (best == kNoDestination)
    return PaperFallback(loads, Reason::kSetDown, random, thread_shard, trace);
  return {best, true, Reason::kPlanned};
}

}  // namespace cacheroute::dataplane
