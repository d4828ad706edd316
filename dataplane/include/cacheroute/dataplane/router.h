// Router: the per-request dispatch of CacheRoute (paper §3.1, "Placement and dispatch", extended):
// an admitted key goes to the least-loaded member of its planned set T(b), or past a margin to its
// planned spill or a random destination; every other request to the lighter of its hashed pair
// within a margin (DispatchOptions; DispatchOptions::Paper() is the paper's rule: least-loaded
// member, power of two choices for the rest). Gateways call Pick on every request. No table, a
// table not refreshed within table_ttl, an unadmitted key or a wholly down set: the tail rule. A
// key on the rollout's control arm (RoutingTable::table_fraction): the token-work rule's dispatch
// without the table, or power of two choices under the paper's rule.
// Install() keeps the last good table unless the new one is strictly newer and has the Router's
// destination count (the NACK rule, docs/protocol.md); Resize changes the count with the table.
// load(d) = in_flight(d) + external_load_weight · external(d) (the last SetLoad(d)); loads() sees
// other threads' requests at most 1,024 of its Load calls or 100 µs of `now` late; Stats() is
// exact. With RouterOptions::rate_recorder set, Pick Records its key (so the gateway must not).
// Explain says why a Pick would go where it would, without routing anything.
//
// A facade over its parts, each a header of its own: ShardLedger (per-thread counts and the
// token-work ledger), TableSlots (the installed table), DestinationSignals and RouterLoads (what
// the control path sets; the LoadView), ServedLearning (what served requests showed), and the two
// rules, DecidePaperRule and TokenWorkRule (docs/dataplane.md, "Router").
//
// Thread safety and invariants: Install and Resize are serialised by a mutex; the request side is
// lock-free: Pick, Track, loads() and releasing a token never throw, allocate or lock (except that
// a thread's very first call of any of them registers its shard claim for release at thread exit,
// once); an InFlight token counts one release of the destination it counted, once; tokens must
// not outlive their Router. Design and measurements: docs/dataplane.md, "Router".
//
// Usage:
//   ThreadLocalRandom random(1);
//   RateRecorder recorder;                                     // drained by a RateReporter
//   Router router({.destination_count = 30, .table_ttl = std::chrono::seconds(60),
//                  .rate_recorder = &recorder}, random);
//   Status s = router.Install(std::make_shared<const RoutingTable>(*std::move(table)), now);
//   InFlight request = router.Pick(KeyId("tenant-7"), now);   // keep it until the response ends
//   Send(request.destination());                               // its destructor decrements
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/dispatch.h"
#include "cacheroute/dataplane/dispatch_options.h"
#include "cacheroute/dataplane/explanation.h"
#include "cacheroute/dataplane/in_flight.h"
#include "cacheroute/dataplane/key_memory.h"
#include "cacheroute/dataplane/paper_rule.h"
#include "cacheroute/dataplane/placement_outbox.h"
#include "cacheroute/dataplane/random.h"
#include "cacheroute/dataplane/rate_recorder.h"
#include "cacheroute/dataplane/router_loads.h"
#include "cacheroute/dataplane/routing_table.h"
#include "cacheroute/dataplane/served_learning.h"
#include "cacheroute/dataplane/shard_ledger.h"
#include "cacheroute/dataplane/status.h"
#include "cacheroute/dataplane/table_slots.h"
#include "cacheroute/dataplane/token_work_rule.h"

namespace cacheroute::dataplane {

struct RouterOptions {
  uint32_t destination_count = 0;
  // Room for destinations when membership changes at run time (Resize): ≥ destination_count;
  // 0 means destination_count.
  uint32_t capacity = 0;
  DispatchOptions dispatch{};
  // A table not installed or refreshed within this long is treated as absent. Zero: never stale.
  Duration table_ttl = Duration::zero();
  // Weight of the externally reported load (SetLoad) against local in-flight requests.
  double external_load_weight = 1.0;
  // When set, Pick counts every key it routes here (for the rate reports to the planner). Not
  // owned; must outlive the Router.
  RateRecorder* rate_recorder = nullptr;
  // When set (token-work rule only), each Pick offers what it made known to the rest of the fleet
  // (placement_outbox.h), for the gateway to share. Not owned; must outlive the Router.
  PlacementOutbox* placement_outbox = nullptr;
  // Keep each destination's prompt tokens in flight in the ledger (loads().Work(d).active_tokens:
  // the prompt_tokens given to Pick or Track, from then until release), for a policy that reads
  // them (PolicyInfo::reads_active_tokens). The token-work rule's ledger only; off, nothing is
  // kept and a Pick only tests the flag.
  bool active_tokens = false;
};

// The decisions by outcome (DecisionCounts: planned, spilled, fallback by Reason, no_destination),
// the table (TableStats), and per destination its requests in flight and health.
struct RouterStats : DecisionCounts, TableStats {
  uint64_t fallback_total = 0;  // Σ fallback
  std::vector<int64_t> in_flight;
  std::vector<bool> up;
};

class Router {
 public:
  static constexpr int kTableSlots = TableSlots::kSlots;
  // Bounded staleness of the other threads' in-flight counts in loads() (docs/dataplane.md).
  static constexpr uint32_t kViewTicks = ShardLedger::kViewTicks;
  static constexpr Duration kMaxViewAge = ShardLedger::kMaxViewAge;

