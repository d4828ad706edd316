// The study labels: every name a study's `policies:` (and `cacheroute-sim run --policy`) may use,
// each one row {label, description, apply} of one table. The label check of study validation, its
// error message, `cacheroute-sim --help` and what a run of the label is (MakeFleetConfig,
// fleet_runner.h) all read this table.
//
//   the registry's policies   one row per entry of dataplane::BuiltinPolicies(), derived from it:
//                             flat-lb, sticky, chwbl, dualmap, preble, dynamo-kv, llm-d,
//                             cacheroute, cacheroute-paper (a registry alias such as flatlb finds
//                             its policy's row)
//   <table policy>-gated      each table policy behind the rollout gate (docs/gate.md)
//   CacheRoute's variants     cacheroute-bytes, cacheroute-no-plan, cacheroute-replan-10s,
//                             cacheroute-sticky-lpt
//   ablation steps (Table 4)  flat, affinity, replication, lpt
//   drift steps (§5.4)        fresh, stale, held, fresh-sticky
//
// A row's `apply` turns the FleetConfig that MakeFleetConfig built from the study's knobs into the
// label's run. A registry row names the policy; for a table policy it also sets the planner's
// algorithm of the same name and, when the entry's dispatch rule is not the one the study's knobs
// tune, the entry's dispatch. Every other row starts from a registry row. `apply` may refuse a
// label the study cannot run (`held` and `stale` outside a drift study), with InvalidArgument
// naming it.
//
// Usage:
//   const PolicyLabel* label = FindPolicyLabel("lpt");
//   if (label == nullptr) return CheckPolicyLabel("policies[0]", "lpt");   // the error
//   if (absl::Status s = label->apply(study, config); !s.ok()) return s;
#pragma once

#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "tools/eval/sim/fleet.h"
#include "tools/eval/sim/study/study.h"

namespace cacheroute::sim::study {

// cacheroute-bytes (byte-aware planning): the share of each engine's KV cache reserved for
// planned prefixes (FleetConfig::plan_kv_budget_share).
inline constexpr double kKvBudgetShare = 0.5;

struct PolicyLabel {
  std::string label;
  std::string description;  // one line, for --help
  std::function<absl::Status(const StudyConfig& study, FleetConfig& config)> apply;
};

// Every row, in the order errors and --help list them.
std::span<const PolicyLabel> PolicyLabels();

// The row of `label`, or of the policy a registry alias names; null when there is none.
const PolicyLabel* FindPolicyLabel(std::string_view label);

// OK for a label FindPolicyLabel finds; otherwise InvalidArgument "<field>: must be one of <every
// label>; alias …, got \"<label>\"".
absl::Status CheckPolicyLabel(std::string_view field, std::string_view label);

// "  <label padded>  <description>" per row, then one line per registry alias: for --help.
std::string PolicyLabelListing();

}  // namespace cacheroute::sim::study
