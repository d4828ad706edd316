// Each run's requests; see workloads.h.
#include "tools/eval/sim/study/workloads.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "base/yaml_fields.h"
#include "cacheroute/dataplane/key_id.h"
#include "tools/eval/workload/mooncake.h"

namespace cacheroute::sim::study {
namespace {

// A request's hash ids and key mapped into a namespace of their own (for whales), keeping the
// chain property: equal ids stay equal, different ids stay different (Mix64 is a bijection).
void Rename(workload::Request& r, absl::string_view prefix, uint64_t salt) {
  for (uint64_t& id : r.hash_ids) id = dataplane::Mix64(id ^ salt);
  r.key = absl::StrCat(prefix, r.key);
  r.thread_id = dataplane::Mix64(r.thread_id ^ salt);
}

// A deterministic uniform in [0, 1) for request `index` of a run.
double Uniform(uint64_t seed, uint64_t index) {
  return static_cast<double>(
             dataplane::Mix64(dataplane::Mix64(seed ^ 0x9e3779b97f4a7c15ULL) ^ index) >> 11) *
         0x1.0p-53;
}

// The trace rescaled to `qps` (mean rate over its span), starting at 0, cut at `span_s`.
absl::StatusOr<workload::Workload> TraceAtLoad(const StudyConfig& config, double qps,
                                               double span_s) {
  CACHEROUTE_ASSIGN_OR_RETURN(workload::Workload w, ReadStudyTrace(config));
  if (absl::Status s = workload::RescaleToQps(w, qps); !s.ok()) return s;
  const double start = w.requests.front().arrival_s;
  for (workload::Request& r : w.requests) r.arrival_s -= start;
  const double end = w.requests.back().arrival_s;
  if (!(end > config.fleet.warmup_s)) {
    return base::yaml::Invalid(
        "fleet.warmup_s",
        absl::StrFormat("must be shorter than the trace at %g QPS (it spans %g s), got %g", qps,
                        end, config.fleet.warmup_s));
  }
  std::erase_if(w.requests, [&](const workload::Request& r) { return r.arrival_s >= span_s; });
  return w;
}

// The study's workload until regime_change.at_s, then the other one's (its keys renamed).
absl::StatusOr<workload::Workload> RegimeChangeAtLoad(const StudyConfig& config, double qps,
                                                      uint64_t seed, double span_s) {
  CACHEROUTE_ASSIGN_OR_RETURN(workload::GeneratedWorkload before,
                              GenerateStudyWorkload(config, qps, seed, span_s));
  StudyConfig other = config;
  other.workload = config.regime_change.workload;
  CACHEROUTE_ASSIGN_OR_RETURN(
      workload::GeneratedWorkload after,
      GenerateStudyWorkload(other, qps, dataplane::Mix64(seed ^ 0x2e91f0c3ULL), span_s));
  const double at = config.regime_change.at_s;
  workload::Workload out;
  out.block_size = before.workload.block_size;
  for (workload::Request& r : before.workload.requests) {
    if (r.arrival_s < at) out.requests.push_back(std::move(r));
  }
  for (workload::Request& r : after.workload.requests) {
    if (r.arrival_s < at) continue;
    Rename(r, "regime-", 0x3c6ef372fe94f82bULL);
    out.requests.push_back(std::move(r));
  }
  return out;
}

// Thinning: generate at the largest multiplier, keep each request of key k in interval i with
// probability m[i][k] / max m. Interval i covers [warm-up + i·L, warm-up + (i+1)·L); the warm-up
// runs at interval 0's rates.
absl::StatusOr<workload::Workload> DriftingAtLoad(const StudyConfig& config, double qps,
                                                  uint64_t seed, double span_s) {
  CACHEROUTE_ASSIGN_OR_RETURN(workload::GeneratedWorkload probe,
                              GenerateStudyWorkload(config, qps, seed, 1));
  std::vector<double> base;
  for (const workload::KeyRate& k : probe.active_keys) base.push_back(k.rate);
  const std::vector<std::vector<double>> m = DriftMultipliers(base, config.drift, seed);
  double m_max = 1;
  for (const auto& row : m) m_max = std::max(m_max, *std::max_element(row.begin(), row.end()));
  CACHEROUTE_ASSIGN_OR_RETURN(workload::GeneratedWorkload g,
                              GenerateStudyWorkload(config, qps * m_max, seed, span_s));
  absl::flat_hash_map<std::string, size_t> rank;
  for (size_t i = 0; i < g.active_keys.size(); ++i) rank[g.active_keys[i].key] = i;
  const double interval = config.duration_s / config.drift.intervals;
  workload::Workload out;
  out.block_size = g.workload.block_size;
  uint64_t index = 0;
  for (workload::Request& r : g.workload.requests) {
    const double t = r.arrival_s - config.fleet.warmup_s;
    const int i = std::clamp(static_cast<int>(std::floor(t / interval)), 0,
                             static_cast<int>(config.drift.intervals) - 1);
    const double keep = m[i][rank.at(r.key)] / m_max;
    if (Uniform(seed, index++) < keep) out.requests.push_back(std::move(r));
  }
  return out;
}

// The study's whales at `offered_qps` merged into `out` by arrival time.
absl::Status AddWhales(const StudyConfig& config, double offered_qps, uint64_t seed, double span_s,
                       workload::Workload& out) {
  workload::WorkloadProfile w = config.workload;
  w.keys = config.whales.count;
  w.rate_sigma = 0;
  w.max_key_share = 1;
  w.top_k = 0;
  w.qps = offered_qps * config.whales.share;
  w.seed = dataplane::Mix64(seed ^ 0x77a1e5ULL);
  w.duration_s = span_s;
  CACHEROUTE_ASSIGN_OR_RETURN(workload::GeneratedWorkload g, workload::GenerateWorkload(w));
  const size_t before = out.requests.size();
  for (workload::Request& r : g.workload.requests) {
    Rename(r, "whale-", 0x5bd1e9955bd1e995ULL);
    out.requests.push_back(std::move(r));
  }
  std::inplace_merge(out.requests.begin(), out.requests.begin() + before, out.requests.end(),
                     [](const workload::Request& a, const workload::Request& b) {
                       return a.arrival_s < b.arrival_s;
                     });
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<workload::GeneratedWorkload> GenerateStudyWorkload(const StudyConfig& config,
                                                                  double qps, uint64_t seed,
                                                                  double duration_s) {
  workload::WorkloadProfile p = config.workload;
  p.qps = qps;
  p.seed = seed;
  p.duration_s = duration_s;
  return workload::GenerateWorkload(p);
}

std::vector<std::vector<double>> DriftMultipliers(const std::vector<double>& base_rates,
                                                  const DriftOptions& drift, uint64_t seed) {
  const size_t n = base_rates.size();
  std::vector<std::vector<double>> m(drift.intervals, std::vector<double>(n, 1.0));
  workload::Rng rng(dataplane::Mix64(seed ^ 0xd21f7a3c5e9b0461ULL));
  double base_total = 0;
  for (double r : base_rates) base_total += r;
  std::vector<double> log_walk(n, 0.0);
  for (uint32_t i = 1; i < drift.intervals; ++i) {
    double total = 0;
    for (size_t k = 0; k < n; ++k) {
      log_walk[k] += drift.sigma * rng.NextNormal();
      m[i][k] = std::exp(log_walk[k]);
      total += base_rates[k] * m[i][k];
    }
    // Rescale so the offered load stays the same in every interval.
    const double scale = total > 0 ? base_total / total : 1.0;
    for (double& x : m[i]) x *= scale;
  }
  return m;
}

absl::StatusOr<workload::Workload> ReadStudyTrace(const StudyConfig& config) {
  const std::string& path = config.trace.path;
  absl::StatusOr<workload::Workload> w =
      workload::ReadMooncakeTraceFile(path, {.key_blocks = config.trace.key_blocks});
  if (!w.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("trace.path: ", w.status().message()));
  }
  if (w->requests.size() < 2 || !(w->requests.back().arrival_s > w->requests.front().arrival_s)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("trace.path: \"%s\" has %d request(s) spanning no time; rescaling to a "
                        "load needs two at different times",
                        path, w->requests.size()));
  }
  return w;
}

absl::StatusOr<workload::Workload> BuildRunWorkload(const StudyConfig& config, double offered_qps,
                                                    uint64_t seed) {
  const double span = config.fleet.warmup_s + config.duration_s;
  const double aggregate_qps = offered_qps * (1 - config.whales.share);
  workload::Workload out;
  if (config.trace.enabled) {
    CACHEROUTE_ASSIGN_OR_RETURN(out, TraceAtLoad(config, aggregate_qps, span));
  } else if (config.regime_change.enabled) {
    CACHEROUTE_ASSIGN_OR_RETURN(out, RegimeChangeAtLoad(config, aggregate_qps, seed, span));
  } else if (config.drift.enabled) {
    CACHEROUTE_ASSIGN_OR_RETURN(out, DriftingAtLoad(config, aggregate_qps, seed, span));
  } else {
    CACHEROUTE_ASSIGN_OR_RETURN(workload::GeneratedWorkload g,
                                GenerateStudyWorkload(config, aggregate_qps, seed, span));
    out = std::move(g.workload);
  }
  if (config.whales.count > 0) {
    if (absl::Status s = AddWhales(config, offered_qps, seed, span, out); !s.ok()) return s;
  }
  return out;
}

}  // namespace cacheroute::sim::study
