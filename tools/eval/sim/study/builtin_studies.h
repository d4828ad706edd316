// The built-in studies: the paper's experiments, and ours beside them, by name. One table holds
// each study's name, a one-line summary and the function that builds it; FindStudy, StudyNames
// and `cacheroute-sim --help` read it, so a study added to the table is everywhere at once.
//
//   primary        six policies and the modern baselines, 70B fp8 TP2 profile, R = 30, top-K 128,
//                  the 70B ladder (Table 1)
//   ablation       8B profile: Flat-LB, + affinity, + replication, + LPT, with injected whales
//                  (Table 4)
//   negative       a regime with little recoverable prefix work (Table 5)
//   drift          a lognormal random walk of key rates: plans fresh, stale, held (§5.4, App. E)
//   turn-bad       the primary workload turning into the negative one mid-run, for the rollout gate
//   topk256        primary with a top-K 256 active set, the ladder extended to its knees (Table 9)
//   hetero-prefix  reusable prefixes differing by orders of magnitude, small KV caches
//   trace          a Mooncake-format trace (--trace FILE or trace.path) on R = 8 70B destinations
//
// docs/simulator.md, "Studies", says what each models and where it departs from the paper. Every
// built-in study passes ValidateStudy, `trace` once its trace.path is set.
//
// Usage:
//   absl::StatusOr<StudyConfig> primary = FindStudy("primary");
//   for (const BuiltinStudy& s : BuiltinStudies()) std::cout << s.name << "  " << s.summary;
#pragma once

#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "tools/eval/sim/study/study.h"

namespace cacheroute::sim::study {

struct BuiltinStudy {
  absl::string_view name;
  absl::string_view summary;  // one line, for --help
  StudyConfig (*make)();
};

// In the order --help lists them.
std::span<const BuiltinStudy> BuiltinStudies();

// NotFound naming --study and the value, with the known names, for an unknown name. `trace` comes
// without trace.path: set it (the CLI's --trace) before validating or running it.
absl::StatusOr<StudyConfig> FindStudy(absl::string_view name);
std::vector<std::string> StudyNames();

// "  <name padded>  <summary>" per study, one a line: for --help.
std::string StudyListing();

}  // namespace cacheroute::sim::study
