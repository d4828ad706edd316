// RateReporter against the real planner (PlannerServer on a loopback port, real gRPC): reports
// reach the planner's rate estimates with their cold-tail aggregate, sequences go up by one, a
// failed report is retried with the same sequence after the planner comes back, the pending queue
// is bounded, and the background thread reports on its own.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "cacheroute/dataplane/evidence_recorder.h"
#include "cacheroute/dataplane/grpc/rate_reporter.h"
#include "cacheroute/dataplane/key_id.h"
#include "support/planner_fixture.h"
#include "support/temp_dir.h"
#include "tests/support/planner_config.h"

namespace cacheroute::dataplane {
namespace {

using testing::Eventually;
using testing::InProcessPlanner;
using testing::TempDir;

service::PlannerConfig PlannerConfig(std::string state_dir = "") {
  service::PlannerConfig config = testing::LoopbackPlannerConfig({"d0", "d1"});
  // Algorithm 1 exactly: these tests pin its tables (the default adds spills and splits keys).
  config.algorithm = "cacheroute-paper";
  config.state_dir = std::move(state_dir);
  return config;
}

RateReporterOptions Options(int64_t* now_ms) {
  RateReporterOptions options;
  options.gateway_id = "gw-r";
  options.interval = std::chrono::milliseconds(10);
  options.rpc_timeout = std::chrono::milliseconds(2000);
  options.now_unix_ms = [now_ms] { return *now_ms; };
  return options;
}

TEST_CASE("a report carries the hot keys and the cold tail, and the planner plans from it") {
  InProcessPlanner planner(PlannerConfig());
  RateRecorder recorder({.max_keys = 64, .max_report_keys = 2});
  int64_t now_ms = 1'800'000'000'000;
  RateReporter reporter(planner.NewChannel(), recorder, Options(&now_ms));

  for (int i = 0; i < 3000; ++i) recorder.Record(KeyId("hot-a"));
  for (int i = 0; i < 2000; ++i) recorder.Record(KeyId("hot-b"));
  for (int i = 0; i < 40; ++i) recorder.Record(KeyId("cold-" + std::to_string(i)));
  now_ms += 10'000;
  Status s = reporter.ReportOnce();
  INFO(s.message);
  REQUIRE(s.ok);
  RateReporterStats stats = reporter.Stats();
  CHECK(stats.reports_sent == 1);
  CHECK(stats.requests_reported == 5040);
  CHECK(stats.pending == 0);
  CHECK(planner.LastSequence("gw-r") == stats.last_sequence);
  CHECK(stats.last_sequence == 1'800'000'000'000);  // starts at the wall clock in ms

  planner.Replan();
  const v1::GetStatusResponse status = planner.Status();
  CHECK(status.keys_admitted() == 2);
  // The 40 cold keys were folded into other_count, which the planner counts as cold tail.
  CHECK(status.cold_tail_rate() > 0);
  CHECK(status.total_rate() > status.cold_tail_rate());
}

TEST_CASE("a report carries the window's rollout evidence, and the planner takes it once") {
  InProcessPlanner planner(PlannerConfig());
  RateRecorder recorder({.max_keys = 64});
  EvidenceRecorder evidence;
  int64_t now_ms = 1'800'000'000'000;
  RateReporterOptions options = Options(&now_ms);
  options.evidence = &evidence;
  RateReporter reporter(planner.NewChannel(), recorder, options);

  // A split that changes mid-window keeps only the new split's evidence.
  evidence.Record(0.05, Arm::kTable, 0.1, false, 100, 50);
  for (int i = 0; i < 30; ++i) {
    recorder.Record(KeyId("k" + std::to_string(i)));
    evidence.Record(0.2, i % 3 == 0 ? Arm::kTable : Arm::kControl, 0.01 * i, i == 7, 100, 40);
  }
  evidence.Record(0.2, Arm::kControl, std::nullopt, true, 0, 0);  // nothing came back
  now_ms += 10'000;
  REQUIRE(reporter.ReportOnce().ok);
  // An evidence-only window is reported too (its requests were counted in an earlier window).
  evidence.Record(0.2, Arm::kTable, 0.5, false, 10, 10);
  now_ms += 10'000;
  REQUIRE(reporter.ReportOnce().ok);
  CHECK(reporter.Stats().reports_sent == 2);

  CHECK(planner.core().TakeEvidence(0.05).table.requests == 0);  // dropped: another split
  // Taking evidence forgets all of it, so take the 0.2 split from a fresh report pair.
  evidence.Record(0.2, Arm::kTable, 0.5, false, 10, 10);
  for (int i = 0; i < 30; ++i) {
    evidence.Record(0.2, i % 3 == 0 ? Arm::kTable : Arm::kControl, 0.01 * i, i == 7, 100, 40);
  }
  evidence.Record(0.2, Arm::kControl, std::nullopt, true, 0, 0);
  now_ms += 10'000;
  REQUIRE(reporter.ReportOnce().ok);
  const Evidence merged = planner.core().TakeEvidence(0.2);
  CHECK(merged.table.requests == 11);  // i = 0, 3, … 27, and the 0.5 s one
  CHECK(merged.control.requests == 21);
  CHECK(merged.control.failures == 2);  // i = 7 and the one without a TTFT
  CHECK(merged.control.ttft.count() == 20);
  CHECK(merged.table.ttft.count() == 11);
  CHECK(merged.table.prompt_tokens == 10 * 100 + 10);
  CHECK(merged.table.cached_tokens == 10 * 40 + 10);
  CHECK(planner.core().TakeEvidence(0.2).table.requests == 0);
}

TEST_CASE("sequences go up by one per report") {
  InProcessPlanner planner(PlannerConfig());
  RateRecorder recorder({.max_keys = 64});
  int64_t now_ms = 1'800'000'000'000;
  RateReporter reporter(planner.NewChannel(), recorder, Options(&now_ms));
  for (int round = 0; round < 3; ++round) {
    recorder.Record(KeyId("k"));
    now_ms += 1000;
    REQUIRE(reporter.ReportOnce().ok);
  }
  CHECK(planner.LastSequence("gw-r") == 1'800'000'000'002);
  CHECK(reporter.Stats().duplicates == 0);
}

TEST_CASE("a failed report is retried with the same sequence once the planner is back") {
  TempDir state("reporter-retry");
  InProcessPlanner planner(PlannerConfig(state.path().string()));
  RateRecorder recorder({.max_keys = 64});
  int64_t now_ms = 1'800'000'000'000;
  RateReporter reporter(planner.NewChannel(), recorder, Options(&now_ms));
  recorder.Record(KeyId("k"));
  REQUIRE(reporter.ReportOnce().ok);
  const uint64_t first = reporter.Stats().last_sequence;

  planner.Stop();
  for (int i = 0; i < 5; ++i) recorder.Record(KeyId("k"));
  now_ms += 1000;
  Status failed = reporter.ReportOnce();
  CHECK_FALSE(failed.ok);
  CHECK(failed.message.find(std::to_string(first + 1)) != std::string::npos);
  CHECK(reporter.Stats().pending == 1);
  CHECK(reporter.Stats().failed_attempts == 1);

  planner.Start();
  for (int i = 0; i < 7; ++i) recorder.Record(KeyId("k"));
  now_ms += 1000;
  // The planner's channel may need a moment to reconnect; each attempt keeps the order.
  REQUIRE(Eventually([&] { return reporter.ReportOnce().ok; }));
  RateReporterStats stats = reporter.Stats();
  CHECK(stats.pending == 0);
  CHECK(stats.requests_reported == 13);  // 1 + 5 + 7: nothing lost, nothing twice
  CHECK(planner.LastSequence("gw-r") == stats.last_sequence);
  CHECK(stats.duplicates == 0);
}

TEST_CASE("the pending queue is bounded: the oldest reports are dropped and counted") {
  InProcessPlanner planner(PlannerConfig());
  RateRecorder recorder({.max_keys = 64});
  int64_t now_ms = 1'800'000'000'000;
  RateReporterOptions options = Options(&now_ms);
  options.max_pending = 3;
  RateReporter reporter(planner.NewChannel(), recorder, options);
  planner.Stop();
  for (int i = 0; i < 5; ++i) {
    recorder.Record(KeyId("k"));
    CHECK_FALSE(reporter.ReportOnce().ok);
  }
  RateReporterStats stats = reporter.Stats();
  CHECK(stats.pending == 3);
  CHECK(stats.dropped_reports == 2);
}

TEST_CASE("the background thread reports every interval, and Stop sends the rest") {
  InProcessPlanner planner(PlannerConfig());
  RateRecorder recorder({.max_keys = 64});
  RateReporterOptions options;
  options.gateway_id = "gw-bg";
  options.interval = std::chrono::milliseconds(20);
  RateReporter reporter(planner.NewChannel(), recorder, options);
  REQUIRE(reporter.Start().ok);
  CHECK_FALSE(reporter.Start().ok);  // once only
  recorder.Record(KeyId("x"));
  REQUIRE(Eventually([&] { return reporter.Stats().requests_reported == 1; }));
  recorder.Record(KeyId("y"));
  reporter.Stop();
  CHECK(reporter.Stats().requests_reported == 2);
}

TEST_CASE("bad reporter options are refused, naming the field") {
  RateRecorder recorder({.max_keys = 64});
  auto channel = grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials());
  RateReporterOptions options;
  options.gateway_id = "";
  RateReporter no_id(channel, recorder, options);
  CHECK(no_id.Start().message.find("gateway_id") != std::string::npos);
  options.gateway_id = "g";
  options.interval = std::chrono::milliseconds(0);
  RateReporter no_interval(channel, recorder, options);
  CHECK(no_interval.Start().message.find("interval") != std::string::npos);
}

}  // namespace
}  // namespace cacheroute::dataplane

