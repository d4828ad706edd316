// Test-only: TableSubscriberOptions for a test gateway that reconnects quickly.
//
// Usage:
//   dataplane::TableSubscriberOptions options = testing::QuickSubscriberOptions("gw", {"d0", "d1"});
//   options.refresh_period = std::chrono::milliseconds(20);  // what a test needs on top
#pragma once

#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "cacheroute/dataplane/grpc/table_subscriber.h"

namespace cacheroute::testing {

// Gateway `gateway_id` over these destinations, reconnecting after 20 ms, backing off 1.6 times
// a failure (jitter 0.2) to at most 200 ms.
inline dataplane::TableSubscriberOptions QuickSubscriberOptions(
    std::string gateway_id, std::vector<std::string> destinations) {
  dataplane::TableSubscriberOptions options;
  options.gateway_id = std::move(gateway_id);
  options.destinations = std::move(destinations);
  options.backoff = {.initial = std::chrono::milliseconds(20),
                     .multiplier = 1.6,
                     .jitter = 0.2,
                     .max = std::chrono::milliseconds(200)};
  return options;
}

}  // namespace cacheroute::testing
