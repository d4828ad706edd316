// Tests for base/exposition.h: label escaping, numbers and histogram bounds, and a whole page
// through `promtool check metrics` when promtool is installed (the planner's and the gateway's
// metrics tests check whole pages written with it).
#include "base/exposition.h"

#include <catch2/catch.hpp>
#include <limits>
#include <string>
#include <vector>

#include "tests/support/run_command.h"

namespace cacheroute::base {
namespace {

TEST_CASE("Exposition::Label escapes a backslash, a double quote and a line feed, nothing else") {
  CHECK(Exposition::Label("d", "a\\b\"c\nd'e") == "d=\"a\\\\b\\\"c\\nd'e\"");
  CHECK(Exposition::LabelValue("plain") == "plain");
}

TEST_CASE("numbers print in their shortest exact form; infinities and NaN as Prometheus spells") {
  CHECK(Exposition::Number(0.0005) == "0.0005");
  CHECK(Exposition::Number(0.1) == "0.1");
  CHECK(Exposition::Number(2.5) == "2.5");
  CHECK(Exposition::Number(12) == "12");
  CHECK(Exposition::Number(0) == "0");
  CHECK(Exposition::Number(1e-9) == "1e-09");
  CHECK(Exposition::Number(-0.25) == "-0.25");
  CHECK(Exposition::Number(123456789) == "123456789");
  CHECK(Exposition::Number(std::numeric_limits<double>::infinity()) == "+Inf");
  CHECK(Exposition::Number(-std::numeric_limits<double>::infinity()) == "-Inf");
  CHECK(Exposition::Number(std::numeric_limits<double>::quiet_NaN()) == "NaN");
  // Still exact: what is printed reads back as the same double.
  for (const double v : {1.0 / 3, 0.1 + 0.2, 123456.789e-12, 18446744073709551616.0, 1e300}) {
    CHECK(std::stod(Exposition::Number(v)) == v);
  }
}

TEST_CASE("a histogram's bucket bounds are short decimals, and the page passes promtool") {
  Exposition page("cacheroute_test_");
  page.Family("ttft_seconds", "histogram", "Time to first token.");
  const std::vector<double> bounds = {0.0005, 0.001, 0.0025, 0.1, 1, 2.5};
  const std::vector<uint64_t> counts = {1, 0, 2, 0, 3, 0, 1};
  page.Histogram("ttft_seconds", bounds, counts, 4.25, Exposition::Label("arm", "table"));
  page.Gauge("kv_hit_ratio", "Served KV hit.", 0.4);
  const std::string text = page.Take();
  CHECK(text.find("cacheroute_test_ttft_seconds_bucket{arm=\"table\",le=\"0.0005\"} 1\n") !=
        std::string::npos);
  CHECK(text.find("le=\"0.0025\"} 3\n") != std::string::npos);
  CHECK(text.find("le=\"+Inf\"} 7\n") != std::string::npos);
  CHECK(text.find("0000000") == std::string::npos);
  if (system("command -v promtool > /dev/null 2>&1") != 0) {
    WARN("promtool is not on PATH (Debian package prometheus): skipping its check");
    return;
  }
  const testing::CommandResult promtool =
      testing::RunCommand("promtool", {"check", "metrics"}, text);
  INFO(promtool.out << promtool.err);
  CHECK(promtool.exit_code == 0);
  CHECK(promtool.out + promtool.err == "");
}

}  // namespace
}  // namespace cacheroute::base
