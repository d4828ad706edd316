// The token-work rule (DispatchRule::kTokenWork; docs/dispatch.md, "One cost per candidate"):
// every request, admitted or not, goes to the candidate with the lowest cost in prefill tokens.
// One decision runs four named stages:
//
//   outlook     what the request expects: its prompt, the template every destination holds, the key
//               memory's promise and where the key is warm, the prefix memory's longest prefix, and
//               the factors its candidates' terms share (Outlook);
//   candidates  the planned set, the remembered destination, the remembered prefix's, the spill,
//               the key's hashed pair, then one random up destination or, in a fleet of at most
//               all_candidates_up_to, every destination, in that order, which breaks ties
//               (ForEachCandidate);
//   terms       each candidate's expected cached tokens and cost terms (CostCandidate, over
//               token_work_terms.h);
//   cheapest    the lowest cost, the first on a tie (Cheapest), skipping candidates that cannot
//   win:
//               one with no warm credit (not planned, remembered or the prefix's) costs at least
//               the cold floor, prefill_scale · (p − template); once the best so far costs no more,
//               such a candidate is not costed. Builds with assertions cost it anyway and check it
//               could not have won. Each destination is costed once;
//   remember    the key memory and the prefix memory learn where the request went (Remember).
//
// When no candidate is up, power of two choices (paper_rule.h) gives the destination or none.
//
// Decide is instantiated for the Router's own view (RouterLoads, the ledger read on the caller's
// shard: OwnLedgerReader) and for any other LoadView (ViewLedgerReader), and with a trace:
// NoTrace for a Pick (the terms are summed, not kept) or ExplainTrace for Router::Explain, which
// costs every candidate (the skip never changes the decision), records each with its terms and
// remembers nothing.
//
// Thread safety: Decide runs on any number of request threads at once; the memories are lock-free
// tables whose entries a later request may overwrite (key_memory.h).
//
// Usage (the Router's):
//   TokenWorkRule rule(options.dispatch);
//   OwnLedgerReader reader(ledger, thread_shard);
//   NoTrace trace;
//   Decision d = rule.Decide(request, loads, reader, now, lookup, signals, learning, random,
//   trace);
#pragma once

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <memory>
#include <span>

#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/dispatch.h"
#include "cacheroute/dataplane/dispatch_options.h"
#include "cacheroute/dataplane/explanation.h"
#include "cacheroute/dataplane/hot_path.h"
#include "cacheroute/dataplane/key_memory.h"
#include "cacheroute/dataplane/paper_rule.h"
#include "cacheroute/dataplane/placement_outbox.h"
#include "cacheroute/dataplane/random.h"
#include "cacheroute/dataplane/router_loads.h"
#include "cacheroute/dataplane/routing_table.h"
#include "cacheroute/dataplane/served_learning.h"
#include "cacheroute/dataplane/shard_ledger.h"
#include "cacheroute/dataplane/table_slots.h"
#include "cacheroute/dataplane/token_work_terms.h"

namespace cacheroute::dataplane {

// The token-work signals of one decision through the Router's own ledger, on the shard of the
// thread deciding: the decision counts as one view read, its candidates' reads as none.
class OwnLedgerReader {
 public:
  OwnLedgerReader(ShardLedger& ledger, const router_internal::ThreadShard& thread_shard)
      : ledger_(ledger), thread_shard_(thread_shard) {}
  CACHEROUTE_HOT_INLINE void Begin() { ledger_.CountViewRead(thread_shard_); }
  CACHEROUTE_HOT_INLINE DestinationWork Work(uint32_t d) {
    return ledger_.QueueSeen(thread_shard_, d);
  }
  double FleetPrefilling() { return ledger_.FleetPrefillingSeen(thread_shard_, /*count=*/false); }

 private:
  ShardLedger& ledger_;
  const router_internal::ThreadShard& thread_shard_;
};

// The same through any other LoadView (the simulator's).
template <typename View>
class ViewLedgerReader {
 public:
  explicit ViewLedgerReader(const View& loads) : loads_(loads) {}
  void Begin() {}
  DestinationWork Work(uint32_t d) { return loads_.Work(d); }
  double FleetPrefilling() { return loads_.FleetWork().prefilling; }

