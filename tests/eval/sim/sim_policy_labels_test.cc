// The study-label table (tools/eval/sim/study/policy_labels.h): the registry's policies as rows,
// their gated variants, and what every other label runs.
#include <set>
#include <string>
#include <vector>

#include "cacheroute/dataplane/policy_registry.h"
#include "catch2/catch.hpp"
#include "planner/service/config.h"
#include "tools/eval/sim/study/builtin_studies.h"
#include "tools/eval/sim/study/fleet_runner.h"
#include "tools/eval/sim/study/policy_labels.h"

namespace cacheroute::sim::study {
namespace {

// The FleetConfig of `label` in `study` at `qps` (MakeFleetConfig: the study's knobs, then the
// label's row), seed 2, one gateway.
absl::StatusOr<FleetConfig> Make(const StudyConfig& study, const std::string& label,
                                 double qps = 60) {
  return MakeFleetConfig(
      {.study = &study, .policy = label, .gateways = 1, .offered_qps = qps, .seed = 2});
}

// The run of `label` in `study`.
FleetConfig Run(const StudyConfig& study, const std::string& label) {
  absl::StatusOr<FleetConfig> c = Make(study, label);
  INFO(label);
  REQUIRE(c.ok());
  return *std::move(c);
}

TEST_CASE("the registry's policies are rows, derived from the registry", "[study]") {
  const dataplane::PolicyRegistry& registry = dataplane::BuiltinPolicies();
  const std::span<const PolicyLabel> rows = PolicyLabels();
  REQUIRE(rows.size() > registry.entries().size());
  std::set<std::string> labels;
  for (const PolicyLabel& row : rows) {
    CHECK(labels.insert(row.label).second);  // one row per label
    CHECK(!row.description.empty());
    CHECK(FindPolicyLabel(row.label) == &row);
  }
  const StudyConfig drift = *FindStudy("drift");
  for (size_t i = 0; i < registry.entries().size(); ++i) {
    const dataplane::PolicyInfo& info = registry.entries()[i];
    INFO(info.name);
    CHECK(rows[i].label == info.name);
    CHECK(rows[i].description == info.description);
    const FleetConfig c = Run(drift, info.name);
    CHECK(c.policy == info.name);
    if (info.uses_table) {
      CHECK(c.algorithm == *planner::ParseAlgorithm(info.name));
      CHECK(c.dispatch.rule == info.dispatch.rule);
      // Each table policy has a gated row; no other policy has one.
      const FleetConfig gated = Run(drift, info.name + "-gated");
      CHECK(gated.gate);
      CHECK(gated.gate_options.ttft_envelope_seconds == drift.primary_slo_s);
      CHECK(gated.policy == info.name);
    } else {
      CHECK(FindPolicyLabel(info.name + "-gated") == nullptr);
    }
  }
  // A registry alias finds its policy's row.
  CHECK(FindPolicyLabel("flatlb") == FindPolicyLabel("flat-lb"));
  CHECK(Run(drift, "flatlb").policy == "flat-lb");
  CHECK(FindPolicyLabel("") == nullptr);
}

TEST_CASE("every label of the table runs in a study that can run it", "[study]") {
  const StudyConfig drift = *FindStudy("drift");
  for (const PolicyLabel& row : PolicyLabels()) {
    INFO(row.label);
    CHECK(Make(drift, row.label, 160).ok());
  }
}

TEST_CASE("policy labels map onto the fleet", "[study]") {
  const StudyConfig c = *FindStudy("ablation");
  CHECK(Run(c, "flat").policy == "flat-lb");
  for (const std::string step : {"affinity", "replication", "lpt"}) {
    const FleetConfig f = Run(c, step);
    CHECK(f.policy == "cacheroute-paper");
    CHECK(f.algorithm == planner::Algorithm::kCacheRoutePaper);
    CHECK(f.dispatch.rule == dataplane::DispatchRule::kPaper);
  }
  CHECK(Run(c, "affinity").ablation == PlanAblation::kAffinityOnly);
  CHECK(Run(c, "replication").ablation == PlanAblation::kReplication);
  CHECK(Run(c, "lpt").ablation == PlanAblation::kFull);
  const FleetConfig no_plan = Run(c, "cacheroute-no-plan");
  CHECK(no_plan.policy == "cacheroute");
  CHECK(no_plan.ablation == PlanAblation::kNone);
  CHECK(Run(c, "preble").policy == "preble");
  const StudyConfig d = *FindStudy("drift");
  CHECK(Make(d, "stale", 160)->control_interval_s == 50);
  CHECK(Run(d, "fresh").control_interval_s == d.fleet.control_interval_s);
  const FleetConfig held = Run(d, "held");
  CHECK(held.max_plans == 1);
  CHECK(held.control_interval_s == d.fleet.warmup_s);
  const StudyConfig p = *FindStudy("primary");
  CHECK(Run(p, "cacheroute").max_plans == 1);
  const FleetConfig replan = Run(p, "cacheroute-replan-10s");
  CHECK(replan.control_interval_s == 10);
  CHECK(replan.rate_smoothing_s == 10);
  CHECK(replan.max_plans == 0);
  CHECK(replan.stickiness == 0);
  const FleetConfig sticky = Run(p, "cacheroute-sticky-lpt");
  CHECK(sticky.control_interval_s == 10);
  CHECK(sticky.stickiness == service::PlannerConfig().placement_stickiness);
  CHECK(Run(d, "fresh-sticky").stickiness == sticky.stickiness);
}

TEST_CASE("held and stale need a drift study, and say so", "[study]") {
  const StudyConfig c = *FindStudy("ablation");
  for (const std::string label : {"held", "stale"}) {
    const absl::Status s = Make(c, label).status();
    CHECK(absl::IsInvalidArgument(s));
    CHECK(s.message() == "policies: \"" + label + "\" needs a drift study (drift.enabled)");
  }
}

TEST_CASE("the study's dispatch knobs tune the token-work rule; the paper's rule is its own",
          "[study]") {
  StudyConfig c = *FindStudy("primary");
  c.fleet.dispatch.memory_short = 0.5;
  CHECK(Run(c, "cacheroute").dispatch.memory_short == 0.5);
  CHECK(Run(c, "cacheroute-gated").dispatch.memory_short == 0.5);
  const FleetConfig paper = Run(c, "cacheroute-paper");
  CHECK(paper.dispatch.rule == dataplane::DispatchRule::kPaper);
  CHECK(paper.dispatch.memory_short == dataplane::DispatchOptions::Paper().memory_short);
}

TEST_CASE("byte-aware planning: cacheroute-bytes, and fleet.kv_budget_share but the paper's",
          "[study]") {
  const StudyConfig c = *FindStudy("hetero-prefix");
  const FleetConfig bytes = Run(c, "cacheroute-bytes");
  CHECK(bytes.plan_kv_budget_share == kKvBudgetShare);
  CHECK(bytes.profile.kv_blocks == 4000);
  CHECK(Run(c, "cacheroute").plan_kv_budget_share == 0);
  StudyConfig shared = *FindStudy("drift");
  shared.fleet.kv_budget_share = 0.25;
  CHECK(Run(shared, "fresh").plan_kv_budget_share == 0.25);
  CHECK(Run(shared, "lpt").plan_kv_budget_share == 0);
  CHECK(Run(shared, "cacheroute-paper-gated").plan_kv_budget_share == 0);
}

TEST_CASE("an unknown label's error lists the table; --help lists every row", "[study]") {
  const absl::Status s = CheckPolicyLabel("policies[3]", "round-robin");
  CHECK(absl::IsInvalidArgument(s));
  const std::string message(s.message());
  CHECK(message.starts_with("policies[3]: must be one of flat-lb, sticky, chwbl, dualmap, "));
  CHECK(message.ends_with("fresh-sticky; alias flatlb for flat-lb, got \"round-robin\""));
  CHECK(Make(*FindStudy("primary"), "round-robin").status().message() ==
        "policies" + message.substr(message.find(':')));
  const std::string listing = PolicyLabelListing();
  for (const PolicyLabel& row : PolicyLabels()) {
    INFO(row.label);
    CHECK(message.find(row.label) != std::string::npos);
    CHECK(listing.find("  " + row.label + "  ") != std::string::npos);
  }
  CHECK(listing.find("alias flatlb for flat-lb") != std::string::npos);
}

}  // namespace
}  // namespace cacheroute::sim::study
