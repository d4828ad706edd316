// See byte_aware.h.
#include "planner/byte_aware.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "planner/placement.h"
#include "planner/radix_sort.h"

namespace cacheroute::planner {
namespace {

struct BySavedWork {
  uint64_t operator()(const RankedKey& key) const { return DescendingBits(key.saved); }
};

// The differing bits of the saved work the ranking sorts on (as the rate order's first pass).
constexpr int kRankTopBits = 22;

}  // namespace

absl::Status ValidateTokens(std::span<const KeyRate> rates, std::span<const KeyTokens> tokens) {
  if (tokens.size() != rates.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "tokens: %u entries for %u rates; give one per rate or none", tokens.size(), rates.size()));
  }
  for (size_t i = 0; i < tokens.size(); ++i) {
    for (const auto& [field, value] :
         {std::pair{"reusable", tokens[i].reusable}, std::pair{"prompt", tokens[i].prompt}}) {
      if (!(value >= 0 || value == kUnmeasured) || std::isinf(value)) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "tokens[%u].%s (key %u): must be a finite number >= 0 or kUnmeasured (-1), got %g", i,
            field, rates[i].key, value));
      }
    }
  }
  return absl::OkStatus();
}

std::optional<WorkModel> WorkModel::Make(std::span<const KeyRate> rates,
                                         std::span<const KeyTokens> tokens,
                                         const PlanConfig& config) {
  WorkModel m(rates, tokens, config);
  double rate_sum = 0, reusable_sum = 0, unique_sum = 0, plain_reusable = 0, plain_unique = 0;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i].reusable < 0) continue;
    const double s = tokens[i].reusable;
    const double u = tokens[i].prompt < 0 ? 0 : std::max(0.0, tokens[i].prompt - s);
    ++m.measured_;
    rate_sum += rates[i].rate;
    reusable_sum += rates[i].rate * s;
    unique_sum += rates[i].rate * u;
    plain_reusable += s;
    plain_unique += u;
  }
  if (m.measured_ == 0) return std::nullopt;
  // Rate-weighted, or plain means when every measured key has rate 0.
  m.mean_reusable_ = rate_sum > 0 ? reusable_sum / rate_sum : plain_reusable / m.measured_;
  m.mean_unique_ = rate_sum > 0 ? unique_sum / rate_sum : plain_unique / m.measured_;
  if (config.kv_capacity_tokens > 0) {
    // New tokens per destination and second: unique ones, and missed prefixes; the second
    // term depends on T, so T is refined once from the estimate without it.
    double unique = config.unkeyed_rate * (m.mean_reusable_ + m.mean_unique_);
    for (size_t i = 0; i < rates.size(); ++i) {
      unique += rates[i].rate * (m.Prompt(i) - m.Reusable(i));
    }
    const double r = config.destinations;
    if (unique > 0) {
      m.turnover_ = config.kv_capacity_tokens * r / unique;
      double missed = 0;
      for (size_t i = 0; i < rates.size(); ++i) {
        missed += rates[i].rate * m.Reusable(i) * (1 - m.Survival(rates[i].rate, 1));
      }
      m.turnover_ = config.kv_capacity_tokens * r / (unique + missed);
    }
    // No traffic at all: nothing turns the cache over, every prefix survives (turnover 0).
  }
  return m;
}

WorkCap ComputeWorkCap(std::span<const KeyRate> rates, const WorkModel& model,
                       const PlanConfig& config, double* work1, double* survival1) {
  double total_rate = config.unkeyed_rate, total_work = model.UnkeyedWork(config.unkeyed_rate);
  for (size_t i = 0; i < rates.size(); ++i) {
    total_rate += rates[i].rate;
    // model.Work(i, 1), keeping the survival for RankBySavedWork.
    const double rate = rates[i].rate;
    const double h = model.Survival(rate, 1);
    if (survival1 != nullptr) survival1[i] = h;
    work1[i] = rate * (model.Prompt(i) - model.Reusable(i) * h + model.overhead());
    total_work += work1[i];
  }
  WorkCap out{.cap = 0, .total_work = total_work};
  if (total_rate <= 0) return out;
  out.cap = config.q_cap * (total_work / total_rate);
  if (config.balance_share > 0) {
    const double share_cap = config.balance_share * total_work / config.destinations;
    if (share_cap > 0 && share_cap < out.cap) out.cap = share_cap;
  }
  return out;
}

uint32_t WorkAssignments(double work1, const PlanConfig& config, double work_cap, bool* capped) {
  if (capped != nullptr) *capped = false;
  if (!config.replicate || work_cap <= 0) return 1;
  return AssignmentCount(work1, work_cap, config.destinations, capped);
}

RankedKey RankedKey::Make(size_t index, double cost, double saved) {
  float up = static_cast<float>(cost);
  if (static_cast<double>(up) < cost) {
    up = std::nextafter(up, std::numeric_limits<float>::infinity());
  }
  return {.index_and_cost =
              (uint64_t{static_cast<uint32_t>(index)} << 32) | std::bit_cast<uint32_t>(up),
          .saved = saved};
}

