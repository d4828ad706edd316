// The six routing policies the paper compares (the CacheRoute paper, §2 and §3.1) behind
// one interface, so the fleet simulator and gateways call them the same way:
//
//   FlatLbPolicy      power of two choices, no affinity (flat-LB)
//   StickyPolicy      consistent hashing on the key (pure affinity)
//   ChwblPolicy       consistent hashing with bounded loads
//   DualMapPolicy     two hash candidates, prefer the cache-warm one unless its queue is long
//   PreblePolicy      per-key history, re-route when the remembered destination is overloaded
//   CacheRoutePolicy  the planned table T(b) through a Router (paper §3.1)
//
// Invariants: Pick is thread-safe, lock-free, allocation-free and never throws; it never returns
// a destination that is outside the LoadView or down, and returns kNoDestination only when none is
// up. Policies read load only through the LoadView they are given (they count nothing in flight;
// Router::Pick does that for CacheRoute). Stateful policies (DualMap, Preble) keep their state in
// a fixed-size KeyHistory of atomics.
//
// Usage:
//   SeededRandom random(7);
//   std::unique_ptr<Policy> policy = std::make_unique<ChwblPolicy>(/*destinations=*/30, random);
//   Decision d = policy->Pick(KeyId("tenant-3"), router.loads());
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/dispatch.h"
#include "cacheroute/dataplane/key_id.h"
#include "cacheroute/dataplane/random.h"
#include "cacheroute/dataplane/router.h"

namespace cacheroute::dataplane {

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string_view name() const = 0;
  virtual Decision Pick(uint64_t key_id, const LoadView& loads) = 0;
};

// A consistent-hash ring (Karger et al. 1997) with `virtual_nodes` points per destination. Key ids
// are already uniformly mixed, so a key's position on the ring is its id itself.
class HashRing {
 public:
  HashRing(uint32_t destinations, uint32_t virtual_nodes) {
    points_.reserve(static_cast<size_t>(destinations) * virtual_nodes);
    for (uint32_t d = 0; d < destinations; ++d) {
      for (uint32_t v = 0; v < virtual_nodes; ++v) {
        points_.push_back({Mix64((static_cast<uint64_t>(d) << 32 | v) ^ 0x5eed5eed5eed5eedULL), d});
      }
    }
    std::sort(points_.begin(), points_.end());
  }

  size_t size() const { return points_.size(); }
  // The index of the first point at or after `key_id`, wrapping around.
  size_t Start(uint64_t key_id) const {
    auto it = std::lower_bound(points_.begin(), points_.end(), Point{key_id, 0});
    return it == points_.end() ? 0 : static_cast<size_t>(it - points_.begin());
  }
  uint32_t DestinationAt(size_t index) const { return points_[index % points_.size()].destination; }

 private:
  struct Point {
    uint64_t position;
    uint32_t destination;
    friend auto operator<=>(const Point&, const Point&) = default;
  };
  std::vector<Point> points_;
};

// Flat-LB: power of two choices over up destinations (Mitzenmacher, Richa, Sitaraman 2001). The
// paper's fallback for unadmitted traffic and its no-affinity baseline.
class FlatLbPolicy final : public Policy {
 public:
  explicit FlatLbPolicy(Random& random) : random_(random) {}
  std::string_view name() const override { return "flat-lb"; }
  Decision Pick(uint64_t /*key_id*/, const LoadView& loads) override {
    return {PowerOfTwoChoices(loads, random_), false, Reason::kPolicy};
  }

 private:
  Random& random_;
};

// Sticky: consistent hashing on the key over a ring with virtual nodes (Karger et al. 1997), with
// no regard for load: every request of a key goes to one destination, so its prefix stays warm and
// the busiest keys become hot spots (the paper's "pure affinity", §2). A down destination's keys
// move to the next up destination on the ring; the others stay put.
class StickyPolicy final : public Policy {
 public:
  explicit StickyPolicy(uint32_t destinations, uint32_t virtual_nodes = 160)
      : ring_(destinations, virtual_nodes) {}
  std::string_view name() const override { return "sticky"; }
  Decision Pick(uint64_t key_id, const LoadView& loads) override {
    const size_t start = ring_.Start(key_id);
    for (size_t i = 0; i < ring_.size(); ++i) {
      const uint32_t d = ring_.DestinationAt(start + i);
      if (Usable(loads, d)) return {d, false, Reason::kPolicy};
    }
    return {kNoDestination, false, Reason::kPolicy};
  }

 private:
  HashRing ring_;
};

// CHWBL: consistent hashing with bounded loads (Mirrokni, Thorup, Zadimoghaddam, SODA 2018). Each
// up destination may hold at most capacity = ceil((1 + ε) · (total load + 1) / up destinations)
// (the +1 counts the request being placed), computed in floating point; the key walks the ring from
// its position and takes the first up destination whose load is below capacity. Some such
// destination always exists, and with integer loads none ends above capacity. ε = 0.25 as in the
// paper's baseline.
class ChwblPolicy final : public Policy {
 public:
  ChwblPolicy(uint32_t destinations, Random& random, double epsilon = 0.25,
              uint32_t virtual_nodes = 160)
      : ring_(destinations, virtual_nodes), random_(random), epsilon_(epsilon) {}
  std::string_view name() const override { return "chwbl"; }