  Router(RouterOptions options, Random& random)
      : options_(options),
        random_(random),
        ledger_(std::max(options.capacity, options.destination_count), token_work(),
                options.active_tokens),
        signals_(ledger_.capacity(), options.dispatch.default_turnover),
        tables_(options.destination_count, ledger_.capacity(), options.table_ttl, ledger_),
        token_work_(options.dispatch, options.placement_outbox),
        loads_(ledger_, signals_, tables_.count_ref(), options.external_load_weight) {}
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  // The destinations routed over now, [0, destination_count()); Resize changes it.
  uint32_t destination_count() const { return tables_.count(); }
  uint32_t capacity() const { return ledger_.capacity(); }

  // Installs `table` if it is valid for this Router; otherwise keeps the current one and returns
  // the reason (what the table stream sends back as a NACK).
  Status Install(std::shared_ptr<const RoutingTable> table, Time now) {
    return tables_.Install(std::move(table), now);
  }

  // A membership change (control path): from now on the Router routes over `count` destinations
  // (count ≤ capacity(); 0, with no table, routes nowhere), and `table` replaces the installed one
  // in the same step: a table of `count` destinations at least as new as the installed one (the
  // same version re-mapped to the new indices is the usual case), or null to route without a
  // table until the next Install. Destinations at or past `count` are never chosen again, but
  // tokens already counted there are still released there; a destination that comes back keeps
  // its health flag and external load (the caller resets them for a new member). The TTL restarts
  // with the table.
  Status Resize(uint32_t count, std::shared_ptr<const RoutingTable> table, Time now) {
    return tables_.Resize(count, std::move(table), now);
  }

  // The installed table is confirmed current at `now` (e.g. the table stream is healthy and the
  // planner had nothing newer), which restarts its TTL.
  void Refresh(Time now) { tables_.Refresh(now); }

  // Routes one request and counts it in flight until the returned token is destroyed (and, with
  // the token-work rule, in its destination's ledger: see InFlight).
  InFlight Pick(const PickRequest& request, Time now) {
    if (options_.rate_recorder != nullptr) options_.rate_recorder->Record(request.key_id);
    const router_internal::ThreadShard& thread_shard = router_internal::CurrentThreadShard();
    ledger_.DropOldView(thread_shard, now);
    return TrackOnShard(thread_shard, DecideOnShard(thread_shard, request, loads_, now),
                        request.prompt_tokens);
  }
  InFlight Pick(uint64_t key_id, Time now) { return Pick(PickRequest{.key_id = key_id}, now); }

  // Counts a decision made elsewhere (another Policy over loads(), a gateway's own fallback) in
  // flight at its destination, so that every policy's requests show in the load signal (and in
  // the ledger, with its expected uncached tokens or else `prompt_tokens`). A decision for
  // kNoDestination (or a destination this Router does not have) gives a token that counts nothing
  // and whose ok() is false. Never throws, allocates or locks.
  InFlight Track(const Decision& decision, uint32_t prompt_tokens = 0) {
    return TrackOnShard(router_internal::CurrentThreadShard(), decision, prompt_tokens);
  }

  // The routing decision alone, against any LoadView (CacheRoutePolicy, the simulator); counts
  // stats and remembers the key's destination but tracks nothing in flight.
  Decision Decide(const PickRequest& request, const LoadView& loads, Time now) {
    return DecideOnShard(router_internal::CurrentThreadShard(), request, loads, now);
  }
  Decision Decide(uint64_t key_id, const LoadView& loads, Time now) {
    return Decide(PickRequest{.key_id = key_id}, loads, now);
  }

