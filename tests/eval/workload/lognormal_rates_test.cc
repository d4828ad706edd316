// Tests for tools/eval/workload/lognormal_rates: the seeded generator and the distribution
// statistics.
#include "tools/eval/workload/lognormal_rates.h"

#include <catch2/catch.hpp>
#include <numeric>
#include <vector>

namespace cacheroute::workload {
namespace {

TEST_CASE("Rng is deterministic per seed and stays inside (0, 1)") {
  Rng a(7), b(7), c(8);
  bool differs = false;
  for (int i = 0; i < 1000; ++i) {
    const uint64_t x = a.Next();
    CHECK(x == b.Next());
    differs |= x != c.Next();
  }
  CHECK(differs);
  Rng u(1);
  for (int i = 0; i < 100000; ++i) {
    const double v = u.NextOpenUnit();
    REQUIRE(v > 0.0);
    REQUIRE(v < 1.0);
  }
}

TEST_CASE("NextNormal has mean 0 and variance 1") {
  Rng rng(3);
  const int n = 200000;
  double sum = 0, sq = 0;
  for (int i = 0; i < n; ++i) {
    const double x = rng.NextNormal();
    sum += x;
    sq += x * x;
  }
  CHECK(sum / n == Approx(0.0).margin(0.01));
  CHECK(sq / n == Approx(1.0).epsilon(0.02));
}

TEST_CASE("ComputeRateStats on known distributions") {
  const std::vector<double> equal = {2, 2, 2, 2};
  RateDistributionStats s = ComputeRateStats(equal);
  CHECK(s.gini == Approx(0.0).margin(1e-12));
  CHECK(s.max_share == 0.25);
  CHECK(s.total == 8);
  const std::vector<double> one_has_all = {0, 0, 0, 4};
  s = ComputeRateStats(one_has_all);
  CHECK(s.gini == Approx(0.75));  // (n-1)/n for n = 4
  CHECK(s.top4_share == 1.0);
  CHECK(ComputeRateStats(std::vector<double>{}).keys == 0);
}

TEST_CASE("sigma 1.65 at 128,824 keys reproduces the paper's Table 6 skew") {
  const std::vector<double> rates =
      GenerateLognormalRates({.keys = 128824, .sigma = 1.65, .total_rate = 176, .seed = 1});
  REQUIRE(rates.size() == 128824);
  CHECK(std::accumulate(rates.begin(), rates.end(), 0.0) == Approx(176.0).epsilon(1e-9));
  const RateDistributionStats s = ComputeRateStats(rates);
  CHECK(s.gini == Approx(0.756).margin(0.015));
  CHECK(s.top4_share == Approx(0.47).margin(0.03));
  CHECK(s.max_share <= 0.003 * (1 + 1e-12));
  // Without the cap this seed's largest key is above 0.3%, so the cap did something.
  const RateDistributionStats uncapped = ComputeRateStats(GenerateLognormalRates(
      {.keys = 128824, .sigma = 1.65, .total_rate = 176, .max_key_share = 1, .seed = 1}));
  CHECK(uncapped.max_share > 0.003);
  CHECK(uncapped.gini == Approx(s.gini).margin(0.005));
  // Same seed, same rates; another seed, other rates.
  CHECK(GenerateLognormalRates({.keys = 1000, .seed = 5}) ==
        GenerateLognormalRates({.keys = 1000, .seed = 5}));
  CHECK(GenerateLognormalRates({.keys = 1000, .seed = 5}) !=
        GenerateLognormalRates({.keys = 1000, .seed = 6}));
}

}  // namespace
}  // namespace cacheroute::workload
