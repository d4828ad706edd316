// Router: the per-request dispatch of CacheRoute (paper §3.1, "Placement and dispatch"): an
// admitted key goes to the least-loaded member of its planned set T(b); every other request uses
// power of two choices across the fleet. Gateways call Pick on every request.
//
// Tables. The Router holds the latest good RoutingTable as a shared_ptr<const RoutingTable>.
// Install() (control path, serialised by a mutex) validates a new table against the installed one
// (its version must be strictly newer, its destination count must equal the Router's) and keeps
// the last good table on rejection, as the table stream's NACK rule requires (docs/protocol.md).
//
// Why not std::atomic<std::shared_ptr>: libstdc++ 12 implements it, and std::atomic_load on a
// shared_ptr, with a lock, so request threads would contend on it. Instead the Router keeps
// kTableSlots slots, each a shared_ptr, an atomic index of the current slot, and reader counts.
// A reader increments its count for the current slot, re-reads the index, and backs off if it
// moved; the writer fills a slot that is neither current nor read, then publishes its index. Both
// sides use sequentially consistent operations, so either the reader sees the new index or the
// writer sees the reader's count (the Dekker pattern): a reader never reads a slot the writer is
// overwriting. Readers never block and retry only when the writer made progress, so the read side
// is lock-free; only the writer may wait (for a reader to leave an old slot, a few nanoseconds of
// lookup). Old tables are destroyed on the writer's thread, never on a request.
//
// Per-thread shards. One reader count per slot, shared by all request threads, would bounce its
// cache line between cores on every Pick, and so would shared stats counters. So the reader
// counts and the stats counters live in kShards shards, one cache line pair each: a thread claims
// a shard of its own on its first Pick (process-wide, so the same index in every Router) and
// returns it when it exits. In its own shard a thread is the only writer, so it leaves a slot and
// counts stats with plain stores; only entering a slot needs a locked instruction (the Dekker
// store). Threads beyond the first kShards - 1 share the last shard with atomic read-modify-write
// operations: still correct, merely contended. Install reads every shard's count of a slot;
// Stats() adds the shards up.
//
// Load signal. load(d) = in_flight(d) + external_load_weight · external(d), where in_flight(d) is
// this Router's count of outstanding requests (InFlight tokens alive) and external(d) the last
// value given to SetLoad(d) (e.g. a shared queue-depth report, so gateways that each see only
// their own traffic do not drift; shared/design/PROTOCOL.md, "Load signals"). Both are atomics.
// in_flight(d) is the one counter every request thread writes by design (it is the signal), so it
// has a cache line of its own, apart from the read-mostly health and external load.
//
// Rate counting. With RouterOptions::rate_recorder set, Pick also counts its key in that
// RateRecorder (one Record, ~10 ns, no lock; see rate_recorder.h), so a gateway need not call
// Record itself (and must not, or it counts each request twice). Decide and Track do not record:
// a gateway routing by another policy records its keys itself.
//
// Fallback. With no table, with a table not refreshed within table_ttl (Install or Refresh), for
// an unadmitted key, or for an admitted key whose whole set is down, the request uses power of two
// choices over up destinations. Stats() counts each reason separately.
//
// Invariants: Pick never throws, allocates or locks (except that a thread's very first Pick
// registers its shard claim for release at thread exit, once); an InFlight token decrements
// exactly the counter it incremented, once; tokens must not outlive their Router.
//
// Usage:
//   ThreadLocalRandom random(1);
//   RateRecorder recorder;   // drained by a RateReporter
//   Router router({.destination_count = 30, .table_ttl = std::chrono::seconds(60),
//                  .rate_recorder = &recorder}, random);
//   Status s = router.Install(std::make_shared<const RoutingTable>(*std::move(table)), now);
//   InFlight request = router.Pick(KeyId("tenant-7"), now);   // keep it until the response ends
//   Send(request.destination());                               // its destructor decrements
#pragma once

