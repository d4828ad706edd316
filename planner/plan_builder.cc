// Algorithm 1 (the CacheRoute paper, §3.1) as a pipeline over a PlanWorkspace. See plan_builder.h.
//
// Speed: the paper's O(|B| log |B| + Σk_b log R) becomes O(|B| + Σk_b log R) here. The rate order
// is a radix sort (radix_sort.h); duplicate keys are found by sorting the bare keys the same way,
// skipped entirely when the input is already strictly ascending by key; LPT keeps the
// destinations in a tournament tree (placement.h). Between 64Ki and 4Mi keys the duplicate search
// runs on a second thread, in parallel with the ranking; the result does not depend on it.
// Memory: two arrays of 16-byte (key, rate) pairs; the sorted one becomes the plan's admitted
// list, so the step needs about 32 bytes per key beyond its input.
#include "planner/plan_builder.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/base/attributes.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "planner/placement.h"
#include "planner/radix_sort.h"

namespace cacheroute::planner {
namespace {

using plan_internal::PlanData;

// Inputs in this range look for duplicate keys on a second thread.
constexpr size_t kParallelMinKeys = size_t{1} << 16;
constexpr size_t kParallelMaxKeys = size_t{1} << 22;

// One Build's arguments.
struct BuildInput {
  std::span<const KeyRate> rates;
  const PlanConfig& config;
  const Plan* previous;
  std::span<const KeyWarmth> warm;
  std::span<const KeyTokens> tokens;
  // Byte-aware config and sizes given: the sizes are validated and the model is tried (Rank
  // falls back to the slot model when no key is measured).
  bool sizes_given;
};

uint64_t SaturatingMultiply(uint64_t a, uint64_t b) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a) {
    return std::numeric_limits<uint64_t>::max();
  }
  return a * b;
}

template <typename T>
void GrowTo(std::vector<T>& buffer, size_t n) {
  if (buffer.size() < n) buffer.resize(n);
}

template <typename T>
T* Scratch(PlanWorkspace& ws) {
  static_assert(sizeof(T) <= sizeof(KeyRate));
  return reinterpret_cast<T*>(ws.scratch.get());
}

// The slot model's pairs, copied from the input; -0.0 becomes +0.0 so the bit-pattern order holds.
KeyRate PairOf(const KeyRate& kr) { return {kr.key, kr.rate == 0 ? 0.0 : kr.rate}; }

