// See workload_stats.h.
#include "tools/eval/workload/workload_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "tools/eval/workload/arrivals.h"
#include "tools/eval/workload/lognormal_rates.h"

namespace cacheroute::workload {

WorkloadStats MeasureWorkload(const Workload& workload, const StatsOptions& options) {
  WorkloadStats s;
  const std::vector<Request>& requests = workload.requests;
  const double nan = std::numeric_limits<double>::quiet_NaN();
  s.requests = requests.size();
  s.few_shot_break_rate = nan;
  s.share_before_current_turn = nan;
  if (requests.empty()) return s;

  double first = requests.front().arrival_s, last = first;
  double input = 0, output = 0, known_input = 0, before_turn = 0;
  for (const Request& r : requests) {
    first = std::min(first, r.arrival_s);
    last = std::max(last, r.arrival_s);
    input += r.input_length;
    output += r.output_length;
    if (r.current_turn_length > 0) {
      known_input += r.input_length;
      before_turn += r.input_length - std::min(r.input_length, r.current_turn_length);
    }
  }
  const double n = static_cast<double>(requests.size());
  s.duration_s = options.duration_s > 0 ? options.duration_s : last - first;
  s.qps = s.duration_s > 0 ? n / s.duration_s : 0;
  s.mean_input_tokens = input / n;
  s.mean_output_tokens = output / n;
  if (known_input > 0) s.share_before_current_turn = before_turn / known_input;

  // Requests of each key, in the workload's (arrival) order.
  absl::flat_hash_map<std::string_view, uint32_t> key_index;
  std::vector<std::vector<uint32_t>> by_key;
  for (uint32_t i = 0; i < requests.size(); ++i) {
    const auto [it, added] = key_index.try_emplace(requests[i].key, by_key.size());
    if (added) by_key.emplace_back();
    by_key[it->second].push_back(i);
  }
  s.keys_with_requests = by_key.size();
  std::vector<double> counts;
  counts.reserve(by_key.size());
  for (const auto& list : by_key) {
    counts.push_back(static_cast<double>(list.size()));
    s.largest_key_requests = std::max<uint64_t>(s.largest_key_requests, list.size());
  }
  const RateDistributionStats skew = ComputeRateStats(counts);
  s.gini = skew.gini;
  s.top4_share = skew.top4_share;
  s.max_key_share = skew.max_share;

  std::vector<double> cvs, times;
  const uint32_t block = std::max<uint32_t>(1, workload.block_size);
  const size_t few_shot_block = options.stable_prefix_tokens / block;
  uint64_t breaks = 0;
  for (const auto& list : by_key) {
    if (list.size() >= std::max<uint32_t>(3, options.min_cv_requests)) {
      times.clear();
      for (uint32_t i : list) times.push_back(requests[i].arrival_s);
      std::sort(times.begin(), times.end());
      cvs.push_back(InterArrivalCv(times));
    }
    if (options.stable_prefix_tokens == 0) continue;
    for (size_t j = 1; j < list.size(); ++j) {
      const auto& a = requests[list[j - 1]].hash_ids;
      const auto& b = requests[list[j]].hash_ids;
      const size_t common = static_cast<size_t>(
          std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin());
      ++s.consecutive_pairs;
      if (common <= few_shot_block) ++breaks;
    }
  }
  s.cv_keys = cvs.size();
  if (!cvs.empty()) {
    std::sort(cvs.begin(), cvs.end());
    const size_t m = cvs.size();
    s.median_key_cv = m % 2 ? cvs[m / 2] : 0.5 * (cvs[m / 2 - 1] + cvs[m / 2]);
  }
  if (options.stable_prefix_tokens > 0 && s.consecutive_pairs > 0) {
    s.few_shot_break_rate = static_cast<double>(breaks) / static_cast<double>(s.consecutive_pairs);
  }

  absl::flat_hash_map<uint64_t, uint32_t> thread_length;
  for (const Request& r : requests) {
    uint32_t& len = thread_length[r.thread_id];
    len = std::max(len, r.turn);
  }
  s.threads = thread_length.size();
  double turns = 0, in_multi = 0;
  for (const auto& [id, len] : thread_length) turns += len;
  for (const Request& r : requests) in_multi += thread_length[r.thread_id] >= 2;
  s.mean_requests_per_thread = turns / static_cast<double>(s.threads);
  s.multi_turn_share = in_multi / n;

  absl::flat_hash_set<uint64_t> seen;
  double reused = 0;
  for (const Request& r : requests) {
    for (size_t i = 0; i < r.hash_ids.size() && seen.contains(r.hash_ids[i]); ++i) {
      const uint64_t start = i * block;
      if (start >= r.input_length) break;
      reused += static_cast<double>(std::min<uint64_t>(block, r.input_length - start));
    }
    seen.insert(r.hash_ids.begin(), r.hash_ids.end());
  }
  s.prefix_reuse = input > 0 ? reused / input : 0;
  return s;
}

}  // namespace cacheroute::workload
