// Test-only: Eventually(done, timeout) polls a condition until it holds or the (generous) timeout
// passes and returns whether it held. For waiting on another process's or thread's progress;
// tests then CHECK the condition itself, never how long it took.
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace cacheroute::testing {

// Polls `done` every few milliseconds until it holds or `timeout` passes; returns whether it held.
// For waiting on another process's or thread's progress, never as a timing assertion.
inline bool Eventually(const std::function<bool()>& done,
                       std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return true;
}

}  // namespace cacheroute::testing
