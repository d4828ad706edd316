// Router: the per-request dispatch of CacheRoute (paper §3.1, "Placement and dispatch", extended):
// an admitted key goes to the least-loaded member of its planned set T(b), or past a margin to its
// planned spill or a random destination; every other request to the lighter of its hashed pair
// within a margin (DispatchOptions; DispatchOptions::Paper() is the paper's rule: least-loaded
// member, power of two choices for the rest). Gateways call Pick on every request. No table, a
// table not refreshed within table_ttl, an unadmitted key or a wholly down set: the tail rule.
// Install() keeps the last good table unless the new one is strictly newer and has the Router's
// destination count (the NACK rule, docs/protocol.md); Resize changes the count with the table.
// load(d) = in_flight(d) + external_load_weight · external(d) (the last SetLoad(d)); loads() sees
// other threads' requests at most 1,024 of its Load calls or 100 µs of `now` late; Stats() is
// exact. With RouterOptions::rate_recorder set, Pick Records its key (so the gateway must not).
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
#include <bit>
#include <cassert>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cacheroute/dataplane/arm_evidence.h"
#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/dispatch.h"
#include "cacheroute/dataplane/key_memory.h"
#include "cacheroute/dataplane/random.h"
#include "cacheroute/dataplane/rate_recorder.h"
#include "cacheroute/dataplane/routing_table.h"
#include "cacheroute/dataplane/status.h"

// The request path's small helpers are inlined where the compiler allows forcing it. The token-work
// rule's per-candidate steps (CACHEROUTE_HOT_LAMBDA) only in builds without assertions: inlined at
// each candidate they are the Pick's speed, and in the sanitizer builds (with assertions, whose
// speed is not measured) they would only lengthen the compile.
#if defined(__GNUC__) || defined(__clang__)
#define CACHEROUTE_HOT_INLINE __attribute__((always_inline)) inline
#else
#define CACHEROUTE_HOT_INLINE inline
#endif
#if (defined(__GNUC__) || defined(__clang__)) && defined(NDEBUG)
#define CACHEROUTE_HOT_LAMBDA __attribute__((always_inline))
#else
#define CACHEROUTE_HOT_LAMBDA
#endif

namespace cacheroute::dataplane {

namespace router_internal {

// Shard indices for request threads: [0, kShards - 1) are owned by one thread each, the last is
// shared by every thread that found none free.
inline constexpr uint32_t kShards = 64;
inline constexpr uint32_t kSharedShard = kShards - 1;

inline std::atomic<uint64_t>& ClaimedShards() {
  static std::atomic<uint64_t> claimed{uint64_t{1} << kSharedShard};  // the shared one: never owned
  return claimed;
}

// This thread's claim on a shard: taken on first use, returned when the thread exits.
class ThreadShard {
 public:
  ThreadShard() {
    uint64_t claimed = ClaimedShards().load(std::memory_order_relaxed);
    while (~claimed != 0) {
      const uint32_t free = static_cast<uint32_t>(std::countr_zero(~claimed));
      if (ClaimedShards().compare_exchange_weak(claimed, claimed | uint64_t{1} << free,
                                                std::memory_order_acq_rel)) {
        index_ = free;
        return;
      }
    }
  }
  ~ThreadShard() {
    if (owned()) ClaimedShards().fetch_and(~(uint64_t{1} << index_), std::memory_order_acq_rel);
  }
  ThreadShard(const ThreadShard&) = delete;
  ThreadShard& operator=(const ThreadShard&) = delete;

  uint32_t index() const { return index_; }
  bool owned() const { return index_ != kSharedShard; }

 private:
  uint32_t index_ = kSharedShard;
};

inline const ThreadShard& CurrentThreadShard() {
  thread_local const ThreadShard shard;
  return shard;
}

// Adds `delta` to a counter of a shard: a plain store in the thread's own shard, an atomic
// read-modify-write in the shared one.
template <typename T>
void ShardAdd(std::atomic<T>& counter, T delta, bool owned, std::memory_order order) {
  if (owned) {
    counter.store(counter.load(std::memory_order_relaxed) + delta, order);
  } else {
    counter.fetch_add(delta, order == std::memory_order_release ? std::memory_order_acq_rel
                                                                : std::memory_order_relaxed);
  }
}

}  // namespace router_internal

class Router;

// Which rule routes requests beyond the table itself (docs/dispatch.md).
enum class DispatchRule : uint8_t {
  // The paper's Algorithm 1: an admitted key to the least-loaded up member of T(b), everything else
  // by power of two choices over in-flight requests.
  kPaper,
  // CacheRoute's: one cost per candidate in prefill tokens, cost(d) = queued prefill tokens at d
  // + (1 + decode_stall · decoding requests at d + queue_stall · the fleet's mean requests waiting
  // for a first token) · the request's expected uncached tokens at d + queue_wait · the mean
  // prompt · requests waiting for a first token at d + memory_short · the tokens d's KV cache is
  // short of holding the request (where its capacity is known); the lowest wins. Expected cached
  // tokens: the key's previous prompt (at most this one) where d is the key's planned member or its
  // remembered destination while that is warm, the shared template elsewhere. Candidates: the
  // planned set and spill, the remembered destination, the key's hashed pair, one random
  // destination (every destination when R ≤ all_candidates_up_to).
  kTokenWork,
};

// The dispatch rule's parameters. The defaults are CacheRoute's, chosen once on the primary study
// (docs/dispatch.md, "How the parameters were chosen"); Paper() is the published Algorithm 1.
struct DispatchOptions {
  DispatchRule rule = DispatchRule::kTokenWork;
  // γ: how much one uncached prompt token costs each request decoding at the destination, against
  // the request's own wait (a chunk of prefill stalls every decoding sequence of that engine).
  double decode_stall = 0.02;
  // β: how much one uncached prompt token costs each request waiting for its first token, per
  // destination across the fleet (work added anywhere takes capacity the fleet's queue needs).
  double queue_stall = 4.0;
  // κ: what each request waiting for its first token at the destination adds to its cost, in the
  // fleet's mean prompt tokens, however much of that request is cached: it needs a scheduling slot
  // and KV memory before this one (llm-d's queue scorer, in the rule's currency; docs/dispatch.md,
  // "A queue term per destination").
  double queue_wait = 0.05;
  // μ: what each token the destination's KV cache is short of holding the request adds to its
  // cost: the KV its running requests hold (SetKvUsage × SetKvCapacity) + the queued prefill ahead
  // of it + its own uncached tokens, beyond the capacity. Such a request waits at the head of the
  // engine's queue until running requests free blocks, and everything behind it waits too (vLLM
  // admits first come, first served). Nothing where no capacity was set (docs/dispatch.md, "A
  // memory term per destination").
  double memory_short = 1.0;
  // The per-key memory: 2^key_memory_log2 entries of 16 bytes (KeyMemory).
  uint32_t key_memory_log2 = 18;
  // The prefix memory (PrefixMemory, used when a request comes with its block hashes):
  // 2^prefix_memory_log2 entries of 16 bytes; 0: none.
  uint32_t prefix_memory_log2 = 20;
  // With at most this many destinations every one is a candidate (instead of one random one).
  uint32_t all_candidates_up_to = 16;
  // How long a remembered destination stays warm before SetTurnover measured it.
  Duration default_turnover = std::chrono::seconds(60);

  static constexpr DispatchOptions Paper() { return {.rule = DispatchRule::kPaper}; }
};

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
};

