// Byte-aware planning (PlanConfig::kv_budget_tokens > 0; docs/planner.md, "Byte-aware planning"):
// the model and the steps PlanBuilder runs instead of the slot model's when keys' prompt sizes
// (KeyTokens) are known. Keys are ranked by the prefill work affinity saves them, admitted while
// Σ reusable tokens × k_b fits R × kv_budget_tokens, given k_b by their expected work, and placed
// by LPT on expected work, keeping each destination's planned prefixes within its budget where
// it can.
//
// The steps, in PlanBuilder's order, over the input's rates and tokens (index i is key i):
//   WorkModel::Make     the estimates (below); nullopt when no key is measured (plan by slots)
//   ComputeWorkCap      the per-assignment work cap, the fleet's total work, each key's work at
//                       one destination (work1) and its prefix's survival there (survival1)
//   RankBySavedWork     the ranking, radix-sorted on the saved work's top bits only
//   AdmitBySavedWork    the budget scan over the ranking, exact where it matters
//   PlaceByWork         LPT on expected work within the KV budget, with optional hysteresis
// Each is deterministic and depends only on the multiset of (key, rate, sizes), not on the
// input's order. EstimateKey repeats the first steps for one key, for explaining its plan.
//
// Usage (what PlanBuilder::Build does; plan_builder.cc):
//   std::optional<WorkModel> model = WorkModel::Make(rates, tokens, config);
//   WorkCap cap = ComputeWorkCap(rates, *model, config, work1, survival1);
//   SavedWorkRanking ranking = RankBySavedWork(rates, *model, config, cap.cap, work1, survival1,
//                                              ranked, scratch);
//   absl::StatusOr<WorkAdmission> admitted =
//       AdmitBySavedWork(rates, *model, config, cap, work1, {ranked, n}, ranking);
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "planner/plan.h"

namespace cacheroute::planner {

inline bool IsByteAware(const PlanConfig& config) { return config.kv_budget_tokens > 0; }

// InvalidArgument naming the entry unless `tokens` has one entry per rate, each size finite and
// ≥ 0 or kUnmeasured.
absl::Status ValidateTokens(std::span<const KeyRate> rates, std::span<const KeyTokens> tokens);

// The estimates byte-aware planning ranks and places keys by, per key i of the input:
//   s_i  reusable tokens (measured, or the measured keys' rate-weighted mean)
//   p_i  prompt tokens, ≥ s_i (measured, or s_i plus the measured keys' mean unique tokens)
//   h    the chance a key's prefix is still cached when the key returns to one of its k_b
//        destinations: x / (1 + x), x = (λ_i / k_b) · T, i.e. the prefix lives an exponential
//        time with mean T, the turnover time of a destination's KV cache: its capacity over the
//        tokens flowing into it (every request's unique tokens plus the prefixes it misses)
//   work λ_i · (p_i − s_i · h + overhead) tokens/s, what the key costs its destinations
//   saved λ_i · s_i · h tokens/s, what keeping it warm saves
// It refers to the rates and tokens it was made from, which must outlive it.
class WorkModel {
 public:
  // nullopt when no key is measured. `tokens` holds key i's sizes at index i of `rates`.
  static std::optional<WorkModel> Make(std::span<const KeyRate> rates,
                                       std::span<const KeyTokens> tokens, const PlanConfig& config);

  double Reusable(size_t i) const {
    return tokens_[i].reusable >= 0 ? tokens_[i].reusable : mean_reusable_;
  }
  double Prompt(size_t i) const {
    const double s = Reusable(i);
    if (tokens_[i].reusable < 0) {
      return tokens_[i].prompt >= 0 ? std::max(s, tokens_[i].prompt) : s + mean_unique_;
    }
    return std::max(s, tokens_[i].prompt);  // a measured prefix without a prompt: all reusable
  }
  double Survival(double rate, uint32_t k) const {
    if (turnover_ == 0) return 1;
    const double x = k == 1 ? rate * turnover_ : rate * turnover_ / k;  // the same at k = 1
    return x / (1 + x);
  }
  double Work(size_t i, uint32_t k) const {
    const double rate = rates_[i].rate;
    return rate * (Prompt(i) - Reusable(i) * Survival(rate, k) + overhead_);
  }
  double Saved(size_t i, uint32_t k) const {
    const double rate = rates_[i].rate;
    return rate * Reusable(i) * Survival(rate, k);
  }
  // The work of the traffic no key is listed for (config.unkeyed_rate): all of its prompt.
  double UnkeyedWork(double unkeyed_rate) const {
    return unkeyed_rate * (mean_reusable_ + mean_unique_ + overhead_);
  }
  uint64_t measured() const { return measured_; }
  double turnover() const { return turnover_; }
  double overhead() const { return overhead_; }

 private:
  WorkModel(std::span<const KeyRate> rates, std::span<const KeyTokens> tokens,
            const PlanConfig& config)
      : rates_(rates), tokens_(tokens), overhead_(config.request_overhead_tokens) {}

