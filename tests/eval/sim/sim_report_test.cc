// The study report (tools/eval/sim/study/report.h) on hand-made results: every file is written,
// summary.json parses and holds the numbers worked out by hand, the SVGs are balanced XML with one
// polyline per policy, the CSV has a header and one row per run, the Markdown table marks
// censoring, a study run behind two gateway counts shows both, and a request shed with 429 counts
// as failed for capacity.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "tests/support/json_reader.h"
#include "tests/support/temp_dir.h"
#include "tools/eval/sim/study/report.h"

namespace cacheroute::sim::study {
namespace {

using client::testing::JsonValue;
using client::testing::ParseJson;

// Two policies × loads {30, 60, 100} × seeds {2, 3, 4}.
//   alpha: p99 per seed {1,2,4}, {1,3,5}, {1,2,3} → knees 60, 60, 100 (the last right-censored):
//          mean 73.333, s = 23.094, half-width 4.303 · 23.094 / √3 = 57.373. KV hit at 60 QPS
//          0.90, 0.92, 0.94; imbalance 1.1.
//          Routing precision 0.7, 0.8, 0.9: mean 0.8, half-width 4.303 · 0.1 / √3 = 0.248.
//   beta:  p99 {4,5,6} for every seed → left-censored everywhere. KV hit 0.5, imbalance 2, no
//          request qualified for precision (NaN).
// Every run behind one gateway.
StudyResult MakeResult() {
  StudyResult r;
  r.config.name = "toy";
  r.config.description = "A hand-made study with \"quotes\" & <angles>.";
  r.config.policies = {"alpha", "beta"};
  r.config.loads = {30, 60, 100};
  r.config.seeds = {2, 3, 4};
  r.config.common_load_qps = 60;
  const std::vector<std::vector<double>> alpha_p99 = {{1, 2, 4}, {1, 3, 5}, {1, 2, 3}};
  const std::vector<double> alpha_hit = {0.90, 0.92, 0.94};
  for (size_t p = 0; p < 2; ++p) {
    for (size_t l = 0; l < 3; ++l) {
      for (size_t s = 0; s < 3; ++s) {
        RunRecord x;
        x.study = "toy";
        x.policy = r.config.policies[p];
        x.offered_qps = r.config.loads[l];
        x.seed = r.config.seeds[s];
        x.ttft_p99_s = p == 0 ? alpha_p99[s][l] : 4.0 + l;
        x.kv_hit = p == 0 ? alpha_hit[s] : 0.5;
        x.routing_precision = p == 0 ? 0.7 + 0.1 * s : std::nan("");
        x.imbalance = p == 0 ? 1.1 : 2.0;
        x.requests = 1000;
        x.completed = 1000;
        r.runs.push_back(x);
      }
    }
  }
  return r;
}

// MakeResult's runs, and each again behind four gateways with half the KV hit and precision and
// twice the p99 (alpha's knees become 30 for every seed; beta's hit 0.25).
StudyResult MakeTwoGatewayResult() {
  StudyResult r = MakeResult();
  std::vector<RunRecord> runs;
  for (const RunRecord& x : r.runs) {
    runs.push_back(x);
    RunRecord y = x;
    y.gateways = 4;
    y.kv_hit /= 2;
    y.routing_precision /= 2;
    y.ttft_p99_s *= 2;
    runs.push_back(y);
  }
  // In the sweep's order: (policy, gateways, load, seed).
  std::stable_sort(runs.begin(), runs.end(), [](const RunRecord& a, const RunRecord& b) {
    return a.policy != b.policy ? a.policy < b.policy : a.gateways < b.gateways;
  });
  r.runs = std::move(runs);
  return r;
}

// True when every element opened is closed in order (self-closing ones too), ignoring the XML
// declaration; counts elements named `name` in `*count`.
bool BalancedXml(const std::string& text, const std::string& name, int* count) {
  std::vector<std::string> open;
  *count = 0;
  size_t pos = 0;
  while ((pos = text.find('<', pos)) != std::string::npos) {
    const size_t end = text.find('>', pos);
    if (end == std::string::npos) return false;
    std::string tag = text.substr(pos + 1, end - pos - 1);
    pos = end + 1;
    if (tag.starts_with("?")) continue;
    if (tag.starts_with("/")) {
      if (open.empty() || open.back() != tag.substr(1)) return false;
      open.pop_back();
      continue;
    }
    const bool self_closing = tag.ends_with("/");
    const std::string element = tag.substr(0, tag.find_first_of(" /"));
    if (element == name) ++*count;
    if (!self_closing) open.push_back(element);
  }
  return open.empty();
}

TEST_CASE("the report writes every file", "[report]") {
  testing::TempDir dir("sim_report_test");
  const std::vector<StudyResult> studies = {MakeResult()};
  const std::string out = (dir.path() / "out").string();
  REQUIRE(WriteReport(studies, out).ok());
  for (const char* name : {"runs.csv", "report.md", "summary.json", "toy-p99.svg",
                           "toy-capacity.svg", "toy-kv-hit.svg"}) {
    INFO(name);
    CHECK(std::filesystem::file_size(std::filesystem::path(out) / name) > 0);
  }
}

TEST_CASE("summary.json holds the aggregated numbers", "[report]") {
  const std::vector<StudyResult> studies = {MakeResult()};
  const std::optional<JsonValue> doc = ParseJson(SummaryJson(studies));
  REQUIRE(doc.has_value());
  const JsonValue* toy = doc->Find("studies")->Find("toy");
  REQUIRE(toy != nullptr);
  CHECK(toy->Find("description")->string == "A hand-made study with \"quotes\" & <angles>.");
  CHECK(toy->Find("common_load_qps")->number == 60);
  const JsonValue* policies = toy->Find("policies");
  REQUIRE(policies->object.size() == 2);
  CHECK(policies->object[0].name == "alpha");  // in the study's order

  const JsonValue* alpha = policies->Find("alpha");
  CHECK(alpha->Find("capacity_qps")->number == Approx(73.3333).epsilon(1e-4));
  CHECK(alpha->Find("capacity_ci")->number == Approx(57.373).epsilon(1e-4));
  CHECK(alpha->Find("capacity_right_censored_runs")->number == 1);
  CHECK(alpha->Find("capacity_left_censored_runs")->number == 0);
  CHECK(alpha->Find("kv_hit")->number == Approx(0.92));
  CHECK(alpha->Find("routing_precision")->number == Approx(0.8));
  CHECK(alpha->Find("routing_precision_ci")->number == Approx(0.2484).epsilon(1e-3));
  CHECK(alpha->Find("imbalance")->number == Approx(1.1));
  const JsonValue* p99 = alpha->Find("p99_ttft_s");
  REQUIRE(p99->object.size() == 3);
  CHECK(p99->Find("30")->number == Approx(1.0));
  CHECK(p99->Find("60")->number == Approx(7.0 / 3));  // mean of 2, 3, 2
  CHECK(p99->Find("100")->number == Approx(4.0));     // mean of 4, 5, 3
  // Capacity at the other SLOs: at 2 s the knees are 60, 30, 60; at 5 s every seed passes 100.
  const JsonValue* by_slo = alpha->Find("capacity_by_slo");
  CHECK(by_slo->Find("2")->Find("mean")->number == Approx(50));
  CHECK(by_slo->Find("5")->Find("mean")->number == Approx(100));
  CHECK(by_slo->Find("5")->Find("right_censored_runs")->number == 3);

  const JsonValue* beta = policies->Find("beta");
  CHECK(beta->Find("capacity_qps")->number == 0);
  CHECK(beta->Find("capacity_left_censored_runs")->number == 3);
  CHECK(beta->Find("kv_hit")->number == Approx(0.5));
  CHECK(beta->Find("routing_precision")->type == JsonValue::Type::kNull);
  CHECK(beta->Find("imbalance")->number == Approx(2.0));
}

TEST_CASE("summary.json keys every gateway count under by_gateways", "[report]") {
  const std::vector<StudyResult> studies = {MakeTwoGatewayResult()};
  const std::optional<JsonValue> doc = ParseJson(SummaryJson(studies));
  REQUIRE(doc.has_value());
  const JsonValue* toy = doc->Find("studies")->Find("toy");
  const JsonValue* counts = toy->Find("gateway_counts");
  REQUIRE(counts->array.size() == 2);
  CHECK(counts->array[1].number == 4);
  // The policy's own figures are the smallest G's, as before G was swept.
  const JsonValue* alpha = toy->Find("policies")->Find("alpha");
  CHECK(alpha->Find("gateways")->number == 1);
  CHECK(alpha->Find("kv_hit")->number == Approx(0.92));
  CHECK(alpha->Find("capacity_qps")->number == Approx(73.3333).epsilon(1e-4));
  const JsonValue* by_gateways = alpha->Find("by_gateways");
  REQUIRE(by_gateways->object.size() == 2);
  CHECK(by_gateways->Find("1")->Find("kv_hit")->number == Approx(0.92));
  const JsonValue* four = by_gateways->Find("4");
  CHECK(four->Find("gateways")->number == 4);
  CHECK(four->Find("kv_hit")->number == Approx(0.46));
  CHECK(four->Find("routing_precision")->number == Approx(0.4));
  CHECK(four->Find("capacity_qps")->number == Approx(30));
  CHECK(
      toy->Find("policies")->Find("beta")->Find("by_gateways")->Find("4")->Find("kv_hit")->number ==
      Approx(0.25));
}

TEST_CASE("one seed gives a null interval", "[report]") {
  StudyResult r = MakeResult();
  r.config.seeds = {2};
  std::erase_if(r.runs, [](const RunRecord& x) { return x.seed != 2; });
  const std::vector<StudyResult> studies = {r};
  const std::optional<JsonValue> doc = ParseJson(SummaryJson(studies));
  REQUIRE(doc.has_value());
  const JsonValue* alpha = doc->Find("studies")->Find("toy")->Find("policies")->Find("alpha");
  CHECK(alpha->Find("capacity_qps")->number == 60);
  CHECK(alpha->Find("capacity_ci")->type == JsonValue::Type::kNull);
}

TEST_CASE("the SVGs are balanced with one polyline per policy", "[report]") {
  const StudyResult r = MakeResult();
  int polylines = 0;
  const std::string p99 = P99Svg(r);
  CHECK(BalancedXml(p99, "polyline", &polylines));
  CHECK(polylines == 2);
  CHECK(p99.find("SLO 3.5s") != std::string::npos);
  CHECK(p99.find(">alpha</text>") != std::string::npos);  // the legend
  int rects = 0;
  CHECK(BalancedXml(CapacitySvg(r), "rect", &rects));
  CHECK(rects >= 3);  // the background, the frame, alpha's bar (beta's capacity is 0)
  CHECK(BalancedXml(KvHitSvg(r), "rect", &rects));
  // Behind two gateway counts the plots show the smallest.
  const std::string two = P99Svg(MakeTwoGatewayResult());
  CHECK(BalancedXml(two, "polyline", &polylines));
  CHECK(polylines == 2);
  CHECK(two.find("G = 1") != std::string::npos);
  CHECK(two == P99Svg(r));
}

TEST_CASE("runs.csv has a header and one row per run", "[report]") {
  const std::vector<StudyResult> studies = {MakeResult()};
  const std::string csv = RunsCsv(studies);
  std::vector<std::string> lines;
  size_t start = 0;
  for (size_t end; (end = csv.find('\n', start)) != std::string::npos; start = end + 1) {
    lines.push_back(csv.substr(start, end - start));
  }
  REQUIRE(lines.size() == 1 + 18);
  CHECK(lines[0].starts_with("study,policy,gateways,offered_qps,seed,ttft_p50_s"));
  CHECK(lines[0].find(",kv_hit,routing_precision,imbalance,") != std::string::npos);
  const auto columns = std::count(lines[0].begin(), lines[0].end(), ',');
  for (const std::string& line : lines) CHECK(std::count(line.begin(), line.end(), ',') == columns);
  CHECK(lines[1].starts_with("toy,alpha,1,30,2,"));
  CHECK(lines[1].find(",0.9,0.7,1.1,") != std::string::npos);  // KV hit, precision, imbalance
}

TEST_CASE("the Markdown table marks censoring", "[report]") {
  const std::vector<StudyResult> studies = {MakeResult()};
  const std::string md = ReportMarkdown(studies);
  CHECK(md.find("| Policy | G | KV hit | Precision | Cap.@3.5s | Cap.@2s | Cap.@5s | p99@60 |") !=
        std::string::npos);
  CHECK(md.find("| alpha | 1 | 92.0±5.0% | 80.0±24.8% | 73±57+ | 50±43 | ≥100 |") !=
        std::string::npos);
  CHECK(md.find("| beta | 1 | 50.0±0.0% | – | <30 | <30 | 60±0 |") != std::string::npos);
}

TEST_CASE("the Markdown tables show each policy behind each gateway count, grouped", "[report]") {
  const std::vector<StudyResult> studies = {MakeTwoGatewayResult()};
  const std::string md = ReportMarkdown(studies);
  CHECK(md.find("G = {1,4} gateways") != std::string::npos);
  // The main table: alpha at G = 1, alpha at G = 4, then beta.
  const size_t alpha_1 = md.find("| alpha | 1 | 92.0±5.0% | 80.0±24.8% | 73±57+ |");
  const size_t alpha_4 = md.find("| alpha | 4 | 46.0±2.5% | 40.0±12.4% | 30±0 |");
  const size_t beta_1 = md.find("| beta | 1 | 50.0±0.0% | – |");
  REQUIRE(alpha_1 != std::string::npos);
  REQUIRE(alpha_4 != std::string::npos);
  REQUIRE(beta_1 != std::string::npos);
  CHECK(alpha_1 < alpha_4);
  CHECK(alpha_4 < beta_1);
  CHECK(md.find("| beta | 4 | 25.0±0.0% | – |") != std::string::npos);
  // The p99 table too: alpha's means at 30, 60, 100 QPS, doubled at G = 4.
  CHECK(md.find("| alpha | 1 | 1.00 | 2.33 | 4.00 |") != std::string::npos);
  CHECK(md.find("| alpha | 4 | 2.00 | 4.67 | 8.00 |") != std::string::npos);
  CHECK(md.find("The plots are at G = 1.") != std::string::npos);
}

TEST_CASE("capacity labels", "[report]") {
  Capacity c;
  c.knee = {.mean = 176, .half_width = 11.4, .n = 5, .has_interval = true};
  CHECK(FormatCapacity(c, 30, 300) == "176±11");
  c.right_censored = 5;
  CHECK(FormatCapacity(c, 30, 300) == "≥300");
  c.right_censored = 0;
  c.left_censored = 5;
  CHECK(FormatCapacity(c, 30, 300) == "<30");
  c.knee = {.mean = 42, .half_width = 0, .n = 1, .has_interval = false};
  c.left_censored = 0;
  CHECK(FormatCapacity(c, 30, 300) == "42");
}

}  // namespace
}  // namespace cacheroute::sim::study

namespace cacheroute::sim::study {
namespace {

TEST_CASE("a request shed with 429 counts as failed for capacity", "[report]") {
  // alpha's seeds pass 100 QPS on latency; shed 6% of its requests there (none failed): the knee
  // falls to 60 on every seed. 4% shed passes.
  for (const uint64_t shed : {60u, 40u}) {
    StudyResult r = MakeResult();
    for (RunRecord& x : r.runs) {
      if (x.policy != "alpha" || x.offered_qps != 100) continue;
      x.ttft_p99_s = 1;
      x.shed = shed;
      x.completed = x.requests - shed;
    }
    const PolicySummary alpha = Summarize(r).front();
    INFO("shed per 1000: " << shed);
    CHECK(alpha.capacity_primary.knee.mean == (shed == 60 ? 60 : 100));
    CHECK(alpha.failure_rate.at(100) == Approx(shed / 1000.0));
  }
}

}  // namespace
}  // namespace cacheroute::sim::study
