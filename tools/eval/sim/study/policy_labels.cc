// The study-label table; see policy_labels.h.
#include "tools/eval/sim/study/policy_labels.h"

#include <algorithm>
#include <cstdlib>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "base/yaml_fields.h"
#include "cacheroute/dataplane/policy_registry.h"
#include "planner/algorithm.h"
#include "planner/service/config.h"

namespace cacheroute::sim::study {
namespace {

// cacheroute-shed's admission, chosen once on the primary study at 1.5x its capacity (900 QPS,
// seed 2; of 0.1, 0.25, 0.5 and 1 s of queued prefill and 1 or 2 s of queue, then of KV usage
// limits 1, 0.95, 0.9, 0.8, 0.7, 0.6, 0.5, 0.4 and 0.3, the most goodput) and held: a
// destination is saturated at 0.1 s of queued prefill at the profile's prefill rate (1,250 tokens
// for llama-70b-fp8-tp2-h100) or at half its KV cache in use; a request waits at most 1 s in a
// queue of 256.
void UseShedding(FleetConfig& c) {
  c.shed = true;
  c.admission = {.saturation_tokens = c.profile.prefill_per_token_s > 0
                                          ? 0.1 / c.profile.prefill_per_token_s
                                          : 16384,
                 .saturation_kv_usage = 0.5,
                 .queue_capacity = 256,
                 .queue_timeout = std::chrono::milliseconds(1000),
                 .retry_after = std::chrono::seconds(1)};
}

const dataplane::PolicyRegistry& Registry() { return dataplane::BuiltinPolicies(); }

// The registry's policy `info`. A table policy plans with the planner's algorithm of the same
// name; the study's dispatch knobs tune the token-work rule, so a table policy of another rule
// (the paper's) runs the dispatch its entry names.
absl::Status ApplyRegistryPolicy(const dataplane::PolicyInfo& info, FleetConfig& c) {
  c.policy = info.name;
  if (!info.uses_table) return absl::OkStatus();
  CACHEROUTE_ASSIGN_OR_RETURN(c.algorithm, planner::ParseAlgorithm(info.name));
  if (info.dispatch.rule != c.dispatch.rule) c.dispatch = info.dispatch;
  // Byte-aware planning is CacheRoute's: Algorithm 1 as published plans by slots.
  if (c.algorithm == planner::Algorithm::kCacheRoutePaper) c.plan_kv_budget_share = 0;
  return absl::OkStatus();
}

// A row that runs the registry's `policy`, then `more`.
PolicyLabel From(std::string_view policy, std::string label, std::string description,
                 std::function<void(const StudyConfig&, FleetConfig&)> more) {
  const dataplane::PolicyInfo* info = Registry().Find(policy);
  if (info == nullptr) std::abort();  // the rows below name built-in policies only
  return {std::move(label), std::move(description),
          [info, more = std::move(more)](const StudyConfig& study, FleetConfig& c) {
            if (absl::Status s = ApplyRegistryPolicy(*info, c); !s.ok()) return s;
            more(study, c);
            return absl::OkStatus();
          }};
}

// `row`, refused outside a drift study.
PolicyLabel DriftOnly(PolicyLabel row) {
  row.apply = [label = row.label, apply = std::move(row.apply)](const StudyConfig& study,
                                                                FleetConfig& c) {
    if (!study.drift.enabled) {
      return absl::InvalidArgumentError(
          absl::StrCat("policies: \"", label, "\" needs a drift study (drift.enabled)"));
    }
    return apply(study, c);
  };
  return row;
}

// Replanning every 10 s from rates smoothed over 10 s, LPT from scratch (stickiness 0) or with
// the planner service's default placement hysteresis (placement_stickiness 0.1,
// deploy/planner.yaml).
void ReplanEvery10s(FleetConfig& c, double stickiness) {
  c.control_interval_s = 10;
  c.rate_smoothing_s = 10;
  c.max_plans = 0;
  c.stickiness = stickiness;
}

std::vector<PolicyLabel> MakeTable() {
  std::vector<PolicyLabel> rows;
  for (const dataplane::PolicyInfo& info : Registry().entries()) {
    rows.push_back({info.name, info.description, [&info](const StudyConfig&, FleetConfig& c) {
                      return ApplyRegistryPolicy(info, c);
                    }});
  }
  for (const dataplane::PolicyInfo& info : Registry().entries()) {
    if (!info.uses_table) continue;
    // The gate's defaults, with the study's SLO as its latency envelope (as an operator would
    // configure ttft_envelope_seconds); chosen on the negative study, then held fixed.
    rows.push_back(From(info.name, info.name + "-gated",
                        info.name + " behind the rollout gate, the study's SLO as its envelope",
                        [](const StudyConfig& study, FleetConfig& c) {
                          c.gate = true;
                          c.gate_options.ttft_envelope_seconds = study.primary_slo_s;
                        }));
  }
  const double service_stickiness = service::PlannerConfig().placement_stickiness;
  rows.push_back(
      From("cacheroute", "cacheroute-bytes",
           "cacheroute with byte-aware planning, half of each KV cache for prefixes",
           [](const StudyConfig&, FleetConfig& c) { c.plan_kv_budget_share = kKvBudgetShare; }));
  rows.push_back(From(
      "cacheroute", "cacheroute-no-plan", "cacheroute's dispatch with no plan: what the plan adds",
      [](const StudyConfig&, FleetConfig& c) { c.ablation = PlanAblation::kNone; }));
  rows.push_back(From("cacheroute", "cacheroute-unshared",
                      "cacheroute with several gateways that do not share: each knows only its own "
                      "requests",
                      [](const StudyConfig&, FleetConfig& c) { c.share = false; }));
  rows.push_back(From("cacheroute", "cacheroute-no-plan-unshared",
                      "cacheroute-no-plan with gateways that do not share",
                      [](const StudyConfig&, FleetConfig& c) {
                        c.ablation = PlanAblation::kNone;
                        c.share = false;
                      }));
  for (const char* dynamo : {"dynamo-kv", "dynamo-kv-exact"}) {
    rows.push_back(From(dynamo, absl::StrCat(dynamo, "-sync"),
                        absl::StrCat(dynamo,
                                     " with Dynamo's router_replica_sync: every gateway counts "
                                     "every gateway's blocks in flight, with no delay"),
                        [](const StudyConfig&, FleetConfig& c) { c.replica_sync = true; }));
  }
  rows.push_back(From("cacheroute", "cacheroute-shed",
                      "cacheroute with shedding: saturated at 0.1 s of queued prefill or half the KV "
                      "cache in use, queue of 256 for up to 1 s, then 429",
                      [](const StudyConfig&, FleetConfig& c) { UseShedding(c); }));
  rows.push_back(From("cacheroute", "cacheroute-replan-10s",
                      "cacheroute replanning every 10 s from 10-s rates, LPT from scratch",
                      [](const StudyConfig&, FleetConfig& c) { ReplanEvery10s(c, 0); }));
  rows.push_back(From("cacheroute", "cacheroute-sticky-lpt",
                      "cacheroute-replan-10s with the planner's placement hysteresis (0.1)",
                      [service_stickiness](const StudyConfig&, FleetConfig& c) {
                        ReplanEvery10s(c, service_stickiness);
                      }));
  rows.push_back(From("flat-lb", "flat", "ablation step 0 (Table 4): Flat-LB",
                      [](const StudyConfig&, FleetConfig&) {}));
  rows.push_back(
      From("cacheroute-paper", "affinity", "ablation: one destination per key, hashed placement",
           [](const StudyConfig&, FleetConfig& c) { c.ablation = PlanAblation::kAffinityOnly; }));
  rows.push_back(
      From("cacheroute-paper", "replication",
           "ablation: + load-proportional replication, hashed placement",
           [](const StudyConfig&, FleetConfig& c) { c.ablation = PlanAblation::kReplication; }));
  rows.push_back(From("cacheroute-paper", "lpt", "ablation: + LPT placement (cacheroute-paper)",
                      [](const StudyConfig&, FleetConfig&) {}));
  rows.push_back(From("cacheroute", "fresh",
                      "drift: cacheroute replanning every fleet.control_interval_s",
                      [](const StudyConfig&, FleetConfig&) {}));
  rows.push_back(DriftOnly(From(
      "cacheroute", "stale", "drift: replanning once per drift interval, from the last one's rates",
      [](const StudyConfig& study, FleetConfig& c) {
        c.control_interval_s = study.duration_s / study.drift.intervals;
      })));
  // One plan at the end of the warm-up (which runs at interval 0's rates), kept to the end.
  rows.push_back(DriftOnly(
      From("cacheroute", "held", "drift: one plan at the end of the warm-up, kept to the end",
           [](const StudyConfig& study, FleetConfig& c) {
             c.control_interval_s = study.fleet.warmup_s > 0 ? study.fleet.warmup_s : 1;
             c.max_plans = 1;
           })));
  rows.push_back(From("cacheroute", "fresh-sticky", "drift: cacheroute-sticky-lpt",
                      [service_stickiness](const StudyConfig&, FleetConfig& c) {
                        ReplanEvery10s(c, service_stickiness);
                      }));
  return rows;
}

const std::vector<PolicyLabel>& Table() {
  static const std::vector<PolicyLabel>* const table = new std::vector<PolicyLabel>(MakeTable());
  return *table;
}

// The registry's aliases as its Known() ends: "alias flatlb for flat-lb"; "" when none.
std::string RegistryAliases() {
  const std::string known = Registry().Known();
  const size_t at = known.find("; ");
  return at == std::string::npos ? "" : known.substr(at + 2);
}

}  // namespace

std::span<const PolicyLabel> PolicyLabels() { return Table(); }

const PolicyLabel* FindPolicyLabel(std::string_view label) {
  for (std::string_view name : {label, Registry().Canonical(label)}) {
    for (const PolicyLabel& row : Table()) {
      if (!name.empty() && row.label == name) return &row;
    }
  }
  return nullptr;
}

absl::Status CheckPolicyLabel(std::string_view field, std::string_view label) {
  if (FindPolicyLabel(label) != nullptr) return absl::OkStatus();
  std::string known = absl::StrJoin(
      Table(), ", ", [](std::string* out, const PolicyLabel& row) { out->append(row.label); });
  if (const std::string aliases = RegistryAliases(); !aliases.empty()) {
    absl::StrAppend(&known, "; ", aliases);
  }
  return base::yaml::Invalid(
      std::string(field),
      absl::StrCat("must be one of ", known, ", got ", base::yaml::Quote(std::string(label))));
}

std::string PolicyLabelListing() {
  size_t width = 0;
  for (const PolicyLabel& row : Table()) width = std::max(width, row.label.size());
  std::string out;
  for (const PolicyLabel& row : Table()) {
    absl::StrAppend(&out, "  ", row.label, std::string(width - row.label.size() + 2, ' '),
                    row.description, "\n");
  }
  if (const std::string aliases = RegistryAliases(); !aliases.empty()) {
    absl::StrAppend(&out, "  (", aliases, ")\n");
  }
  return out;
}

}  // namespace cacheroute::sim::study