SavedWorkRanking RankBySavedWork(std::span<const KeyRate> rates, const WorkModel& model,
                                 const PlanConfig& config, double work_cap, const double* work1,
                                 const double* survival1, RankedKey* ranked, RankedKey* scratch) {
  const size_t n = rates.size();
  SavedWorkRanking out{.least_cost = std::numeric_limits<double>::infinity()};
  for (size_t i = 0; i < n; ++i) {
    const uint32_t k = WorkAssignments(work1[i], config, work_cap);
    const double rate = rates[i].rate;
    const double reusable = model.Reusable(i);
    // model.Saved(i, k), with the survival at k = 1 as ComputeWorkCap found it.
    const double saved =
        rate > 0 ? (k == 1 ? rate * reusable * survival1[i] : model.Saved(i, k)) : 0.0;
    const double cost = reusable * k;
    ranked[i] = RankedKey::Make(i, cost, saved > 0 ? saved : 0.0);
    if (saved > 0) out.least_cost = std::min(out.least_cost, cost);
  }
  out.lowest_bit = TopBitsRadix(ranked, scratch, n, BySavedWork(), kRankTopBits);
  return out;
}

namespace {

// The admission's rate and work totals, once its keys are known.
void AddTotals(std::span<const KeyRate> rates, const PlanConfig& config, const WorkCap& work_cap,
               const double* work1, WorkAdmission& out) {
  double cold_tail = config.unkeyed_rate;
  for (const KeyRate& kr : rates) cold_tail += kr.rate;
  out.cold_tail_rate = std::max(0.0, cold_tail - out.admitted_rate);
  // Total work: k_b was chosen from each key's work at one destination; admitted keys do their
  // work at k_b.
  out.total_work = work_cap.total_work;
  for (const AdmittedKey& a : out.keys) out.total_work += a.job * a.k - work1[a.index];
  out.tail_work = std::max(0.0, out.total_work - out.admitted_work);
}

}  // namespace

absl::StatusOr<WorkAdmission> AdmitBySavedWork(std::span<const KeyRate> rates,
                                               const WorkModel& model, const PlanConfig& config,
                                               const WorkCap& work_cap, const double* work1,
                                               std::span<RankedKey> ranked,
                                               const SavedWorkRanking& ranking) {
  const size_t n = ranked.size();
  WorkAdmission out;
  out.budget = config.kv_budget_tokens * config.destinations;
  // What key i takes from the budget at k destinations (RankBySavedWork's cost, exactly).
  const auto cost = [&](uint32_t i, uint32_t k) { return model.Reusable(i) * k; };
  const auto admit = [&](const RankedKey& key) -> absl::Status {
    const uint32_t i = key.index();
    bool capped = false;
    const uint32_t k = WorkAssignments(work1[i], config, work_cap.cap, &capped);
    if (out.slots + k > std::numeric_limits<uint32_t>::max()) {
      return absl::OutOfRangeError(
          absl::StrFormat("kv_budget_tokens %g admits more than 2^32-1 assignments; lower it",
                          config.kv_budget_tokens));
    }
    out.kv_used += cost(i, k);
    out.slots += k;
    out.admitted_rate += rates[i].rate;
    out.saved_work += key.saved;
    const double work = model.Work(i, k);
    out.admitted_work += work;
    if (capped) ++out.capped_keys;
    out.keys.push_back({i, k, work / k});
    return absl::OkStatus();
  };
  const int lowest_bit = ranking.lowest_bit;
  const auto top = [&](const RankedKey& key) {
    return lowest_bit == 64 ? 0 : DescendingBits(key.saved) >> lowest_bit;
  };
  const auto exact = [&](const RankedKey& a, const RankedKey& b) {
    return a.saved > b.saved || (a.saved == b.saved && rates[a.index()].key < rates[b.index()].key);
  };
  size_t begin = 0;
  // Once not even the cheapest key fits what is left, the rest is only summed.
  while (begin < n && out.kv_used + ranking.least_cost <= out.budget) {
    size_t end = begin + 1;
    while (end < n && top(ranked[end]) == top(ranked[begin])) ++end;
    double most = 0;                                       // ≥ the run's cost
    float least = std::numeric_limits<float>::infinity();  // ≥ its cheapest key's cost
    for (size_t r = begin; r < end; ++r) {
      out.possible_saved_work += ranked[r].saved;
      if (ranked[r].saved <= 0) continue;  // saves nothing: never admitted
      most += ranked[r].cost_above();
      least = std::min(least, ranked[r].cost_above());
    }
    const double least_below = std::nextafter(least, 0.0f);  // ≤ the cheapest key's cost
    if (out.kv_used + most <= out.budget) {
      for (size_t r = begin; r < end; ++r) {
        if (ranked[r].saved <= 0) continue;
        if (absl::Status s = admit(ranked[r]); !s.ok()) return s;
      }
    } else if (out.kv_used + least_below <= out.budget) {
      std::sort(ranked.begin() + begin, ranked.begin() + end, exact);
      for (size_t r = begin; r < end; ++r) {
        if (ranked[r].saved <= 0) continue;
        const uint32_t i = ranked[r].index();
        if (out.kv_used + cost(i, WorkAssignments(work1[i], config, work_cap.cap)) > out.budget) {
          continue;
        }
        if (absl::Status s = admit(ranked[r]); !s.ok()) return s;
      }
    }
    begin = end;
  }
  for (; begin < n; ++begin) out.possible_saved_work += ranked[begin].saved;
  AddTotals(rates, config, work_cap, work1, out);
  return out;
}