absl::Status DuplicateKeyError(std::span<const KeyRate> rates, uint64_t key) {
  size_t first = rates.size(), second = rates.size();
  for (size_t i = 0; i < rates.size(); ++i) {
    if (rates[i].key != key) continue;
    if (first == rates.size()) {
      first = i;
    } else {
      second = i;
      break;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrFormat("rates: duplicate key %u (at rates[%u] and rates[%u])", key, first, second));
}

// The search for a duplicate key among the input's bare keys (half the bytes to move of full
// pairs). For mid-sized inputs it runs on a second thread while this one ranks; it then needs a
// buffer of its own, which very large inputs do without so peak memory stays ~48 bytes per key.
class DuplicateSearch {
 public:
  DuplicateSearch() = default;
  DuplicateSearch(const DuplicateSearch&) = delete;
  DuplicateSearch& operator=(const DuplicateSearch&) = delete;
  ~DuplicateSearch() {
    if (thread_.joinable()) thread_.join();
  }

  // Starts the search: on a second thread for mid-sized inputs, else on this one over the
  // workspace's scratch (before the ranking needs it), returning a duplicate at once.
  absl::Status Start(std::span<const KeyRate> rates, PlanWorkspace& ws) {
    rates_ = rates;
    const size_t n = rates.size();
    if (n < kParallelMinKeys || n > kParallelMaxKeys) {
      Run(Scratch<uint64_t>(ws));
      return Finish();
    }
    if (ws.dedup_size < n) {
      ws.dedup_keys.reset(new uint64_t[2 * n]);
      ws.dedup_size = n;
    }
    try {
      thread_ = std::thread(&DuplicateSearch::Run, this, ws.dedup_keys.get());
    } catch (const std::system_error&) {
      Run(ws.dedup_keys.get());  // no thread to be had: do it here
    }
    return absl::OkStatus();
  }

  // Waits for the search: InvalidArgument naming the duplicate key and its first two entries.
  absl::Status Finish() {
    if (thread_.joinable()) thread_.join();
    return found_ ? DuplicateKeyError(rates_, key_) : absl::OkStatus();
  }

 private:
  // keys[0, 2n): the keys, then the sort's second buffer.
  void Run(uint64_t* keys) {
    const size_t n = rates_.size();
    for (size_t i = 0; i < n; ++i) keys[i] = rates_[i].key;
    SortKeys(keys, keys + n, n);
    for (size_t i = 1; i < n; ++i) {
      if (keys[i] == keys[i - 1]) {
        found_ = true;
        key_ = keys[i];
        return;
      }
    }
  }

  std::span<const KeyRate> rates_;
  bool found_ = false;
  uint64_t key_ = 0;
  std::thread thread_;
};

// The ranking the admission reads: the slot model's rate order (ws.rate_order), or, when a key is
// measured, byte-aware planning's model and saved-work ranking (ws.saved_work_order).
struct Ranking {
  std::optional<WorkModel> model;  // set: byte-aware planning
  WorkCap work_cap;                // byte-aware
  SavedWorkRanking saved_work;     // byte-aware
};

// Ingest and dedup: validates the config, the sizes and every rate, copies the slot model's pairs
// and starts the duplicate search.
absl::Status Ingest(const BuildInput& in, PlanWorkspace& ws, DuplicateSearch& duplicates) {
  if (absl::Status status = ValidatePlanConfig(in.config); !status.ok()) return status;
  const size_t n = in.rates.size();
  if (in.sizes_given) {
    if (absl::Status status = ValidateTokens(in.rates, in.tokens); !status.ok()) return status;
    if (n > std::numeric_limits<uint32_t>::max()) {
      return absl::OutOfRangeError(
          absl::StrFormat("rates: %u keys; byte-aware planning takes at most 2^32-1", n));
    }
  } else {
    GrowTo(ws.rate_order, n);
  }
  if (ws.scratch_pairs < n) {
    ws.scratch.reset(new std::byte[n * sizeof(KeyRate)]);
    ws.scratch_pairs = n;
  }
  KeyRate* const pairs = ws.rate_order.data();
  bool sorted_by_key = true;
  for (size_t i = 0; i < n; ++i) {
    const KeyRate& kr = in.rates[i];
    if (!(kr.rate >= 0) || std::isinf(kr.rate)) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "rates[%u] (key %u): rate must be a finite number >= 0, got %g", i, kr.key, kr.rate));
    }
    if (!in.sizes_given) pairs[i] = PairOf(kr);
    if (i > 0 && in.rates[i - 1].key >= kr.key) sorted_by_key = false;
  }
  return sorted_by_key ? absl::OkStatus() : duplicates.Start(in.rates, ws);
}

// Rank: the slot model's pairs into the rate order, or byte-aware planning's model, work cap and
// saved-work ranking when some key is measured.
Ranking Rank(const BuildInput& in, PlanWorkspace& ws) {
  const size_t n = in.rates.size();
  Ranking out;
  if (in.sizes_given) {
    out.model = WorkModel::Make(in.rates, in.tokens, in.config);
    if (!out.model.has_value()) {  // no key measured: the slot model, which sorts the pairs
      GrowTo(ws.rate_order, n);
      for (size_t i = 0; i < n; ++i) ws.rate_order[i] = PairOf(in.rates[i]);
    }
  }
  if (!out.model.has_value()) {
    SortByRate(ws.rate_order.data(), Scratch<KeyRate>(ws), n);
    return out;
  }
  GrowTo(ws.work1, n);
  GrowTo(ws.survival1, n);
  GrowTo(ws.saved_work_order, n);
  out.work_cap =
      ComputeWorkCap(in.rates, *out.model, in.config, ws.work1.data(), ws.survival1.data());
  out.saved_work =
      RankBySavedWork(in.rates, *out.model, in.config, out.work_cap.cap, ws.work1.data(),
                      ws.survival1.data(), ws.saved_work_order.data(), Scratch<RankedKey>(ws));
  return out;
}

