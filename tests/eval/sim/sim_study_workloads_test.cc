// Each run's requests (tools/eval/sim/study/workloads.h): the drift walk, whales, the regime
// change and the trace rescaled to each load.
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "catch2/catch.hpp"
#include "tests/eval/sim/small_trace.h"
#include "tests/support/temp_dir.h"
#include "tools/eval/sim/study/builtin_studies.h"
#include "tools/eval/sim/study/validation.h"
#include "tools/eval/sim/study/workloads.h"

namespace cacheroute::sim::study {
namespace {

using testing::SmallTrace;

TEST_CASE("the drift walk keeps the total rate and starts at 1", "[study]") {
  const std::vector<double> base = {5, 3, 1, 1, 0.5};
  const DriftOptions drift{.enabled = true, .intervals = 6, .sigma = 0.3};
  const auto m = DriftMultipliers(base, drift, 3);
  REQUIRE(m.size() == 6);
  for (double x : m[0]) CHECK(x == 1.0);
  for (const auto& row : m) {
    double total = 0;
    for (size_t k = 0; k < base.size(); ++k) total += base[k] * row[k];
    CHECK(total == Approx(10.5));
  }
  CHECK(m[1] != m[2]);
  CHECK(DriftMultipliers(base, drift, 3) == m);
  CHECK(DriftMultipliers(base, drift, 4) != m);
}

TEST_CASE("whales carry their share of the load and share no block", "[study]") {
  StudyConfig c = *FindStudy("ablation");
  c.duration_s = 60;
  c.fleet.warmup_s = 0;
  absl::StatusOr<workload::Workload> w = BuildRunWorkload(c, 100, 2);
  REQUIRE(w.ok());
  size_t whales = 0;
  std::set<uint64_t> whale_blocks, other_blocks;
  for (size_t i = 0; i < w->requests.size(); ++i) {
    const workload::Request& r = w->requests[i];
    if (i > 0) CHECK(r.arrival_s >= w->requests[i - 1].arrival_s);
    const bool whale = r.key.starts_with("whale-");
    whales += whale;
    (whale ? whale_blocks : other_blocks).insert(r.hash_ids.begin(), r.hash_ids.end());
  }
  const double share = static_cast<double>(whales) / w->requests.size();
  CHECK(share == Approx(c.whales.share).margin(0.08));
  size_t shared = 0;
  for (uint64_t id : whale_blocks) shared += other_blocks.contains(id);
  CHECK(shared == 0);
  absl::StatusOr<workload::Workload> again = BuildRunWorkload(c, 100, 2);
  REQUIRE(again->requests.size() == w->requests.size());
  CHECK(again->requests.back().hash_ids == w->requests.back().hash_ids);
}

TEST_CASE("a regime change switches to the other workload's keys at its time", "[study]") {
  StudyConfig c = *FindStudy("turn-bad");
  c.duration_s = 60;
  c.fleet.warmup_s = 0;
  c.regime_change.at_s = 30;
  absl::StatusOr<workload::Workload> w = BuildRunWorkload(c, 40, 2);
  REQUIRE(w.ok());
  size_t before = 0, after = 0;
  for (const workload::Request& r : w->requests) {
    const bool renamed = r.key.starts_with("regime-");
    CHECK(renamed == (r.arrival_s >= 30));
    ++(renamed ? after : before);
  }
  CHECK(before > 0);
  CHECK(after > 0);
}

TEST_CASE("the study's trace: read, or the field and the file named", "[study][trace]") {
  cacheroute::testing::TempDir dir("sim_study_workloads_test");
  StudyConfig c = *FindStudy("trace");
  c.trace.path = dir.File("absent.jsonl");
  absl::StatusOr<workload::Workload> w = ReadStudyTrace(c);
  REQUIRE_FALSE(w.ok());
  CHECK(absl::IsInvalidArgument(w.status()));
  CHECK(w.status().message() ==
        absl::StrCat("trace.path: cannot open trace \"", c.trace.path, "\""));
  CHECK(absl::IsInvalidArgument(BuildRunWorkload(c, 4, 2).status()));

  c.trace.path =
      dir.Write("bad.jsonl", SmallTrace(1, 0) + "{\"timestamp\": 5, \"input_length\": 9}\n");
  w = ReadStudyTrace(c);
  REQUIRE_FALSE(w.ok());
  CHECK(absl::IsInvalidArgument(w.status()));
  CHECK(std::string(w.status().message()).starts_with("trace.path: " + c.trace.path + " line 2"));

  c.trace.path = dir.Write("one.jsonl", SmallTrace(1, 0));
  w = ReadStudyTrace(c);
  REQUIRE_FALSE(w.ok());
  CHECK(absl::IsInvalidArgument(w.status()));
  CHECK(std::string(w.status().message()).starts_with("trace.path: "));

  c.trace.path = dir.Write("ok.jsonl", SmallTrace(10, 100));
  REQUIRE(ReadStudyTrace(c).ok());
  CHECK(ReadStudyTrace(c)->requests.size() == 10);
}

TEST_CASE("a trace is rescaled to each offered load, the same for every seed", "[study][trace]") {
  cacheroute::testing::TempDir dir("sim_study_workloads_test");
  StudyConfig c = *FindStudy("trace");
  // 200 requests over 19.9 s (10.05 QPS), starting at 5 s.
  c.trace.path = dir.Write("t.jsonl", SmallTrace(200, 100, 5000));
  c.fleet.warmup_s = 2;
  REQUIRE(ValidateStudy(c).ok());
  for (double qps : {2.0, 10.0, 40.0}) {
    INFO(qps);
    absl::StatusOr<workload::Workload> w = BuildRunWorkload(c, qps, 2);
    REQUIRE(w.ok());
    REQUIRE(w->requests.size() == 200);  // duration_s is longer than the trace: nothing cut
    CHECK(w->block_size == 512);
    CHECK(w->requests.front().arrival_s == 0);
    const double span = w->requests.back().arrival_s - w->requests.front().arrival_s;
    CHECK(200 / span == Approx(qps));
    CHECK(w->requests[7].key == "h0-3");  // the first two hash ids
    absl::StatusOr<workload::Workload> other_seed = BuildRunWorkload(c, qps, 3);
    REQUIRE(other_seed.ok());
    REQUIRE(other_seed->requests.size() == w->requests.size());
    for (size_t i = 0; i < w->requests.size(); ++i) {
      CHECK(other_seed->requests[i].arrival_s == w->requests[i].arrival_s);
    }
  }

  // Cut at warm-up + duration_s = 3.5 s: at 40 QPS request i arrives at i · 5 / 199 s.
  c.duration_s = 1.5;
  absl::StatusOr<workload::Workload> cut = BuildRunWorkload(c, 40, 2);
  REQUIRE(cut.ok());
  CHECK(cut->requests.size() == 140);  // i ≤ 139
  CHECK(cut->requests.back().arrival_s < 3.5);

  // A warm-up covering the whole trace at this load leaves nothing to measure.
  c.fleet.warmup_s = 10;
  const absl::Status s = BuildRunWorkload(c, 40, 2).status();
  CHECK(absl::IsInvalidArgument(s));
  CHECK(std::string(s.message()).starts_with("fleet.warmup_s: must be shorter than the trace"));

  c.trace.key_blocks = 3;
  c.fleet.warmup_s = 0;
  absl::StatusOr<workload::Workload> three = BuildRunWorkload(c, 10, 2);
  REQUIRE(three.ok());
  CHECK(three->requests[7].key == "h0-3-107");
}

}  // namespace
}  // namespace cacheroute::sim::study
