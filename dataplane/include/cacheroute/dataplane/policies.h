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
// up. Policies read load only through the LoadView they are given (Router::Pick counts in flight
// for CacheRoute), except DynamoKvPolicy, which, as Dynamo's router does, also counts the blocks of
// its own requests in flight: a caller holds the PolicyTicket of every decision (Policy::Ticket)
// until the request ends, as RequestLifecycle does. The paper's policies are lock-free: DualMap and
// Preble keep their state in a fixed-size KeyHistory of atomics. The two modern baselines keep an
// ApproxPrefixIndex (prefix_index.h) and serialise their picks with a mutex, as the published
// routers serialise decisions through their indexer; Dynamo's in-flight blocks are hash maps that
// grow with the requests in flight (amortised, not allocation-free).
//
// Usage:
//   SeededRandom random(7);
//   std::unique_ptr<Policy> policy = std::make_unique<ChwblPolicy>(/*destinations=*/30, random);
//   Decision d = policy->Pick(KeyId("tenant-3"), router.loads());
//   Decision e = policy->Route({.key_id = k, .prompt_tokens = 1200, .block_hashes = hashes},
//                              router.loads());   // the whole request, for the prefix-aware ones
//   PolicyTicket ticket = policy->Ticket(e);       // held until the request ends
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <span>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/dispatch.h"
#include "cacheroute/dataplane/key_id.h"
#include "cacheroute/dataplane/kv_event_index.h"
#include "cacheroute/dataplane/prefix_index.h"
#include "cacheroute/dataplane/random.h"
#include "cacheroute/dataplane/router.h"

namespace cacheroute::dataplane {

// Where a policy that counts its own requests in flight hears that one ended. Shared by the
// policy and its tickets, so that a request may end after its policy was rebuilt or destroyed.
class RequestEnds {
 public:
  virtual ~RequestEnds() = default;
  // `request` (Decision::policy_request) ended; unknown ids are ignored. Thread-safe.
  virtual void End(uint64_t request) = 0;
};

// One routed request's place in its policy's in-flight count: ends it once, at End() or when
// destroyed. Empty (ending nothing) for the policies that count nothing. Move-only.
class PolicyTicket {
 public:
  PolicyTicket() = default;
  PolicyTicket(std::shared_ptr<RequestEnds> ends, uint64_t request)
      : ends_(std::move(ends)), request_(request) {}
  PolicyTicket(PolicyTicket&& other) noexcept
      : ends_(std::move(other.ends_)), request_(other.request_) {}
  PolicyTicket& operator=(PolicyTicket&& other) noexcept {
    if (this != &other) {
      End();
      ends_ = std::move(other.ends_);
      request_ = other.request_;
    }
    return *this;
  }
  PolicyTicket(const PolicyTicket&) = delete;
  PolicyTicket& operator=(const PolicyTicket&) = delete;
  ~PolicyTicket() { End(); }

  void End() {
    if (ends_ != nullptr) std::exchange(ends_, nullptr)->End(request_);
  }

 private:
  std::shared_ptr<RequestEnds> ends_;
  uint64_t request_ = 0;
};

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
  // The ticket of a request this policy routed (`decision` is what Pick or Route returned): the
  // caller holds it until the request ends (its response finished, failed or was abandoned).
  // Empty for the policies that count nothing in flight.
  virtual PolicyTicket Ticket(const Decision& /*decision*/) { return {}; }
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

// Dynamo's ActiveSequences (ai-dynamo/dynamo, lib/llm/src/kv_router/, sequence.rs): per
// destination, the blocks of the requests a router has in flight there, a block that several share
// counted once. DynamoKvPolicy adds a request at its pick; its ticket ends it (RequestEnds::End);
// a request never ended leaves after `expiry` (Dynamo's forced expiry of stale requests). Holds
// the policy's lock (mu()) for the *Locked calls.
class DynamoActiveBlocks final : public RequestEnds {
 public:
  DynamoActiveBlocks(uint32_t destinations, Duration expiry)
      : expiry_(expiry), blocks_(destinations), anonymous_(destinations, 0) {}

  std::mutex& mu() { return mu_; }

