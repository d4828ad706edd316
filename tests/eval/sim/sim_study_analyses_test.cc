// The study's analyses (tools/eval/sim/study/analyses.h): the drift churn, the reuse and budget
// ceilings and the throughput ceiling.
#include <vector>

#include "catch2/catch.hpp"
#include "tools/eval/sim/engine_profile.h"
#include "tools/eval/sim/study/analyses.h"
#include "tools/eval/sim/study/builtin_studies.h"

namespace cacheroute::sim::study {
namespace {

TEST_CASE("drift churn: none without drift, some with it", "[study]") {
  StudyConfig c = *FindStudy("drift");
  c.drift.sigma = 0;
  absl::StatusOr<DriftResult> still = ComputeDriftChurn(c, 160, 2);
  REQUIRE(still.ok());
  REQUIRE(still->transitions.size() == 5);
  CHECK(still->mean_cache_churn == 0);
  CHECK(still->transitions[0].jaccard_churn == 0);
  CHECK(still->transitions[0].stale_imbalance == Approx(still->transitions[0].fresh_imbalance));
  c.drift.sigma = 0.3;
  absl::StatusOr<DriftResult> moving = ComputeDriftChurn(c, 160, 2);
  REQUIRE(moving.ok());
  CHECK(moving->mean_cache_churn > 0.1);
  CHECK(moving->mean_cache_churn <= 1);
  for (const DriftTransition& t : moving->transitions) {
    CHECK(t.count_churn <= t.cache_churn);
    CHECK(t.stale_imbalance >= 1);
  }
}

TEST_CASE("MeasureBudgetCeiling packs keys' prefixes by reuse per token") {
  workload::Workload w;
  w.block_size = 16;
  // Key a: a 32-token prefix, requested three times (64 tokens reused in all). Key b: a 16-token
  // prefix, requested twice (16 reused).
  for (double t : {0.0, 1.0, 2.0}) {
    w.requests.push_back({.arrival_s = t,
                          .key = "a",
                          .input_length = 48,
                          .output_length = 1,
                          .hash_ids = {1, 2, static_cast<uint64_t>(10 + t)}});
  }
  for (double t : {3.0, 4.0}) {
    w.requests.push_back({.arrival_s = t,
                          .key = "b",
                          .input_length = 32,
                          .output_length = 1,
                          .hash_ids = {5, static_cast<uint64_t>(20 + t)}});
  }
  const double prompt = 3 * 48 + 2 * 32;
  // Unbounded: every reused token counts, as MeasureReuse has it.
  CHECK(MeasureBudgetCeiling(w, 1e9).reuse == Approx(MeasureReuse(w).reuse));
  CHECK(MeasureBudgetCeiling(w, 1e9).prefix_tokens == 48);
  // 32 tokens of budget: a (2 reused tokens per budget token) before b (1 per token).
  const BudgetCeiling a_only = MeasureBudgetCeiling(w, 32);
  CHECK(a_only.keys_in == 1);
  CHECK(a_only.reuse == Approx(64 / prompt));
  // 40 tokens: a whole and half of b.
  CHECK(MeasureBudgetCeiling(w, 40).reuse == Approx((64 + 8) / prompt));
  CHECK(MeasureBudgetCeiling(w, 0).reuse == 0);
}

TEST_CASE("MeasureReuse: the reuse ceiling counts only full blocks an earlier request published") {
  workload::Workload w;
  w.block_size = 16;
  // 40 tokens: two full blocks (1, 2) and a partial third, which is never counted.
  w.requests.push_back(
      {.arrival_s = 0, .key = "a", .input_length = 40, .output_length = 10, .hash_ids = {1, 2, 3}});
  // Shares block 1 only (the chain breaks at block 2): 16 of 48 tokens reused.
  w.requests.push_back(
      {.arrival_s = 1, .key = "a", .input_length = 48, .output_length = 30, .hash_ids = {1, 7, 8}});
  // The whole prompt of the first request again: its two full blocks, 32 tokens.
  w.requests.push_back(
      {.arrival_s = 2, .key = "b", .input_length = 40, .output_length = 20, .hash_ids = {1, 2, 3}});
  const WorkloadReuse r = MeasureReuse(w);
  CHECK(r.mean_prompt_tokens == Approx(128.0 / 3));
  CHECK(r.mean_output_tokens == Approx(20));
  CHECK(r.reuse == Approx((16.0 + 32.0) / 128.0));
  CHECK(MeasureReuse(workload::Workload{}).reuse == 0);
}

TEST_CASE("the throughput ceiling: R saturated destinations at the workload's lengths and hit") {
  const StudyConfig c = *FindStudy("primary");
  CHECK(absl::IsFailedPrecondition(CeilingQps(c, {}, 0.5).status()));
  const CeilingInputs inputs{
      .measured = true, .mean_prompt_tokens = 1200, .mean_output_tokens = 110, .reuse = 0.6};
  const EngineProfile profile = *FindEngineProfile(c.profile);
  CHECK(*CeilingQps(c, inputs, 0.5) == Approx(30 * SaturationQps(profile, 1200, 600, 110)));
  CHECK(*CeilingQps(c, inputs, 0.6) > *CeilingQps(c, inputs, 0.5));
  CHECK(*CeilingQps(c, inputs, 2) == *CeilingQps(c, inputs, 1));  // clamped
}

}  // namespace
}  // namespace cacheroute::sim::study
