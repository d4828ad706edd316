// ValidateStudy (tools/eval/sim/study/validation.h): every bad field is named with its value, in
// the style of the project's other configurations.
#include <limits>
#include <string>

#include "catch2/catch.hpp"
#include "tools/eval/sim/study/builtin_studies.h"
#include "tools/eval/sim/study/validation.h"

namespace cacheroute::sim::study {
namespace {

std::string Message(const StudyConfig& c) { return std::string(ValidateStudy(c).message()); }

TEST_CASE("validation names the field and the value", "[study]") {
  StudyConfig c = *FindStudy("primary");
  c.loads = {60, 30};
  absl::Status s = ValidateStudy(c);
  CHECK(absl::IsInvalidArgument(s));
  CHECK(s.message() == "loads: must be strictly ascending, got 60,30");
  c = *FindStudy("primary");
  c.seeds = {2, 2};
  CHECK(Message(c) == "seeds: must be distinct, got 2,2");
  c = *FindStudy("primary");
  c.name = "a b";
  CHECK(Message(c) == "name: must be letters, digits, '-' or '_' (it names files), got \"a b\"");
  c = *FindStudy("primary");
  c.duration_s = 0;
  CHECK(Message(c) == "duration_s: must be finite and > 0, got 0");
  c = *FindStudy("primary");
  c.profile = "gpt-9";
  CHECK(Message(c).starts_with("profile: must be one of llama-70b-fp8-tp2-h100, "));
  CHECK(Message(c).ends_with(", got \"gpt-9\""));
}

TEST_CASE("policies are study labels, each once", "[study]") {
  StudyConfig c = *FindStudy("primary");
  c.policies = {"flat-lb", "roundrobin"};
  const std::string message = Message(c);
  CHECK(message.starts_with("policies[1]: must be one of flat-lb, sticky, "));
  CHECK(message.ends_with("; alias flatlb for flat-lb, got \"roundrobin\""));
  c.policies = {"cacheroute", "cacheroute-no-plan", "flatlb", "cacheroute-paper-gated"};
  CHECK(ValidateStudy(c).ok());  // every label of the table, and the registry's aliases
  c.policies = {"cacheroute", "lpt", "cacheroute"};
  CHECK(Message(c) == "policies[2]: must be distinct, got \"cacheroute\" again");
  c.policies = {};
  CHECK(Message(c) == "policies: must be non-empty, got []");
  // Only a table policy has a gated variant.
  c.policies = {"flat-lb-gated"};
  CHECK(Message(c).starts_with("policies[0]: must be one of"));
}

TEST_CASE("the fleet's knobs: the dispatch's costs as the fleet checks them", "[study]") {
  StudyConfig c = *FindStudy("primary");
  c.fleet.dispatch.memory_short = -1;
  CHECK(Message(c) == "fleet.memory_short: must be finite and >= 0, got -1");
  c = *FindStudy("primary");
  c.fleet.kv_event_delay_s = -0.5;
  CHECK(Message(c) == "fleet.kv_event_delay_s: must be finite and >= 0, got -0.5");
  c = *FindStudy("primary");
  c.fleet.dispatch.decode_stall = std::numeric_limits<double>::infinity();
  CHECK(Message(c) == "fleet.decode_stall: must be finite and >= 0, got inf");
  c = *FindStudy("primary");
  c.fleet.control_interval_s = 0;
  CHECK(Message(c) == "fleet.control_interval_s: must be in [0.001, 3600], got 0");
  c = *FindStudy("primary");
  c.fleet.kv_budget_share = 2;
  CHECK(Message(c) == "fleet.kv_budget_share: must be in [0, 1], got 2");
  c = *FindStudy("primary");
  c.workload.top_k = c.workload.keys + 1;
  CHECK(Message(c).starts_with("workload: "));
}

TEST_CASE("a trace-driven study needs its trace, and neither drift nor a regime change",
          "[study][trace]") {
  StudyConfig c = *FindStudy("trace");
  absl::Status s = ValidateStudy(c);
  CHECK(absl::IsInvalidArgument(s));
  CHECK(std::string(s.message()).starts_with("trace.path: must be a Mooncake-format trace file"));
  CHECK(std::string(s.message()).ends_with("got \"\""));
  // A study file may leave it to the command line.
  CHECK(ValidateStudy(c, TracePath::kMayComeLater).ok());
  c.trace.path = "absent.jsonl";
  CHECK(ValidateStudy(c).ok());  // validation does not read the file; ReadStudyTrace does
  c.trace.key_blocks = 0;
  CHECK(Message(c) == "trace.key_blocks: must be >= 1, got 0");
  c.trace.key_blocks = 2;
  c.drift.enabled = true;
  CHECK(Message(c).starts_with("drift.enabled: must be false"));
  c = *FindStudy("turn-bad");
  REQUIRE(ValidateStudy(c).ok());
  c.regime_change.at_s = c.fleet.warmup_s + c.duration_s;
  CHECK(Message(c).starts_with("regime_change.at_s: must be inside the run"));
}

TEST_CASE("whales and drift settings are checked", "[study]") {
  StudyConfig c = *FindStudy("ablation");
  c.whales.share = 1;
  CHECK(Message(c) == "whales.share: must be in [0, 1), got 1");
  c.whales.share = 0;
  CHECK(Message(c) == "whales.share: must be > 0 when whales.count > 0, got 0");
  c = *FindStudy("drift");
  c.drift.intervals = 1;
  CHECK(Message(c) == "drift.intervals: must be >= 2, got 1");
  c.drift.intervals = 6;
  c.drift.sigma = 4;
  CHECK(Message(c) == "drift.sigma: must be in [0, 3], got 4");
}

}  // namespace
}  // namespace cacheroute::sim::study