// Admit (slot model): keys in the rate order while Σk_b ≤ C, stopping at the first key that does
// not fit; fills plan.admitted and the admission's stats. Returns the config k_b is computed with
// (q_cap lowered by PlanConfig::balance_share). Not inlined: inside Build its per-key loop kept
// its sums on the stack and admitting every key of 128K took 5% longer.
ABSL_ATTRIBUTE_NOINLINE absl::StatusOr<PlanConfig> AdmitSlotModel(const BuildInput& in,
                                                                  PlanWorkspace& ws,
                                                                  PlanData& plan) {
  const PlanConfig& config = in.config;
  const size_t n = in.rates.size();
  const KeyRate* const sorted = ws.rate_order.data();
  PlanConfig capped_config = config;
  if (config.balance_share > 0) {
    double total = config.unkeyed_rate;
    for (size_t i = 0; i < n; ++i) total += sorted[i].rate;
    const double share_cap = config.balance_share * total / config.destinations;
    if (share_cap > 0 && share_cap < config.q_cap) capped_config.q_cap = share_cap;
  }
  PlanStats& stats = plan.stats;
  stats.effective_q_cap = capped_config.q_cap;
  stats.input_keys = n;
  stats.slot_capacity = SaturatingMultiply(config.destinations, config.slots_per_destination);

  size_t admitted = 0;
  uint64_t slots = 0;
  double admitted_rate = 0;
  for (; admitted < n; ++admitted) {
    const double rate = sorted[admitted].rate;
    if (rate == 0) break;
    bool capped = false;
    const uint32_t k = Assignments(capped_config, rate, &capped);
    if (slots + k > stats.slot_capacity) break;
    if (slots + k > std::numeric_limits<uint32_t>::max()) {
      return absl::OutOfRangeError(
          absl::StrFormat("slots_per_destination %u admits more than 2^32-1 assignments; lower it",
                          config.slots_per_destination));
    }
    slots += k;
    admitted_rate += rate;
    if (capped) ++stats.capped_keys;
  }
  stats.admitted_keys = admitted;
  stats.slots_used = slots;
  // Sums run over the sorted order, so they do not depend on the order of the input.
  double cold_tail = config.unkeyed_rate;
  for (size_t i = admitted; i < n; ++i) cold_tail += sorted[i].rate;
  stats.cold_tail_rate = cold_tail;
  stats.admitted_rate = admitted_rate;
  stats.total_rate = cold_tail + admitted_rate;

  // The plan takes the workspace's array when most of it is admitted (no copy), else a copy.
  if (admitted > 0 && ws.rate_order.size() <= 2 * admitted) {
    ws.rate_order.resize(admitted);
    plan.admitted = std::move(ws.rate_order);
    ws.rate_order = std::vector<KeyRate>();
  } else {
    plan.admitted.assign(sorted, sorted + admitted);
  }
  return capped_config;
}