#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/dispatch.h"
#include "cacheroute/dataplane/random.h"
#include "cacheroute/dataplane/rate_recorder.h"
#include "cacheroute/dataplane/routing_table.h"
#include "cacheroute/dataplane/status.h"

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

struct RouterOptions {
  uint32_t destination_count = 0;
  // A table not installed or refreshed within this long is treated as absent. Zero: never stale.
  Duration table_ttl = Duration::zero();
  // Weight of the externally reported load (SetLoad) against local in-flight requests.
  double external_load_weight = 1.0;
  // When set, Pick counts every key it routes here (for the rate reports to the planner). Not
  // owned; must outlive the Router.
  RateRecorder* rate_recorder = nullptr;
};

// An outstanding request routed by Router::Pick. Holding it counts the request as in flight at
// its destination; destroying it (or Release) ends that. Movable, not copyable.
class InFlight {
 public:
  InFlight() = default;
  InFlight(InFlight&& other) noexcept
      : counter_(std::exchange(other.counter_, nullptr)), decision_(other.decision_) {}
  InFlight& operator=(InFlight&& other) noexcept {
    if (this != &other) {
      Release();
      counter_ = std::exchange(other.counter_, nullptr);
      decision_ = other.decision_;
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

  // Ends the request early (idempotent).
  void Release() {
    if (counter_ != nullptr) {
      counter_->fetch_sub(1, std::memory_order_relaxed);
      counter_ = nullptr;
    }
  }

 private:
  friend class Router;
  InFlight(std::atomic<int64_t>* counter, Decision decision)
      : counter_(counter), decision_(decision) {}

  std::atomic<int64_t>* counter_ = nullptr;
  Decision decision_;
};

struct RouterStats {
  uint64_t planned = 0;
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

  Router(RouterOptions options, Random& random)
      : options_(options),
        random_(random),
        in_flight_(new InFlightCount[options.destination_count]),
        health_(new Health[options.destination_count]),
        loads_(*this) {}
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  uint32_t destination_count() const { return options_.destination_count; }

  // Installs `table` if it is valid for this Router; otherwise keeps the current one and returns
  // the reason (what the table stream sends back as a NACK).
  Status Install(std::shared_ptr<const RoutingTable> table, Time now) {
    std::lock_guard<std::mutex> lock(install_mu_);
    Status status = CheckInstallableLocked(table.get());
    if (!status.ok) {
      ++rejected_installs_;
      last_rejection_ = status.message;
      return status;
    }
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
    installed_at_.store(now.time_since_epoch().count(), std::memory_order_relaxed);
    refreshed_at_.store(now.time_since_epoch().count(), std::memory_order_relaxed);
    current_.store(target, std::memory_order_seq_cst);
    ++installs_;
    return Status::Ok();
  }

  // The installed table is confirmed current at `now` (e.g. the table stream is healthy and the
  // planner had nothing newer), which restarts its TTL.
  void Refresh(Time now) {
    refreshed_at_.store(now.time_since_epoch().count(), std::memory_order_relaxed);
  }

  // Routes one request and counts it in flight until the returned token is destroyed.
  InFlight Pick(uint64_t key_id, Time now) {
    if (options_.rate_recorder != nullptr) options_.rate_recorder->Record(key_id);
    return Track(Decide(key_id, loads_, now));
  }

  // Counts a decision made elsewhere (another Policy over loads(), a gateway's own fallback) in
  // flight at its destination, so that every policy's requests show in the load signal. A
  // decision for kNoDestination (or a destination this Router does not have) gives a token that
  // counts nothing and whose ok() is false. Never throws, allocates or locks.
  InFlight Track(const Decision& decision) {
    if (decision.destination >= options_.destination_count) {
      return InFlight({}, {kNoDestination, decision.planned, decision.reason});
    }
    std::atomic<int64_t>* counter = &in_flight_[decision.destination].count;
    counter->fetch_add(1, std::memory_order_relaxed);
    return InFlight(counter, decision);
  }

  // The routing decision alone, against any LoadView (CacheRoutePolicy, the simulator); counts
  // stats but tracks nothing in flight.
  Decision Decide(uint64_t key_id, const LoadView& loads, Time now) {
    const router_internal::ThreadShard& thread_shard = router_internal::CurrentThreadShard();
    Shard& shard = shards_[thread_shard.index()];
    const bool owned = thread_shard.owned();
    const Decision decision = DecideUncounted(key_id, loads, now, shard, owned);
    constexpr auto kRelaxed = std::memory_order_relaxed;
    if (decision.planned) {
      router_internal::ShardAdd<uint64_t>(shard.planned, 1, owned, kRelaxed);
    } else {
      router_internal::ShardAdd<uint64_t>(shard.fallback[static_cast<int>(decision.reason)], 1,
                                          owned, kRelaxed);
    }
    if (decision.destination == kNoDestination) {
      router_internal::ShardAdd<uint64_t>(shard.no_destination, 1, owned, kRelaxed);
    }
    return decision;
  }

  Status MarkDown(uint32_t destination) { return SetUp(destination, false); }
  Status MarkUp(uint32_t destination) { return SetUp(destination, true); }

  // Sets the externally reported load of `destination` (see the blend above).
  Status SetLoad(uint32_t destination, double value) {
    if (destination >= options_.destination_count) return UnknownDestination(destination);
    if (!(value >= 0) || value == std::numeric_limits<double>::infinity()) {
      return Status::Error("load " + std::to_string(value) + " for destination " +
                           std::to_string(destination) + " is not a finite non-negative number");
    }
    health_[destination].external.store(value, std::memory_order_relaxed);
    return Status::Ok();
  }

  // This Router's blended loads and health, as policies see them.
  const LoadView& loads() const { return loads_; }

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
    for (const Shard& shard : shards_) {
      stats.planned += shard.planned.load(std::memory_order_relaxed);
      for (int r = 0; r < kReasonCount; ++r) {
        stats.fallback[r] += shard.fallback[r].load(std::memory_order_relaxed);
      }
      stats.no_destination += shard.no_destination.load(std::memory_order_relaxed);
    }
    for (int r = 0; r < kReasonCount; ++r) stats.fallback_total += stats.fallback[r];
    for (uint32_t d = 0; d < options_.destination_count; ++d) {
      stats.in_flight.push_back(in_flight_[d].count.load(std::memory_order_relaxed));
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
  // A destination's in-flight count, written on every Pick and every release, has a cache line of
  // its own; what is only read on the request path (health, external load) is packed apart from
  // it, so that checking whether a candidate is up does not pull a line other threads write.
  struct alignas(64) InFlightCount {
    std::atomic<int64_t> count{0};
  };
  struct Health {
    std::atomic<double> external{0.0};
    std::atomic<bool> up{true};
  };

  // One thread's (or, for the shared shard, many threads') reader counts and stats counters, on
  // cache lines of their own.
  struct alignas(64) Shard {
    std::array<std::atomic<uint32_t>, kTableSlots> readers{};  // readers in each table slot
    alignas(64) std::atomic<uint64_t> planned{0};
    std::array<std::atomic<uint64_t>, kReasonCount> fallback{};  // by Reason
    std::atomic<uint64_t> no_destination{0};
  };

  class Loads final : public LoadView {
   public:
    explicit Loads(const Router& router) : router_(router) {}
    uint32_t size() const override { return router_.options_.destination_count; }
    double Load(uint32_t d) const override {
      return static_cast<double>(router_.in_flight_[d].count.load(std::memory_order_relaxed)) +
             router_.options_.external_load_weight *
                 router_.health_[d].external.load(std::memory_order_relaxed);
    }
    bool Up(uint32_t d) const override {
      return router_.health_[d].up.load(std::memory_order_relaxed);
    }

   private:
    const Router& router_;
  };

  // Holds the current table slot for the duration of one lookup (see the header comment).
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

  // Whether any thread is reading table slot `s` (Install only; see the header comment).
  bool HasReadersLocked(int s) const {
    for (const Shard& shard : shards_) {
      if (shard.readers[s].load(std::memory_order_seq_cst) != 0) return true;
    }
    return false;
  }

  bool IsStale(Time now) const {
    if (options_.table_ttl == Duration::zero()) return false;
    const Time refreshed(Duration(refreshed_at_.load(std::memory_order_relaxed)));
    return now - refreshed > options_.table_ttl;
  }

  Decision Fallback(const LoadView& loads, Reason reason) {
    return {PowerOfTwoChoices(loads, random_), false, reason};
  }

  Decision DecideUncounted(uint64_t key_id, const LoadView& loads, Time now, Shard& shard,
                           bool owned) {
    const ReadGuard guard(*this, shard, owned);
    const RoutingTable* table = guard.table();
    if (table == nullptr) return Fallback(loads, Reason::kNoTable);
    if (IsStale(now)) return Fallback(loads, Reason::kStale);
    const DestinationSet set = table->Find(key_id);
    if (set.empty()) return Fallback(loads, Reason::kNotAdmitted);
    // Least-loaded up member; ties go to the lowest index, which keeps a lightly loaded key on
    // one warm destination. Loads are read only when two members compete (most sets have one).
    uint32_t best = kNoDestination;
    double best_load = 0;
    bool best_load_read = false;
    for (uint32_t d : set) {
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
    if (best == kNoDestination) return Fallback(loads, Reason::kSetDown);
    return {best, true, Reason::kPlanned};
  }

  Status CheckInstallableLocked(const RoutingTable* table) const {
    if (table == nullptr) return Status::Error("table is null");
    if (table->destination_count() != options_.destination_count) {
      return Status::Error(
          "table " + ToString(table->version()) + " has destination_count " +
          std::to_string(table->destination_count()) + ", the router routes over " +
          std::to_string(options_.destination_count) + " destinations (unknown destination)");
    }
    if (current_.load(std::memory_order_seq_cst) >= 0 && !(installed_version_ < table->version())) {
      return Status::Error("version regression: table " + ToString(table->version()) +
                           " is not newer than the installed " + ToString(installed_version_));
    }
    return Status::Ok();
  }

  Status SetUp(uint32_t destination, bool up) {
    if (destination >= options_.destination_count) return UnknownDestination(destination);
    health_[destination].up.store(up, std::memory_order_relaxed);
    return Status::Ok();
  }

  Status UnknownDestination(uint32_t destination) const {
    return Status::Error("unknown destination " + std::to_string(destination) +
                         " (destination_count = " + std::to_string(options_.destination_count) +
                         ")");
  }

  const RouterOptions options_;
  Random& random_;
  std::unique_ptr<InFlightCount[]> in_flight_;
  std::unique_ptr<Health[]> health_;
  Loads loads_;

  // tables_[s] is written only by Install, while slot s is not current and has no reader.
  std::array<std::shared_ptr<const RoutingTable>, kTableSlots> tables_;
  std::atomic<int> current_{-1};  // index into tables_, -1 before the first Install
  std::atomic<Duration::rep> installed_at_{0};
  std::atomic<Duration::rep> refreshed_at_{0};

  std::array<Shard, router_internal::kShards> shards_;

  mutable std::mutex install_mu_;   // serialises Install; never taken by Pick
  TableVersion installed_version_;  // guarded by install_mu_
  uint64_t installs_ = 0;           // guarded by install_mu_
  uint64_t rejected_installs_ = 0;  // guarded by install_mu_
  std::string last_rejection_;      // guarded by install_mu_
};

}  // namespace cacheroute::dataplane
