// RunStudy; see sweep.h.
#include "tools/eval/sim/study/sweep.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <mutex>
#include <ostream>
#include <string>
#include <thread>
#include <utility>

#include "absl/strings/str_format.h"
#include "tools/eval/sim/study/validation.h"
#include "tools/eval/sim/study/workloads.h"

namespace cacheroute::sim::study {
namespace {

// The load the study's drift churn and ceiling are measured at: its common load, or its last.
double MeasuredLoad(const StudyConfig& config) {
  return config.common_load_qps > 0 ? config.common_load_qps : config.loads.back();
}

// What the report needs beside the runs: the drift churn, and the ceiling's inputs (without
// them the report shows no ceilings; the runs themselves stand).
absl::Status Analyze(const StudyConfig& config, StudyResult& result) {
  if (config.drift.enabled) {
    absl::StatusOr<DriftResult> drift =
        ComputeDriftChurn(config, MeasuredLoad(config), config.seeds.front());
    if (!drift.ok()) return drift.status();
    result.has_drift = true;
    result.drift = *std::move(drift);
  }
  absl::StatusOr<workload::Workload> w =
      BuildRunWorkload(config, MeasuredLoad(config), config.seeds.front());
  const WorkloadReuse reuse = w.ok() ? MeasureReuse(*w) : WorkloadReuse{};
  result.ceiling = {.measured = w.ok(),
                    .mean_prompt_tokens = reuse.mean_prompt_tokens,
                    .mean_output_tokens = reuse.mean_output_tokens,
                    .reuse = reuse.reuse};
  return absl::OkStatus();
}

// One sweep: the jobs in execution order, (load, seed, gateways, policy), so that the runs sharing
// one workload run close together; each result goes to its slot, (policy, gateways, load, seed).
class Sweep {
 public:
  Sweep(const StudyConfig& config, const RunFunction& run, const RunOptions& options)
      : config_(config),
        run_(run),
        options_(options),
        total_(config.policies.size() * config.gateway_counts.size() * config.loads.size() *
               config.seeds.size()),
        records_(total_),
        error_job_(total_) {}

  // Every run on min(jobs, runs) threads, this one included; the lowest failing job's error.
  absl::Status Run() {
    threads_ = std::max(1u, std::min<unsigned>(options_.jobs, total_));
    std::vector<std::thread> pool;
    for (unsigned t = 1; t < threads_; ++t) pool.emplace_back([this] { Work(); });
    Work();
    for (std::thread& t : pool) t.join();
    return error_;
  }

  std::vector<RunRecord> TakeRecords() { return std::move(records_); }
  uint64_t simulated() const { return simulated_; }
  size_t total() const { return total_; }
  unsigned threads() const { return threads_; }
  double elapsed() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }

 private:
  struct Job {
    size_t policy, gateways, load, seed;
  };

  // Job j of the execution order, (load, seed, gateways, policy).
  Job JobAt(size_t j) const {
    const size_t n_policies = config_.policies.size(), n_gateways = config_.gateway_counts.size(),
                 n_seeds = config_.seeds.size();
    const size_t per_seed = n_policies * n_gateways;
    return {.policy = j % n_policies,
            .gateways = j / n_policies % n_gateways,
            .load = j / per_seed / n_seeds,
            .seed = j / per_seed % n_seeds};
  }
  size_t Slot(const Job& job) const {
    const size_t run = job.policy * config_.gateway_counts.size() + job.gateways;
    return (run * config_.loads.size() + job.load) * config_.seeds.size() + job.seed;
  }

  void Work() {
    for (;;) {
      const size_t j = next_.fetch_add(1);
      if (j >= total_ || stop_.load()) return;
      const Job job = JobAt(j);
      const RunSpec spec{.study = &config_,
                         .policy = config_.policies[job.policy],
                         .gateways = config_.gateway_counts[job.gateways],
                         .offered_qps = config_.loads[job.load],
                         .seed = config_.seeds[job.seed]};
      absl::StatusOr<RunRecord> r = run_(spec);
      std::lock_guard<std::mutex> lock(mu_);
      if (!r.ok()) {
        Fail(j, spec, r.status());
        return;
      }
      r->study = config_.name;
      r->policy = spec.policy;
      r->gateways = spec.gateways;
      r->offered_qps = spec.offered_qps;
      r->seed = spec.seed;
      ++done_;
      simulated_ += r->simulated_requests;
      Progress(spec, *r);
      records_[Slot(job)] = *std::move(r);
    }
  }

  // Keeps the lowest failing job's error, for a deterministic one, and stops the sweep.
  void Fail(size_t j, const RunSpec& spec, const absl::Status& status) {
    if (j < error_job_) {
      error_job_ = j;
      error_ = absl::Status(
          status.code(), absl::StrFormat("study %s, policy %s, G = %d, %g QPS, seed %d: %s",
                                         config_.name, spec.policy, spec.gateways, spec.offered_qps,
                                         spec.seed, status.message()));
    }
    stop_.store(true);
  }

  void Progress(const RunSpec& spec, const RunRecord& r) {
    if (options_.progress == nullptr) return;
    const double wall = elapsed();
    *options_.progress << absl::StrFormat(
        "[%*d/%d] %s %-11s G=%-2d %5g QPS seed %-3d p99 TTFT %7.3f s  KV hit %5.1f%%  precision "
        "%5.1f%%  failed %5.2f%%  %7d req in %5.1f s  (%.0f sim req/s overall)\n",
        static_cast<int>(std::to_string(total_).size()), done_, total_, config_.name, spec.policy,
        spec.gateways, spec.offered_qps, spec.seed, r.ttft_p99_s, 100 * r.kv_hit,
        100 * r.routing_precision, 100 * r.failure_rate, r.simulated_requests, r.wall_s,
        wall > 0 ? simulated_ / wall : 0.0);
    options_.progress->flush();
  }

  const StudyConfig& config_;
  const RunFunction& run_;
  const RunOptions& options_;
  const size_t total_;
  const std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  unsigned threads_ = 1;
  std::atomic<size_t> next_{0};
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  // Guarded by mu_.
  std::vector<RunRecord> records_;
  size_t error_job_;
  absl::Status error_;
  size_t done_ = 0;
  uint64_t simulated_ = 0;
};

}  // namespace

absl::StatusOr<StudyResult> RunStudy(const StudyConfig& config, const RunFunction& run,
                                     const RunOptions& options) {
  if (absl::Status s = ValidateStudy(config); !s.ok()) return s;
  Sweep sweep(config, run, options);
  if (absl::Status s = sweep.Run(); !s.ok()) return s;
  StudyResult result;
  result.config = config;
  result.runs = sweep.TakeRecords();
  result.simulated_requests = sweep.simulated();
  result.wall_s = sweep.elapsed();
  if (absl::Status s = Analyze(config, result); !s.ok()) return s;
  if (options.progress != nullptr) {
    *options.progress << absl::StrFormat(
        "study %s: %d runs, %d simulated requests in %.1f s wall (%.0f simulated requests/s, "
        "%d threads)\n",
        config.name, sweep.total(), result.simulated_requests, result.wall_s,
        result.wall_s > 0 ? result.simulated_requests / result.wall_s : 0.0, sweep.threads());
  }
  return result;
}

}  // namespace cacheroute::sim::study
