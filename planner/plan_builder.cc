// Implementation of Algorithm 1 (the CacheRoute paper, §3.1). See plan_builder.h.
//
// Speed: the paper's O(|B| log |B| + Σk_b log R) becomes O(|B| + Σk_b log R) here.
// - Order. Non-negative IEEE doubles order like their bit patterns, so "decreasing rate" is a
//   radix sort on the complemented bits. A stable least-significant-digit radix sort on only the
//   top 33 significant bits (3 passes of 11 bits) leaves runs of keys whose rates agree in those
//   bits; each such run is then sorted exactly by (rate descending, key ascending). Runs are
//   rare and short for measured rates, and when rates tie a lot (integer counts) the long runs are
//   radix-sorted too, so the cost stays linear.
// - Duplicate keys. Keys are grouped the same way (radix on the top 22 bits in which they differ,
//   then exact sorting inside runs) so that equal keys become neighbours. Skipped entirely when the
//   input is already strictly ascending by key.
// - LPT. The destinations sit in a tournament tree keyed by (expected load, index); raising the
//   least-loaded destination's load replays one root path of branch-free selects.
// - Threads. Between 64Ki and 4Mi keys, the duplicate search runs on a second thread, in parallel
//   with the rate sort; the result does not depend on it.
// Memory: two arrays of 16-byte (key, rate) pairs; the sorted one becomes the plan's admitted
// list, so the step needs about 32 bytes per key beyond its input.
#include "planner/plan_builder.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "cacheroute/dataplane/key_id.h"

namespace cacheroute::planner {
namespace {

// Destinations beyond this are surely a mistake (and would cost R doubles of memory).
constexpr uint32_t kMaxDestinations = 1u << 20;

constexpr int kDigitBits = 11;
constexpr size_t kBuckets = size_t{1} << kDigitBits;
constexpr int kMaxDigits = (64 + kDigitBits - 1) / kDigitBits;  // 6
// Inputs in this range look for duplicate keys on a second thread.
constexpr size_t kParallelMinKeys = size_t{1} << 16;
constexpr size_t kParallelMaxKeys = size_t{1} << 22;
// Runs up to this long are sorted by comparison; longer ones by radix.
constexpr size_t kComparisonSortMax = 256;

// Sort key for "decreasing rate": rates are ≥ +0.0 here, whose bit patterns increase with the
// value, so the complement decreases with it.
inline uint64_t DescendingRateBits(double rate) { return ~std::bit_cast<uint64_t>(rate); }

struct ByKey {
  uint64_t operator()(const KeyRate& kr) const { return kr.key; }
};
struct ByDescendingRate {
  uint64_t operator()(const KeyRate& kr) const { return DescendingRateBits(kr.rate); }
};
struct Identity {
  uint64_t operator()(uint64_t key) const { return key; }
};

inline bool RateOrderLess(const KeyRate& a, const KeyRate& b) {
  return a.rate > b.rate || (a.rate == b.rate && a.key < b.key);
}

// Stable LSD radix sort of items[0, n) by bits [lowest_bit, 64) of word(item), using scratch[0, n)
// as the second buffer. Digits that are equal for every item are skipped. The result is left in
// `items`.
template <typename T, typename Word>
void LsdSort(T* items, T* scratch, size_t n, Word word, int lowest_bit) {
  if (n < 2) return;
  const int digits = (64 - lowest_bit + kDigitBits - 1) / kDigitBits;
  static thread_local std::array<std::array<size_t, kBuckets>, kMaxDigits> counts;
  for (int d = 0; d < digits; ++d) counts[d].fill(0);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t w = word(items[i]) >> lowest_bit;
    for (int d = 0; d < digits; ++d) ++counts[d][(w >> (d * kDigitBits)) & (kBuckets - 1)];
  }
  T* src = items;
  T* dst = scratch;
  for (int d = 0; d < digits; ++d) {
    auto& count = counts[d];
    const int shift = lowest_bit + d * kDigitBits;
    if (count[(word(src[0]) >> shift) & (kBuckets - 1)] == n) continue;  // constant digit
    size_t offset = 0;
    for (size_t& c : count) offset += std::exchange(c, offset);
    for (size_t i = 0; i < n; ++i) dst[count[(word(src[i]) >> shift) & (kBuckets - 1)]++] = src[i];
    std::swap(src, dst);
  }
  if (src != items) std::copy(src, src + n, items);
}

// Sorts items[0, n) exactly by `less`: by comparison when short, else by LSD radix on `words`
// (least significant first).
template <typename T, typename Less, typename... Words>
void SortRun(T* items, T* scratch, size_t n, Less less, Words... words) {
  if (n <= kComparisonSortMax) {
    std::sort(items, items + n, less);
    return;
  }
  (LsdSort(items, scratch, n, words, 0), ...);
}

// The first step of TopBitsSort: a stable radix sort of items[0, n) by the top `top_bits` of the
// bits in which their words differ. Returns the lowest bit sorted on; runs of items whose words
// agree from that bit up are left in input order. 64 when every word is equal (nothing moved).
template <typename T, typename Word>
int TopBitsRadix(T* items, T* scratch, size_t n, Word word, int top_bits) {
  uint64_t differ = 0;
  const uint64_t first = n > 0 ? word(items[0]) : 0;
  for (size_t i = 0; i < n; ++i) differ |= word(items[i]) ^ first;
  if (differ == 0) return 64;
  const int highest = 63 - std::countl_zero(differ);
  const int lowest_bit = std::max(0, highest + 1 - top_bits);
  LsdSort(items, scratch, n, word, lowest_bit);
  return lowest_bit;
}

// Sorts items[0, n) by `less`, where word(item) is a 64-bit image of the order's leading part:
// radix on the top `top_bits` of the bits in which the words differ, then exact sorting of each
// run that agrees in those bits (by `less`, or by radix on `run_words` when the run is long).
template <typename T, typename Word, typename Less, typename... RunWords>
void TopBitsSort(T* items, T* scratch, size_t n, Word word, int top_bits, Less less,
                 RunWords... run_words) {
  if (n < 2) return;
  const int lowest_bit = TopBitsRadix(items, scratch, n, word, top_bits);
  if (lowest_bit == 64) {
    SortRun(items, scratch, n, less, run_words...);
    return;
  }
  for (size_t begin = 0; begin < n;) {
    const uint64_t prefix = word(items[begin]) >> lowest_bit;
    size_t end = begin + 1;
    while (end < n && (word(items[end]) >> lowest_bit) == prefix) ++end;
    if (end - begin > 1) SortRun(items + begin, scratch, end - begin, less, run_words...);
    begin = end;
  }
}

std::string FormatRate(double rate) { return absl::StrFormat("%g", rate); }

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

uint64_t SaturatingMultiply(uint64_t a, uint64_t b) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a) {
    return std::numeric_limits<uint64_t>::max();
  }
  return a * b;
}

