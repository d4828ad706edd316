// PlacementOutbox: the placements a gateway's token-work rule made that the rest of the fleet does
// not know yet, collected on the request path and drained every share interval into a batch the
// gateway sends to the planner, which streams it to every other gateway (docs/dispatch.md,
// "Several gateways"). A receiving gateway's Router learns each placement as if it had made it
// (Router::Learn), so a key's and a prefix's warm destination is one fleet-wide fact instead of G
// private guesses.
//
// What is news (decided by the rule, TokenWorkRule::Decide, which knows what its memories held):
// the key's destination when the key memory did not hold that destination, sent within `refresh`;
// and the prompt's prefix-memory grid positions (PrefixMemory::GridBlock) from the first one the
// prefix memory did not hold at that destination within `refresh`. A request whose key and
// prefix were both known there offers nothing: in a warm fleet most requests cost no bytes.
//
// A placement is (key id, destination, prompt tokens, sent, first grid index, the grid hashes from
// there): about 28 bytes plus 8 per grid hash on the wire (grpc/placement_conversion.h).
//
// Thread safety and bounds: Offer runs on any request thread and never blocks or allocates: each
// thread offers into one of `shards` buffers reserved at construction, through a try_lock; a
// busy or full buffer drops the placement (counted: dropped()), which costs at most one
// refresh interval of another gateway's knowledge. Drain (one control thread) takes each buffer in
// turn and swaps it with an empty one.
//
// Usage:
//   PlacementOutbox outbox({.refresh = std::chrono::seconds(5)});
//   Router router({.destination_count = 8, .placement_outbox = &outbox}, random);
//   … every 25 ms:  PlacementBatch batch = outbox.Drain();  // then to the planner
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/key_memory.h"
#include "cacheroute/dataplane/rate_recorder.h"

namespace cacheroute::dataplane {

// One placement: `key_id` (0 with `key` false: a prefix alone) went to `destination` at `sent`
// with a prompt of `prompt_tokens`; its grid hashes are PlacementBatch::hashes[hash_offset,
// hash_offset + hash_count), the prefix memory's grid positions first_grid, first_grid + 1, ….
struct SharedPlacement {
  uint64_t key_id = 0;
  uint32_t destination = 0;
  uint32_t prompt_tokens = 0;
  Time sent{};
  bool key = true;  // the key's destination is news (else only the prefix is)
  uint32_t first_grid = 0;
  uint32_t hash_offset = 0;
  uint32_t hash_count = 0;
};

// Placements and the grid hashes they index, in the order offered (per shard).
struct PlacementBatch {
  std::vector<SharedPlacement> placements;
  std::vector<uint64_t> hashes;

  bool empty() const { return placements.empty(); }
  std::span<const uint64_t> HashesOf(const SharedPlacement& p) const {
    return std::span<const uint64_t>(hashes).subspan(p.hash_offset, p.hash_count);
  }
  // Appends `p` with `grid_hashes` (p's hash_offset and hash_count are set here).
  void Add(SharedPlacement p, std::span<const uint64_t> grid_hashes) {
    p.hash_offset = static_cast<uint32_t>(hashes.size());
    p.hash_count = static_cast<uint32_t>(grid_hashes.size());
    hashes.insert(hashes.end(), grid_hashes.begin(), grid_hashes.end());
    placements.push_back(p);
  }
};

struct PlacementOutboxOptions {
  // A placement the memories hold, sent within this long, is not offered again: the period at
  // which a key that stays on one destination is re-announced (receivers age entries by `sent`).
  Duration refresh = std::chrono::seconds(5);
  uint32_t shards = 8;                 // ≥ 1
  uint32_t max_placements = 1u << 14;  // per shard and drain interval
  uint32_t max_hashes = 1u << 17;      // per shard and drain interval
};

class PlacementOutbox {
 public:
  explicit PlacementOutbox(const PlacementOutboxOptions& options = {})
      : options_(options),
        shards_(std::max<uint32_t>(1, options.shards)),
        buffers_(new Buffer[shards_]) {
    for (uint32_t s = 0; s < shards_; ++s) Reserve(buffers_[s].batch);
  }
  PlacementOutbox(const PlacementOutbox&) = delete;
  PlacementOutbox& operator=(const PlacementOutbox&) = delete;

  Duration refresh() const { return options_.refresh; }

  // Offers a placement whose news starts at grid index `first_grid` of `block_hashes` (the
  // request's 16-token block hashes); `key_news`: the key's destination is news too. Nothing is
  // offered when neither is. Any thread; never blocks or allocates.
  void Offer(uint64_t key_id, bool key_news, uint32_t destination, uint32_t prompt_tokens,
             Time sent, uint32_t first_grid, std::span<const uint64_t> block_hashes) {
    const uint32_t grid_count = PrefixMemory::GridCount(block_hashes.size());
    const uint32_t hash_count = first_grid < grid_count ? grid_count - first_grid : 0;
    if (!key_news && hash_count == 0) return;
    Buffer& buffer = buffers_[rate_recorder_internal::ThreadIndex() % shards_];
    std::unique_lock<std::mutex> lock(buffer.mu, std::try_to_lock);
    PlacementBatch& b = buffer.batch;
    if (!lock.owns_lock() || b.placements.size() >= options_.max_placements ||
        b.hashes.size() + hash_count > options_.max_hashes) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    SharedPlacement p{.key_id = key_id,
                      .destination = destination,
                      .prompt_tokens = prompt_tokens,
                      .sent = sent,
                      .key = key_news,
                      .first_grid = first_grid,
                      .hash_offset = static_cast<uint32_t>(b.hashes.size()),
                      .hash_count = hash_count};
    for (uint32_t i = first_grid; i < grid_count; ++i) {
      b.hashes.push_back(block_hashes[PrefixMemory::GridBlock(i)]);
    }
    b.placements.push_back(p);
  }

  // Everything offered since the last Drain, shard by shard. One control thread.
  PlacementBatch Drain() {
    PlacementBatch out;
    for (uint32_t s = 0; s < shards_; ++s) {
      PlacementBatch taken;
      Reserve(taken);
      {
        const std::lock_guard<std::mutex> lock(buffers_[s].mu);
        std::swap(taken, buffers_[s].batch);
      }
      if (out.empty()) {
        out = std::move(taken);
        continue;
      }
      for (const SharedPlacement& p : taken.placements) out.Add(p, taken.HashesOf(p));
    }
    return out;
  }

  // Placements dropped because a buffer was busy or full.
  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }

 private:
  struct Buffer {
    std::mutex mu;
    PlacementBatch batch;
  };
  void Reserve(PlacementBatch& b) const {
    b.placements.reserve(options_.max_placements);
    b.hashes.reserve(options_.max_hashes);
  }

  const PlacementOutboxOptions options_;
  const uint32_t shards_;
  std::unique_ptr<Buffer[]> buffers_;
  std::atomic<uint64_t> dropped_{0};
};

}  // namespace cacheroute::dataplane
