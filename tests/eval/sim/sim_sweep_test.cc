// RunStudy (tools/eval/sim/study/sweep.h) with a fake run function: the order of the results,
// the progress lines and a failing run.
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "tools/eval/sim/study/builtin_studies.h"
#include "tools/eval/sim/study/sweep.h"

namespace cacheroute::sim::study {
namespace {

// A fake run: metrics are a pure function of the spec.
absl::StatusOr<RunRecord> FakeRun(const RunSpec& spec) {
  RunRecord r;
  const double policy = static_cast<double>(spec.policy.size());
  r.ttft_p99_s = spec.offered_qps / (10 * policy) + 0.01 * spec.seed + 100 * spec.gateways;
  r.kv_hit = 0.5 + 0.01 * policy;
  r.requests = static_cast<uint64_t>(spec.offered_qps * 10);
  r.simulated_requests = r.requests;
  return r;
}

TEST_CASE("a sweep is ordered by (policy, gateways, load, seed) whatever the thread count",
          "[study]") {
  StudyConfig c = *FindStudy("primary");
  c.seeds = {4, 2, 3};  // as listed, not sorted
  c.gateway_counts = {1, 2, 8};
  const absl::StatusOr<StudyResult> one = RunStudy(c, FakeRun, {.jobs = 1});
  std::ostringstream progress;
  const absl::StatusOr<StudyResult> two = RunStudy(c, FakeRun, {.jobs = 2, .progress = &progress});
  REQUIRE(one.ok());
  REQUIRE(two.ok());
  REQUIRE(one->runs.size() == c.policies.size() * 3 * 10 * 3);
  REQUIRE(two->runs.size() == one->runs.size());
  for (size_t i = 0; i < one->runs.size(); ++i) {
    const RunRecord& a = one->runs[i];
    const RunRecord& b = two->runs[i];
    CHECK(a.policy == c.policies[i / 90]);
    CHECK(a.gateways == c.gateway_counts[(i / 30) % 3]);
    CHECK(a.offered_qps == c.loads[(i / 3) % 10]);
    CHECK(a.seed == c.seeds[i % 3]);
    CHECK(a.study == "primary");
    CHECK((a.policy == b.policy && a.gateways == b.gateways && a.offered_qps == b.offered_qps &&
           a.seed == b.seed));
    CHECK(a.ttft_p99_s == FakeRun({.study = &c,
                                   .policy = a.policy,
                                   .gateways = a.gateways,
                                   .offered_qps = a.offered_qps,
                                   .seed = a.seed})
                              ->ttft_p99_s);
    CHECK(a.ttft_p99_s == b.ttft_p99_s);
  }
  const std::string n = std::to_string(one->runs.size());
  const std::string last = "[" + n + "/" + n + "]";
  CHECK(progress.str().find(last) != std::string::npos);
  CHECK(progress.str().find(" G=8 ") != std::string::npos);
  CHECK(two->simulated_requests == one->simulated_requests);
}

TEST_CASE("a failing run fails the sweep, naming the run", "[study]") {
  StudyConfig c = *FindStudy("ablation");
  auto run = [](const RunSpec& spec) -> absl::StatusOr<RunRecord> {
    if (spec.policy == "replication" && spec.gateways == 4 && spec.offered_qps == 240) {
      return absl::InternalError("boom");
    }
    return FakeRun(spec);
  };
  for (unsigned jobs : {1u, 2u}) {
    const absl::StatusOr<StudyResult> r = RunStudy(c, run, {.jobs = jobs});
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message() ==
          "study ablation, policy replication, G = 4, 240 QPS, seed 2: boom");
  }
}

TEST_CASE("a study that does not validate runs nothing", "[study]") {
  StudyConfig c = *FindStudy("primary");
  c.loads = {};
  int runs = 0;
  const auto count = [&runs](const RunSpec& spec) {
    ++runs;
    return FakeRun(spec);
  };
  CHECK(absl::IsInvalidArgument(RunStudy(c, count, {.jobs = 2}).status()));
  CHECK(runs == 0);
}

TEST_CASE("the drift study's result carries its churn; every study its ceiling inputs", "[study]") {
  StudyConfig c = *FindStudy("drift");
  c.policies = {"fresh"};
  const absl::StatusOr<StudyResult> drift = RunStudy(c, FakeRun, {.jobs = 1});
  REQUIRE(drift.ok());
  CHECK(drift->has_drift);
  CHECK(drift->drift.transitions.size() == c.drift.intervals - 1);
  CHECK(drift->ceiling.measured);
  CHECK(drift->ceiling.mean_prompt_tokens > 0);
  StudyConfig p = *FindStudy("primary");
  p.policies = {"flat-lb"};
  const absl::StatusOr<StudyResult> primary = RunStudy(p, FakeRun, {.jobs = 1});
  REQUIRE(primary.ok());
  CHECK_FALSE(primary->has_drift);
  CHECK(primary->ceiling.reuse > 0);
}

}  // namespace
}  // namespace cacheroute::sim::study
