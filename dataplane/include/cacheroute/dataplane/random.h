// Random: the one source of randomness of the dataplane, injected so that tests and the
// simulator are deterministic (Envoy's RandomGenerator plays the same role).
//
// Invariant: implementations must be safe to call from every thread that routes requests, without
// a lock. Both generators here are splitmix64 (a counter advanced by a fixed odd step, then mixed);
// a single-threaded caller sees the same sequence for the same seed on every run, and the two
// classes give the same sequence for the same seed on one thread.
//   - SeededRandom keeps one atomic counter for all threads, so concurrent callers each get a
//     distinct draw of one sequence. Deterministic across threads' draws taken together, but every
//     draw writes one shared cache line: two request threads on it lose most of their speedup.
//   - ThreadLocalRandom keeps a counter per (instance, thread): the n-th thread to draw from an
//     instance starts at seed + Mix64(n) (the first at seed itself), so the draw path writes
//     nothing another thread reads. Use it for gateways and benchmarks.
//
// Usage:
//   cacheroute::dataplane::ThreadLocalRandom random(/*seed=*/42);
//   uint32_t d = UniformIndex(random, /*n=*/30);   // in [0, 30)
#pragma once

#include <atomic>
#include <cstdint>

#include "cacheroute/dataplane/key_id.h"

namespace cacheroute::dataplane {

class Random {
 public:
  virtual ~Random() = default;
  // A uniformly distributed 64-bit value. Thread-safe, lock-free, never throws.
  virtual uint64_t Next() = 0;
};

// splitmix64 (Steele, Lea, Flood 2014) with an atomic state.
class SeededRandom final : public Random {
 public:
  explicit SeededRandom(uint64_t seed) : state_(seed) {}
  uint64_t Next() override {
    constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ULL;
    return Mix64(state_.fetch_add(kGamma, std::memory_order_relaxed) + kGamma);
  }

 private:
  std::atomic<uint64_t> state_;
};

// splitmix64 with one state per thread per instance, kept in a small thread_local cache keyed by
// an instance id that is never reused. A thread that draws from more than kThreadCacheSize
// instances in turn evicts the least recently added; coming back to an evicted instance takes a
// fresh per-thread number (a new stream, never a repeat of the old one). The only shared write is
// that number, once per thread per instance.
class ThreadLocalRandom final : public Random {
 public:
  static constexpr int kThreadCacheSize = 8;

  explicit ThreadLocalRandom(uint64_t seed) : seed_(seed), id_(NextInstanceId()) {}
  ThreadLocalRandom(const ThreadLocalRandom&) = delete;
  ThreadLocalRandom& operator=(const ThreadLocalRandom&) = delete;

  uint64_t Next() override {
    constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ULL;
    uint64_t& state = State();
    state += kGamma;
    return Mix64(state);
  }

 private:
  struct Entry {
    uint64_t id = 0;  // 0: empty (instance ids start at 1)
    uint64_t state = 0;
  };
  struct ThreadCache {
    Entry entries[kThreadCacheSize];
    int next_victim = 0;
  };

  static uint64_t NextInstanceId() {
    static std::atomic<uint64_t> next{1};
    return next.fetch_add(1, std::memory_order_relaxed);
  }

  uint64_t& State() {
    thread_local ThreadCache cache;
    for (Entry& e : cache.entries) {
      if (e.id == id_) return e.state;
    }
    Entry& e = cache.entries[cache.next_victim];
    cache.next_victim = (cache.next_victim + 1) % kThreadCacheSize;
    e.id = id_;
    e.state = seed_ + Mix64(threads_.fetch_add(1, std::memory_order_relaxed));
    return e.state;
  }

  const uint64_t seed_;
  const uint64_t id_;
  std::atomic<uint64_t> threads_{0};  // threads that started a stream on this instance
};

// A uniform index in [0, n), n > 0, by Lemire's multiply-shift (no modulo, negligible bias for
// the fleet sizes we route over).
inline uint32_t UniformIndex(Random& random, uint32_t n) {
  return static_cast<uint32_t>((static_cast<unsigned __int128>(random.Next()) * n) >> 64);
}

}  // namespace cacheroute::dataplane
