// SLO capacity ("the knee") and Student-t intervals, exactly as the paper constructs them
// (the CacheRoute paper, §4 "Metrics and statistics" and Appendix B.2):
//   - for each run (one seed of one policy swept over the offered-load ladder), capacity is the
//     largest ladder point whose p99 TTFT is at or below the SLO and whose failure rate is at most
//     5%. The largest passing point counts even if a lower point fails (p99 is not always
//     monotone in load: a lucky seed can pass at 120 QPS after failing at 100);
//   - a run with no passing point is left-censored: its capacity is below the lowest load tested,
//     reported as 0 ("<min") and flagged. Such a run necessarily fails at the lowest load;
//   - a run that passes at the largest load is right-censored (the true knee is at or above it);
//   - the reported capacity is the mean of the per-run knees (left-censored runs count as 0) with
//     a two-sided 95% Student-t half-width, t(0.975, n−1)·s/√n; with one run there is no interval.
//
// Usage:
//   std::vector<LoadPoint> sweep = {{30, 0.9, 0}, {60, 2.1, 0}, {80, 4.0, 0.01}};
//   Knee knee = FindKnee(sweep, /*slo_s=*/3.5);          // 60 QPS, not censored
//   MeanCi cap = MeanWithCi(std::vector<double>{60, 80, 60});  // 66.7 ± 28.7
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace cacheroute::sim::study {

// The failure-rate gate of Appendix B.2: a load point passes only with at most 5% failures.
inline constexpr double kMaxFailureRate = 0.05;

// One point of one run's load sweep.
struct LoadPoint {
  double offered_qps = 0;
  double p99_ttft_s = 0;
  double failure_rate = 0;  // 0..1
};

struct Knee {
  double capacity_qps = 0;      // the largest passing load; 0 when left-censored
  bool left_censored = false;   // no load point passes (capacity is below the lowest load)
  bool right_censored = false;  // the largest load passes (capacity is at least that load)
  // A load below the knee fails: the sweep is not monotone (the knee still counts).
  bool non_monotone = false;
};

// True when the point meets the SLO and the failure gate. A NaN p99 (no request completed) fails.
bool Passes(const LoadPoint& point, double slo_s, double max_failure_rate = kMaxFailureRate);

// The knee of one run. `points` may come in any order; an empty sweep is left-censored.
Knee FindKnee(std::span<const LoadPoint> points, double slo_s,
              double max_failure_rate = kMaxFailureRate);

// t(0.975, df), the two-sided 95% Student-t critical value, from the standard table for df 1..30
// (12.706, 4.303, 3.182, 2.776, 2.571, …, 2.042). Beyond 30 degrees of freedom it returns the df 30
// value, which is conservative (the exact value falls towards 1.960). df < 1 returns NaN.
double StudentT975(int df);

struct MeanCi {
  double mean = 0;
  double half_width = 0;  // 0 when there is no interval
  int n = 0;
  bool has_interval = false;  // n ≥ 2
};

// Sample mean and 95% Student-t half-width (sample standard deviation, n − 1 in the denominator).
// n = 0 gives a NaN mean; n = 1 gives the value and no interval.
MeanCi MeanWithCi(std::span<const double> values);

// Capacity at one SLO over several runs (seeds) of one policy.
struct Capacity {
  double slo_s = 0;
  MeanCi knee;             // over the per-run knees (left-censored runs as 0)
  std::vector<Knee> runs;  // one per run, in the order given
  int left_censored = 0;   // runs with no passing load
  int right_censored = 0;  // runs passing at the largest load
};

// `runs[i]` is run i's sweep.
Capacity ComputeCapacity(std::span<const std::vector<LoadPoint>> runs, double slo_s,
                         double max_failure_rate = kMaxFailureRate);

// The paper's offered-load ladders (Appendix B.2), in QPS.
std::vector<double> Ladder70B();  // {30, 60, 80, 100, 120, 140, 160, 180, 220, 300}
std::vector<double> Ladder8B();   // {30, 60, 100, 160, 240, 360, 500}

// The SLOs the paper reports: 3.5 s (primary), 2 s and 5 s.
inline constexpr double kPrimarySloS = 3.5;
inline constexpr double kSlosS[] = {2.0, 3.5, 5.0};

}  // namespace cacheroute::sim::study
