// ValidateStudy: whether a study can run, checked before any run starts. Every error is
// InvalidArgument "<field>: must be <requirement>, got <value>", the field spelled as in a study
// file (`fleet.warmup_s`, `policies[2]`) and the value quoted when it is text, as every other
// configuration of the project reports a bad value (base/yaml_fields.h). The study file reader
// prefixes the file's name.
//
// What is checked: the name (it names files), the profile, the policy labels (policy_labels.h:
// known, distinct), the gateway counts (>= 1, ascending), the loads (finite, > 0, ascending), the
// seeds (distinct), every duration and share in range, the trace, drift and regime-change settings
// together, the fleet knobs (the dispatch's costs by ValidateDispatchOptions,
// tools/eval/sim/fleet.h, as the fleet checks them) and the workload (workload::ValidateProfile).
// Not the trace file itself (ReadStudyTrace, workloads.h) and not what a label's run refuses
// (`held` outside a drift study: MakeFleetConfig).
//
// Usage:
//   if (absl::Status s = ValidateStudy(config); !s.ok()) return s;   // "loads: must be …"
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "tools/eval/sim/study/study.h"

namespace cacheroute::sim::study {

// Whether a trace-driven study must already name its trace: a study file may leave it to the
// command line (--trace), which is applied before the study is validated to run.
enum class TracePath : uint8_t { kRequired, kMayComeLater };

absl::Status ValidateStudy(const StudyConfig& config, TracePath trace_path = TracePath::kRequired);

}  // namespace cacheroute::sim::study
