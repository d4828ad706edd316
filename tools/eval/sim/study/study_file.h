// Study files: a study as YAML (`cacheroute-sim --config FILE`). `base: NAME` (optional) starts
// from a built-in study (builtin_studies.h), without it from the primary workload's defaults;
// every other key overrides that field. The keys are the StudyConfig's (docs/simulator.md,
// "Studies", lists them): top-level name, description, profile, destinations, policies, loads,
// seeds, duration_s, common_load_qps, primary_slo_s, and the sections workload:, whales:, drift:,
// trace: (a trace: mapping makes the study trace-driven) and fleet:.
//
// Read with base/yaml_fields.h, as the planner's and the gateway's configurations are: every
// error is InvalidArgument "<file>: <key>: <problem>" quoting the value, an unknown key suggests
// the closest known one, a key given twice is an error and typed keys reject quoted scalars.
// The file is then validated (ValidateStudy, validation.h) except for a trace-driven study's
// trace.path, which the command line (--trace) may still give.
//
// Usage:
//   absl::StatusOr<StudyConfig> c = LoadStudyFile("docs/results/primary-gated.yaml");
//   if (!c.ok()) return Fail(2, c.status().message());   // "…yaml: fleet.qcap: unknown key …"
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tools/eval/sim/study/study.h"

namespace cacheroute::sim::study {

absl::StatusOr<StudyConfig> LoadStudyFile(const std::string& path);

// The study in `text`; errors start with `source` (the file's name).
absl::StatusOr<StudyConfig> ParseStudyYaml(absl::string_view text, absl::string_view source);

}  // namespace cacheroute::sim::study
