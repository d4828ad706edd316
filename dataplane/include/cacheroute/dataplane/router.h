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
// kTableSlots slots, each a shared_ptr plus an atomic reader count, and an atomic index of the
// current slot. A reader increments the current slot's count, re-reads the index, and backs off
// if it moved; the writer fills a slot that is neither current nor read, then publishes its index.
// Both sides use sequentially consistent operations, so either the reader sees the new index or
// the writer sees the reader's count (the Dekker pattern): a reader never reads a slot the writer
// is overwriting. Readers never block and retry only when the writer made progress, so the read
// side is lock-free; only the writer may wait (for a reader to leave an old slot, a few
// nanoseconds of lookup). Old tables are destroyed on the writer's thread, never on a request.
//
// Load signal. load(d) = in_flight(d) + external_load_weight · external(d), where in_flight(d) is
// this Router's count of outstanding requests (InFlight tokens alive) and external(d) the last
// value given to SetLoad(d) (e.g. a shared queue-depth report, so gateways that each see only
// their own traffic do not drift; shared/design/PROTOCOL.md, "Load signals"). Both are atomics.
//
// Fallback. With no table, with a table not refreshed within table_ttl (Install or Refresh), for
// an unadmitted key, or for an admitted key whose whole set is down, the request uses power of two
// choices over up destinations. Stats() counts each reason separately.
//
// Invariants: Pick never throws, allocates or locks; an InFlight token decrements exactly the
// counter it incremented, once; tokens must not outlive their Router.
//
// Usage:
//   SeededRandom random(1);
//   Router router({.destination_count = 30, .table_ttl = std::chrono::seconds(60)}, random);
//   Status s = router.Install(std::make_shared<const RoutingTable>(*std::move(table)), now);
//   InFlight request = router.Pick(KeyId("tenant-7"), now);   // keep it until the response ends
//   Send(request.destination());                               // its destructor decrements
#pragma once

#include <array>
#include <atomic>
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
#include "cacheroute/dataplane/routing_table.h"
#include "cacheroute/dataplane/status.h"

