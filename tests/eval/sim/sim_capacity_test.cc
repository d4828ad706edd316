// The SLO-capacity knee and its Student-t interval (tools/eval/sim/study/capacity.h) against
// hand-worked cases: the largest passing load counts, the 5% failure gate, left and right
// censoring, and the 95% half-width for n = 1, 3 and 5.
#include <cmath>
#include <vector>

#include "catch2/catch.hpp"
#include "tools/eval/sim/study/capacity.h"

namespace cacheroute::sim::study {
namespace {

std::vector<LoadPoint> Sweep(const std::vector<double>& loads, const std::vector<double>& p99s,
                             const std::vector<double>& failures = {}) {
  std::vector<LoadPoint> out;
  for (size_t i = 0; i < loads.size(); ++i) {
    out.push_back({loads[i], p99s[i], failures.empty() ? 0.0 : failures[i]});
  }
  return out;
}

TEST_CASE("the knee is the largest load meeting the SLO", "[capacity]") {
  // p99 rises with load; 3.5 s is crossed between 100 and 120 QPS.
  const auto sweep = Sweep({30, 60, 80, 100, 120, 140}, {0.4, 0.9, 1.8, 3.5, 4.2, 9.0});
  const Knee knee = FindKnee(sweep, 3.5);
  CHECK(knee.capacity_qps == 100);  // p99 exactly at the SLO passes ("at or below")
  CHECK_FALSE(knee.left_censored);
  CHECK_FALSE(knee.right_censored);
  CHECK_FALSE(knee.non_monotone);
  CHECK(FindKnee(sweep, 2.0).capacity_qps == 80);
  CHECK(FindKnee(sweep, 5.0).capacity_qps == 120);
}

TEST_CASE("the order of the points does not matter", "[capacity]") {
  const auto sweep = Sweep({120, 30, 100, 60}, {4.0, 0.5, 3.0, 1.0});
  CHECK(FindKnee(sweep, 3.5).capacity_qps == 100);
}

TEST_CASE("with a non-monotone p99 the largest passing point counts", "[capacity]") {
  // Fails at 100 QPS, passes again at 120 and fails from 140 on.
  const auto sweep = Sweep({30, 60, 80, 100, 120, 140}, {0.5, 1.0, 2.0, 3.9, 3.1, 6.0});
  const Knee knee = FindKnee(sweep, 3.5);
  CHECK(knee.capacity_qps == 120);
  CHECK(knee.non_monotone);
  CHECK_FALSE(knee.left_censored);
  CHECK_FALSE(knee.right_censored);
}

TEST_CASE("a point over 5% failures fails whatever its p99", "[capacity]") {
  const auto sweep = Sweep({30, 60, 80, 100}, {0.5, 0.8, 1.0, 1.2}, {0.0, 0.05, 0.051, 0.2});
  const Knee knee = FindKnee(sweep, 3.5);
  CHECK(knee.capacity_qps == 60);  // exactly 5% passes, 5.1% does not
  CHECK_FALSE(knee.right_censored);
  CHECK(Passes({60, 0.8, 0.05}, 3.5));
  CHECK_FALSE(Passes({80, 1.0, 0.051}, 3.5));
}

TEST_CASE("a NaN p99 (nothing completed) fails", "[capacity]") {
  CHECK_FALSE(Passes({30, std::nan(""), 0.0}, 3.5));
  CHECK_FALSE(Passes({30, 1.0, std::nan("")}, 3.5));
}

TEST_CASE("failing at every load is left-censored at 0", "[capacity]") {
  const auto sweep = Sweep({30, 60, 80}, {3.6, 5.0, 9.0});
  const Knee knee = FindKnee(sweep, 3.5);
  CHECK(knee.left_censored);
  CHECK_FALSE(knee.right_censored);
  CHECK(knee.capacity_qps == 0);
  CHECK(FindKnee({}, 3.5).left_censored);
}

TEST_CASE("passing at the largest load is right-censored", "[capacity]") {
  const auto sweep = Sweep({30, 60, 100, 160, 240, 360, 500}, {0.1, 0.1, 0.2, 0.3, 0.5, 0.9, 2.0});
  const Knee knee = FindKnee(sweep, 3.5);
  CHECK(knee.capacity_qps == 500);
  CHECK(knee.right_censored);
  CHECK_FALSE(knee.left_censored);
  // A run passing only at the maximum is right-censored and non-monotone.
  const Knee odd = FindKnee(Sweep({30, 60}, {4.0, 3.0}), 3.5);
  CHECK(odd.capacity_qps == 60);
  CHECK(odd.right_censored);
  CHECK(odd.non_monotone);
}

TEST_CASE("t(0.975) comes from the standard table", "[capacity]") {
  CHECK(StudentT975(1) == 12.706);
  CHECK(StudentT975(2) == 4.303);
  CHECK(StudentT975(4) == 2.776);
  CHECK(StudentT975(7) == 2.365);
  CHECK(StudentT975(30) == 2.042);
  CHECK(StudentT975(200) == 2.042);  // conservative beyond the table
  CHECK(std::isnan(StudentT975(0)));
}

TEST_CASE("the 95% half-width for n = 3 and n = 5", "[capacity]") {
  // n = 3: knees 60, 80, 60. Mean 66.667, s = sqrt(266.67 / 2) = 11.547,
  // half-width = 4.303 · 11.547 / sqrt(3) = 4.303 · 6.6667 = 28.687.
  const MeanCi three = MeanWithCi(std::vector<double>{60, 80, 60});
  CHECK(three.n == 3);
  CHECK(three.has_interval);
  CHECK(three.mean == Approx(66.6667).epsilon(1e-5));
  CHECK(three.half_width == Approx(28.6867).epsilon(1e-4));
  // n = 5: knees 160, 180, 180, 160, 200. Mean 176, s = sqrt(1120 / 4) = 16.733,
  // half-width = 2.776 · 16.733 / sqrt(5) = 20.773.
  const MeanCi five = MeanWithCi(std::vector<double>{160, 180, 180, 160, 200});
  CHECK(five.mean == Approx(176));
  CHECK(five.half_width == Approx(20.7728).epsilon(1e-4));
  // Equal knees: no spread, a zero-width interval.
  const MeanCi same = MeanWithCi(std::vector<double>{100, 100, 100});
  CHECK(same.has_interval);
  CHECK(same.half_width == 0);
}

TEST_CASE("one run has no interval", "[capacity]") {
  const MeanCi one = MeanWithCi(std::vector<double>{120});
  CHECK(one.n == 1);
  CHECK(one.mean == 120);
  CHECK_FALSE(one.has_interval);
  CHECK(one.half_width == 0);
  CHECK(std::isnan(MeanWithCi(std::vector<double>{}).mean));
}

TEST_CASE("capacity over seeds counts censored runs and averages their knees", "[capacity]") {
  const std::vector<double> loads = {30, 60, 80, 100};
  const std::vector<std::vector<LoadPoint>> runs = {
      Sweep(loads, {1.0, 2.0, 3.0, 4.0}),  // knee 80
      Sweep(loads, {4.0, 5.0, 6.0, 7.0}),  // left-censored: 0
      Sweep(loads, {0.5, 0.6, 0.7, 0.8}),  // right-censored: 100
  };
  const Capacity cap = ComputeCapacity(runs, 3.5);
  CHECK(cap.slo_s == 3.5);
  REQUIRE(cap.runs.size() == 3);
  CHECK(cap.runs[0].capacity_qps == 80);
  CHECK(cap.runs[1].left_censored);
  CHECK(cap.runs[2].right_censored);
  CHECK(cap.left_censored == 1);
  CHECK(cap.right_censored == 1);
  CHECK(cap.knee.mean == Approx(60));  // (80 + 0 + 100) / 3
  CHECK(cap.knee.has_interval);
}

TEST_CASE("the paper's ladders", "[capacity]") {
  CHECK(Ladder70B() == std::vector<double>{30, 60, 80, 100, 120, 140, 160, 180, 220, 300});
  CHECK(Ladder8B() == std::vector<double>{30, 60, 100, 160, 240, 360, 500});
}

}  // namespace
}  // namespace cacheroute::sim::study
