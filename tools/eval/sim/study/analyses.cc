// The study's analyses; see analyses.h.
#include "tools/eval/sim/study/analyses.h"

#include <algorithm>
#include <iterator>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "base/status_macros.h"
#include "cacheroute/dataplane/key_id.h"
#include "planner/algorithm.h"
#include "planner/plan_builder.h"
#include "tools/eval/sim/engine_profile.h"
#include "tools/eval/sim/study/workloads.h"

namespace cacheroute::sim::study {
namespace {

// The drift study's q_cap: fleet.q_cap, or calibrated from the sample's mean lengths.
absl::StatusOr<double> DriftQCap(const StudyConfig& config, const workload::Workload& sample) {
  if (config.fleet.q_cap > 0) return config.fleet.q_cap;
  double prompt = 0, output = 0;
  for (const workload::Request& r : sample.requests) {
    prompt += r.input_length;
    output += r.output_length;
  }
  const double n = std::max<double>(1, sample.requests.size());
  CACHEROUTE_ASSIGN_OR_RETURN(EngineProfile profile, FindEngineProfile(config.profile));
  return CalibrateQCap(profile, prompt / n, prompt / n, output / n);
}

// A plan's expected max/mean load under other rates: each admitted key spreads its new rate
// evenly over its destinations, everything else (the cold tail) evenly over the fleet.
double ImbalanceUnder(const planner::Plan& plan, const std::vector<planner::KeyRate>& rates,
                      uint32_t destinations) {
  absl::flat_hash_map<uint64_t, double> rate;
  double total = 0;
  for (const planner::KeyRate& k : rates) {
    rate[k.key] = k.rate;
    total += k.rate;
  }
  std::vector<double> load(destinations, 0.0);
  double admitted = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    const double lambda = rate[plan.key(i)];
    admitted += lambda;
    for (uint32_t d : plan.destinations(i)) load[d] += lambda / plan.destinations(i).size();
  }
  for (double& l : load) l += (total - admitted) / destinations;
  const double mean = total / destinations;
  return mean > 0 ? *std::max_element(load.begin(), load.end()) / mean : 1.0;
}

absl::flat_hash_map<uint64_t, std::vector<uint32_t>> DestinationSets(const planner::Plan& plan) {
  absl::flat_hash_map<uint64_t, std::vector<uint32_t>> s;
  for (size_t i = 0; i < plan.size(); ++i) {
    s[plan.key(i)].assign(plan.destinations(i).begin(), plan.destinations(i).end());
  }
  return s;
}

// How plan `a` (interval i) and plan `b` (interval i + 1) differ: the cache, count and Jaccard
// churn over the keys in both.
DriftTransition Transition(const planner::Plan& a_plan, const planner::Plan& b_plan) {
  const auto a = DestinationSets(a_plan);
  const auto b = DestinationSets(b_plan);
  uint64_t common = 0, moved = 0, recounted = 0, pairs_a = 0, pairs_b = 0, pairs_both = 0;
  for (const auto& [key, da] : a) pairs_a += da.size();
  for (const auto& [key, db] : b) pairs_b += db.size();
  for (const auto& [key, da] : a) {
    auto it = b.find(key);
    if (it == b.end()) continue;
    const std::vector<uint32_t>& db = it->second;
    ++common;
    moved += da != db;
    recounted += da.size() != db.size();
    std::vector<uint32_t> both;
    std::set_intersection(da.begin(), da.end(), db.begin(), db.end(), std::back_inserter(both));
    pairs_both += both.size();
  }
  DriftTransition t;
  t.cache_churn = common > 0 ? static_cast<double>(moved) / common : 0;
  t.count_churn = common > 0 ? static_cast<double>(recounted) / common : 0;
  const uint64_t pairs_union = pairs_a + pairs_b - pairs_both;
  t.jaccard_churn = pairs_union > 0 ? 1 - static_cast<double>(pairs_both) / pairs_union : 0;
  return t;
}

}  // namespace