// An outstanding request routed by Router::Pick. Holding it counts the request as in flight at
// its destination; destroying it (or Release) ends that. With the token-work rule it also counts
// the request in its destination's ledger: its expected uncached prompt tokens as queued prefill
// until FirstToken, then as one decoding request until released. Movable, not copyable.
class InFlight {
 public:
  InFlight() = default;
  InFlight(InFlight&& other) noexcept
      : router_(std::exchange(other.router_, nullptr)),
        decision_(other.decision_),
        prompt_tokens_(other.prompt_tokens_),
        ledger_(std::exchange(other.ledger_, Ledger::kNone)) {}
  InFlight& operator=(InFlight&& other) noexcept {
    if (this != &other) {
      Release();
      router_ = std::exchange(other.router_, nullptr);
      decision_ = other.decision_;
      prompt_tokens_ = other.prompt_tokens_;
      ledger_ = std::exchange(other.ledger_, Ledger::kNone);
    }
    return *this;
  }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;
  ~InFlight() { Release(); }

  // False when no destination was up; destination() is then kNoDestination.
  bool ok() const { return decision_.destination != kNoDestination; }
  uint32_t destination() const { return decision_.destination; }
  bool planned() const { return decision_.planned; }
  Reason reason() const { return decision_.reason; }
  const Decision& decision() const { return decision_; }
  uint32_t prompt_tokens() const { return prompt_tokens_; }

  // The first token arrived (the first streamed chunk, or the response of a non-streaming
  // request): the request's prefill leaves the destination's queued work and it counts as
  // decoding. Idempotent; nothing after Release.
  inline void FirstToken();

  // Ends the request early (idempotent). Any thread may release: it counts the release in its own
  // shard of the Router.
  inline void Release();

 private:
  friend class Router;
  enum class Ledger : uint8_t { kNone, kPrefill, kDecode };
  InFlight(Router* router, Decision decision, uint32_t prompt_tokens, Ledger ledger)
      : router_(router), decision_(decision), prompt_tokens_(prompt_tokens), ledger_(ledger) {}

  Router* router_ = nullptr;  // null once released, or when nothing was counted
  Decision decision_;
  uint32_t prompt_tokens_ = 0;
  Ledger ledger_ = Ledger::kNone;  // where the request counts in the token-work ledger
};

struct RouterStats {
  uint64_t planned = 0;
  uint64_t spilled = 0;  // of planned: sent outside the key's set (its spill, or a random one)
  // Fallback picks by reason, indexed by Reason (kPlanned and kPolicy stay 0).
  std::array<uint64_t, kReasonCount> fallback{};
  uint64_t fallback_total = 0;
  uint64_t no_destination = 0;  // picks that found no up destination at all
  uint64_t installs = 0;
  uint64_t rejected_installs = 0;
  std::string last_rejection;
  bool has_table = false;
  bool stale = false;
  TableVersion version;
  Duration table_age = Duration::zero();      // since the installed table was installed
  Duration since_refresh = Duration::zero();  // since it was installed or last refreshed
  std::vector<int64_t> in_flight;
  std::vector<bool> up;
};

class Router {
 public:
  static constexpr int kTableSlots = 4;
  // Bounded staleness of the other threads' in-flight counts in loads() (docs/dataplane.md).
  static constexpr uint32_t kViewTicks = 1024;
  static constexpr Duration kMaxViewAge = std::chrono::microseconds(100);

  Router(RouterOptions options, Random& random)
      : options_(options),
        random_(random),
        capacity_(std::max(options.capacity, options.destination_count)),
        count_(options.destination_count),
        groups_((capacity_ + kGroupSize - 1) / kGroupSize),
        region_bytes_(RegionBytes(groups_, token_work())),
        regions_(static_cast<std::byte*>(::operator new[](router_internal::kShards* region_bytes_,
                                                          std::align_val_t{kPageBytes}))),
        health_(new Health[capacity_]),
        memory_(token_work() ? std::make_unique<KeyMemory>(options.dispatch.key_memory_log2)
                             : nullptr),
        prefixes_(token_work() && options.dispatch.prefix_memory_log2 > 0
                      ? std::make_unique<PrefixMemory>(options.dispatch.prefix_memory_log2)
                      : nullptr),
        loads_(*this) {
    const Duration turnover = options.dispatch.default_turnover;
    for (uint32_t d = 0; d < capacity_; ++d) {
      health_[d].turnover.store(turnover.count(), std::memory_order_relaxed);
    }
    for (uint32_t s = 0; s < router_internal::kShards; ++s) {
      std::byte* region = Region(s);
      new (region) Shard;
      const uint32_t blocks = (token_work() ? 4 : 2) * groups_;
      for (uint32_t g = 0; g < blocks; ++g) {
        std::byte* block = region + sizeof(Shard) + g * sizeof(CountsBlock);
        if (g < groups_) {
          new (block) CountsBlock;
        } else if (g < 2 * groups_) {
          new (block) ViewBlock;
        } else {
          new (block) WorkBlock;
        }
      }
    }
  }
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  // The destinations routed over now, [0, destination_count()); Resize changes it.
  uint32_t destination_count() const { return count_.load(std::memory_order_relaxed); }
  uint32_t capacity() const { return capacity_; }

  // Installs `table` if it is valid for this Router; otherwise keeps the current one and returns
  // the reason (what the table stream sends back as a NACK).
  Status Install(std::shared_ptr<const RoutingTable> table, Time now) {
    std::lock_guard<std::mutex> lock(install_mu_);
    Status status = CheckInstallableLocked(table.get(), /*same_version_ok=*/false);
    if (!status.ok) {
      ++rejected_installs_;
      last_rejection_ = status.message;
      return status;
    }
    InstallLocked(std::move(table), now);
    ++installs_;
    return Status::Ok();
  }

  // A membership change (control path): from now on the Router routes over `count` destinations
  // (count ≤ capacity(); 0, with no table, routes nowhere), and `table` replaces the installed one in the same step: a table of
  // `count` destinations at least as new as the installed one (the same version re-mapped to the
  // new indices is the usual case), or null to route without a table until the next Install.
  // Destinations at or past `count` are never chosen again, but tokens already counted there are
  // still released there; a destination that comes back keeps its health flag and external load
  // (the caller resets them for a new member). The TTL restarts with the table.
  Status Resize(uint32_t count, std::shared_ptr<const RoutingTable> table, Time now) {
    std::lock_guard<std::mutex> lock(install_mu_);
    if (count > capacity_ || (count == 0 && table != nullptr)) {
      return Status::Error("destination count " + std::to_string(count) + " is not in [" +
                           (table != nullptr ? "1" : "0") + ", " + std::to_string(capacity_) +
                           "] (the Router's capacity)");
    }
    if (table != nullptr) {
      if (table->destination_count() != count) {
        return Status::Error("table " + ToString(table->version()) + " has destination_count " +
                             std::to_string(table->destination_count()) + ", not the new count " +
                             std::to_string(count));
      }
      Status status = CheckInstallableLocked(table.get(), /*same_version_ok=*/true);
      if (!status.ok) return status;
    }
    count_.store(count, std::memory_order_seq_cst);
    if (table != nullptr) {
      InstallLocked(std::move(table), now);
    } else {
      current_.store(-1, std::memory_order_seq_cst);
      table_fraction_.store(1.0, std::memory_order_relaxed);
    }
    return Status::Ok();
  }

 private:
  void InstallLocked(std::shared_ptr<const RoutingTable> table, Time now) {
    const int current = current_.load(std::memory_order_seq_cst);
    int target = -1;
    while (target < 0) {
      for (int s = 0; s < kTableSlots; ++s) {
        if (s != current && !HasReadersLocked(s)) {
          target = s;
          break;
        }
      }
      // Every other slot still has a reader that entered before its table was replaced; each
      // leaves after one lookup.
      if (target < 0) std::this_thread::yield();
    }
    tables_[target] = std::move(table);  // drops an old table here, off the request path
    installed_version_ = tables_[target]->version();
    table_fraction_.store(tables_[target]->table_fraction(), std::memory_order_relaxed);
    installed_at_.store(now.time_since_epoch().count(), std::memory_order_relaxed);
    refreshed_at_.store(now.time_since_epoch().count(), std::memory_order_relaxed);
    current_.store(target, std::memory_order_seq_cst);
  }

 public:

  // The installed table is confirmed current at `now` (e.g. the table stream is healthy and the
  // planner had nothing newer), which restarts its TTL.
  void Refresh(Time now) {
    refreshed_at_.store(now.time_since_epoch().count(), std::memory_order_relaxed);
  }

  // Routes one request and counts it in flight until the returned token is destroyed (and, with
  // the token-work rule, in its destination's ledger: see InFlight).
  InFlight Pick(const PickRequest& request, Time now) {
    if (options_.rate_recorder != nullptr) options_.rate_recorder->Record(request.key_id);
    const router_internal::ThreadShard& thread_shard = router_internal::CurrentThreadShard();
    DropOldView(thread_shard, now);
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

  // What a served request showed (the engine's usage: prompt and cached tokens), for the
  // token-work rule's estimates: the template every destination holds (the cached tokens of
  // requests expected to find only it), the yield of the key's memory (how much of the key's
  // previous prompt beyond the template was found cached where it promised it) and the mean prompt
  // (for requests whose length is unknown). `decision` is the request's own. Control path or
  // response path, any thread; never locks.
  void ObserveServed(const Decision& decision, uint32_t prompt_tokens, uint32_t cached_tokens) {
    if (!token_work() || prompt_tokens == 0) return;
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
  // The share of a warm destination's credit that was found cached (1 until measured).
  double warm_yield() const { return warm_yield_.load(std::memory_order_relaxed); }
  double template_tokens() const { return template_tokens_.load(std::memory_order_relaxed); }

  // Where the per-key memory says `key_id` was last sent (nothing under the paper's rule): what a
  // gateway reports to the planner as where the key is warm. Any thread; never locks.
  KeyRecall Remembered(uint64_t key_id) const {
    return memory_ != nullptr ? memory_->Get(key_id) : KeyRecall{};
  }

  // How long `destination`'s cache keeps what it was sent (its KV capacity over the rate of new
  // tokens it admits): a remembered destination older than this is expected cold. Control path.
  Status SetTurnover(uint32_t destination, Duration turnover) {
    if (destination >= capacity_) return UnknownDestination(destination);
    if (turnover < Duration::zero()) {
      return Status::Error("turnover for destination " + std::to_string(destination) +
                           " is negative");
    }
    health_[destination].turnover.store(turnover.count(), std::memory_order_relaxed);
    return Status::Ok();
  }

  // The engines' KV-cache usage (scraped), in [0, 1], for policies that score it (loads()'s
  // Scraped). Control path.
  Status SetKvUsage(uint32_t destination, double usage) {
    if (destination >= capacity_) return UnknownDestination(destination);
    if (!(usage >= 0 && usage <= 1)) {
      return Status::Error("KV usage " + std::to_string(usage) + " for destination " +
                           std::to_string(destination) + " is not in [0, 1]");
    }
    health_[destination].kv_usage.store(usage, std::memory_order_relaxed);
    return Status::Ok();
  }

  // The engine's KV capacity in tokens (configured, or scraped as vLLM's num_gpu_blocks × block
  // size), for the token-work rule's memory term; 0: unknown (no term). Control path.
  Status SetKvCapacity(uint32_t destination, double tokens) {
    if (destination >= capacity_) return UnknownDestination(destination);
    if (!(tokens >= 0) || tokens == std::numeric_limits<double>::infinity()) {
      return Status::Error("KV capacity " + std::to_string(tokens) + " tokens for destination " +
                           std::to_string(destination) + " is not a finite number >= 0");
    }
    const double old = health_[destination].kv_capacity.exchange(tokens, std::memory_order_relaxed);
    if ((old > 0) != (tokens > 0)) {
      // Each exchange sees the value before it, so the count follows every transition.
      if (tokens > 0) {
        kv_known_.fetch_add(1, std::memory_order_relaxed);
      } else {
        kv_known_.fetch_sub(1, std::memory_order_relaxed);
      }
    }
    return Status::Ok();
  }

  // What SetKvCapacity last set for `destination` (0: unknown). Any thread.
  double kv_capacity(uint32_t destination) const {
    return destination < capacity_
               ? health_[destination].kv_capacity.load(std::memory_order_relaxed)
               : 0.0;
  }

  Status MarkDown(uint32_t destination) { return SetUp(destination, false); }
  Status MarkUp(uint32_t destination) { return SetUp(destination, true); }

  // Sets the externally reported load of `destination` (see the blend above).
  Status SetLoad(uint32_t destination, double value) {
    if (destination >= capacity_) return UnknownDestination(destination);
    if (!(value >= 0) || value == std::numeric_limits<double>::infinity()) {
      return Status::Error("load " + std::to_string(value) + " for destination " +
                           std::to_string(destination) + " is not a finite non-negative number");
    }
    health_[destination].external.store(value, std::memory_order_relaxed);
    return Status::Ok();
  }

  // The served KV hit measured by the caller, in [0, 1], kept for reporting (measured_hit()). The
  // token-work rule measures what it needs per request (ObserveServed) instead of scaling by a
  // fleet mean.
  Status SetMeasuredHit(double hit) {
    if (!(hit >= 0 && hit <= 1)) {
      return Status::Error("measured hit " + std::to_string(hit) + " is not in [0, 1]");
    }
    measured_hit_.store(hit, std::memory_order_relaxed);
    return Status::Ok();
  }
  double measured_hit() const { return measured_hit_.load(std::memory_order_relaxed); }

  // This Router's blended loads and health, as policies see them.
  const LoadView& loads() const { return loads_; }

  // The installed table's rollout share of keys on the table arm (1 without a table or rollout).
  // Request path: one relaxed load.
  double table_fraction() const { return table_fraction_.load(std::memory_order_relaxed); }

  // The installed table (nullptr before the first Install). Control path: takes the install lock.
  std::shared_ptr<const RoutingTable> table() const {
    std::lock_guard<std::mutex> lock(install_mu_);
    const int current = current_.load(std::memory_order_seq_cst);
    return current < 0 ? nullptr : tables_[current];
  }

  // A snapshot of the counters. Reads only atomics on the request side; takes the install lock,
  // which request threads never take.
  RouterStats Stats(Time now) const {
    RouterStats stats;
    for (uint32_t s = 0; s < router_internal::kShards; ++s) {
      const Shard& shard = ShardAt(s);
      stats.planned += shard.planned.load(std::memory_order_relaxed);
      stats.spilled += shard.spilled.load(std::memory_order_relaxed);
      for (int r = 0; r < kReasonCount; ++r) {
        stats.fallback[r] += shard.fallback[r].load(std::memory_order_relaxed);
      }
      stats.no_destination += shard.no_destination.load(std::memory_order_relaxed);
    }
    for (int r = 0; r < kReasonCount; ++r) stats.fallback_total += stats.fallback[r];
    const uint32_t count = destination_count();
    for (uint32_t d = 0; d < count; ++d) {
      stats.in_flight.push_back(static_cast<int32_t>(SumInFlight(d, /*exclude=*/0)));
      stats.up.push_back(health_[d].up.load(std::memory_order_relaxed));
    }
    std::lock_guard<std::mutex> lock(install_mu_);
    stats.installs = installs_;
    stats.rejected_installs = rejected_installs_;
    stats.last_rejection = last_rejection_;
    stats.has_table = current_.load(std::memory_order_seq_cst) >= 0;
    if (stats.has_table) {
      stats.version = installed_version_;
      stats.table_age = now - Time(Duration(installed_at_.load(std::memory_order_relaxed)));
      stats.since_refresh = now - Time(Duration(refreshed_at_.load(std::memory_order_relaxed)));
      stats.stale = IsStale(now);
    }
    return stats;
  }

 private:
  friend class InFlight;

  // Blocks are 128 bytes, not 64, because x86's adjacent-line prefetcher moves lines in pairs.
  static constexpr size_t kFalseSharingBytes = 128;
  // Each shard's state is a region of whole pages: the L2 streamer prefetches ahead within a
  // 4 KiB page, so two threads' state on one page still costs misses (measured: two threads at
  // 1.7x instead of 2.0x of one with 256-byte shards side by side).
  static constexpr size_t kPageBytes = 4096;

  // In-flight counts and views (docs/dataplane.md, "Router"), by groups of kGroupSize destinations:
  // one block of counts and one of cached sums per group and shard, so that a refresh moves one
  // block per other shard for sixteen destinations.
  struct DestinationCounts {
    std::atomic<uint32_t> picked{0};    // written only by the shard's thread(s)
    std::atomic<uint32_t> released{0};  // written only by the shard's thread(s)
  };
  static constexpr uint32_t kGroupSize = kFalseSharingBytes / sizeof(DestinationCounts);
  struct alignas(kFalseSharingBytes) CountsBlock {
    std::array<DestinationCounts, kGroupSize> counts;
  };
  // This shard's cached sums of the other shards' in-flight counts (two's complement, mod 2^32)
  // and the view tick they were read at.
  struct alignas(kFalseSharingBytes) ViewBlock {
    std::atomic<uint32_t> tick{0};
    std::array<std::atomic<uint32_t>, kGroupSize> others{};
  };
  static_assert(sizeof(ViewBlock) == sizeof(CountsBlock));
  // Read-mostly on the request path, so packed apart from anything written per request.
  struct Health {
    std::atomic<double> external{0.0};
    std::atomic<double> kv_usage{0.0};
    std::atomic<double> kv_capacity{0.0};  // tokens; 0: unknown
    std::atomic<Duration::rep> turnover{0};
    std::atomic<bool> up{true};
  };
  // The token-work ledger (InFlight), kept like the in-flight counts: per shard and destination
  // one word of what this shard's thread(s) added and removed, read as the thread's own word live
  // plus cached sums of the other shards' words (refreshed with the in-flight view). Fields, low to
  // high: queued prefill tokens (32 bits), prefilling requests (16), decoding requests (16), each a
  // two's-complement count that may be negative in one shard (a release by a thread that did not
  // pick). Words add field by field in modular arithmetic (carries and borrows included), so a sum
  // of words decodes exactly (DecodeWork) while each field's true total is within its signed range.
  struct alignas(kFalseSharingBytes) WorkBlock {
    std::array<std::atomic<uint64_t>, kGroupSize> words{};
  };
  static_assert(sizeof(WorkBlock) == sizeof(CountsBlock));
  static constexpr uint64_t kPrefillOne = uint64_t{1} << 32;
  static constexpr uint64_t kDecodeOne = uint64_t{1} << 48;

  // One thread's (or, for the shared shard, many threads') reader counts, stats counters and
  // in-flight view state, on cache lines of their own.
  struct alignas(kFalseSharingBytes) Shard {
    std::array<std::atomic<uint32_t>, kTableSlots> readers{};  // readers in each table slot
    alignas(64) std::atomic<uint64_t> planned{0};
    std::atomic<uint64_t> spilled{0};
    std::array<std::atomic<uint64_t>, kReasonCount> fallback{};  // by Reason
    std::atomic<uint64_t> no_destination{0};
    // The in-flight view (docs/dataplane.md, "Router"): its tick, advanced by every Load and by
    // kViewTicks when a Pick's `now` finds it older than kMaxViewAge; `now` when it last was.
    alignas(64) std::atomic<uint32_t> view_tick{kViewTicks};  // every cached sum starts stale
    std::atomic<Duration::rep> view_time{0};
    std::atomic<bool> used{false};  // this shard holds in-flight counts of this Router
    std::atomic<int32_t> prefilling{0};  // the token-work ledger's prefilling count, this shard's
    // The other shards' prefilling counts summed, and the view tick they were read at.
    std::atomic<int32_t> others_prefilling{0};
    std::atomic<uint32_t> prefilling_tick{0};
  };

  // A shard's region: the Shard, then groups_ CountsBlocks, then groups_ ViewBlocks, and with
  // the ledger groups_ WorkBlocks of its own words and groups_ of the others' cached sums, rounded
  // up to whole pages.
  static size_t RegionBytes(uint32_t groups, bool ledger) {
    const size_t bytes = sizeof(Shard) + (ledger ? 4 : 2) * size_t{groups} * sizeof(CountsBlock);
    return (bytes + kPageBytes - 1) / kPageBytes * kPageBytes;
  }
  struct RegionsDelete {
    void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t{kPageBytes}); }
  };
  std::byte* Region(uint32_t shard) const { return regions_.get() + shard * region_bytes_; }
  Shard& ShardAt(uint32_t shard) const {
    return *std::launder(reinterpret_cast<Shard*>(Region(shard)));
  }
  CountsBlock& CountsAt(uint32_t shard, uint32_t group) const {
    return *std::launder(reinterpret_cast<CountsBlock*>(Region(shard) + sizeof(Shard) +
                                                        group * sizeof(CountsBlock)));
  }
  ViewBlock& ViewAt(uint32_t shard, uint32_t group) const {
    return *std::launder(reinterpret_cast<ViewBlock*>(Region(shard) + sizeof(Shard) +
                                                      (groups_ + group) * sizeof(CountsBlock)));
  }
  // This shard's ledger words (which = 0) or its cached sums of the other shards' (which = 1).
  WorkBlock& WorkAt(uint32_t shard, uint32_t group, int which) const {
    return *std::launder(reinterpret_cast<WorkBlock*>(
        Region(shard) + sizeof(Shard) + ((2 + which) * groups_ + group) * sizeof(CountsBlock)));
  }

