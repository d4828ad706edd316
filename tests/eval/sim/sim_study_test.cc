// The study layer (tools/eval/sim/study/study.h, fleet_runner.h): the built-in studies, study
// files, flag lists, the drift walk and churn, the whale injection, the trace-driven study (on a
// small trace written here), and that a sweep's result does not depend on the number of threads,
// with a fake run function and with the real fleet.
#include <cmath>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "catch2/catch.hpp"
#include "tests/support/temp_dir.h"
#include "tools/eval/sim/study/capacity.h"
#include "tools/eval/sim/study/fleet_runner.h"
#include "tools/eval/sim/study/study.h"

namespace cacheroute::sim::study {
namespace {

TEST_CASE("the built-in studies are valid and follow the paper", "[study]") {
  for (const std::string& name : StudyNames()) {
    INFO(name);
    absl::StatusOr<StudyConfig> c = FindStudy(name);
    REQUIRE(c.ok());
    CHECK(c->name == name);
    if (name == "trace") c->trace.path = "given-on-the-command-line.jsonl";
    CHECK(ValidateStudy(*c).ok());
  }
  const StudyConfig primary = *FindStudy("primary");
  CHECK(primary.policies == std::vector<std::string>{"flat-lb", "sticky", "chwbl", "dualmap",
                                                     "preble", "dynamo-kv", "llm-d", "cacheroute",
                                                     "cacheroute-paper", "cacheroute-replan-10s",
                                                     "cacheroute-sticky-lpt"});
  CHECK_FALSE(primary.trace.enabled);
  // One plan, held for the run (the paper's tables come from fixed tables; docs/simulator.md).
  CHECK(primary.fleet.max_plans == 1);
  CHECK(primary.fleet.control_interval_s < primary.fleet.warmup_s);
  CHECK(primary.profile == "llama-70b-fp8-tp2-h100");
  CHECK(primary.destinations == 30);
  CHECK(primary.workload.top_k == 128);
  CHECK(primary.loads == Ladder70B());
  const StudyConfig ablation = *FindStudy("ablation");
  CHECK(ablation.profile == "llama-8b-h100");
  CHECK(ablation.loads == Ladder8B());
  CHECK(ablation.policies == std::vector<std::string>{"flat", "affinity", "replication", "lpt",
                                                      "dynamo-kv", "llm-d", "cacheroute"});
  CHECK(ablation.whales.count > 0);
  CHECK(FindStudy("negative")->policies ==
        std::vector<std::string>{"flat-lb", "dynamo-kv", "llm-d", "cacheroute", "cacheroute-paper",
                                 "cacheroute-gated", "cacheroute-paper-gated"});
  const StudyConfig drift = *FindStudy("drift");
  CHECK(drift.drift.enabled);
  CHECK(drift.drift.intervals == 6);
  CHECK(drift.drift.sigma == 0.3);
  CHECK_FALSE(FindStudy("nope").ok());
}

TEST_CASE("validation names the field and the value", "[study]") {
  StudyConfig c = *FindStudy("primary");
  c.loads = {60, 30};
  absl::Status s = ValidateStudy(c);
  CHECK(absl::IsInvalidArgument(s));
  CHECK(s.message() == "loads must be strictly ascending, got 60,30");
  c = *FindStudy("primary");
  c.policies = {"flat-lb", "roundrobin"};
  CHECK(std::string(ValidateStudy(c).message()).find("\"roundrobin\"") != std::string::npos);
  c.policies = {"cacheroute", "cacheroute-no-plan"};  // every label the runner maps is accepted
  CHECK(ValidateStudy(c).ok());
  c = *FindStudy("primary");
  c.seeds = {2, 2};
  CHECK(std::string(ValidateStudy(c).message()).find("seeds must be distinct") == 0);
}

TEST_CASE("a study file starts from a base and overrides fields", "[study]") {
  absl::StatusOr<StudyConfig> c = ParseStudyYaml(R"(
base: primary
name: small
policies: [flat-lb, cacheroute]
loads: [30, 60]
seeds: [7]
duration_s: 20
workload: {top_k: 64, arrival: poisson}
fleet: {control_interval_s: 5, queue_cap: 100, memory_short: 0.5}
)",
                                                 "small.yaml");
  REQUIRE(c.ok());
  CHECK(c->name == "small");
  CHECK(c->profile == "llama-70b-fp8-tp2-h100");  // from the base
  CHECK(c->policies == std::vector<std::string>{"flat-lb", "cacheroute"});
  CHECK(c->loads == std::vector<double>{30, 60});
  CHECK(c->seeds == std::vector<uint64_t>{7});
  CHECK(c->duration_s == 20);
  CHECK(c->workload.top_k == 64);
  CHECK(c->workload.arrivals.process == workload::ArrivalProcess::kPoisson);
  CHECK(c->fleet.control_interval_s == 5);
  CHECK(c->fleet.queue_cap == 100);
  CHECK(c->fleet.memory_short == 0.5);
  CHECK(MakeFleetConfig(*c, "cacheroute", 30, 7)->dispatch.memory_short == 0.5);
  absl::StatusOr<StudyConfig> negative =
      ParseStudyYaml("base: primary\nfleet: {memory_short: -1}\n", "f.yaml");
  REQUIRE_FALSE(negative.ok());
  CHECK(negative.status().message() ==
        "f.yaml: fleet.memory_short must be finite and >= 0, got -1");

