// The routing policies behind one interface, so the fleet simulator, the replay tool and gateways
// call them the same way: the six the paper compares (the CacheRoute paper, §2 and §3.1) and two
// built from the published rules of the routers serving teams run today (docs/dispatch.md,
// "Modern baselines"):
//
//   FlatLbPolicy      power of two choices, no affinity (flat-LB)
//   StickyPolicy      consistent hashing on the key (pure affinity)
//   ChwblPolicy       consistent hashing with bounded loads
//   DualMapPolicy     two hash candidates, prefer the cache-warm one unless its queue is long
//   PreblePolicy      per-key history, re-route when the remembered destination is overloaded
//   DynamoKvPolicy    NVIDIA Dynamo's KV router, approximate mode: least prefill + decode blocks
//   LlmdPolicy        llm-d's default scorers: prefix 3, queue 2, KV utilisation 2
//   CacheRoutePolicy  the planned table T(b) through a Router (paper §3.1, and docs/dispatch.md)
//
// Invariants: Pick and Route are thread-safe, allocation-free and never throw; they never return a
// destination that is outside the LoadView or down, and return kNoDestination only when none is
// up. Policies read load only through the LoadView they are given (they count nothing in flight;
// Router::Pick does that for CacheRoute). The paper's policies are lock-free: DualMap and Preble
// keep their state in a fixed-size KeyHistory of atomics. The two modern baselines keep an
// ApproxPrefixIndex (prefix_index.h) and serialise their picks with a mutex, as the published
// routers serialise decisions through their indexer.
//
// Usage:
//   SeededRandom random(7);
//   std::unique_ptr<Policy> policy = std::make_unique<ChwblPolicy>(/*destinations=*/30, random);
//   Decision d = policy->Pick(KeyId("tenant-3"), router.loads());
//   Decision e = policy->Route({.key_id = k, .prompt_tokens = 1200, .block_hashes = hashes},
//                              router.loads());   // the whole request, for the prefix-aware ones
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/dispatch.h"
#include "cacheroute/dataplane/key_id.h"
#include "cacheroute/dataplane/prefix_index.h"
#include "cacheroute/dataplane/random.h"
#include "cacheroute/dataplane/router.h"

