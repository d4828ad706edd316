// RateRecorder and SpaceSaving: exact counts below max_keys, the space-saving guarantees on
// seeded Zipf streams checked against brute-force counts (one shard and merged shards), window
// resets, determinism, the report cap, option validation, and a concurrency test (label
// `concurrency`: runs under TSan) in which four threads record while a fifth drains. A hidden
// benchmark ([.benchmark]) prints ns per Record.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <thread>
#include <vector>

#include "cacheroute/dataplane/key_id.h"
#include "cacheroute/dataplane/random.h"
#include "cacheroute/dataplane/rate_recorder.h"
#include "cacheroute/dataplane/space_saving.h"

namespace cacheroute::dataplane {
namespace {

using Truth = std::map<uint64_t, uint64_t>;

// Draws key indices in [0, n) with P(i) ∝ 1 / (i + 1)^s.
class Zipf {
 public:
  Zipf(uint32_t n, double s) : cdf_(n) {
    double sum = 0;
    for (uint32_t i = 0; i < n; ++i) cdf_[i] = (sum += 1.0 / std::pow(i + 1.0, s));
    for (double& c : cdf_) c /= sum;
  }
  uint32_t Draw(Random& random) const {
    const double u = static_cast<double>(random.Next() >> 11) * 0x1.0p-53;
    const auto it = std::upper_bound(cdf_.begin(), cdf_.end(), u);
    return static_cast<uint32_t>(std::min<size_t>(it - cdf_.begin(), cdf_.size() - 1));
  }

