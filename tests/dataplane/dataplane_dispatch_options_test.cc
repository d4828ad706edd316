// DispatchOptions' weights table and their one check: every weight is listed once by the name
// configuration files use, and a weight that is negative, infinite or NaN is refused with its name
// and value.
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <set>
#include <string>

#include "cacheroute/dataplane/dispatch_options.h"

namespace cacheroute::dataplane {
namespace {

TEST_CASE("every cost weight is listed once, by its configuration name") {
  std::set<std::string> names;
  for (const DispatchWeight& w : kDispatchWeights) names.insert(std::string(w.name));
  CHECK(names ==
        std::set<std::string>{"decode_stall", "queue_stall", "queue_wait", "memory_short"});
  DispatchOptions options;
  options.*(kDispatchWeights[0].member) = 7;
  CHECK(options.decode_stall == 7);
}

TEST_CASE("CheckDispatchWeights: the defaults and zeros pass; a bad weight is named") {
  CHECK(CheckDispatchWeights(DispatchOptions{}, "fleet").ok);
  CHECK(CheckDispatchWeights(DispatchOptions::Paper(), "fleet").ok);
  DispatchOptions zero{.decode_stall = 0, .queue_stall = 0, .queue_wait = 0, .memory_short = 0};
  CHECK(CheckDispatchWeights(zero, "fleet").ok);
  for (const DispatchWeight& w : kDispatchWeights) {
    for (double bad : {-1.0, std::numeric_limits<double>::infinity(), std::nan("")}) {
      DispatchOptions options;
      options.*(w.member) = bad;
      const Status s = CheckDispatchWeights(options, "fleet");
      INFO(s.message);
      CHECK_FALSE(s.ok);
      CHECK(s.message.rfind("fleet." + std::string(w.name) + ": must be finite and >= 0, got ",
                            0) == 0);
    }
  }
  DispatchOptions negative;
  negative.queue_wait = -0.5;
  CHECK(CheckDispatchWeights(negative, "x").message ==
        "x.queue_wait: must be finite and >= 0, got -0.5");
}

}  // namespace
}  // namespace cacheroute::dataplane