namespace cacheroute::dataplane {
namespace {

TEST_CASE("MakeRateReport: the window, every listed key annotated, the tail and the evidence") {
  RateSnapshot snapshot;
  snapshot.counts = {{.key_id = 7, .count = 3}, {.key_id = 9, .count = 1}};
  snapshot.other_count = 5;
  snapshot.total = 9;
  std::vector<uint64_t> annotated;
  const v1::ReportRatesRequest plain =
      MakeRateReport("gw", 1000, 2000, snapshot, std::nullopt, [&](v1::KeyCount& k) {
        annotated.push_back(k.key_id());
        k.set_prompt_tokens(k.count() * 10);
      });
  CHECK(plain.gateway_id() == "gw");
  CHECK(plain.window_start_unix_ms() == 1000);
  CHECK(plain.window_end_unix_ms() == 2000);
  REQUIRE(plain.counts_size() == 2);
  CHECK(plain.counts(0).key_id() == 7);
  CHECK(plain.counts(0).count() == 3);
  CHECK(plain.counts(0).prompt_tokens() == 30);
  CHECK(annotated == std::vector<uint64_t>{7, 9});
  CHECK(plain.other_count() == 5);
  CHECK(!plain.has_evidence());
  CHECK(plain.sequence() == 0);  // the caller's

  EvidenceRecorder evidence;
  evidence.Record(0.9, Arm::kControl, 0.25, /*failed=*/false, 100, 40);
  const v1::ReportRatesRequest with =
      MakeRateReport("gw", 1000, 2000, snapshot, evidence.Drain(), nullptr);
  REQUIRE(with.has_evidence());
  CHECK(with.evidence().table_fraction() == 0.9);
  CHECK(with.evidence().control().requests() == 1);
  CHECK(with.evidence().control().cached_tokens() == 40);
  CHECK(with.evidence().table().requests() == 0);
  CHECK(!with.counts(0).has_prompt_tokens());  // no annotation
}

}  // namespace
}  // namespace cacheroute::dataplane
