// The multi-replica modes of the routers teams run, as baselines that every gateway replica runs
// alone (docs/dispatch.md, "Modern baselines"):
//
//   PrefixHashPolicy     consistent hashing with bounded loads on the prompt's prefix (SGLang
//                        model gateway's prefix_hash, KubeAI's PrefixHash): coherent across
//                        replicas with no shared state
//   LlmdPrecisePolicy    llm-d's precise prefix-cache scorer: the llm-d profile (prefix 3, queue
//                        2, KV utilisation 2) with the prefix score from the engines' KV events
//
// NVIDIA Dynamo's KV router in exact mode ("dynamo-kv-exact") is DynamoKvPolicy (policies.h) given
// a KvEventIndex: the same cost, with the overlap from the engines' KV events.
//
// The precise two read a KvEventIndex (kv_event_index.h) that the caller owns and feeds with every
// engine's events (the registry's reads_kv_events trait): each replica subscribes to every engine.
//
// Invariants: as policies.h's (thread-safe, allocation-free picks, never a down destination, load
// read only through the LoadView).
//
// Usage:
//   PrefixHashPolicy policy(/*destinations=*/30, random);
//   Decision d = policy.Route({.key_id = k, .prompt_tokens = 1200, .block_hashes = hashes}, loads);
//   KvEventIndex index({.destinations = 30, .blocks_per_destination = 40071});
//   LlmdPrecisePolicy precise(30, random, clock, index);   // index.Apply(d, events) as they come
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <span>
#include <string_view>
#include <vector>

#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/dispatch.h"
#include "cacheroute/dataplane/kv_event_index.h"
#include "cacheroute/dataplane/policies.h"
#include "cacheroute/dataplane/random.h"

namespace cacheroute::dataplane {

// Consistent hashing with bounded loads on the prompt's prefix (SGLang model gateway's
// prefix_hash policy: the first 256 tokens, load factor 1.25; KubeAI's PrefixHash: a ring with
// virtual nodes walked past any replica loaded above 125% of the mean). The ring position is the
// chained hash of the block that ends the first `prefix_tokens` tokens, i.e. of block
// min(prefix_tokens / block, blocks) − 1, which stands for the whole prefix up to it; a prompt
// without a full block hashes its key. The walk and the bound are ChwblPolicy's: the first up
// destination from that position whose load (this replica's requests in flight) is below
// ceil((1 + ε) · (total + 1) / up).
struct PrefixHashOptions {
  uint32_t prefix_tokens = 256;  // SGLang's prefix_token_count
  uint32_t block_tokens = 16;    // the engines' KV block: the granularity of the block hashes
  double epsilon = 0.25;         // load factor 1.25
  uint32_t virtual_nodes = 150;  // SGLang's ring: 150 points per worker
};

class PrefixHashPolicy final : public Policy {
 public:
  PrefixHashPolicy(uint32_t destinations, Random& random, PrefixHashOptions options = {})
      : options_(options), ring_(destinations, random, options.epsilon, options.virtual_nodes) {}
  std::string_view name() const override { return "prefix-hash"; }

  // The ring position of a request: its prefix block's hash, or its key without a full block.
  uint64_t Position(const PickRequest& request) const {
    const std::span<const uint64_t> hashes = request.block_hashes;
    if (hashes.empty()) return request.key_id;
    const size_t blocks = std::max<uint32_t>(
        1, options_.prefix_tokens / std::max<uint32_t>(1, options_.block_tokens));
    return hashes[std::min(blocks, hashes.size()) - 1];
  }

  Decision Pick(uint64_t key_id, const LoadView& loads) override {
    return ring_.Pick(key_id, loads);
  }
  Decision Route(const PickRequest& request, const LoadView& loads) override {
    return ring_.Pick(Position(request), loads);
  }

 private:
  const PrefixHashOptions options_;
  ChwblPolicy ring_;
};

// llm-d's precise prefix-cache scorer (llm-d/llm-d-inference-scheduler's
// precise-prefix-cache-scorer over llm-d/llm-d-kv-cache-manager's block index) in the llm-d profile
// of LlmdPolicy:
//   score = prefix_weight · prefix(d) + queue_weight · queue(d) + kv_weight · (1 − KV usage(d)),
// with queue(d) as LlmdPolicy's and prefix(d) the scorer's min-max normalisation of the longest
// run of leading blocks present at d in the index: over the destinations with a match,
// (match − min) / (max − min), or 1 when they all match alike; 0 without one. After the pick, the
// request's blocks are recorded at the chosen destination as speculative entries (the index's
// TTL), so that its siblings follow it before the engine's events arrive.
class LlmdPrecisePolicy final : public Policy {
 public:
  LlmdPrecisePolicy(uint32_t destinations, Random& random, const Clock& clock, KvEventIndex& index,
                    LlmdOptions options = {})
      : random_(random),
        clock_(clock),
        index_(index),
        options_(options),
        n_(destinations),
        matched_(destinations, 0) {}
  std::string_view name() const override { return "llm-d-precise"; }
  Decision Pick(uint64_t key_id, const LoadView& loads) override {
    return Route({.key_id = key_id}, loads);
  }
  Decision Route(const PickRequest& request, const LoadView& loads) override {
    const std::lock_guard<std::mutex> lock(mu_);
    const Time now = clock_.Now();
    const uint32_t n = std::min<uint32_t>(loads.size(), n_);
    index_.Overlap(request.block_hashes, now, matched_);
    double min_waiting = 0, max_waiting = 0;
    uint32_t min_match = 0, max_match = 0;
    bool any = false;
    for (uint32_t d = 0; d < n; ++d) {
      if (!loads.Up(d)) continue;
      const double w = loads.Scraped(d).waiting;
      min_waiting = any ? std::min(min_waiting, w) : w;
      max_waiting = any ? std::max(max_waiting, w) : w;
      any = true;
      if (matched_[d] == 0) continue;
      min_match = min_match == 0 ? matched_[d] : std::min(min_match, matched_[d]);
      max_match = std::max(max_match, matched_[d]);
    }
    // The precise scorer's prefix score: min-max normalised over the destinations with a match.
    const uint32_t best =
        LlmdBest(loads, n, options_, random_, min_waiting, max_waiting, [&](uint32_t d) {
          return matched_[d] == 0         ? 0.0
                 : max_match == min_match ? 1.0
                                          : static_cast<double>(matched_[d] - min_match) /
                                                (max_match - min_match);
        });
    if (best == kNoDestination) return {PowerOfTwoChoices(loads, random_), false, Reason::kPolicy};
    index_.Record(request.block_hashes, best, now);
    return LlmdDecision(best, request.prompt_tokens, matched_[best], options_);
  }

 private:
  Random& random_;
  const Clock& clock_;
  KvEventIndex& index_;
  const LlmdOptions options_;
  const uint32_t n_;
  std::mutex mu_;
  std::vector<uint32_t> matched_;  // guarded by mu_
};

}  // namespace cacheroute::dataplane
