// share_conversion.h: a drained batch survives the wire (names re-mapped, ages, work), bounds are
// checked naming the field, and unknown destinations are left out and counted.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "cacheroute/dataplane/grpc/share_conversion.h"
#include "cacheroute/dataplane/grpc/table_conversion.h"

namespace cacheroute::dataplane {
namespace {

Time At(int64_t ms) { return Time(std::chrono::milliseconds(ms)); }

PlacementBatch TwoPlacements() {
  PlacementBatch b;
  const std::vector<uint64_t> hashes = {11, 12, 13};
  b.Add({.key_id = 42, .destination = 1, .prompt_tokens = 900, .sent = At(1000), .key = true},
        hashes);
  b.Add({.key_id = 0,
         .destination = 2,
         .prompt_tokens = 300,
         .sent = At(1040),
         .key = false,
         .first_grid = 9},
        std::vector<uint64_t>{21});
  return b;
}

TEST_CASE("A batch goes over the wire and back onto another gateway's indices", "[share]") {
  const std::vector<std::string> names = {"e0", "e1", "e2"};
  std::vector<DestinationWork> work(3);
  work[1] = {.queued_prefill_tokens = 700, .prefilling = 2, .decoding = 5};
  const v1::ShareBatch wire = ToShareBatch("gw-a", names, TwoPlacements(), &work, At(1050));
  REQUIRE(CheckShareBatch(wire).ok);
  CHECK(wire.gateway_id() == "gw-a");
  REQUIRE(wire.placements_size() == 2);
  CHECK(wire.placements(0).age_ms() == 50);
  CHECK(wire.placements(1).age_ms() == 10);
  CHECK(wire.has_work());
  CHECK(wire.work_size() == 1);  // destinations with no work are left out

  // The receiver orders its destinations differently and lacks e0.
  v1::ShareBatch forwarded = wire;
  forwarded.set_held_ms(5);
  const auto index = DestinationIndexOf({"e2", "e1"});
  const ReceivedShare in = FromShareBatch(forwarded, index, 2, At(5000));
  REQUIRE(in.placements.placements.size() == 2);
  const SharedPlacement& p = in.placements.placements[0];
  CHECK(p.key_id == 42);
  CHECK(p.key);
  CHECK(p.destination == 1);           // e1
  CHECK(p.sent == At(5000 - 50 - 5));  // its age and the planner's hold
  CHECK(in.placements.HashesOf(p).size() == 3);
  CHECK(in.placements.placements[1].destination == 0);  // e2
  CHECK(in.placements.placements[1].first_grid == 9);
  REQUIRE(in.work.has_value());
  CHECK((*in.work)[1].decoding == 5);
  CHECK((*in.work)[0].prefilling == 0);
  CHECK(in.unknown_destinations == 0);

  const ReceivedShare only_e2 = FromShareBatch(forwarded, DestinationIndexOf({"e2"}), 1, At(5000));
  CHECK(only_e2.placements.placements.size() == 1);
  CHECK(only_e2.unknown_destinations == 2);  // a placement and a work entry at e1
}

TEST_CASE("Without work the batch says so, and the receiver keeps the previous", "[share]") {
  const v1::ShareBatch wire = ToShareBatch("gw", {"a"}, PlacementBatch{}, nullptr, At(0));
  CHECK_FALSE(wire.has_work());
  CHECK_FALSE(FromShareBatch(wire, DestinationIndexOf({"a"}), 1, At(0)).work.has_value());
  // An idle gateway's work is sent whole and empty: the receiver zeroes it.
  std::vector<DestinationWork> idle(1);
  const v1::ShareBatch empty = ToShareBatch("gw", {"a"}, PlacementBatch{}, &idle, At(0));
  const ReceivedShare in = FromShareBatch(empty, DestinationIndexOf({"a"}), 1, At(0));
  REQUIRE(in.work.has_value());
  CHECK((*in.work)[0].queued_prefill_tokens == 0);
}

TEST_CASE("CheckShareBatch names the field and the value", "[share]") {
  v1::ShareBatch ok = ToShareBatch("gw", {"e0", "e1", "e2"}, TwoPlacements(), nullptr, At(2000));
  REQUIRE(CheckShareBatch(ok).ok);
  auto message = [](const v1::ShareBatch& b) { return CheckShareBatch(b).message; };

  v1::ShareBatch b = ok;
  b.clear_gateway_id();
  CHECK(message(b) == "share batch gateway_id: must be 1-256 bytes, got 0");
  b = ok;
  b.mutable_placements(1)->set_destination(3);
  CHECK(message(b) == "share batch placements[1].destination: must index destinations (3), got 3");
  b = ok;
  for (int i = 0; i < 62; ++i) b.mutable_placements(0)->add_grid_hashes(i);
  CHECK(message(b) == "share batch placements[0].grid_hashes: at most 64, got 65");
  b = ok;
  b.mutable_placements(1)->set_first_grid(128);
  CHECK(
      message(b) ==
      "share batch placements[1].first_grid: first_grid + grid_hashes must be <= 128, got 128 + 1");
  b = ok;
  b.mutable_placements(1)->clear_grid_hashes();
  CHECK(message(b) ==
        "share batch placements[1].has_key: a placement without a key must carry grid_hashes");
  b = ok;
  b.set_destinations(1, "");
  CHECK(message(b) == "share batch destinations[1]: must be 1-256 bytes, got 0");
  b = ok;
  b.add_work()->set_destination(5);
  CHECK(message(b) == "share batch work[0].destination: must index destinations (3), got 5");
}

TEST_CASE("A placement deeper than the wire allows keeps its first 64 grid hashes", "[share]") {
  PlacementBatch deep;
  std::vector<uint64_t> hashes(100, 7);
  deep.Add({.key_id = 1, .destination = 0, .prompt_tokens = 1, .sent = At(0)}, hashes);
  const v1::ShareBatch wire = ToShareBatch("gw", {"a"}, deep, nullptr, At(0));
  CHECK(wire.placements(0).grid_hashes_size() == 64);
  CHECK(CheckShareBatch(wire).ok);
}

}  // namespace
}  // namespace cacheroute::dataplane