  absl::StatusOr<StudyConfig> unknown =
      ParseStudyYaml("base: primary\nfleet: {qcap: 3}\n", "f.yaml");
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.status().message() == "f.yaml: fleet.qcap: unknown field");
  absl::StatusOr<StudyConfig> bad = ParseStudyYaml("base: primary\nduration_s: soon\n", "f.yaml");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() == "f.yaml: duration_s: not a valid value: \"soon\"");
  absl::StatusOr<StudyConfig> base = ParseStudyYaml("base: tertiary\n", "f.yaml");
  REQUIRE_FALSE(base.ok());
  CHECK(std::string(base.status().message()).find("\"tertiary\"") != std::string::npos);
  CHECK_FALSE(ParseStudyYaml("[1, 2]", "f.yaml").ok());
}

TEST_CASE("a trace-driven study file may leave the trace to the command line", "[study]") {
  absl::StatusOr<StudyConfig> c = ParseStudyYaml("base: trace\nname: replan\n", "t.yaml");
  REQUIRE(c.ok());
  CHECK(c->trace.enabled);
  CHECK(c->trace.path.empty());
  // Until --trace (or trace: {path: …}) gives one, the study cannot run, and says why.
  CHECK(std::string(ValidateStudy(*c).message()).find("trace.path") == 0);
  c->trace.path = "conversation_trace.jsonl";
  CHECK(ValidateStudy(*c).ok());
  // The rest of the file is still checked.
  absl::StatusOr<StudyConfig> bad = ParseStudyYaml("base: trace\nloads: [-1]\n", "t.yaml");
  CHECK_FALSE(bad.ok());
}

TEST_CASE("flag lists name the flag and the bad item", "[study]") {
  CHECK(*ParseNumberList("30, 60,100", "--loads") == std::vector<double>{30, 60, 100});
  CHECK(*ParseSeedList("2,3,4", "--seeds") == std::vector<uint64_t>{2, 3, 4});
  absl::StatusOr<std::vector<uint64_t>> seeds = ParseSeedList("1,x", "--seeds");
  REQUIRE_FALSE(seeds.ok());
  CHECK(seeds.status().message() == "--seeds: bad seed \"x\" in \"1,x\"");
  CHECK_FALSE(ParseNumberList("30,,60", "--loads").ok());
  CHECK_FALSE(ParseNumberList("nan", "--loads").ok());
}

