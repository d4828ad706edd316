// KeySizes (dataplane/include/cacheroute/dataplane/key_sizes.h): per-key means of answered prompt
// and cached tokens, bounded by a direct-mapped table.
#include <catch2/catch.hpp>
#include <cstdint>
#include <optional>

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

}  // namespace
}  // namespace cacheroute::dataplane