  // What Pick would decide for `request` at `now` on this thread, and why (explanation.h), by the
  // same rule code, which costs every candidate here. No effect on routing: nothing is counted,
  // tracked, recorded or remembered. It reads the loads as a Pick on this thread would (which may
  // refresh this thread's cached view of the other threads' counts) and draws from `random` what
  // a Pick would draw (the random candidate of a large fleet, power of two choices): by default
  // the Router's own Random, so with a SeededRandom the Picks after it draw what they otherwise
  // would not; pass another to leave it untouched.
  Explanation Explain(const PickRequest& request, Time now) {
    return Explain(request, now, random_);
  }
  Explanation Explain(const PickRequest& request, Time now, Random& random) {
    const router_internal::ThreadShard& thread_shard = router_internal::CurrentThreadShard();
    ledger_.DropOldView(thread_shard, now);
    Explanation explanation;
    explanation.rule = options_.dispatch.rule;
    ExplainTrace trace(explanation);
    trace.Finish(DecideUncounted(request, loads_, now, thread_shard, random, trace));
    return explanation;
  }

  // What a served request showed (the engine's usage: prompt and cached tokens), for the
  // token-work rule's estimates (ServedLearning). `decision` is the request's own. Control path or
  // response path, any thread; never locks.
  void ObserveServed(const Decision& decision, uint32_t prompt_tokens, uint32_t cached_tokens) {
    if (token_work()) learning_.Observe(decision, prompt_tokens, cached_tokens);
  }
  // The share of a warm destination's credit that was found cached (1 until measured).
  double warm_yield() const { return learning_.warm_yield(); }
  double template_tokens() const { return learning_.template_tokens(); }

  // A placement another gateway made (placement_outbox.h; `grid_hashes` are its hashes): the
  // token-work rule's memories learn it as if this Router had made it, except where they hold
  // something newer (nothing under the paper's rule). Any thread; never locks.
  void Learn(const SharedPlacement& placement, std::span<const uint64_t> grid_hashes) {
    if (token_work() && placement.destination < capacity()) {
      token_work_.Learn(placement, grid_hashes);
    }
  }
  // Every placement of `batch`, whose destinations are this Router's indices.
  void Learn(const PlacementBatch& batch) {
    for (const SharedPlacement& p : batch.placements) Learn(p, batch.HashesOf(p));
  }

  // Where the per-key memory says `key_id` was last sent (nothing under the paper's rule): what a
  // gateway reports to the planner as where the key is warm. Any thread; never locks.
  KeyRecall Remembered(uint64_t key_id) const { return token_work_.Remembered(key_id); }

  // How long `destination`'s cache keeps what it was sent (its KV capacity over the rate of new
  // tokens it admits): a remembered destination older than this is expected cold. Control path.
  Status SetTurnover(uint32_t destination, Duration turnover) {
    return signals_.SetTurnover(destination, turnover);
  }
  // The engines' KV-cache usage (scraped), in [0, 1], for policies that score it (loads()'s
  // Scraped) and the token-work rule's memory term. Control path.
  Status SetKvUsage(uint32_t destination, double usage) {
    return signals_.SetKvUsage(destination, usage);
  }
  // The engine's KV capacity in tokens (configured, or scraped as vLLM's num_gpu_blocks × block
  // size), for the token-work rule's memory term; 0: unknown (no term). Control path.
  Status SetKvCapacity(uint32_t destination, double tokens) {
    return signals_.SetKvCapacity(destination, tokens);
  }
  // What SetKvCapacity last set for `destination` (0: unknown). Any thread.
  double kv_capacity(uint32_t destination) const {
    return destination < capacity() ? signals_.kv_capacity(destination) : 0.0;
  }

  // The work other gateways have in flight at `destination` (fleet sharing), added to this
  // Router's own ledger by the token-work rule. Control path.
  Status SetRemoteWork(uint32_t destination, const DestinationWork& work) {
    return signals_.SetRemoteWork(destination, work);
  }
  // What SetRemoteWork last set for `destination` (zeros past capacity()). Any thread.
  DestinationWork RemoteWork(uint32_t destination) const {
    return destination < capacity() ? signals_.remote_work(destination) : DestinationWork{};
  }
  // This Router's own ledger at `destination`, summed over every thread: what it shares with the
  // other gateways. Zeros without the token-work ledger. Control path.
  DestinationWork LedgerWork(uint32_t destination) const {
    return destination < capacity() ? ledger_.SumWork(destination) : DestinationWork{};
  }

  Status MarkDown(uint32_t destination) { return signals_.SetUp(destination, false); }
  Status MarkUp(uint32_t destination) { return signals_.SetUp(destination, true); }

  // Sets the externally reported load of `destination` (see the blend above).
  Status SetLoad(uint32_t destination, double value) {
    return signals_.SetLoad(destination, value);
  }

