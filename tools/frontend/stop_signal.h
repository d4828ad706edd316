// StopSignal: how the gateway's background loops (membership, prober, load scraper) and Drain's
// delay learn that the gateway stops. Each waits on the signal rather than sleeping, so one
// Trigger ends every wait at once and a stopping gateway never waits out an interval.
//
// Usage:
//   StopSignal stop;
//   std::thread poller([&] { while (!stop.WaitFor(absl::Seconds(5))) Poll(); });
//   stop.Trigger();  // true the first time only
//   poller.join();
//
// Thread-safe; once triggered it stays triggered.
#pragma once

#include <condition_variable>
#include <mutex>

#include "absl/time/time.h"

namespace cacheroute::frontend {

class StopSignal {
 public:
  // Waits up to `timeout` for Trigger; true once triggered.
  bool WaitFor(absl::Duration timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, absl::ToChronoMicroseconds(timeout), [this] { return triggered_; });
  }
  // Wakes every waiter; true for the call that triggered it, false for later ones.
  bool Trigger() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (triggered_) return false;
      triggered_ = true;
    }
    cv_.notify_all();
    return true;
  }
  bool triggered() const {
    std::lock_guard<std::mutex> lock(mu_);
    return triggered_;
  }

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool triggered_ = false;  // guarded by mu_
};

}  // namespace cacheroute::frontend
