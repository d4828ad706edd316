// cacheroute-dataplane-bench: times the dataplane's request path (Router::Pick and the release of
// its InFlight token) on a table the size of the paper's primary workload, on one and two threads,
// against a mutex-guarded std::unordered_map baseline, and times table installs, including the
// Pick latency a reader sees while a writer keeps installing new versions.
//
//   cacheroute-dataplane-bench                      # 128,824 keys, 30 destinations
//   cacheroute-dataplane-bench --keys 1000000 --json
//
// Workload: a table admitting `keys` keys with k_b = 1 (destination i mod R, spill i + 1 mod R, as
// CacheRoute plans; the paper's dispatch is timed beside it on the same keys without spills), key
// ids random 64-bit (as gateways send KeyId output), and a request stream in which `unadmitted-share` of the requests
// (default 0.7, the paper's cold-tail share at R = 30, W = 64) go to keys absent from the table
// and the rest to admitted keys drawn by lognormal rate (σ = 1.65, tools/eval/workload). The
// stream is generated before any timing.
//
// How time is measured (docs in the output too):
//   - throughput: batches of `iterations` picks timed with steady_clock, reported per pick; the
//     one-thread figure, the two-thread aggregate and the baseline all come from these;
//   - per-call latency (p50, p99, p99.9, max): each pick is bracketed by the CPU's time-stamp
//     counter (lfence; rdtsc … rdtscp; lfence on x86-64, steady_clock elsewhere), the timer's own
//     median cost is subtracted, and ticks are converted with a rate calibrated against
//     steady_clock over the same pass.
// `now` is read from steady_clock once per 1,024 picks, as a gateway passes the time it already
// has. The request stream (--stream, 65,536 requests by default, 512 KiB) is replayed in a loop,
// so that reading it does not push the table out of the caches. The Router's Random keeps its
// state per thread by default (ThreadLocalRandom); --random seeded uses SeededRandom, whose one
// atomic is shared by every request thread (it costs the two-thread runs most of their speedup).
//
// The two-thread figures need two otherwise idle cores: the output says what share of the wall
// time the threads actually ran, and a speedup by CPU time per pick that a busy machine does not
// distort (it still counts cache-line transfers between the threads).
#include <time.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <memory>
#include <mutex>
#include <numeric>
#include <span>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#if defined(__x86_64__)
#include <x86intrin.h>
#endif

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "cacheroute/dataplane/random.h"
#include "cacheroute/dataplane/router.h"
#include "cacheroute/dataplane/routing_table.h"
#include "tools/eval/main_helpers.h"
#include "tools/eval/workload/lognormal_rates.h"

