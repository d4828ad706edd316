// Placement: where the admitted keys' assignments go, once admission has chosen the keys and the
// destinations carry their cold-tail share. Each placement visits the keys in the order given
// (decreasing rate), gives key i its k_b = Assignments(config, rate) destinations, charges each
// rate / k_b, and writes them, sorted, to destination_ids[offsets[i], offsets[i + 1]):
//
// - PlaceLpt: Algorithm 1's LPT (the CacheRoute paper, §3.1; Graham 1969): each of a key's jobs
//   goes to the least-loaded destination not yet chosen for it, ties lowest index.
// - PlaceSticky: LPT with placement hysteresis and warm hints (PlanConfig::stickiness): a job first
//   tries the key's previous destinations and the one where it is warm, and stays on the least
//   loaded of them that keeps it at or under (1 + stickiness) × the mean load.
// - PlaceHashed: the ablation's load-blind placement (Placement::kHashed).
// - PlaceSpills: after placement, each key's planned second choice outside its set
//   (PlanConfig::spill).
//
// LoadTournament, the least-loaded lookup behind LPT, is shared with byte-aware placement
// (byte_aware.h). All of it is deterministic: ties break by index, never by chance or order of
// memory.
//
// Usage:
//   std::vector<double> loads(config.destinations, cold_tail / config.destinations);
//   std::vector<uint32_t> offsets(admitted.size() + 1), ids(slots);   // slots = Σ k_b
//   PlaceLpt(config, admitted, offsets, ids, loads);
#pragma once

#include <bit>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "planner/plan.h"

namespace cacheroute::planner {

// A tournament (winner) tree over the destinations' expected loads. Each internal node holds the
// index of the lesser of its children by (value, index); every left subtree holds lower indices
// than its right sibling, so a tie goes left. The root is "the least-loaded destination, ties
// lowest index". Excluding a destination lets the k smallest be read one after another, so they
// are distinct. Values are the bit patterns of the non-negative loads, which order the same way.
// Set and Exclude cost one root path (log R); Min is constant.
class LoadTournament {
 public:
  // `loads` are finite and ≥ 0; at least one.
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
  // The least-loaded destination not excluded, ties lowest index.
  uint32_t Min() const { return tree_[1]; }
  // Gives r the load `load` (and takes it back if it was excluded).
  void Set(uint32_t r, double load) { Replay(r, std::bit_cast<uint64_t>(load)); }
  // Takes r out of the running until the next Set(r, ...).
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

// k_b, the number of assignments of a key with `rate` under `config` (AssignmentCount with
// config.q_cap and R; 1 without replication).
inline uint32_t Assignments(const PlanConfig& config, double rate, bool* capped = nullptr) {
  return config.replicate ? AssignmentCount(rate, config.q_cap, config.destinations, capped) : 1;
}

// The placements below share these arguments: the admitted keys in the order they are placed,
// `offsets` (admitted.size() + 1 entries) and `destination_ids` (Σ k_b entries) to write, and
// `loads` (R entries) to add each assignment's rate / k_b to.

// LPT: each of a key's k jobs goes to the least loaded destination not yet chosen for it (ties:
// lowest index).
void PlaceLpt(const PlanConfig& config, std::span<const KeyRate> admitted,
              std::span<uint32_t> offsets, std::span<uint32_t> destination_ids,
              std::span<double> loads);

// LPT with placement hysteresis (PlanConfig::stickiness) and warm hints: like PlaceLpt, except
// that a job first tries the key's previous destinations (when `previous` is given) and the
// destination where the key is warm (`warm`: key → destination) not yet chosen for it, and stays
// on the least loaded of them (ties: the warm one, then the lowest index) if that keeps it at or
// under (1 + stickiness) × mean_load. Destinations ≥ R in either are ignored. Counts the jobs that
// ended on the warm destination in *warmed and on another previous one in *kept.
void PlaceSticky(const PlanConfig& config, const Plan* previous,
                 const absl::flat_hash_map<uint64_t, uint32_t>& warm, double mean_load,
                 std::span<const KeyRate> admitted, std::span<uint32_t> offsets,
                 std::span<uint32_t> destination_ids, std::span<double> loads, uint64_t* kept,
                 uint64_t* warmed);

// The kHashed placement: key i's k_b distinct destinations are the first distinct values of
// Reduce(Mix64(key, seed, j)) for j = 0, 1, ..., ignoring load; loads still get λ_b/k_b each.
void PlaceHashed(const PlanConfig& config, std::span<const KeyRate> admitted,
                 std::span<uint32_t> offsets, std::span<uint32_t> destination_ids,
                 std::span<double> loads);

// PlanConfig::spill, for placed keys (their sorted sets as the placements above write them, keys
// in decreasing rate) and the final loads: one destination outside each key's set, the one with
// the least spill load so far (ties: least expected load, then lowest index), or kNoSpill when the
// set holds every destination.
std::vector<uint32_t> PlaceSpills(std::span<const KeyRate> admitted,
                                  std::span<const uint32_t> offsets,
                                  std::span<const uint32_t> destination_ids,
                                  std::span<const double> loads);

}  // namespace cacheroute::planner