 private:
  const View& loads_;
};

CACHEROUTE_HOT_STEP bool Contains(const DestinationSet& set, uint32_t d) {
  for (uint32_t m : set) {
    if (m == d) return true;
  }
  return false;
}

class TokenWorkRule {
 public:
  // The memories exist only under the token-work rule (`options.rule`).
  // `outbox` (not owned; null: none) gets what each decision made known (placement_outbox.h).
  explicit TokenWorkRule(const DispatchOptions& options, PlacementOutbox* outbox = nullptr)
      : options_(options),
        outbox_(options.rule == DispatchRule::kTokenWork ? outbox : nullptr),
        memory_(options.rule == DispatchRule::kTokenWork
                    ? std::make_unique<KeyMemory>(options.key_memory_log2)
                    : nullptr),
        prefixes_(options.rule == DispatchRule::kTokenWork && options.prefix_memory_log2 > 0
                      ? std::make_unique<PrefixMemory>(options.prefix_memory_log2)
                      : nullptr) {}

  // Starts loading the key's memory entry (overlaps the table lookup's miss).
  void Prefetch(uint64_t key_id) const {
    if (memory_ != nullptr) memory_->Prefetch(key_id);
  }
  // Where the key memory says `key_id` was last sent (nothing without the memory).
  KeyRecall Remembered(uint64_t key_id) const {
    return memory_ != nullptr ? memory_->Get(key_id) : KeyRecall{};
  }

  // A placement another gateway made (placement_outbox.h): the memories learn it as if this rule
  // had made it, except where they hold something recorded later. Nothing without the memories.
  void Learn(const SharedPlacement& p, std::span<const uint64_t> grid_hashes) {
    if (memory_ == nullptr) return;
    if (p.key) {
      const KeyRecall old = memory_->Get(p.key_id);
      if (!old.known() || old.sent <= p.sent) {
        memory_->Put(p.key_id, p.destination, p.prompt_tokens, p.sent);
      }
    }
    if (prefixes_ != nullptr)
      prefixes_->RecordGrid(p.first_grid, grid_hashes, p.destination, p.sent);
  }

  // One decision for `request` (module comment). `lookup` is the table's answer, valid while the
  // caller holds its ReadGuard.
  template <typename View, typename Ledger, typename Trace>
  Decision Decide(const PickRequest& request, const View& loads, Ledger& ledger, Time now,
                  const TableLookup& lookup, const DestinationSignals& signals,
                  const ServedLearning& learning, Random& random, Trace& trace) {
    ledger.Begin();
    const uint32_t n = loads.size();
    const Outlook o = MakeOutlook(request, loads, ledger, now, n, signals, learning);
    if constexpr (Trace::kOn) trace.Inputs(InputsOf(o));
    const DestinationSet& set = lookup.set;
    Cheapest best;
    uint64_t costed = 0;  // each of the first 64 destinations is costed once
    auto consider = [&](uint32_t d, CandidateKind kind) CACHEROUTE_HOT_LAMBDA {
      if (d < 64) {
        if ((costed >> d & 1) != 0) return;
        costed |= uint64_t{1} << d;
      }
      const bool key_warm = d == o.remembered || Contains(set, d);
      if constexpr (!Trace::kOn) {
        if (o.may_skip && best.ColdCannotWin(o.cold_floor) && !key_warm &&
            d != o.prefix.destination) {
          assert(!Usable(loads, d) ||
                 !(CostCandidate(d, key_warm, o, loads, ledger, signals).cost < best.cost));
          return;
        }
      }
      if (!Usable(loads, d)) {
        if constexpr (Trace::kOn) trace.Costed(kind, d, false, {}, {});
        return;
      }
      const CandidateCost c = CostCandidate(d, key_warm, o, loads, ledger, signals);
      if constexpr (Trace::kOn) trace.Costed(kind, d, true, c.cached, c.terms);
      best.Offer(c);
    };
    bool set_up = false;
    ForEachCandidate(set, o.remembered, o.prefix, request.key_id, n, loads, random,
                     [&](uint32_t d, CandidateKind kind) CACHEROUTE_HOT_LAMBDA {
                       consider(d, kind);
                       if (kind == CandidateKind::kPlanned) set_up = set_up || Usable(loads, d);
                     });
    if (best.destination == kNoDestination) {
      const Reason reason = set.empty() ? lookup.reason : Reason::kSetDown;
      return PowerOfTwoDecision(loads, random, reason, trace);
    }
    if constexpr (!Trace::kOn) {
      if (outbox_ != nullptr) Announce(request, best.destination, o, now);
      Remember(request, best.destination, o.prompt, now);
    }
    Decision decision{best.destination, set_up,
                      set_up ? Reason::kPlanned : (set.empty() ? lookup.reason : Reason::kSetDown),
                      set_up && !Contains(set, best.destination)};
    decision.expected_uncached_tokens =
        static_cast<uint32_t>(std::max(1.0, std::ceil(o.prompt - best.cached.tokens)));
    decision.expected = best.cached.source;
    return decision;
  }