  class Loads final : public LoadView {
   public:
    explicit Loads(Router& router) : router_(router) {}
    uint32_t size() const override { return router_.count_.load(std::memory_order_relaxed); }
    double Load(uint32_t d) const override {
      return router_.LoadOn(router_internal::CurrentThreadShard(), d);
    }
    bool Up(uint32_t d) const override {
      return router_.health_[d].up.load(std::memory_order_relaxed);
    }
    bool HasWork() const override { return router_.token_work(); }
    DestinationWork Work(uint32_t d) const override {
      return router_.WorkSeen(router_internal::CurrentThreadShard(), d);
    }
    DestinationWork FleetWork() const override {
      return router_.FleetWorkSeen(router_internal::CurrentThreadShard());
    }
    EngineMetrics Scraped(uint32_t d) const override {
      return {router_.health_[d].external.load(std::memory_order_relaxed),
              router_.health_[d].kv_usage.load(std::memory_order_relaxed)};
    }

   private:
    Router& router_;
  };

  // A sum of ledger words, field by field from the low end (each field signed), negative fields
  // read as 0 (a release seen before its pick: another thread's, not yet in the cached sums).
  CACHEROUTE_HOT_INLINE static DestinationWork DecodeWork(uint64_t word) {
    const auto queued = static_cast<int32_t>(static_cast<uint32_t>(word));
    word = (word - static_cast<uint64_t>(int64_t{queued})) >> 32;
    const auto prefilling = static_cast<int16_t>(static_cast<uint16_t>(word));
    word = (word - static_cast<uint64_t>(int64_t{prefilling})) >> 16;
    const auto decoding = static_cast<int16_t>(static_cast<uint16_t>(word));
    return {.queued_prefill_tokens = static_cast<double>(std::max<int32_t>(0, queued)),
            .prefilling = static_cast<double>(std::max<int16_t>(0, prefilling)),
            .decoding = static_cast<double>(std::max<int16_t>(0, decoding))};
  }

  // The ledger of `d` as the thread owning `thread_shard` sees it (without active tokens, which
  // the Router does not keep): its own shard live, the others' cached, as InFlightSeen. A read
  // counts in the view tick unless `count` is false (a Pick counts its reads once).
  CACHEROUTE_HOT_INLINE DestinationWork WorkSeen(const router_internal::ThreadShard& thread_shard,
                                                 uint32_t d, bool count = true) {
    if (!token_work()) return {};
    const uint32_t s = thread_shard.index();
    const uint32_t group = d / kGroupSize;
    CurrentView(thread_shard, group, count);
    const uint32_t i = d % kGroupSize;
    return DecodeWork(WorkAt(s, group, 0).words[i].load(std::memory_order_relaxed) +
                      WorkAt(s, group, 1).words[i].load(std::memory_order_relaxed));
  }