// A tournament (winner) tree over the destinations' expected loads. Each internal node holds the
// index of the lesser of its children by (value, index); every left subtree holds lower indices
// than its right sibling, so a tie goes left. The root is "the least-loaded destination, ties
// lowest index". Excluding a destination lets the k smallest be read one after another, so they
// are distinct. Values are the bit patterns of the non-negative loads, which order the same way.
class LoadTournament {
 public:
  explicit LoadTournament(std::span<const double> loads)
      : leaves_(std::bit_ceil(static_cast<uint32_t>(loads.size()))),
        value_(leaves_, kExcluded),
        tree_(2 * leaves_) {
    for (size_t r = 0; r < loads.size(); ++r) value_[r] = std::bit_cast<uint64_t>(loads[r]);
    for (uint32_t i = 0; i < leaves_; ++i) tree_[leaves_ + i] = i;
    for (uint32_t node = leaves_ - 1; node >= 1; --node) {
      const uint32_t left = tree_[2 * node], right = tree_[2 * node + 1];
      tree_[node] = value_[right] < value_[left] ? right : left;
    }
  }
  uint32_t Min() const { return tree_[1]; }
  void Set(uint32_t r, double load) { Replay(r, std::bit_cast<uint64_t>(load)); }
  void Exclude(uint32_t r) { Replay(r, kExcluded); }

 private:
  // Above every finite load's bit pattern, and small enough that 2·v + 1 fits 64 bits.
  static constexpr uint64_t kExcluded = std::numeric_limits<uint64_t>::max() >> 1;

  // Replays r's path to the root carrying the running winner in registers. The sibling's key is
  // 2·v + (sibling is the right child) against the chain's 2·best + 1, so the sibling wins a tie
  // exactly when it is the left one; the serial chain is one comparison and one select per level,
  // written as arithmetic because which side wins is a coin toss to a branch predictor.
  void Replay(uint32_t r, uint64_t value) {
    value_[r] = value;
    uint32_t winner = r;
    uint64_t best = value;
    for (uint32_t child = leaves_ + r; child > 1; child /= 2) {
      const uint32_t sibling = tree_[child ^ 1];
      const uint64_t sibling_key = 2 * value_[sibling] + (~child & 1);
      const uint64_t wins = uint64_t{0} - static_cast<uint64_t>(sibling_key < 2 * best + 1);
      winner ^= (winner ^ sibling) & static_cast<uint32_t>(wins);
      best ^= (best ^ (sibling_key >> 1)) & wins;
      tree_[child / 2] = winner;
    }
  }

  const uint32_t leaves_;
  std::vector<uint64_t> value_;  // per leaf; kExcluded for padding and excluded destinations
  std::vector<uint32_t> tree_;   // 1-based; leaves at [leaves_, 2·leaves_)
};

// k_b, the number of assignments of a key with `rate` (1 without replication).
uint32_t Assignments(const PlanConfig& config, double rate, bool* capped = nullptr) {
  return config.replicate ? AssignmentCount(rate, config.q_cap, config.destinations, capped) : 1;
}

// Lays out the admitted keys' destinations key by key: key i's k = Assignments(config, rate)
// destinations are destination_ids[offsets[i], offsets[i + 1]), written by
// choose(i, k, share, chosen) with share = rate / k; then each is charged charge(d, share) and the
// run is sorted.
template <class Choose, class Charge>
void PlaceEach(const PlanConfig& config, std::span<const KeyRate> admitted,
               std::span<uint32_t> offsets, std::span<uint32_t> destination_ids, Choose choose,
               Charge charge) {
  uint32_t offset = 0;
  for (size_t i = 0; i < admitted.size(); ++i) {
    offsets[i] = offset;
    const double rate = admitted[i].rate;
    const uint32_t k = Assignments(config, rate);
    const double share = k == 1 ? rate : rate / k;  // most keys have one: no division
    uint32_t* chosen = destination_ids.data() + offset;
    choose(i, k, share, chosen);
    for (uint32_t j = 0; j < k; ++j) charge(chosen[j], share);
    if (k > 1) std::sort(chosen, chosen + k);
    offset += k;
  }
  offsets[admitted.size()] = offset;
}

