// Tests for planner/radix_sort: each sort against std::sort (or std::stable_sort) on seeded random
// inputs, across the shapes that take different paths: short and long runs of tied rates, zero
// rates, small and full 64-bit keys, all-equal words, and sizes around the comparison-sort cutoff.
#include "planner/radix_sort.h"

#include <algorithm>
#include <bit>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <set>
#include <vector>

namespace cacheroute::planner {
namespace {

bool SamePairs(const std::vector<KeyRate>& a, const std::vector<KeyRate>& b) {
  return std::equal(a.begin(), a.end(), b.begin(), b.end(), [](const KeyRate& x, const KeyRate& y) {
    return x.key == y.key && x.rate == y.rate;
  });
}

// Distinct keys (as the planner guarantees before it ranks) with rates of one of several shapes.
std::vector<KeyRate> RandomPairs(std::mt19937_64& rng, size_t n, int shape) {
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::lognormal_distribution<double> lognormal(0.0, 1.65);
  std::set<uint64_t> used;
  std::vector<KeyRate> pairs;
  while (pairs.size() < n) {
    const uint64_t key = shape % 2 == 0 ? rng() : rng() % (4 * n + 10);
    if (!used.insert(key).second) continue;
    double rate = lognormal(rng);
    switch (shape) {
      case 0:  // measured rates, a few zeros
      case 1:
        if (unit(rng) < 0.05) rate = 0;
        break;
      case 2:  // integer counts: long runs of ties
      case 3:
        rate = std::floor(unit(rng) * 3);
        break;
      case 4:  // one rate for all
      case 5:
        rate = 2.5;
        break;
      default:  // tiny and huge magnitudes together
        rate = unit(rng) < 0.5 ? rate * 1e-300 : rate * 1e300;
        break;
    }
    pairs.push_back({key, rate});
  }
  return pairs;
}

TEST_CASE("SortByRate equals std::sort by (rate descending, key ascending)") {
  for (uint64_t seed = 1; seed <= 120; ++seed) {
    std::mt19937_64 rng(seed);
    const size_t sizes[] = {0, 1, 2, 3, 255, 256, 257, 1000, 5000};
    const size_t n = sizes[seed % 9];
    const int shape = static_cast<int>(seed % 7);
    std::vector<KeyRate> pairs = RandomPairs(rng, n, shape);
    std::vector<KeyRate> expected = pairs;
    std::sort(expected.begin(), expected.end(), RateOrderLess);
    std::vector<KeyRate> scratch(n);
    SortByRate(pairs.data(), scratch.data(), n);
    INFO("seed " << seed << " n " << n << " shape " << shape);
    CHECK(SamePairs(pairs, expected));
  }
}

TEST_CASE("SortKeys equals std::sort, duplicates included") {
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    std::mt19937_64 rng(seed);
    const size_t n = std::uniform_int_distribution<size_t>(0, 6000)(rng);
    std::vector<uint64_t> keys(n);
    const uint64_t range = seed % 3 == 0 ? 100 : (seed % 3 == 1 ? uint64_t{1} << 40 : 0);
    for (uint64_t& k : keys) k = range == 0 ? rng() : rng() % range;
    std::vector<uint64_t> expected = keys;
    std::sort(expected.begin(), expected.end());
    std::vector<uint64_t> scratch(n);
    SortKeys(keys.data(), scratch.data(), n);
    INFO("seed " << seed << " n " << n);
    CHECK(keys == expected);
  }
}

TEST_CASE("LsdRadixSort is stable and sorts on the bits from lowest_bit up") {
  struct Item {
    uint64_t word;
    uint32_t position;
  };
  const auto word = [](const Item& item) { return item.word; };
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    std::mt19937_64 rng(seed);
    const size_t n = std::uniform_int_distribution<size_t>(0, 3000)(rng);
    const int lowest_bit = std::uniform_int_distribution<int>(0, 63)(rng);
    std::vector<Item> items(n);
    for (size_t i = 0; i < n; ++i) {
      // Few distinct high parts, so that equal sort words (and so stability) are common.
      items[i] = {(rng() % 7) << 58 | (rng() >> 6), static_cast<uint32_t>(i)};
    }
    std::vector<Item> expected = items;
    std::stable_sort(expected.begin(), expected.end(), [&](const Item& a, const Item& b) {
      return (a.word >> lowest_bit) < (b.word >> lowest_bit);
    });
    std::vector<Item> scratch(n);
    LsdRadixSort(items.data(), scratch.data(), n, word, lowest_bit);
    INFO("seed " << seed << " n " << n << " lowest_bit " << lowest_bit);
    REQUIRE(items.size() == expected.size());
    for (size_t i = 0; i < n; ++i) {
      CHECK(items[i].word == expected[i].word);
      CHECK(items[i].position == expected[i].position);
    }
  }
}

