// Test-only: FakeLoads, a dataplane::LoadView whose every signal the test sets by hand (as the
// simulator's view would set them): per destination its load, whether it is up, its token work
// (read only with has_work) and its scraped engine metrics.
//
// Usage:
//   FakeLoads loads(4);                      // 4 destinations, idle and up, no token work
//   loads.scraped[2].waiting = 3;
//   Decision d = policy.Route(request, loads);
#pragma once

#include <cstdint>
#include <vector>

#include "cacheroute/dataplane/dispatch.h"

namespace cacheroute::testing {

class FakeLoads final : public dataplane::LoadView {
 public:
  explicit FakeLoads(uint32_t n, bool has_work = false)
      : load(n, 0.0), up(n, true), has_work(has_work), work(n), scraped(n) {}
  uint32_t size() const override { return static_cast<uint32_t>(load.size()); }
  double Load(uint32_t d) const override { return load[d]; }
  bool Up(uint32_t d) const override { return up[d]; }
  bool HasWork() const override { return has_work; }
  dataplane::DestinationWork Work(uint32_t d) const override { return work[d]; }
  dataplane::EngineMetrics Scraped(uint32_t d) const override { return scraped[d]; }
  std::vector<double> load;
  std::vector<bool> up;
  bool has_work = false;
  std::vector<dataplane::DestinationWork> work;
  std::vector<dataplane::EngineMetrics> scraped;
};

}  // namespace cacheroute::testing