 private:
  std::vector<double> cdf_;
};

// A seeded Zipf stream over keys Mix64(salt + i): the same seed and salt give the same stream.
std::vector<uint64_t> ZipfStream(uint64_t seed, uint64_t salt, uint32_t keys, double s, size_t n) {
  SeededRandom random(seed);
  Zipf zipf(keys, s);
  std::vector<uint64_t> stream(n);
  for (uint64_t& key : stream) key = Mix64(salt + zipf.Draw(random));
  return stream;
}

uint64_t ListedSum(const RateSnapshot& snapshot) {
  uint64_t sum = 0;
  for (const KeyCount& k : snapshot.counts) sum += k.count;
  return sum;
}

// Every property a snapshot promises, against the true counts of its window.
void CheckSnapshot(const RateSnapshot& snapshot, const Truth& truth, uint32_t max_keys) {
  uint64_t n = 0;
  for (const auto& [key, count] : truth) n += count;
  REQUIRE(snapshot.total == n);
  REQUIRE(ListedSum(snapshot) + snapshot.other_count == n);
  std::map<uint64_t, KeyCount> listed;
  for (size_t i = 0; i < snapshot.counts.size(); ++i) {
    const KeyCount& k = snapshot.counts[i];
    if (i > 0) REQUIRE(snapshot.counts[i - 1].key_id < k.key_id);
    listed[k.key_id] = k;
    const auto it = truth.find(k.key_id);
    REQUIRE(it != truth.end());
    INFO("key " << k.key_id << " count " << k.count << " error " << k.error << " truth "
                << it->second);
    CHECK(k.count <= it->second);
    CHECK(it->second <= k.count + k.error);
  }
  for (const auto& [key, count] : truth) {
    if (count * max_keys > n) {
      INFO("heavy key " << key << " with " << count << " of " << n);
      CHECK(listed.count(key) == 1);
    }
  }
}

TEST_CASE("Counts are exact while a window has at most max_keys keys", "[rate_recorder]") {
  RateRecorder recorder({.shards = 4, .max_keys = 64});
  Truth truth;
  // Key i gets i + 1 requests, interleaved round-robin.
  for (uint64_t round = 0; round < 64; ++round) {
    for (uint64_t i = round; i < 64; ++i) {
      recorder.Record(i * 1000);
      ++truth[i * 1000];
    }
  }
  const RateSnapshot snapshot = recorder.Drain();
  CHECK(snapshot.total == 64 * 65 / 2);
  CHECK(snapshot.other_count == 0);
  REQUIRE(snapshot.counts.size() == 64);
  for (const KeyCount& k : snapshot.counts) {
    CHECK(k.count == truth[k.key_id]);
    CHECK(k.error == 0);
  }
  CheckSnapshot(snapshot, truth, 64);
}

TEST_CASE("SpaceSaving keeps its bounds against brute force", "[space_saving]") {
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    const uint32_t capacity = 8 * static_cast<uint32_t>(seed);
    SpaceSaving sketch(capacity);
    Truth truth;
    for (uint64_t key : ZipfStream(seed, seed * 1000, 500, 1.0, 20000)) {
      sketch.Add(key);
      ++truth[key];
    }
    INFO("seed " << seed);
    REQUIRE(sketch.size() == capacity);
    REQUIRE(sketch.evicted());
    REQUIRE(sketch.total() == 20000);
    uint64_t sum = 0;
    Truth held;
    for (uint32_t i = 0; i < sketch.size(); ++i) {
      const SpaceSaving::Counter& c = sketch.counter(i);
      sum += c.count;
      held[c.key] = c.count;
      CHECK(c.count - c.error <= truth[c.key]);
      CHECK(truth[c.key] <= c.count);
      CHECK(c.count >= sketch.min_count());
    }
    CHECK(held.size() == capacity);
    CHECK(sum == 20000);  // the counters account for every Add
    for (const auto& [key, count] : truth) {
      if (held.count(key) == 0) CHECK(count <= sketch.min_count());
    }
    CHECK(sketch.min_count() * capacity <= 20000);
    sketch.Clear();
    CHECK(sketch.size() == 0);
    CHECK(sketch.total() == 0);
    CHECK_FALSE(sketch.evicted());
    sketch.Add(7);
    sketch.Add(7);
    REQUIRE(sketch.size() == 1);
    CHECK(sketch.counter(0).key == 7);
    CHECK(sketch.counter(0).count == 2);
    CHECK(sketch.counter(0).error == 0);
  }
}

TEST_CASE("A skewed stream beyond max_keys keeps heavy keys and an exact total",
          "[rate_recorder]") {
  for (uint64_t seed = 1; seed <= 4; ++seed) {
    const uint32_t max_keys = 16 * static_cast<uint32_t>(seed);
    RateRecorder recorder({.shards = 2, .max_keys = max_keys});
    Truth truth;
    for (uint64_t key : ZipfStream(seed, 0, 2000, 1.1, 100000)) {
      recorder.Record(key);
      ++truth[key];
    }
    const RateSnapshot snapshot = recorder.Drain();
    INFO("seed " << seed << ", max_keys " << max_keys);
    CheckSnapshot(snapshot, truth, max_keys);
    // The sketch was actually exercised: keys were evicted and the light ones folded.
    CHECK(snapshot.other_count > 0);
    CHECK(snapshot.counts.size() <= max_keys);
    CHECK(snapshot.counts.size() >= 2);
  }
}

TEST_CASE("Snapshots merge shards within the bounds", "[rate_recorder]") {
  // Sequential threads get consecutive thread indices, so each records on its own shard, and the
  // streams (different seeds over the same keys) are deterministic.
  RateRecorder recorder({.shards = 4, .max_keys = 16});
  Truth truth;
  for (uint64_t t = 0; t < 4; ++t) {
    const std::vector<uint64_t> stream = ZipfStream(t + 10, 0, 300, 1.0 + 0.1 * t, 30000);
    for (uint64_t key : stream) ++truth[key];
    std::thread([&] {
      for (uint64_t key : stream) recorder.Record(key);
    }).join();
  }
  const RateSnapshot snapshot = recorder.Drain();
  CheckSnapshot(snapshot, truth, 16);
  CHECK(snapshot.other_count > 0);
}

TEST_CASE("Drain resets the window", "[rate_recorder]") {
  RateRecorder recorder({.shards = 1, .max_keys = 4});
  for (uint64_t key = 1; key <= 10; ++key) recorder.Record(key);  // evicts
  RateSnapshot first = recorder.Drain();
  CHECK(first.total == 10);
  CHECK(ListedSum(first) + first.other_count == 10);

  const RateSnapshot empty = recorder.Drain();
  CHECK(empty.total == 0);
  CHECK(empty.other_count == 0);
  CHECK(empty.counts.empty());

  // A fresh window is exact again: nothing of the evictions above carries over.
  recorder.Record(3);
  recorder.Record(3);
  recorder.Record(11);
  const RateSnapshot second = recorder.Drain();
  CHECK(second == RateSnapshot{.counts = {{3, 2, 0}, {11, 1, 0}}, .other_count = 0, .total = 3});
  // Both sketches of the shard have been used and cleared once: a third window too.
  recorder.Record(5);
  CHECK(recorder.Drain() == RateSnapshot{.counts = {{5, 1, 0}}, .other_count = 0, .total = 1});
}

TEST_CASE("The same single-threaded sequence gives the same snapshots", "[rate_recorder]") {
  const std::vector<uint64_t> stream = ZipfStream(3, 0, 1000, 0.9, 20000);
  auto run = [&] {
    RateRecorder recorder({.shards = 8, .max_keys = 32});
    std::vector<RateSnapshot> snapshots;
    for (size_t i = 0; i < stream.size(); ++i) {
      recorder.Record(stream[i]);
      if (i % 7000 == 6999) snapshots.push_back(recorder.Drain());
    }
    snapshots.push_back(recorder.Drain());
    return snapshots;
  };
  const std::vector<RateSnapshot> a = run();
  const std::vector<RateSnapshot> b = run();
  REQUIRE(a.size() == 3);
  CHECK(a == b);
  CHECK_FALSE(a[0] == a[1]);
}

TEST_CASE("max_report_keys keeps the heaviest keys and folds the rest", "[rate_recorder]") {
  RateRecorder recorder({.shards = 1, .max_keys = 100, .max_report_keys = 3});
  // Key k gets k requests: the three heaviest are listed, 1 + … + 7 requests folded.
  for (uint64_t key = 1; key <= 10; ++key) {
    for (uint64_t i = 0; i < key; ++i) recorder.Record(key);
  }
  const RateSnapshot snapshot = recorder.Drain();
  CHECK(snapshot == RateSnapshot{.counts = {{8, 8, 0}, {9, 9, 0}, {10, 10, 0}},
                                 .other_count = 55 - 27,
                                 .total = 55});
}

TEST_CASE("ValidateOptions names the field and the value", "[rate_recorder]") {
  CHECK(RateRecorder::ValidateOptions({}).ok);
  CHECK(RateRecorder::ValidateOptions({.shards = 64, .max_keys = 1, .max_report_keys = 1}).ok);
  Status s = RateRecorder::ValidateOptions({.shards = 6});
  CHECK_FALSE(s.ok);
  CHECK(s.message == "shards: must be 0 or a power of two <= 1024, got 6");
  s = RateRecorder::ValidateOptions({.shards = 2048});
  CHECK(s.message == "shards: must be 0 or a power of two <= 1024, got 2048");
  s = RateRecorder::ValidateOptions({.max_keys = 0});
  CHECK(s.message == "max_keys: must be in [1, 16777216], got 0");
  s = RateRecorder::ValidateOptions({.max_report_keys = 0});
  CHECK(s.message == "max_report_keys: must be >= 1, got 0");

  RateRecorder defaults;
  CHECK(std::has_single_bit(defaults.shards()));
  CHECK(defaults.shards() >= 2);
  CHECK(defaults.max_keys() == 2048);
}

// Four threads record known streams while a fifth drains in a loop; across all the drains every
// request is counted exactly once. Run with few shards (Records collide on shard flags and some
// overflow) and with enough counters for exact per-key counts.
TEST_CASE("Concurrent Records are counted in exactly one window", "[rate_recorder][concurrency]") {
  struct Setup {
    RateRecorderOptions options;
    uint32_t keys;
  };
  const Setup setup =
      GENERATE(Setup{{.shards = 0, .max_keys = 512}, 256}, Setup{{.shards = 1, .max_keys = 8}, 300},
               Setup{{.shards = 2, .max_keys = 32}, 1000});
  constexpr int kThreads = 4;
  constexpr size_t kPerThread = 50000;
  INFO("shards " << setup.options.shards << ", max_keys " << setup.options.max_keys);

  std::vector<std::vector<uint64_t>> streams;
  Truth truth;
  for (int t = 0; t < kThreads; ++t) {
    streams.push_back(ZipfStream(100 + t, 0, setup.keys, 1.0, kPerThread));
    for (uint64_t key : streams.back()) ++truth[key];
  }

  RateRecorder recorder(setup.options);
  std::atomic<int> ready{0};
  std::atomic<int> finished{0};
  std::atomic<uint64_t> drains{0};
  uint64_t total = 0;
  uint64_t listed_plus_other = 0;
  std::map<uint64_t, std::pair<uint64_t, uint64_t>> bounds;  // key → Σ count, Σ (count + error)
  uint64_t other = 0;
  auto absorb = [&](const RateSnapshot& s) {
    total += s.total;
    listed_plus_other += ListedSum(s) + s.other_count;
    other += s.other_count;
    for (const KeyCount& k : s.counts) {
      bounds[k.key_id].first += k.count;
      bounds[k.key_id].second += k.count + k.error;
    }
  };
  std::thread drainer([&] {
    while (ready.load() < kThreads) std::this_thread::yield();
    while (finished.load() < kThreads) {
      absorb(recorder.Drain());
      drains.fetch_add(1);
    }
  });
  std::vector<std::thread> recorders;
  for (int t = 0; t < kThreads; ++t) {
    recorders.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();
      // Halfway, wait for a drain, so that at least one falls inside the recording.
      const size_t half = streams[t].size() / 2;
      for (size_t i = 0; i < half; ++i) recorder.Record(streams[t][i]);
      while (drains.load() == 0) std::this_thread::yield();
      for (size_t i = half; i < streams[t].size(); ++i) recorder.Record(streams[t][i]);
      finished.fetch_add(1);
    });
  }
  for (std::thread& t : recorders) t.join();
  drainer.join();
  absorb(recorder.Drain());

  CHECK(drains.load() >= 1);
  CHECK(total == kThreads * kPerThread);
  CHECK(listed_plus_other == kThreads * kPerThread);
  // Σ over windows of a key's per-window bounds bounds its count over all windows. A key absent
  // from a window's list is in that window's other_count, so only the lower bound is checked
  // for keys listed in some windows only.
  for (const auto& [key, bound] : bounds) {
    INFO("key " << key);
    CHECK(bound.first <= truth[key]);
  }
  if (setup.options.max_keys >= setup.keys && setup.options.shards == 0) {
    // Enough counters for every key: only overflowed Records are not attributed to their key.
    uint64_t attributed = 0;
    for (const auto& [key, bound] : bounds) attributed += bound.first;
    CHECK(attributed + other == kThreads * kPerThread);
  }
}

