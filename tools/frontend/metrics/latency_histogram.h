// LatencyHistogram: a duration histogram that request threads fill without a lock (one relaxed
// atomic bucket and the sum per observation) and /metrics renders as a Prometheus histogram. Every
// duration family of the gateway uses the same buckets, kLatencyBuckets (0.5 ms … 300 s).
//
// Usage:
//   LatencyHistogram h;
//   h.Observe(std::chrono::steady_clock::now() - start);           // any thread
//   page.Family("request_duration_seconds", "histogram", "…");     // then, for /metrics:
//   h.Render(page, "request_duration_seconds", /*labels=*/"");
//
// Reset zeroes it (for a new member at a destination index); an observation racing a Reset may
// land on either side of it.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>

#include "absl/strings/string_view.h"
#include "base/exposition.h"

namespace cacheroute::frontend {

inline constexpr std::array<double, 18> kLatencyBuckets = {
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
    0.5,    1,     2.5,    5,     10,   30,    60,   120, 300};

class LatencyHistogram {
 public:
  void Observe(std::chrono::nanoseconds elapsed);
  void Reset();
  // The samples of family `name` (whose Family line the caller wrote), `labels` (may be empty)
  // before `le`.
  void Render(base::Exposition& page, absl::string_view name, absl::string_view labels) const;

 private:
  std::array<std::atomic<uint64_t>, kLatencyBuckets.size() + 1> buckets_{};  // +Inf last
  std::atomic<uint64_t> sum_ns_{0};
};

}  // namespace cacheroute::frontend
