// A study's requests: for each run (offered load, seed), the aggregate workload from the workload
// generator, or a trace rescaled to the load, with what the study adds on top (whales, drifting
// rates, a regime change). Deterministic in (config, load, seed): every policy of a study sees
// the same requests at a given load and seed (paired runs).
//
//   the aggregate  workload::GenerateWorkload(config.workload) at the load, for warm-up +
//                  duration
//   a trace        TraceOptions (study.h): rescaled to the load's mean rate, shifted to start at
//                  0, cut at warm-up + duration; the same for every seed
//   a regime change  the aggregate until regime_change.at_s, then the other workload's (its keys
//                  renamed)
//   drift          the random walk of DriftMultipliers applied by thinning: generated at the
//                  largest multiplier, each request of key k in interval i kept with probability
//                  m[i][k] / max m; the warm-up runs at interval 0's rates
//   whales         whales.count keys carrying whales.share of the load, in a namespace of their
//                  own (no block shared with the aggregate), merged in by arrival time
//
// Usage:
//   absl::StatusOr<workload::Workload> w = BuildRunWorkload(config, /*offered_qps=*/120, 2);
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/eval/sim/study/study.h"
#include "tools/eval/workload/workload.h"

namespace cacheroute::sim::study {

// The requests of one run, for [0, warm-up + duration). A trace that ends within the warm-up at
// this load is InvalidArgument naming fleet.warmup_s.
absl::StatusOr<workload::Workload> BuildRunWorkload(const StudyConfig& config, double offered_qps,
                                                    uint64_t seed);

// The study's trace as read (config.trace must be enabled), keyed by its first key_blocks hash
// ids. InvalidArgument naming trace.path and the file when it is missing, malformed or has fewer
// than two requests at distinct times (no rate to rescale).
absl::StatusOr<workload::Workload> ReadStudyTrace(const StudyConfig& config);

// The study's aggregate workload alone at `qps` for `duration_s` seconds (config.workload with
// that load, seed and duration).
absl::StatusOr<workload::GeneratedWorkload> GenerateStudyWorkload(const StudyConfig& config,
                                                                  double qps, uint64_t seed,
                                                                  double duration_s);

// Per-key rate multipliers of the drift study's random walk: result[i][k] is key k's multiplier
// in interval i (interval 0 is all ones), normalised so that Σ_k base[k]·m[i][k] = Σ_k base[k].
std::vector<std::vector<double>> DriftMultipliers(const std::vector<double>& base_rates,
                                                  const DriftOptions& drift, uint64_t seed);

}  // namespace cacheroute::sim::study
