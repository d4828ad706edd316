// KeySizes: per key, the mean prompt tokens and the mean cached tokens (the engines'
// usage.prompt_tokens_details.cached_tokens) of its answered requests: what a gateway's rate
// reports say of each key's size (rates.proto, KeyCount.prompt_tokens and reusable_tokens) for the
// planner's byte-aware admission (docs/planner.md). Cached tokens are a lower bound of a key's
// reusable prefix (what a request shares with the key's previous one): a request sent where its
// prefix was evicted finds less.
//
// Each key's means are exponentially weighted over its answers (each new answer weighs kWeight;
// the first sets them). A fixed table of 2^capacity_log2 entries, direct-mapped by the key id's low
// bits: a later key that maps to the same entry replaces the earlier one, whose means start over.
// Add and Get take one of kStripes locks for a few instructions: for the response path and the
// reporter thread, not for Router::Pick.
//
// Usage:
//   KeySizes sizes(/*capacity_log2=*/14);                          // 16,384 keys, 640 KiB
//   sizes.Add(key_id, usage.prompt_tokens, usage.cached_tokens);   // each answered request
//   if (std::optional<KeySize> s = sizes.Get(key_id)) { /* s->prompt_tokens, s->cached_tokens */ }
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>

namespace cacheroute::dataplane {

struct KeySize {
  double prompt_tokens = 0;             // mean over the key's answers
  std::optional<double> cached_tokens;  // mean over its answers that reported them
  uint64_t answers = 0;                 // answers counted since the key took its entry
};

class KeySizes {
 public:
  static constexpr double kWeight = 1.0 / 8;
  static constexpr uint32_t kStripes = 64;
  static constexpr uint32_t kMaxCapacityLog2 = 24;

  // capacity_log2 is clamped to [1, kMaxCapacityLog2].
  explicit KeySizes(uint32_t capacity_log2 = 14)
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
    if (e.answers == 0 || e.key_id != key_id) {
      e = Entry{};
      e.key_id = key_id;
    }
    e.prompt = e.answers == 0 ? prompt : e.prompt + kWeight * (prompt - e.prompt);
    if (cached_tokens.has_value()) {
      const double cached = static_cast<double>(std::min(*cached_tokens, prompt_tokens));
      e.cached = e.cached_answers == 0 ? cached : e.cached + kWeight * (cached - e.cached);
      ++e.cached_answers;
    }
    ++e.answers;
  }

  // The key's means, or nothing when it has no answer in its entry. Any thread.
  std::optional<KeySize> Get(uint64_t key_id) const {
    const Entry& e = entries_[key_id & mask_];
    std::lock_guard<std::mutex> lock(StripeOf(key_id));
    if (e.answers == 0 || e.key_id != key_id) return std::nullopt;
    KeySize size;
    size.prompt_tokens = e.prompt;
    size.answers = e.answers;
    if (e.cached_answers > 0) size.cached_tokens = e.cached;
    return size;
  }

 private:
  struct Entry {
    uint64_t key_id = 0;
    uint64_t answers = 0;
    uint64_t cached_answers = 0;
    double prompt = 0;
    double cached = 0;
  };
  std::mutex& StripeOf(uint64_t key_id) const { return stripes_[key_id & mask_ & (kStripes - 1)]; }

  const size_t mask_;
  std::unique_ptr<Entry[]> entries_;
  mutable std::array<std::mutex, kStripes> stripes_;
};

}  // namespace cacheroute::dataplane
