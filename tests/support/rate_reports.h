// MakeRateReport: the ReportRatesRequest a gateway would send, for tests of the planner's rate
// service. `counts` are key → requests over the 10 s window that ends at `now`; each key is sent
// with its KeyId and its text.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "cacheroute/v1/rates.pb.h"
#include "planner/key_id.h"

namespace cacheroute::testing {

inline v1::ReportRatesRequest MakeRateReport(
    const std::string& gateway, uint64_t sequence, absl::Time now,
    const std::vector<std::pair<std::string, double>>& counts) {
  v1::ReportRatesRequest request;
  request.set_gateway_id(gateway);
  request.set_sequence(sequence);
  const int64_t now_ms = absl::ToUnixMillis(now);
  request.set_window_start_unix_ms(now_ms - 10'000);
  request.set_window_end_unix_ms(now_ms);
  for (const auto& [key, count] : counts) {
    v1::KeyCount* kc = request.add_counts();
    kc->set_key_id(KeyId(key));
    kc->set_key(key);
    kc->set_count(count);
  }
  return request;
}

}  // namespace cacheroute::testing