  // Requests prefilling over the whole fleet as this thread sees it: its own shard's count live,
  // the other shards' cached for kViewTicks view reads (or until a Pick's `now` drops the view).
  // (In the shared shard two threads may refresh at once: each stores a valid sum.)
  DestinationWork FleetWorkSeen(const router_internal::ThreadShard& thread_shard,
                                bool count = true) {
    if (!token_work()) return {};
    const uint32_t s = thread_shard.index();
    Shard& shard = ShardAt(s);
    const uint32_t now_tick =
        count ? CountViewRead(thread_shard) : shard.view_tick.load(std::memory_order_relaxed);
    if (now_tick - shard.prefilling_tick.load(std::memory_order_relaxed) >= kViewTicks) {
      int32_t others = 0;
      const uint64_t exclude = uint64_t{1} << s;
      for (uint64_t m = used_shards_.load(std::memory_order_acquire) & ~exclude; m != 0;
           m &= m - 1) {
        others += ShardAt(std::countr_zero(m)).prefilling.load(std::memory_order_relaxed);
      }
      shard.others_prefilling.store(others, std::memory_order_relaxed);
      shard.prefilling_tick.store(now_tick, std::memory_order_relaxed);
    }
    const int32_t seen = shard.prefilling.load(std::memory_order_relaxed) +
                         shard.others_prefilling.load(std::memory_order_relaxed);
    return {.prefilling = static_cast<double>(std::max(0, seen))};
  }

  // The ledger's share of a request (InFlight): its expected uncached tokens as queued prefill.
  static uint64_t QueuedTokens(const Decision& decision, uint32_t prompt_tokens) {
    return decision.expected_uncached_tokens > 0 ? decision.expected_uncached_tokens
                                                 : prompt_tokens;
  }
  // The fleet's prefilling count, in the calling thread's shard.
  void CountPrefilling(int32_t delta) {
    const router_internal::ThreadShard& thread_shard = router_internal::CurrentThreadShard();
    UseShard(thread_shard.index());
    router_internal::ShardAdd<int32_t>(ShardAt(thread_shard.index()).prefilling, delta,
                                       thread_shard.owned(), std::memory_order_relaxed);
  }
  // Adds `delta` (mod 2^64) to `d`'s ledger word in the calling thread's shard.
  void LedgerAddWord(uint32_t d, uint64_t delta) {
    const router_internal::ThreadShard& thread_shard = router_internal::CurrentThreadShard();
    UseShard(thread_shard.index());
    router_internal::ShardAdd<uint64_t>(
        WorkAt(thread_shard.index(), d / kGroupSize, 0).words[d % kGroupSize], delta,
        thread_shard.owned(), std::memory_order_relaxed);
  }
  void LedgerAdd(const Decision& decision, uint32_t prompt_tokens) {
    LedgerAddWord(decision.destination, QueuedTokens(decision, prompt_tokens) + kPrefillOne);
    CountPrefilling(1);
  }
  void LedgerFirstToken(const Decision& decision, uint32_t prompt_tokens) {
    LedgerAddWord(decision.destination,
                  kDecodeOne - kPrefillOne - QueuedTokens(decision, prompt_tokens));
    CountPrefilling(-1);
  }
  void LedgerRelease(const Decision& decision, uint32_t prompt_tokens, bool decoding) {
    if (decoding) {
      LedgerAddWord(decision.destination, -kDecodeOne);
    } else {
      LedgerAddWord(decision.destination, -(QueuedTokens(decision, prompt_tokens) + kPrefillOne));
      CountPrefilling(-1);
    }
  }

  InFlight TrackOnShard(const router_internal::ThreadShard& thread_shard, const Decision& decision,
                        uint32_t prompt_tokens) {
    // Past the count but within capacity: a decision made just before a Resize shrank it.
    if (decision.destination >= capacity_) {
      return InFlight(nullptr, {kNoDestination, decision.planned, decision.reason}, 0,
                      InFlight::Ledger::kNone);
    }
    UseShard(thread_shard.index());
    router_internal::ShardAdd<uint32_t>(Counts(thread_shard.index(), decision.destination).picked,
                                        1, thread_shard.owned(), std::memory_order_relaxed);
    if (!token_work()) return InFlight(this, decision, prompt_tokens, InFlight::Ledger::kNone);
    LedgerAdd(decision, prompt_tokens);
    return InFlight(this, decision, prompt_tokens, InFlight::Ledger::kPrefill);
  }

  Decision DecideOnShard(const router_internal::ThreadShard& thread_shard,
                         const PickRequest& request, const LoadView& loads, Time now) {
    Shard& shard = ShardAt(thread_shard.index());
    const bool owned = thread_shard.owned();
    // Its own view (every Pick) by its final type, so that the policy's Load and Up calls are
    // direct and inlined; any other view (the simulator's) through the vtable.
    const Decision decision = &loads == &loads_
                                  ? DecideUncounted(request, loads_, now, thread_shard)
                                  : DecideUncounted(request, loads, now, thread_shard);
    constexpr auto kRelaxed = std::memory_order_relaxed;
    if (decision.planned) {
      router_internal::ShardAdd<uint64_t>(shard.planned, 1, owned, kRelaxed);
      if (decision.spilled) router_internal::ShardAdd<uint64_t>(shard.spilled, 1, owned, kRelaxed);
    } else {
      router_internal::ShardAdd<uint64_t>(shard.fallback[static_cast<int>(decision.reason)], 1,
                                          owned, kRelaxed);
    }
    if (decision.destination == kNoDestination) {
      router_internal::ShardAdd<uint64_t>(shard.no_destination, 1, owned, kRelaxed);
    }
    return decision;
  }

  DestinationCounts& Counts(uint32_t shard, uint32_t d) const {
    return CountsAt(shard, d / kGroupSize).counts[d % kGroupSize];
  }

  // Makes `shard` part of every in-flight sum before it first counts anything. The seq_cst
  // read-modify-write is ordered before the shard's first count, so a sum that sees a count of
  // the shard (or anything that happened after it) also sees the shard's bit.
  void UseShard(uint32_t shard) {
    std::atomic<bool>& used = ShardAt(shard).used;
    // Acquire/release: a thread that finds the flag set (a previous owner's, or a thread sharing
    // the shared shard) is ordered after the read-modify-write that set the bit.
    if (used.load(std::memory_order_acquire)) return;
    used_shards_.fetch_or(uint64_t{1} << shard, std::memory_order_seq_cst);
    used.store(true, std::memory_order_release);
  }

  // Σ picked − Σ released of `d` over the used shards not in `exclude` (mod 2^32). Releases first,
  // with acquire: a release counted here happened after its pick, which the second pass then sees
  // (the shard's bit included), so the sum never counts a release without its pick.
  uint32_t SumInFlight(uint32_t d, uint64_t exclude) const {
    uint32_t released = 0;
    for (uint64_t m = used_shards_.load(std::memory_order_acquire) & ~exclude; m != 0; m &= m - 1) {
      released += Counts(std::countr_zero(m), d).released.load(std::memory_order_acquire);
    }
    uint32_t picked = 0;
    for (uint64_t m = used_shards_.load(std::memory_order_acquire) & ~exclude; m != 0; m &= m - 1) {
      picked += Counts(std::countr_zero(m), d).picked.load(std::memory_order_relaxed);
    }
    return picked - released;
  }

  // load(d) (the blend in the header comment) as the thread owning `thread_shard` sees it.
  double LoadOn(const router_internal::ThreadShard& thread_shard, uint32_t d) {
    return static_cast<double>(InFlightSeen(thread_shard, d)) +
           options_.external_load_weight * health_[d].external.load(std::memory_order_relaxed);
  }