 private:
  // The outlook stage's result: one request's expectations and its terms' shared factors.
  struct Outlook {
    double prompt = 0;                     // p
    double request_tokens = 0;             // p̄, the unit of a view without the ledger
    double shared = 0;                     // the template, expected cached everywhere
    double key_cached = 0;                 // expected cached where the key is warm
    double warm_yield = 1;                 // the key memory's measured yield
    uint32_t remembered = kNoDestination;  // where the key last went, while fresh
    KeyRecall recall{};                    // the key memory's entry, fresh or not
    KnownPrefix prefix{};
    double prefix_cached = 0;
    double fleet_prefilling = 0;
    bool has_work = false;     // the view has the ledger
    bool remote_work = false;  // other gateways' work is shared (DestinationSignals)
    bool memory_term = false;  // μ ≠ 0 and some capacity known: read each candidate's capacity
    CostFactors factors{};
    double cold_floor = 0;  // what a candidate without warm credit costs at least
    bool may_skip = false;  // the terms' signs hold the cold floor (token_work_terms.h)
  };

  // The terms stage's result for one candidate.
  struct CandidateCost {
    uint32_t destination = kNoDestination;
    CacheEstimate cached{};
    CostTerms terms{};
    double cost = 0;
  };

  // The cheapest stage: the lowest cost offered so far, the first on a tie.
  struct Cheapest {
    uint32_t destination = kNoDestination;
    double cost = 0;
    CacheEstimate cached{};

    // Whether a candidate costing at least `cold_floor` can no longer win.
    CACHEROUTE_HOT_STEP bool ColdCannotWin(double cold_floor) const {
      return destination != kNoDestination && cost <= cold_floor;
    }
    CACHEROUTE_HOT_STEP void Offer(const CandidateCost& c) {
      if (destination == kNoDestination || c.cost < cost) {
        destination = c.destination;
        cost = c.cost;
        cached = c.cached;
      }
    }
  };

  template <typename View, typename Ledger>
  CACHEROUTE_HOT_STEP Outlook MakeOutlook(const PickRequest& request, const View& loads,
                                          Ledger& ledger, Time now, uint32_t n,
                                          const DestinationSignals& signals,
                                          const ServedLearning& learning) const {
    Outlook o;
    const double mean_prompt = learning.mean_prompt_tokens();
    o.prompt = PromptTokens(request.prompt_tokens, mean_prompt);
    o.shared = TemplateTokens(o.prompt, learning.template_tokens());
    auto fresh = [&](const KeyRecall& r) {
      return r.destination < n && (now - r.sent).count() < signals.turnover(r.destination);
    };
    const KeyRecall recall = memory_->Get(request.key_id);
    o.warm_yield = learning.warm_yield();
    o.key_cached = KeyCachedTokens(o.prompt, o.shared, o.warm_yield, recall);
    o.remembered = recall.known() && fresh(recall) ? recall.destination : kNoDestination;
    o.recall = recall;
    o.prefix = prefixes_ != nullptr && !request.block_hashes.empty()
                   ? prefixes_->Deepest(request.block_hashes, fresh)
                   : KnownPrefix{};
    o.prefix_cached = PrefixCachedTokens(o.prompt, o.prefix);
    o.has_work = loads.HasWork();
    o.request_tokens = RequestTokens(mean_prompt);
    if (o.has_work) {
      o.fleet_prefilling = ledger.FleetPrefilling();
      o.remote_work = signals.any_remote_work();
      if (o.remote_work) o.fleet_prefilling += signals.remote_prefilling();
    }
    o.factors = CostFactorsFor(options_, o.fleet_prefilling, n, mean_prompt);
    // No destination's capacity known: no memory term, and no per-candidate read of it.
    o.memory_term = options_.memory_short != 0 && signals.any_kv_capacity();
    o.cold_floor = o.factors.prefill_scale * (o.prompt - o.shared);
    o.may_skip = o.has_work && KeepsColdFloor(o.factors);
    return o;
  }

