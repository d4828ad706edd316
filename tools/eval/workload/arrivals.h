// Per-key arrival processes for the semi-synthetic workload (the CacheRoute paper, §4 and
// §5.4): Poisson, Gamma renewal with a chosen inter-arrival CV (the paper's "CV-matched Gamma"),
// and a moving-block bootstrap of measured inter-arrival gaps rescaled to the key's rate.
//
// Every process starts in equilibrium: the first arrival after `start` is the forward recurrence
// time of a stationary renewal process (a uniform point inside a length-biased gap), so a key's
// rate is right from the first second instead of every key firing at t = start.
//
// Usage:
//   absl::StatusOr<ArrivalSampler> s = ArrivalSampler::Create({.process = ArrivalProcess::kGamma,
//                                                              .cv = 1.93});
//   std::vector<double> times;
//   s->Generate(/*rate=*/0.5, /*start=*/0, /*end=*/300, rng, &times);
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/eval/workload/lognormal_rates.h"

namespace cacheroute::workload {

enum class ArrivalProcess { kPoisson, kGamma, kBootstrap };

std::string_view ArrivalProcessName(ArrivalProcess process);

struct ArrivalOptions {
  ArrivalProcess process = ArrivalProcess::kGamma;
  // kGamma: coefficient of variation of the inter-arrival gaps (1 is Poisson). The paper's
  // Table 6 reports a median per-key CV of 1.93.
  double cv = 1.93;
  // kBootstrap: measured gaps (any unit; only their shape matters, each key rescales them to
  // its own mean gap) and the length of the contiguous blocks drawn from them (the paper: 50).
  std::vector<double> bootstrap_gaps;
  uint32_t block_length = 50;
};

class ArrivalSampler {
 public:
  // InvalidArgument naming the field and the value when the options cannot define a process.
  static absl::StatusOr<ArrivalSampler> Create(ArrivalOptions options);

  // Appends the arrival times in [start, end) of one key with mean rate `rate` (> 0) to `out`.
  void Generate(double rate, double start, double end, Rng& rng, std::vector<double>* out) const;

  const ArrivalOptions& options() const { return options_; }

 private:
  explicit ArrivalSampler(ArrivalOptions options) : options_(std::move(options)) {}

  double GammaShape() const;

  ArrivalOptions options_;
  double gap_mean_ = 1;
  std::vector<double> gap_prefix_;  // kBootstrap: prefix sums of the gaps, for length-biased picks
};

// Gamma(shape, 1) by Marsaglia & Tsang (2000); shape < 1 through Gamma(shape + 1) · U^(1/shape).
double SampleGamma(double shape, Rng& rng);

// Coefficient of variation (sample standard deviation / mean) of the gaps between consecutive
// times; 0 when there are fewer than two gaps.
double InterArrivalCv(const std::vector<double>& sorted_times);

// Reads inter-arrival gaps, one non-negative number per line; blank lines and lines starting with
// '#' are skipped. Errors name the file and line.
absl::StatusOr<std::vector<double>> ReadGapsFile(const std::string& path);

}  // namespace cacheroute::workload