  // in_flight(d) as this thread sees it: its own shard live, the others' cached
  // (docs/dataplane.md, "Router").
  int64_t InFlightSeen(const router_internal::ThreadShard& thread_shard, uint32_t d) {
    const uint32_t s = thread_shard.index();
    const ViewBlock& view = CurrentView(thread_shard, d / kGroupSize);
    const DestinationCounts& mine = Counts(s, d);
    const uint32_t own =
        mine.picked.load(std::memory_order_relaxed) - mine.released.load(std::memory_order_relaxed);
    const uint32_t seen = own + view.others[d % kGroupSize].load(std::memory_order_relaxed);
    return std::max<int32_t>(0, static_cast<int32_t>(seen));
  }

  // Counts one view read in this thread's tick (unless `count` is false) and returns its view of
  // `group`, re-read first when kViewTicks reads have passed since it was.
  CACHEROUTE_HOT_INLINE const ViewBlock& CurrentView(
      const router_internal::ThreadShard& thread_shard, uint32_t group, bool count = true) {
    const uint32_t s = thread_shard.index();
    const uint32_t now_tick =
        count ? CountViewRead(thread_shard) : ShardAt(s).view_tick.load(std::memory_order_relaxed);
    const ViewBlock& view = ViewAt(s, group);
    if (now_tick - view.tick.load(std::memory_order_relaxed) >= kViewTicks) {
      RefreshView(s, group, now_tick);
    }
    return view;
  }

  // Counts one view read in this thread's tick; returns the tick before it.
  CACHEROUTE_HOT_INLINE uint32_t CountViewRead(const router_internal::ThreadShard& thread_shard) {
    std::atomic<uint32_t>& tick = ShardAt(thread_shard.index()).view_tick;
    const uint32_t now_tick = tick.load(std::memory_order_relaxed);
    router_internal::ShardAdd<uint32_t>(tick, 1, thread_shard.owned(), std::memory_order_relaxed);
    return now_tick;
  }

  // Re-reads shard `s`'s view of one group of destinations from the other used shards, releases
  // before picks as in SumInFlight, and with the ledger the sums of their ledger words. (In the
  // shared shard two threads may refresh at once: each stores a valid sum, so the view holds one of
  // them per destination.)
  void RefreshView(uint32_t s, uint32_t group, uint32_t now_tick) {
    const uint32_t first = group * kGroupSize;
    const uint32_t n = std::min(kGroupSize, capacity_ - first);
    const uint64_t exclude = uint64_t{1} << s;
    std::array<uint32_t, kGroupSize> sums{};
    for (uint64_t m = used_shards_.load(std::memory_order_acquire) & ~exclude; m != 0; m &= m - 1) {
      const CountsBlock& block = CountsAt(std::countr_zero(m), group);
      for (uint32_t i = 0; i < n; ++i) {
        sums[i] -= block.counts[i].released.load(std::memory_order_acquire);
      }
    }
    for (uint64_t m = used_shards_.load(std::memory_order_acquire) & ~exclude; m != 0; m &= m - 1) {
      const CountsBlock& block = CountsAt(std::countr_zero(m), group);
      for (uint32_t i = 0; i < n; ++i) {
        sums[i] += block.counts[i].picked.load(std::memory_order_relaxed);
      }
    }
    ViewBlock& view = ViewAt(s, group);
    for (uint32_t i = 0; i < n; ++i) view.others[i].store(sums[i], std::memory_order_relaxed);
    if (token_work()) {
      std::array<uint64_t, kGroupSize> words{};
      for (uint64_t m = used_shards_.load(std::memory_order_acquire) & ~exclude; m != 0;
           m &= m - 1) {
        const WorkBlock& block = WorkAt(std::countr_zero(m), group, 0);
        for (uint32_t i = 0; i < n; ++i) words[i] += block.words[i].load(std::memory_order_relaxed);
      }
      WorkBlock& cached = WorkAt(s, group, 1);
      for (uint32_t i = 0; i < n; ++i) cached.words[i].store(words[i], std::memory_order_relaxed);
    }
    view.tick.store(now_tick, std::memory_order_relaxed);
  }

  // Drops this thread's cached sums when `now` moved more than kMaxViewAge since it last did.
  void DropOldView(const router_internal::ThreadShard& thread_shard, Time now) {
    Shard& shard = ShardAt(thread_shard.index());
    const Duration::rep t = now.time_since_epoch().count();
    const Duration::rep last = shard.view_time.load(std::memory_order_relaxed);
    // Unsigned, so that a `now` earlier than the last one (another thread's, in the shared shard)
    // also drops the view: a refresh too many, never a view kept too long.
    if (static_cast<uint64_t>(t) - static_cast<uint64_t>(last) <=
        static_cast<uint64_t>(kMaxViewAge.count())) {
      return;
    }
    shard.view_time.store(t, std::memory_order_relaxed);
    router_internal::ShardAdd<uint32_t>(shard.view_tick, kViewTicks, thread_shard.owned(),
                                        std::memory_order_relaxed);
  }

  // Counts a token's release in the releasing thread's shard (see InFlight::Release). Release
  // order pairs with SumInFlight's acquire.
  void CountRelease(uint32_t d) {
    const router_internal::ThreadShard& thread_shard = router_internal::CurrentThreadShard();
    UseShard(thread_shard.index());
    router_internal::ShardAdd<uint32_t>(Counts(thread_shard.index(), d).released, 1,
                                        thread_shard.owned(), std::memory_order_release);
  }

  // Holds the current table slot for the duration of one lookup (docs/dataplane.md, "Router").
  class ReadGuard {
   public:
    ReadGuard(const Router& router, Shard& shard, bool owned) : owned_(owned) {
      for (;;) {
        const int s = router.current_.load(std::memory_order_seq_cst);
        if (s < 0) return;
        std::atomic<uint32_t>& readers = shard.readers[s];
        // The Dekker store: ordered before the re-read of current_ below. A read-modify-write
        // even in an owned shard, because a plain seq_cst store would cost the same fence.
        readers.fetch_add(1, std::memory_order_seq_cst);
        if (router.current_.load(std::memory_order_seq_cst) == s) {
          readers_ = &readers;
          table_ = router.tables_[s].get();
          return;
        }
        Leave(readers);  // replaced meanwhile; retry
      }
    }
    ~ReadGuard() {
      if (readers_ != nullptr) Leave(*readers_);
    }
    ReadGuard(const ReadGuard&) = delete;
    ReadGuard& operator=(const ReadGuard&) = delete;
    const RoutingTable* table() const { return table_; }

   private:
    // Release: the lookup's reads happen before the writer, seeing the count drop, reuses the slot.
    void Leave(std::atomic<uint32_t>& readers) {
      router_internal::ShardAdd<uint32_t>(readers, ~uint32_t{0}, owned_, std::memory_order_release);
    }

    const bool owned_;
    std::atomic<uint32_t>* readers_ = nullptr;
    const RoutingTable* table_ = nullptr;
  };

  // Whether any thread is reading table slot `s` (Install only; docs/dataplane.md).
  bool HasReadersLocked(int s) const {
    for (uint32_t i = 0; i < router_internal::kShards; ++i) {
      if (ShardAt(i).readers[s].load(std::memory_order_seq_cst) != 0) return true;
    }
    return false;
  }

  bool IsStale(Time now) const {
    if (options_.table_ttl == Duration::zero()) return false;
    const Time refreshed(Duration(refreshed_at_.load(std::memory_order_relaxed)));
    return now - refreshed > options_.table_ttl;
  }

  // Power of two choices for a key with no usable planned set under the paper's rule, through any
  // LoadView.
  template <typename View>
  Decision Fallback(const View& loads, Reason reason,
                    const router_internal::ThreadShard& /*thread_shard*/) {
    return {PowerOfTwoChoices(loads, random_), false, reason};
  }