// LPT: each of a key's k jobs goes to the least loaded destination not yet chosen for it (ties:
// lowest index).
void PlaceLpt(const PlanConfig& config, std::span<const KeyRate> admitted,
              std::span<uint32_t> offsets, std::span<uint32_t> destination_ids,
              std::span<double> loads) {
  LoadTournament tournament(loads);
  PlaceEach(
      config, admitted, offsets, destination_ids,
      [&](size_t, uint32_t k, double, uint32_t* chosen) {
        if (k == 1) {  // nothing to exclude: the charge below replays the one pick
          chosen[0] = tournament.Min();
          return;
        }
        for (uint32_t j = 0; j < k; ++j) {
          chosen[j] = tournament.Min();
          tournament.Exclude(chosen[j]);
        }
      },
      [&](uint32_t d, double share) {
        loads[d] += share;
        tournament.Set(d, loads[d]);
      });
}

// LPT with placement hysteresis (PlanConfig::stickiness) and warm hints: like PlaceLpt, except
// that a job first tries the key's previous destinations (when `previous` is given) and the
// destination where the key is warm (`warm`) not yet chosen for it, and stays on the least loaded
// of them if that keeps it at or under (1 + stickiness) × mean_load. Counts the jobs that ended on
// a previous destination in *kept and on the warm one in *warmed.
void PlaceSticky(const PlanConfig& config, const Plan* previous,
                 const absl::flat_hash_map<uint64_t, uint32_t>& warm, double mean_load,
                 std::span<const KeyRate> admitted, std::span<uint32_t> offsets,
                 std::span<uint32_t> destination_ids, std::span<double> loads, uint64_t* kept,
                 uint64_t* warmed) {
  absl::flat_hash_map<uint64_t, uint32_t> previous_index;
  if (previous != nullptr) {
    previous_index.reserve(previous->size());
    for (size_t i = 0; i < previous->size(); ++i) {
      previous_index.emplace(previous->key(i), static_cast<uint32_t>(i));
    }
  }
  const double cap = (1.0 + config.stickiness) * mean_load;
  const uint32_t r_count = config.destinations;
  LoadTournament tournament(loads);
  PlaceEach(
      config, admitted, offsets, destination_ids,
      [&](size_t i, uint32_t k, double share, uint32_t* chosen) {
        std::span<const uint32_t> before;
        if (auto it = previous_index.find(admitted[i].key); it != previous_index.end()) {
          before = previous->destinations(it->second);
        }
        uint32_t hot = r_count;  // where the key is warm, if anywhere
        if (auto it = warm.find(admitted[i].key); it != warm.end()) hot = it->second;
        auto fits = [&](uint32_t d, uint32_t j) {
          return d < r_count && std::find(chosen, chosen + j, d) == chosen + j &&
                 loads[d] + share <= cap;
        };
        for (uint32_t j = 0; j < k; ++j) {
          // The least loaded candidate still free for this key that stays under the cap (ties:
          // the warm one, then the lowest index); else where LPT puts it.
          uint32_t pick = fits(hot, j) ? hot : r_count;
          for (uint32_t d : before) {
            if (fits(d, j) && (pick == r_count || loads[d] < loads[pick])) pick = d;
          }
          if (pick == r_count) pick = tournament.Min();
          if (pick == hot) {
            ++*warmed;
          } else if (std::find(before.begin(), before.end(), pick) != before.end()) {
            ++*kept;
          }
          chosen[j] = pick;
          tournament.Exclude(pick);
        }
      },
      [&](uint32_t d, double share) {
        loads[d] += share;
        tournament.Set(d, loads[d]);
      });
}

// The kHashed placement: key i's k_b distinct destinations are the first distinct values of
// Reduce(Mix64(key, seed, j)) for j = 0, 1, ..., ignoring load; loads still get λ_b/k_b each.
void PlaceHashed(const PlanConfig& config, std::span<const KeyRate> admitted,
                 std::span<uint32_t> offsets, std::span<uint32_t> destination_ids,
                 std::span<double> loads) {
  const uint32_t r_count = config.destinations;
  const uint64_t seed = config.placement_seed * 0x9e3779b97f4a7c15ULL + 0x2545f4914f6cdd1dULL;
  std::vector<bool> taken(r_count, false);
  PlaceEach(
      config, admitted, offsets, destination_ids,
      [&](size_t i, uint32_t k, double, uint32_t* chosen) {
        uint64_t h = admitted[i].key ^ seed;
        for (uint32_t j = 0; j < k;) {
          h = dataplane::Mix64(h + 0x9e3779b97f4a7c15ULL);
          const auto d = static_cast<uint32_t>((static_cast<unsigned __int128>(h) * r_count) >> 64);
          if (taken[d]) continue;
          taken[d] = true;
          chosen[j++] = d;
        }
        for (uint32_t j = 0; j < k; ++j) taken[chosen[j]] = false;
      },
      [&](uint32_t d, double share) { loads[d] += share; });
}

