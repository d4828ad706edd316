// Clock: the one way planner code reads time, so tests and the simulator can inject their own.
//
// Usage:
//   cacheroute::base::RealClock clock;           // production
//   absl::Time t0 = clock.Now();
//   cacheroute::base::ManualClock fake(absl::UnixEpoch());  // tests: time moves when told
//   fake.Advance(absl::Seconds(5));
#pragma once

#include <mutex>

#include "absl/base/thread_annotations.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace cacheroute::base {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() = 0;
};

// Wall-clock time from absl::Now().
class RealClock final : public Clock {
 public:
  absl::Time Now() override { return absl::Now(); }
};

// A clock that moves only when told to; optionally by a fixed step on every read, so code that
// measures an interval between two reads sees a known duration. Thread-safe.
class ManualClock final : public Clock {
 public:
  explicit ManualClock(absl::Time start, absl::Duration step_per_read = absl::ZeroDuration())
      : now_(start), step_(step_per_read) {}

  absl::Time Now() override {
    std::lock_guard<std::mutex> lock(mu_);
    absl::Time t = now_;
    now_ += step_;
    return t;
  }
  void Advance(absl::Duration d) {
    std::lock_guard<std::mutex> lock(mu_);
    now_ += d;
  }

 private:
  std::mutex mu_;
  absl::Time now_ ABSL_GUARDED_BY(mu_);
  const absl::Duration step_;
};

}  // namespace cacheroute::base
