// See lognormal_rates.h.
#include "tools/eval/workload/lognormal_rates.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace cacheroute::workload {
namespace {

uint64_t SplitMix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

}  // namespace

Rng::Rng(uint64_t seed) {
  uint64_t state = seed;
  for (uint64_t& s : s_) s = SplitMix64(state);
}

uint64_t Rng::Next() {
  const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

double Rng::NextOpenUnit() {
  // 53 random bits, shifted by half a step so the result lies strictly inside (0, 1).
  return (static_cast<double>(Next() >> 11) + 0.5) * 0x1.0p-53;
}

double Rng::NextNormal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  const double radius = std::sqrt(-2.0 * std::log(NextOpenUnit()));
  const double angle = 2.0 * std::numbers::pi * NextOpenUnit();
  spare_ = radius * std::sin(angle);
  has_spare_ = true;
  return radius * std::cos(angle);
}

std::vector<double> GenerateLognormalRates(const LognormalRatesOptions& options) {
  Rng rng(options.seed);
  std::vector<double> rates(options.keys);
  double sum = 0;
  for (double& r : rates) {
    r = std::exp(options.sigma * rng.NextNormal());
    sum += r;
  }
  if (sum <= 0) return rates;
  double scale = options.total_rate / sum;
  const double cap = options.max_key_share * options.total_rate;
  if (options.max_key_share < 1 && options.max_key_share * options.keys >= 1) {
    // Water-filling: the hottest keys are pinned at the cap and the rest share what is left,
    // growing the pinned set until the largest unpinned key is within the cap too.
    std::vector<size_t> order(rates.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return rates[a] > rates[b]; });
    size_t pinned = 0;
    double unpinned_sum = sum;
    while (pinned < order.size()) {
      scale = (options.total_rate - cap * pinned) / unpinned_sum;
      if (rates[order[pinned]] * scale <= cap) break;
      unpinned_sum -= rates[order[pinned]];
      ++pinned;
    }
    for (size_t i = 0; i < pinned; ++i) rates[order[i]] = cap / scale;
  }
  for (double& r : rates) r *= scale;
  return rates;
}

RateDistributionStats ComputeRateStats(std::span<const double> rates) {
  RateDistributionStats stats;
  stats.keys = rates.size();
  if (rates.empty()) return stats;
  std::vector<double> sorted(rates.begin(), rates.end());
  std::sort(sorted.begin(), sorted.end());
  double total = 0, weighted = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    total += sorted[i];
    weighted += static_cast<double>(i + 1) * sorted[i];
  }
  stats.total = total;
  if (total <= 0) return stats;
  const double n = static_cast<double>(sorted.size());
  stats.gini = 2.0 * weighted / (n * total) - (n + 1.0) / n;
  const size_t top = std::max<size_t>(1, static_cast<size_t>(std::llround(0.04 * n)));
  double top_sum = 0;
  for (size_t i = 0; i < top; ++i) top_sum += sorted[sorted.size() - 1 - i];
  stats.top4_share = top_sum / total;
  stats.max_share = sorted.back() / total;
  return stats;
}

}  // namespace cacheroute::workload
