// PrefixCache: see prefix_cache.h. The free queue is an intrusive doubly linked list threaded
// through the block array, so taking a hit block out of it, or evicting from its front, is O(1)
// without allocation.
#include "tools/eval/sim/prefix_cache.h"

#include <algorithm>
#include <cassert>

#include "cacheroute/dataplane/key_id.h"

namespace cacheroute::sim {

uint64_t ChainBlockHash(uint64_t parent_hash, uint64_t content_id) {
  // Mix64 is a bijection, so for a fixed parent distinct contents give distinct hashes and for a
  // fixed content distinct parents do; the outer mix spreads both over every bit.
  return dataplane::Mix64(dataplane::Mix64(parent_hash) ^ content_id);
}

void AppendChainBlockHashes(std::span<const uint64_t> content_ids, std::vector<uint64_t>& out) {
  uint64_t parent = kRootBlockHash;
  for (uint64_t id : content_ids) {
    parent = ChainBlockHash(parent, id);
    out.push_back(parent);
  }
}

std::vector<uint64_t> ChainBlockHashes(std::span<const uint64_t> content_ids) {
  std::vector<uint64_t> out;
  out.reserve(content_ids.size());
  AppendChainBlockHashes(content_ids, out);
  return out;
}

PrefixCache::PrefixCache(uint32_t capacity_blocks)
    : blocks_(std::max<uint32_t>(1, capacity_blocks)) {
  index_.reserve(blocks_.size());
  for (uint32_t b = 0; b < blocks_.size(); ++b) PushBack(b);
}

uint32_t PrefixCache::MatchBlocks(std::span<const uint64_t> block_hashes,
                                  uint32_t prompt_tokens) const {
  if (prompt_tokens == 0) return 0;
  const uint32_t limit = std::min<uint32_t>((prompt_tokens - 1) / kBlockTokens,
                                            static_cast<uint32_t>(block_hashes.size()));
  uint32_t n = 0;
  while (n < limit && index_.contains(block_hashes[n])) ++n;
  return n;
}

uint32_t PrefixCache::Match(std::span<const uint64_t> block_hashes, uint32_t prompt_tokens) const {
  return MatchBlocks(block_hashes, prompt_tokens) * kBlockTokens;
}

bool PrefixCache::MatchExceeds(std::span<const uint64_t> block_hashes, uint32_t prompt_tokens,
                               uint32_t tokens) const {
  const uint32_t next = tokens / kBlockTokens;
  if (next >= block_hashes.size() || !index_.contains(block_hashes[next])) return false;
  return MatchBlocks(block_hashes, prompt_tokens) > next;
}

bool PrefixCache::Allocate(std::span<const uint64_t> block_hashes, uint32_t prompt_tokens,
                           uint32_t total_tokens, Allocation& allocation) {
  assert(allocation.blocks.empty());
  assert(prompt_tokens >= 1 && total_tokens >= prompt_tokens);
  const uint32_t hits = MatchBlocks(block_hashes, prompt_tokens);
  // Hit blocks nobody holds are in the free queue; holding them takes them out of it.
  uint32_t reclaimed = 0;
  for (uint32_t i = 0; i < hits; ++i) {
    if (blocks_[index_.find(block_hashes[i])->second].refs == 0) ++reclaimed;
  }
  const uint32_t fresh = BlocksForTokens(total_tokens) - hits;
  if (fresh > free_count_ - reclaimed) {
    ++stats_.failed_allocations;
    return false;
  }

  allocation.blocks.reserve(hits + fresh);
  for (uint32_t i = 0; i < hits; ++i) {
    const uint32_t b = index_.find(block_hashes[i])->second;
    if (blocks_[b].refs == 0) Unlink(b);
    ++blocks_[b].refs;
    allocation.blocks.push_back(b);
  }
  for (uint32_t i = 0; i < fresh; ++i) {
    const uint32_t b = head_;
    Unlink(b);
    Block& block = blocks_[b];
    if (block.published) {
      index_.erase(block.hash);
      block.published = false;
      ++stats_.evicted_blocks;
      if (event_log_ != nullptr)
        event_log_->push_back({dataplane::KvEventKind::kRemoved, block.hash});
    }
    block.refs = 1;
    allocation.blocks.push_back(b);
  }
  allocation.cached_tokens = hits * kBlockTokens;
  allocation.published_blocks = hits;
  ++stats_.allocations;
  stats_.query_tokens += prompt_tokens;
  stats_.hit_tokens += allocation.cached_tokens;
  return true;
}

void PrefixCache::Commit(std::span<const uint64_t> block_hashes, uint32_t computed_tokens,
                         Allocation& allocation) {
  const uint32_t full =
      std::min({computed_tokens / kBlockTokens, static_cast<uint32_t>(block_hashes.size()),
                static_cast<uint32_t>(allocation.blocks.size())});
  for (uint32_t i = allocation.published_blocks; i < full; ++i) {
    Block& block = blocks_[allocation.blocks[i]];
    // A copy computed concurrently by another request (or the recomputed last block under the
    // prompt − 1 cap) stays private: the hash already names a block.
    if (index_.try_emplace(block_hashes[i], allocation.blocks[i]).second) {
      block.hash = block_hashes[i];
      block.published = true;
      if (event_log_ != nullptr)
        event_log_->push_back({dataplane::KvEventKind::kStored, block.hash});
    }
  }
  allocation.published_blocks = std::max(allocation.published_blocks, full);
}

void PrefixCache::Free(Allocation& allocation) {
  // Tail-first: the last block reaches the free queue first, so it is evicted first.
  for (auto it = allocation.blocks.rbegin(); it != allocation.blocks.rend(); ++it) {
    Block& block = blocks_[*it];
    assert(block.refs > 0);
    if (--block.refs == 0) PushBack(*it);
  }
  allocation.blocks.clear();
  allocation.cached_tokens = 0;
  allocation.published_blocks = 0;
}

void PrefixCache::PushBack(uint32_t b) {
  Block& block = blocks_[b];
  block.prev = tail_;
  block.next = kNone;
  if (tail_ == kNone) {
    head_ = b;
  } else {
    blocks_[tail_].next = b;
  }
  tail_ = b;
  ++free_count_;
}

void PrefixCache::Unlink(uint32_t b) {
  Block& block = blocks_[b];
  if (block.prev == kNone) {
    head_ = block.next;
  } else {
    blocks_[block.prev].next = block.next;
  }
  if (block.next == kNone) {
    tail_ = block.prev;
  } else {
    blocks_[block.next].prev = block.prev;
  }
  block.prev = block.next = kNone;
  --free_count_;
}

}  // namespace cacheroute::sim
