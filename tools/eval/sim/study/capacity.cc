// SLO capacity (Appendix B.2) and Student-t intervals; see capacity.h.
#include "tools/eval/sim/study/capacity.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace cacheroute::sim::study {
namespace {

// t(0.975, df) for df = 1..30, from the standard two-sided 95% table.
constexpr double kT975[30] = {12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306,
                              2.262,  2.228, 2.201, 2.179, 2.160, 2.145, 2.131, 2.120,
                              2.110,  2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064,
                              2.060,  2.056, 2.052, 2.048, 2.045, 2.042};

}  // namespace

bool Passes(const LoadPoint& point, double slo_s, double max_failure_rate) {
  // Written so that a NaN p99 or failure rate fails.
  return point.p99_ttft_s <= slo_s && point.failure_rate <= max_failure_rate;
}

Knee FindKnee(std::span<const LoadPoint> points, double slo_s, double max_failure_rate) {
  Knee knee;
  if (points.empty()) {
    knee.left_censored = true;
    return knee;
  }
  double max_load = -std::numeric_limits<double>::infinity();
  bool any_pass = false;
  for (const LoadPoint& p : points) {
    max_load = std::max(max_load, p.offered_qps);
    if (Passes(p, slo_s, max_failure_rate)) {
      if (!any_pass || p.offered_qps > knee.capacity_qps) knee.capacity_qps = p.offered_qps;
      any_pass = true;
    }
  }
  if (!any_pass) {
    knee.left_censored = true;
    knee.capacity_qps = 0;
    return knee;
  }
  knee.right_censored = knee.capacity_qps >= max_load;
  for (const LoadPoint& p : points) {
    if (p.offered_qps < knee.capacity_qps && !Passes(p, slo_s, max_failure_rate)) {
      knee.non_monotone = true;
    }
  }
  return knee;
}

double StudentT975(int df) {
  if (df < 1) return std::numeric_limits<double>::quiet_NaN();
  return kT975[std::min(df, 30) - 1];
}

MeanCi MeanWithCi(std::span<const double> values) {
  MeanCi out;
  out.n = static_cast<int>(values.size());
  if (values.empty()) {
    out.mean = std::numeric_limits<double>::quiet_NaN();
    return out;
  }
  double sum = 0;
  for (double v : values) sum += v;
  out.mean = sum / out.n;
  if (out.n < 2) return out;
  double squares = 0;
  for (double v : values) squares += (v - out.mean) * (v - out.mean);
  const double sd = std::sqrt(squares / (out.n - 1));
  out.half_width = StudentT975(out.n - 1) * sd / std::sqrt(static_cast<double>(out.n));
  out.has_interval = true;
  return out;
}

Capacity ComputeCapacity(std::span<const std::vector<LoadPoint>> runs, double slo_s,
                         double max_failure_rate) {
  Capacity out;
  out.slo_s = slo_s;
  std::vector<double> knees;
  for (const std::vector<LoadPoint>& run : runs) {
    const Knee knee = FindKnee(run, slo_s, max_failure_rate);
    out.left_censored += knee.left_censored;
    out.right_censored += knee.right_censored;
    knees.push_back(knee.capacity_qps);
    out.runs.push_back(knee);
  }
  out.knee = MeanWithCi(knees);
  return out;
}

std::vector<double> Ladder70B() { return {30, 60, 80, 100, 120, 140, 160, 180, 220, 300}; }
std::vector<double> Ladder8B() { return {30, 60, 100, 160, 240, 360, 500}; }

}  // namespace cacheroute::sim::study