// A fake run: metrics are a pure function of the spec.
absl::StatusOr<RunRecord> FakeRun(const RunSpec& spec) {
  RunRecord r;
  const double policy = static_cast<double>(spec.policy.size());
  r.ttft_p99_s = spec.offered_qps / (10 * policy) + 0.01 * spec.seed;
  r.kv_hit = 0.5 + 0.01 * policy;
  r.requests = static_cast<uint64_t>(spec.offered_qps * 10);
  r.simulated_requests = r.requests;
  return r;
}

TEST_CASE("a sweep is ordered by (policy, load, seed) whatever the thread count", "[study]") {
  StudyConfig c = *FindStudy("primary");
  c.seeds = {4, 2, 3};  // as listed, not sorted
  const absl::StatusOr<StudyResult> one = RunStudy(c, FakeRun, {.jobs = 1});
  std::ostringstream progress;
  const absl::StatusOr<StudyResult> two = RunStudy(c, FakeRun, {.jobs = 2, .progress = &progress});
  REQUIRE(one.ok());
  REQUIRE(two.ok());
  REQUIRE(one->runs.size() == c.policies.size() * 10 * 3);
  REQUIRE(two->runs.size() == one->runs.size());
  for (size_t i = 0; i < one->runs.size(); ++i) {
    const RunRecord& a = one->runs[i];
    const RunRecord& b = two->runs[i];
    CHECK(a.policy == c.policies[i / 30]);
    CHECK(a.offered_qps == c.loads[(i / 3) % 10]);
    CHECK(a.seed == c.seeds[i % 3]);
    CHECK(a.study == "primary");
    CHECK((a.policy == b.policy && a.offered_qps == b.offered_qps && a.seed == b.seed));
    CHECK(a.ttft_p99_s == b.ttft_p99_s);
  }
  const std::string n = std::to_string(one->runs.size());
  const std::string last = "[" + n + "/" + n + "]";
  CHECK(progress.str().find(last) != std::string::npos);
  CHECK(two->simulated_requests == one->simulated_requests);
}

TEST_CASE("a failing run fails the sweep, naming the run", "[study]") {
  StudyConfig c = *FindStudy("ablation");
  auto run = [](const RunSpec& spec) -> absl::StatusOr<RunRecord> {
    if (spec.policy == "replication" && spec.offered_qps == 240) {
      return absl::InternalError("boom");
    }
    return FakeRun(spec);
  };
  for (unsigned jobs : {1u, 2u}) {
    const absl::StatusOr<StudyResult> r = RunStudy(c, run, {.jobs = jobs});
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().message() == "study ablation, policy replication, 240 QPS, seed 2: boom");
  }
}

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

TEST_CASE("the real fleet: the same seed gives the same result on 1 or 2 threads", "[study]") {
  StudyConfig c = *FindStudy("primary");
  c.policies = {"flat-lb", "cacheroute"};
  c.loads = {60};
  c.seeds = {2, 3};
  c.duration_s = 20;
  c.fleet.warmup_s = 10;
  c.workload.warmup_s = 0;
  const absl::StatusOr<StudyResult> one = RunStudy(c, MakeFleetRunner(), {.jobs = 1});
  const absl::StatusOr<StudyResult> two = RunStudy(c, MakeFleetRunner(), {.jobs = 2});
  REQUIRE(one.ok());
  REQUIRE(two.ok());
  REQUIRE(one->runs.size() == 4);
  for (size_t i = 0; i < 4; ++i) {
    const RunRecord& a = one->runs[i];
    const RunRecord& b = two->runs[i];
    CHECK(a.requests > 0);
    CHECK(a.requests == b.requests);
    CHECK(a.completed == b.completed);
    CHECK(a.ttft_p99_s == b.ttft_p99_s);
    CHECK(a.e2e_p99_s == b.e2e_p99_s);
    CHECK(a.kv_hit == b.kv_hit);
    CHECK(a.imbalance == b.imbalance);
  }
  CHECK(one->runs[0].ttft_p99_s != one->runs[1].ttft_p99_s);  // seeds differ
}