// Place (slot model): LPT, or sticky LPT with previous plan and warm hints, or the hashed
// ablation, over the admitted keys on top of the cold-tail share.
void PlaceSlotModel(const BuildInput& in, const PlanConfig& capped_config, PlanData& plan) {
  const PlanConfig& config = in.config;
  const uint32_t r_count = config.destinations;
  PlanStats& stats = plan.stats;
  plan.loads.assign(r_count, stats.cold_tail_rate / r_count);
  plan.offsets.resize(plan.admitted.size() + 1);
  plan.destination_ids.resize(stats.slots_used);
  if (config.placement == Placement::kHashed) {
    PlaceHashed(capped_config, plan.admitted, plan.offsets, plan.destination_ids, plan.loads);
  } else if ((in.previous != nullptr && config.stickiness > 0 && in.previous->size() > 0) ||
             !in.warm.empty()) {
    absl::flat_hash_map<uint64_t, uint32_t> warm_index;
    warm_index.reserve(in.warm.size());
    for (const KeyWarmth& w : in.warm) warm_index[w.key] = w.destination;
    PlaceSticky(capped_config, config.stickiness > 0 ? in.previous : nullptr, warm_index,
                stats.total_rate / r_count, plan.admitted, plan.offsets, plan.destination_ids,
                plan.loads, &stats.kept_assignments, &stats.warm_assignments);
  } else {
    PlaceLpt(capped_config, plan.admitted, plan.offsets, plan.destination_ids, plan.loads);
  }
}

// Admit (byte-aware): AdmitBySavedWork over the ranking; fills the admission's stats.
absl::StatusOr<WorkAdmission> AdmitByteAware(const BuildInput& in, const Ranking& ranking,
                                             PlanWorkspace& ws, PlanData& plan) {
  const PlanConfig& config = in.config;
  const size_t n = in.rates.size();
  PlanStats& stats = plan.stats;
  stats.input_keys = n;
  stats.slot_capacity = SaturatingMultiply(config.destinations, config.slots_per_destination);
  stats.byte_aware = true;
  stats.measured_keys = ranking.model->measured();
  stats.turnover_seconds = ranking.model->turnover();
  stats.effective_work_cap = ranking.work_cap.cap;
  stats.effective_q_cap = config.q_cap;
  CACHEROUTE_ASSIGN_OR_RETURN(
      WorkAdmission admission,
      AdmitBySavedWork(in.rates, *ranking.model, config, ranking.work_cap, ws.work1.data(),
                       std::span<RankedKey>(ws.saved_work_order.data(), n), ranking.saved_work));
  stats.kv_budget = admission.budget;
  stats.capped_keys = admission.capped_keys;
  stats.admitted_keys = admission.keys.size();
  stats.slots_used = admission.slots;
  stats.admitted_rate = admission.admitted_rate;
  stats.cold_tail_rate = admission.cold_tail_rate;
  stats.total_rate = admission.cold_tail_rate + admission.admitted_rate;
  stats.kv_used = admission.kv_used;
  stats.saved_work = admission.saved_work;
  stats.possible_saved_work = admission.possible_saved_work;
  stats.total_work = admission.total_work;
  return admission;
}

// Place (byte-aware): PlaceByWork over the admitted keys on top of the cold tail's share of rate
// and work, then the keys listed in decreasing rate (ties key ascending) like every plan's.
void PlaceByteAware(const BuildInput& in, const Ranking& ranking, const WorkAdmission& admission,
                    PlanData& plan) {
  const PlanConfig& config = in.config;
  const uint32_t r_count = config.destinations;
  const std::vector<AdmittedKey>& admitted = admission.keys;
  const size_t m = admitted.size();
  // Each admitted key's destinations, at offset[j] in `sets` (admission order).
  std::vector<uint32_t> offset(m + 1, 0);
  for (size_t j = 0; j < m; ++j) offset[j + 1] = offset[j] + admitted[j].k;
  std::vector<uint32_t> sets(admission.slots);
  plan.loads.assign(r_count, admission.cold_tail_rate / r_count);
  plan.work_loads.assign(r_count, admission.tail_work / r_count);
  plan.stats.kept_assignments =
      PlaceByWork(config, in.rates, admitted, offset, *ranking.model, in.previous,
                  admission.total_work / r_count, sets, plan.loads, plan.work_loads);

  std::vector<uint32_t> by_rate(m);
  std::iota(by_rate.begin(), by_rate.end(), 0u);
  std::sort(by_rate.begin(), by_rate.end(), [&](uint32_t a, uint32_t b) {
    return RateOrderLess(in.rates[admitted[a].index], in.rates[admitted[b].index]);
  });
  plan.admitted.resize(m);
  plan.work.resize(m);
  plan.offsets.resize(m + 1);
  plan.destination_ids.resize(admission.slots);
  uint32_t next = 0;
  for (size_t j = 0; j < m; ++j) {
    const AdmittedKey& a = admitted[by_rate[j]];
    plan.admitted[j] = in.rates[a.index];
    plan.work[j] = {.reusable = ranking.model->Reusable(a.index),
                    .saved = ranking.model->Saved(a.index, a.k),
                    .work = a.job * a.k};
    plan.offsets[j] = next;
    std::copy(sets.begin() + offset[by_rate[j]], sets.begin() + offset[by_rate[j] + 1],
              plan.destination_ids.begin() + next);
    next += a.k;
  }
  plan.offsets[m] = next;
}