  static TokenWorkInputs InputsOf(const Outlook& o) {
    return {.prompt_tokens = o.prompt,
            .template_tokens = o.shared,
            .key_cached_tokens = o.key_cached,
            .warm_yield = o.warm_yield,
            .remembered = o.remembered,
            .prefix_destination = o.prefix.destination,
            .prefix_cached_tokens = o.prefix_cached,
            .fleet_prefilling = o.fleet_prefilling,
            .factors = o.factors};
  }

  // Calls visit(d, kind) for each candidate in tie-breaking order, warm ones first: the plan is
  // the prior. The random destination is drawn only in a fleet larger than all_candidates_up_to.
  template <typename View, typename Visit>
  CACHEROUTE_HOT_STEP void ForEachCandidate(const DestinationSet& set, uint32_t remembered,
                                            const KnownPrefix& prefix, uint64_t key_id, uint32_t n,
                                            const View& loads, Random& random,
                                            Visit&& visit) const {
    for (uint32_t d : set) visit(d, CandidateKind::kPlanned);
    if (remembered != kNoDestination) visit(remembered, CandidateKind::kRemembered);
    if (prefix.known()) visit(prefix.destination, CandidateKind::kPrefix);
    if (set.has_spill()) visit(set.spill(), CandidateKind::kSpill);
    // The key's hashed pair (the same on every gateway, so that an idle fleet spreads keys).
    const auto [first, second] = HashedPair(key_id, n);
    if (n >= 2) {
      visit(first, CandidateKind::kHashedPair);
      visit(second, CandidateKind::kHashedPair);
    }
    if (n <= options_.all_candidates_up_to) {
      for (uint32_t i = 0; i < n; ++i) visit((first + i) % n, CandidateKind::kEvery);
    } else {
      const uint32_t r = RandomUpDestination(loads, random);
      if (r != kNoDestination) visit(r, CandidateKind::kRandom);
    }
  }

  // Candidate d's expected cached tokens and cost terms, from its signals as `ledger` and `loads`
  // show them.
  template <typename View, typename Ledger>
  CACHEROUTE_HOT_STEP CandidateCost CostCandidate(uint32_t d, bool key_warm, const Outlook& o,
                                                  const View& loads, Ledger& ledger,
                                                  const DestinationSignals& signals) const {
    const CacheEstimate cached = ExpectedCached(o.shared, key_warm, o.key_cached,
                                                d == o.prefix.destination, o.prefix_cached);
    CandidateSignals s;
    if (o.has_work) {
      DestinationWork w = ledger.Work(d);
      if (o.remote_work) w += signals.remote_work(d);
      s.queued_tokens = w.queued_prefill_tokens;
      s.queued_prefill_tokens = w.queued_prefill_tokens;
      s.prefilling = w.prefilling;
      s.decoding = w.decoding;
    } else {
      s.queued_tokens = loads.Load(d) * o.request_tokens;
    }
    s.kv_capacity = o.memory_term ? signals.kv_capacity(d) : 0;
    if (s.kv_capacity > 0) s.kv_usage = loads.Scraped(d).kv_usage;
    const CostTerms terms = CostOf(o.factors, s, o.prompt - cached.tokens);
    return {d, cached, terms, terms.Total()};
  }

  // Offers the outbox what this placement makes known that the memories did not hold (within the
  // outbox's refresh): the key's destination, and the grid positions past the known prefix there.
  void Announce(const PickRequest& request, uint32_t destination, const Outlook& o, Time now) {
    const Duration refresh = outbox_->refresh();
    const bool key_news = !(o.recall.destination == destination && now - o.recall.sent < refresh);
    const uint32_t first_grid =
        o.prefix.destination == destination && now - o.prefix.sent < refresh ? o.prefix.grid : 0;
    outbox_->Offer(request.key_id, key_news, destination, static_cast<uint32_t>(o.prompt), now,
                   first_grid, request.block_hashes);
  }

  CACHEROUTE_HOT_STEP void Remember(const PickRequest& request, uint32_t destination, double prompt,
                                    Time now) {
    memory_->Put(request.key_id, destination, static_cast<uint32_t>(prompt), now);
    if (prefixes_ != nullptr) prefixes_->Record(request.block_hashes, destination, now);
  }

  const DispatchOptions options_;
  PlacementOutbox* const outbox_;
  std::unique_ptr<KeyMemory> memory_;       // the per-key memory; null under the paper's rule
  std::unique_ptr<PrefixMemory> prefixes_;  // the prefix memory; null without one
};

}  // namespace cacheroute::dataplane
