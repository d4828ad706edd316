// ApproxPrefixIndex (the modern baselines' approximate index): longest recorded prefix per
// destination, expiry by age, least-recently-recorded eviction over one pool or per destination.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <vector>

#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/prefix_index.h"
#include "cacheroute/dataplane/random.h"

namespace cacheroute::dataplane {
namespace {

Time At(int seconds) { return Time(std::chrono::seconds(seconds)); }

std::vector<uint64_t> Blocks(uint64_t seed, size_t n) {
  std::vector<uint64_t> out;
  for (size_t i = 0; i < n; ++i) out.push_back(Mix64(seed * 1000 + i));
  return out;
}

TEST_CASE("Overlap is the longest run of leading blocks recorded at each destination",
          "[prefix_index]") {
  ApproxPrefixIndex index({.destinations = 3, .total_blocks = 1000});
  const std::vector<uint64_t> a = Blocks(1, 10);
  index.Record(a, 1, At(0));
  std::vector<uint64_t> b(a.begin(), a.begin() + 4);
  for (uint64_t h : Blocks(2, 6)) b.push_back(h);
  index.Record(b, 2, At(0));
  std::vector<uint32_t> overlap(3);
  index.Overlap(a, At(0), overlap);
  CHECK(overlap == std::vector<uint32_t>{0, 10, 4});
  index.Overlap(b, At(0), overlap);
  CHECK(overlap == std::vector<uint32_t>{0, 4, 10});
  index.Overlap(Blocks(3, 5), At(0), overlap);
  CHECK(overlap == std::vector<uint32_t>{0, 0, 0});
  CHECK(index.stored(1) == 10);
  CHECK(index.stored(2) == 10);
}

TEST_CASE("With a TTL, blocks not recorded again within it count as absent", "[prefix_index]") {
  ApproxPrefixIndex index(
      {.destinations = 2, .total_blocks = 100, .ttl = std::chrono::seconds(120)});
  const std::vector<uint64_t> a = Blocks(1, 5);
  index.Record(a, 0, At(0));
  std::vector<uint32_t> overlap(2);
  index.Overlap(a, At(120), overlap);
  CHECK(overlap[0] == 5);
  index.Overlap(a, At(121), overlap);
  CHECK(overlap[0] == 0);
  // Recording again refreshes.
  index.Record(std::span<const uint64_t>(a).first(2), 0, At(200));
  index.Overlap(a, At(300), overlap);
  CHECK(overlap[0] == 2);
}

TEST_CASE("One pool evicts the least recently recorded block of any destination",
          "[prefix_index]") {
  ApproxPrefixIndex index({.destinations = 2, .total_blocks = 8});
  const std::vector<uint64_t> a = Blocks(1, 6), b = Blocks(2, 4);
  index.Record(a, 0, At(0));
  index.Record(b, 1, At(1));  // 10 blocks in a pool of 8: a's last two (recorded first) go
  std::vector<uint32_t> overlap(2);
  index.Overlap(a, At(1), overlap);
  CHECK(overlap[0] == 4);
  index.Overlap(b, At(1), overlap);
  CHECK(overlap[1] == 4);
  CHECK(index.stored(0) + index.stored(1) == 8);
}

TEST_CASE("Per-destination pools evict only their own blocks", "[prefix_index]") {
  ApproxPrefixIndex index({.destinations = 2, .blocks_per_destination = 4});
  const std::vector<uint64_t> a = Blocks(1, 6), b = Blocks(2, 3);
  index.Record(b, 1, At(0));
  index.Record(a, 0, At(1));
  std::vector<uint32_t> overlap(2);
  index.Overlap(a, At(1), overlap);
  CHECK(overlap[0] == 4);  // its prefix survives its suffix
  index.Overlap(b, At(1), overlap);
  CHECK(overlap[1] == 3);  // untouched by 0's evictions
  // Re-recording a block moves it to the front: recording b again at 0 evicts a's oldest.
  index.Record(std::span<const uint64_t>(b).first(1), 0, At(2));
  index.Overlap(a, At(2), overlap);
  CHECK(overlap[0] == 3);
}

}  // namespace
}  // namespace cacheroute::dataplane