// PlanConfig::spill: one destination outside each key's set, by least spill load (ties: least
// expected load, then lowest index), keys in decreasing rate.
std::vector<uint32_t> PlaceSpills(const Plan& plan, std::span<const double> loads) {
  const uint32_t r_count = static_cast<uint32_t>(loads.size());
  std::vector<uint32_t> spills(plan.size(), kNoSpill);
  std::vector<double> spill_load(r_count, 0.0);
  for (size_t i = 0; i < plan.size(); ++i) {
    const std::span<const uint32_t> set = plan.destinations(i);
    if (set.size() >= r_count) continue;
    uint32_t best = kNoSpill;
    for (uint32_t d = 0, j = 0; d < r_count; ++d) {
      if (j < set.size() && set[j] == d) {  // sets are sorted
        ++j;
        continue;
      }
      if (best == kNoSpill || spill_load[d] < spill_load[best] ||
          (spill_load[d] == spill_load[best] && loads[d] < loads[best])) {
        best = d;
      }
    }
    spills[i] = best;
    spill_load[best] += plan.rate(i);
  }
  return spills;
}

// ---------------------------------------------------------------------------------------------
// Byte-aware planning (PlanConfig::kv_budget_tokens; docs/planner.md, "Byte-aware planning").

bool IsByteAware(const PlanConfig& config) { return config.kv_budget_tokens > 0; }

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
            "tokens[%u].%s (key %u): must be a finite number >= 0 or kUnmeasured (-1), got %s", i,
            field, rates[i].key, FormatRate(value)));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

namespace plan_builder_internal {

// The estimates byte-aware planning ranks and places keys by, per key i of the input:
//   s_i  reusable tokens (measured, or the measured keys' rate-weighted mean)
//   p_i  prompt tokens, ≥ s_i (measured, or s_i plus the measured keys' mean unique tokens)
//   h    the chance a key's prefix is still cached when the key returns to one of its k_b
//        destinations: x / (1 + x), x = (λ_i / k_b) · T, i.e. the prefix lives an exponential
//        time with mean T, the turnover time of a destination's KV cache: its capacity over the
//        tokens flowing into it (every request's unique tokens plus the prefixes it misses)
//   work λ_i · (p_i − s_i · h + overhead) tokens/s, what the key costs its destinations
//   saved λ_i · s_i · h tokens/s, what keeping it warm saves
class WorkModel {
 public:
  // nullopt when no key is measured.
  static std::optional<WorkModel> Make(std::span<const KeyRate> rates,
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

}  // namespace plan_builder_internal

namespace {

using plan_builder_internal::WorkModel;

// The per-assignment work cap, like the rate cap (PlanConfig::q_cap, ::balance_share) in work:
// q_cap requests of the fleet's mean work, and at most balance_share of a destination's mean
// work. Also the fleet's total expected work with every key on one destination, whose per-key
// terms go to work1[i].
struct WorkCap {
  double cap = 0;
  double total_work = 0;
};
WorkCap ComputeWorkCap(std::span<const KeyRate> rates, const WorkModel& model,
                       const PlanConfig& config, double* work1, double* survival1 = nullptr) {
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

// k_b of a key whose work at one destination is `work1` (a split key's prefix is revisited less
// often on each destination, so its work at k_b is higher; k_b is not revised for that).
uint32_t KeyAssignments(double work1, const PlanConfig& config, double work_cap,
                        bool* capped = nullptr) {
  if (capped != nullptr) *capped = false;
  if (!config.replicate || work_cap <= 0) return 1;
  return AssignmentCount(work1, work_cap, config.destinations, capped);
}

// A key byte-aware admission took.
struct AdmittedKey {
  uint32_t index;  // into the rates
  uint32_t k;
  double job;  // expected work per assignment
};

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

// A ranked key of byte-aware admission, in a KeyRate's 16 bytes so the radix sort moves no more
// than the rate order's: `rate` is its saved work, `key` its input index (high 32 bits) and its
// cost to the budget rounded up to a float (low 32 bits), which lets the scan decide most runs
// without reading the exact cost.
uint32_t RankedIndex(const KeyRate& kr) { return static_cast<uint32_t>(kr.key >> 32); }
float RankedCostAbove(const KeyRate& kr) {
  return std::bit_cast<float>(static_cast<uint32_t>(kr.key));
}
uint64_t PackRanked(size_t index, double cost) {
  float up = static_cast<float>(cost);
  if (static_cast<double>(up) < cost)
    up = std::nextafter(up, std::numeric_limits<float>::infinity());
  return (uint64_t{static_cast<uint32_t>(index)} << 32) | std::bit_cast<uint32_t>(up);
}

// The byte-aware admission order: sorted[0, n) becomes ranked keys radix-sorted by the top bits
// of their saved work (decreasing); returns the lowest bit sorted on (TopBitsRadix). Runs that
// agree in those bits stay in input order: the scan orders them exactly when it matters.
// cost[i] is what key i takes from the budget, reusable × k_b (on entry: its survival at one
// destination, from ComputeWorkCap); *least the least cost of a key that saves work (infinity
// when none does). Needs n < 2^32.
int RankBySavedWork(std::span<const KeyRate> rates, const WorkModel& model,
                    const PlanConfig& config, double work_cap, const double* work1, double* cost,
                    double* least, KeyRate* sorted, KeyRate* scratch) {
  const size_t n = rates.size();
  *least = std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < n; ++i) {
    const uint32_t k = KeyAssignments(work1[i], config, work_cap);
    const double rate = rates[i].rate;
    const double reusable = model.Reusable(i);
    // model.Saved(i, k), with the survival at k = 1 as ComputeWorkCap found it.
    const double saved = rate > 0 ? (k == 1 ? rate * reusable * cost[i] : model.Saved(i, k)) : 0.0;
    cost[i] = reusable * k;
    sorted[i] = {PackRanked(i, cost[i]), saved > 0 ? saved : 0.0};
    if (saved > 0) *least = std::min(*least, cost[i]);
  }
  return TopBitsRadix(sorted, scratch, n, ByDescendingRate(), 22);
}

}  // namespace

uint32_t AssignmentCount(double rate, double q_cap, uint32_t destinations, bool* capped) {
  if (capped != nullptr) *capped = false;
  if (rate <= q_cap) return 1;  // the common case, decided without a division
  const double ratio = rate / q_cap;
  if (!(ratio <= static_cast<double>(destinations))) {  // also catches an infinite ratio
    if (capped != nullptr) *capped = true;
    return destinations;
  }
  uint32_t k = std::max<uint32_t>(1, static_cast<uint32_t>(std::ceil(ratio)));
  // The division above rounds; settle on the smallest k with fl(rate / k) ≤ q_cap, which is what
  // the per-assignment cap promises.
  while (rate / k > q_cap) {
    if (k == destinations) {
      if (capped != nullptr) *capped = true;
      return k;
    }
    ++k;
  }
  while (k > 1 && rate / (k - 1) <= q_cap) --k;
  return k;
}

absl::Status ValidatePlanConfig(const PlanConfig& config) {
  if (config.destinations == 0 || config.destinations > kMaxDestinations) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "destinations must be between 1 and %u, got %u", kMaxDestinations, config.destinations));
  }
  if (!std::isfinite(config.q_cap) || config.q_cap <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("q_cap must be a finite number > 0, got %s", FormatRate(config.q_cap)));
  }
  if (config.slots_per_destination == 0) {
    return absl::InvalidArgumentError("slots_per_destination must be >= 1, got 0");
  }
  if (!(config.unkeyed_rate >= 0) || std::isinf(config.unkeyed_rate)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "unkeyed_rate must be a finite number >= 0, got %s", FormatRate(config.unkeyed_rate)));
  }
  if (!(config.balance_share >= 0) || std::isinf(config.balance_share)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "balance_share must be a finite number >= 0, got %s", FormatRate(config.balance_share)));
  }
  if (!(config.stickiness >= 0) || std::isinf(config.stickiness)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "stickiness must be a finite number >= 0, got %s", FormatRate(config.stickiness)));
  }
  for (const auto& [field, value] :
       {std::pair{"kv_budget_tokens", config.kv_budget_tokens},
        std::pair{"kv_capacity_tokens", config.kv_capacity_tokens},
        std::pair{"request_overhead_tokens", config.request_overhead_tokens}}) {
    if (!(value >= 0) || std::isinf(value)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s must be a finite number >= 0, got %s", field, FormatRate(value)));
    }
  }
  if (IsByteAware(config) && config.placement != Placement::kLpt) {
    return absl::InvalidArgumentError(
        "placement must be LPT when kv_budget_tokens > 0 (byte-aware planning), got hashed");
  }
  return absl::OkStatus();
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
  out.k = KeyAssignments(work1[i], config, cap.cap, &out.capped);
  out.measured = tokens[i].reusable >= 0;
  out.reusable = model->Reusable(i);
  out.prompt = model->Prompt(i);
  out.saved = rates[i].rate > 0 ? model->Saved(i, out.k) : 0;
  out.work = model->Work(i, out.k);
  out.cost = out.reusable * out.k;
  return out;
}