TEST_CASE("Record cost", "[.benchmark]") {
  auto measure = [](int threads, uint32_t keys, uint32_t max_keys) {
    const std::vector<uint64_t> stream = ZipfStream(1, 0, keys, 1.0, 1 << 22);
    RateRecorder recorder({.max_keys = max_keys});
    std::atomic<int> ready{0};
    std::vector<double> ns(threads);
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        ready.fetch_add(1);
        while (ready.load() < threads) {
        }
        const auto start = std::chrono::steady_clock::now();
        for (uint64_t key : stream) recorder.Record(key);
        const auto elapsed = std::chrono::steady_clock::now() - start;
        ns[t] = std::chrono::duration<double, std::nano>(elapsed).count() / stream.size();
      });
    }
    for (std::thread& w : workers) w.join();
    const RateSnapshot s = recorder.Drain();
    double worst = 0;
    for (double v : ns) worst = std::max(worst, v);
    std::printf(
        "Record: %d thread(s), %u shards, max_keys %5u, Zipf(1.0) over %6u keys: "
        "%5.1f ns/Record (%zu keys listed, other %.1f%%)\n",
        threads, recorder.shards(), max_keys, keys, worst, s.counts.size(),
        100.0 * static_cast<double>(s.other_count) / static_cast<double>(s.total));
  };
  for (int threads : {1, 2}) {
    measure(threads, 1000, 2048);     // every key exact, sketch in cache
    measure(threads, 100000, 1024);   // evictions on most tail requests
    measure(threads, 100000, 16384);  // a larger sketch
  }
}

}  // namespace
}  // namespace cacheroute::dataplane