TEST_CASE("policy labels map onto the fleet", "[study]") {
  const StudyConfig c = *FindStudy("ablation");
  CHECK(MakeFleetConfig(c, "flat", 60, 2)->policy == "flat-lb");
  CHECK(MakeFleetConfig(c, "affinity", 60, 2)->ablation == PlanAblation::kAffinityOnly);
  CHECK(MakeFleetConfig(c, "replication", 60, 2)->ablation == PlanAblation::kReplication);
  CHECK(MakeFleetConfig(c, "lpt", 60, 2)->ablation == PlanAblation::kFull);
  const absl::StatusOr<FleetConfig> no_plan = MakeFleetConfig(c, "cacheroute-no-plan", 60, 2);
  REQUIRE(no_plan.ok());
  CHECK(no_plan->policy == "cacheroute");
  CHECK(no_plan->ablation == PlanAblation::kNone);
  CHECK(MakeFleetConfig(c, "preble", 60, 2)->policy == "preble");
  CHECK_FALSE(MakeFleetConfig(c, "stale", 60, 2).ok());  // not a drift study
  const StudyConfig d = *FindStudy("drift");
  CHECK(MakeFleetConfig(d, "stale", 160, 2)->control_interval_s == 50);
  CHECK(MakeFleetConfig(d, "fresh", 160, 2)->control_interval_s == d.fleet.control_interval_s);
  const absl::StatusOr<FleetConfig> held = MakeFleetConfig(d, "held", 160, 2);
  REQUIRE(held.ok());
  CHECK(held->max_plans == 1);
  CHECK(held->control_interval_s == d.fleet.warmup_s);
  CHECK_FALSE(MakeFleetConfig(c, "held", 60, 2).ok());  // not a drift study
  const StudyConfig p = *FindStudy("primary");
  CHECK(MakeFleetConfig(p, "cacheroute", 100, 2)->max_plans == 1);
  const absl::StatusOr<FleetConfig> replan = MakeFleetConfig(p, "cacheroute-replan-10s", 100, 2);
  CHECK(replan->control_interval_s == 10);
  CHECK(replan->max_plans == 0);
  CHECK(replan->stickiness == 0);
  const absl::StatusOr<FleetConfig> sticky = MakeFleetConfig(p, "cacheroute-sticky-lpt", 100, 2);
  CHECK(sticky->control_interval_s == 10);
  CHECK(sticky->stickiness > 0);
  CHECK(MakeFleetConfig(d, "fresh-sticky", 160, 2)->stickiness == sticky->stickiness);
}

TEST_CASE("topk256 is the primary study at top-K 256, its ladder past the primary's", "[study]") {
  const absl::StatusOr<StudyConfig> c = FindStudy("topk256");
  REQUIRE(c.ok());
  CHECK(ValidateStudy(*c).ok());
  const StudyConfig primary = *FindStudy("primary");
  CHECK(c->workload.top_k == 256);
  CHECK(c->profile == primary.profile);
  CHECK(c->destinations == primary.destinations);
  CHECK(c->fleet.max_plans == primary.fleet.max_plans);
  CHECK(c->policies == std::vector<std::string>{"flat-lb", "sticky", "chwbl", "dualmap", "preble",
                                                "dynamo-kv", "llm-d", "cacheroute",
                                                "cacheroute-paper"});
  CHECK(c->loads.back() > Ladder70B().back());
  CHECK(c->primary_slo_s == kPrimarySloS);
  absl::StatusOr<StudyConfig> file = ParseStudyYaml("base: topk256\nseeds: [5]\n", "t.yaml");
  REQUIRE(file.ok());
  CHECK(file->workload.top_k == 256);
}

