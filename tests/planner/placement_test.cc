// Tests for planner/placement: the tournament tree against a linear scan, LPT and sticky LPT
// against straightforward implementations (the same floating-point operations in the same order,
// so results must match exactly), LPT's makespan against a brute-force optimum within Graham's
// bound, hashed placement's independence from load, and spills against a linear scan.
#include "planner/placement.h"

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "planner/plan_builder.h"
#include "tests/support/require_ok.h"

namespace cacheroute::planner {
namespace {

// A placement's output: each key's sorted destinations, and the loads.
struct Placed {
  std::vector<std::vector<uint32_t>> sets;
  std::vector<double> loads;
  bool operator==(const Placed&) const = default;
};

// Runs one of placement.h's placements over `admitted` on top of `start` loads.
template <typename Place>
Placed Run(const PlanConfig& config, const std::vector<KeyRate>& admitted,
           const std::vector<double>& start, Place place) {
  uint32_t slots = 0;
  for (const KeyRate& kr : admitted) slots += Assignments(config, kr.rate);
  std::vector<uint32_t> offsets(admitted.size() + 1), ids(slots);
  Placed out{.sets = {}, .loads = start};
  place(offsets, ids, out.loads);
  REQUIRE(offsets.back() == slots);
  for (size_t i = 0; i < admitted.size(); ++i) {
    out.sets.emplace_back(ids.begin() + offsets[i], ids.begin() + offsets[i + 1]);
  }
  return out;
}

// Seeded random keys in decreasing rate (ties key ascending), as admission hands them over.
std::vector<KeyRate> RandomAdmitted(std::mt19937_64& rng, size_t n) {
  std::lognormal_distribution<double> rate(0.0, 1.65);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::set<uint64_t> used;
  std::vector<KeyRate> keys;
  while (keys.size() < n) {
    const uint64_t key = rng() % 100000;
    if (!used.insert(key).second) continue;
    double r = rate(rng);
    if (unit(rng) < 0.2) r = std::round(r);  // ties
    keys.push_back({key, std::max(r, 0.01)});
  }
  std::sort(keys.begin(), keys.end(), [](const KeyRate& a, const KeyRate& b) {
    return a.rate > b.rate || (a.rate == b.rate && a.key < b.key);
  });
  return keys;
}

// Start loads with ties (a shared cold-tail share) and without.
std::vector<double> RandomStart(std::mt19937_64& rng, uint32_t r) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  if (unit(rng) < 0.5) return std::vector<double>(r, std::round(unit(rng) * 4) / 4);
  std::vector<double> loads(r);
  for (double& l : loads) l = std::round(unit(rng) * 8) / 4;
  return loads;
}

// The least-loaded destination among those `usable`, ties lowest index; r_count if none.
uint32_t LeastLoaded(const std::vector<double>& loads, const std::vector<bool>& usable) {
  uint32_t best = static_cast<uint32_t>(loads.size());
  for (uint32_t d = 0; d < loads.size(); ++d) {
    if (usable[d] && (best == loads.size() || loads[d] < loads[best])) best = d;
  }
  return best;
}

TEST_CASE("LoadTournament's Min is a linear scan's least load, ties lowest index") {
  std::mt19937_64 rng(1);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (uint32_t r : {1u, 2u, 3u, 5u, 8u, 13u, 64u, 100u}) {
    std::vector<double> loads(r);
    for (double& l : loads) l = std::round(unit(rng) * 4);  // many ties
    std::vector<bool> live(r, true);
    LoadTournament tournament(loads);
    for (int op = 0; op < 2000; ++op) {
      const uint32_t d = static_cast<uint32_t>(rng() % r);
      if (unit(rng) < 0.3 && std::count(live.begin(), live.end(), true) > 1) {
        tournament.Exclude(d);
        live[d] = false;
      } else {
        loads[d] = std::round(unit(rng) * 4) + (unit(rng) < 0.5 ? 0 : 1e300 * unit(rng));
        tournament.Set(d, loads[d]);
        live[d] = true;
      }
      INFO("R " << r << " op " << op);
      REQUIRE(tournament.Min() == LeastLoaded(loads, live));
    }
  }
}

// LPT written the obvious way: for each key, k times the least-loaded destination not yet chosen
// for it.
Placed ReferenceLpt(const PlanConfig& config, const std::vector<KeyRate>& admitted,
                    std::vector<double> loads) {
  Placed out;
  for (const KeyRate& kr : admitted) {
    const uint32_t k = Assignments(config, kr.rate);
    std::vector<bool> free(loads.size(), true);
    std::vector<uint32_t> chosen;
    for (uint32_t j = 0; j < k; ++j) {
      chosen.push_back(LeastLoaded(loads, free));
      free[chosen.back()] = false;
    }
    const double share = k == 1 ? kr.rate : kr.rate / k;
    for (uint32_t d : chosen) loads[d] += share;
    std::sort(chosen.begin(), chosen.end());
    out.sets.push_back(chosen);
  }
  out.loads = loads;
  return out;
}

TEST_CASE("PlaceLpt matches the straightforward LPT on seeded random instances") {
  for (uint64_t seed = 1; seed <= 300; ++seed) {
    std::mt19937_64 rng(seed);
    const uint32_t r = std::uniform_int_distribution<uint32_t>(1, 20)(rng);
    const std::vector<KeyRate> admitted = RandomAdmitted(rng, rng() % 200);
    const std::vector<double> start = RandomStart(rng, r);
    const PlanConfig config{.destinations = r,
                            .q_cap = 0.2 + static_cast<double>(rng() % 40) / 10,
                            .slots_per_destination = 1,
                            .replicate = seed % 5 != 0};
    const Placed placed = Run(config, admitted, start, [&](auto& offsets, auto& ids, auto& loads) {
      PlaceLpt(config, admitted, offsets, ids, loads);
    });
    INFO("seed " << seed << " R " << r << " keys " << admitted.size());
    CHECK(placed == ReferenceLpt(config, admitted, start));
  }
}

// LPT's makespan for k_b = 1 against the optimum by exhaustive search: Graham (1969) bounds it by
// (4/3 − 1/(3R)) × OPT.
double BruteForceMakespan(const std::vector<double>& jobs, uint32_t r_count) {
  std::vector<double> load(r_count, 0.0);
  double best = std::numeric_limits<double>::infinity();
  auto search = [&](auto&& self, size_t i) -> void {
    if (i == jobs.size()) {
      best = std::min(best, *std::max_element(load.begin(), load.end()));
      return;
    }
    for (uint32_t r = 0; r < r_count; ++r) {
      load[r] += jobs[i];
      if (*std::max_element(load.begin(), load.end()) < best) self(self, i + 1);
      load[r] -= jobs[i];
    }
  };
  search(search, 0);
  return best;
}

TEST_CASE("LPT stays within Graham's 4/3 bound of the brute-force optimum") {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<int> keys(1, 9);
  std::uniform_int_distribution<uint32_t> dests(2, 3);
  std::uniform_real_distribution<double> size(0.1, 10.0);
  int strictly_worse = 0;
  for (int trial = 0; trial < 200; ++trial) {
    const int n = keys(rng);
    const uint32_t r_count = dests(rng);
    std::vector<double> jobs;
    for (int i = 0; i < n; ++i) {
      // Quarter steps make hard instances likely.
      jobs.push_back(std::max(0.25, std::round(size(rng) * 4) / 4));
    }
    std::vector<KeyRate> admitted;
    for (int i = 0; i < n; ++i) admitted.push_back({static_cast<uint64_t>(i), jobs[i]});
    std::sort(admitted.begin(), admitted.end(), [](const KeyRate& a, const KeyRate& b) {
      return a.rate > b.rate || (a.rate == b.rate && a.key < b.key);
    });
    const PlanConfig config{.destinations = r_count, .q_cap = 1e6, .slots_per_destination = 100};
    const Placed placed = Run(config, admitted, std::vector<double>(r_count, 0.0),
                              [&](auto& offsets, auto& ids, auto& loads) {
                                PlaceLpt(config, admitted, offsets, ids, loads);
                              });
    const double lpt = *std::max_element(placed.loads.begin(), placed.loads.end());
    const double opt = BruteForceMakespan(jobs, r_count);
    INFO("trial " << trial << " lpt " << lpt << " opt " << opt);
    CHECK(lpt >= opt - 1e-9);
    CHECK(lpt <= (4.0 / 3.0 - 1.0 / (3.0 * r_count)) * opt + 1e-9);
    if (lpt > opt + 1e-9) ++strictly_worse;
  }
  // The comparison is not vacuous: LPT is sometimes suboptimal on these instances.
  CHECK(strictly_worse > 0);
}

// Sticky LPT written the obvious way (placement.h, PlaceSticky): each job stays on the warm
// destination or the least loaded free previous one that remains under the cap (ties: the warm
// one, then the lowest index), else takes the least-loaded free destination.
struct StickyResult {
  Placed placed;
  uint64_t kept = 0;
  uint64_t warmed = 0;
};
StickyResult ReferenceSticky(const PlanConfig& config, const std::vector<KeyRate>& admitted,
                             std::vector<double> loads, const Plan* previous,
                             const absl::flat_hash_map<uint64_t, uint32_t>& warm,
                             double mean_load) {
  const uint32_t r = config.destinations;
  const double cap = (1.0 + config.stickiness) * mean_load;
  StickyResult out;
  for (const KeyRate& kr : admitted) {
    const uint32_t k = Assignments(config, kr.rate);
    const double share = k == 1 ? kr.rate : kr.rate / k;
    std::vector<uint32_t> before;
    for (size_t i = 0; previous != nullptr && i < previous->size(); ++i) {
      if (previous->key(i) == kr.key) {
        before.assign(previous->destinations(i).begin(), previous->destinations(i).end());
      }
    }
    const auto it = warm.find(kr.key);
    const uint32_t hot = it == warm.end() ? r : it->second;
    std::vector<bool> free(r, true);
    std::vector<uint32_t> chosen;
    for (uint32_t j = 0; j < k; ++j) {
      const auto fits = [&](uint32_t d) { return d < r && free[d] && loads[d] + share <= cap; };
      uint32_t pick = fits(hot) ? hot : r;
      for (uint32_t d : before) {
        if (fits(d) && (pick == r || loads[d] < loads[pick])) pick = d;
      }
      if (pick == r) pick = LeastLoaded(loads, free);
      if (pick == hot) {
        ++out.warmed;
      } else if (std::find(before.begin(), before.end(), pick) != before.end()) {
        ++out.kept;
      }
      free[pick] = false;
      chosen.push_back(pick);
    }
    for (uint32_t d : chosen) loads[d] += share;
    std::sort(chosen.begin(), chosen.end());
    out.placed.sets.push_back(chosen);
  }
  out.placed.loads = loads;
  return out;
}

TEST_CASE("PlaceSticky matches the straightforward sticky LPT, with and without warm hints") {
  for (uint64_t seed = 1; seed <= 200; ++seed) {
    std::mt19937_64 rng(seed);
    const uint32_t r = std::uniform_int_distribution<uint32_t>(1, 16)(rng);
    std::vector<KeyRate> admitted = RandomAdmitted(rng, rng() % 150);
    PlanConfig config{.destinations = r,
                      .q_cap = 0.5 + static_cast<double>(rng() % 30) / 10,
                      .slots_per_destination = 1000,
                      .stickiness = seed % 4 == 0 ? 0.0 : 0.05 * static_cast<double>(rng() % 5)};
    // The previous plan: the same keys with noisy rates, some of them gone, on R + 2 destinations
    // so that some previous destinations are out of range.
    std::vector<KeyRate> before;
    for (const KeyRate& kr : admitted) {
      if (rng() % 5 != 0) before.push_back({kr.key, kr.rate * (0.5 + (rng() % 100) / 100.0)});
    }
    const Plan previous = cacheroute::testing::RequireOk(BuildPlan(
        before, {.destinations = r + 2, .q_cap = config.q_cap, .slots_per_destination = 1000}));
    absl::flat_hash_map<uint64_t, uint32_t> warm;
    if (seed % 3 != 0) {
      for (const KeyRate& kr : admitted) {
        if (rng() % 2 == 0) warm[kr.key] = static_cast<uint32_t>(rng() % (r + 1));
      }
    }
    const std::vector<double> start = RandomStart(rng, r);
    double total = 0;
    for (double l : start) total += l;
    for (const KeyRate& kr : admitted) total += kr.rate;
    const double mean = total / r;
    const Plan* prev = seed % 7 == 0 ? nullptr : &previous;
    uint64_t kept = 0, warmed = 0;
    const Placed placed = Run(config, admitted, start, [&](auto& offsets, auto& ids, auto& loads) {
      PlaceSticky(config, prev, warm, mean, admitted, offsets, ids, loads, &kept, &warmed);
    });
    const StickyResult expected = ReferenceSticky(config, admitted, start, prev, warm, mean);
    INFO("seed " << seed << " R " << r << " keys " << admitted.size());
    CHECK(placed == expected.placed);
    CHECK(kept == expected.kept);
    CHECK(warmed == expected.warmed);
  }
}

TEST_CASE("PlaceHashed ignores load: a key's set depends only on (key, seed, k)") {
  std::mt19937_64 rng(5);
  const std::vector<KeyRate> admitted = RandomAdmitted(rng, 300);
  PlanConfig config{.destinations = 10,
                    .q_cap = 2.0,
                    .slots_per_destination = 1,
                    .placement = Placement::kHashed,
                    .placement_seed = 3};
  const auto place = [&](const std::vector<KeyRate>& keys, const std::vector<double>& start) {
    return Run(config, keys, start, [&](auto& offsets, auto& ids, auto& loads) {
      PlaceHashed(config, keys, offsets, ids, loads);
    });
  };
  const Placed placed = place(admitted, std::vector<double>(10, 0.0));
  double total = 0;
  for (size_t i = 0; i < admitted.size(); ++i) {
    const std::vector<uint32_t>& set = placed.sets[i];
    CHECK(set.size() == Assignments(config, admitted[i].rate));
    CHECK(std::adjacent_find(set.begin(), set.end(), std::greater_equal<uint32_t>()) == set.end());
    CHECK(set.back() < 10);
    total += admitted[i].rate;
  }
  CHECK(std::accumulate(placed.loads.begin(), placed.loads.end(), 0.0) == Approx(total));
  // Other keys and other start loads change nothing for a key.
  std::mt19937_64 other(6);
  const Placed alone = place({admitted[7]}, RandomStart(other, 10));
  CHECK(alone.sets[0] == placed.sets[7]);
  // The seed moves the sets.
  config.placement_seed = 4;
  CHECK(place(admitted, std::vector<double>(10, 0.0)).sets != placed.sets);
}

// Spills written the obvious way: the destination outside the set with the least spill load,
// then the least expected load, then the lowest index.
std::vector<uint32_t> ReferenceSpills(const std::vector<KeyRate>& admitted, const Placed& placed) {
  const uint32_t r = static_cast<uint32_t>(placed.loads.size());
  std::vector<double> spill_load(r, 0.0);
  std::vector<uint32_t> out;
  for (size_t i = 0; i < admitted.size(); ++i) {
    const std::vector<uint32_t>& set = placed.sets[i];
    uint32_t best = kNoSpill;
    for (uint32_t d = 0; d < r; ++d) {
      if (std::find(set.begin(), set.end(), d) != set.end()) continue;
      if (best == kNoSpill || spill_load[d] < spill_load[best] ||
          (spill_load[d] == spill_load[best] && placed.loads[d] < placed.loads[best])) {
        best = d;
      }
    }
    out.push_back(best);
    if (best != kNoSpill) spill_load[best] += admitted[i].rate;
  }
  return out;
}

TEST_CASE("PlaceSpills matches a linear scan and skips keys on every destination") {
  int on_every_destination = 0;
  for (uint64_t seed = 1; seed <= 100; ++seed) {
    std::mt19937_64 rng(seed);
    const uint32_t r = std::uniform_int_distribution<uint32_t>(2, 12)(rng);
    const std::vector<KeyRate> admitted = RandomAdmitted(rng, rng() % 100);
    const PlanConfig config{.destinations = r, .q_cap = 1.0, .slots_per_destination = 1};
    std::vector<uint32_t> offsets(admitted.size() + 1), ids;
    const Placed placed =
        Run(config, admitted, RandomStart(rng, r), [&](auto& o, auto& d, auto& loads) {
          PlaceLpt(config, admitted, o, d, loads);
          offsets = o;
          ids = d;
        });
    INFO("seed " << seed);
    const std::vector<uint32_t> spills = PlaceSpills(admitted, offsets, ids, placed.loads);
    CHECK(spills == ReferenceSpills(admitted, placed));
    for (size_t i = 0; i < admitted.size(); ++i) {
      if (placed.sets[i].size() == r) {
        CHECK(spills[i] == kNoSpill);
        ++on_every_destination;
      }
    }
  }
  CHECK(on_every_destination > 0);
}

}  // namespace
}  // namespace cacheroute::planner