  // The same over the Router's own view (every Pick's): two distinct uniformly random up
  // destinations and the lighter wins (the first on a tie), with both candidates from one 64-bit
  // draw (32-bit multiply-shift indices, the second over the other n - 1) and the loads read
  // through the thread's shard it already has. When either candidate is down it draws again by
  // the general rule: a uniform pair of distinct up destinations either way.
  Decision Fallback(const Loads& loads, Reason reason,
                    const router_internal::ThreadShard& thread_shard) {
    const uint32_t n = loads.size();
    if (n >= 2) {
      const uint64_t r = random_.Next();
      const auto a = static_cast<uint32_t>((uint64_t{static_cast<uint32_t>(r)} * n) >> 32);
      auto b = static_cast<uint32_t>(((r >> 32) * (n - 1)) >> 32);
      b += b >= a ? 1 : 0;
      if (loads.Up(a) && loads.Up(b)) {
        return {LoadOn(thread_shard, b) < LoadOn(thread_shard, a) ? b : a, false, reason};
      }
    }
    return {PowerOfTwoChoices(loads, random_), false, reason};
  }

  // What the table says about a key: its set (empty when there is no usable table or the key is
  // not admitted) and why a request is not planned (kPlanned when it may be).
  struct TableLookup {
    DestinationSet set;
    Reason reason = Reason::kPlanned;
  };
  TableLookup Lookup(const RoutingTable* table, uint64_t key_id, Time now) const {
    if (table == nullptr) return {.set = {}, .reason = Reason::kNoTable};
    if (IsStale(now)) return {.set = {}, .reason = Reason::kStale};
    // A rollout keeps the keys of its control arm off the table, admitted or not: they get what
    // Flat-LB gives (power of two choices), so the arm measures the baseline.
    if (table->table_fraction() < 1 && ArmOf(key_id, table->table_fraction()) == Arm::kControl) {
      return {.set = {}, .reason = Reason::kControlArm};
    }
    const DestinationSet set = table->Find(key_id);
    if (set.empty()) return {.set = {}, .reason = Reason::kNotAdmitted};
    return {.set = set};
  }