TEST_CASE("TopBitsRadix sorts by the top differing bits and keeps runs in input order") {
  std::vector<uint64_t> same(100, 42), scratch(100);
  CHECK(TopBitsRadix(same.data(), scratch.data(), same.size(), BareKey(), 22) == 64);
  CHECK(same == std::vector<uint64_t>(100, 42));

  std::mt19937_64 rng(9);
  for (int trial = 0; trial < 30; ++trial) {
    const size_t n = 2000;
    std::vector<uint64_t> words(n);
    for (uint64_t& w : words) w = rng() >> (trial % 40);
    const std::vector<uint64_t> input = words;
    scratch.assign(n, 0);
    const int lowest = TopBitsRadix(words.data(), scratch.data(), n, BareKey(), 22);
    uint64_t differ = 0;
    for (uint64_t w : input) differ |= w ^ input[0];
    CHECK(lowest == std::max(0, 64 - std::countl_zero(differ) - 22));
    std::vector<uint64_t> expected = input;
    std::stable_sort(expected.begin(), expected.end(),
                     [&](uint64_t a, uint64_t b) { return (a >> lowest) < (b >> lowest); });
    CHECK(words == expected);
  }
}

TEST_CASE("TopBitsSort orders any type by its comparison, long tied runs included") {
  // Pairs ordered by (high 8 bits of a descending, then b ascending): the leading word sees only
  // a's top bits, so every run is settled by the comparison or the run words.
  struct Item {
    uint64_t a;
    uint64_t b;
  };
  const auto lead = [](const Item& x) { return ~x.a & (uint64_t{0xFF} << 56); };
  const auto less = [&](const Item& x, const Item& y) {
    return lead(x) < lead(y) || (lead(x) == lead(y) && x.b < y.b);
  };
  const auto by_b = [](const Item& x) { return x.b; };
  std::mt19937_64 rng(4);
  for (size_t n : {size_t{0}, size_t{1}, size_t{300}, size_t{20000}}) {
    std::vector<Item> items(n);
    for (Item& item : items) item = {rng() % 5 << 56, rng()};
    std::vector<Item> expected = items;
    std::sort(expected.begin(), expected.end(), less);
    std::vector<Item> scratch(n);
    TopBitsSort(items.data(), scratch.data(), n, lead, 22, less, by_b, lead);
    INFO("n " << n);
    for (size_t i = 0; i < n; ++i) {
      CHECK(items[i].a == expected[i].a);
      CHECK(items[i].b == expected[i].b);
    }
  }
}

TEST_CASE("DescendingBits reverses the order of non-negative doubles") {
  std::mt19937_64 rng(2);
  std::lognormal_distribution<double> value(0.0, 20.0);
  const double special[] = {0.0, std::numeric_limits<double>::denorm_min(),
                            std::numeric_limits<double>::min(), 1.0,
                            std::numeric_limits<double>::max()};
  std::vector<double> values(std::begin(special), std::end(special));
  for (int i = 0; i < 1000; ++i) values.push_back(value(rng));
  for (double a : values) {
    for (int j = 0; j < 5; ++j) {
      const double b = values[rng() % values.size()];
      CHECK((a < b) == (DescendingBits(a) > DescendingBits(b)));
    }
  }
}

}  // namespace
}  // namespace cacheroute::planner
