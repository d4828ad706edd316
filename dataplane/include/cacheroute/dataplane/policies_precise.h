// The multi-replica modes of the routers teams run, as baselines that every gateway replica runs
// alone (docs/dispatch.md, "Modern baselines"):
//
//   PrefixHashPolicy  consistent hashing with bounded loads on the prompt's prefix (SGLang model
//                     gateway's prefix_hash, KubeAI's PrefixHash): coherent across replicas with
//                     no shared state
//
// Invariants: as policies.h's (thread-safe, allocation-free picks, never a down destination, load
// read only through the LoadView).
//
// Usage:
//   PrefixHashPolicy policy(/*destinations=*/30, random);
//   Decision d = policy.Route({.key_id = k, .prompt_tokens = 1200, .block_hashes = hashes}, loads);
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string_view>

#include "cacheroute/dataplane/dispatch.h"
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

}  // namespace cacheroute::dataplane
