// The built-in studies (tools/eval/sim/study/builtin_studies.h): valid, set up as the paper's
// experiments, and listed from one table.
#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "tools/eval/sim/study/builtin_studies.h"
#include "tools/eval/sim/study/capacity.h"
#include "tools/eval/sim/study/validation.h"

namespace cacheroute::sim::study {
namespace {

TEST_CASE("the built-in studies are valid and follow the paper", "[study]") {
  for (const std::string& name : StudyNames()) {
    INFO(name);
    absl::StatusOr<StudyConfig> c = FindStudy(name);
    REQUIRE(c.ok());
    CHECK(c->name == name);
    if (name == "trace") c->trace.path = "given-on-the-command-line.jsonl";
    CHECK(ValidateStudy(*c).ok());
    // One gateway and several, as deployments run them (docs/simulator.md).
    CHECK(c->gateway_counts == std::vector<uint32_t>{1, 4});
  }
  const StudyConfig primary = *FindStudy("primary");
  CHECK(primary.policies == std::vector<std::string>{"flat-lb", "sticky", "chwbl", "dualmap",
                                                     "preble", "dynamo-kv", "llm-d", "cacheroute",
                                                     "cacheroute-paper", "cacheroute-replan-10s",
                                                     "cacheroute-sticky-lpt"});
  CHECK_FALSE(primary.trace.enabled);
  // One plan, held for the run (the paper's tables come from fixed tables; docs/simulator.md).
  CHECK(primary.fleet.max_plans == 1);
  CHECK(primary.fleet.control_interval_s < primary.fleet.warmup_s);
  CHECK(primary.profile == "llama-70b-fp8-tp2-h100");
  CHECK(primary.destinations == 30);
  CHECK(primary.workload.top_k == 128);
  CHECK(primary.loads == Ladder70B());
  const StudyConfig ablation = *FindStudy("ablation");
  CHECK(ablation.profile == "llama-8b-h100");
  CHECK(ablation.loads == Ladder8B());
  CHECK(ablation.policies == std::vector<std::string>{"flat", "affinity", "replication", "lpt",
                                                      "dynamo-kv", "llm-d", "cacheroute"});
  CHECK(ablation.whales.count > 0);
  CHECK(FindStudy("negative")->policies ==
        std::vector<std::string>{"flat-lb", "dynamo-kv", "llm-d", "cacheroute", "cacheroute-paper",
                                 "cacheroute-gated", "cacheroute-paper-gated"});
  const StudyConfig drift = *FindStudy("drift");
  CHECK(drift.drift.enabled);
  CHECK(drift.drift.intervals == 6);
  CHECK(drift.drift.sigma == 0.3);
}

TEST_CASE("one table: names, lookup and the --help listing agree", "[study]") {
  CHECK(StudyNames() == std::vector<std::string>{"primary", "ablation", "negative", "drift",
                                                 "turn-bad", "topk256", "hetero-prefix", "trace"});
  const std::string listing = StudyListing();
  for (const BuiltinStudy& s : BuiltinStudies()) {
    INFO(s.name);
    CHECK(FindStudy(s.name).ok());
    CHECK(!s.summary.empty());
    CHECK(listing.find("  " + std::string(s.name) + "  ") != std::string::npos);
  }
  const absl::Status unknown = FindStudy("nope").status();
  CHECK(absl::IsNotFound(unknown));
  CHECK(unknown.message() ==
        "--study: unknown study \"nope\" (known: primary, ablation, negative, drift, turn-bad, "
        "topk256, hetero-prefix, trace)");
}

TEST_CASE("topk256 is the primary study at top-K 256, its ladder past the primary's", "[study]") {
  const absl::StatusOr<StudyConfig> c = FindStudy("topk256");
  REQUIRE(c.ok());
  const StudyConfig primary = *FindStudy("primary");
  CHECK(c->workload.top_k == 256);
  CHECK(c->profile == primary.profile);
  CHECK(c->destinations == primary.destinations);
  CHECK(c->fleet.max_plans == primary.fleet.max_plans);
  CHECK(c->policies == std::vector<std::string>{"flat-lb", "sticky", "chwbl", "dualmap", "preble",
                                                "dynamo-kv", "llm-d", "cacheroute",
                                                "cacheroute-paper"});
  CHECK(c->loads.back() > Ladder70B().back());
  CHECK(c->primary_slo_s == kPrimarySloS);
}

TEST_CASE("hetero-prefix: the primary setup with heavy-tailed prefixes and small KV caches",
          "[study]") {
  const StudyConfig c = *FindStudy("hetero-prefix");
  const StudyConfig primary = *FindStudy("primary");
  CHECK(c.workload.top_k == primary.workload.top_k);
  CHECK(c.workload.rate_sigma == primary.workload.rate_sigma);
  CHECK(c.workload.context_sigma > 0);
  CHECK(c.workload.context_min_tokens == 200);
  CHECK(c.workload.context_max_tokens == 50000);
  CHECK(c.fleet.kv_blocks == 4000);
  CHECK(c.fleet.max_plans == primary.fleet.max_plans);
  CHECK(std::find(c.policies.begin(), c.policies.end(), "cacheroute-bytes") != c.policies.end());
}

TEST_CASE("the trace study replays a trace the command line names", "[study][trace]") {
  const StudyConfig c = *FindStudy("trace");
  CHECK(c.trace.enabled);
  CHECK(c.trace.path.empty());
  CHECK(c.trace.key_blocks == 2);
  CHECK(c.destinations == 8);
  CHECK(c.profile == "llama-70b-fp8-tp2-h100");
  CHECK(c.policies == std::vector<std::string>{"flat-lb", "sticky", "chwbl", "dualmap", "preble",
                                               "dynamo-kv", "llm-d", "cacheroute",
                                               "cacheroute-paper"});
  // A plan exists before the measured window.
  CHECK(c.fleet.control_interval_s < c.fleet.warmup_s);
}

}  // namespace
}  // namespace cacheroute::sim::study