  std::span<const KeyRate> rates_;
  std::span<const KeyTokens> tokens_;
  double overhead_ = 0;
  uint64_t measured_ = 0;
  double mean_reusable_ = 0;
  double mean_unique_ = 0;
  double turnover_ = 0;  // seconds; 0: no discount
};

// The per-assignment work cap, like the rate cap (PlanConfig::q_cap, ::balance_share) in work:
// q_cap requests of the fleet's mean work, and at most balance_share of a destination's mean
// work (0 when the total rate is 0); and the fleet's total expected work with every key on one
// destination.
struct WorkCap {
  double cap = 0;
  double total_work = 0;
};
// Also writes each key's work at one destination to work1[i] and, if given, its survival there
// to survival1[i] (both n = rates.size() entries).
WorkCap ComputeWorkCap(std::span<const KeyRate> rates, const WorkModel& model,
                       const PlanConfig& config, double* work1, double* survival1 = nullptr);

// k_b of a key whose work at one destination is `work1` (a split key's prefix is revisited less
// often on each destination, so its work at k_b is higher; k_b is not revised for that). 1
// without replication or without a cap.
uint32_t WorkAssignments(double work1, const PlanConfig& config, double work_cap,
                         bool* capped = nullptr);

// A key in byte-aware admission's ranking, in a KeyRate's 16 bytes so that the radix sort moves
// no more than the rate order's: its saved work, and its input index (high 32 bits) with its cost
// to the budget (reusable × k_b) rounded up to a float (low 32 bits), which lets the admission
// scan decide most runs without computing the exact cost.
struct RankedKey {
  uint64_t index_and_cost = 0;
  double saved = 0;  // ≥ +0.0

  static RankedKey Make(size_t index, double cost, double saved);
  uint32_t index() const { return static_cast<uint32_t>(index_and_cost >> 32); }
  float cost_above() const { return std::bit_cast<float>(static_cast<uint32_t>(index_and_cost)); }
};

// What RankBySavedWork leaves for the admission scan.
struct SavedWorkRanking {
  int lowest_bit = 64;    // the lowest bit of DescendingBits(saved) sorted on (TopBitsRadix)
  double least_cost = 0;  // the least cost of a key that saves work; infinity when none does
};
// The byte-aware admission order: ranked[0, n) becomes the keys radix-sorted by the top bits of
// their saved work (decreasing). Runs that agree in those bits stay in input order: the scan
// orders them exactly when it matters. `work1` and `survival1` are ComputeWorkCap's. Needs
// n < 2^32.
SavedWorkRanking RankBySavedWork(std::span<const KeyRate> rates, const WorkModel& model,
                                 const PlanConfig& config, double work_cap, const double* work1,
                                 const double* survival1, RankedKey* ranked, RankedKey* scratch);

// A key byte-aware admission took.
struct AdmittedKey {
  uint32_t index;  // into the rates
  uint32_t k;
  double job;  // expected work per assignment
};

// Byte-aware admission's outcome: the keys in admission order, and the sums the plan's stats
// report (PlanStats has the meaning of each).
struct WorkAdmission {
  std::vector<AdmittedKey> keys;
  uint64_t slots = 0;        // Σ k_b
  uint64_t capped_keys = 0;  // keys whose k_b was capped at R
  double budget = 0;         // R × kv_budget_tokens
  double kv_used = 0;
  double admitted_rate = 0;
  double cold_tail_rate = 0;
  double saved_work = 0;
  double possible_saved_work = 0;
  double admitted_work = 0;  // Σ expected work of the admitted keys at their k_b
  double total_work = 0;     // the fleet's, with admitted keys at their k_b
  double tail_work = 0;      // total_work − admitted_work, at least 0
};
// Admission in decreasing saved work (ties key ascending): a key whose reusable tokens × k_b do
// not fit what is left of the budget is skipped; keys that save nothing are never admitted.
// A run of keys that agree in the ranking's sorted bits is taken whole when it surely fits and
// skipped when surely none of it does (decided on the costs rounded to floats, bounded from above
// and below), whatever its order; only a run in between is sorted exactly and taken key by key;
// once not even the cheapest key fits what is left, the rest is only summed. So the result is a
// full sort's. OutOfRange, naming kv_budget_tokens, if Σk_b would not fit 32 bits.
absl::StatusOr<WorkAdmission> AdmitBySavedWork(std::span<const KeyRate> rates,
                                               const WorkModel& model, const PlanConfig& config,
                                               const WorkCap& work_cap, const double* work1,
                                               std::span<RankedKey> ranked,
                                               const SavedWorkRanking& ranking);

// Byte-aware placement: LPT on expected work. Keys in decreasing work per assignment (ties: key
// ascending); each of a key's k_b jobs goes to the least loaded destination not yet chosen for it
// whose planned prefixes stay within kv_budget_tokens with the key's, or to the least loaded one
// when none has room. With a previous plan and stickiness, a job first stays on the least loaded
// of the key's previous destinations that has room and stays at or under (1 + stickiness) ×
// mean_work (as PlaceSticky). Key j's destinations go to sets[offset[j], offset[j + 1]), sorted;
// `loads` gets the rate shares, `work_loads` the work. Returns the jobs kept on a previous
// destination.
uint64_t PlaceByWork(const PlanConfig& config, std::span<const KeyRate> rates,
                     std::span<const AdmittedKey> admitted, std::span<const uint32_t> offset,
                     const WorkModel& model, const Plan* previous, double mean_work,
                     std::span<uint32_t> sets, std::span<double> loads,
                     std::span<double> work_loads);

// Byte-aware planning's estimates for key i of `rates` (sizes in `tokens` at the same index), as
// Build computes them: for explaining one key's plan. nullopt unless config.kv_budget_tokens > 0
// and some key is measured. Linear in the keys.
struct KeyEstimate {
  uint32_t k = 1;
  bool capped = false;
  bool measured = false;  // false: planned with the measured keys' means
  double reusable = 0;    // tokens
  double prompt = 0;      // tokens
  double saved = 0;       // tokens/s its affinity saves at k destinations
  double work = 0;        // tokens/s, over its k destinations
  double cost = 0;        // reusable × k: what admitting it takes from the budget
};
std::optional<KeyEstimate> EstimateKey(std::span<const KeyRate> rates,
                                       std::span<const KeyTokens> tokens, const PlanConfig& config,
                                       size_t i);

}  // namespace cacheroute::planner
