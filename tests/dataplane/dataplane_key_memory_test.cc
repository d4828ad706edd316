// KeyMemory and PrefixMemory: what is stored comes back, a key never reads another key's entry
// (tags), bounds and clamping, the prefix grid, and the deepest remembered prefix.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <vector>

#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/key_id.h"
#include "cacheroute/dataplane/key_memory.h"
#include "cacheroute/dataplane/random.h"

namespace cacheroute::dataplane {
namespace {

Time At(int64_t ms) { return Time(std::chrono::milliseconds(ms)); }

TEST_CASE("KeyMemory returns what was put, to the millisecond", "[key_memory]") {
  KeyMemory memory(10);
  CHECK(memory.capacity() == 1024);
  const uint64_t key = KeyId("conversation-1");
  CHECK_FALSE(memory.Get(key).known());
  memory.Put(key, 7, 12345, At(1500));
  KeyRecall r = memory.Get(key);
  REQUIRE(r.known());
  CHECK(r.destination == 7);
  CHECK(r.prompt_tokens == 12345);
  CHECK(r.sent == At(1500));
  // A later put overwrites.
  memory.Put(key, 0, 1, Time(std::chrono::microseconds(2999)));
  r = memory.Get(key);
  CHECK(r.destination == 0);
  CHECK(r.prompt_tokens == 1);
  CHECK(r.sent == At(2));
}

TEST_CASE("KeyMemory: a key never reads another key's entry", "[key_memory]") {
  KeyMemory memory(1);  // two entries: every key collides with half the others
  SeededRandom random(3);
  const uint64_t a = KeyId("a");
  memory.Put(a, 3, 100, At(0));
  int collisions = 0;
  for (int i = 0; i < 1000; ++i) {
    const uint64_t other = KeyId("other-" + std::to_string(i));
    if ((other & 1) != (a & 1)) continue;
    ++collisions;
    // Same entry, different tag: no entry for `other`...
    CHECK_FALSE(memory.Get(other).known());
  }
  CHECK(collisions > 400);
  // ... until it is written, which evicts `a`.
  uint64_t b = KeyId("b");
  for (int i = 0; (b & 1) != (a & 1); ++i) b = KeyId("b" + std::to_string(i));
  memory.Put(b, 4, 200, At(0));
  CHECK(memory.Get(b).destination == 4);
  CHECK_FALSE(memory.Get(a).known());
}

TEST_CASE("KeyMemory clamps lengths, skips destinations it cannot hold", "[key_memory]") {
  KeyMemory memory(4);
  const uint64_t key = KeyId("long");
  memory.Put(key, 2, 5'000'000, At(0));
  CHECK(memory.Get(key).prompt_tokens == KeyMemory::kMaxPromptTokens);
  memory.Put(key, KeyMemory::kMaxDestinations, 10, At(0));
  CHECK(memory.Get(key).destination == 2);  // not stored
  memory.Put(key, KeyMemory::kMaxDestinations - 1, 10, At(0));
  CHECK(memory.Get(key).destination == KeyMemory::kMaxDestinations - 1);
  CHECK(KeyMemory(0).capacity() == 2);  // clamped to at least 2^1
}

TEST_CASE("PrefixMemory's grid: every block of the first 8, then 4 per doubling", "[key_memory]") {
  const std::vector<uint64_t> expected = {0,  1,  2,  3,  4,  5,  6,  7,  8,  10, 12,
                                          14, 16, 20, 24, 28, 32, 40, 48, 56, 64, 80};
  for (uint32_t i = 0; i < expected.size(); ++i) CHECK(PrefixMemory::GridBlock(i) == expected[i]);
  CHECK(PrefixMemory::GridCount(0) == 0);
  CHECK(PrefixMemory::GridCount(1) == 1);
  CHECK(PrefixMemory::GridCount(9) == 9);
  CHECK(PrefixMemory::GridCount(65) == 21);
  // Within 25% of any depth: consecutive positions differ by at most a quarter of the lower one
  // past the first eight.
  for (uint32_t i = 8; i < 60; ++i) {
    CHECK(PrefixMemory::GridBlock(i + 1) - PrefixMemory::GridBlock(i) <=
          PrefixMemory::GridBlock(i) / 4);
  }
}

TEST_CASE("PrefixMemory finds the deepest remembered prefix and where it went", "[key_memory]") {
  PrefixMemory prefixes(12);
  std::vector<uint64_t> prompt;
  for (uint64_t i = 0; i < 50; ++i) prompt.push_back(Mix64(i + 7));
  auto always = [](const KeyRecall&) { return true; };
  CHECK_FALSE(prefixes.Deepest(prompt, always).known());
  prefixes.Record(prompt, 3, At(10));
  // The same prompt: the deepest grid block below 50 is 48, so 49 blocks.
  KnownPrefix found = prefixes.Deepest(prompt, always);
  CHECK(found.destination == 3);
  CHECK(found.tokens == 49 * 16);
  // A continuation that shares 30 blocks: grid block 28, 29 blocks.
  std::vector<uint64_t> next(prompt.begin(), prompt.begin() + 30);
  for (uint64_t i = 0; i < 40; ++i) next.push_back(Mix64(1000 + i));
  found = prefixes.Deepest(next, always);
  CHECK(found.destination == 3);
  CHECK(found.tokens == 29 * 16);
  // The freshness predicate sees each entry: none fresh, nothing found.
  CHECK_FALSE(prefixes.Deepest(next, [](const KeyRecall& r) { return r.sent > At(10); }).known());
  // A later send of the shared part elsewhere moves the shallow entries only.
  prefixes.Record(std::span<const uint64_t>(next).first(10), 5, At(20));
  CHECK(prefixes.Deepest(next, always).destination == 3);
  CHECK(prefixes.Deepest(std::span<const uint64_t>(next).first(10), always).destination == 5);
}

}  // namespace
}  // namespace cacheroute::dataplane
