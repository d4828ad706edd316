// KeySizes: per key, what a gateway's rate reports say of its size (rates.proto, KeyCount.
// prompt_tokens and reusable_tokens) for the planner's byte-aware admission (docs/planner.md):
//   - the mean prompt tokens and cached tokens (the engines' usage.prompt_tokens_details.
//     cached_tokens) of its answered requests (Add); cached tokens are a lower bound of the
//     reusable prefix, since a request sent where its prefix was evicted finds less;
//   - the mean reusable tokens themselves: what each routed request's prompt shares with the key's
//     previous one, by their chained block hashes (ObservePrompt; PrefixMemory's blocks of
//     kBlockTokens tokens, compared at its grid positions, so at most 25% short).
//
// Each mean is exponentially weighted over its observations (each new one weighs kWeight; the
// first sets it). A fixed table of 2^capacity_log2 entries of 512 bytes, direct-mapped by the key
// id's low bits: a later key that maps to the same entry replaces the earlier one, whose means
// start over. Every call takes one of kStripes locks for a few hundred instructions at most: for
// the gateway's request and response paths and the reporter thread, not for Router::Pick.
//
// Usage:
//   KeySizes sizes(/*capacity_log2=*/13);                          // 8,192 keys, 4 MiB
//   sizes.ObservePrompt(key_id, block_hashes, prompt_tokens);      // each routed request
//   sizes.Add(key_id, usage.prompt_tokens, usage.cached_tokens);   // each answered request
//   std::optional<KeySize> s = sizes.Get(key_id);                  // its means, if any
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>

#include "cacheroute/dataplane/key_memory.h"

namespace cacheroute::dataplane {

struct KeySize {
  double prompt_tokens = 0;               // mean over the key's answers
  std::optional<double> cached_tokens;    // mean over its answers that reported them
  std::optional<double> reusable_tokens;  // mean shared with the previous prompt (ObservePrompt)
  uint64_t answers = 0;                   // answers counted since the key took its entry
};

class KeySizes {
 public:
  static constexpr double kWeight = 1.0 / 8;
  static constexpr uint32_t kStripes = 64;
  static constexpr uint32_t kMaxCapacityLog2 = 24;
  // Grid positions of a prompt's block hashes kept per key (PrefixMemory::GridBlock): prompts of
  // up to 40,960 blocks, about 655K tokens; longer ones are compared over that much.
  static constexpr uint32_t kGridHashes = 56;

  // capacity_log2 is clamped to [1, kMaxCapacityLog2].
  explicit KeySizes(uint32_t capacity_log2 = 13)
      : mask_((size_t{1} << std::clamp<uint32_t>(capacity_log2, 1, kMaxCapacityLog2)) - 1),
        entries_(new Entry[mask_ + 1]) {}
  KeySizes(const KeySizes&) = delete;
  KeySizes& operator=(const KeySizes&) = delete;

  size_t capacity() const { return mask_ + 1; }

  // One answered request of `key_id`: its prompt tokens and, when the engine reported them, its
  // cached tokens (clamped to the prompt). Any thread.
  void Add(uint64_t key_id, uint64_t prompt_tokens, std::optional<uint64_t> cached_tokens) {
    const auto prompt = static_cast<double>(prompt_tokens);
    Entry& e = entries_[key_id & mask_];
    std::lock_guard<std::mutex> lock(StripeOf(key_id));
    Take(e, key_id);
    e.prompt = e.answers == 0 ? prompt : e.prompt + kWeight * (prompt - e.prompt);
    if (cached_tokens.has_value()) {
      const double cached = static_cast<double>(std::min(*cached_tokens, prompt_tokens));
      e.cached = e.cached_answers == 0 ? cached : e.cached + kWeight * (cached - e.cached);
      ++e.cached_answers;
    }
    ++e.answers;
  }

  // One routed request of `key_id`: its prompt's chained block hashes and its prompt tokens. The
  // tokens it shares with the key's previous routed request (the deepest grid block where both
  // agree, in kBlockTokens tokens, at most the prompt) count in the key's mean reusable tokens;
  // the first request only leaves its hashes. Any thread.
  void ObservePrompt(uint64_t key_id, std::span<const uint64_t> block_hashes,
                     uint64_t prompt_tokens) {
    if (block_hashes.empty()) return;
    const uint32_t n = std::min(PrefixMemory::GridCount(block_hashes.size()), kGridHashes);
    Entry& e = entries_[key_id & mask_];
    std::lock_guard<std::mutex> lock(StripeOf(key_id));
    Take(e, key_id);
    if (e.grid_count > 0) {
      // Chained hashes: equal at a grid position means equal at every one before it.
      uint32_t lo = 0, hi = std::min(n, e.grid_count);  // shared grid positions: [0, lo)
      while (lo < hi) {
        const uint32_t mid = lo + (hi - lo) / 2;
        if (e.grid[mid] == block_hashes[PrefixMemory::GridBlock(mid)]) {
          lo = mid + 1;
        } else {
          hi = mid;
        }
      }
      const uint64_t shared_tokens =
          lo == 0 ? 0 : (PrefixMemory::GridBlock(lo - 1) + 1) * PrefixMemory::kBlockTokens;
      const auto reusable = static_cast<double>(std::min(shared_tokens, prompt_tokens));
      e.reusable =
          e.reusable_observed == 0 ? reusable : e.reusable + kWeight * (reusable - e.reusable);
      ++e.reusable_observed;
    }
    for (uint32_t i = 0; i < n; ++i) e.grid[i] = block_hashes[PrefixMemory::GridBlock(i)];
    e.grid_count = n;
  }

  // The key's means, or nothing when its entry has no answer and no reusable measurement. Any
  // thread.
  std::optional<KeySize> Get(uint64_t key_id) const {
    const Entry& e = entries_[key_id & mask_];
    std::lock_guard<std::mutex> lock(StripeOf(key_id));
    if (!e.used || e.key_id != key_id || (e.answers == 0 && e.reusable_observed == 0)) {
      return std::nullopt;
    }
    KeySize size;
    size.prompt_tokens = e.prompt;
    size.answers = e.answers;
    if (e.cached_answers > 0) size.cached_tokens = e.cached;
    if (e.reusable_observed > 0) size.reusable_tokens = e.reusable;
    return size;
  }

 private:
  struct Entry {
    bool used = false;
    uint32_t grid_count = 0;  // of grid: the previous routed prompt's hashes at grid positions
    uint64_t key_id = 0;
    uint64_t answers = 0;
    uint64_t cached_answers = 0;
    uint64_t reusable_observed = 0;
    double prompt = 0;
    double cached = 0;
    double reusable = 0;
    std::array<uint64_t, kGridHashes> grid{};
  };
  // Makes `e` the entry of `key_id`, starting it over when another key (or none) held it.
  static void Take(Entry& e, uint64_t key_id) {
    if (e.used && e.key_id == key_id) return;
    e = Entry{};
    e.used = true;
    e.key_id = key_id;
  }
  std::mutex& StripeOf(uint64_t key_id) const { return stripes_[key_id & mask_ & (kStripes - 1)]; }

  const size_t mask_;
  std::unique_ptr<Entry[]> entries_;
  mutable std::array<std::mutex, kStripes> stripes_;
};

}  // namespace cacheroute::dataplane
