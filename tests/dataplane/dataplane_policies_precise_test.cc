// The multi-replica baselines: prefix-hash sends prompts sharing their first 256 tokens to one
// destination, whatever follows, on every replica alike, and spills under its load bound.
#include <catch2/catch.hpp>
#include <cstdint>
#include <set>
#include <vector>

#include "cacheroute/dataplane/dispatch.h"
#include "cacheroute/dataplane/policies_precise.h"
#include "cacheroute/dataplane/random.h"

namespace cacheroute::dataplane {
namespace {

// A LoadView the test sets by hand.
class FakeLoads final : public LoadView {
 public:
  explicit FakeLoads(uint32_t n) : load(n, 0.0), up(n, true), scraped(n) {}
  uint32_t size() const override { return static_cast<uint32_t>(load.size()); }
  double Load(uint32_t d) const override { return load[d]; }
  bool Up(uint32_t d) const override { return up[d]; }
  EngineMetrics Scraped(uint32_t d) const override { return scraped[d]; }
  std::vector<double> load;
  std::vector<bool> up;
  std::vector<EngineMetrics> scraped;
};

// `shared` leading blocks of prefix `prefix`, then `rest` blocks of suffix `suffix`, chained as
// block hashes are (each stands for everything before it).
std::vector<uint64_t> Prompt(uint64_t prefix, size_t shared, uint64_t suffix, size_t rest) {
  std::vector<uint64_t> out;
  uint64_t chain = 0x1234;
  for (size_t i = 0; i < shared + rest; ++i) {
    chain = Mix64(chain ^ (i < shared ? prefix * 1000 + i : (suffix + 7) * 77777 + i));
    out.push_back(chain);
  }
  return out;
}

TEST_CASE("prefix-hash: the first 256 tokens decide, the rest does not", "[policies]") {
  SeededRandom random(3);
  PrefixHashPolicy policy(16, random);
  CHECK(policy.name() == "prefix-hash");
  const FakeLoads loads(16);
  std::set<uint32_t> spread;
  for (uint64_t prefix = 1; prefix <= 40; ++prefix) {
    const std::vector<uint64_t> a = Prompt(prefix, 16, 1, 20);
    const std::vector<uint64_t> b = Prompt(prefix, 16, 2, 3);
    REQUIRE(a[16] != b[16]);
    const uint32_t da =
        policy.Route({.key_id = 1, .prompt_tokens = 576, .block_hashes = a}, loads).destination;
    const uint32_t db =
        policy.Route({.key_id = 2, .prompt_tokens = 304, .block_hashes = b}, loads).destination;
    CHECK(da == db);
    CHECK(policy.Position({.block_hashes = a}) == a[15]);
    spread.insert(da);
  }
  CHECK(spread.size() >= 10);  // 40 prefixes over 16 destinations

  // A prompt of fewer than 16 blocks hashes its last full block; one without any, its key.
  const std::vector<uint64_t> short_prompt = Prompt(9, 5, 0, 0);
  CHECK(policy.Position({.key_id = 5, .block_hashes = short_prompt}) == short_prompt[4]);
  CHECK(policy.Position({.key_id = 5}) == 5);
}

TEST_CASE("prefix-hash: two replicas agree with no shared state", "[policies]") {
  SeededRandom random_a(1), random_b(2);
  PrefixHashPolicy a(8, random_a), b(8, random_b);
  const FakeLoads loads(8);
  for (uint64_t prefix = 1; prefix <= 50; ++prefix) {
    const std::vector<uint64_t> hashes = Prompt(prefix, 20, 0, 0);
    const PickRequest request{.key_id = prefix, .prompt_tokens = 320, .block_hashes = hashes};
    CHECK(a.Route(request, loads).destination == b.Route(request, loads).destination);
  }
}

TEST_CASE("prefix-hash: a destination at its load bound is walked past", "[policies]") {
  SeededRandom random(5);
  PrefixHashPolicy policy(4, random);
  FakeLoads loads(4);
  const std::vector<uint64_t> hashes = Prompt(3, 16, 0, 0);
  const PickRequest request{.key_id = 3, .prompt_tokens = 256, .block_hashes = hashes};
  const uint32_t home = policy.Route(request, loads).destination;
  // Total 8 over 4 up: the bound is ceil(1.25 · 9 / 4) = 3; home at 3 is full, the rest at 5/3.
  loads.load = {5.0 / 3, 5.0 / 3, 5.0 / 3, 5.0 / 3};
  loads.load[home] = 3;
  const uint32_t spilled = policy.Route(request, loads).destination;
  CHECK(spilled != home);
  loads.load[home] = 2;
  CHECK(policy.Route(request, loads).destination == home);
  loads.up[home] = false;
  CHECK(policy.Route(request, loads).destination != home);
}

}  // namespace
}  // namespace cacheroute::dataplane
