// cacheroute-dataplane-bench, end to end: a short run on a small table prints one JSON object
// with every field a reader of the benchmark relies on, and bad flags exit with code 2. The
// figures are timings, so only their presence and sanity (finite, non-negative) are checked.
#include <catch2/catch.hpp>
#include <cmath>
#include <optional>
#include <string>

#include "absl/strings/str_split.h"
#include "tests/support/json_reader.h"
#include "tests/support/run_command.h"

#ifndef CACHEROUTE_DATAPLANE_BENCH_PATH
#error "CACHEROUTE_DATAPLANE_BENCH_PATH must name the cacheroute-dataplane-bench binary"
#endif

namespace cacheroute::dataplane {
namespace {

using client::testing::JsonValue;
using client::testing::ParseJson;

using cacheroute::testing::CommandResult;

// Runs the benchmark with `args`, split at spaces.
CommandResult RunBench(const std::string& args) {
  return cacheroute::testing::RunCommand(CACHEROUTE_DATAPLANE_BENCH_PATH,
                                         absl::StrSplit(args, ' ', absl::SkipEmpty()));
}

constexpr char kSmallRun[] =
    "--keys 2000 --destinations 8 --iterations 20000 --stream 4096 --repeat 1 --installs 2 "
    "--swaps 2";

TEST_CASE("--json prints one object with every figure", "[dataplane_bench]") {
  const CommandResult run = RunBench(std::string(kSmallRun) + " --json");
  REQUIRE(run.exit_code == 0);
  const std::optional<JsonValue> doc = ParseJson(run.out);
  REQUIRE(doc.has_value());
  REQUIRE(doc->type == JsonValue::Type::kObject);
  for (const char* field :
       {"pick_ns_p50", "pick_ns_p99", "pick_ns_p999", "pick_ns_max", "one_thread_ns_per_pick",
        "two_thread_picks_per_second", "two_thread_speedup", "two_thread_cpu_speedup",
        "baseline_ns_per_pick", "baseline_ratio", "build_install_ms_median", "build_install_ms_max",
        "install_ms_max", "swap_installs", "swap_pick_ns_p999", "swap_pick_ns_max",
        "table_bytes_per_key"}) {
    INFO(field);
    const JsonValue* value = doc->Find(field);
    REQUIRE(value != nullptr);
    REQUIRE(value->type == JsonValue::Type::kNumber);
    CHECK(std::isfinite(value->number));
    CHECK(value->number >= 0);
  }
  CHECK(doc->Find("keys")->number == 2000);
  CHECK(doc->Find("destinations")->number == 8);
  CHECK(doc->Find("swap_installs")->number == 2);
  CHECK(doc->Find("table_bytes_per_key")->number <= 24);
}

TEST_CASE("Text output names the targets", "[dataplane_bench]") {
  const CommandResult run = RunBench(kSmallRun);
  REQUIRE(run.exit_code == 0);
  CHECK(run.out.find("target ≤ 50 ns") != std::string::npos);
  CHECK(run.out.find("baseline_ratio") != std::string::npos);
  CHECK(run.out.find("Build + Install") != std::string::npos);
}

TEST_CASE("Bad flags exit with code 2", "[dataplane_bench]") {
  CHECK(RunBench("--keys 0").exit_code == 2);
  CHECK(RunBench("--random sometimes").exit_code == 2);
}

}  // namespace
}  // namespace cacheroute::dataplane
