// Statistics of a request stream, measured on the requests themselves (not on the generator's
// parameters), so generated workloads and converted traces are checked the same way against the
// paper's Table 6: key skew, per-key burstiness, threads, few-shot breaks, prompt sizes, reuse.
//
// Usage:
//   WorkloadStats s = MeasureWorkload(g.workload, {.duration_s = 300,
//                                                  .stable_prefix_tokens =
//                                                  g.stable_prefix_tokens});
#pragma once

#include <cstdint>

#include "tools/eval/workload/workload.h"

namespace cacheroute::workload {

struct StatsOptions {
  // The window the requests were drawn from, for the QPS; 0 = last arrival - first arrival.
  double duration_s = 0;
  // Keys with fewer requests are left out of the median inter-arrival CV (a CV from a handful of
  // gaps is mostly noise).
  uint32_t min_cv_requests = 20;
  // Where the retrieved few-shot block starts (template + context tokens); 0 = not measured.
  uint32_t stable_prefix_tokens = 0;
};

struct WorkloadStats {
  uint64_t requests = 0;
  double duration_s = 0;
  double qps = 0;
  double mean_input_tokens = 0;
  double mean_output_tokens = 0;

  // Requests per key, over keys with at least one request.
  uint64_t keys_with_requests = 0;
  uint64_t largest_key_requests = 0;
  double gini = 0;
  double top4_share = 0;
  double max_key_share = 0;

  // Median over keys with >= min_cv_requests requests of their inter-arrival CV.
  double median_key_cv = 0;
  uint64_t cv_keys = 0;

  // Threads: a thread's length is its largest turn number seen (earlier turns may predate the
  // window). A request is in a multi-turn thread when that length is >= 2.
  uint64_t threads = 0;
  double multi_turn_share = 0;
  double mean_requests_per_thread = 0;

  // Consecutive pairs of one key's requests whose common prefix ends at or before the block that
  // holds the first few-shot token; NaN when stable_prefix_tokens is 0.
  double few_shot_break_rate = 0;
  uint64_t consecutive_pairs = 0;

  // Share of prompt tokens before the current turn, over requests whose current_turn_length is
  // known; NaN if none is.
  double share_before_current_turn = 0;

  // Token-weighted prefix reuse with an unbounded cache: for each request in arrival order, the
  // tokens of its leading blocks already seen in an earlier request, over all prompt tokens.
  double prefix_reuse = 0;
};

WorkloadStats MeasureWorkload(const Workload& workload, const StatsOptions& options = {});

}  // namespace cacheroute::workload
