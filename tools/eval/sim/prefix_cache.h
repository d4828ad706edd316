// PrefixCache: a model of vLLM's automatic prefix caching (paged KV blocks with content hashes),
// the cache whose hit rate CacheRoute's routing tries to keep high (the CacheRoute paper,
// §2.2; the rules are vLLM's, as summarised in docs/references.md, "Engines").
//
// The cache has a fixed number of KV blocks of kBlockTokens (16) tokens each. A request's prompt
// is described by the chained hash of each of its full blocks (ChainBlockHashes), so one block of
// content under two different prefixes has two different hashes. Only full prompt blocks are
// cached; a lookup takes the longest cached chain from the start of the prompt, at most
// prompt_tokens − 1 tokens; blocks held by running requests are never evicted, free blocks are
// evicted least recently used first, and a request's blocks are freed tail-first.
//
// Time-free and transport-free: the engine model drives it, and the HTTP engine emulator can too.
// Its KV events (set_event_log) are what the precise baselines' indexes read.
// Not thread-safe. The rules in full and the cost: docs/simulator.md, "Prefix cache internals".
//
// Usage:
//   PrefixCache cache(/*capacity_blocks=*/40071);
//   std::vector<uint64_t> hashes = ChainBlockHashes(content_ids);  // one per full block
//   PrefixCache::Allocation a;
//   if (!cache.Allocate(hashes, prompt_tokens, prompt_tokens + output_tokens, a)) Wait();
//   ... compute prompt tokens [a.cached_tokens, n) ...
//   cache.Commit(hashes, n, a);   // publish the full blocks now computed
//   cache.Free(a);                // when the request ends
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "cacheroute/dataplane/kv_event_index.h"

namespace cacheroute::sim {

inline constexpr uint32_t kBlockTokens = 16;

// Blocks needed to hold `tokens` tokens.
constexpr uint32_t BlocksForTokens(uint64_t tokens) {
  return static_cast<uint32_t>((tokens + kBlockTokens - 1) / kBlockTokens);
}

// The chained hash of one block: its parent's hash (kRootBlockHash for the first block) with the
// block's content id.
uint64_t ChainBlockHash(uint64_t parent_hash, uint64_t content_id);
inline constexpr uint64_t kRootBlockHash = 0x6a09e667f3bcc908ULL;
// Chained hashes of a sequence of full blocks, given each block's content id.
std::vector<uint64_t> ChainBlockHashes(std::span<const uint64_t> content_ids);
// The same, appended to `out` (which the caller may reuse to avoid allocating).
void AppendChainBlockHashes(std::span<const uint64_t> content_ids, std::vector<uint64_t>& out);

struct PrefixCacheStats {
  uint64_t query_tokens = 0;    // prompt tokens of successful Allocate calls
  uint64_t hit_tokens = 0;      // of which found cached
  uint64_t evicted_blocks = 0;  // cached blocks whose content was dropped to reuse them
  uint64_t allocations = 0;     // successful Allocate calls
  uint64_t failed_allocations = 0;
};

class PrefixCache {
 public:
  // The blocks one request holds, in token order, and how many of its leading prompt tokens came
  // from the cache. Owned by the caller between Allocate and Free; reusable afterwards.
  struct Allocation {
    std::vector<uint32_t> blocks;
    uint32_t cached_tokens = 0;
    uint32_t published_blocks = 0;  // leading blocks already found or published (Commit's cursor)
  };

  // capacity_blocks ≥ 1 (0 is taken as 1).
  explicit PrefixCache(uint32_t capacity_blocks);

  // Cached tokens a prompt would get now: the longest run of leading `block_hashes` that are
  // cached, capped at prompt_tokens − 1 and at the prompt's full blocks, in tokens. Hashes beyond
  // the prompt's full blocks are ignored; blocks without a hash (past the span) are never cached.
  uint32_t Match(std::span<const uint64_t> block_hashes, uint32_t prompt_tokens) const;
  // Match(block_hashes, prompt_tokens) > tokens, usually in one lookup: a longer cached run needs
  // the block right after `tokens` (a multiple of kBlockTokens, as Match returns) to be cached.
  bool MatchExceeds(std::span<const uint64_t> block_hashes, uint32_t prompt_tokens,
                    uint32_t tokens) const;

  // Admits a request whose KV will reach `total_tokens` (≥ prompt_tokens ≥ 1): takes a reference
  // on its cached prefix and new blocks for everything else. Returns false and changes nothing but
  // stats().failed_allocations when there are not enough free blocks. `allocation` must be empty
  // (freshly constructed or freed).
  bool Allocate(std::span<const uint64_t> block_hashes, uint32_t prompt_tokens,
                uint32_t total_tokens, Allocation& allocation);

  // Publishes the full prompt blocks among the first `computed_tokens` tokens, so later requests
  // can hit them. Call as prefill progresses (vLLM publishes when it schedules a chunk).
  void Commit(std::span<const uint64_t> block_hashes, uint32_t computed_tokens,
              Allocation& allocation);

  // Releases the request's blocks tail-first and clears `allocation`.
  void Free(Allocation& allocation);

  // Appends the cache's KV events to `log` from now on, as vLLM publishes them (null: none): a
  // block published by Commit is stored, a published block evicted to reuse it is removed.
  void set_event_log(std::vector<dataplane::KvEvent>* log) { event_log_ = log; }

  uint32_t capacity_blocks() const { return static_cast<uint32_t>(blocks_.size()); }
  // Blocks with no reference (cached or empty): what new allocations can take.
  uint32_t free_blocks() const { return free_count_; }
  uint32_t used_blocks() const { return capacity_blocks() - free_count_; }
  // Blocks whose content is published (in use or free).
  uint32_t cached_blocks() const { return static_cast<uint32_t>(index_.size()); }
  // vLLM's kv_cache_usage_perc: the fraction of blocks held by running requests, 0..1.
  double usage() const { return static_cast<double>(used_blocks()) / capacity_blocks(); }
  const PrefixCacheStats& stats() const { return stats_; }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;

  struct Block {
    uint64_t hash = 0;
    uint32_t refs = 0;
    uint32_t prev = kNone;  // free-queue links, valid while refs == 0
    uint32_t next = kNone;
    bool published = false;
  };

  // Leading blocks of the prompt that are cached (at most prompt_tokens − 1 tokens' worth).
  uint32_t MatchBlocks(std::span<const uint64_t> block_hashes, uint32_t prompt_tokens) const;
  void PushBack(uint32_t b);
  void Unlink(uint32_t b);

  std::vector<Block> blocks_;
  absl::flat_hash_map<uint64_t, uint32_t> index_;  // published hash → block
  uint32_t head_ = kNone;                          // least recently used free block
  uint32_t tail_ = kNone;
  uint32_t free_count_ = 0;
  PrefixCacheStats stats_;
  std::vector<dataplane::KvEvent>* event_log_ = nullptr;
};

}  // namespace cacheroute::sim