namespace cacheroute::dataplane {

struct RouterOptions {
  uint32_t destination_count = 0;
  // A table not installed or refreshed within this long is treated as absent. Zero: never stale.
  Duration table_ttl = Duration::zero();
  // Weight of the externally reported load (SetLoad) against local in-flight requests.
  double external_load_weight = 1.0;
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
        destinations_(new PerDestination[options.destination_count]),
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
        if (s != current && slots_[s].readers.load(std::memory_order_seq_cst) == 0) {
          target = s;
          break;
        }
      }
      // Every other slot still has a reader that entered before its table was replaced; each
      // leaves after one lookup.
      if (target < 0) std::this_thread::yield();
    }
    slots_[target].table = std::move(table);  // drops an old table here, off the request path
    installed_version_ = slots_[target].table->version();
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
    const Decision decision = Decide(key_id, loads_, now);
    if (decision.destination == kNoDestination) return InFlight({}, decision);
    std::atomic<int64_t>* counter = &destinations_[decision.destination].in_flight;
    counter->fetch_add(1, std::memory_order_relaxed);
    return InFlight(counter, decision);
  }

  // The routing decision alone, against any LoadView (CacheRoutePolicy, the simulator); counts
  // stats but tracks nothing in flight.
  Decision Decide(uint64_t key_id, const LoadView& loads, Time now) {
    Decision decision = DecideUncounted(key_id, loads, now);
    if (decision.planned) {
      planned_.fetch_add(1, std::memory_order_relaxed);
    } else {
      fallback_[static_cast<int>(decision.reason)].fetch_add(1, std::memory_order_relaxed);
    }
    if (decision.destination == kNoDestination) {
      no_destination_.fetch_add(1, std::memory_order_relaxed);
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
    destinations_[destination].external.store(value, std::memory_order_relaxed);
    return Status::Ok();
  }

  // This Router's blended loads and health, as policies see them.
  const LoadView& loads() const { return loads_; }

  // The installed table (nullptr before the first Install). Control path: takes the install lock.
  std::shared_ptr<const RoutingTable> table() const {
    std::lock_guard<std::mutex> lock(install_mu_);
    const int current = current_.load(std::memory_order_seq_cst);
    return current < 0 ? nullptr : slots_[current].table;
  }

  // A snapshot of the counters. Reads only atomics on the request side; takes the install lock,
  // which request threads never take.
  RouterStats Stats(Time now) const {
    RouterStats stats;
    stats.planned = planned_.load(std::memory_order_relaxed);
    for (int r = 0; r < kReasonCount; ++r) {
      stats.fallback[r] = fallback_[r].load(std::memory_order_relaxed);
      stats.fallback_total += stats.fallback[r];
    }
    stats.no_destination = no_destination_.load(std::memory_order_relaxed);
    for (uint32_t d = 0; d < options_.destination_count; ++d) {
      stats.in_flight.push_back(destinations_[d].in_flight.load(std::memory_order_relaxed));
      stats.up.push_back(destinations_[d].up.load(std::memory_order_relaxed));
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
  struct alignas(64) PerDestination {
    std::atomic<int64_t> in_flight{0};
    std::atomic<double> external{0.0};
    std::atomic<bool> up{true};
  };

  struct alignas(64) TableSlot {
    // Written only by Install, while this slot is not current and has no reader.
    std::shared_ptr<const RoutingTable> table;
    mutable std::atomic<uint32_t> readers{0};
  };

  class Loads final : public LoadView {
   public:
    explicit Loads(const Router& router) : router_(router) {}
    uint32_t size() const override { return router_.options_.destination_count; }
    double Load(uint32_t d) const override {
      const PerDestination& p = router_.destinations_[d];
      return static_cast<double>(p.in_flight.load(std::memory_order_relaxed)) +
             router_.options_.external_load_weight * p.external.load(std::memory_order_relaxed);
    }
    bool Up(uint32_t d) const override {
      return router_.destinations_[d].up.load(std::memory_order_relaxed);
    }

   private:
    const Router& router_;
  };

  // Holds the current table slot for the duration of one lookup (see the header comment).
  class ReadGuard {
   public:
    explicit ReadGuard(const Router& router) {
      for (;;) {
        const int s = router.current_.load(std::memory_order_seq_cst);
        if (s < 0) return;
        const TableSlot& slot = router.slots_[s];
        slot.readers.fetch_add(1, std::memory_order_seq_cst);
        if (router.current_.load(std::memory_order_seq_cst) == s) {
          slot_ = &slot;
          return;
        }
        slot.readers.fetch_sub(1, std::memory_order_seq_cst);  // replaced meanwhile; retry
      }
    }
    ~ReadGuard() {
      if (slot_ != nullptr) slot_->readers.fetch_sub(1, std::memory_order_seq_cst);
    }
    ReadGuard(const ReadGuard&) = delete;
    ReadGuard& operator=(const ReadGuard&) = delete;
    const RoutingTable* table() const { return slot_ == nullptr ? nullptr : slot_->table.get(); }

   private:
    const TableSlot* slot_ = nullptr;
  };

  bool IsStale(Time now) const {
    if (options_.table_ttl == Duration::zero()) return false;
    const Time refreshed(Duration(refreshed_at_.load(std::memory_order_relaxed)));
    return now - refreshed > options_.table_ttl;
  }

  Decision Fallback(const LoadView& loads, Reason reason) {
    return {PowerOfTwoChoices(loads, random_), false, reason};
  }

  Decision DecideUncounted(uint64_t key_id, const LoadView& loads, Time now) {
    const ReadGuard guard(*this);
    const RoutingTable* table = guard.table();
    if (table == nullptr) return Fallback(loads, Reason::kNoTable);
    if (IsStale(now)) return Fallback(loads, Reason::kStale);
    const DestinationSet set = table->Find(key_id);
    if (set.empty()) return Fallback(loads, Reason::kNotAdmitted);
    // Least-loaded up member; ties go to the lowest index, which keeps a lightly loaded key on
    // one warm destination.
    uint32_t best = kNoDestination;
    double best_load = 0;
    for (uint32_t d : set) {
      if (!Usable(loads, d)) continue;
      const double load = loads.Load(d);
      if (best == kNoDestination || load < best_load) {
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
    destinations_[destination].up.store(up, std::memory_order_relaxed);
    return Status::Ok();
  }

  Status UnknownDestination(uint32_t destination) const {
    return Status::Error("unknown destination " + std::to_string(destination) +
                         " (destination_count = " + std::to_string(options_.destination_count) +
                         ")");
  }

  const RouterOptions options_;
  Random& random_;
  std::unique_ptr<PerDestination[]> destinations_;
  Loads loads_;

  std::array<TableSlot, kTableSlots> slots_;
  std::atomic<int> current_{-1};  // index into slots_, -1 before the first Install
  std::atomic<Duration::rep> installed_at_{0};
  std::atomic<Duration::rep> refreshed_at_{0};

  alignas(64) std::atomic<uint64_t> planned_{0};
  std::array<std::atomic<uint64_t>, kReasonCount> fallback_{};
  std::atomic<uint64_t> no_destination_{0};

  mutable std::mutex install_mu_;   // serialises Install; never taken by Pick
  TableVersion installed_version_;  // guarded by install_mu_
  uint64_t installs_ = 0;           // guarded by install_mu_
  uint64_t rejected_installs_ = 0;  // guarded by install_mu_
  std::string last_rejection_;      // guarded by install_mu_
};

}  // namespace cacheroute::dataplane