namespace {

namespace dp = cacheroute::dataplane;
using SteadyClock = std::chrono::steady_clock;

constexpr int kNowRefreshPicks = 1024;
// The reader of the swap test times picks until the writer is done, and at most this many
// (256 MiB of samples, a few seconds): far longer than 20 back-to-back installs of a 128,824-key
// table take, so that every install falls inside the timed picks.
constexpr size_t kMaxSwapPicks = size_t{1} << 26;

double SecondsSince(SteadyClock::time_point start) {
  return std::chrono::duration<double>(SteadyClock::now() - start).count();
}

// The time-stamp counter, fenced so that the timed work neither starts before the first read nor
// finishes after the second.
uint64_t TicksBegin() {
#if defined(__x86_64__)
  _mm_lfence();
  const uint64_t t = __rdtsc();
  _mm_lfence();
  return t;
#else
  return SteadyClock::now().time_since_epoch().count();
#endif
}

uint64_t TicksEnd() {
#if defined(__x86_64__)
  unsigned aux;
  const uint64_t t = __rdtscp(&aux);
  _mm_lfence();
  return t;
#else
  return SteadyClock::now().time_since_epoch().count();
#endif
}

struct Workload {
  std::vector<dp::TableEntry> entries;        // with spill destinations, as CacheRoute plans
  std::vector<dp::TableEntry> paper_entries;  // the same without spills (Algorithm 1)
  std::vector<uint64_t> stream;               // key ids in request order; size is a power of two
  std::vector<uint32_t> prompts;  // each request's prompt tokens (lognormal, mean ≈ 1,200)
  // kHashedPrompts prompts of kPromptBlocks chained block hashes, the i-th request using prompt
  // i mod kHashedPrompts: what a gateway passes for the prefix memory.
  std::vector<uint64_t> block_hashes;
};
constexpr size_t kHashedPrompts = 4096;
constexpr size_t kPromptBlocks = 75;  // 1,200 tokens

Workload MakeWorkload(uint64_t keys, uint32_t destinations, double unadmitted_share,
                      size_t stream_size, uint64_t seed) {
  Workload w;
  cacheroute::workload::Rng rng(seed ^ 0xbe7c4ULL);
  w.entries.reserve(keys);
  for (uint64_t i = 0; i < keys; ++i) {
    const auto d = static_cast<uint32_t>(i % destinations);
    w.entries.push_back({rng.Next(), {d}, destinations > 1 ? (d + 1) % destinations : dp::kNoSpill});
  }
  w.paper_entries = w.entries;
  for (dp::TableEntry& e : w.paper_entries) e.spill = dp::kNoSpill;
  const std::vector<double> rates = cacheroute::workload::GenerateLognormalRates(
      {.keys = keys, .sigma = 1.65, .total_rate = 1.0, .seed = seed});
  std::vector<double> cumulative(rates.size());
  std::partial_sum(rates.begin(), rates.end(), cumulative.begin());
  w.stream.resize(stream_size);
  for (uint64_t& key : w.stream) {
    if (rng.NextOpenUnit() < unadmitted_share) {
      key = rng.Next();  // a fresh random id: absent from the table
    } else {
      const double u = rng.NextOpenUnit() * cumulative.back();
      const size_t i = std::min<size_t>(
          std::upper_bound(cumulative.begin(), cumulative.end(), u) - cumulative.begin(), keys - 1);
      key = w.entries[i].key_id;
    }
  }
  w.prompts.resize(stream_size);
  for (uint32_t& p : w.prompts) {
    // exp(N(ln 1000, 0.6)): mean ≈ 1,200 tokens.
    const double z = std::sqrt(-2 * std::log(rng.NextOpenUnit())) *
                     std::cos(2 * 3.141592653589793 * rng.NextOpenUnit());
    p = static_cast<uint32_t>(std::clamp(std::exp(std::log(1000.0) + 0.6 * z), 16.0, 131072.0));
  }
  // Prompts that share a template of 12 blocks, then their own blocks.
  w.block_hashes.resize(kHashedPrompts * kPromptBlocks);
  for (size_t p = 0; p < kHashedPrompts; ++p) {
    uint64_t parent = 0;
    for (size_t b = 0; b < kPromptBlocks; ++b) {
      parent = dp::Mix64(parent ^ (b < 12 ? b + 1 : rng.Next()));
      w.block_hashes[p * kPromptBlocks + b] = parent;
    }
  }
  return w;
}

// The request the i-th pick sends: its key and prompt length, and with `hashes` its prompt's block
// hashes.
dp::PickRequest RequestAt(const Workload& w, size_t i, bool hashes) {
  const size_t mask = w.stream.size() - 1;
  dp::PickRequest r{.key_id = w.stream[i & mask], .prompt_tokens = w.prompts[i & mask]};
  if (hashes) {
    r.block_hashes = std::span<const uint64_t>(w.block_hashes)
                         .subspan((i % kHashedPrompts) * kPromptBlocks, kPromptBlocks);
  }
  return r;
}

std::shared_ptr<const dp::RoutingTable> BuildTable(const Workload& w, uint32_t destinations,
                                                   uint64_t number, bool paper = false) {
  dp::Result<dp::RoutingTable> table =
      dp::RoutingTable::Build({.epoch = 1, .number = number}, destinations,
                              std::vector<double>(destinations, 1.0),
                              paper ? w.paper_entries : w.entries);
  if (!table.ok()) {
    std::cerr << "cacheroute-dataplane-bench: error: " << table.status().message << "\n";
    std::exit(1);
  }
  return std::make_shared<const dp::RoutingTable>(*std::move(table));
}

// Picks `count` requests from the stream starting at `offset`, releasing each at once.
uint64_t RunPicks(dp::Router& router, const Workload& w, size_t offset, size_t count,
                  bool hashes = false) {
  uint64_t sink = 0;
  dp::Time now = SteadyClock::now();
  for (size_t i = 0; i < count; ++i) {
    if (i % kNowRefreshPicks == 0) now = SteadyClock::now();
    dp::InFlight request = router.Pick(RequestAt(w, offset + i, hashes), now);
    sink += request.destination();
  }
  return sink;
}

// The baseline: the obvious design, one map behind one mutex. Pick locks, looks the key up, takes
// the least-loaded member (or the lighter of two random destinations for an unadmitted key) and
// counts it in flight; Release locks again to count it out.
class MutexMapRouter {
 public:
  MutexMapRouter(const std::vector<dp::TableEntry>& entries, uint32_t destinations)
      : destinations_(destinations), in_flight_(destinations, 0) {
    map_.reserve(entries.size());
    for (const dp::TableEntry& e : entries) map_.emplace(e.key_id, e.destinations);
  }

