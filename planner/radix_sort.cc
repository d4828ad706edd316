// See radix_sort.h.
#include "planner/radix_sort.h"

#include <functional>

namespace cacheroute::planner {
namespace {

// The differing bits the first radix pass sorts on (two 11-bit digits); runs that still agree
// are rare and short for measured rates and for hashed keys.
constexpr int kTopBits = 22;

}  // namespace

void SortByRate(KeyRate* items, KeyRate* scratch, size_t n) {
  TopBitsSort(items, scratch, n, ByDescendingRate(), kTopBits, RateOrderLess, ByKey(),
              ByDescendingRate());
}

void SortKeys(uint64_t* keys, uint64_t* scratch, size_t n) {
  TopBitsSort(keys, scratch, n, BareKey(), kTopBits, std::less<uint64_t>(), BareKey());
}

}  // namespace cacheroute::planner
