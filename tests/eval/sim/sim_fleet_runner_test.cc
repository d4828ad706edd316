// The bridge to the fleet simulator (tools/eval/sim/study/fleet_runner.h): a study's knobs become
// the FleetConfig, and the real fleet's results do not depend on the thread count.
#include <chrono>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "tests/eval/sim/small_trace.h"
#include "tests/support/temp_dir.h"
#include "tools/eval/sim/study/builtin_studies.h"
#include "tools/eval/sim/study/fleet_runner.h"

namespace cacheroute::sim::study {
namespace {

TEST_CASE("a run's FleetConfig holds the study's knobs as they are", "[study]") {
  StudyConfig c = *FindStudy("hetero-prefix");
  c.fleet.queue_cap = 50;
  c.fleet.timeout_s = 30;
  c.fleet.dispatch.queue_wait = 0.25;
  c.fleet.dispatch.prefix_memory_log2 = 12;
  c.fleet.parameters.chwbl_epsilon = 0.5;
  c.fleet.kv_event_delay_s = 0.125;
  const absl::StatusOr<FleetConfig> f = MakeFleetConfig(
      {.study = &c, .policy = "chwbl", .gateways = 3, .offered_qps = 120, .seed = 7});
  REQUIRE(f.ok());
  CHECK(f->policy == "chwbl");
  CHECK(f->engines == c.destinations);
  CHECK(f->gateways == 3);
  CHECK(f->profile.kv_blocks == 4000);
  CHECK(f->engine.max_waiting == 50);
  CHECK(f->engine.timeout_s == 30);
  CHECK(f->seed == 7);
  CHECK(f->offered_qps == 120);
  CHECK(f->warmup_s == c.fleet.warmup_s);
  CHECK(f->parameters.chwbl_epsilon == 0.5);
  CHECK(f->kv_event_delay_s == 0.125);
  CHECK(f->dispatch.queue_wait == 0.25);
  CHECK(f->dispatch.prefix_memory_log2 == 12);
  CHECK(f->dispatch.default_turnover == dataplane::DispatchOptions{}.default_turnover);
  // Without the turnover measured, remembered destinations never expire.
  c.fleet.measure_turnover = false;
  const absl::StatusOr<FleetConfig> stale = MakeFleetConfig(
      {.study = &c, .policy = "cacheroute", .gateways = 1, .offered_qps = 120, .seed = 7});
  REQUIRE(stale.ok());
  CHECK_FALSE(stale->measure_turnover);
  CHECK(stale->dispatch.default_turnover > std::chrono::hours(24 * 364));
  // A bad knob the study did not catch is the fleet's to name.
  c.fleet.parameters.chwbl_epsilon = 0.25;
  c.profile = "gpt-9";
  CHECK_FALSE(MakeFleetConfig(
                  {.study = &c, .policy = "chwbl", .gateways = 1, .offered_qps = 120, .seed = 7})
                  .ok());
}

TEST_CASE("the real fleet: the same seed gives the same result on 1 or 2 threads", "[study]") {
  StudyConfig c = *FindStudy("primary");
  c.policies = {"flat-lb", "cacheroute"};
  c.loads = {60};
  c.seeds = {2, 3};
  c.duration_s = 20;
  c.fleet.warmup_s = 10;
  c.workload.warmup_s = 0;
  c.gateway_counts = {1};
  const absl::StatusOr<StudyResult> one = RunStudy(c, MakeFleetRunner(), {.jobs = 1});
  c.gateway_counts = {1, 4};
  const absl::StatusOr<StudyResult> two = RunStudy(c, MakeFleetRunner(), {.jobs = 2});
  REQUIRE(one.ok());
  REQUIRE(two.ok());
  REQUIRE(one->runs.size() == 4);
  REQUIRE(two->runs.size() == 8);
  auto same = [](const RunRecord& a, const RunRecord& b) {
    CHECK(a.requests > 0);
    CHECK(a.requests == b.requests);
    CHECK(a.completed == b.completed);
    CHECK(a.ttft_p99_s == b.ttft_p99_s);
    CHECK(a.e2e_p99_s == b.e2e_p99_s);
    CHECK(a.kv_hit == b.kv_hit);
    CHECK(a.routing_precision == b.routing_precision);
    CHECK(a.imbalance == b.imbalance);
  };
  // Sweeping G = 4 beside G = 1 leaves the G = 1 runs as they were: runs (policy, G, seed).
  for (size_t p = 0; p < 2; ++p) {
    for (size_t seed = 0; seed < 2; ++seed) {
      const RunRecord& a = one->runs[2 * p + seed];
      const RunRecord& b = two->runs[4 * p + seed];
      INFO(a.policy << " seed " << a.seed);
      CHECK(b.gateways == 1);
      same(a, b);
      CHECK(a.routing_precision > 0);
      CHECK(a.routing_precision <= 1);
    }
  }
  CHECK(one->runs[0].ttft_p99_s != one->runs[1].ttft_p99_s);  // seeds differ
  // The count reaches the fleet: CacheRoute behind four gateways routes otherwise.
  const RunRecord& cacheroute_g1 = two->runs[4];
  const RunRecord& cacheroute_g4 = two->runs[6];
  REQUIRE(cacheroute_g4.gateways == 4);
  CHECK(cacheroute_g4.routing_precision != cacheroute_g1.routing_precision);
}

TEST_CASE("the real fleet replays a trace: every seed sees the same requests", "[study][trace]") {
  cacheroute::testing::TempDir dir("sim_fleet_runner_test");
  StudyConfig c = *FindStudy("trace");
  c.trace.path = dir.Write(
      "t.jsonl", cacheroute::testing::SmallTrace(300, 200));  // 5 QPS over 60 s as written
  c.policies = {"flat-lb", "sticky", "cacheroute"};
  c.gateway_counts = {1};
  c.loads = {4, 8};
  c.seeds = {2, 3};
  c.fleet.warmup_s = 10;
  const absl::StatusOr<StudyResult> r = RunStudy(c, MakeFleetRunner(), {.jobs = 2});
  REQUIRE(r.ok());
  REQUIRE(r->runs.size() == 12);
  for (size_t i = 0; i < r->runs.size(); i += 2) {
    const RunRecord& a = r->runs[i];
    const RunRecord& b = r->runs[i + 1];
    INFO(a.policy << " " << a.offered_qps);
    CHECK(a.seed == 2);
    CHECK(b.seed == 3);
    // Arrivals in the window: the rescaled trace after 10 s of warm-up, the same for both seeds.
    CHECK(a.requests == b.requests);
    // At q QPS request i arrives at 60 i / (59.8 q) s: the window holds i ≥ 9.97 q.
    CHECK(a.requests == static_cast<uint64_t>(300 - 10 * a.offered_qps));
    CHECK(a.completed > 0);
    CHECK(a.kv_hit > 0);  // block 0 and the conversations' blocks are shared
  }
}

}  // namespace
}  // namespace cacheroute::sim::study
