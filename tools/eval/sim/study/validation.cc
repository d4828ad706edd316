// ValidateStudy; see validation.h.
#include "tools/eval/sim/study/validation.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "base/yaml_fields.h"
#include "tools/eval/sim/engine_profile.h"
#include "tools/eval/sim/fleet.h"
#include "tools/eval/sim/study/policy_labels.h"

namespace cacheroute::sim::study {
namespace {

using base::yaml::Quote;

absl::Status Invalid(absl::string_view field, absl::string_view requirement,
                     absl::string_view got) {
  return base::yaml::Invalid(field, absl::StrCat("must be ", requirement, ", got ", got));
}
std::string Num(double v) { return absl::StrFormat("%g", v); }

// What is run: the name, the fleet's profile and size, the labels, loads, seeds and durations.
absl::Status ValidateRuns(const StudyConfig& c) {
  if (c.name.empty() || !std::all_of(c.name.begin(), c.name.end(), [](char ch) {
        return std::isalnum(static_cast<unsigned char>(ch)) || ch == '-' || ch == '_';
      })) {
    return Invalid("name", "letters, digits, '-' or '_' (it names files)", Quote(c.name));
  }
  if (absl::StatusOr<EngineProfile> p = FindEngineProfile(c.profile); !p.ok()) {
    return Invalid("profile", "one of " + absl::StrJoin(EngineProfileNames(), ", "),
                   Quote(c.profile));
  }
  if (c.destinations < 1) return Invalid("destinations", ">= 1", "0");
  if (c.policies.empty()) return Invalid("policies", "non-empty", "[]");
  std::set<std::string> seen;
  for (size_t i = 0; i < c.policies.size(); ++i) {
    const std::string field = absl::StrCat("policies[", i, "]");
    if (absl::Status s = CheckPolicyLabel(field, c.policies[i]); !s.ok()) return s;
    if (!seen.insert(c.policies[i]).second) {
      return Invalid(field, "distinct", Quote(c.policies[i]) + " again");
    }
  }
  if (c.gateway_counts.empty()) return Invalid("gateway_counts", "non-empty", "[]");
  for (size_t i = 0; i < c.gateway_counts.size(); ++i) {
    if (c.gateway_counts[i] < 1) {
      return Invalid(absl::StrCat("gateway_counts[", i, "]"), ">= 1", "0");
    }
    if (i > 0 && !(c.gateway_counts[i] > c.gateway_counts[i - 1])) {
      return Invalid("gateway_counts", "strictly ascending", absl::StrJoin(c.gateway_counts, ","));
    }
  }
  if (c.loads.empty()) return Invalid("loads", "non-empty", "[]");
  for (size_t i = 0; i < c.loads.size(); ++i) {
    if (!(c.loads[i] > 0 && std::isfinite(c.loads[i]))) {
      return Invalid("loads", "finite and > 0", Num(c.loads[i]));
    }
    if (i > 0 && !(c.loads[i] > c.loads[i - 1])) {
      return Invalid("loads", "strictly ascending", absl::StrJoin(c.loads, ","));
    }
  }
  if (c.seeds.empty()) return Invalid("seeds", "non-empty", "[]");
  if (std::set<uint64_t>(c.seeds.begin(), c.seeds.end()).size() != c.seeds.size()) {
    return Invalid("seeds", "distinct", absl::StrJoin(c.seeds, ","));
  }
  if (!(c.duration_s > 0 && std::isfinite(c.duration_s))) {
    return Invalid("duration_s", "finite and > 0", Num(c.duration_s));
  }
  if (!(c.common_load_qps >= 0 && std::isfinite(c.common_load_qps))) {
    return Invalid("common_load_qps", "finite and >= 0", Num(c.common_load_qps));
  }
  if (!(c.primary_slo_s > 0 && std::isfinite(c.primary_slo_s))) {
    return Invalid("primary_slo_s", "finite and > 0", Num(c.primary_slo_s));
  }
  return absl::OkStatus();
}

// Where the requests come from: whales, a trace, a regime change, drift, and which go together.
absl::Status ValidateRequestSources(const StudyConfig& c, TracePath trace_path) {
  if (!(c.whales.share >= 0 && c.whales.share < 1)) {
    return Invalid("whales.share", "in [0, 1)", Num(c.whales.share));
  }
  if (c.whales.count > 0 && c.whales.share == 0) {
    return Invalid("whales.share", "> 0 when whales.count > 0", "0");
  }
  if (c.trace.enabled) {
    if (c.trace.path.empty() && trace_path == TracePath::kRequired) {
      return Invalid("trace.path",
                     "a Mooncake-format trace file (--trace FILE, or trace: {path: FILE} in a "
                     "study file)",
                     "\"\"");
    }
    if (c.trace.key_blocks < 1) return Invalid("trace.key_blocks", ">= 1", "0");
    if (c.drift.enabled) return Invalid("drift.enabled", "false for a trace-driven study", "true");
  }
  if (c.regime_change.enabled) {
    if (c.trace.enabled || c.drift.enabled) {
      return Invalid("regime_change.enabled", "false with a trace or drift", "true");
    }
    if (!(c.regime_change.at_s > 0 && c.regime_change.at_s < c.fleet.warmup_s + c.duration_s)) {
      return Invalid("regime_change.at_s", "inside the run (0, warm-up + duration)",
                     Num(c.regime_change.at_s));
    }
    workload::WorkloadProfile w = c.regime_change.workload;
    w.qps = c.loads.empty() ? 1 : c.loads.front();
    w.duration_s = c.duration_s + c.fleet.warmup_s;
    if (absl::Status s = workload::ValidateProfile(w); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("regime_change.workload: ", s.message()));
    }
  }
  if (c.drift.enabled) {
    if (c.drift.intervals < 2) return Invalid("drift.intervals", ">= 2", Num(c.drift.intervals));
    if (!(c.drift.sigma >= 0 && c.drift.sigma <= 3)) {
      return Invalid("drift.sigma", "in [0, 3]", Num(c.drift.sigma));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateFleetKnobs(const FleetKnobs& f) {
  if (!(f.share_interval_s >= 0.001 && f.share_interval_s <= 10)) {
    return Invalid("fleet.share_interval_s", "in [0.001, 10]", Num(f.share_interval_s));
  }
  if (!(f.share_delay_s >= 0 && f.share_delay_s <= 10)) {
    return Invalid("fleet.share_delay_s", "in [0, 10]", Num(f.share_delay_s));
  }
  if (!(f.share_loss >= 0 && f.share_loss <= 1)) {
    return Invalid("fleet.share_loss", "in [0, 1]", Num(f.share_loss));
  }
  if (!(f.control_interval_s >= 0.001 && f.control_interval_s <= 3600)) {
    return Invalid("fleet.control_interval_s", "in [0.001, 3600]", Num(f.control_interval_s));
  }
  if (!(f.kv_event_delay_s >= 0 && std::isfinite(f.kv_event_delay_s))) {
    return Invalid("fleet.kv_event_delay_s", "finite and >= 0", Num(f.kv_event_delay_s));
  }
  if (!(f.rate_smoothing_s > 0 && std::isfinite(f.rate_smoothing_s))) {
    return Invalid("fleet.rate_smoothing_s", "finite and > 0", Num(f.rate_smoothing_s));
  }
  if (!(f.q_cap >= 0 && std::isfinite(f.q_cap))) {
    return Invalid("fleet.q_cap", "finite and >= 0", Num(f.q_cap));
  }
  if (f.slots_per_destination < 1) return Invalid("fleet.slots_per_destination", ">= 1", "0");
  if (!(f.warmup_s >= 0 && std::isfinite(f.warmup_s))) {
    return Invalid("fleet.warmup_s", "finite and >= 0", Num(f.warmup_s));
  }
  if (!(f.timeout_s > 0)) return Invalid("fleet.timeout_s", "> 0", Num(f.timeout_s));
  if (!(f.stickiness >= 0 && std::isfinite(f.stickiness))) {
    return Invalid("fleet.stickiness", "finite and >= 0", Num(f.stickiness));
  }
  // A study file spells the dispatch's costs fleet.decode_stall, …
  if (absl::Status s = ValidateDispatchOptions(f.dispatch, "fleet"); !s.ok()) return s;
  if (!(f.kv_budget_share >= 0 && f.kv_budget_share <= 1)) {
    return Invalid("fleet.kv_budget_share", "in [0, 1]", Num(f.kv_budget_share));
  }
  const dataplane::DynamoKvOptions& dynamo = f.parameters.dynamo;
  if (!(dynamo.overlap_score_weight >= 0 && std::isfinite(dynamo.overlap_score_weight))) {
    return Invalid("fleet.dynamo_overlap_score_weight", "finite and >= 0",
                   Num(dynamo.overlap_score_weight));
  }
  if (!(dynamo.temperature >= 0 && std::isfinite(dynamo.temperature))) {
    return Invalid("fleet.dynamo_temperature", "finite and >= 0", Num(dynamo.temperature));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateStudy(const StudyConfig& c, TracePath trace_path) {
  if (absl::Status s = ValidateRuns(c); !s.ok()) return s;
  if (absl::Status s = ValidateRequestSources(c, trace_path); !s.ok()) return s;
  if (absl::Status s = ValidateFleetKnobs(c.fleet); !s.ok()) return s;
  workload::WorkloadProfile w = c.workload;
  w.qps = c.loads.front();
  w.duration_s = c.duration_s + c.fleet.warmup_s;
  if (absl::Status s = workload::ValidateProfile(w); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("workload: ", s.message()));
  }
  return absl::OkStatus();
}

}  // namespace cacheroute::sim::study
