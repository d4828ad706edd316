// See placement.h.
#include "planner/placement.h"

#include <algorithm>

#include "cacheroute/dataplane/key_id.h"

namespace cacheroute::planner {
namespace {

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

}  // namespace

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

std::vector<uint32_t> PlaceSpills(std::span<const KeyRate> admitted,
                                  std::span<const uint32_t> offsets,
                                  std::span<const uint32_t> destination_ids,
                                  std::span<const double> loads) {
  const uint32_t r_count = static_cast<uint32_t>(loads.size());
  std::vector<uint32_t> spills(admitted.size(), kNoSpill);
  std::vector<double> spill_load(r_count, 0.0);
  for (size_t i = 0; i < admitted.size(); ++i) {
    const std::span<const uint32_t> set =
        destination_ids.subspan(offsets[i], offsets[i + 1] - offsets[i]);
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
    spill_load[best] += admitted[i].rate;
  }
  return spills;
}

}  // namespace cacheroute::planner
