// Tests for tools/eval/replay/compare: reading replay reports back, the side-by-side table, the
// Markdown report and the SVG charts, and the real cacheroute-replay-compare binary's exit codes.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "support/run_command.h"
#include "support/temp_dir.h"
#include "tools/eval/replay/compare.h"
#include "tools/eval/replay/replay.h"

namespace cacheroute::replay {
namespace {

std::string ReportJson(uint64_t cached, const std::string& via_a, const std::string& via_b) {
  std::vector<Outcome> outcomes(2);
  outcomes[0].via = via_a;
  outcomes[0].prompt_tokens = 100;
  outcomes[0].cached_tokens = cached;
  outcomes[0].ttft_s = 0.5;
  outcomes[0].planned = true;
  outcomes[1].via = via_b;
  outcomes[1].prompt_tokens = 100;
  outcomes[1].ttft_s = 1.5;
  ReplayReport report = BuildReport(outcomes, {}, 2.0);
  report.policy = "gateway";
  return FormatReportJson(report);
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST_CASE("a replay report reads back with its destinations") {
  absl::StatusOr<ReplayRun> run = ReadRun("cacheroute", ReportJson(80, "e0", "e1"));
  INFO(run.status().ToString());
  REQUIRE(run.ok());
  CHECK(run->label == "cacheroute");
  CHECK(run->requests == 2);
  CHECK(run->kv_hit == Approx(0.4));
  CHECK(run->planned == 1);
  REQUIRE(run->destinations.size() == 2);
  CHECK(run->destinations[0].name == "e0");
  CHECK(run->destinations[0].prefill_tokens == 20);
  CHECK(run->destinations[0].kv_hit == Approx(0.8));
  CHECK(run->destinations[1].prefill_tokens == 100);
}

TEST_CASE("a file that is not a replay report is refused, naming the field") {
  CHECK_FALSE(ReadRun("x", "not json").ok());
  absl::StatusOr<ReplayRun> missing = ReadRun("x", R"({"requests": 1})");
  REQUIRE_FALSE(missing.ok());
  CHECK(std::string(missing.status().message()).find("succeeded") != std::string::npos);
}

TEST_CASE("repeats of one set-up fold into their medians, figure by figure") {
  std::vector<ReplayRun> repeats;
  for (uint64_t cached : {90, 10, 50}) repeats.push_back(*ReadRun("r", ReportJson(cached, "e0", "e1")));
  repeats[0].ttft_p99_s = 3;
  repeats[1].ttft_p99_s = 1;
  repeats[2].ttft_p99_s = 2;
  const ReplayRun median = MedianRun("three", repeats);
  CHECK(median.label == "three");
  CHECK(median.kv_hit == Approx(0.25));  // 50 of 200 prompt tokens: the middle repeat
  CHECK(median.ttft_p99_s == 2);
  REQUIRE(median.destinations.size() == 2);
  CHECK(median.destinations[0].kv_hit == Approx(0.5));
  repeats.pop_back();  // an even count: the mean of the middle two
  CHECK(MedianRun("two", repeats).ttft_p99_s == 2);
}

TEST_CASE("the table, the Markdown and the charts show every run") {
  std::vector<ReplayRun> runs = {*ReadRun("flatlb", ReportJson(10, "e0", "e1")),
                                 *ReadRun("cacheroute", ReportJson(90, "e0", "e1"))};
  const std::string table = CompareTable(runs);
  CHECK(table.find("flatlb") != std::string::npos);
  CHECK(table.find("5.0%") != std::string::npos);   // 10 of 200 prompt tokens
  CHECK(table.find("45.0%") != std::string::npos);  // 90 of 200
  const std::string md = CompareMarkdown(runs, "Demo");
  CHECK(md.rfind("# Demo", 0) == 0);
  CHECK(Count(md, ": per destination") == 2);
  const std::string bars = BarChartSvg("KV", {"flatlb", "cacheroute"}, {5, 45}, "%");
  CHECK(Count(bars, "<svg") == 1);
  CHECK(Count(bars, "</svg>") == 1);
  CHECK(Count(bars, "width=\"70\"") == 2);  // one bar per run
  // Text is escaped for SVG: a label's <, > and & become entities.
  const std::string escaped = BarChartSvg("a<b", {"x&y>"}, {1}, "%");
  CHECK(escaped.find("a&lt;b") != std::string::npos);
  CHECK(escaped.find("x&amp;y&gt;") != std::string::npos);
  CHECK(escaped.find("x&y") == std::string::npos);
  const std::string load = DestinationLoadSvg(runs);
  CHECK(Count(load, "width=\"26\"") == 4);  // 2 destinations × 2 runs
  CHECK(Count(load, "<text") == Count(load, "</text>"));
}

// A gateway run's report with `shed` 429s (0.01 s, 0.03 s to their answer) besides two successes
// (TTFT 0.5 s and 1.5 s), goodput counted within `slo_s` (0: no SLO).
std::string ShedReportJson(int shed, double slo_s) {
  std::vector<Outcome> outcomes(2);
  outcomes[0].ttft_s = 0.5;
  outcomes[1].ttft_s = 1.5;
  for (int i = 0; i < shed; ++i) {
    Outcome o;
    o.kind = OutcomeKind::kShed;
    o.latency_s = i % 2 == 0 ? 0.01 : 0.03;
    outcomes.push_back(o);
  }
  ReplayReport report = BuildReport(outcomes, {}, 2.0, slo_s);
  report.policy = "gateway";
  return FormatReportJson(report);
}

TEST_CASE("429s and goodput read back, fold into medians and show when a run shed") {
  absl::StatusOr<ReplayRun> on = ReadRun("shed on", ShedReportJson(2, 1.0));
  REQUIRE(on.ok());
  CHECK(on->shed == 2);
  CHECK(on->failed == 0);
  CHECK(on->shed_latency_p50_s == Approx(0.01));
  CHECK(on->shed_latency_p99_s == Approx(0.03));
  CHECK(on->slo_s == 1.0);
  CHECK(on->within_slo == 1);
  CHECK(on->goodput == Approx(0.5));
  const std::vector<ReplayRun> three = {*ReadRun("r", ShedReportJson(2, 1.0)),
                                        *ReadRun("r", ShedReportJson(6, 1.0)),
                                        *ReadRun("r", ShedReportJson(4, 1.0))};
  CHECK(MedianRun("m", three).shed == 4);
  absl::StatusOr<ReplayRun> off = ReadRun("shed off", ShedReportJson(0, 1.0));
  REQUIRE(off.ok());
  const std::string table = CompareTable({*off, *on});
  CHECK_THAT(table, Catch::Contains("shed (429)") && Catch::Contains("0.010 / 0.030 s") &&
                        Catch::Contains("0.5/s (1 s)") && Catch::Contains("2 (1)"));
  CHECK_THAT(CompareMarkdown({*off, *on}, "t"), Catch::Contains("| shed (429) | 0 | 2 |"));
  // Runs that neither shed nor had an SLO (older reports too) show no such rows.
  CHECK_THAT(CompareTable({*ReadRun("x", ShedReportJson(0, 0))}),
             !Catch::Contains("shed (429)"));
  CHECK_THAT(CompareTable({*ReadRun("x", ReportJson(10, "e0", "e1"))}),
             !Catch::Contains("shed (429)"));
}

TEST_CASE("cacheroute-replay-compare writes the report; bad arguments exit 2") {
  testing::TempDir dir("replay_compare_test");
  const std::string a = dir.Write("a.json", ReportJson(10, "e0", "e1"));
  const std::string b = dir.Write("b.json", ReportJson(90, "e0", "e1"));
  testing::CommandResult ok = testing::RunCommand(
      CACHEROUTE_REPLAY_COMPARE_PATH, {"flatlb=" + a, "cacheroute=" + b, "--out", dir.path()});
  INFO(ok.err);
  REQUIRE(ok.exit_code == 0);
  CHECK(ok.out.find("served KV hit") != std::string::npos);
  CHECK(dir.Read("report.md").find("cacheroute") != std::string::npos);
  CHECK(dir.Read("kv-hit.svg").find("</svg>") != std::string::npos);

  testing::CommandResult folded = testing::RunCommand(
      CACHEROUTE_REPLAY_COMPARE_PATH, {"both=" + dir.File("a.json") + "," + dir.File("b.json")});
  INFO(folded.out << folded.err);
  CHECK(folded.exit_code == 0);
  CHECK(folded.out.find("both (median of 2)") != std::string::npos);
  testing::CommandResult bad = testing::RunCommand(CACHEROUTE_REPLAY_COMPARE_PATH, {"nolabel"});
  CHECK(bad.exit_code == 2);
  CHECK(bad.err.find("nolabel") != std::string::npos);
  testing::CommandResult missing =
      testing::RunCommand(CACHEROUTE_REPLAY_COMPARE_PATH, {"x=" + dir.File("none.json")});
  CHECK(missing.exit_code == 2);
  CHECK(missing.err.find("none.json") != std::string::npos);
}

}  // namespace
}  // namespace cacheroute::replay