// A small Mooncake-format trace: `n` requests `gap_ms` apart from `start_ms`, request i in
// conversation i % 5 (its first two blocks: the shared block 0 and one of the conversation's),
// 1,100 prompt tokens in three 512-token blocks.
std::string SmallTrace(int n, int gap_ms, int start_ms = 0) {
  std::string out;
  for (int i = 0; i < n; ++i) {
    absl::StrAppendFormat(&out,
                          "{\"timestamp\": %d, \"input_length\": 1100, \"output_length\": 20, "
                          "\"hash_ids\": [0, %d, %d]}\n",
                          start_ms + i * gap_ms, 1 + i % 5, 100 + i);
  }
  return out;
}

TEST_CASE("the trace study needs a trace and names the field when it is missing or bad",
          "[study][trace]") {
  testing::TempDir dir("sim_study_test");
  StudyConfig c = *FindStudy("trace");
  CHECK(c.trace.enabled);
  CHECK(c.trace.key_blocks == 2);
  CHECK(c.destinations == 8);
  CHECK(c.profile == "llama-70b-fp8-tp2-h100");
  CHECK(c.policies == std::vector<std::string>{"flat-lb", "sticky", "chwbl", "dualmap", "preble",
                                               "dynamo-kv", "llm-d", "cacheroute",
                                               "cacheroute-paper"});
  // A plan exists before the measured window.
  CHECK(c.fleet.control_interval_s < c.fleet.warmup_s);

  absl::Status s = ValidateStudy(c);
  CHECK(absl::IsInvalidArgument(s));
  CHECK(std::string(s.message()).starts_with("trace.path must be a Mooncake-format trace file"));
  CHECK(std::string(s.message()).ends_with("got \"\""));

  c.trace.path = dir.File("absent.jsonl");
  CHECK(ValidateStudy(c).ok());  // validation does not read the file; ReadStudyTrace does
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
  c.trace.key_blocks = 0;
  CHECK(ValidateStudy(c).message() == "trace.key_blocks must be >= 1, got 0");
  c.trace.key_blocks = 2;
  c.drift.enabled = true;
  CHECK(std::string(ValidateStudy(c).message()).starts_with("drift.enabled must be false"));
}

TEST_CASE("a trace is rescaled to each offered load, the same for every seed", "[study][trace]") {
  testing::TempDir dir("sim_study_test");
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
  CHECK(std::string(s.message()).starts_with("fleet.warmup_s must be shorter than the trace"));

  c.trace.key_blocks = 3;
  c.fleet.warmup_s = 0;
  absl::StatusOr<workload::Workload> three = BuildRunWorkload(c, 10, 2);
  REQUIRE(three.ok());
  CHECK(three->requests[7].key == "h0-3-107");
}

TEST_CASE("a study file gives the trace and its key blocks", "[study][trace]") {
  testing::TempDir dir("sim_study_test");
  const std::string path = dir.Write("t.jsonl", SmallTrace(20, 500));
  absl::StatusOr<StudyConfig> c = ParseStudyYaml(
      absl::StrFormat("base: trace\ntrace: {path: %s, key_blocks: 3}\nloads: [1, 2]\n", path),
      "t.yaml");
  REQUIRE(c.ok());
  CHECK(c->trace.enabled);
  CHECK(c->trace.path == path);
  CHECK(c->trace.key_blocks == 3);
  // A trace field makes any study trace-driven.
  absl::StatusOr<StudyConfig> primary =
      ParseStudyYaml(absl::StrFormat("base: primary\ntrace: {path: %s}\n", path), "p.yaml");
  REQUIRE(primary.ok());
  CHECK(primary->trace.enabled);
  CHECK(primary->trace.key_blocks == 2);

  absl::StatusOr<StudyConfig> unknown =
      ParseStudyYaml("base: trace\ntrace: {file: x.jsonl}\n", "t.yaml");
  REQUIRE_FALSE(unknown.ok());
  CHECK(unknown.status().message() == "t.yaml: trace.file: unknown field");
  absl::StatusOr<StudyConfig> bad =
      ParseStudyYaml("base: trace\ntrace: {path: x.jsonl, key_blocks: two}\n", "t.yaml");
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message() == "t.yaml: trace.key_blocks: not a valid value: \"two\"");
}

