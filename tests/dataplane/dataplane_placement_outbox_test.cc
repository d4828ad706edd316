// PlacementOutbox and the Router's side of fleet sharing: what a pick offers (news only), what a
// drain returns, what Learn teaches another Router, and that learned placements never overwrite
// newer ones; remote work joins the rule's view.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/key_id.h"
#include "cacheroute/dataplane/placement_outbox.h"
#include "cacheroute/dataplane/random.h"
#include "cacheroute/dataplane/router.h"

namespace cacheroute::dataplane {
namespace {

Time At(int64_t ms) { return Time(std::chrono::milliseconds(ms)); }

// The chained-looking hashes of a prompt of `blocks` 16-token blocks with prefix `seed`.
std::vector<uint64_t> Blocks(uint64_t seed, uint32_t blocks) {
  std::vector<uint64_t> h;
  uint64_t x = seed;
  for (uint32_t i = 0; i < blocks; ++i) h.push_back(x = Mix64(x + i + 1));
  return h;
}

TEST_CASE("PlacementOutbox keeps the grid hashes from the first news", "[placement_outbox]") {
  PlacementOutbox outbox;
  const std::vector<uint64_t> blocks =
      Blocks(1, 40);  // grid: 0..7, 8, 10, …, 28, 32 (17 positions)
  REQUIRE(PrefixMemory::GridCount(blocks.size()) == 17);
  outbox.Offer(KeyId("a"), /*key_news=*/true, 3, 640, At(100), /*first_grid=*/0, blocks);
  outbox.Offer(KeyId("b"), /*key_news=*/false, 2, 640, At(110), /*first_grid=*/10, blocks);
  outbox.Offer(KeyId("c"), /*key_news=*/false, 2, 640, At(120), /*first_grid=*/17, blocks);
  const PlacementBatch batch = outbox.Drain();
  REQUIRE(batch.placements.size() == 2);  // c had no news
  const SharedPlacement& a = batch.placements[0];
  CHECK(a.key_id == KeyId("a"));
  CHECK(a.key);
  CHECK(a.destination == 3);
  CHECK(a.sent == At(100));
  REQUIRE(batch.HashesOf(a).size() == 17);
  CHECK(batch.HashesOf(a)[9] == blocks[PrefixMemory::GridBlock(9)]);
  const SharedPlacement& b = batch.placements[1];
  CHECK_FALSE(b.key);
  CHECK(b.first_grid == 10);
  REQUIRE(batch.HashesOf(b).size() == 7);
  CHECK(batch.HashesOf(b)[0] == blocks[PrefixMemory::GridBlock(10)]);
  CHECK(outbox.Drain().empty());
  CHECK(outbox.dropped() == 0);
}

TEST_CASE("PlacementOutbox drops past its bounds and counts it", "[placement_outbox]") {
  PlacementOutbox outbox({.shards = 1, .max_placements = 2, .max_hashes = 100});
  const std::vector<uint64_t> blocks = Blocks(2, 8);
  for (int i = 0; i < 5; ++i) outbox.Offer(i + 1, true, 0, 128, At(i), 0, blocks);
  CHECK(outbox.Drain().placements.size() == 2);
  CHECK(outbox.dropped() == 3);
  // Drained, the buffer takes placements again.
  outbox.Offer(9, true, 0, 128, At(9), 0, blocks);
  CHECK(outbox.Drain().placements.size() == 1);
}

TEST_CASE("PlacementOutbox: offers from many threads all arrive or are counted dropped",
          "[placement_outbox]") {
  PlacementOutbox outbox({.shards = 4});
  const std::vector<uint64_t> blocks = Blocks(3, 16);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 1000; ++i) outbox.Offer(t * 1000 + i, true, 1, 256, At(i), 0, blocks);
    });
  }
  size_t drained = 0;
  for (int i = 0; i < 50; ++i) drained += outbox.Drain().placements.size();
  for (std::thread& t : threads) t.join();
  drained += outbox.Drain().placements.size();
  CHECK(drained + outbox.dropped() == 4000);
}

TEST_CASE("A pick offers its news once; a second pick of the same key and prompt offers nothing",
          "[placement_outbox]") {
  PlacementOutbox outbox({.refresh = std::chrono::seconds(5)});
  SeededRandom random(1);
  Router router({.destination_count = 8, .placement_outbox = &outbox}, random);
  const std::vector<uint64_t> blocks = Blocks(4, 64);
  const PickRequest request{.key_id = KeyId("k"), .prompt_tokens = 1024, .block_hashes = blocks};
  const uint32_t d = router.Pick(request, At(1000)).destination();
  PlacementBatch batch = outbox.Drain();
  REQUIRE(batch.placements.size() == 1);
  CHECK(batch.placements[0].key);
  CHECK(batch.placements[0].destination == d);
  CHECK(batch.placements[0].first_grid == 0);
  CHECK(batch.HashesOf(batch.placements[0]).size() == PrefixMemory::GridCount(blocks.size()));
  // Same key, same prompt, to the same (warm) destination within the refresh: no news.
  REQUIRE(router.Pick(request, At(1200)).destination() == d);
  CHECK(outbox.Drain().empty());
  // Past the refresh it is announced again.
  REQUIRE(router.Pick(request, At(7000)).destination() == d);
  CHECK(outbox.Drain().placements.size() == 1);
}

