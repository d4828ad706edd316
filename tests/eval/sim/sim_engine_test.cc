// Tests for tools/eval/sim/engine: latencies of simple schedules worked out by hand from the
// profile's formula, chunked prefill, admission limits (KV, running sequences, queue cap), timeouts
// and determinism.
#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <vector>

#include "tools/eval/sim/engine.h"

namespace cacheroute::sim {
namespace {

// The hand-worked latencies below use the previous 70B decode line (17.785 ms + 0.8388 ms/seq),
// kept as a named profile; the engine model is the same for any line.
EngineProfile Profile70b() { return *FindEngineProfile("llama-70b-fp8-tp2-h100-itl-as-decode"); }

struct Arrival {
  double time;
  EngineRequest request;
};

// Drives one engine through `arrivals` (sorted by time; at equal times arrivals go first) until it
// is idle. Returns every event, and the submit results in `results` if given.
std::vector<EngineEvent> Run(Engine& engine, const std::vector<Arrival>& arrivals,
                             std::vector<SubmitResult>* results = nullptr) {
  std::vector<EngineEvent> events;
  size_t next = 0;
  for (;;) {
    const double engine_time = engine.NextEventTime();
    if (next < arrivals.size() && arrivals[next].time <= engine_time) {
      const SubmitResult r = engine.Submit(arrivals[next].request, arrivals[next].time);
      if (results != nullptr) results->push_back(r);
      ++next;
      continue;
    }
    if (engine_time == kForever) break;
    for (const EngineEvent& e : engine.Step(engine_time)) events.push_back(e);
  }
  return events;
}

// A request whose prompt has no cacheable content.
EngineRequest Req(uint64_t id, uint32_t prompt, uint32_t output) {
  return {.id = id, .prompt_tokens = prompt, .output_tokens = output, .block_hashes = {}};
}

const EngineEvent* Find(const std::vector<EngineEvent>& events, uint64_t id, EngineEventKind kind) {
  for (const EngineEvent& e : events) {
    if (e.request_id == id && e.kind == kind) return &e;
  }
  return nullptr;
}

double FirstToken(const std::vector<EngineEvent>& events, uint64_t id) {
  const EngineEvent* e = Find(events, id, EngineEventKind::kFirstToken);
  REQUIRE(e != nullptr);
  return e->time;
}

double Finish(const std::vector<EngineEvent>& events, uint64_t id) {
  const EngineEvent* e = Find(events, id, EngineEventKind::kFinished);
  REQUIRE(e != nullptr);
  return e->time;
}

std::vector<uint64_t> Content(uint64_t first, uint32_t blocks) {
  std::vector<uint64_t> ids(blocks);
  for (uint32_t i = 0; i < blocks; ++i) ids[i] = first + i;
  return ChainBlockHashes(ids);
}

TEST_CASE("a lone request's TTFT is the profile's formula, with and without a cache hit") {
  Engine engine(Profile70b(), {});
  const std::vector<uint64_t> hashes = Content(1, 1000 / 16);  // 62 full blocks
  const EngineRequest request{
      .id = 1, .prompt_tokens = 1000, .output_tokens = 10, .block_hashes = hashes};
  std::vector<EngineEvent> events = Run(engine, {{0.0, request}});
  const double itl = 17.785e-3 + 0.8388e-3;
  CHECK(FirstToken(events, 1) == Approx(8e-3 + 1000 * 0.080e-3));
  CHECK(Finish(events, 1) == Approx(8e-3 + 1000 * 0.080e-3 + 9 * itl));
  CHECK(Find(events, 1, EngineEventKind::kFirstToken)->cached_tokens == 0);
  CHECK(engine.stats().decode_tokens == 9);
  CHECK(engine.cache().used_blocks() == 0);

  // The same prompt again: 62 blocks = 992 tokens cached, 8 computed.
  EngineRequest again = request;
  again.id = 2;
  events = Run(engine, {{10.0, again}});
  CHECK(Find(events, 2, EngineEventKind::kFirstToken)->cached_tokens == 992);
  CHECK(FirstToken(events, 2) - 10.0 == Approx(8e-3 + 8 * 0.080e-3));
  CHECK(engine.cache().stats().hit_tokens == 992);
  CHECK(engine.cache().stats().query_tokens == 2000);
}

TEST_CASE("a long prompt is prefilled in chunks of the token budget") {
  Engine engine(Profile70b(), {});
  const EngineRequest request = Req(1, 20000, 1);
  std::vector<EngineEvent> events = Run(engine, {{0.0, request}});
  // 8,192 + 8,192 + 3,616 tokens in three iterations, each paying the prefill base.
  CHECK(engine.stats().iterations == 3);
  CHECK(engine.stats().prefill_tokens == 20000);
  CHECK(FirstToken(events, 1) == Approx(3 * 8e-3 + 20000 * 0.080e-3));
  CHECK(Finish(events, 1) == FirstToken(events, 1));  // one output token: done at the first
}

TEST_CASE("decoders count one token each against the budget and share iterations with prefill") {
  Engine engine(Profile70b(), {});
  // A decodes for a long time; B's 8,192-token prompt then gets 8,191 tokens in its first
  // iteration (A's decode takes one) and 1 in the next.
  const EngineRequest a = Req(1, 100, 1000);
  const EngineRequest b = Req(2, 8192, 1);
  const double ttft_a = 8e-3 + 100 * 0.080e-3;
  std::vector<EngineEvent> events = Run(engine, {{0.0, a}, {ttft_a, b}});
  const double mixed1 = 17.785e-3 + 8191 * 0.080e-3 + 0.8388e-3;
  const double mixed2 = 17.785e-3 + 1 * 0.080e-3 + 0.8388e-3;
  CHECK(FirstToken(events, 2) - ttft_a == Approx(mixed1 + mixed2));
}

TEST_CASE("the context term grows with every decoded token") {
  const EngineProfile p = *FindEngineProfile("llama-8b-h100");
  Engine engine(p, {});
  std::vector<EngineEvent> events = Run(engine, {{0.0, Req(1, 100, 3)}});
  // Prefill 100 tokens, then decode steps with 101 and 102 tokens of context.
  const double expected =
      p.IterationSeconds(100, 0, 0) + p.IterationSeconds(0, 1, 101) + p.IterationSeconds(0, 1, 102);
  CHECK(Finish(events, 1) == Approx(expected));
}

TEST_CASE("requests are batched and admitted together when they arrive together") {
  Engine engine(Profile70b(), {});
  std::vector<EngineEvent> events = Run(engine, {{0.0, Req(1, 1000, 2)}, {0.0, Req(2, 1000, 2)}});
  CHECK(FirstToken(events, 1) == Approx(8e-3 + 2000 * 0.080e-3));
  CHECK(FirstToken(events, 2) == FirstToken(events, 1));
  CHECK(Finish(events, 2) - FirstToken(events, 2) == Approx(17.785e-3 + 2 * 0.8388e-3));
}

TEST_CASE("a request waits while the KV cache cannot hold it") {
  EngineProfile p = Profile70b();
  p.kv_blocks = 100;
  Engine engine(p, {});
  const std::vector<uint64_t> ha = Content(100, 75), hb = Content(200, 75);
  // Each needs (1,200 + 80) / 16 = 80 blocks; only one fits at a time.
  const EngineRequest a{.id = 1, .prompt_tokens = 1200, .output_tokens = 80, .block_hashes = ha};
  const EngineRequest b{.id = 2, .prompt_tokens = 1200, .output_tokens = 80, .block_hashes = hb};
  REQUIRE(engine.Submit(a, 0) == SubmitResult::kQueued);
  REQUIRE(engine.Submit(b, 0) == SubmitResult::kQueued);
  engine.Step(0);
  CHECK(engine.running() == 1);
  CHECK(engine.waiting() == 1);
  std::vector<EngineEvent> events = Run(engine, {});
  CHECK(FirstToken(events, 2) == Approx(Finish(events, 1) + 8e-3 + 1200 * 0.080e-3));
  // B evicted A's cached blocks to fit: with 100 blocks, only 20 of A's could stay.
  CHECK(engine.cache().Match(ha, 1201) < 1200);
}

TEST_CASE("at most max_running sequences run; the rest wait") {
  EngineProfile p = Profile70b();
  p.max_running = 2;
  Engine engine(p, {});
  std::vector<EngineEvent> events =
      Run(engine, {{0.0, Req(1, 100, 5)}, {0.0, Req(2, 100, 50)}, {0.0, Req(3, 100, 5)}});
  CHECK(FirstToken(events, 3) > Finish(events, 1));
  CHECK(FirstToken(events, 3) == Approx(Finish(events, 1) + 17.785e-3 + 100 * 0.080e-3 +
                                        0.8388e-3));  // admitted beside request 2's decode
}

TEST_CASE("a full waiting queue rejects, and so does a request larger than the KV cache") {
  EngineProfile p = Profile70b();
  p.kv_blocks = 100;
  Engine engine(p, {.max_waiting = 1});
  std::vector<SubmitResult> results;
  Run(engine,
      {{0.0, Req(1, 100, 1)},
       {0.0, Req(2, 100, 1)},
       {1.0, Req(3, 1600, 1)},  // 101 blocks
       {1.0, Req(4, 0, 1)}},
      &results);
  CHECK(results ==
        std::vector<SubmitResult>{SubmitResult::kQueued, SubmitResult::kRejectedQueueFull,
                                  SubmitResult::kRejectedTooLarge, SubmitResult::kRejectedInvalid});
  CHECK(engine.stats().rejected == 3);
  CHECK(engine.stats().finished == 1);
}

TEST_CASE("requests past the timeout are aborted at the next iteration boundary") {
  Engine engine(Profile70b(), {.timeout_s = 1.0});
  std::vector<EngineEvent> events = Run(engine, {{0.0, Req(1, 20000, 1)}, {0.9, Req(2, 100, 1)}});
  // Request 1 prefills 8,192 tokens per iteration; its deadline (1.0 s) passes during the second
  // iteration, so it is aborted when that ends. Request 2 arrived during the second iteration
  // (the budget was taken) and is admitted at the same boundary, well before its own deadline.
  const double chunk = 8e-3 + 8192 * 0.080e-3;
  const EngineEvent* timed_out = Find(events, 1, EngineEventKind::kTimedOut);
  REQUIRE(timed_out != nullptr);
  CHECK(timed_out->time == Approx(2 * chunk));
  CHECK(Find(events, 1, EngineEventKind::kFirstToken) == nullptr);
  CHECK(Find(events, 2, EngineEventKind::kTimedOut) == nullptr);
  CHECK(Finish(events, 2) == Approx(2 * chunk + 8e-3 + 100 * 0.080e-3));
  CHECK(engine.stats().timed_out == 1);
  CHECK(engine.cache().used_blocks() == 0);
  CHECK(engine.running() == 0);
}

TEST_CASE("waiting and decoding requests time out too, and free what they hold") {
  EngineProfile p = Profile70b();
  p.max_running = 1;
  Engine engine(p, {.timeout_s = 1.0});
  std::vector<EngineEvent> events = Run(engine, {{0.0, Req(1, 100, 1000)}, {0.0, Req(2, 100, 1)}});
  REQUIRE(Find(events, 1, EngineEventKind::kTimedOut) != nullptr);
  REQUIRE(Find(events, 2, EngineEventKind::kTimedOut) != nullptr);
  CHECK(Find(events, 1, EngineEventKind::kTimedOut)->time >= 1.0);
  CHECK(Find(events, 1, EngineEventKind::kTimedOut)->time < 1.0 + 0.02);
  CHECK(engine.running() == 0);
  CHECK(engine.waiting() == 0);
  CHECK(engine.decoding() == 0);
  CHECK(engine.cache().used_blocks() == 0);
  CHECK(engine.NextEventTime() == kForever);
}

TEST_CASE("the same arrivals give the same events") {
  auto run = [] {
    EngineProfile p = *FindEngineProfile("llama-8b-h100");
    p.kv_blocks = 3000;  // small enough to evict
    Engine engine(p, {.max_waiting = 50, .timeout_s = 20});
    std::mt19937_64 rng(5);
    std::vector<std::vector<uint64_t>> hashes;
    std::vector<Arrival> arrivals;
    double t = 0;
    for (uint64_t id = 0; id < 2000; ++id) {
      t += std::exponential_distribution<double>(60.0)(rng);
      const uint32_t prompt = 200 + static_cast<uint32_t>(rng() % 2000);
      std::vector<uint64_t> content(prompt / 16);
      const uint64_t tenant = rng() % 20;
      for (size_t i = 0; i < content.size(); ++i) content[i] = i < 20 ? tenant * 1000 + i : rng();
      hashes.push_back(ChainBlockHashes(content));
      arrivals.push_back({t, Req(id, prompt, 1 + static_cast<uint32_t>(rng() % 300))});
    }
    for (size_t i = 0; i < arrivals.size(); ++i) arrivals[i].request.block_hashes = hashes[i];
    std::vector<EngineEvent> events = Run(engine, arrivals);
    return std::make_pair(events, engine.stats());
  };
  const auto [a, stats_a] = run();
  const auto [b, stats_b] = run();
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO(i);
    CHECK(a[i].kind == b[i].kind);
    CHECK(a[i].request_id == b[i].request_id);
    CHECK(a[i].time == b[i].time);
    CHECK(a[i].cached_tokens == b[i].cached_tokens);
  }
  CHECK(stats_a.finished + stats_a.timed_out + stats_a.rejected == 2000);
  CHECK(stats_a.iterations == stats_b.iterations);
  CHECK(stats_a.finished > 0);
}

}  // namespace
}  // namespace cacheroute::sim
