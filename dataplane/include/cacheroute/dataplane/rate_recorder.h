// RateRecorder: per-key request counting on the request path, for the rate reports a gateway sends
// to the planner (proto/cacheroute/v1/rates.proto; the planner's RateAggregator turns them into
// the per-key rates λ_b of paper §6). The gateway calls Record(key_id) on every request and its
// reporter calls Drain() once per report interval; the snapshot maps one to one onto a
// ReportRatesRequest (counts[i].count = count, other_count = other_count).
//
// What a snapshot means. A window is the time between two Drain calls. For every window:
//   - total is exactly the number of Record calls counted in the window, and
//     Σ counts[i].count + other_count == total, exactly;
//   - counts lists each key at most once, ascending by key_id; for a listed key with true count f
//     in the window, count ≤ f ≤ count + error. Every count is exact (error 0) while each shard
//     has seen at most max_keys distinct keys in the window and no Record overflowed (below);
//   - every key with f > total / max_keys is listed, unless max_report_keys cut it (below) or
//     Records overflowed (below);
//   - other_count holds everything else: requests of keys evicted from the sketch, the inherited
//     uncertainty (error) of listed keys, and folded keys.
// A Record that runs concurrently with a Drain is counted in that window or in the next one,
// never in both and never in neither. So the reports of one gateway add up to its traffic.
//
// The sketch (operator docs). Each shard keeps a SpaceSaving heavy-hitter sketch with max_keys
// counters (Metwally, Agrawal, El Abbadi 2005; see space_saving.h): a key holding a counter is
// counted exactly from the moment it took the counter; when all counters are taken, a new key
// takes the counter with the smallest count m and inherits m as its error (the evicted key's
// requests go to other_count). A key without a counter has at most the smallest count, which is
// at most the shard's total / max_keys, so the heavy keys hold counters and the light tail is what
// gets folded. Drain merges the shards:
//   count = Σ over shards of the requests seen while the key held a counter (a lower bound);
//   upper = Σ over shards holding the key of its counter + Σ over shards not holding it that
//           evicted in the window of that shard's smallest count (an upper bound, because a key
//           without a counter has at most the smallest count); error = upper − count.
// Fold rule: a key is listed when error == 0 (its count is exact) or upper > total / max_keys
// (it may be a heavy hitter). Otherwise it is folded into other_count: such a key took its
// counter by eviction and even its upper bound is below the heavy-hitter threshold, so listing it
// would only report the churn of the sketch's smallest counter. If more than max_report_keys keys
// remain, the ones with the largest counts (ties: smaller key_id) are kept and the rest folded.
// Sizing: a gateway that sees K distinct keys per window gets exact counts with max_keys ≥ K;
// with fewer counters, keys above total / max_keys of the traffic are always listed, and a listed
// key's error is at most total / max_keys (the smallest counts of all shards add up to no more).
//
// Concurrency design and cost. Record takes no shared lock and never waits: the recorder has
// `shards` shards (a power of two), each a cache-line-aligned try-lock (one atomic flag) guarding
// the shard's active sketch. A thread's home shard is its process-wide thread index (assigned on
// its first Record) modulo `shards`, so with shards ≥ recording threads each shard is used by one
// thread and its flag is uncontended: a Record is one atomic exchange, a hash probe and a heap
// sift, with no allocation (everything is allocated by the constructor). If the home shard is
// busy (another thread mapped to it, or a Drain is swapping it), Record tries the next shards, up
// to kRecordAttempts; if all are busy it increments one shared atomic counter that the next Drain
// adds to other_count (and, since those requests have no key, to every listed key's error; the
// overflow count stays 0 unless more threads than shards record at once).
// Each shard has two sketches. Drain takes each shard's flag only to swap the active sketch with
// the spare one (O(1); a Record finding the flag taken moves on to the next shard), then reads and
// clears the retired sketch without any lock. Drain does the merging, allocates and may spin
// briefly on a flag; Drains are serialised by their own mutex. Drain costs O(shards × max_keys)
// plus sorting the listed keys.
// Measured on the 2-core development machine (the [.benchmark] case of
// tests/dataplane_rate_recorder_test): about 9 ns per Record while the window's keys fit the
// sketch, 30 to 50 ns on a Zipf tail of 100,000 keys that keeps evicting (each eviction sifts the
// new key down the heap past the other smallest counts); the same with one or two threads.
// Memory: 2 × shards × max_keys counters of about 44 to 52 bytes (space_saving.h): with the
// defaults on a 16-thread machine (32 shards, 2048 keys) about 6 MB.
//
// Invariants: Record never locks a mutex, blocks or allocates; every Record is counted in exactly
// one snapshot; given the same options and the same single-threaded sequence of calls the
// snapshots are identical.
//
// Usage:
//   RateRecorder recorder({.max_keys = 4096});        // options pass ValidateOptions
//   recorder.Record(KeyId("tenant-7"));               // on every request, any thread
//   RateSnapshot snapshot = recorder.Drain();         // every report interval, reporter thread
//   for (const KeyCount& k : snapshot.counts) report.add_counts(k.key_id, k.count);
//   report.set_other_count(snapshot.other_count);
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <cassert>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cacheroute/dataplane/space_saving.h"
#include "cacheroute/dataplane/status.h"

