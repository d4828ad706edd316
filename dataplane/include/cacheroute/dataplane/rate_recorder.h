// RateRecorder: per-key request counting on the request path, for the rate reports a gateway sends
// to the planner (proto/cacheroute/v1/rates.proto; the planner's RateAggregator turns them into
// the per-key rates λ_b of paper §6). The gateway calls Record(key_id) on every request and its
// reporter calls Drain() once per report interval; the snapshot maps one to one onto a
// ReportRatesRequest (counts[i].count = count, other_count = other_count).
//
// A window is the time between two Drain calls. In every window total is exactly the number of
// Records counted and Σ counts[i].count + other_count == total; counts lists each key at most
// once, ascending by key_id, with count ≤ true count ≤ count + error (exact while each shard has
// seen at most max_keys distinct keys); every key above total / max_keys is listed unless
// max_report_keys cut it or Records overflowed. A Record that runs concurrently with a Drain is
// counted in that window or in the next one, never in both and never in neither.
//
// Thread safety and invariants: Record from any thread never locks a mutex, blocks or allocates;
// Drains are serialised by their own mutex. Every Record is counted in exactly one snapshot; given
// the same options and the same single-threaded sequence of calls the snapshots are identical.
// The sketch, its error bounds, design and measurements: docs/dataplane.md, "Rate recorder".
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
