// See arrivals.h.
#include "tools/eval/workload/arrivals.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "cacheroute/dataplane/enum_names.h"

namespace cacheroute::workload {

namespace {

constexpr dataplane::EnumName<ArrivalProcess> kArrivalProcessNames[] = {
    {ArrivalProcess::kPoisson, "poisson"},
    {ArrivalProcess::kGamma, "gamma"},
    {ArrivalProcess::kBootstrap, "bootstrap"},
};
static_assert(dataplane::IsEnumTable(kArrivalProcessNames, ArrivalProcess::kBootstrap));
}  // namespace

std::string_view ArrivalProcessName(ArrivalProcess process) {
  return dataplane::NameOf(kArrivalProcessNames, process);
}

double SampleGamma(double shape, Rng& rng) {
  if (shape < 1) {
    return SampleGamma(shape + 1, rng) * std::pow(rng.NextOpenUnit(), 1.0 / shape);
  }
  const double d = shape - 1.0 / 3.0;
  const double c = 1.0 / std::sqrt(9.0 * d);
  while (true) {
    double x, v;
    do {
      x = rng.NextNormal();
      v = 1.0 + c * x;
    } while (v <= 0);
    v = v * v * v;
    const double u = rng.NextOpenUnit();
    if (u < 1.0 - 0.0331 * x * x * x * x) return d * v;
    if (std::log(u) < 0.5 * x * x + d * (1.0 - v + std::log(v))) return d * v;
  }
}

absl::StatusOr<ArrivalSampler> ArrivalSampler::Create(ArrivalOptions options) {
  ArrivalSampler sampler(std::move(options));
  const ArrivalOptions& o = sampler.options_;
  if (o.process == ArrivalProcess::kGamma && !(o.cv > 0 && o.cv <= 100)) {
    return absl::InvalidArgumentError(absl::StrFormat("cv must be in (0, 100], got %g", o.cv));
  }
  if (o.process == ArrivalProcess::kBootstrap) {
    if (o.bootstrap_gaps.size() < 2) {
      return absl::InvalidArgumentError(
          absl::StrFormat("bootstrap needs at least 2 gaps, got %d", o.bootstrap_gaps.size()));
    }
    if (o.block_length < 1) {
      return absl::InvalidArgumentError("block_length must be at least 1, got 0");
    }
    double sum = 0;
    sampler.gap_prefix_.reserve(o.bootstrap_gaps.size() + 1);
    sampler.gap_prefix_.push_back(0);
    for (size_t i = 0; i < o.bootstrap_gaps.size(); ++i) {
      const double g = o.bootstrap_gaps[i];
      if (!(g >= 0) || !std::isfinite(g)) {
        return absl::InvalidArgumentError(
            absl::StrFormat("bootstrap gap %d must be a finite number >= 0, got %g", i + 1, g));
      }
      sum += g;
      sampler.gap_prefix_.push_back(sum);
    }
    if (!(sum > 0)) return absl::InvalidArgumentError("bootstrap gaps are all zero");
    sampler.gap_mean_ = sum / static_cast<double>(o.bootstrap_gaps.size());
  }
  return sampler;
}

double ArrivalSampler::GammaShape() const {
  switch (options_.process) {
    case ArrivalProcess::kPoisson:
      return 1.0;
    case ArrivalProcess::kGamma:
      return 1.0 / (options_.cv * options_.cv);
    case ArrivalProcess::kBootstrap:
      break;
  }
  return 1.0;
}

void ArrivalSampler::Generate(double rate, double start, double end, Rng& rng,
                              std::vector<double>* out) const {
  if (!(rate > 0) || !(end > start)) return;
  const double mean_gap = 1.0 / rate;
  if (options_.process != ArrivalProcess::kBootstrap) {
    // Gamma(k, θ) gaps with mean kθ = 1/rate. The gap straddling `start` is length-biased,
    // Gamma(k + 1, θ), and `start` falls uniformly inside it.
    const double shape = GammaShape();
    const double scale = mean_gap / shape;
    double t = start + rng.NextOpenUnit() * SampleGamma(shape + 1, rng) * scale;
    while (t < end) {
      out->push_back(t);
      t += SampleGamma(shape, rng) * scale;
    }
    return;
  }
  // Moving-block bootstrap: contiguous runs of block_length gaps from random positions, scaled so
  // the mean gap is 1/rate. The first gap is picked with probability proportional to its length
  // (the one straddling `start`) and the run continues from there for a random remainder.
  const std::vector<double>& gaps = options_.bootstrap_gaps;
  const size_t n = gaps.size();
  const size_t block = std::min<size_t>(options_.block_length, n);
  const double scale = mean_gap / gap_mean_;
  const double total = gap_prefix_.back();
  const double target = rng.NextOpenUnit() * total;
  size_t pos =
      static_cast<size_t>(std::upper_bound(gap_prefix_.begin() + 1, gap_prefix_.end(), target) -
                          (gap_prefix_.begin() + 1));
  pos = std::min(pos, n - 1);
  double t = start + rng.NextOpenUnit() * gaps[pos] * scale;
  size_t left = static_cast<size_t>(rng.Next() % block);  // gaps left in the current run
  while (t < end) {
    out->push_back(t);
    if (left == 0) {
      pos = static_cast<size_t>(rng.Next() % (n - block + 1));
      left = block;
    } else {
      pos = (pos + 1) % n;
    }
    --left;
    t += gaps[pos] * scale;
  }
}

double InterArrivalCv(const std::vector<double>& sorted_times) {
  if (sorted_times.size() < 3) return 0;
  const size_t n = sorted_times.size() - 1;
  double sum = 0;
  for (size_t i = 0; i < n; ++i) sum += sorted_times[i + 1] - sorted_times[i];
  const double mean = sum / static_cast<double>(n);
  if (!(mean > 0)) return 0;
  double sq = 0;
  for (size_t i = 0; i < n; ++i) {
    const double d = sorted_times[i + 1] - sorted_times[i] - mean;
    sq += d * d;
  }
  return std::sqrt(sq / static_cast<double>(n - 1)) / mean;
}

absl::StatusOr<std::vector<double>> ReadGapsFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrFormat("cannot open gaps file \"%s\"", path));
  std::vector<double> gaps;
  std::string line;
  int line_number = 0;
  while (std::getline(in, line)) {
    ++line_number;
    std::string_view text = line;
    while (!text.empty() && absl::ascii_isspace(static_cast<unsigned char>(text.front()))) {
      text.remove_prefix(1);
    }
    while (!text.empty() && absl::ascii_isspace(static_cast<unsigned char>(text.back()))) {
      text.remove_suffix(1);
    }
    if (text.empty() || text[0] == '#') continue;
    double v = 0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
    if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v) || v < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s:%d: expected one non-negative number (a gap), got \"%s\"", path, line_number, text));
    }
    gaps.push_back(v);
  }
  return gaps;
}

}  // namespace cacheroute::workload