// Spill: each admitted key's planned second choice (PlanConfig::spill), on the placed loads.
void AddSpills(PlanData& plan) {
  if (!plan.config.spill || plan.config.destinations < 2) return;
  plan.spills = PlaceSpills(plan.admitted, plan.offsets, plan.destination_ids, plan.loads);
}

// Stats: the load figures every plan reports, byte-aware plans' work imbalance, the build time.
void RecordLoadStats(PlanData& plan, base::Clock* clock, absl::Time start) {
  PlanStats& stats = plan.stats;
  const uint32_t r_count = plan.config.destinations;
  stats.max_load = *std::max_element(plan.loads.begin(), plan.loads.end());
  stats.mean_load = stats.total_rate / r_count;
  stats.imbalance = stats.mean_load > 0 ? stats.max_load / stats.mean_load : 1.0;
  if (stats.byte_aware) {
    const double max_work = *std::max_element(plan.work_loads.begin(), plan.work_loads.end());
    const double mean_work = stats.total_work / r_count;
    stats.work_imbalance = mean_work > 0 ? max_work / mean_work : 1.0;
  }
  if (clock != nullptr) stats.build_seconds = absl::ToDoubleSeconds(clock->Now() - start);
}

}  // namespace

PlanBuilder::PlanBuilder(base::Clock* clock) : clock_(clock) {}

absl::StatusOr<Plan> PlanBuilder::Build(std::span<const KeyRate> rates, const PlanConfig& config,
                                        const Plan* previous, std::span<const KeyWarmth> warm,
                                        std::span<const KeyTokens> tokens) {
  const absl::Time start = clock_ != nullptr ? clock_->Now() : absl::InfinitePast();
  const BuildInput in{.rates = rates,
                      .config = config,
                      .previous = previous,
                      .warm = warm,
                      .tokens = tokens,
                      .sizes_given = IsByteAware(config) && !tokens.empty()};
  DuplicateSearch duplicates;
  if (absl::Status status = Ingest(in, workspace_, duplicates); !status.ok()) return status;
  const Ranking ranking = Rank(in, workspace_);
  if (absl::Status status = duplicates.Finish(); !status.ok()) return status;

  PlanData plan;
  plan.config = config;
  if (ranking.model.has_value()) {
    CACHEROUTE_ASSIGN_OR_RETURN(const WorkAdmission admission,
                                AdmitByteAware(in, ranking, workspace_, plan));
    PlaceByteAware(in, ranking, admission, plan);
  } else {
    CACHEROUTE_ASSIGN_OR_RETURN(const PlanConfig capped_config,
                                AdmitSlotModel(in, workspace_, plan));
    PlaceSlotModel(in, capped_config, plan);
  }
  AddSpills(plan);
  RecordLoadStats(plan, clock_, start);
  return Plan(std::move(plan));
}

absl::StatusOr<Plan> BuildPlan(std::span<const KeyRate> rates, const PlanConfig& config,
                               base::Clock* clock, const Plan* previous,
                               std::span<const KeyWarmth> warm, std::span<const KeyTokens> tokens) {
  return PlanBuilder(clock).Build(rates, config, previous, warm, tokens);
}

}  // namespace cacheroute::planner
