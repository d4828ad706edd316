// KeyMemory: for every key, admitted or not, where it was last sent, its prompt length then and
// when: what the dispatch rule needs to keep a conversation on the engine that holds its previous
// turn (docs/dispatch.md, "Per-key memory").
//
// A fixed table of 2^capacity_log2 entries of 16 bytes, direct-mapped by the key id's low bits and
// overwritten by any later key that maps to the same entry: bounded, allocation-free after
// construction, and lock-free (two relaxed atomic words per entry, each carrying the key's tag, so
// a read torn between two writers of different keys is seen as no entry). Two keys that share the
// entry and the 24-bit tag alias (probability 2^-24 per collision); the cost is one request routed
// as if it had the other key's history.
//
// Invariants: Get returns either nothing (destination == kNoDestination) or what one Put of that
// key (or an alias) stored. Destinations ≥ kMaxDestinations are not remembered; prompt lengths are
// clamped to kMaxPromptTokens; times are kept to the millisecond.
//
// Usage:
//   KeyMemory memory(/*capacity_log2=*/18);                 // 4 MiB, 262,144 keys
//   memory.Put(key_id, destination, prompt_tokens, now);
//   KeyRecall last = memory.Get(key_id);
//   if (last.known() && now - last.sent < turnover) { /* last.destination is expected warm */ }
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/dispatch.h"

namespace cacheroute::dataplane {

struct KeyRecall {
  uint32_t destination = kNoDestination;
  uint32_t prompt_tokens = 0;
  Time sent{};
  bool known() const { return destination != kNoDestination; }
};

class KeyMemory {
 public:
  static constexpr uint32_t kMaxDestinations = (1u << 20) - 1;
  static constexpr uint32_t kMaxPromptTokens = (1u << 20) - 1;
  static constexpr uint32_t kMaxCapacityLog2 = 30;

  // capacity_log2 is clamped to [1, kMaxCapacityLog2].
  explicit KeyMemory(uint32_t capacity_log2)
      : mask_((size_t{1} << Clamp(capacity_log2)) - 1), entries_(new Entry[mask_ + 1]) {}

  size_t capacity() const { return mask_ + 1; }

  // Starts loading the key's entry into the cache, so that a Get after other work (the table
  // lookup) does not wait for memory twice. A hint only; nothing where the compiler has no such
  // builtin.
  void Prefetch(uint64_t key_id) const {
#if defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(&entries_[key_id & mask_], 1);
#else
    (void)key_id;
#endif
  }

  KeyRecall Get(uint64_t key_id) const {
    const Entry& e = entries_[key_id & mask_];
    const uint64_t where = e.where.load(std::memory_order_relaxed);
    const uint64_t when = e.when.load(std::memory_order_relaxed);
    const uint64_t tag = Tag(key_id);
    if ((where >> kTagShift) != tag || (when >> kTagShift) != tag) return {};
    const auto destination_plus_one = static_cast<uint32_t>((where >> 20) & kMaxDestinations);
    if (destination_plus_one == 0) return {};
    return {.destination = destination_plus_one - 1,
            .prompt_tokens = static_cast<uint32_t>(where & kMaxPromptTokens),
            .sent = Time(std::chrono::duration_cast<Duration>(
                std::chrono::milliseconds(static_cast<int64_t>(when & kTimeMask))))};
  }

  void Put(uint64_t key_id, uint32_t destination, uint32_t prompt_tokens, Time now) {
    if (destination >= kMaxDestinations) return;
    Entry& e = entries_[key_id & mask_];
    const uint64_t tag = Tag(key_id) << kTagShift;
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch());
    const uint64_t when = static_cast<uint64_t>(ms.count() < 0 ? 0 : ms.count()) & kTimeMask;
    const uint64_t tokens = prompt_tokens < kMaxPromptTokens ? prompt_tokens : kMaxPromptTokens;
    e.when.store(tag | when, std::memory_order_relaxed);
    e.where.store(tag | (uint64_t{destination} + 1) << 20 | tokens, std::memory_order_relaxed);
  }

 private:
  // where: tag (24) | destination + 1 (20) | prompt tokens (20); when: tag (24) | ms (40).
  static constexpr int kTagShift = 40;
  static constexpr uint64_t kTimeMask = (uint64_t{1} << kTagShift) - 1;
  struct Entry {
    std::atomic<uint64_t> where{0};
    std::atomic<uint64_t> when{0};
  };
  static uint32_t Clamp(uint32_t log2) {
    return log2 < 1 ? 1 : (log2 > kMaxCapacityLog2 ? kMaxCapacityLog2 : log2);
  }
  static uint64_t Tag(uint64_t key_id) { return key_id >> kTagShift; }

