// Semi-synthetic per-key rate distributions, as in the paper's primary workload (Table 6, §2.1):
// lognormal key rates with σ ≈ 1.65 reproduce its Gini (0.756), top-4% share (≈ 47%) and largest
// key share (< 0.3%) at 128,824 keys. Also the statistics that check a distribution against those
// targets. Seeded and deterministic: the generator is our own (xoshiro256** and Box–Muller), not
// std::*_distribution, whose output differs between standard libraries.
//
// Usage:
//   std::vector<double> rates = GenerateLognormalRates({.keys = 128824, .sigma = 1.65,
//                                                       .total_rate = 176.0, .seed = 1});
//   RateDistributionStats s = ComputeRateStats(rates);   // s.gini ≈ 0.756
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace cacheroute::workload {

// xoshiro256** (Blackman & Vigna), seeded through splitmix64.
class Rng {
 public:
  explicit Rng(uint64_t seed);
  uint64_t Next();
  // Uniform in (0, 1): never exactly 0, so log() is safe.
  double NextOpenUnit();
  // Standard normal, by the Box–Muller transform.
  double NextNormal();

 private:
  uint64_t s_[4];
  bool has_spare_ = false;
  double spare_ = 0;
};

struct LognormalRatesOptions {
  uint64_t keys = 128824;
  double sigma = 1.65;      // σ of log(rate)
  double total_rate = 1.0;  // the rates are scaled to sum to this
  // No key gets more than this share of the total (the paper: "no key > 0.3%"). The largest of
  // 128,824 lognormal draws lands near that, above it for some seeds; the excess is spread over
  // the other keys in proportion to their rates. 1 disables the cap.
  double max_key_share = 0.003;
  uint64_t seed = 1;
};

// Rates of `keys` keys, in key order (key i gets element i): lognormal, scaled to total_rate,
// with no key above max_key_share of it (unless keys · max_key_share < 1, where that is impossible
// and the cap is ignored).
std::vector<double> GenerateLognormalRates(const LognormalRatesOptions& options);

struct RateDistributionStats {
  uint64_t keys = 0;
  double total = 0;
  double gini = 0;        // 0 = all equal, → 1 = one key has everything
  double top4_share = 0;  // share of the total held by the top 4% of keys
  double max_share = 0;   // share of the total held by the single largest key
};

RateDistributionStats ComputeRateStats(std::span<const double> rates);

}  // namespace cacheroute::workload