namespace cacheroute::dataplane {

struct RateRecorderOptions {
  // Number of shards, a power of two in [1, kMaxShards]; 0 picks bit_ceil(2 × hardware threads),
  // or 16 when the hardware thread count is unknown.
  uint32_t shards = 0;
  // Counters per shard sketch, in [1, kMaxKeys]: keys beyond it in one window share the sketch.
  uint32_t max_keys = 2048;
  // Most keys one snapshot lists, ≥ 1; the proto allows 100,000 per report.
  uint32_t max_report_keys = 100000;
};

// Requests for one key in a window: the true count is in [count, count + error].
struct KeyCount {
  uint64_t key_id = 0;
  uint64_t count = 0;
  uint64_t error = 0;

  bool operator==(const KeyCount&) const = default;
};

struct RateSnapshot {
  std::vector<KeyCount> counts;  // ascending key_id, each key at most once
  uint64_t other_count = 0;      // requests of keys not listed, and listed keys' inherited errors
  uint64_t total = 0;            // Record calls in the window: Σ count + other_count

  bool operator==(const RateSnapshot&) const = default;
};

namespace rate_recorder_internal {

// A small process-wide index per thread, assigned on first use; spreads threads over shards.
inline uint32_t ThreadIndex() {
  static std::atomic<uint32_t> next{0};
  thread_local uint32_t index = std::numeric_limits<uint32_t>::max();
  if (index == std::numeric_limits<uint32_t>::max()) {
    index =
        next.fetch_add(1, std::memory_order_relaxed) & (std::numeric_limits<uint32_t>::max() >> 1);
  }
  return index;
}

}  // namespace rate_recorder_internal

class RateRecorder {
 public:
  static constexpr uint32_t kMaxShards = 1024;
  static constexpr uint32_t kMaxKeys = uint32_t{1} << 24;
  // Shards a Record tries before it counts the request in the shared overflow counter.
  static constexpr uint32_t kRecordAttempts = 4;

  // An error naming the field and value unless every option is in its range.
  static Status ValidateOptions(const RateRecorderOptions& options) {
    if (options.shards > kMaxShards ||
        !(options.shards == 0 || std::has_single_bit(options.shards))) {
      return Status::Error("shards: must be 0 or a power of two <= " + std::to_string(kMaxShards) +
                           ", got " + std::to_string(options.shards));
    }
    if (options.max_keys < 1 || options.max_keys > kMaxKeys) {
      return Status::Error("max_keys: must be in [1, " + std::to_string(kMaxKeys) + "], got " +
                           std::to_string(options.max_keys));
    }
    if (options.max_report_keys < 1) {
      return Status::Error("max_report_keys: must be >= 1, got " +
                           std::to_string(options.max_report_keys));
    }
    return Status::Ok();
  }

  // `options` must pass ValidateOptions (checked only by assert).
  explicit RateRecorder(RateRecorderOptions options = {})
      : max_keys_(options.max_keys), max_report_keys_(options.max_report_keys) {
    assert(ValidateOptions(options).ok);
    uint32_t shards = options.shards;
    if (shards == 0) {
      const unsigned threads = std::thread::hardware_concurrency();
      shards = threads == 0 ? 16 : std::min(kMaxShards, std::bit_ceil(2 * threads));
    }
    shards_.reserve(shards);
    for (uint32_t i = 0; i < shards; ++i) shards_.push_back(std::make_unique<Shard>(max_keys_));
    shard_mask_ = shards - 1;
  }
  RateRecorder(const RateRecorder&) = delete;
  RateRecorder& operator=(const RateRecorder&) = delete;

  // Counts one request for `key_id`. Thread-safe; never blocks, allocates or throws.
  void Record(uint64_t key_id) noexcept {
    const uint32_t home = rate_recorder_internal::ThreadIndex();
    for (uint32_t attempt = 0; attempt < kRecordAttempts; ++attempt) {
      Shard& shard = *shards_[(home + attempt) & shard_mask_];
      if (shard.TryLock()) {
        shard.active->Add(key_id);
        shard.Unlock();
        return;
      }
    }
    overflow_.fetch_add(1, std::memory_order_relaxed);
  }

