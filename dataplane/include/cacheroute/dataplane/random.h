// Random: the one source of randomness of the dataplane, injected so that tests and the
// simulator are deterministic (Envoy's RandomGenerator plays the same role).
//
// Invariant: implementations must be safe to call from every thread that routes requests, without
// a lock. SeededRandom is: its state is one atomic counter advanced by a fixed odd step (the
// splitmix64 generator), so concurrent callers each get a distinct draw; a single-threaded caller
// sees the same sequence for the same seed on every run.
//
// Usage:
//   cacheroute::dataplane::SeededRandom random(/*seed=*/42);
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

// A uniform index in [0, n), n > 0, by Lemire's multiply-shift (no modulo, negligible bias for
// the fleet sizes we route over).
inline uint32_t UniformIndex(Random& random, uint32_t n) {
  return static_cast<uint32_t>((static_cast<unsigned __int128>(random.Next()) * n) >> 64);
}

}  // namespace cacheroute::dataplane
