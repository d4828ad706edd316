// Study files (tools/eval/sim/study/study_file.h): a base study and overrides, every key read as
// today's files spell it, and bad files refused naming the file, the field and the value.
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "catch2/catch.hpp"
#include "tests/eval/sim/small_trace.h"
#include "tests/support/temp_dir.h"
#include "tools/eval/sim/study/study_file.h"
#include "tools/eval/sim/study/validation.h"

namespace cacheroute::sim::study {
namespace {

std::string Error(const std::string& yaml) {
  absl::StatusOr<StudyConfig> c = ParseStudyYaml(yaml, "f.yaml");
  REQUIRE_FALSE(c.ok());
  CHECK(absl::IsInvalidArgument(c.status()));
  return std::string(c.status().message());
}

TEST_CASE("a study file starts from a base and overrides fields", "[study]") {
  absl::StatusOr<StudyConfig> c = ParseStudyYaml(R"(
base: primary
name: small
policies: [flat-lb, cacheroute]
loads: [30, 60]
seeds: [7]
duration_s: 20
workload: {top_k: 64, arrival: poisson, arrival_cv: 1.5}
fleet: {control_interval_s: 5, queue_cap: 100, memory_short: 0.5, measure_turnover: false}
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
  CHECK(c->workload.arrivals.cv == 1.5);
  CHECK(c->fleet.control_interval_s == 5);
  CHECK(c->fleet.queue_cap == 100);
  CHECK(c->fleet.dispatch.memory_short == 0.5);
  CHECK_FALSE(c->fleet.measure_turnover);
  // Keys not given keep the base's values.
  CHECK(c->fleet.dispatch.decode_stall == dataplane::DispatchOptions{}.decode_stall);
  CHECK(c->fleet.max_plans == 1);

  absl::StatusOr<StudyConfig> topk = ParseStudyYaml("base: topk256\nseeds: [5]\n", "t.yaml");
  REQUIRE(topk.ok());
  CHECK(topk->workload.top_k == 256);
  CHECK(topk->seeds == std::vector<uint64_t>{5});
}

TEST_CASE("every fleet key reaches its knob", "[study]") {
  absl::StatusOr<StudyConfig> c = ParseStudyYaml(R"(
base: hetero-prefix
fleet:
  gateways: 4
  rate_smoothing_s: 3
  q_cap: 9
  slots_per_destination: 32
  warmup_s: 30
  timeout_s: 20
  max_plans: 0
  stickiness: 0.2
  kv_blocks: 5000
  kv_event_delay_s: 0.2
  kv_budget_share: 0.75
  decode_stall: 0.1
  queue_stall: 2
  queue_wait: 0.5
  all_candidates_up_to: 30
  prefix_memory_log2: 0
  plan_follows_cache: false
  dynamo_overlap_score_weight: 2
  dynamo_temperature: 0.1
workload: {context_sigma: 0.5, context_min_tokens: 100, context_max_tokens: 900}
whales: {count: 2, share: 0.1}
)",
                                                 "t.yaml");
  REQUIRE(c.ok());
  const FleetKnobs& f = c->fleet;
  CHECK(c->gateway_counts == std::vector<uint32_t>{4});
  CHECK(f.rate_smoothing_s == 3);
  CHECK(f.q_cap == 9);
  CHECK(f.slots_per_destination == 32);
  CHECK(f.warmup_s == 30);
  CHECK(f.timeout_s == 20);
  CHECK(f.max_plans == 0);
  CHECK(f.stickiness == 0.2);
  CHECK(f.kv_blocks == 5000);
  CHECK(f.kv_event_delay_s == 0.2);
  CHECK(f.kv_budget_share == 0.75);
  CHECK(f.dispatch.decode_stall == 0.1);
  CHECK(f.dispatch.queue_stall == 2);
  CHECK(f.dispatch.queue_wait == 0.5);
  CHECK(f.dispatch.all_candidates_up_to == 30);
  CHECK(f.dispatch.prefix_memory_log2 == 0);
  CHECK_FALSE(f.plan_follows_cache);
  CHECK(f.parameters.dynamo.overlap_score_weight == 2);
  CHECK(f.parameters.dynamo.temperature == 0.1);
  CHECK(c->workload.context_max_tokens == 900);
  CHECK(c->whales.count == 2);
  CHECK(c->whales.share == 0.1);
}

TEST_CASE("gateway counts: a list, or the scalar fleet.gateways, not both", "[study]") {
  auto counts = [](const std::string& yaml) {
    absl::StatusOr<StudyConfig> c = ParseStudyYaml(yaml, "g.yaml");
    REQUIRE(c.ok());
    return c->gateway_counts;
  };
  using Counts = std::vector<uint32_t>;
  CHECK(counts("base: primary\n") == Counts{1, 4});  // every built-in study's
  CHECK(counts("base: primary\ngateway_counts: [1, 2, 4, 8]\n") == Counts{1, 2, 4, 8});
  CHECK(counts("base: primary\nfleet: {gateways: 3, queue_cap: 9}\n") == Counts{3});
  CHECK(counts("base: primary\ngateway_counts: [2]\nfleet: {queue_cap: 9}\n") == Counts{2});
  CHECK(Error("base: primary\ngateway_counts: [1, 4]\nfleet: {gateways: 2}\n") ==
        "f.yaml: fleet.gateways: give it or gateway_counts, not both (fleet.gateways: N means "
        "gateway_counts: [N]), got \"2\" beside gateway_counts");
  CHECK(Error("base: primary\ngateway_counts: [4, 1]\n") ==
        "f.yaml: gateway_counts: must be strictly ascending, got 4,1");
  CHECK(Error("base: primary\ngateway_counts: [1, 0]\n") ==
        "f.yaml: gateway_counts[1]: must be >= 1, got 0");
  CHECK(Error("base: primary\nfleet: {gateways: 0}\n") ==
        "f.yaml: gateway_counts[0]: must be >= 1, got 0");
  CHECK(Error("base: primary\ngateway_counts: []\n") ==
        "f.yaml: gateway_counts: must be non-empty, got []");
  CHECK(Error("base: primary\ngateway_counts: 4\n") ==
        "f.yaml: gateway_counts: expected a list such as [1, 2], got \"4\"");
}

TEST_CASE("bad study files name the file, the field and the value", "[study]") {
  // An unknown key, with the closest known one.
  CHECK(Error("base: primary\nfleet: {qcap: 3}\n") ==
        "f.yaml: fleet.qcap: unknown key (did you mean fleet.q_cap?)");
  CHECK(Error("base: primary\nwhale: {count: 3}\n") ==
        "f.yaml: whale: unknown key (did you mean whales?)");
  // A value of the wrong kind.
  CHECK(Error("base: primary\nduration_s: soon\n") ==
        "f.yaml: duration_s: expected a number, got \"soon\"");
  CHECK(Error("base: primary\nloads: [30, sixty]\n") ==
        "f.yaml: loads[1]: expected a number, got \"sixty\"");
  CHECK(Error("base: primary\ndestinations: -3\n") ==
        "f.yaml: destinations: must be an integer between 0 and 4294967295, got -3");
  CHECK(Error("base: primary\nfleet: {measure_turnover: maybe}\n") ==
        "f.yaml: fleet.measure_turnover: expected true or false, got \"maybe\"");
  CHECK(Error("base: primary\nworkload: {arrival: bursty}\n") ==
        "f.yaml: workload.arrival: must be poisson or gamma, got \"bursty\"");
  CHECK(Error("base: primary\nfleet: 3\n") == "f.yaml: fleet: expected a mapping, got \"3\"");
  // A value out of range (the study's validation).
  CHECK(Error("base: primary\nfleet: {memory_short: -1}\n") ==
        "f.yaml: fleet.memory_short: must be finite and >= 0, got -1");
  CHECK(Error("base: primary\nfleet: {kv_budget_share: 2}\n") ==
        "f.yaml: fleet.kv_budget_share: must be in [0, 1], got 2");
  CHECK(Error("base: primary\nfleet: {dynamo_temperature: -0.5}\n") ==
        "f.yaml: fleet.dynamo_temperature: must be finite and >= 0, got -0.5");
  // An unknown policy label, with every label the table has.
  const std::string label = Error("base: primary\npolicies: [flat-lb, roundrobin]\n");
  CHECK(label.starts_with("f.yaml: policies[1]: must be one of flat-lb, sticky, chwbl, "));
  CHECK(label.find("cacheroute-paper-gated") != std::string::npos);
  CHECK(label.find("fresh-sticky") != std::string::npos);
  CHECK(label.ends_with(", got \"roundrobin\""));
  // An unknown base.
  CHECK(Error("base: tertiary\n") ==
        "f.yaml: base: must be one of primary, ablation, negative, drift, turn-bad, topk256, "
        "hetero-prefix, trace, got \"tertiary\"");
  // Not a mapping, several documents, not YAML.
  CHECK(Error("[1, 2]") ==
        "f.yaml: the document must be a mapping of keys (e.g. \"base: primary\"), got a sequence");
  CHECK(Error("base: primary\n---\nbase: drift\n").starts_with("f.yaml: expected one YAML"));
  CHECK(Error("base: [primary\n").starts_with("f.yaml: line "));
  CHECK(Error("base: primary\nname: a\nname: b\n") == "f.yaml: name: given more than once");
}

TEST_CASE("a file on disk: its path leads every error", "[study]") {
  testing::TempDir dir("sim_study_file_test");
  const std::string good = dir.Write("good.yaml", "base: negative\nname: neg2\nseeds: [9]\n");
  absl::StatusOr<StudyConfig> c = LoadStudyFile(good);
  REQUIRE(c.ok());
  CHECK(c->name == "neg2");
  CHECK(c->workload.top_k == 2000);
  const std::string bad = dir.Write("bad.yaml", "base: negative\nseed: [9]\n");
  CHECK(LoadStudyFile(bad).status().message() == bad + ": seed: unknown key (did you mean seeds?)");
  const absl::Status missing = LoadStudyFile(dir.File("absent.yaml")).status();
  CHECK(absl::IsInvalidArgument(missing));
  CHECK(std::string(missing.message())
            .starts_with("--config: cannot open \"" + dir.File("absent.yaml") + "\""));
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
  CHECK(Error("base: trace\nloads: [-1]\n") == "f.yaml: loads: must be finite and > 0, got -1");
}

TEST_CASE("a study file gives the trace and its key blocks", "[study][trace]") {
  testing::TempDir dir("sim_study_file_test");
  const std::string path = dir.Write("t.jsonl", testing::SmallTrace(20, 500));
  absl::StatusOr<StudyConfig> c = ParseStudyYaml(
      absl::StrFormat("base: trace\ntrace: {path: %s, key_blocks: 3}\nloads: [1, 2]\n", path),
      "t.yaml");
  REQUIRE(c.ok());
  CHECK(c->trace.enabled);
  CHECK(c->trace.path == path);
  CHECK(c->trace.key_blocks == 3);
  // A trace mapping makes any study trace-driven, unless it says otherwise.
  absl::StatusOr<StudyConfig> primary =
      ParseStudyYaml(absl::StrFormat("base: primary\ntrace: {path: %s}\n", path), "p.yaml");
  REQUIRE(primary.ok());
  CHECK(primary->trace.enabled);
  CHECK(primary->trace.key_blocks == 2);
  absl::StatusOr<StudyConfig> off =
      ParseStudyYaml("base: primary\ntrace: {enabled: false}\n", "p.yaml");
  REQUIRE(off.ok());
  CHECK_FALSE(off->trace.enabled);

  CHECK(Error("base: trace\ntrace: {file: x.jsonl}\n") ==
        "f.yaml: trace.file: unknown key; known keys: enabled, path, key_blocks");
  CHECK(Error("base: trace\ntrace: {path: x.jsonl, key_blocks: two}\n") ==
        "f.yaml: trace.key_blocks: expected an integer, got \"two\"");
}

}  // namespace
}  // namespace cacheroute::sim::study