TEST_CASE("The paper's rule offers nothing", "[placement_outbox]") {
  PlacementOutbox outbox;
  SeededRandom random(1);
  Router router(
      {.destination_count = 4, .dispatch = DispatchOptions::Paper(), .placement_outbox = &outbox},
      random);
  const std::vector<uint64_t> blocks = Blocks(5, 16);
  (void)router.Pick({.key_id = 7, .prompt_tokens = 256, .block_hashes = blocks}, At(1));
  CHECK(outbox.Drain().empty());
}

TEST_CASE("Learn: another Router's placement becomes this Router's memory and routing",
          "[placement_outbox]") {
  PlacementOutbox outbox;
  SeededRandom random_a(1), random_b(2);
  Router a({.destination_count = 16, .placement_outbox = &outbox}, random_a);
  Router b({.destination_count = 16}, random_b);
  const std::vector<uint64_t> blocks = Blocks(6, 256);  // 4,096 tokens
  const uint64_t key = KeyId("conversation");
  const uint32_t d =
      a.Pick({.key_id = key, .prompt_tokens = 4096, .block_hashes = blocks}, At(1000))
          .destination();
  CHECK_FALSE(b.Remembered(key).known());
  b.Learn(outbox.Drain());
  REQUIRE(b.Remembered(key).known());
  CHECK(b.Remembered(key).destination == d);
  CHECK(b.Remembered(key).sent == At(1000));
  // A new key with the same prompt prefix goes where the prefix is, on B too.
  std::vector<uint64_t> longer = blocks;
  for (uint64_t h : Blocks(99, 8)) longer.push_back(h);
  const Decision db =
      b.Decide({.key_id = KeyId("other"), .prompt_tokens = 4224, .block_hashes = longer}, b.loads(),
               At(1100));
  CHECK(db.destination == d);
  CHECK(db.expected == CacheExpectation::kPrefix);
}

TEST_CASE("Learn never overwrites a newer memory entry", "[placement_outbox]") {
  SeededRandom random(1);
  Router router({.destination_count = 8}, random);
  const uint64_t key = KeyId("k");
  PlacementBatch newer;
  newer.Add({.key_id = key, .destination = 5, .prompt_tokens = 100, .sent = At(2000)}, {});
  router.Learn(newer);
  PlacementBatch older;
  older.Add({.key_id = key, .destination = 1, .prompt_tokens = 100, .sent = At(1000)}, {});
  router.Learn(older);
  CHECK(router.Remembered(key).destination == 5);
  // A destination past the Router's capacity is ignored.
  PlacementBatch far;
  far.Add({.key_id = key, .destination = 9, .prompt_tokens = 100, .sent = At(3000)}, {});
  router.Learn(far);
  CHECK(router.Remembered(key).destination == 5);
}

TEST_CASE("Remote work joins the token-work rule's queue", "[placement_outbox]") {
  SeededRandom random(1);
  Router router({.destination_count = 2, .dispatch = {.all_candidates_up_to = 2}}, random);
  const PickRequest request{.key_id = 11, .prompt_tokens = 1000};
  const uint32_t first = router.Decide(request, router.loads(), At(1)).destination;
  // Another gateway has a long prefill queue at that destination: the rule goes elsewhere.
  REQUIRE(router.SetRemoteWork(first, {.queued_prefill_tokens = 50000, .prefilling = 3}).ok);
  const Explanation e = router.Explain({.key_id = 12, .prompt_tokens = 1000}, At(2));
  REQUIRE(e.Chosen() != nullptr);
  CHECK(e.Chosen()->destination == 1 - first);
  CHECK_FALSE(router.SetRemoteWork(0, {.queued_prefill_tokens = -1}).ok);
  CHECK_FALSE(router.SetRemoteWork(7, {}).ok);
}

TEST_CASE("LedgerWork sums this Router's own work in flight", "[placement_outbox]") {
  SeededRandom random(1);
  Router router({.destination_count = 4}, random);
  InFlight r = router.Pick({.key_id = 3, .prompt_tokens = 500}, At(1));
  const DestinationWork w = router.LedgerWork(r.destination());
  CHECK(w.prefilling == 1);
  CHECK(w.queued_prefill_tokens > 0);
  r.FirstToken();
  CHECK(router.LedgerWork(r.destination()).decoding == 1);
  r.Release();
  CHECK(router.LedgerWork(r.destination()).decoding == 0);
}

}  // namespace
}  // namespace cacheroute::dataplane