PlanBuilder::PlanBuilder(base::Clock* clock) : clock_(clock) {}

absl::StatusOr<Plan> PlanBuilder::Build(std::span<const KeyRate> rates, const PlanConfig& config) {
  return Build(rates, config, nullptr);
}

absl::StatusOr<Plan> PlanBuilder::Build(std::span<const KeyRate> rates, const PlanConfig& config,
                                        const Plan* previous) {
  return Build(rates, config, previous, {}, {});
}

absl::StatusOr<Plan> PlanBuilder::Build(std::span<const KeyRate> rates, const PlanConfig& config,
                                        const Plan* previous, std::span<const KeyWarmth> warm,
                                        std::span<const KeyTokens> tokens) {
  const absl::Time start = clock_ != nullptr ? clock_->Now() : absl::InfinitePast();
  if (absl::Status status = ValidatePlanConfig(config); !status.ok()) return status;
  const size_t n = rates.size();
  std::optional<WorkModel> model;
  const bool maybe_bytes = IsByteAware(config) && !tokens.empty();
  if (maybe_bytes) {
    if (absl::Status status = ValidateTokens(rates, tokens); !status.ok()) return status;
    if (n > std::numeric_limits<uint32_t>::max()) {
      return absl::OutOfRangeError(
          absl::StrFormat("rates: %u keys; byte-aware planning takes at most 2^32-1", n));
    }
  }

  // Workspace: `sorted_` keeps its size between builds (only its first n entries are used), and
  // scratch_ holds n (key, rate) pairs or, while looking for duplicates, 2n bare keys.
  if (sorted_.size() < n) sorted_.resize(n);
  if (scratch_size_ < n) {
    scratch_.reset(new std::byte[n * sizeof(KeyRate)]);
    scratch_size_ = n;
  }
  KeyRate* const sorted = sorted_.data();
  KeyRate* const scratch = reinterpret_cast<KeyRate*>(scratch_.get());

  // Validate and copy; -0.0 becomes +0.0 so the bit-pattern order holds.
  bool sorted_by_key = true;
  for (size_t i = 0; i < n; ++i) {
    const KeyRate& kr = rates[i];
    if (!(kr.rate >= 0) || std::isinf(kr.rate)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("rates[%u] (key %u): rate must be a finite number >= 0, got %s", i,
                          kr.key, FormatRate(kr.rate)));
    }
    if (!maybe_bytes) sorted[i] = {kr.key, kr.rate == 0 ? 0.0 : kr.rate};
    if (i > 0 && rates[i - 1].key >= kr.key) sorted_by_key = false;
  }

  // Duplicate keys, found among the bare keys (half the bytes to move of full pairs). For
  // mid-sized inputs this runs on a second thread while this one sorts by rate; it then needs a
  // buffer of its own, which very large inputs do without so peak memory stays ~48 bytes per key.
  bool duplicate_found = false;
  uint64_t duplicate_key = 0;
  auto find_duplicate = [&](uint64_t* keys) {
    for (size_t i = 0; i < n; ++i) keys[i] = rates[i].key;
    TopBitsSort(keys, keys + n, n, Identity(), 22, std::less<uint64_t>(), Identity());
    for (size_t i = 1; i < n; ++i) {
      if (keys[i] == keys[i - 1]) {
        duplicate_found = true;
        duplicate_key = keys[i];
        return;
      }
    }
  };
  std::thread dedup_thread;
  if (!sorted_by_key) {
    if (n >= kParallelMinKeys && n <= kParallelMaxKeys) {
      if (dedup_size_ < n) {
        dedup_.reset(new uint64_t[2 * n]);
        dedup_size_ = n;
      }
      try {
        dedup_thread = std::thread(find_duplicate, dedup_.get());
      } catch (const std::system_error&) {
        find_duplicate(dedup_.get());  // no thread to be had: do it here
      }
    } else {
      find_duplicate(reinterpret_cast<uint64_t*>(scratch_.get()));
      if (duplicate_found) return DuplicateKeyError(rates, duplicate_key);
    }
  }
  if (maybe_bytes) {
    model = WorkModel::Make(rates, tokens, config);
    if (!model.has_value()) {  // no key measured: the slot model, which sorts the pairs
      for (size_t i = 0; i < n; ++i)
        sorted[i] = {rates[i].key, rates[i].rate == 0 ? 0.0 : rates[i].rate};
    }
  }
  WorkCap work_cap;
  int lowest_bit = 64;
  double least_cost = 0;
  if (model.has_value()) {
    if (work1_.size() < n) work1_.resize(n);
    if (cost_.size() < n) cost_.resize(n);
    work_cap = ComputeWorkCap(rates, *model, config, work1_.data(), cost_.data());
    lowest_bit = RankBySavedWork(rates, *model, config, work_cap.cap, work1_.data(), cost_.data(),
                                 &least_cost, sorted, scratch);
  } else {
    TopBitsSort(sorted, scratch, n, ByDescendingRate(), 22, RateOrderLess, ByKey(),
                ByDescendingRate());
  }
  if (dedup_thread.joinable()) dedup_thread.join();
  if (duplicate_found) return DuplicateKeyError(rates, duplicate_key);
  if (model.has_value()) {
    return BuildByteAware(rates, config, previous, *model, work_cap.cap, work_cap.total_work,
                          lowest_bit, least_cost, start);
  }

  // The cap every k_b below is computed with (PlanConfig::balance_share).
  PlanConfig capped_config = config;
  if (config.balance_share > 0) {
    double total = config.unkeyed_rate;
    for (size_t i = 0; i < n; ++i) total += sorted[i].rate;
    const double share_cap = config.balance_share * total / config.destinations;
    if (share_cap > 0 && share_cap < config.q_cap) capped_config.q_cap = share_cap;
  }

  Plan plan;
  plan.config_ = config;
  plan.stats_.effective_q_cap = capped_config.q_cap;
  PlanStats& stats = plan.stats_;
  stats.input_keys = n;
  stats.slot_capacity = SaturatingMultiply(config.destinations, config.slots_per_destination);

  // Admission: decreasing rate while Σk_b ≤ C, stopping at the first key that does not fit.
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
  if (admitted > 0 && sorted_.size() <= 2 * admitted) {
    sorted_.resize(admitted);
    plan.admitted_ = std::move(sorted_);
    sorted_ = std::vector<KeyRate>();
  } else {
    plan.admitted_.assign(sorted, sorted + admitted);
  }

  // LPT (or the hashed ablation) over the admitted keys, on top of the cold-tail share.
  const uint32_t r_count = config.destinations;
  plan.loads_.assign(r_count, cold_tail / r_count);
  plan.offsets_.resize(admitted + 1);
  plan.destination_ids_.resize(slots);
  if (config.placement == Placement::kHashed) {
    PlaceHashed(capped_config, plan.admitted_, plan.offsets_, plan.destination_ids_, plan.loads_);
  } else if ((previous != nullptr && config.stickiness > 0 && previous->size() > 0) ||
             !warm.empty()) {
    absl::flat_hash_map<uint64_t, uint32_t> warm_index;
    warm_index.reserve(warm.size());
    for (const KeyWarmth& w : warm) warm_index[w.key] = w.destination;
    PlaceSticky(capped_config, config.stickiness > 0 ? previous : nullptr, warm_index,
                (cold_tail + admitted_rate) / r_count, plan.admitted_, plan.offsets_,
                plan.destination_ids_, plan.loads_, &stats.kept_assignments,
                &stats.warm_assignments);
  } else {
    PlaceLpt(capped_config, plan.admitted_, plan.offsets_, plan.destination_ids_, plan.loads_);
  }

  if (config.spill && r_count >= 2) plan.spills_ = PlaceSpills(plan, plan.loads_);

  stats.max_load = *std::max_element(plan.loads_.begin(), plan.loads_.end());
  stats.mean_load = stats.total_rate / r_count;
  stats.imbalance = stats.mean_load > 0 ? stats.max_load / stats.mean_load : 1.0;
  if (clock_ != nullptr) stats.build_seconds = absl::ToDoubleSeconds(clock_->Now() - start);
  return plan;
}