  // The distinct blocks in flight at `d`.
  double ActiveLocked(uint32_t d) const {
    return static_cast<double>(blocks_[d].size()) + static_cast<double>(anonymous_[d]);
  }
  // How many of the leading blocks of `hashes` are in flight at `d`. Block hashes are chained (a
  // hash stands for its whole prefix), so what a request shares with the requests in flight at d
  // is a prefix of its blocks, found by binary search.
  size_t SharedLocked(std::span<const uint64_t> hashes, uint32_t d) const {
    const std::unordered_map<uint64_t, uint32_t>& active = blocks_[d];
    // Most destinations share nothing, or all, with a request: one lookup each.
    if (hashes.empty() || !active.contains(hashes.front())) return 0;
    if (active.contains(hashes.back())) return hashes.size();
    size_t lo = 1, hi = hashes.size() - 1;
    while (lo < hi) {
      const size_t mid = lo + (hi - lo) / 2;
      if (active.contains(hashes[mid])) {
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    return lo;
  }
  // Counts a request at `d`: its block hashes, or, without hashes, `anonymous` blocks shared with
  // nothing. Returns its id (never 0).
  uint64_t AddLocked(std::span<const uint64_t> hashes, uint32_t anonymous, uint32_t d, Time now) {
    const uint64_t id = next_id_++;
    for (uint64_t h : hashes) ++blocks_[d][h];
    anonymous_[d] += anonymous;
    requests_.emplace(id,
                      Request{d, anonymous, std::vector<uint64_t>(hashes.begin(), hashes.end())});
    added_.push_back({now, id});
    return id;
  }
  // Ends the requests added more than `expiry` before `now` that are still counted.
  void ExpireLocked(Time now) {
    while (!added_.empty() && now - added_.front().first > expiry_) {
      EndLocked(added_.front().second);
      added_.pop_front();
    }
  }
  size_t InFlightLocked() const { return requests_.size(); }

  void End(uint64_t request) override {
    const std::lock_guard<std::mutex> lock(mu_);
    EndLocked(request);
  }

 private:
  struct Request {
    uint32_t destination;
    uint32_t anonymous;
    std::vector<uint64_t> blocks;
  };

  void EndLocked(uint64_t id) {
    auto it = requests_.find(id);
    if (it == requests_.end()) return;
    std::unordered_map<uint64_t, uint32_t>& active = blocks_[it->second.destination];
    for (uint64_t h : it->second.blocks) {
      auto block = active.find(h);
      if (block != active.end() && --block->second == 0) active.erase(block);
    }
    anonymous_[it->second.destination] -= it->second.anonymous;
    requests_.erase(it);
  }

  const Duration expiry_;
  std::mutex mu_;
  std::vector<std::unordered_map<uint64_t, uint32_t>> blocks_;  // per destination: hash → requests
  std::vector<uint64_t> anonymous_;                             // per destination
  std::unordered_map<uint64_t, Request> requests_;
  std::deque<std::pair<Time, uint64_t>> added_;  // (when, id), oldest first
  uint64_t next_id_ = 1;
};

// NVIDIA Dynamo's KV router in approximate mode (ai-dynamo/dynamo, lib/llm/src/kv_router/: the
// scheduler's DefaultWorkerSelector, ActiveSequences, the approximate indexer; its docs "KV Cache
// Routing" and "Router Design"): for every up destination d,
//   cost(d) = overlap_score_weight · (active prefill tokens(d) + new tokens(d)) / block
//             + active blocks(d) + new blocks(d),
// new tokens(d) = prompt − overlap(d) · block, overlap(d) the leading blocks of the request this
// router sent to d within the last `ttl` (its approximate indexer, ApproxPrefixIndex over one pool
// of `index_blocks`); active prefill tokens(d) the LoadView's queued prefill (what this policy
// predicted for its requests without a first token); active blocks(d) the distinct blocks of the
// requests it has in flight at d (DynamoActiveBlocks: a shared prefix counts once, as Dynamo
// assumes KV reuse by default); new blocks(d) the request's blocks not already among them. With
// `temperature` 0 the lowest cost wins, ties to the destination holding the fewest recorded blocks,
// then a random one; above it, d is drawn with probability ∝ exp(−(cost(d) − min cost) / ((max
// cost − min cost) · temperature)) (uniform when all costs are equal), as Dynamo's
// router_temperature samples. The decision is recorded in the index at once, so that siblings land
// together before anything is served, and its blocks count as active until its ticket ends.
// Not modelled: router_queue_threshold (Dynamo holds a request at the router while every worker is
// over the threshold; a Policy picks at once, and a gateway has no queue to hold it in).
struct DynamoKvOptions {
  // kv_overlap_score_weight: Dynamo's default is 1; 4 is what the primary study's sweep chose
  // (docs/dispatch.md, "Baseline fidelity").
  double overlap_score_weight = 4.0;
  double temperature = 0;            // router_temperature; 0: the lowest cost
  uint32_t block_tokens = 16;        // kv_cache_block_size: vLLM's block
  uint32_t index_blocks = 1u << 20;  // the approximate indexer's capacity
  Duration ttl = std::chrono::seconds(120);
  Duration request_expiry = std::chrono::seconds(300);  // a request never ended stops counting
};

class DynamoKvPolicy final : public Policy {
 public:
  // With `events` (not owned; must outlive the policy) it is Dynamo's exact mode,
  // "dynamo-kv-exact": the overlap is the engines' residency from their KV events, and its own
  // routing records nothing. With `active`, the blocks in flight are that object's, shared with
  // other replicas' policies (Dynamo's router_replica_sync, with no delay); else its own.
  DynamoKvPolicy(uint32_t destinations, Random& random, const Clock& clock,
                 DynamoKvOptions options = {}, KvEventIndex* events = nullptr,
                 std::shared_ptr<DynamoActiveBlocks> active = nullptr)
      : random_(random),
        clock_(clock),
        options_(options),
        events_(events),
        active_(active != nullptr ? std::move(active)
                                  : std::make_shared<DynamoActiveBlocks>(destinations,
                                                                         options.request_expiry)),
        index_({.destinations = destinations,
                .total_blocks = options.index_blocks,
                .ttl = options.ttl}),
        overlap_(destinations, 0),
        cost_(destinations, 0) {}
  std::string_view name() const override {
    return events_ != nullptr ? "dynamo-kv-exact" : "dynamo-kv";
  }
  Decision Pick(uint64_t key_id, const LoadView& loads) override {
    return Route({.key_id = key_id}, loads);
  }
  Decision Route(const PickRequest& request, const LoadView& loads) override {
    const std::lock_guard<std::mutex> lock(active_->mu());
    const Time now = clock_.Now();
    active_->ExpireLocked(now);
    const uint32_t n = std::min<uint32_t>(loads.size(), index_.destinations());
    const double block = options_.block_tokens;
    const std::span<const uint64_t> hashes = request.block_hashes;
    const double prompt = request.prompt_tokens > 0 ? request.prompt_tokens
                                                    : std::max<double>(1, hashes.size() * block);
    if (events_ != nullptr) {
      events_->Overlap(hashes, now, overlap_);
    } else {
      index_.Overlap(hashes, now, overlap_);
    }
    // Without block hashes, its prompt's blocks, shared with nothing.
    const uint32_t anonymous =
        hashes.empty() ? static_cast<uint32_t>(std::ceil(prompt / block)) : 0;
    const double request_blocks = static_cast<double>(hashes.size()) + anonymous;
    uint32_t best = kNoDestination;
    double best_cost = 0, min_cost = 0, max_cost = 0;
    const uint32_t start = n > 0 ? UniformIndex(random_, n) : 0;
    for (uint32_t i = 0; i < n; ++i) {
      const uint32_t d = (start + i) % n;
      if (!loads.Up(d)) continue;
      const double queued =
          loads.HasWork() ? loads.Work(d).queued_prefill_tokens : loads.Load(d) * prompt;
      const double new_tokens = std::max(0.0, prompt - overlap_[d] * block);
      const double new_blocks =
          request_blocks - static_cast<double>(active_->SharedLocked(hashes, d));
      const double cost = options_.overlap_score_weight * (queued + new_tokens) / block +
                          active_->ActiveLocked(d) + new_blocks;
      cost_[d] = cost;
      if (best == kNoDestination) min_cost = max_cost = cost;
      min_cost = std::min(min_cost, cost);
      max_cost = std::max(max_cost, cost);
      if (best == kNoDestination || cost < best_cost ||
          (cost == best_cost && Stored(d) < Stored(best))) {
        best = d;
        best_cost = cost;
      }
    }
    if (best == kNoDestination) return {PowerOfTwoChoices(loads, random_), false, Reason::kPolicy};
    if (options_.temperature > 0 && max_cost > min_cost)
      best = Sample(loads, n, min_cost, max_cost);
    if (events_ == nullptr) index_.Record(hashes, best, now);
    const double best_new = std::max(0.0, prompt - overlap_[best] * block);
    Decision decision{best, false, Reason::kPolicy};
    decision.expected_uncached_tokens = static_cast<uint32_t>(std::max(1.0, best_new));
    if (best_new < prompt) decision.expected = CacheExpectation::kPrefix;
    decision.policy_request = active_->AddLocked(hashes, anonymous, best, now);
    return decision;
  }
  PolicyTicket Ticket(const Decision& decision) override {
    if (decision.policy_request == 0) return {};
    return PolicyTicket(active_, decision.policy_request);
  }

  // Requests counted in flight (for tests).
  size_t in_flight() {
    const std::lock_guard<std::mutex> lock(active_->mu());
    return active_->InFlightLocked();
  }

 private:
  // The blocks held at `d`, which breaks ties (the indexer's tree size).
  uint64_t Stored(uint32_t d) const {
    return events_ != nullptr ? events_->resident(d) : index_.stored(d);
  }

  // A destination drawn by the softmax of the negated, normalised costs of the up destinations.
  uint32_t Sample(const LoadView& loads, uint32_t n, double min_cost, double max_cost) {
    const double scale = 1.0 / ((max_cost - min_cost) * options_.temperature);
    double total = 0;
    for (uint32_t d = 0; d < n; ++d) {
      if (loads.Up(d)) total += std::exp(-(cost_[d] - min_cost) * scale);
    }
    double u = static_cast<double>(random_.Next() >> 11) * 0x1.0p-53 * total;
    uint32_t last = kNoDestination;
    for (uint32_t d = 0; d < n; ++d) {
      if (!loads.Up(d)) continue;
      last = d;
      u -= std::exp(-(cost_[d] - min_cost) * scale);
      if (u < 0) return d;
    }
    return last;  // rounding
  }

  Random& random_;
  const Clock& clock_;
  const DynamoKvOptions options_;
  KvEventIndex* const events_;  // exact mode; null: the approximate index
  // Its mutex serialises the picks; the index and the scratch below are guarded by it too.
  const std::shared_ptr<DynamoActiveBlocks> active_;
  ApproxPrefixIndex index_;
  std::vector<uint32_t> overlap_;
  std::vector<double> cost_;
};

// The llm-d router's default scoring profile (llm-d/llm-d-inference-scheduler, with the
// kubernetes-sigs/gateway-api-inference-extension scorers): for every up destination,
//   score = prefix_weight · matched blocks / request blocks
//         + queue_weight · (max waiting − waiting) / (max waiting − min waiting)   (1 if all equal)
//         + kv_weight · (1 − KV-cache usage),
// the highest wins (ties: a random one). Waiting and KV usage are the engines' scraped metrics
// (LoadView::Scraped). The prefix scorer's index: the first max_blocks 16-token blocks of each
// request, recorded at the chosen server after the pick, in an LRU per server (ApproxPrefixIndex)
// of as many blocks as the engines' KV cache holds (the largest reported, Scraped's
// kv_capacity_tokens / block_tokens), as the prefix plugin's autoTune sizes it from the engines'
// cache_config_info, and of lru_blocks_per_server while no engine reports it (or auto_tune is off).
// The index is rebuilt, empty, when the size it should have changes (the first report, usually).
struct LlmdOptions {
  double prefix_weight = 3.0;
  double queue_weight = 2.0;
  double kv_weight = 2.0;
  uint32_t block_tokens = 16;
  uint32_t max_blocks = 256;
  uint32_t lru_blocks_per_server = 31250;  // the plugin's default, for engines of unknown KV
  bool auto_tune = true;
};

// llm-d's pick over the up destinations below `n`, shared by its approximate and precise prefix
// scorers: the highest prefix_weight · prefix(d) + queue_weight · queue + kv_weight · (1 − KV
// usage), the queue score min-max normalised over [min_waiting, max_waiting] (1 when they are
// equal); ties broken uniformly (reservoir sampling, one draw per tie). kNoDestination when none
// is up.
template <typename PrefixScore>
uint32_t LlmdBest(const LoadView& loads, uint32_t n, const LlmdOptions& options, Random& random,
                  double min_waiting, double max_waiting, PrefixScore&& prefix_score) {
  uint32_t best = kNoDestination;
  double best_score = 0;
  uint32_t ties = 0;
  for (uint32_t d = 0; d < n; ++d) {
    if (!loads.Up(d)) continue;
    const EngineMetrics m = loads.Scraped(d);
    const double prefix = prefix_score(d);
    const double queue = max_waiting == min_waiting
                             ? 1.0
                             : (max_waiting - m.waiting) / (max_waiting - min_waiting);
    const double kv = 1.0 - std::clamp(m.kv_usage, 0.0, 1.0);
    const double score =
        options.prefix_weight * prefix + options.queue_weight * queue + options.kv_weight * kv;
    if (best == kNoDestination || score > best_score) {
      best = d;
      best_score = score;
      ties = 1;
    } else if (score == best_score && UniformIndex(random, ++ties) == 0) {
      best = d;  // reservoir sampling: each tied destination equally likely
    }
  }
  return best;
}

// llm-d's decision for `best`, whose prefix matched `matched` blocks of the request's.
inline Decision LlmdDecision(uint32_t best, uint32_t prompt_tokens, uint32_t matched,
                             const LlmdOptions& options) {
  Decision decision{best, false, Reason::kPolicy};
  const double prompt = prompt_tokens > 0 ? prompt_tokens : 1.0;
  const double cached = std::min(prompt - 1, static_cast<double>(matched) * options.block_tokens);
  decision.expected_uncached_tokens = static_cast<uint32_t>(std::max(1.0, prompt - cached));
  if (matched > 0) decision.expected = CacheExpectation::kPrefix;
  return decision;
}

class LlmdPolicy final : public Policy {
 public:
  LlmdPolicy(uint32_t destinations, Random& random, const Clock& clock, LlmdOptions options = {})
      : random_(random),
        clock_(clock),
        options_(options),
        index_blocks_(options.lru_blocks_per_server),
        index_(std::make_unique<ApproxPrefixIndex>(PrefixIndexOptions{
            .destinations = destinations, .blocks_per_destination = index_blocks_})),
        matched_(destinations, 0) {}
  std::string_view name() const override { return "llm-d"; }
  Decision Pick(uint64_t key_id, const LoadView& loads) override {
    return Route({.key_id = key_id}, loads);
  }
  Decision Route(const PickRequest& request, const LoadView& loads) override {
    const std::lock_guard<std::mutex> lock(mu_);
    const Time now = clock_.Now();
    const uint32_t n = std::min<uint32_t>(loads.size(), index_->destinations());
    const std::span<const uint64_t> hashes = request.block_hashes.first(
        std::min<size_t>(request.block_hashes.size(), options_.max_blocks));
    double min_waiting = 0, max_waiting = 0, kv_capacity = 0;
    bool any = false;
    for (uint32_t d = 0; d < n; ++d) {
      if (!loads.Up(d)) continue;
      const EngineMetrics m = loads.Scraped(d);
      min_waiting = any ? std::min(min_waiting, m.waiting) : m.waiting;
      max_waiting = any ? std::max(max_waiting, m.waiting) : m.waiting;
      kv_capacity = std::max(kv_capacity, m.kv_capacity_tokens);
      any = true;
    }
    if (options_.auto_tune && kv_capacity > 0) Resize(kv_capacity);
    index_->Overlap(hashes, now, matched_);
    const uint32_t best =
        LlmdBest(loads, n, options_, random_, min_waiting, max_waiting, [&](uint32_t d) {
          return hashes.empty() ? 0.0 : static_cast<double>(matched_[d]) / hashes.size();
        });
    if (best == kNoDestination) return {PowerOfTwoChoices(loads, random_), false, Reason::kPolicy};
    index_->Record(hashes, best, now);
    return LlmdDecision(best, request.prompt_tokens, matched_[best], options_);
  }

  // The blocks per server the prefix index holds now (for tests).
  uint32_t index_blocks_per_server() {
    const std::lock_guard<std::mutex> lock(mu_);
    return index_blocks_;
  }

 private:
  void Resize(double kv_capacity_tokens) {
    // The cap bounds what a misreported capacity could allocate (a million blocks is 16M tokens).
    constexpr double kMaxBlocks = 1 << 20;
    const uint32_t blocks = static_cast<uint32_t>(
        std::clamp(std::floor(kv_capacity_tokens / options_.block_tokens), 1.0, kMaxBlocks));
    if (blocks == index_blocks_) return;
    index_blocks_ = blocks;
    index_ = std::make_unique<ApproxPrefixIndex>(PrefixIndexOptions{
        .destinations = index_->destinations(), .blocks_per_destination = blocks});
  }

  Random& random_;
  const Clock& clock_;
  const LlmdOptions options_;
  std::mutex mu_;
  uint32_t index_blocks_;                     // guarded by mu_
  std::unique_ptr<ApproxPrefixIndex> index_;  // guarded by mu_
  std::vector<uint32_t> matched_;             // guarded by mu_
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
