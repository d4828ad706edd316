// cacheroute-epp-bench, end to end and short: it starts cacheroute-gateway and cacheroute-epp as
// processes, drives the three paths, and prints a row per path and the medians' line; no request
// fails. The figures are timings and are not checked.
#include <catch2/catch.hpp>
#include <string>

#include "absl/strings/match.h"
#include "tests/support/run_command.h"

namespace cacheroute::eval {
namespace {

TEST_CASE("a short run prints every path and the medians, with no failure") {
  const testing::CommandResult run = testing::RunCommand(
      CACHEROUTE_EPP_BENCH_PATH,
      {"--rate", "50", "--seconds", "0.5", "--threads", "2", "--repeat", "1", "--floor"});
  INFO(run.out << run.err);
  REQUIRE(run.exit_code == 0);
  for (const char* path :
       {"1    direct ", "1    gateway ", "1    epp-decision ", "1    floor-decision "}) {
    CHECK(absl::StrContains(run.out, path));
  }
  CHECK(absl::StrContains(run.out, "failures: 0,"));
  CHECK(absl::StrContains(run.out, "median of 1: EPP decision p50 "));
  CHECK(absl::StrContains(run.out, "gateway added latency p50 "));
}

}  // namespace
}  // namespace cacheroute::eval
