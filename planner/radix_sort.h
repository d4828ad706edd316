// The planner's radix sorting kit: sorts of arrays of items by a 64-bit image of each item (its
// "word"), linear in the items, and the two orders plan building needs on top of it: the rate
// order (decreasing rate, ties key ascending: SortByRate) and ascending bare keys (SortKeys).
//
// - LsdRadixSort: a stable least-significant-digit radix sort on the word's bits from
//   `lowest_bit` up, 11 bits per pass; passes over a digit that every item shares are skipped.
// - TopBitsRadix: LsdRadixSort on only the top `top_bits` of the bits in which the words differ,
//   leaving runs of items that agree in those bits in input order; returns the lowest bit sorted
//   on.
// - TopBitsSort: TopBitsRadix, then each such run sorted exactly by a comparison (runs up to
//   kComparisonSortMax items) or by LSD radix on further words (longer runs). Measured rates and
//   hashed keys seldom agree in the top 22 of the bits in which they differ, so runs are short;
//   integer counts tie a lot, and their long runs are radix-sorted too, so the cost stays linear.
//
// Non-negative IEEE doubles order like their bit patterns, so "decreasing rate" is a radix sort on
// the complemented bits (DescendingBits). Every sort takes a scratch array of the same length and
// leaves the result in `items`. No allocation; the count arrays are per thread, so sorts may run
// on several threads at once.
//
// Usage:
//   std::vector<KeyRate> pairs = ..., scratch(pairs.size());   // rates finite and ≥ +0.0
//   SortByRate(pairs.data(), scratch.data(), pairs.size());
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <utility>

#include "planner/plan.h"

namespace cacheroute::planner {

inline constexpr int kRadixDigitBits = 11;
inline constexpr size_t kRadixBuckets = size_t{1} << kRadixDigitBits;
inline constexpr int kRadixMaxDigits = (64 + kRadixDigitBits - 1) / kRadixDigitBits;  // 6
// Runs up to this long are sorted by comparison; longer ones by radix.
inline constexpr size_t kComparisonSortMax = 256;

// A word that decreases as `value` increases, for values ≥ +0.0 (whose bit patterns increase with
// the value); -0.0 must have been made +0.0.
inline uint64_t DescendingBits(double value) { return ~std::bit_cast<uint64_t>(value); }

// Words of the rate order and of bare keys.
struct ByKey {
  uint64_t operator()(const KeyRate& kr) const { return kr.key; }
};
struct ByDescendingRate {
  uint64_t operator()(const KeyRate& kr) const { return DescendingBits(kr.rate); }
};
struct BareKey {
  uint64_t operator()(uint64_t key) const { return key; }
};

// The rate order: decreasing rate, ties key ascending.
inline bool RateOrderLess(const KeyRate& a, const KeyRate& b) {
  return a.rate > b.rate || (a.rate == b.rate && a.key < b.key);
}

// Stable LSD radix sort of items[0, n) by bits [lowest_bit, 64) of word(item), using scratch[0, n)
// as the second buffer. Digits that are equal for every item are skipped. The result is left in
// `items`.
template <typename T, typename Word>
void LsdRadixSort(T* items, T* scratch, size_t n, Word word, int lowest_bit) {
  if (n < 2) return;
  const int digits = (64 - lowest_bit + kRadixDigitBits - 1) / kRadixDigitBits;
  static thread_local std::array<std::array<size_t, kRadixBuckets>, kRadixMaxDigits> counts;
  for (int d = 0; d < digits; ++d) counts[d].fill(0);
  for (size_t i = 0; i < n; ++i) {
    const uint64_t w = word(items[i]) >> lowest_bit;
    for (int d = 0; d < digits; ++d) {
      ++counts[d][(w >> (d * kRadixDigitBits)) & (kRadixBuckets - 1)];
    }
  }
  T* src = items;
  T* dst = scratch;
  for (int d = 0; d < digits; ++d) {
    auto& count = counts[d];
    const int shift = lowest_bit + d * kRadixDigitBits;
    if (count[(word(src[0]) >> shift) & (kRadixBuckets - 1)] == n) continue;  // constant digit
    size_t offset = 0;
    for (size_t& c : count) offset += std::exchange(c, offset);
    for (size_t i = 0; i < n; ++i) {
      dst[count[(word(src[i]) >> shift) & (kRadixBuckets - 1)]++] = src[i];
    }
    std::swap(src, dst);
  }
  if (src != items) std::copy(src, src + n, items);
}

// Sorts items[0, n) exactly by `less`: by comparison when short, else by LSD radix on `words`
// (least significant first), which must order the items as `less` does.
template <typename T, typename Less, typename... Words>
void SortRun(T* items, T* scratch, size_t n, Less less, Words... words) {
  if (n <= kComparisonSortMax) {
    std::sort(items, items + n, less);
    return;
  }
  (LsdRadixSort(items, scratch, n, words, 0), ...);
}

// A stable radix sort of items[0, n) by the top `top_bits` of the bits in which their words
// differ. Returns the lowest bit sorted on; runs of items whose words agree from that bit up are
// left in input order. 64 when every word is equal (nothing moved).
template <typename T, typename Word>
int TopBitsRadix(T* items, T* scratch, size_t n, Word word, int top_bits) {
  uint64_t differ = 0;
  const uint64_t first = n > 0 ? word(items[0]) : 0;
  for (size_t i = 0; i < n; ++i) differ |= word(items[i]) ^ first;
  if (differ == 0) return 64;
  const int highest = 63 - std::countl_zero(differ);
  const int lowest_bit = std::max(0, highest + 1 - top_bits);
  LsdRadixSort(items, scratch, n, word, lowest_bit);
  return lowest_bit;
}

// Sorts items[0, n) by `less`, where word(item) is a 64-bit image of the order's leading part:
// TopBitsRadix, then exact sorting of each run that agrees in the sorted bits (by `less`, or by
// radix on `run_words` when the run is long).
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

// Sorts items[0, n) into the rate order (RateOrderLess). Rates must be finite and ≥ +0.0.
void SortByRate(KeyRate* items, KeyRate* scratch, size_t n);
// Sorts keys[0, n) ascending.
void SortKeys(uint64_t* keys, uint64_t* scratch, size_t n);

}  // namespace cacheroute::planner