  template <typename View>
  Decision DecideUncounted(const PickRequest& request, const View& loads, Time now,
                           const router_internal::ThreadShard& thread_shard) {
    if (memory_ != nullptr) memory_->Prefetch(request.key_id);  // overlaps the table's miss
    const ReadGuard guard(*this, ShardAt(thread_shard.index()), thread_shard.owned());
    const TableLookup lookup = Lookup(guard.table(), request.key_id, now);
    if (lookup.reason == Reason::kControlArm) {
      return {PowerOfTwoChoices(loads, random_), false, Reason::kControlArm};
    }
    if (token_work()) return DecideTokenWork(request, loads, now, lookup, thread_shard);
    if (lookup.set.empty()) return Fallback(loads, lookup.reason, thread_shard);
    // The paper's rule: the least-loaded up member; ties go to the lowest index, which keeps a
    // lightly loaded key on one warm destination. Loads are read only when two members compete
    // (most sets have one).
    uint32_t best = kNoDestination;
    double best_load = 0;
    bool best_load_read = false;
    for (uint32_t d : lookup.set) {
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
    if (best == kNoDestination) return Fallback(loads, Reason::kSetDown, thread_shard);
    return {best, true, Reason::kPlanned};
  }

  // The token-work rule (DispatchRule::kTokenWork; docs/dispatch.md, "One cost per candidate").
  template <typename View>
  Decision DecideTokenWork(const PickRequest& request, const View& loads, Time now,
                           const TableLookup& lookup,
                           const router_internal::ThreadShard& thread_shard) {
    // Through the Router's own view, the ledger is read directly, as one view read per decision.
    constexpr bool kOwnView = std::is_same_v<View, Loads>;
    if constexpr (kOwnView) CountViewRead(thread_shard);
    auto work_of = [&](uint32_t d) CACHEROUTE_HOT_LAMBDA {
      if constexpr (kOwnView) {
        return WorkSeen(thread_shard, d, /*count=*/false);
      } else {
        return loads.Work(d);
      }
    };
    const uint32_t n = loads.size();
    const double mean_prompt = mean_prompt_tokens_.load(std::memory_order_relaxed);
    const double prompt =
        request.prompt_tokens > 0 ? request.prompt_tokens : std::max(1.0, mean_prompt);
    const double shared = std::min(prompt, template_tokens_.load(std::memory_order_relaxed));
    auto fresh = [&](const KeyRecall& r) {
      return r.destination < n && (now - r.sent).count() < health_[r.destination].turnover.load(
                                                               std::memory_order_relaxed);
    };
    // What the key's memory promises where the key is warm (its planned members, and where it last
    // went while that is fresh), scaled by the measured yield of such promises.
    const KeyRecall recall = memory_->Get(request.key_id);
    const double yield = warm_yield_.load(std::memory_order_relaxed);
    const double key_cached =
        recall.known()
            ? shared +
                  yield * std::max(0.0, std::min<double>(prompt, recall.prompt_tokens) - shared)
            : shared;
    const uint32_t remembered =
        recall.known() && fresh(recall) ? recall.destination : kNoDestination;
    // Where the longest remembered prefix of the prompt went: a chained block hash names the
    // whole prefix, so this credit needs no yield.
    const KnownPrefix prefix = prefixes_ != nullptr && !request.block_hashes.empty()
                                   ? prefixes_->Deepest(request.block_hashes, fresh)
                                   : KnownPrefix{};
    const double prefix_cached = std::min(prompt - 1, static_cast<double>(prefix.tokens));
    const DestinationSet& set = lookup.set;
    auto in_set = [&set](uint32_t d) {
      for (uint32_t m : set) {
        if (m == d) return true;
      }
      return false;
    };
    const bool has_work = loads.HasWork();
    const double request_tokens = std::max(1.0, mean_prompt);  // a view without the ledger
    // Every uncached token also delays the requests waiting for their first token, wherever it
    // is added: the fleet's mean count of them per destination.
    double fleet_prefilling = 0;
    if (has_work) {
      fleet_prefilling = kOwnView ? FleetWorkSeen(thread_shard, /*count=*/false).prefilling
                                  : loads.FleetWork().prefilling;
    }
    const double waiting = fleet_prefilling / std::max(1u, n);
    const double base = 1 + options_.dispatch.queue_stall * waiting;
    const double gamma = options_.dispatch.decode_stall;
    const double wait_tokens = options_.dispatch.queue_wait * request_tokens;
    const double memory_short = options_.dispatch.memory_short;
    // No destination's capacity known: no memory term, and no per-candidate read of it.
    const bool memory_term = memory_short != 0 && kv_known_.load(std::memory_order_relaxed) != 0;

    struct Best {
      uint32_t destination = kNoDestination;
      double cost = 0;
      double cached = 0;
      CacheExpectation expected = CacheExpectation::kTemplate;
    } best;
    // A candidate with no warm credit (not planned, remembered or the prefix's) expects only the
    // template cached, so with nothing queued or decoding there it costs `cold_floor`, and more
    // otherwise. Once the best so far costs no more than that, such a candidate cannot win (ties
    // keep the first) and is not costed: the decision is the one costing every candidate gives,
    // for a fraction of the work whenever a warm candidate is not overloaded.
    // (It needs the signals ≥ 0, as DestinationWork's are, and γ, κ, μ ≥ 0.)
    const double cold_floor = base * (prompt - shared);
    const bool may_skip = has_work && gamma >= 0 && wait_tokens >= 0 && memory_short >= 0;
    // Each destination is costed once (of the first 64; a second costing could not win either).
    uint64_t costed = 0;
    // Candidate d's expected cached tokens and cost.
    auto cost_of = [&](uint32_t d, bool key_warm) CACHEROUTE_HOT_LAMBDA {
      Best c{d, 0, shared, CacheExpectation::kTemplate};
      if (key_warm && key_cached > c.cached) {
        c.cached = key_cached;
        c.expected = CacheExpectation::kKey;
      }
      if (d == prefix.destination && prefix_cached > c.cached) {
        c.cached = prefix_cached;
        c.expected = CacheExpectation::kPrefix;
      }
      double queued, decoding, queued_prefill = 0;
      if (has_work) {
        const DestinationWork w = work_of(d);
        queued_prefill = w.queued_prefill_tokens;
        queued = queued_prefill + wait_tokens * w.prefilling;
        decoding = w.decoding;
      } else {
        queued = loads.Load(d) * request_tokens;
        decoding = 0;
      }
      const double uncached = prompt - c.cached;
      c.cost = queued + (base + gamma * decoding) * uncached;
      // The memory term: what d's KV is short of holding this request behind its queue.
      const double kv = memory_term ? health_[d].kv_capacity.load(std::memory_order_relaxed) : 0;
      if (kv > 0) {
        const double short_by =
            std::clamp(loads.Scraped(d).kv_usage, 0.0, 1.0) * kv + queued_prefill + uncached - kv;
        if (short_by > 0) c.cost += memory_short * short_by;
      }
      return c;
    };
    auto consider = [&](uint32_t d) CACHEROUTE_HOT_LAMBDA {
      if (d < 64) {
        if ((costed >> d & 1) != 0) return;
        costed |= uint64_t{1} << d;
      }
      const bool key_warm = d == remembered || in_set(d);
      if (may_skip && best.destination != kNoDestination && best.cost <= cold_floor && !key_warm &&
          d != prefix.destination) {
        // Builds with assertions cost it anyway and check that it could not have won.
        assert(!Usable(loads, d) || !(cost_of(d, key_warm).cost < best.cost));
        return;
      }
      if (!Usable(loads, d)) return;
      const Best c = cost_of(d, key_warm);
      if (best.destination == kNoDestination || c.cost < best.cost) best = c;
    };
    // Warm candidates first, so that they win ties: the plan is the prior.
    bool set_up = false;
    for (uint32_t d : set) {
      consider(d);
      set_up = set_up || Usable(loads, d);
    }
    if (remembered != kNoDestination) consider(remembered);
    if (prefix.known()) consider(prefix.destination);
    if (set.has_spill()) consider(set.spill());
    // The key's hashed pair (the same on every gateway, so that an idle fleet spreads keys), then
    // a random destination, or all of a small fleet.
    const auto [first, second] = HashedPair(request.key_id, n);
    if (n >= 2) {
      consider(first);
      consider(second);
    }
    if (n <= options_.dispatch.all_candidates_up_to) {
      for (uint32_t i = 0; i < n; ++i) consider((first + i) % n);
    } else {
      const uint32_t r = RandomUpDestination(loads, random_);
      if (r != kNoDestination) consider(r);
    }
    if (best.destination == kNoDestination) {
      const Reason reason = set.empty() ? lookup.reason : Reason::kSetDown;
      return {PowerOfTwoChoices(loads, random_), false, reason};
    }
    memory_->Put(request.key_id, best.destination, static_cast<uint32_t>(prompt), now);
    if (prefixes_ != nullptr) prefixes_->Record(request.block_hashes, best.destination, now);
    Decision decision{best.destination, set_up,
                      set_up ? Reason::kPlanned : (set.empty() ? lookup.reason : Reason::kSetDown),
                      set_up && !in_set(best.destination)};
    decision.expected_uncached_tokens =
        static_cast<uint32_t>(std::max(1.0, std::ceil(prompt - best.cached)));
    decision.expected = best.expected;
    return decision;
  }

  static void Blend(std::atomic<double>& mean, double value, double keep) {
    const double old = mean.load(std::memory_order_relaxed);
    mean.store(old == 0 ? value : old * keep + value * (1 - keep), std::memory_order_relaxed);
  }

  bool token_work() const { return options_.dispatch.rule == DispatchRule::kTokenWork; }
  static constexpr double kMinYield = 0.05;

  Status CheckInstallableLocked(const RoutingTable* table, bool same_version_ok) const {
    if (table == nullptr) return Status::Error("table is null");
    if (!same_version_ok && table->destination_count() != destination_count()) {
      return Status::Error(
          "table " + ToString(table->version()) + " has destination_count " +
          std::to_string(table->destination_count()) + ", the router routes over " +
          std::to_string(destination_count()) + " destinations (unknown destination)");
    }
    const bool older = same_version_ok ? table->version() < installed_version_
                                       : !(installed_version_ < table->version());
    if (current_.load(std::memory_order_seq_cst) >= 0 && older) {
      return Status::Error("version regression: table " + ToString(table->version()) +
                           " is not newer than the installed " + ToString(installed_version_));
    }
    return Status::Ok();
  }

  Status SetUp(uint32_t destination, bool up) {
    if (destination >= capacity_) return UnknownDestination(destination);
    health_[destination].up.store(up, std::memory_order_relaxed);
    return Status::Ok();
  }

  Status UnknownDestination(uint32_t destination) const {
    return Status::Error("unknown destination " + std::to_string(destination) +
                         " (capacity = " + std::to_string(capacity_) + ")");
  }

  const RouterOptions options_;
  Random& random_;
  const uint32_t capacity_;
  std::atomic<uint32_t> count_;  // destinations routed over (Resize), ≤ capacity_
  const uint32_t groups_;  // destination groups of kGroupSize
  const size_t region_bytes_;
  std::unique_ptr<std::byte[], RegionsDelete> regions_;  // kShards regions (see Region)
  std::atomic<uint64_t> used_shards_{0};  // bit s: shard s has counted in flight here
  std::unique_ptr<Health[]> health_;
  std::unique_ptr<KeyMemory> memory_;         // the per-key memory; null under the paper's rule
  std::unique_ptr<PrefixMemory> prefixes_;    // the prefix memory; null without one
  std::atomic<double> measured_hit_{0.0};     // SetMeasuredHit
  std::atomic<double> template_tokens_{0.0};  // ObserveServed
  std::atomic<double> mean_prompt_tokens_{0.0};  // ObserveServed
  std::atomic<uint32_t> kv_known_{0};  // destinations with a KV capacity > 0 (SetKvCapacity)
  std::atomic<double> warm_yield_{1.0};          // ObserveServed
  std::atomic<double> warm_found_{0.0};          // ObserveServed
  std::atomic<double> warm_credited_{0.0};       // ObserveServed
  Loads loads_;

  // tables_[s] is written only by Install, while slot s is not current and has no reader.
  std::array<std::shared_ptr<const RoutingTable>, kTableSlots> tables_;
  std::atomic<int> current_{-1};  // index into tables_, -1 before the first Install
  std::atomic<double> table_fraction_{1.0};  // of the installed table
  std::atomic<Duration::rep> installed_at_{0};
  std::atomic<Duration::rep> refreshed_at_{0};

  mutable std::mutex install_mu_;   // serialises Install; never taken by Pick
  TableVersion installed_version_;  // guarded by install_mu_
  uint64_t installs_ = 0;           // guarded by install_mu_
  uint64_t rejected_installs_ = 0;  // guarded by install_mu_
  std::string last_rejection_;      // guarded by install_mu_
};

inline void InFlight::FirstToken() {
  if (router_ != nullptr && ledger_ == Ledger::kPrefill) {
    router_->LedgerFirstToken(decision_, prompt_tokens_);
    ledger_ = Ledger::kDecode;
  }
}

inline void InFlight::Release() {
  if (router_ != nullptr) {
    if (ledger_ != Ledger::kNone) {
      router_->LedgerRelease(decision_, prompt_tokens_, ledger_ == Ledger::kDecode);
      ledger_ = Ledger::kNone;
    }
    router_->CountRelease(decision_.destination);
    router_ = nullptr;
  }
}

}  // namespace cacheroute::dataplane