  // The served KV hit measured by the caller, in [0, 1], kept for reporting (measured_hit()). The
  // token-work rule measures what it needs per request (ObserveServed) instead of scaling by a
  // fleet mean.
  Status SetMeasuredHit(double hit) { return learning_.SetMeasuredHit(hit); }
  double measured_hit() const { return learning_.measured_hit(); }

  // This Router's blended loads and health, as policies see them.
  const LoadView& loads() const { return loads_; }

  // The installed table's rollout share of keys on the table arm (1 without a table or rollout).
  // Request path: one relaxed load.
  double table_fraction() const { return tables_.table_fraction(); }

  // The installed table (nullptr before the first Install). Control path: takes the install lock.
  std::shared_ptr<const RoutingTable> table() const { return tables_.table(); }

  // A snapshot of the counters. Reads only atomics on the request side; takes the install lock,
  // which request threads never take.
  RouterStats Stats(Time now) const {
    RouterStats stats;
    static_cast<DecisionCounts&>(stats) = ledger_.SumDecisions();
    for (int r = 0; r < kReasonCount; ++r) stats.fallback_total += stats.fallback[r];
    const uint32_t count = destination_count();
    for (uint32_t d = 0; d < count; ++d) {
      stats.in_flight.push_back(static_cast<int32_t>(ledger_.SumInFlight(d)));
      stats.up.push_back(signals_.up(d));
    }
    static_cast<TableStats&>(stats) = tables_.Stats(now);
    return stats;
  }

 private:
  bool token_work() const { return options_.dispatch.rule == DispatchRule::kTokenWork; }

  InFlight TrackOnShard(const router_internal::ThreadShard& thread_shard, const Decision& decision,
                        uint32_t prompt_tokens) {
    // Past the count but within capacity: a decision made just before a Resize shrank it.
    if (decision.destination >= capacity()) {
      return InFlight(nullptr, {kNoDestination, decision.planned, decision.reason}, 0,
                      LedgerState::kNone);
    }
    const LedgerState state = ledger_.CountPick(thread_shard, decision, prompt_tokens);
    return InFlight(&ledger_, decision, prompt_tokens, state);
  }

  Decision DecideOnShard(const router_internal::ThreadShard& thread_shard,
                         const PickRequest& request, const LoadView& loads, Time now) {
    NoTrace trace;
    // Its own view (every Pick) by its final type, so that the rules' Load and Up calls are
    // direct and inlined; any other view (the simulator's) through the vtable.
    const Decision decision =
        &loads == &loads_ ? DecideUncounted(request, loads_, now, thread_shard, random_, trace)
                          : DecideUncounted(request, loads, now, thread_shard, random_, trace);
    ledger_.CountDecision(thread_shard, decision);
    return decision;
  }

  // One decision by the Router's rule, counting nothing.
  template <typename View, typename Trace>
  Decision DecideUncounted(const PickRequest& request, const View& loads, Time now,
                           const router_internal::ThreadShard& thread_shard, Random& random,
                           Trace& trace) {
    token_work_.Prefetch(request.key_id);  // overlaps the table's miss
    // Held to the end of the decision: the lookup's set may point into the table.
    const TableSlots::ReadGuard guard(tables_, ledger_.Readers(thread_shard.index()),
                                      thread_shard.owned());
    const TableLookup lookup = tables_.Lookup(guard.table(), request.key_id, now);
    // The rollout's control arm: the paper's rule sends it to power of two choices; the token-work
    // rule to its own dispatch without the table (the lookup's set is empty), so that the gate
    // compares the table with what routing would be without it (docs/gate.md, "Arms").
    if (!token_work()) {
      if (lookup.reason == Reason::kControlArm) {
        return PowerOfTwoDecision(loads, random, Reason::kControlArm, trace);
      }
      return DecidePaperRule(lookup, loads, random, thread_shard, trace);
    }
    if constexpr (std::is_same_v<View, RouterLoads>) {
      OwnLedgerReader reader(ledger_, thread_shard);
      return token_work_.Decide(request, loads, reader, now, lookup, signals_, learning_, random,
                                trace);
    } else {
      ViewLedgerReader<View> reader(loads);
      return token_work_.Decide(request, loads, reader, now, lookup, signals_, learning_, random,
                                trace);
    }
  }

  const RouterOptions options_;
  Random& random_;
  ShardLedger ledger_;
  DestinationSignals signals_;
  TableSlots tables_;
  ServedLearning learning_;
  TokenWorkRule token_work_;
  RouterLoads loads_;
};

}  // namespace cacheroute::dataplane