  const size_t mask_;
  std::unique_ptr<Entry[]> entries_;
};

}  // namespace cacheroute::dataplane

namespace cacheroute::dataplane {

// PrefixMemory: the per-key memory's rule applied to prompt prefixes: where each prefix of a
// prompt was last sent, so that a request whose key says nothing (a new key, or a key whose
// requests share only part of their prompts) still finds the destination holding its longest
// known prefix (docs/dispatch.md, "Per-key memory"). A prefix is named by the chained hash of its
// last 16-token block, so equal hashes mean equal prefixes.
//
// Only blocks at grid positions are remembered: every block of the first 8, then 4 per doubling
// (8, 10, 12, 14, 16, 20, 24, 28, 32, 40, …), so a request writes O(log length) entries and a
// lookup binary-searches them for the deepest remembered one (O(log log length) probes). The
// depth found is at most 25% short of the true one. Same table, bounds and lock-freedom as
// KeyMemory, keyed by block hashes; an entry's prompt_tokens is its prefix length in tokens.
//
// Usage:
//   PrefixMemory prefixes(/*capacity_log2=*/20);
//   KnownPrefix p = prefixes.Deepest(hashes, [&](const KeyRecall& r) { return Fresh(r); });
//   prefixes.Record(hashes, destination, now);
struct KnownPrefix {
  uint32_t destination = kNoDestination;
  uint32_t tokens = 0;  // the prefix's length: (block index + 1) · 16
  uint32_t grid = 0;    // its grid index + 1: the grid positions it covers
  Time sent{};          // when its entry was recorded
  bool known() const { return destination != kNoDestination; }
};

class PrefixMemory {
 public:
  static constexpr uint32_t kBlockTokens = 16;

  explicit PrefixMemory(uint32_t capacity_log2) : entries_(capacity_log2) {}

  // The i-th grid position (a block index), i ≥ 0.
  static uint64_t GridBlock(uint32_t i) {
    if (i < 8) return i;
    const uint32_t octave = 3 + (i - 8) / 4;  // blocks [2^octave, 2^(octave+1))
    return (uint64_t{1} << octave) + uint64_t{(i - 8) % 4} * (uint64_t{1} << (octave - 2));
  }
  // Grid positions below `blocks`.
  static uint32_t GridCount(size_t blocks) {
    uint32_t n = 0;
    while (GridBlock(n) < blocks) ++n;
    return n;
  }

  void Record(std::span<const uint64_t> block_hashes, uint32_t destination, Time now) {
    const uint32_t n = GridCount(block_hashes.size());
    for (uint32_t i = 0; i < n; ++i) {
      const uint64_t b = GridBlock(i);
      entries_.Put(block_hashes[b], destination, static_cast<uint32_t>((b + 1) * kBlockTokens),
                   now);
    }
  }

  // Records grid positions first_grid, first_grid + 1, … (their hashes: `grid_hashes`) at
  // `destination` as of `sent`, except where an entry recorded later is kept (a placement learned
  // from another gateway arrives late and must not overwrite a newer one).
  void RecordGrid(uint32_t first_grid, std::span<const uint64_t> grid_hashes, uint32_t destination,
                  Time sent) {
    for (uint32_t i = 0; i < grid_hashes.size(); ++i) {
      const KeyRecall old = entries_.Get(grid_hashes[i]);
      if (old.known() && old.sent > sent) continue;
      const uint64_t b = GridBlock(first_grid + i);
      entries_.Put(grid_hashes[i], destination, static_cast<uint32_t>((b + 1) * kBlockTokens),
                   sent);
    }
  }

  // The deepest grid prefix of `block_hashes` remembered and `fresh` (a predicate on the entry),
  // assuming that a remembered prefix implies its shorter ones (they were recorded together).
  template <typename Fresh>
  KnownPrefix Deepest(std::span<const uint64_t> block_hashes, Fresh fresh) const {
    uint32_t lo = 0, hi = GridCount(block_hashes.size());  // answer in [lo, hi): grid index + 1
    KnownPrefix found;
    while (lo < hi) {
      const uint32_t mid = lo + (hi - lo) / 2;
      const KeyRecall r = entries_.Get(block_hashes[GridBlock(mid)]);
      if (r.known() && fresh(r)) {
        found = {r.destination, static_cast<uint32_t>((GridBlock(mid) + 1) * kBlockTokens), mid + 1,
                 r.sent};
        lo = mid + 1;
      } else {
        hi = mid;
      }
    }
    return found;
  }

 private:
  KeyMemory entries_;
};

}  // namespace cacheroute::dataplane