  uint32_t Pick(uint64_t key_id) {
    std::lock_guard<std::mutex> lock(mu_);
    uint32_t best = 0;
    auto it = map_.find(key_id);
    if (it != map_.end()) {
      best = it->second.front();
      for (uint32_t d : it->second) {
        if (in_flight_[d] < in_flight_[best]) best = d;
      }
    } else {
      const uint32_t a = static_cast<uint32_t>(
          (static_cast<unsigned __int128>(dp::Mix64(++random_state_)) * destinations_) >> 64);
      const uint32_t b = static_cast<uint32_t>(
          (static_cast<unsigned __int128>(dp::Mix64(++random_state_)) * destinations_) >> 64);
      best = in_flight_[b] < in_flight_[a] ? b : a;
    }
    ++in_flight_[best];
    return best;
  }

  void Release(uint32_t destination) {
    std::lock_guard<std::mutex> lock(mu_);
    --in_flight_[destination];
  }

 private:
  std::mutex mu_;
  const uint32_t destinations_;
  std::unordered_map<uint64_t, std::vector<uint32_t>> map_;  // guarded by mu_
  std::vector<int64_t> in_flight_;                           // guarded by mu_
  uint64_t random_state_ = 0;                                // guarded by mu_
};

uint64_t RunBaselinePicks(MutexMapRouter& router, const std::vector<uint64_t>& stream,
                          size_t offset, size_t count) {
  const size_t mask = stream.size() - 1;
  uint64_t sink = 0;
  for (size_t i = 0; i < count; ++i) {
    const uint32_t d = router.Pick(stream[(offset + i) & mask]);
    sink += d;
    router.Release(d);
  }
  return sink;
}

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct RunTime {
  double wall_seconds = 0;  // from the first thread's start to the last one's finish
  double cpu_seconds = 0;   // CPU time of all threads together
};

// Runs `body(thread_index)` on `threads` threads that start together.
template <typename Body>
RunTime TimeOnThreads(int threads, const Body& body) {
  std::atomic<int> ready{0};
  std::vector<SteadyClock::time_point> start(threads), end(threads);
  std::vector<double> cpu(threads);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < threads) {
      }
      start[t] = SteadyClock::now();
      const double cpu_start = ThreadCpuSeconds();
      body(t);
      cpu[t] = ThreadCpuSeconds() - cpu_start;
      end[t] = SteadyClock::now();
    });
  }
  for (std::thread& w : workers) w.join();
  return {std::chrono::duration<double>(*std::max_element(end.begin(), end.end()) -
                                        *std::min_element(start.begin(), start.end()))
              .count(),
          std::accumulate(cpu.begin(), cpu.end(), 0.0)};
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Latency {
  double p50 = 0, p99 = 0, p999 = 0, max = 0;
  size_t samples = 0;
};