// Byte-aware planning: sorted_ holds (input index, saved work) in admission order
// (RankBySavedWork).
absl::StatusOr<Plan> PlanBuilder::BuildByteAware(std::span<const KeyRate> rates,
                                                 const PlanConfig& config, const Plan* previous,
                                                 const WorkModel& model, double work_cap,
                                                 double total_work, int lowest_bit,
                                                 double least_cost, absl::Time start) {
  const size_t n = rates.size();
  KeyRate* const ranked = sorted_.data();
  const uint32_t r_count = config.destinations;
  Plan plan;
  plan.config_ = config;
  PlanStats& stats = plan.stats_;
  stats.input_keys = n;
  stats.slot_capacity = SaturatingMultiply(config.destinations, config.slots_per_destination);
  stats.byte_aware = true;
  stats.measured_keys = model.measured();
  stats.turnover_seconds = model.turnover();
  stats.effective_work_cap = work_cap;
  stats.effective_q_cap = config.q_cap;
  stats.kv_budget = config.kv_budget_tokens * r_count;

  // Admission: decreasing saved work; a key whose reusable tokens × k_b do not fit what is left
  // of the budget is skipped; keys that save nothing are never admitted.
  const double* const cost = cost_.data();
  std::vector<AdmittedKey> admitted;
  uint64_t slots = 0;
  double kv_used = 0, admitted_rate = 0, saved = 0, possible = 0, admitted_work = 0;
  const auto admit = [&](size_t r) -> absl::Status {
    const uint32_t i = RankedIndex(ranked[r]);
    bool capped = false;
    const uint32_t k = KeyAssignments(work1_[i], config, work_cap, &capped);
    if (slots + k > std::numeric_limits<uint32_t>::max()) {
      return absl::OutOfRangeError(
          absl::StrFormat("kv_budget_tokens %s admits more than 2^32-1 assignments; lower it",
                          FormatRate(config.kv_budget_tokens)));
    }
    kv_used += cost[i];
    slots += k;
    admitted_rate += rates[i].rate;
    saved += ranked[r].rate;
    const double work = model.Work(i, k);
    admitted_work += work;
    if (capped) ++stats.capped_keys;
    admitted.push_back({i, k, work / k});
    return absl::OkStatus();
  };
  // The ranking is radix-sorted on the saved work's top bits only. A run of keys that agree in
  // them is taken whole when it surely fits and skipped when surely none of it does (decided on
  // the costs rounded to floats, bounded from above and below), whatever its order; only a run
  // in between is sorted exactly (saved work descending, key ascending) and taken key by key.
  const auto top = [&](const KeyRate& kr) {
    return lowest_bit == 64 ? 0 : DescendingRateBits(kr.rate) >> lowest_bit;
  };
  const auto exact = [&](const KeyRate& a, const KeyRate& b) {
    return a.rate > b.rate ||
           (a.rate == b.rate && rates[RankedIndex(a)].key < rates[RankedIndex(b)].key);
  };
  size_t begin = 0;
  // Once not even the cheapest key fits what is left, the rest is only summed.
  while (begin < n && kv_used + least_cost <= stats.kv_budget) {
    size_t end = begin + 1;
    while (end < n && top(ranked[end]) == top(ranked[begin])) ++end;
    double most = 0;                                       // ≥ the run's cost
    float least = std::numeric_limits<float>::infinity();  // ≥ its cheapest key's cost
    for (size_t r = begin; r < end; ++r) {
      possible += ranked[r].rate;
      if (ranked[r].rate <= 0) continue;  // saves nothing: never admitted
      most += RankedCostAbove(ranked[r]);
      least = std::min(least, RankedCostAbove(ranked[r]));
    }
    const double least_below = std::nextafter(least, 0.0f);  // ≤ the cheapest key's cost
    if (kv_used + most <= stats.kv_budget) {
      for (size_t r = begin; r < end; ++r) {
        if (ranked[r].rate <= 0) continue;
        if (absl::Status s = admit(r); !s.ok()) return s;
      }
    } else if (kv_used + least_below <= stats.kv_budget) {
      std::sort(ranked + begin, ranked + end, exact);
      for (size_t r = begin; r < end; ++r) {
        if (ranked[r].rate <= 0 || kv_used + cost[RankedIndex(ranked[r])] > stats.kv_budget) {
          continue;
        }
        if (absl::Status s = admit(r); !s.ok()) return s;
      }
    }
    begin = end;
  }
  for (; begin < n; ++begin) possible += ranked[begin].rate;
  const size_t m = admitted.size();

  double cold_tail = config.unkeyed_rate;
  for (size_t i = 0; i < n; ++i) cold_tail += rates[i].rate;
  cold_tail = std::max(0.0, cold_tail - admitted_rate);
  // Total work: k_b was chosen from each key's work at one destination; admitted keys do their
  // work at k_b.
  double work_sum = total_work;
  for (const AdmittedKey& a : admitted) work_sum += a.job * a.k - work1_[a.index];
  const double tail_work = std::max(0.0, work_sum - admitted_work);
  stats.admitted_keys = m;
  stats.slots_used = slots;
  stats.admitted_rate = admitted_rate;
  stats.cold_tail_rate = cold_tail;
  stats.total_rate = cold_tail + admitted_rate;
  stats.kv_used = kv_used;
  stats.saved_work = saved;
  stats.possible_saved_work = possible;
  stats.total_work = work_sum;

  // Each admitted key's destinations, at offset[j] in `sets` (admission order).
  std::vector<uint32_t> offset(m + 1, 0);
  for (size_t j = 0; j < m; ++j) offset[j + 1] = offset[j] + admitted[j].k;
  std::vector<uint32_t> sets(slots);
  plan.loads_.assign(r_count, cold_tail / r_count);
  plan.work_loads_.assign(r_count, tail_work / r_count);
  stats.kept_assignments = PlaceByWork(config, rates, admitted, offset, model, previous,
                                       work_sum / r_count, sets, plan.loads_, plan.work_loads_);

  // The plan lists its keys in decreasing rate, ties key ascending, like every plan.
  std::vector<uint32_t> by_rate(m);
  std::iota(by_rate.begin(), by_rate.end(), 0u);
  std::sort(by_rate.begin(), by_rate.end(), [&](uint32_t a, uint32_t b) {
    return RateOrderLess(rates[admitted[a].index], rates[admitted[b].index]);
  });
  plan.admitted_.resize(m);
  plan.work_.resize(m);
  plan.offsets_.resize(m + 1);
  plan.destination_ids_.resize(slots);
  uint32_t next = 0;
  for (size_t j = 0; j < m; ++j) {
    const AdmittedKey& a = admitted[by_rate[j]];
    plan.admitted_[j] = rates[a.index];
    plan.work_[j] = {.reusable = model.Reusable(a.index),
                     .saved = model.Saved(a.index, a.k),
                     .work = a.job * a.k};
    plan.offsets_[j] = next;
    std::copy(sets.begin() + offset[by_rate[j]], sets.begin() + offset[by_rate[j] + 1],
              plan.destination_ids_.begin() + next);
    next += a.k;
  }
  plan.offsets_[m] = next;

  if (config.spill && r_count >= 2) plan.spills_ = PlaceSpills(plan, plan.loads_);

  stats.max_load = *std::max_element(plan.loads_.begin(), plan.loads_.end());
  stats.mean_load = stats.total_rate / r_count;
  stats.imbalance = stats.mean_load > 0 ? stats.max_load / stats.mean_load : 1.0;
  const double max_work = *std::max_element(plan.work_loads_.begin(), plan.work_loads_.end());
  const double mean_work = work_sum / r_count;
  stats.work_imbalance = mean_work > 0 ? max_work / mean_work : 1.0;
  if (clock_ != nullptr) stats.build_seconds = absl::ToDoubleSeconds(clock_->Now() - start);
  return plan;
}

