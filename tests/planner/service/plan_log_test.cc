// Tests for planner/service/plan_log: the lines LogPlanOutcome writes for each kind of outcome,
// read back from stderr.
#include "planner/service/plan_log.h"

#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/status/status.h"
#include "planner/gate.h"
#include "tests/support/temp_dir.h"

namespace cacheroute::service {
namespace {

// What LogPlanOutcome writes to stderr, through a file.
std::string LoggedBy(const absl::StatusOr<PlanOutcome>& outcome) {
  cacheroute::testing::TempDir dir("plan_log_test");
  const std::string path = (dir.path() / "stderr").string();
  std::fflush(stderr);
  const int saved = dup(2);
  std::FILE* file = std::fopen(path.c_str(), "w");
  REQUIRE(file != nullptr);
  dup2(fileno(file), 2);
  LogPlanOutcome(outcome);
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  std::fclose(file);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST_CASE("a published table logs its version and build time") {
  PlanOutcome outcome;
  outcome.changed = true;
  outcome.planned = true;
  outcome.version = {.epoch = 1764, .number = 3};
  outcome.build_seconds = 0.0021;
  const std::string line = LoggedBy(outcome);
  CHECK_THAT(line, Catch::Contains(" info table_published version=1764.3 build_ms=2.1\n"));
  CHECK(line.find('\n') == line.size() - 1);
}

TEST_CASE("an unchanged step logs nothing, a failed one its error") {
  PlanOutcome unchanged;
  unchanged.planned = true;
  CHECK(LoggedBy(unchanged).empty());
  const std::string failed = LoggedBy(absl::InternalError("out of slots"));
  CHECK_THAT(failed, Catch::Contains(" error plan_failed error=\"out of slots\"\n"));
}

TEST_CASE("a gate that moved logs its state, split and reason before the table") {
  PlanOutcome outcome;
  outcome.changed = true;
  outcome.version = {.epoch = 9, .number = 1};
  planner::Gate::Decision decision;
  decision.changed = true;
  decision.state = planner::GateState::kEnabled;
  decision.table_fraction = 1;
  decision.why = "table arm within the envelope";
  outcome.gate = decision;
  const std::string lines = LoggedBy(outcome);
  const size_t gate = lines.find(" info gate_changed state=");
  const size_t table = lines.find(" info table_published version=9.1");
  REQUIRE(gate != std::string::npos);
  REQUIRE(table != std::string::npos);
  CHECK(gate < table);
  CHECK_THAT(lines, Catch::Contains("table_fraction=1 why=\"table arm within the envelope\""));
  // A decision that changed nothing is not logged.
  outcome.gate->changed = false;
  CHECK(LoggedBy(outcome).find("gate_changed") == std::string::npos);
}

}  // namespace
}  // namespace cacheroute::service
