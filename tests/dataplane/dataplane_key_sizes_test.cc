// KeySizes (dataplane/include/cacheroute/dataplane/key_sizes.h): per-key means of answered prompt
// and cached tokens, bounded by a direct-mapped table.
#include <catch2/catch.hpp>
#include <cstdint>
#include <optional>
#include <vector>

#include "cacheroute/dataplane/key_sizes.h"

namespace cacheroute::dataplane {
namespace {

TEST_CASE("KeySizes: the first answer sets a key's means, later ones move them by kWeight") {
  KeySizes sizes(4);
  CHECK_FALSE(sizes.Get(7).has_value());
  sizes.Add(7, 1000, 400);
  std::optional<KeySize> s = sizes.Get(7);
  REQUIRE(s.has_value());
  CHECK(s->prompt_tokens == 1000);
  CHECK(s->cached_tokens == 400);
  CHECK(s->answers == 1);
  sizes.Add(7, 2000, 1200);
  s = sizes.Get(7);
  REQUIRE(s.has_value());
  CHECK(s->prompt_tokens == Approx(1000 + KeySizes::kWeight * 1000));
  CHECK(*s->cached_tokens == Approx(400 + KeySizes::kWeight * 800));
  CHECK(s->answers == 2);
}

TEST_CASE("KeySizes: cached tokens are optional and never above the prompt") {
  KeySizes sizes(4);
  sizes.Add(3, 500, std::nullopt);  // an engine that does not report cached tokens
  std::optional<KeySize> s = sizes.Get(3);
  REQUIRE(s.has_value());
  CHECK(s->prompt_tokens == 500);
  CHECK_FALSE(s->cached_tokens.has_value());
  sizes.Add(3, 500, 9000);  // clamped to the prompt
  s = sizes.Get(3);
  REQUIRE(s.has_value());
  CHECK(s->cached_tokens == 500);
}

TEST_CASE("KeySizes: a key mapped to a taken entry replaces it; its means start over") {
  KeySizes sizes(2);  // four entries: keys 1 and 5 share one
  REQUIRE(sizes.capacity() == 4);
  sizes.Add(1, 100, 10);
  sizes.Add(1, 100, 10);
  sizes.Add(5, 3000, 2000);
  CHECK_FALSE(sizes.Get(1).has_value());
  const std::optional<KeySize> s = sizes.Get(5);
  REQUIRE(s.has_value());
  CHECK(s->prompt_tokens == 3000);
  CHECK(s->answers == 1);
  CHECK(KeySizes(0).capacity() == 2);  // capacity_log2 clamped to ≥ 1
}

TEST_CASE("KeySizes: a prompt's reusable tokens are what it shares with the key's previous one") {
  KeySizes sizes(4);
  std::vector<uint64_t> prompt(100);  // 100 blocks of 16 tokens
  for (size_t b = 0; b < prompt.size(); ++b) prompt[b] = 7000 + b;
  sizes.ObservePrompt(9, prompt, 1600);
  CHECK_FALSE(sizes.Get(9).has_value());  // the first prompt only leaves its hashes

  // The next prompt shares the first 65 blocks (block 64 is a grid position: exact).
  std::vector<uint64_t> next = prompt;
  for (size_t b = 65; b < next.size(); ++b) next[b] = 9000 + b;
  sizes.ObservePrompt(9, next, 1600);
  std::optional<KeySize> s = sizes.Get(9);
  REQUIRE(s.has_value());
  REQUIRE(s->reusable_tokens.has_value());
  CHECK(*s->reusable_tokens == 65 * PrefixMemory::kBlockTokens);
  CHECK(s->answers == 0);

  // Sharing the first 70 blocks: the deepest shared grid position is block 64 (the grid goes
  // …, 48, 56, 64, 80, …), so it counts 65 blocks, 25% short at most; nothing shared counts 0.
  std::vector<uint64_t> third = next;
  for (size_t b = 70; b < third.size(); ++b) third[b] = 11000 + b;
  sizes.ObservePrompt(9, third, 1600);
  s = sizes.Get(9);
  CHECK(*s->reusable_tokens == Approx(65 * 16));
  std::vector<uint64_t> unrelated(100, 42);
  sizes.ObservePrompt(9, unrelated, 1600);
  s = sizes.Get(9);
  CHECK(*s->reusable_tokens == Approx(65 * 16 * (1 - KeySizes::kWeight)));

  // Reusable tokens never exceed the prompt; an empty prompt changes nothing.
  sizes.ObservePrompt(10, prompt, 1600);
  sizes.ObservePrompt(10, prompt, 100);
  CHECK(*sizes.Get(10)->reusable_tokens == 100);
  sizes.ObservePrompt(10, {}, 100);
  CHECK(*sizes.Get(10)->reusable_tokens == 100);
}

}  // namespace
}  // namespace cacheroute::dataplane