Plan Plan::Remapped(std::span<const uint32_t> index, uint32_t destinations) const {
  const auto mapped = [&](uint32_t d) { return d < index.size() ? index[d] : kNoSpill; };
  Plan out;
  out.config_ = config_;
  out.config_.destinations = destinations;
  out.admitted_ = admitted_;
  out.stats_ = stats_;
  out.offsets_.reserve(offsets_.size());
  out.destination_ids_.reserve(destination_ids_.size());
  for (size_t i = 0; i < size(); ++i) {
    out.offsets_.push_back(static_cast<uint32_t>(out.destination_ids_.size()));
    const size_t first = out.destination_ids_.size();
    for (uint32_t d : this->destinations(i)) {
      if (mapped(d) != kNoSpill) out.destination_ids_.push_back(mapped(d));
    }
    std::sort(out.destination_ids_.begin() + static_cast<std::ptrdiff_t>(first),
              out.destination_ids_.end());
  }
  out.offsets_.push_back(static_cast<uint32_t>(out.destination_ids_.size()));
  if (!spills_.empty()) {
    out.spills_.reserve(spills_.size());
    for (uint32_t s : spills_) out.spills_.push_back(s == kNoSpill ? kNoSpill : mapped(s));
  }
  out.loads_.assign(destinations, 0.0);
  for (size_t d = 0; d < loads_.size(); ++d) {
    if (mapped(static_cast<uint32_t>(d)) != kNoSpill) out.loads_[mapped(d)] = loads_[d];
  }
  out.work_ = work_;
  if (!work_loads_.empty()) {
    out.work_loads_.assign(destinations, 0.0);
    for (size_t d = 0; d < work_loads_.size(); ++d) {
      if (mapped(static_cast<uint32_t>(d)) != kNoSpill) out.work_loads_[mapped(d)] = work_loads_[d];
    }
  }
  return out;
}

absl::StatusOr<Plan> BuildPlan(std::span<const KeyRate> rates, const PlanConfig& config,
                               base::Clock* clock, const Plan* previous,
                               std::span<const KeyWarmth> warm,
                               std::span<const KeyTokens> tokens) {
  return PlanBuilder(clock).Build(rates, config, previous, warm, tokens);
}

}  // namespace cacheroute::planner