uint64_t PlaceByWork(const PlanConfig& config, std::span<const KeyRate> rates,
                     std::span<const AdmittedKey> admitted, std::span<const uint32_t> offset,
                     const WorkModel& model, const Plan* previous, double mean_work,
                     std::span<uint32_t> sets, std::span<double> loads,
                     std::span<double> work_loads) {
  const uint32_t r_count = config.destinations;
  std::vector<uint32_t> order(admitted.size());
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    const AdmittedKey& x = admitted[a];
    const AdmittedKey& y = admitted[b];
    return x.job > y.job || (x.job == y.job && rates[x.index].key < rates[y.index].key);
  });
  absl::flat_hash_map<uint64_t, uint32_t> previous_index;
  const bool sticky = previous != nullptr && config.stickiness > 0 && previous->size() > 0;
  if (sticky) {
    previous_index.reserve(previous->size());
    for (size_t i = 0; i < previous->size(); ++i) {
      previous_index.emplace(previous->key(i), static_cast<uint32_t>(i));
    }
  }
  const double sticky_cap = (1.0 + config.stickiness) * mean_work;
  std::vector<double> kv(r_count, 0.0);
  LoadTournament tournament(work_loads);
  uint64_t kept = 0;
  for (uint32_t j : order) {
    const AdmittedKey& a = admitted[j];
    const double size = model.Reusable(a.index);
    const auto fits = [&](uint32_t d) { return kv[d] + size <= config.kv_budget_tokens; };
    uint32_t* chosen = sets.data() + offset[j];
    std::span<const uint32_t> before;
    if (sticky) {
      if (auto it = previous_index.find(rates[a.index].key); it != previous_index.end()) {
        before = previous->destinations(it->second);
      }
    }
    for (uint32_t c = 0; c < a.k; ++c) {
      const auto taken = [&](uint32_t d) { return std::find(chosen, chosen + c, d) != chosen + c; };
      uint32_t pick = r_count;
      for (uint32_t d : before) {
        if (d >= r_count || taken(d) || !fits(d) || work_loads[d] + a.job > sticky_cap) continue;
        if (pick == r_count || work_loads[d] < work_loads[pick]) pick = d;
      }
      if (pick == r_count) {
        pick = tournament.Min();
        if (!fits(pick)) {  // the least loaded destination with room, if any
          for (uint32_t d = 0; d < r_count; ++d) {
            if (taken(d) || !fits(d)) continue;
            if (!fits(pick) || work_loads[d] < work_loads[pick]) pick = d;
          }
        }
      }
      if (std::find(before.begin(), before.end(), pick) != before.end()) ++kept;
      chosen[c] = pick;
      tournament.Exclude(pick);
    }
    const double rate_share = rates[a.index].rate / a.k;
    for (uint32_t c = 0; c < a.k; ++c) {
      const uint32_t d = chosen[c];
      loads[d] += rate_share;
      work_loads[d] += a.job;
      kv[d] += size;
      tournament.Set(d, work_loads[d]);
    }
    if (a.k > 1) std::sort(chosen, chosen + a.k);
  }
  return kept;
}

std::optional<KeyEstimate> EstimateKey(std::span<const KeyRate> rates,
                                       std::span<const KeyTokens> tokens, const PlanConfig& config,
                                       size_t i) {
  if (!IsByteAware(config) || tokens.size() != rates.size() || i >= rates.size()) {
    return std::nullopt;
  }
  const std::optional<WorkModel> model = WorkModel::Make(rates, tokens, config);
  if (!model.has_value()) return std::nullopt;
  std::vector<double> work1(rates.size());
  const WorkCap cap = ComputeWorkCap(rates, *model, config, work1.data());
  KeyEstimate out;
  out.k = WorkAssignments(work1[i], config, cap.cap, &out.capped);
  out.measured = tokens[i].reusable >= 0;
  out.reusable = model->Reusable(i);
  out.prompt = model->Prompt(i);
  out.saved = rates[i].rate > 0 ? model->Saved(i, out.k) : 0;
  out.work = model->Work(i, out.k);
  out.cost = out.reusable * out.k;
  return out;
}

}  // namespace cacheroute::planner
