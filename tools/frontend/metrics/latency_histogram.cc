// See latency_histogram.h.
#include "tools/frontend/metrics/latency_histogram.h"

#include <algorithm>

namespace cacheroute::frontend {

void LatencyHistogram::Observe(std::chrono::nanoseconds elapsed) {
  const double seconds = std::chrono::duration<double>(elapsed).count();
  const size_t bucket = std::lower_bound(kLatencyBuckets.begin(), kLatencyBuckets.end(), seconds) -
                        kLatencyBuckets.begin();
  buckets_[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<uint64_t>(elapsed.count()), std::memory_order_relaxed);
}

void LatencyHistogram::Reset() {
  for (auto& bucket : buckets_) bucket.store(0, std::memory_order_relaxed);
  sum_ns_.store(0, std::memory_order_relaxed);
}

void LatencyHistogram::Render(base::Exposition& page, absl::string_view name,
                              absl::string_view labels) const {
  std::array<uint64_t, kLatencyBuckets.size() + 1> counts;
  for (size_t b = 0; b < counts.size(); ++b) {
    counts[b] = buckets_[b].load(std::memory_order_relaxed);
  }
  page.Histogram(name, kLatencyBuckets, counts,
                 static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) * 1e-9, labels);
}

}  // namespace cacheroute::frontend