namespace cacheroute::dataplane {

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string_view name() const = 0;
  virtual Decision Pick(uint64_t key_id, const LoadView& loads) = 0;
  // The whole request (its prompt length and block hashes); the policies that need only the key
  // route it by Pick.
  virtual Decision Route(const PickRequest& request, const LoadView& loads) {
    return Pick(request.key_id, loads);
  }
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

// NVIDIA Dynamo's KV router in approximate mode (ai-dynamo/dynamo, lib/llm/src/kv_router/ and
// docs/components/router/): for every up destination d,
//   cost(d) = overlap_score_weight · (active prefill tokens(d) + new tokens(d)) / block
//             + active blocks(d) + the request's blocks,
// new tokens(d) = prompt − overlap(d) · block, overlap(d) the leading blocks of the request this
// router sent to d within the last `ttl` (its approximate indexer, ApproxPrefixIndex over one pool
// of `index_blocks`); the lowest cost wins (temperature 0), ties to the destination holding the
// fewest recorded blocks, then a random one. The decision is recorded at once, so that siblings
// land together before anything is served. Active prefill tokens are the LoadView's queued prefill
// (what this policy predicted for requests without a first token), active blocks its in-flight
// prompt tokens / block (without Dynamo's de-duplication of shared blocks).
struct DynamoKvOptions {
  double overlap_score_weight = 1.0;  // kv_overlap_score_weight
  uint32_t block_tokens = 16;         // kv_cache_block_size: vLLM's block
  uint32_t index_blocks = 1u << 20;   // the approximate indexer's capacity
  Duration ttl = std::chrono::seconds(120);
};

class DynamoKvPolicy final : public Policy {
 public:
  DynamoKvPolicy(uint32_t destinations, Random& random, const Clock& clock,
                 DynamoKvOptions options = {})
      : random_(random),
        clock_(clock),
        options_(options),
        index_({.destinations = destinations,
                .total_blocks = options.index_blocks,
                .ttl = options.ttl}),
        overlap_(destinations, 0) {}
  std::string_view name() const override { return "dynamo-kv"; }
  Decision Pick(uint64_t key_id, const LoadView& loads) override {
    return Route({.key_id = key_id}, loads);
  }
  Decision Route(const PickRequest& request, const LoadView& loads) override {
    const std::lock_guard<std::mutex> lock(mu_);
    const Time now = clock_.Now();
    const uint32_t n = std::min<uint32_t>(loads.size(), index_.destinations());
    const double block = options_.block_tokens;
    const double prompt = request.prompt_tokens > 0
                              ? request.prompt_tokens
                              : std::max<double>(1, request.block_hashes.size() * block);
    index_.Overlap(request.block_hashes, now, overlap_);
    const double request_blocks = std::ceil(prompt / block);
    uint32_t best = kNoDestination;
    double best_cost = 0, best_new = prompt;
    const uint32_t start = n > 0 ? UniformIndex(random_, n) : 0;
    for (uint32_t i = 0; i < n; ++i) {
      const uint32_t d = (start + i) % n;
      if (!loads.Up(d)) continue;
      double queued, active;
      if (loads.HasWork()) {
        const DestinationWork w = loads.Work(d);
        queued = w.queued_prefill_tokens;
        active = w.active_tokens;
      } else {
        queued = active = loads.Load(d) * prompt;
      }
      const double new_tokens = std::max(0.0, prompt - overlap_[d] * block);
      const double cost = options_.overlap_score_weight * (queued + new_tokens) / block +
                          active / block + request_blocks;
      if (best == kNoDestination || cost < best_cost ||
          (cost == best_cost && index_.stored(d) < index_.stored(best))) {
        best = d;
        best_cost = cost;
        best_new = new_tokens;
      }
    }
    if (best == kNoDestination) return {PowerOfTwoChoices(loads, random_), false, Reason::kPolicy};
    index_.Record(request.block_hashes, best, now);
    Decision decision{best, false, Reason::kPolicy};
    decision.expected_uncached_tokens = static_cast<uint32_t>(std::max(1.0, best_new));
    if (best_new < prompt) decision.expected = CacheExpectation::kPrefix;
    return decision;
  }