// Converts tick deltas (timer cost included) to nanosecond percentiles, the timer cost removed.
Latency Percentiles(std::vector<uint32_t> ticks, double overhead_ticks, double ns_per_tick) {
  Latency l;
  l.samples = ticks.size();
  if (ticks.empty()) return l;
  std::sort(ticks.begin(), ticks.end());
  auto at = [&](double q) {
    const uint32_t t = ticks[std::min(ticks.size() - 1, static_cast<size_t>(q * ticks.size()))];
    return std::max(0.0, (static_cast<double>(t) - overhead_ticks) * ns_per_tick);
  };
  l.p50 = at(0.5);
  l.p99 = at(0.99);
  l.p999 = at(0.999);
  l.max = at(1.0);
  return l;
}

// The timer's own cost: the median of empty begin/end pairs.
double TimerOverheadTicks() {
  std::vector<uint64_t> empty(100000);
  for (uint64_t& t : empty) {
    const uint64_t begin = TicksBegin();
    t = TicksEnd() - begin;
  }
  std::sort(empty.begin(), empty.end());
  return static_cast<double>(empty[empty.size() / 2]);
}

// Times each of `count` picks; returns raw tick deltas (saturated at 2^32 - 1) and the ns-per-tick
// rate over the pass. Stops early, with fewer samples, once `stop` is set (when given).
std::vector<uint32_t> TimePicks(dp::Router& router, const Workload& w, size_t offset, size_t count,
                                double* ns_per_tick, const std::atomic<bool>* stop = nullptr) {
  std::vector<uint32_t> ticks;
  ticks.reserve(count);
  uint64_t sink = 0;
  dp::Time now = SteadyClock::now();
  const SteadyClock::time_point wall_start = SteadyClock::now();
  const uint64_t tick_start = TicksBegin();
  for (size_t i = 0; i < count; ++i) {
    if (i % kNowRefreshPicks == 0) {
      now = SteadyClock::now();
      if (stop != nullptr && stop->load(std::memory_order_relaxed)) break;
    }
    const dp::PickRequest r = RequestAt(w, offset + i, /*hashes=*/false);
    const uint64_t begin = TicksBegin();
    {
      dp::InFlight request = router.Pick(r, now);
      sink += request.destination();
    }
    ticks.push_back(static_cast<uint32_t>(std::min<uint64_t>(TicksEnd() - begin, ~uint32_t{0})));
  }
  const uint64_t tick_end = TicksEnd();
  const double wall_ns = SecondsSince(wall_start) * 1e9;
  *ns_per_tick = wall_ns / static_cast<double>(std::max<uint64_t>(1, tick_end - tick_start));
  if (sink == 0x5eed) std::cerr << "";  // keeps the picks observable
  return ticks;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t keys = 128824;
  uint32_t destinations = 30;
  double unadmitted_share = 0.7;
  size_t iterations = 2000000;
  int repeat = 5;
  int installs = 10;
  int swaps = 20;
  uint64_t seed = 1;
  std::string random_kind = "per-thread";
  size_t stream_keys = size_t{1} << 16;
  bool json = false;

  CLI::App app{"Benchmark the dataplane's request path (Router::Pick) and table installs."};
  app.add_option("--keys", keys, "admitted keys in the table (k_b = 1)")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 28));
  app.add_option("--destinations", destinations, "R")->check(CLI::Range(1u, 65535u));
  app.add_option("--unadmitted-share", unadmitted_share,
                 "share of requests for keys not in the table")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--iterations", iterations, "picks per timed run (and per thread)")
      ->check(CLI::Range(size_t{1000}, size_t{1} << 32));
  app.add_option("--repeat", repeat, "timed throughput runs; the median is reported")
      ->check(CLI::Range(1, 1000));
  app.add_option("--installs", installs, "timed Build + Install of a full table")
      ->check(CLI::Range(1, 10000));
  app.add_option("--swaps", swaps, "installs by the writer thread in the swap test")
      ->check(CLI::Range(1, 10000));
  app.add_option("--stream", stream_keys,
                 "requests in the pre-generated stream, replayed in a loop (rounded up to a power "
                 "of two)")
      ->check(CLI::Range(size_t{2}, size_t{1} << 28));
  app.add_option("--seed", seed, "random seed");
  app.add_option("--random", random_kind,
                 "the Router's Random: per-thread (ThreadLocalRandom) or seeded (SeededRandom, "
                 "one atomic shared by all threads)")
      ->check(CLI::IsMember({"per-thread", "seeded"}));
  app.add_flag("--json", json, "print one JSON object instead of text");
  if (std::optional<int> code = cacheroute::eval::ParseCommandLine(app, argc, argv)) return *code;

  const size_t stream_size = std::bit_ceil(stream_keys);
  const Workload w = MakeWorkload(keys, destinations, unadmitted_share, stream_size, seed);
  uint64_t version = 1;
  dp::SeededRandom seeded_random(seed);
  dp::ThreadLocalRandom per_thread_random(seed);
  dp::Random& random =
      random_kind == "seeded" ? static_cast<dp::Random&>(seeded_random) : per_thread_random;
  dp::Router router({.destination_count = destinations, .table_ttl = std::chrono::seconds(60)},
                    random);
  std::shared_ptr<const dp::RoutingTable> first = BuildTable(w, destinations, version++);
  const double table_bytes_per_key =
      static_cast<double>(first->memory_bytes()) / static_cast<double>(keys);
  if (!router.Install(std::move(first), SteadyClock::now()).ok) return 1;
  // The paper's dispatch (Algorithm 1: least-loaded member, power of two choices for the rest) on
  // the same table without spills: the Pick that CacheRoute's dispatch is compared with.
  dp::Router paper_router({.destination_count = destinations,
                           .dispatch = dp::DispatchOptions::Paper(),
                           .table_ttl = std::chrono::seconds(60)},
                          random);
  if (!paper_router.Install(BuildTable(w, destinations, 1, /*paper=*/true), SteadyClock::now())
           .ok) {
    return 1;
  }
  const size_t half_stream = stream_size / 2;

  // Warm-up: fault in the stream and the table, settle the clock frequency.
  RunPicks(router, w, 0, std::min<size_t>(iterations, stream_size));

  // Throughput: one thread, two threads, the baseline (one and two threads), interleaved so that
  // a noisy neighbour hurts all of them alike.
  MutexMapRouter baseline(w.entries, destinations);
  RunBaselinePicks(baseline, w.stream, 0, std::min<size_t>(iterations, stream_size));
  // Per pick: wall ns (both threads together for the two-thread runs) and CPU ns per thread.
  std::vector<double> one_ns, two_ns, base_one_ns, base_two_ns, one_cpu_ns, two_cpu_ns,
      two_cpu_share;
  for (int r = 0; r < repeat; ++r) {
    const double n = static_cast<double>(iterations);
    const RunTime one = TimeOnThreads(1, [&](int) { RunPicks(router, w, 0, iterations); });
    const RunTime two =
        TimeOnThreads(2, [&](int t) { RunPicks(router, w, t * half_stream, iterations); });
    const RunTime base_one =
        TimeOnThreads(1, [&](int) { RunBaselinePicks(baseline, w.stream, 0, iterations); });
    const RunTime base_two = TimeOnThreads(
        2, [&](int t) { RunBaselinePicks(baseline, w.stream, t * half_stream, iterations); });
    one_ns.push_back(one.wall_seconds * 1e9 / n);
    one_cpu_ns.push_back(one.cpu_seconds * 1e9 / n);
    two_ns.push_back(two.wall_seconds * 1e9 / (2 * n));
    two_cpu_ns.push_back(two.cpu_seconds * 1e9 / (2 * n));
    two_cpu_share.push_back(two.cpu_seconds / (2 * two.wall_seconds));
    base_one_ns.push_back(base_one.wall_seconds * 1e9 / n);
    base_two_ns.push_back(base_two.wall_seconds * 1e9 / (2 * n));
  }
  const double one_thread_ns = Median(one_ns);
  const double two_thread_ns = Median(two_ns);  // wall time per pick, both threads together
  const double two_thread_speedup = one_thread_ns / two_thread_ns;
  const double two_thread_speedup_best = *std::min_element(one_ns.begin(), one_ns.end()) /
                                         *std::min_element(two_ns.begin(), two_ns.end());
  // What the speedup would be had both threads had a core each the whole time: CPU time per pick
  // on one thread against CPU time per pick per thread on two (2.0 = no contention at all).
  const double two_thread_cpu_speedup = 2 * Median(one_cpu_ns) / Median(two_cpu_ns);
  const double two_thread_cpu_share = Median(two_cpu_share);
  const double baseline_ns = Median(base_one_ns);
  const double baseline_two_thread_ns = Median(base_two_ns);
  const double baseline_ratio = baseline_ns / one_thread_ns;

  // Per-call latency, one thread, no installs.
  const double overhead_ticks = TimerOverheadTicks();
  double ns_per_tick = 0;
  std::vector<uint32_t> ticks = TimePicks(router, w, 0, iterations, &ns_per_tick);
  const Latency pick = Percentiles(std::move(ticks), overhead_ticks, ns_per_tick);

  // CacheRoute's dispatch against the paper's: alternating batches timed by steady_clock (per-call
  // ticks are too coarse on some machines to tell a few nanoseconds apart), median ns per pick.
  std::vector<double> dispatch_runs, paper_runs;
  for (int r = 0; r < 2 * repeat + 1; ++r) {
    const double n = static_cast<double>(iterations);
    dispatch_runs.push_back(
        TimeOnThreads(1, [&](int) { RunPicks(router, w, 0, iterations); }).wall_seconds * 1e9 / n);
    paper_runs.push_back(
        TimeOnThreads(1, [&](int) { RunPicks(paper_router, w, 0, iterations); }).wall_seconds *
        1e9 / n);
  }
  const double dispatch_ns = Median(dispatch_runs);
  const double paper_ns = Median(paper_runs);
  const double dispatch_ratio = dispatch_ns / paper_ns;
  // The same with each request's block hashes (75 per prompt): the prefix memory's reads and
  // writes on top.
  std::vector<double> hashed_runs;
  for (int r = 0; r < 2 * repeat + 1; ++r) {
    hashed_runs.push_back(
        TimeOnThreads(1, [&](int) { RunPicks(router, w, 0, iterations, /*hashes=*/true); })
            .wall_seconds *
        1e9 / static_cast<double>(iterations));
  }
  const double hashed_ns = Median(hashed_runs);

  // Install: Build + Install of a full table, repeated.
  std::vector<double> build_ms, install_ms, total_ms;
  for (int i = 0; i < installs; ++i) {
    const SteadyClock::time_point start = SteadyClock::now();
    std::shared_ptr<const dp::RoutingTable> table = BuildTable(w, destinations, version++);
    const double built = SecondsSince(start);
    const dp::Status s = router.Install(std::move(table), SteadyClock::now());
    const double total = SecondsSince(start);
    if (!s.ok) {
      std::cerr << "cacheroute-dataplane-bench: install failed: " << s.message << "\n";
      return 1;
    }
    build_ms.push_back(built * 1e3);
    install_ms.push_back((total - built) * 1e3);
    total_ms.push_back(total * 1e3);
  }

  // Swaps: a writer builds and installs `swaps` new versions back to back while a reader times
  // every pick.
  std::atomic<bool> writer_done{false};
  std::atomic<bool> reader_started{false};
  double swap_ns_per_tick = 0;
  std::vector<uint32_t> swap_ticks;
  double swap_seconds = 0;
  std::thread reader([&] {
    reader_started.store(true);
    swap_ticks = TimePicks(router, w, half_stream, kMaxSwapPicks, &swap_ns_per_tick, &writer_done);
  });
  while (!reader_started.load()) std::this_thread::yield();
  {
    const SteadyClock::time_point start = SteadyClock::now();
    for (int i = 0; i < swaps; ++i) {
      if (!router.Install(BuildTable(w, destinations, version++), SteadyClock::now()).ok) return 1;
    }
    swap_seconds = SecondsSince(start);
  }
  writer_done.store(true);
  reader.join();
  const Latency swap = Percentiles(std::move(swap_ticks), overhead_ticks, swap_ns_per_tick);

  const double overhead_ns = overhead_ticks * ns_per_tick;
  if (json) {
    std::cout << absl::StrFormat(
        "{\"keys\": %d, \"destinations\": %d, \"unadmitted_share\": %.3f, \"iterations\": %d, "
        "\"repeat\": %d, \"table_bytes_per_key\": %.3f, "
        "\"pick_ns_p50\": %.2f, \"pick_ns_p99\": %.2f, \"pick_ns_p999\": %.2f, "
        "\"pick_ns_max\": %.2f, \"timer_overhead_ns\": %.2f, "
        "\"one_thread_ns_per_pick\": %.3f, \"one_thread_picks_per_second\": %.6g, "
        "\"two_thread_picks_per_second\": %.6g, \"two_thread_speedup\": %.3f, "
        "\"two_thread_speedup_best\": %.3f, \"two_thread_cpu_speedup\": %.3f, "
        "\"two_thread_cpu_share\": %.3f, \"random\": \"%s\", \"stream\": %d, "
        "\"baseline_ns_per_pick\": %.3f, \"baseline_ratio\": %.3f, "
        "\"baseline_two_thread_picks_per_second\": %.6g, "
        "\"build_ms_median\": %.3f, \"install_ms_median\": %.3f, \"install_ms_max\": %.3f, "
        "\"build_install_ms_median\": %.3f, \"build_install_ms_max\": %.3f, "
        "\"swap_installs\": %d, \"swap_seconds\": %.4f, \"swap_picks\": %d, "
        "\"swap_pick_ns_p50\": %.2f, \"swap_pick_ns_p99\": %.2f, \"swap_pick_ns_p999\": %.2f, "
        "\"swap_pick_ns_max\": %.2f, \"dispatch_ns_per_pick\": %.3f, "
        "\"paper_ns_per_pick\": %.3f, \"dispatch_ratio\": %.3f, "
        "\"hashed_dispatch_ns_per_pick\": %.3f}\n",
        keys, destinations, unadmitted_share, iterations, repeat, table_bytes_per_key, pick.p50,
        pick.p99, pick.p999, pick.max, overhead_ns, one_thread_ns, 1e9 / one_thread_ns,
        1e9 / two_thread_ns, two_thread_speedup, two_thread_speedup_best, two_thread_cpu_speedup,
        two_thread_cpu_share, random_kind, stream_size, baseline_ns, baseline_ratio,
        1e9 / baseline_two_thread_ns, Median(build_ms), Median(install_ms),
        *std::max_element(install_ms.begin(), install_ms.end()), Median(total_ms),
        *std::max_element(total_ms.begin(), total_ms.end()), swaps, swap_seconds, swap.samples,
        swap.p50, swap.p99, swap.p999, swap.max, dispatch_ns, paper_ns, dispatch_ratio, hashed_ns);
    return 0;
  }
  // One figure per line: label, value, and the target where there is one.
  auto line = [](const std::string& label, const std::string& value,
                 const std::string& target = "") {
    if (target.empty()) {
      std::cout << absl::StrFormat("  %-24s %s\n", label, value);
    } else {
      std::cout << absl::StrFormat("  %-24s %-36s %s\n", label, value, target);
    }
  };
  const auto ns = [](double v) { return absl::StrFormat("%.1f ns", v); };
  std::cout << absl::StrFormat(
      "dataplane: %d admitted keys (k_b = 1), R = %d, %.0f%% of requests for unadmitted keys, "
      "%s Random\n",
      keys, destinations, unadmitted_share * 100, random_kind);
  line("table memory", absl::StrFormat("%.2f bytes/key", table_bytes_per_key), "(target ≤ 24)");
  std::cout << absl::StrFormat(
      "Router::Pick + release, one thread: %d picks timed one by one (TSC; timer cost %.1f ns "
      "subtracted)\n",
      pick.samples, overhead_ns);
  line("median", ns(pick.p50), "(target ≤ 50 ns)");
  line("p99", ns(pick.p99), "(target ≤ 200 ns)");
  line("p99.9, max", ns(pick.p999) + ", " + ns(pick.max));
  std::cout << absl::StrFormat(
      "CacheRoute's dispatch (token work: per-key memory, the ledger, ~6 candidates) against the "
      "paper's on the same keys: median of %d alternating runs of %d picks, ns per pick + "
      "release\n",
      2 * repeat + 1, iterations);
  line("cacheroute, paper", ns(dispatch_ns) + ", " + ns(paper_ns));
  line("ratio", absl::StrFormat("%.2fx", dispatch_ratio),
       "(target ≤ 2.5x: twice the previous rule's ≤ 1.25x)");
  line("with block hashes", ns(hashed_ns) + " (75 per request: the prefix memory too)");
  std::cout << absl::StrFormat(
      "Throughput: %d runs of %d picks per thread, each timed by steady_clock; median run\n",
      repeat, iterations);
  line("one thread",
       absl::StrFormat("%.1f ns/pick = %.3g picks/s", one_thread_ns, 1e9 / one_thread_ns));
  line("two threads",
       absl::StrFormat("%.3g picks/s = %.2fx one thread", 1e9 / two_thread_ns, two_thread_speedup),
       "(target ≥ 1.7x)");
  line("", absl::StrFormat("best runs %.2fx; threads ran %.0f%% of the wall time",
                           two_thread_speedup_best, two_thread_cpu_share * 100));
  line("", absl::StrFormat("by CPU time per pick %.2fx (2.00 = no contention)",
                           two_thread_cpu_speedup));
  line("baseline, one thread",
       absl::StrFormat("%.1f ns/pick (unordered_map + std::mutex)", baseline_ns));
  line("baseline, two threads", absl::StrFormat("%.3g picks/s", 1e9 / baseline_two_thread_ns));
  line("baseline_ratio", absl::StrFormat("%.2f", baseline_ratio),
       "(baseline time / Router time: > 1 means the Router is faster)");
  std::cout << absl::StrFormat("Install of a %d-key table, %d times\n", keys, installs);
  line("Build + Install",
       absl::StrFormat("median %.2f ms, max %.2f ms", Median(total_ms),
                       *std::max_element(total_ms.begin(), total_ms.end())),
       "(target ≤ 20 ms)");
  line("of which Install",
       absl::StrFormat("median %.3f ms, max %.3f ms", Median(install_ms),
                       *std::max_element(install_ms.begin(), install_ms.end())));
  std::cout << absl::StrFormat(
      "Picks on one thread while another installs %d new versions back to back (%.0f ms, %d "
      "picks timed)\n",
      swaps, swap_seconds * 1e3, swap.samples);
  line("median, p99", ns(swap.p50) + ", " + ns(swap.p99));
  line("p99.9, max", ns(swap.p999) + ", " + ns(swap.max),
       "(no installs: " + ns(pick.p999) + ", " + ns(pick.max) + ")");
  return 0;
}
