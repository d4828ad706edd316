// Tests for tools/eval/sim/prefix_cache: vLLM's prefix-caching rules on hand-worked cases. Block
// numbers in the comments are indices into the cache; a fresh cache's free queue is 0, 1, 2, ...
#include <catch2/catch.hpp>
#include <cstdint>
#include <initializer_list>
#include <random>
#include <vector>

#include "cacheroute/dataplane/kv_event_index.h"
#include "tools/eval/sim/prefix_cache.h"

namespace cacheroute::sim {
namespace {

std::vector<uint64_t> Hashes(std::initializer_list<uint64_t> content_ids) {
  return ChainBlockHashes(std::vector<uint64_t>(content_ids));
}

// Allocates, computes the whole prompt and frees: the prompt's full blocks end up cached.
uint32_t Serve(PrefixCache& cache, const std::vector<uint64_t>& hashes, uint32_t prompt,
               uint32_t total) {
  PrefixCache::Allocation a;
  REQUIRE(cache.Allocate(hashes, prompt, total, a));
  const uint32_t cached = a.cached_tokens;
  cache.Commit(hashes, prompt, a);
  cache.Free(a);
  return cached;
}

TEST_CASE("hashes chain each block's content with its parent's hash") {
  const std::vector<uint64_t> h = Hashes({1, 2, 3});
  REQUIRE(h.size() == 3);
  CHECK(h[0] == ChainBlockHash(kRootBlockHash, 1));
  CHECK(h[1] == ChainBlockHash(h[0], 2));
  CHECK(h[2] == ChainBlockHash(h[1], 3));
  CHECK(Hashes({9, 2})[1] != h[1]);  // same content, different parent
}

TEST_CASE("a cached prompt hits in full blocks, at most prompt length - 1 tokens") {
  PrefixCache cache(100);
  const std::vector<uint64_t> h = Hashes({1, 2, 3, 4});
  CHECK(cache.Match(h, 64) == 0);
  CHECK(Serve(cache, h, 64, 64) == 0);
  CHECK(cache.cached_blocks() == 4);

  CHECK(cache.Match(h, 64) == 48);  // (64 - 1) / 16 = 3 blocks: the last token is recomputed
  CHECK(cache.Match(h, 65) == 64);
  CHECK(cache.Match(h, 1000) == 64);  // hashes stop at 4 blocks; the rest is unknown content
  CHECK(cache.Match(h, 17) == 16);
  CHECK(cache.Match(h, 16) == 0);
  CHECK(cache.Match(h, 1) == 0);
  CHECK(cache.Match(std::vector<uint64_t>(h.begin(), h.begin() + 2), 65) == 32);

  // A second request for the same prompt gets the same answer from Allocate.
  CHECK(Serve(cache, h, 64, 80) == 48);
  CHECK(cache.stats().query_tokens == 128);
  CHECK(cache.stats().hit_tokens == 48);
  CHECK(cache.stats().allocations == 2);
}

TEST_CASE("only full blocks among the computed tokens are published") {
  PrefixCache cache(100);
  const std::vector<uint64_t> h = Hashes({1, 2});
  PrefixCache::Allocation a;
  REQUIRE(cache.Allocate(h, 40, 40, a));  // two full blocks and 8 tokens in a third
  CHECK(a.blocks.size() == 3);
  CHECK(cache.Match(h, 41) == 0);  // nothing computed yet
  cache.Commit(h, 20, a);          // first chunk: block 0 full, block 1 partly computed
  CHECK(cache.Match(h, 41) == 16);
  cache.Commit(h, 40, a);
  CHECK(cache.Match(h, 41) == 32);
  CHECK(cache.cached_blocks() == 2);  // the partial third block is never cached
  cache.Free(a);
  CHECK(cache.Match(h, 41) == 32);  // freed blocks keep their content until evicted
}

TEST_CASE("the same block content under a different parent is a miss") {
  PrefixCache cache(100);
  Serve(cache, Hashes({1, 2, 3}), 48, 48);
  CHECK(cache.Match(Hashes({1, 2, 3}), 49) == 48);
  CHECK(cache.Match(Hashes({9, 2, 3}), 49) == 0);   // first block differs: nothing matches
  CHECK(cache.Match(Hashes({1, 9, 3}), 49) == 16);  // block 3 is cached, but under parent 2
  CHECK(cache.Match(Hashes({1, 2, 9}), 49) == 32);
}

TEST_CASE("the least recently used free block is evicted first") {
  PrefixCache cache(6);
  const std::vector<uint64_t> a = Hashes({1, 2}), b = Hashes({3, 4}), e = Hashes({7, 8, 9});
  Serve(cache, a, 32, 32);  // takes 0, 1; queue 2 3 4 5 1 0
  Serve(cache, b, 32, 32);  // takes 2, 3; queue 4 5 1 0 3 2
  // A is used again: its blocks leave the queue while held and come back at the tail.
  CHECK(Serve(cache, a, 33, 33) == 32);  // hits 0, 1, takes 4; queue 5 3 2 4 1 0
  CHECK(cache.stats().evicted_blocks == 0);

  PrefixCache::Allocation held;
  REQUIRE(cache.Allocate(e, 48, 48, held));  // takes 5 (empty), then evicts B's 3 and 2
  CHECK(cache.stats().evicted_blocks == 2);
  CHECK(cache.Match(b, 33) == 0);
  CHECK(cache.Match(a, 33) == 32);
}

TEST_CASE("a finished request's blocks are freed tail-first, so suffixes are evicted first") {
  PrefixCache cache(3);
  const std::vector<uint64_t> a = Hashes({1, 2, 3});
  Serve(cache, a, 48, 48);  // blocks 0 1 2; freed 2 1 0, so the queue is 2 1 0
  CHECK(cache.Match(a, 49) == 48);

  PrefixCache::Allocation x, y;
  REQUIRE(cache.Allocate(Hashes({8}), 16, 16, x));  // evicts block 2, A's last
  CHECK(cache.Match(a, 49) == 32);
  REQUIRE(cache.Allocate(Hashes({9}), 16, 16, y));  // evicts block 1
  CHECK(cache.Match(a, 49) == 16);
  CHECK(cache.stats().evicted_blocks == 2);
}

TEST_CASE("held blocks are not evictable and allocation fails without enough free blocks") {
  PrefixCache cache(4);
  const std::vector<uint64_t> a = Hashes({1, 2, 3});
  Serve(cache, a, 48, 48);  // blocks 0 1 2 cached and free; queue 3 2 1 0

  PrefixCache::Allocation too_big;
  // Hits 3 blocks (taking them out of the queue) and needs 2 more, but only 1 other is free.
  CHECK_FALSE(cache.Allocate(a, 49, 80, too_big));
  CHECK(too_big.blocks.empty());
  CHECK(cache.stats().failed_allocations == 1);
  CHECK(cache.free_blocks() == 4);
  CHECK(cache.Match(a, 49) == 48);

  PrefixCache::Allocation fits;
  REQUIRE(cache.Allocate(a, 49, 64, fits));  // hits 3, takes the last free block
  CHECK(fits.cached_tokens == 48);
  CHECK(cache.free_blocks() == 0);
  CHECK(cache.usage() == 1.0);

  PrefixCache::Allocation other;
  CHECK_FALSE(cache.Allocate(Hashes({7}), 16, 16, other));
  CHECK(cache.Match(a, 49) == 48);  // nothing was evicted
  CHECK(cache.stats().evicted_blocks == 0);

  cache.Free(fits);
  CHECK(cache.free_blocks() == 4);
  CHECK(cache.usage() == 0.0);
  CHECK(fits.blocks.empty());
}

TEST_CASE("a block shared by two running requests stays held until both finish") {
  PrefixCache cache(4);
  const std::vector<uint64_t> a = Hashes({1, 2});
  PrefixCache::Allocation first, second;
  REQUIRE(cache.Allocate(a, 32, 32, first));
  cache.Commit(a, 32, first);
  REQUIRE(cache.Allocate(a, 33, 33, second));  // shares blocks 0 and 1, takes 2
  CHECK(second.cached_tokens == 32);
  CHECK(cache.used_blocks() == 3);
  cache.Free(first);
  CHECK(cache.used_blocks() == 3);  // still held by the second request
  cache.Free(second);
  CHECK(cache.used_blocks() == 0);
}

TEST_CASE("two requests computing the same blocks at once publish one copy") {
  PrefixCache cache(10);
  const std::vector<uint64_t> a = Hashes({1, 2});
  PrefixCache::Allocation first, second;
  REQUIRE(cache.Allocate(a, 32, 32, first));
  REQUIRE(cache.Allocate(a, 32, 32, second));  // nothing published yet: a full miss
  CHECK(second.cached_tokens == 0);
  cache.Commit(a, 32, first);
  cache.Commit(a, 32, second);
  CHECK(cache.cached_blocks() == 2);
  cache.Free(first);
  cache.Free(second);
  CHECK(cache.Match(a, 33) == 32);
  CHECK(cache.free_blocks() == 10);
}

TEST_CASE("MatchExceeds agrees with Match on a randomly churned cache") {
  // Prompts share leading content from a small pool, so matches stop at every depth; a small
  // cache evicts, leaving runs with holes (a block cached without its parent).
  std::mt19937_64 rng(7);
  PrefixCache cache(40);
  auto prompt = [&] {
    std::vector<uint64_t> ids;
    const size_t n = 1 + rng() % 8;
    for (size_t i = 0; i < n; ++i) ids.push_back(rng() % 3);
    return ChainBlockHashes(ids);
  };
  size_t longer = 0;
  for (int step = 0; step < 400; ++step) {
    const std::vector<uint64_t> h = prompt();
    const uint32_t tokens = static_cast<uint32_t>(h.size()) * kBlockTokens + rng() % 2;
    const uint32_t match = cache.Match(h, tokens);
    for (uint32_t t = 0; t <= tokens; t += kBlockTokens) {
      INFO("step " << step << ", tokens " << t);
      CHECK(cache.MatchExceeds(h, tokens, t) == (match > t));
    }
    longer += match > 0;
    Serve(cache, h, tokens, tokens);
  }
  CHECK(longer > 100);
  CHECK(cache.stats().evicted_blocks > 0);
}

TEST_CASE("the event log says what the cache holds: stored at commit, removed at eviction") {
  PrefixCache cache(4);
  std::vector<dataplane::KvEvent> log;
  cache.set_event_log(&log);
  const std::vector<uint64_t> a = Hashes({1, 2, 3});
  Serve(cache, a, 3 * 16 + 1, 3 * 16 + 1);  // 4 blocks: 3 published, the tail private
  REQUIRE(log.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(log[i].kind == dataplane::KvEventKind::kStored);
    CHECK(log[i].hash == a[i]);
  }
  // A prompt of four fresh blocks evicts all three published ones: three removed events.
  log.clear();
  const std::vector<uint64_t> b = Hashes({7, 8, 9, 10});
  Serve(cache, b, 4 * 16, 4 * 16);
  size_t removed = 0, stored = 0;
  for (const dataplane::KvEvent& e : log) {
    removed += e.kind == dataplane::KvEventKind::kRemoved;
    stored += e.kind == dataplane::KvEventKind::kStored;
  }
  CHECK(removed == 3);
  CHECK(stored == 4);
  // An index fed the log agrees with the cache.
  log.clear();
  PrefixCache replayed(4);
  replayed.set_event_log(&log);
  Serve(replayed, a, 3 * 16 + 1, 3 * 16 + 1);
  Serve(replayed, b, 4 * 16, 4 * 16);
  dataplane::KvEventIndex index({.destinations = 1, .blocks_per_destination = 4});
  index.Apply(0, log);
  std::vector<uint32_t> overlap(1);
  index.Overlap(b, dataplane::Time{}, overlap);
  CHECK(overlap[0] * 16 == replayed.Match(b, 4 * 16 + 1));
  index.Overlap(a, dataplane::Time{}, overlap);
  CHECK(overlap[0] == 0);
  CHECK(replayed.Match(a, 3 * 16 + 1) == 0);
}

}  // namespace
}  // namespace cacheroute::sim
