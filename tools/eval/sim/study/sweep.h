// RunStudy: a study swept over its policies × gateway counts × offered loads × seeds on a thread
// pool, then what the report needs beside the runs (the drift churn, the ceiling's inputs;
// analyses.h).
//
// Runs are independent. RunStudy executes them on `jobs` threads and returns them ordered by
// (policy as listed, gateways ascending, load ascending, seed as listed) whatever the thread
// count; every run is seeded, so the result is the same for any number of threads (only wall_s
// differs), and a run behind G gateways is the same whichever other counts the study sweeps. The
// runs are executed in (load, seed, gateways, policy) order so that the runs sharing one workload
// run close together (fleet_runner.h shares it).
//
// Usage:
//   absl::StatusOr<StudyConfig> config = FindStudy("primary");
//   config->seeds = {1, 2, 3};
//   absl::StatusOr<StudyResult> result =
//       RunStudy(*config, MakeFleetRunner(), {.jobs = 2, .progress = &std::cerr});
#pragma once

#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/eval/sim/study/analyses.h"
#include "tools/eval/sim/study/run_record.h"
#include "tools/eval/sim/study/study.h"

namespace cacheroute::sim::study {

// One run of a study.
struct RunSpec {
  const StudyConfig* study = nullptr;
  std::string policy;  // a study label (policy_labels.h)
  uint32_t gateways = 1;
  double offered_qps = 0;
  uint64_t seed = 0;
};

// Performs one run. Called from several threads at once; must be deterministic in its spec.
using RunFunction = std::function<absl::StatusOr<RunRecord>(const RunSpec&)>;

struct RunOptions {
  unsigned jobs = 1;                 // worker threads (≥ 1)
  std::ostream* progress = nullptr;  // one line per finished run, and a total; null: silent
};

struct StudyResult {
  StudyConfig config;
  std::vector<RunRecord> runs;  // ordered by (policy as listed, gateways, load, seed as listed)
  bool has_drift = false;
  DriftResult drift;
  CeilingInputs ceiling;
  double wall_s = 0;
  uint64_t simulated_requests = 0;
};

// Runs every (policy, gateways, load, seed) of the study, after ValidateStudy. The first failing
// run's status is returned, naming the run (the remaining runs are skipped).
absl::StatusOr<StudyResult> RunStudy(const StudyConfig& config, const RunFunction& run,
                                     const RunOptions& options);

}  // namespace cacheroute::sim::study
