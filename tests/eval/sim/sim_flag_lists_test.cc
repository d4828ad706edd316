// Command-line lists (tools/eval/sim/study/flag_lists.h).
#include <cstdint>
#include <vector>

#include "catch2/catch.hpp"
#include "tools/eval/sim/study/flag_lists.h"

namespace cacheroute::sim::study {
namespace {

TEST_CASE("flag lists name the flag and the bad item", "[study]") {
  CHECK(*ParseNumberList("30, 60,100", "--loads") == std::vector<double>{30, 60, 100});
  CHECK(*ParseSeedList("2,3,4", "--seeds") == std::vector<uint64_t>{2, 3, 4});
  absl::StatusOr<std::vector<uint64_t>> seeds = ParseSeedList("1,x", "--seeds");
  REQUIRE_FALSE(seeds.ok());
  CHECK(seeds.status().message() == "--seeds: bad seed \"x\" in \"1,x\"");
  CHECK_FALSE(ParseSeedList("-1", "--seeds").ok());
  CHECK(*ParseCountList("1, 4", "--gateways") == std::vector<uint32_t>{1, 4});
  absl::StatusOr<std::vector<uint32_t>> counts = ParseCountList("1,4294967296", "--gateways");
  REQUIRE_FALSE(counts.ok());
  CHECK(counts.status().message() == "--gateways: bad count \"4294967296\" in \"1,4294967296\"");
  CHECK_FALSE(ParseNumberList("30,,60", "--loads").ok());
  absl::StatusOr<std::vector<double>> nan = ParseNumberList("nan", "--loads");
  REQUIRE_FALSE(nan.ok());
  CHECK(nan.status().message() == "--loads: bad number \"nan\" in \"nan\"");
}

}  // namespace
}  // namespace cacheroute::sim::study