  // The counts of the window since the last Drain (or construction), and starts a new window.
  // Thread-safe (Drains are serialised); meant for one reporter thread.
  RateSnapshot Drain() {
    std::lock_guard<std::mutex> drain_lock(drain_mu_);
    struct Entry {
      uint64_t key_id;
      uint64_t lower;      // requests seen while the key held the counter
      uint64_t upper;      // the counter
      uint64_t shard_min;  // the shard's smallest count if the shard evicted, else 0
    };
    std::vector<Entry> entries;
    uint64_t total = 0;
    uint64_t absent_bound = 0;  // Σ of shard_min over all shards
    for (const std::unique_ptr<Shard>& shard : shards_) {
      while (!shard->TryLock()) std::this_thread::yield();
      std::swap(shard->active, shard->spare);
      shard->Unlock();
      // Only this thread touches the spare sketch until the next Drain swaps it back in.
      SpaceSaving& retired = *shard->spare;
      total += retired.total();
      const uint64_t shard_min = retired.evicted() ? retired.min_count() : 0;
      absent_bound += shard_min;
      for (uint32_t i = 0; i < retired.size(); ++i) {
        const SpaceSaving::Counter& c = retired.counter(i);
        entries.push_back({c.key, c.count - c.error, c.count, shard_min});
      }
      retired.Clear();
    }
    // A Record that found its shards busy was counted without its key: it may belong to any key.
    const uint64_t overflow = overflow_.exchange(0, std::memory_order_relaxed);
    total += overflow;
    absent_bound += overflow;

    std::sort(entries.begin(), entries.end(),
              [](const Entry& a, const Entry& b) { return a.key_id < b.key_id; });
    RateSnapshot snapshot;
    snapshot.total = total;
    for (size_t i = 0; i < entries.size();) {
      uint64_t lower = 0;
      uint64_t upper = absent_bound;
      const uint64_t key_id = entries[i].key_id;
      for (; i < entries.size() && entries[i].key_id == key_id; ++i) {
        lower += entries[i].lower;
        upper += entries[i].upper - entries[i].shard_min;
      }
      const bool exact = upper == lower;
      const bool maybe_heavy = static_cast<unsigned __int128>(upper) * max_keys_ > total;
      if (exact || maybe_heavy) snapshot.counts.push_back({key_id, lower, upper - lower});
    }
    if (snapshot.counts.size() > max_report_keys_) {
      auto heavier = [](const KeyCount& a, const KeyCount& b) {
        return a.count != b.count ? a.count > b.count : a.key_id < b.key_id;
      };
      std::nth_element(snapshot.counts.begin(), snapshot.counts.begin() + max_report_keys_,
                       snapshot.counts.end(), heavier);
      snapshot.counts.resize(max_report_keys_);
      std::sort(snapshot.counts.begin(), snapshot.counts.end(),
                [](const KeyCount& a, const KeyCount& b) { return a.key_id < b.key_id; });
    }
    uint64_t listed = 0;
    for (const KeyCount& k : snapshot.counts) listed += k.count;
    snapshot.other_count = total - listed;
    return snapshot;
  }

  uint32_t shards() const { return shard_mask_ + 1; }
  uint32_t max_keys() const { return max_keys_; }

 private:
  // Aligned to a cache line so that threads recording on neighbouring shards do not share one.
  struct alignas(64) Shard {
    explicit Shard(uint32_t capacity) : sketch_a(capacity), sketch_b(capacity) {}

    bool TryLock() {
      return !locked.load(std::memory_order_relaxed) &&
             !locked.exchange(true, std::memory_order_acquire);
    }
    void Unlock() { locked.store(false, std::memory_order_release); }

    std::atomic<bool> locked{false};
    SpaceSaving* active = &sketch_a;  // guarded by `locked`
    SpaceSaving* spare = &sketch_b;   // written only by Drain, under `locked`
    SpaceSaving sketch_a;
    SpaceSaving sketch_b;
  };

  const uint32_t max_keys_;
  const uint32_t max_report_keys_;
  uint32_t shard_mask_ = 0;
  std::vector<std::unique_ptr<Shard>> shards_;
  // Records that found kRecordAttempts shards busy; Drain moves them to other_count.
  alignas(64) std::atomic<uint64_t> overflow_{0};
  std::mutex drain_mu_;
};

}  // namespace cacheroute::dataplane
