// SpaceSaving: a bounded-memory per-key counter, the heavy-hitter sketch of Metwally, Agrawal and
// El Abbadi, "Efficient Computation of Frequent and Top-k Elements in Data Streams" (ICDT 2005).
// RateRecorder keeps one per shard; it is single-threaded and does no locking of its own.
//
// The sketch has `capacity` counters, each (key, count, error). Add(key) counts a key that holds a
// counter, gives a free counter to a new key (count 1, error 0), or else gives the new key the
// counter with the smallest count m (evicting its key) with count = m + 1, error = m. While at
// most `capacity` distinct keys have been added, every count is exact (error 0). After that, with
// N the number of Add calls and f(k) a key's true count:
//   - count − error ≤ f(k) ≤ count for every key holding a counter; count − error is exactly the
//     number of Adds of the key since it last took its counter;
//   - a key without a counter has f(k) ≤ min_count() ≤ N / capacity, so every key with
//     f(k) > N / capacity holds a counter;
//   - the counts sum to N.
// Nothing allocates after construction. Deterministic: the same sequence of calls gives the same
// counters, in the same slots. Cost and memory: docs/dataplane.md, "Space-saving".
//
// Usage:
//   SpaceSaving sketch(/*capacity=*/1024);
//   sketch.Add(key_id);
//   for (uint32_t i = 0; i < sketch.size(); ++i) Use(sketch.counter(i));
//   sketch.Clear();
#pragma once

#include <algorithm>
#include <bit>
#include <cassert>
#include <cstdint>
#include <limits>
#include <vector>

namespace cacheroute::dataplane {

class SpaceSaving {
 public:
  struct Counter {
    uint64_t key = 0;
    uint64_t count = 0;  // an upper bound of the key's true count
    uint64_t error = 0;  // count − error is a lower bound of the true count
    uint32_t heap_pos = 0;
  };

  // `capacity` ≥ 1 and < 2^30 (checked by assert; RateRecorder validates its options).
  explicit SpaceSaving(uint32_t capacity)
      : counters_(capacity),
        heap_(capacity),
        index_(std::bit_ceil(uint64_t{2} * capacity), kEmpty),
        index_shift_(64 - std::countr_zero(index_.size())) {
    assert(capacity >= 1 && capacity < (uint32_t{1} << 30));
  }

  void Add(uint64_t key) {
    ++total_;
    size_t slot = Home(key);
    for (;; slot = (slot + 1) & Mask()) {
      const uint32_t id = index_[slot];
      if (id == kEmpty) break;
      if (counters_[id].key == key) {
        ++counters_[id].count;
        SiftDown(counters_[id].heap_pos);
        return;
      }
    }
    if (size_ < counters_.size()) {
      const uint32_t id = size_++;
      counters_[id] = {.key = key, .count = 1, .error = 0, .heap_pos = id};
      heap_[id] = id;
      index_[slot] = id;
      SiftUp(id);
      return;
    }
    // Full: the new key takes over the minimum counter (the heap's root).
    const uint32_t id = heap_[0];
    Erase(counters_[id].key);
    evicted_ = true;
    Counter& c = counters_[id];
    c.key = key;
    c.error = c.count;
    ++c.count;
    Insert(key, id);
    SiftDown(0);
  }

  // Forgets every key; keeps the memory.
  void Clear() {
    std::fill(index_.begin(), index_.end(), kEmpty);
    size_ = 0;
    total_ = 0;
    evicted_ = false;
  }

  uint32_t capacity() const { return static_cast<uint32_t>(counters_.size()); }
  uint32_t size() const { return size_; }
  // The counters in use are counter(0) … counter(size() − 1), in no particular order.
  const Counter& counter(uint32_t i) const { return counters_[i]; }
  // Add calls since construction or the last Clear.
  uint64_t total() const { return total_; }
  // True once a key was evicted; until then every count is exact and a key without a counter was
  // never added.
  bool evicted() const { return evicted_; }
  // The smallest count, an upper bound of the true count of every key without a counter (0 while
  // empty).
  uint64_t min_count() const { return size_ == 0 ? 0 : counters_[heap_[0]].count; }

 private:
  static constexpr uint32_t kEmpty = std::numeric_limits<uint32_t>::max();

  size_t Mask() const { return index_.size() - 1; }
  // Fibonacci hashing: RateRecorder callers pass KeyIds, which are already mixed, but tests and
  // other callers may pass small integers.
  size_t Home(uint64_t key) const {
    return static_cast<size_t>((key * 0x9e3779b97f4a7c15ULL) >> index_shift_) & Mask();
  }
  // The index slot holding `key`, which must be present.
  size_t Find(uint64_t key) const {
    size_t slot = Home(key);
    while (counters_[index_[slot]].key != key) slot = (slot + 1) & Mask();
    return slot;
  }
  void Insert(uint64_t key, uint32_t id) {
    size_t slot = Home(key);
    while (index_[slot] != kEmpty) slot = (slot + 1) & Mask();
    index_[slot] = id;
  }
  // Backward-shift deletion keeps linear probing free of tombstones: each later entry of the run
  // moves into the hole when the hole lies on its probe path from its home slot.
  void Erase(uint64_t key) {
    size_t hole = Find(key);
    for (size_t next = (hole + 1) & Mask(); index_[next] != kEmpty; next = (next + 1) & Mask()) {
      const size_t home = Home(counters_[index_[next]].key);
      if (((next - home) & Mask()) >= ((next - hole) & Mask())) {
        index_[hole] = index_[next];
        hole = next;
      }
    }
    index_[hole] = kEmpty;
  }

  uint64_t CountAt(uint32_t pos) const { return counters_[heap_[pos]].count; }
  void Place(uint32_t pos, uint32_t id) {
    heap_[pos] = id;
    counters_[id].heap_pos = pos;
  }
  void SiftDown(uint32_t pos) {
    const uint32_t id = heap_[pos];
    const uint64_t count = counters_[id].count;
    for (;;) {
      uint32_t child = 2 * pos + 1;
      if (child >= size_) break;
      if (child + 1 < size_ && CountAt(child + 1) < CountAt(child)) ++child;
      if (CountAt(child) >= count) break;
      Place(pos, heap_[child]);
      pos = child;
    }
    Place(pos, id);
  }
  void SiftUp(uint32_t pos) {
    const uint32_t id = heap_[pos];
    const uint64_t count = counters_[id].count;
    while (pos > 0) {
      const uint32_t parent = (pos - 1) / 2;
      if (CountAt(parent) <= count) break;
      Place(pos, heap_[parent]);
      pos = parent;
    }
    Place(pos, id);
  }

  std::vector<Counter> counters_;  // [0, size_) in use
  std::vector<uint32_t> heap_;     // counter ids, a min-heap by count over [0, size_)
  std::vector<uint32_t> index_;    // open addressing: counter id or kEmpty
  int index_shift_;
  uint32_t size_ = 0;
  uint64_t total_ = 0;
  bool evicted_ = false;
};

}  // namespace cacheroute::dataplane