absl::StatusOr<DriftResult> ComputeDriftChurn(const StudyConfig& config, double offered_qps,
                                              uint64_t seed) {
  DriftResult out;
  out.intervals = config.drift.intervals;
  out.sigma = config.drift.sigma;
  out.seed = seed;
  // The active set's rates (a short sample also gives the mean lengths for q_cap).
  CACHEROUTE_ASSIGN_OR_RETURN(workload::GeneratedWorkload g,
                              GenerateStudyWorkload(config, offered_qps, seed, 60));
  std::vector<double> base;
  std::vector<uint64_t> ids;
  for (const workload::KeyRate& k : g.active_keys) {
    base.push_back(k.rate);
    ids.push_back(dataplane::KeyId(k.key));
  }
  CACHEROUTE_ASSIGN_OR_RETURN(const double q_cap, DriftQCap(config, g.workload));
  // Algorithm 1's own churn (the paper's Appendix E), from scratch at every interval.
  const planner::PlanConfig plan_config =
      planner::PlanConfigFor(planner::Algorithm::kCacheRoutePaper,
                             {.destinations = config.destinations,
                              .q_cap = q_cap,
                              .slots_per_destination = config.fleet.slots_per_destination});
  const std::vector<std::vector<double>> m = DriftMultipliers(base, config.drift, seed);
  std::vector<planner::Plan> plans;
  std::vector<std::vector<planner::KeyRate>> rates(m.size());
  for (size_t i = 0; i < m.size(); ++i) {
    for (size_t k = 0; k < base.size(); ++k) rates[i].push_back({ids[k], base[k] * m[i][k]});
    CACHEROUTE_ASSIGN_OR_RETURN(planner::Plan plan, planner::BuildPlan(rates[i], plan_config));
    plans.push_back(std::move(plan));
  }
  for (size_t i = 0; i + 1 < plans.size(); ++i) {
    DriftTransition t = Transition(plans[i], plans[i + 1]);
    t.from_interval = static_cast<uint32_t>(i);
    t.fresh_imbalance = ImbalanceUnder(plans[i + 1], rates[i + 1], config.destinations);
    t.stale_imbalance = ImbalanceUnder(plans[0], rates[i + 1], config.destinations);
    out.transitions.push_back(t);
    out.mean_cache_churn += t.cache_churn;
    out.mean_count_churn += t.count_churn;
  }
  if (!out.transitions.empty()) {
    out.mean_cache_churn /= out.transitions.size();
    out.mean_count_churn /= out.transitions.size();
  }
  return out;
}

absl::StatusOr<double> CeilingQps(const StudyConfig& config, const CeilingInputs& ceiling,
                                  double hit) {
  if (!ceiling.measured) return absl::FailedPreconditionError("the ceiling was not measured");
  CACHEROUTE_ASSIGN_OR_RETURN(EngineProfile profile, FindEngineProfile(config.profile));
  const double h = std::clamp(hit, 0.0, 1.0);
  return config.destinations * SaturationQps(profile, ceiling.mean_prompt_tokens,
                                             (1 - h) * ceiling.mean_prompt_tokens,
                                             ceiling.mean_output_tokens);
}

WorkloadReuse MeasureReuse(const workload::Workload& workload) {
  double prompt = 0, output = 0, reused = 0;
  absl::flat_hash_set<uint64_t> seen;
  for (const workload::Request& r : workload.requests) {
    prompt += r.input_length;
    output += r.output_length;
    const size_t full = std::min<size_t>(r.hash_ids.size(), r.input_length / workload.block_size);
    size_t hit = 0;
    while (hit < full && seen.contains(r.hash_ids[hit])) ++hit;
    reused += static_cast<double>(hit) * workload.block_size;
    for (size_t i = 0; i < full; ++i) seen.insert(r.hash_ids[i]);
  }
  const double n = std::max<double>(1, workload.requests.size());
  return {.mean_prompt_tokens = prompt / n,
          .mean_output_tokens = output / n,
          .reuse = prompt > 0 ? reused / prompt : 0};
}

BudgetCeiling MeasureBudgetCeiling(const workload::Workload& workload, double budget_tokens) {
  struct Key {
    double worth = 0;     // reusable tokens of its requests, unbounded cache
    double shared = 0;    // Σ tokens shared with the previous request
    double measured = 0;  // requests with a previous one
    const std::vector<uint64_t>* last = nullptr;
  };
  absl::flat_hash_map<std::string, Key> keys;
  absl::flat_hash_set<uint64_t> seen;
  double prompt = 0;
  const uint32_t block = workload.block_size;
  for (const workload::Request& r : workload.requests) {
    prompt += r.input_length;
    const size_t full = std::min<size_t>(r.hash_ids.size(), r.input_length / block);
    size_t hit = 0;
    while (hit < full && seen.contains(r.hash_ids[hit])) ++hit;
    for (size_t i = 0; i < full; ++i) seen.insert(r.hash_ids[i]);
    Key& k = keys[r.key];
    k.worth += static_cast<double>(hit) * block;
    if (k.last != nullptr) {
      size_t shared = 0;
      const size_t n = std::min({k.last->size(), r.hash_ids.size(), full});
      while (shared < n && (*k.last)[shared] == r.hash_ids[shared]) ++shared;
      k.shared += static_cast<double>(shared) * block;
      k.measured += 1;
    }
    k.last = &r.hash_ids;
  }
  struct Item {
    double worth, size;
  };
  std::vector<Item> items;
  BudgetCeiling out;
  for (const auto& [name, k] : keys) {
    const double size = k.measured > 0 ? k.shared / k.measured : 0;
    out.prefix_tokens += size;
    items.push_back({k.worth, size});
  }
  out.keys = items.size();
  // Worth per token, decreasing; a key with no reusable prefix costs nothing.
  std::sort(items.begin(), items.end(),
            [](const Item& a, const Item& b) { return a.worth * b.size > b.worth * a.size; });
  double left = budget_tokens, saved = 0;
  for (const Item& item : items) {
    if (item.size <= left) {
      saved += item.worth;
      left -= item.size;
      ++out.keys_in;
    } else {
      saved += item.worth * left / item.size;
      break;
    }
  }
  out.reuse = prompt > 0 ? saved / prompt : 0;
  return out;
}

}  // namespace cacheroute::sim::study