 private:
  Random& random_;
  const Clock& clock_;
  const DynamoKvOptions options_;
  std::mutex mu_;
  ApproxPrefixIndex index_;        // guarded by mu_
  std::vector<uint32_t> overlap_;  // guarded by mu_
};

// The llm-d router's default scoring profile (llm-d/llm-d-inference-scheduler, with the
// kubernetes-sigs/gateway-api-inference-extension scorers): for every up destination,
//   score = prefix_weight · matched blocks / request blocks
//         + queue_weight · (max waiting − waiting) / (max waiting − min waiting)   (1 if all equal)
//         + kv_weight · (1 − KV-cache usage),
// the highest wins (ties: a random one). Waiting and KV usage are the engines' scraped metrics
// (LoadView::Scraped). The prefix scorer's index: the first max_blocks 16-token blocks of each
// request, recorded at the chosen server after the pick, in an LRU of lru_blocks_per_server blocks
// per server (ApproxPrefixIndex).
struct LlmdOptions {
  double prefix_weight = 3.0;
  double queue_weight = 2.0;
  double kv_weight = 2.0;
  uint32_t block_tokens = 16;
  uint32_t max_blocks = 256;
  uint32_t lru_blocks_per_server = 31250;
};

class LlmdPolicy final : public Policy {
 public:
  LlmdPolicy(uint32_t destinations, Random& random, const Clock& clock, LlmdOptions options = {})
      : random_(random),
        clock_(clock),
        options_(options),
        index_({.destinations = destinations,
                .blocks_per_destination = options.lru_blocks_per_server}),
        matched_(destinations, 0) {}
  std::string_view name() const override { return "llm-d"; }
  Decision Pick(uint64_t key_id, const LoadView& loads) override {
    return Route({.key_id = key_id}, loads);
  }
  Decision Route(const PickRequest& request, const LoadView& loads) override {
    const std::lock_guard<std::mutex> lock(mu_);
    const Time now = clock_.Now();
    const uint32_t n = std::min<uint32_t>(loads.size(), index_.destinations());
    const std::span<const uint64_t> hashes = request.block_hashes.first(
        std::min<size_t>(request.block_hashes.size(), options_.max_blocks));
    index_.Overlap(hashes, now, matched_);
    double min_waiting = 0, max_waiting = 0;
    bool any = false;
    for (uint32_t d = 0; d < n; ++d) {
      if (!loads.Up(d)) continue;
      const double w = loads.Scraped(d).waiting;
      min_waiting = any ? std::min(min_waiting, w) : w;
      max_waiting = any ? std::max(max_waiting, w) : w;
      any = true;
    }
    uint32_t best = kNoDestination;
    double best_score = 0;
    uint32_t ties = 0;
    for (uint32_t d = 0; d < n; ++d) {
      if (!loads.Up(d)) continue;
      const EngineMetrics m = loads.Scraped(d);
      const double prefix = hashes.empty() ? 0.0 : static_cast<double>(matched_[d]) / hashes.size();
      const double queue = max_waiting == min_waiting
                               ? 1.0
                               : (max_waiting - m.waiting) / (max_waiting - min_waiting);
      const double kv = 1.0 - std::clamp(m.kv_usage, 0.0, 1.0);
      const double score =
          options_.prefix_weight * prefix + options_.queue_weight * queue + options_.kv_weight * kv;
      if (best == kNoDestination || score > best_score) {
        best = d;
        best_score = score;
        ties = 1;
      } else if (score == best_score && UniformIndex(random_, ++ties) == 0) {
        best = d;  // reservoir sampling: each tied destination equally likely
      }
    }
    if (best == kNoDestination) return {PowerOfTwoChoices(loads, random_), false, Reason::kPolicy};
    index_.Record(hashes, best, now);
    Decision decision{best, false, Reason::kPolicy};
    const double prompt = request.prompt_tokens > 0 ? request.prompt_tokens : 1.0;
    const double cached =
        std::min(prompt - 1, static_cast<double>(matched_[best]) * options_.block_tokens);
    decision.expected_uncached_tokens = static_cast<uint32_t>(std::max(1.0, prompt - cached));
    if (matched_[best] > 0) decision.expected = CacheExpectation::kPrefix;
    return decision;
  }

 private:
  Random& random_;
  const Clock& clock_;
  const LlmdOptions options_;
  std::mutex mu_;
  ApproxPrefixIndex index_;        // guarded by mu_
  std::vector<uint32_t> matched_;  // guarded by mu_
};

// CacheRoute (paper §3.1, extended): the planned table T(b) and the dispatch rule of a Router
// (RouterOptions::dispatch; docs/dispatch.md). The Router's TTL and per-key memory need the time,
// which the Policy interface does not pass: it comes from `clock`. Gateways that track in-flight
// requests call Router::Pick directly; this adapter serves callers that own their load view (the
// simulator, the replay tool).
class CacheRoutePolicy final : public Policy {
 public:
  CacheRoutePolicy(Router& router, const Clock& clock) : router_(router), clock_(clock) {}
  std::string_view name() const override { return "cacheroute"; }
  Decision Pick(uint64_t key_id, const LoadView& loads) override {
    return router_.Decide(key_id, loads, clock_.Now());
  }
  Decision Route(const PickRequest& request, const LoadView& loads) override {
    return router_.Decide(request, loads, clock_.Now());
  }

 private:
  Router& router_;
  const Clock& clock_;
};

}  // namespace cacheroute::dataplane
