// Test-only: WaitFor(condition, timeout) polls a condition until it holds or the (generous)
// timeout passes; tests then CHECK the condition itself, never how long it took.
//
// Usage:
//   REQUIRE(WaitFor([&] { return election.IsLeader(); }, std::chrono::seconds(20)));
#pragma once

#include <chrono>
#include <functional>
#include <thread>

namespace cacheroute::testing {

inline bool WaitFor(const std::function<bool()>& condition, std::chrono::milliseconds timeout,
                    std::chrono::milliseconds poll = std::chrono::milliseconds(10)) {
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  while (!condition()) {
    if (std::chrono::steady_clock::now() > give_up) return condition();
    std::this_thread::sleep_for(poll);
  }
  return true;
}

}  // namespace cacheroute::testing