TEST_CASE("the real fleet replays a trace: every seed sees the same requests", "[study][trace]") {
  testing::TempDir dir("sim_study_test");
  StudyConfig c = *FindStudy("trace");
  c.trace.path = dir.Write("t.jsonl", SmallTrace(300, 200));  // 5 QPS over 60 s as written
  c.policies = {"flat-lb", "sticky", "cacheroute"};
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

TEST_CASE("hetero-prefix: the primary setup with heavy-tailed prefixes and small KV caches",
          "[study]") {
  const StudyConfig c = *FindStudy("hetero-prefix");
  const StudyConfig primary = *FindStudy("primary");
  CHECK(c.workload.top_k == primary.workload.top_k);
  CHECK(c.workload.rate_sigma == primary.workload.rate_sigma);
  CHECK(c.workload.context_sigma > 0);
  CHECK(c.workload.context_min_tokens == 200);
  CHECK(c.workload.context_max_tokens == 50000);
  CHECK(c.fleet.kv_blocks == 4000);
  CHECK(c.fleet.max_plans == primary.fleet.max_plans);
  CHECK(std::find(c.policies.begin(), c.policies.end(), "cacheroute-bytes") != c.policies.end());
  // cacheroute-bytes is cacheroute with byte-aware planning; fleet.kv_budget_share gives it to
  // every CacheRoute variant but the paper's.
  const FleetConfig bytes = *MakeFleetConfig(c, "cacheroute-bytes", 120, 2);
  CHECK(bytes.plan_kv_budget_share == kKvBudgetShare);
  CHECK(bytes.profile.kv_blocks == 4000);
  CHECK(MakeFleetConfig(c, "cacheroute", 120, 2)->plan_kv_budget_share == 0);
  StudyConfig shared = *FindStudy("drift");
  shared.fleet.kv_budget_share = 0.25;
  CHECK(MakeFleetConfig(shared, "fresh", 160, 2)->plan_kv_budget_share == 0.25);
  CHECK(MakeFleetConfig(shared, "lpt", 160, 2)->plan_kv_budget_share == 0);
  absl::StatusOr<StudyConfig> file = ParseStudyYaml(
      "base: primary\nfleet: {kv_blocks: 5000, kv_budget_share: 0.75}\n"
      "workload: {context_sigma: 0.5, context_min_tokens: 100, context_max_tokens: 900}\n",
      "t.yaml");
  REQUIRE(file.ok());
  CHECK(file->fleet.kv_blocks == 5000);
  CHECK(file->fleet.kv_budget_share == 0.75);
  CHECK(file->workload.context_max_tokens == 900);
  CHECK_THAT(std::string(ParseStudyYaml("base: primary\nfleet: {kv_budget_share: 2}\n", "t.yaml")
                             .status()
                             .message()),
             Catch::Contains("fleet.kv_budget_share"));
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
  w.requests.push_back({.arrival_s = 0, .key = "a", .input_length = 40, .output_length = 10,
                        .hash_ids = {1, 2, 3}});
  // Shares block 1 only (the chain breaks at block 2): 16 of 48 tokens reused.
  w.requests.push_back({.arrival_s = 1, .key = "a", .input_length = 48, .output_length = 30,
                        .hash_ids = {1, 7, 8}});
  // The whole prompt of the first request again: its two full blocks, 32 tokens.
  w.requests.push_back({.arrival_s = 2, .key = "b", .input_length = 40, .output_length = 20,
                        .hash_ids = {1, 2, 3}});
  const WorkloadReuse r = MeasureReuse(w);
  CHECK(r.mean_prompt_tokens == Approx(128.0 / 3));
  CHECK(r.mean_output_tokens == Approx(20));
  CHECK(r.reuse == Approx((16.0 + 32.0) / 128.0));
  CHECK(MeasureReuse(workload::Workload{}).reuse == 0);
}

}  // namespace
}  // namespace cacheroute::sim::study
