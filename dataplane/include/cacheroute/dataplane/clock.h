// Clock: how the dataplane reads time, injected so that TTL fallbacks are testable without sleeps.
//
// The Router itself takes `now` as an argument on every call (the caller usually has the time
// already); a Clock is for components that must read time on their own, such as CacheRoutePolicy
// behind the generic Policy interface. Time is a steady_clock time point: table age and TTL only
// need a monotonic clock, never the wall clock.
//
// Invariant: implementations are thread-safe and lock-free.
//
// Usage:
//   ManualClock clock;                       // tests and the simulator: time moves when told
//   clock.Advance(std::chrono::seconds(5));
//   router.Pick(key_id, clock.Now());
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace cacheroute::dataplane {

using Time = std::chrono::steady_clock::time_point;
using Duration = std::chrono::steady_clock::duration;

class Clock {
 public:
  virtual ~Clock() = default;
  virtual Time Now() const = 0;
};

class SteadyClock final : public Clock {
 public:
  Time Now() const override { return std::chrono::steady_clock::now(); }
};

// Starts at the steady_clock epoch (or `start`) and moves only by Advance.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(Time start = Time{}) : ticks_(start.time_since_epoch().count()) {}
  Time Now() const override { return Time(Duration(ticks_.load(std::memory_order_acquire))); }
  void Advance(Duration d) { ticks_.fetch_add(d.count(), std::memory_order_acq_rel); }

 private:
  std::atomic<Duration::rep> ticks_;
};

}  // namespace cacheroute::dataplane
