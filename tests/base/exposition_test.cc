// Tests for base/exposition.h: label escaping (the planner's and the gateway's metrics tests check
// whole pages written with it).
#include "base/exposition.h"

#include <catch2/catch.hpp>

namespace cacheroute::base {
namespace {

TEST_CASE("Exposition::Label escapes a backslash, a double quote and a line feed, nothing else") {
  CHECK(Exposition::Label("d", "a\\b\"c\nd'e") == "d=\"a\\\\b\\\"c\\nd'e\"");
  CHECK(Exposition::LabelValue("plain") == "plain");
}

}  // namespace
}  // namespace cacheroute::base