  double Capacity(const LoadView& loads) const {
    const UpLoad sum = SumUpLoad(loads);
    return sum.up == 0 ? 0.0 : std::ceil((1.0 + epsilon_) * (sum.total + 1.0) / sum.up);
  }

  Decision Pick(uint64_t key_id, const LoadView& loads) override {
    const double capacity = Capacity(loads);
    const size_t start = ring_.Start(key_id);
    for (size_t i = 0; i < ring_.size(); ++i) {
      const uint32_t d = ring_.DestinationAt(start + i);
      if (Usable(loads, d) && loads.Load(d) < capacity) return {d, false, Reason::kPolicy};
    }
    // Only reachable with fractional loads (e.g. blended external reports) or none up.
    return {LeastLoaded(loads, random_), false, Reason::kPolicy};
  }

 private:
  HashRing ring_;
  Random& random_;
  const double epsilon_;
};

// DualMap-style: each key has two hash candidates (the power of two choices applied to affinity,
// after DualMap's dual-mapping of requests to servers). The cache-warm candidate, which is the
// key's last destination if it was one of the two and otherwise the first, is preferred unless its
// estimated queue (its load) exceeds `queue_bound`; then the lighter of the two wins. The choice
// is remembered, so a key that spilled stays on its new warm candidate.
class DualMapPolicy final : public Policy {
 public:
  DualMapPolicy(uint32_t destinations, Random& random, double queue_bound = 4.0,
                size_t history_log2 = 16)
      : destinations_(destinations),
        random_(random),
        queue_bound_(queue_bound),
        history_(history_log2) {}
  std::string_view name() const override { return "dualmap"; }

  std::pair<uint32_t, uint32_t> Candidates(uint64_t key_id) const {
    return HashedPair(key_id, destinations_);
  }

  Decision Pick(uint64_t key_id, const LoadView& loads) override {
    auto [first, second] = Candidates(key_id);
    const uint32_t last = history_.Get(key_id);
    uint32_t warm = first, other = second;
    if (last == second) std::swap(warm, other);
    uint32_t chosen;
    if (!Usable(loads, warm)) {
      chosen = Usable(loads, other) ? other : kNoDestination;
    } else if (loads.Load(warm) <= queue_bound_ || !Usable(loads, other)) {
      chosen = warm;
    } else {
      chosen = loads.Load(other) < loads.Load(warm) ? other : warm;
    }
    if (chosen == kNoDestination) {
      // Both candidates down: the fleet at large, and nothing to remember.
      return {PowerOfTwoChoices(loads, random_), false, Reason::kPolicy};
    }
    if (chosen != last) history_.Put(key_id, chosen);
    return {chosen, false, Reason::kPolicy};
  }

 private:
  const uint32_t destinations_;
  Random& random_;
  const double queue_bound_;
  KeyHistory history_;
};

// Preble-style (Srivatsa et al., "Preble: Efficient Distributed Prompt Scheduling for LLM
// Serving", 2024): remember where each key went (a bounded KeyHistory); send it there again unless
// that destination is down or its load exceeds overload_factor (1.5) × the mean load of up
// destinations, else to the least-loaded destination; record the new choice. A key seen for the
// first time goes to the least-loaded destination.
class PreblePolicy final : public Policy {
 public:
  explicit PreblePolicy(Random& random, double overload_factor = 1.5, size_t history_log2 = 16)
      : random_(random), overload_factor_(overload_factor), history_(history_log2) {}
  std::string_view name() const override { return "preble"; }

  Decision Pick(uint64_t key_id, const LoadView& loads) override {
    const uint32_t last = history_.Get(key_id);
    if (Usable(loads, last) && loads.Load(last) <= overload_factor_ * MeanUpLoad(loads)) {
      return {last, false, Reason::kPolicy};
    }
    const uint32_t chosen = LeastLoaded(loads, random_);
    if (chosen != kNoDestination) history_.Put(key_id, chosen);
    return {chosen, false, Reason::kPolicy};
  }

 private:
  Random& random_;
  const double overload_factor_;
  KeyHistory history_;
};

// CacheRoute (paper §3.1): admitted keys go to the least-loaded member of their planned set T(b),
// everything else to power of two choices, as decided by a Router against its installed table.
// The Router's TTL needs the time, which the Policy interface does not pass: it comes from `clock`.
// Gateways that track in-flight requests call Router::Pick directly; this adapter serves callers
// that own their load view (the simulator).
class CacheRoutePolicy final : public Policy {
 public:
  CacheRoutePolicy(Router& router, const Clock& clock) : router_(router), clock_(clock) {}
  std::string_view name() const override { return "cacheroute"; }
  Decision Pick(uint64_t key_id, const LoadView& loads) override {
    return router_.Decide(key_id, loads, clock_.Now());
  }

 private:
  Router& router_;
  const Clock& clock_;
};

}  // namespace cacheroute::dataplane
