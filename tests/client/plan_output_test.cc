// Tests for the plan formatters (client/plan_output.h) and the text helpers they use
// (client/text_format.h).
#include "client/plan_output.h"

#include <catch2/catch.hpp>
#include <charconv>
#include <cmath>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "client/text_format.h"
#include "planner/plan_builder.h"
#include "tests/support/json_reader.h"
#include "tests/support/require_ok.h"
#include "tests/support/text_cases.h"

namespace cacheroute::client {
namespace {

using cacheroute::testing::CheckEach;
using cacheroute::testing::TextCase;
using testing::JsonValue;
using testing::ParseJson;

// Builds a plan over keys whose ids are their index in `names`.
planner::Plan MakePlan(const std::vector<std::string>& names, const std::vector<double>& rates,
                       const planner::PlanConfig& config) {
  std::vector<planner::KeyRate> key_rates;
  for (size_t i = 0; i < rates.size(); ++i) key_rates.push_back({i, rates[i]});
  return cacheroute::testing::RequireOk(planner::BuildPlan(key_rates, config));
}

// Five keys, R = 2, q_cap = 8, W = 2: alpha needs k = 2, beta and gamma one slot each, which
// fills C = 4; delta and epsilon form the cold tail of 1.5, 0.75 per destination. Placement:
// alpha on {0, 1} (5.75 each), beta on 0 (11.75), gamma on 1 (8.75).
const std::vector<std::string> kNames = {"alpha", "beta", "gamma", "delta", "epsilon"};

planner::Plan SmallPlan() {
  return MakePlan(kNames, {10, 6, 3, 1, 0.5},
                  {.destinations = 2, .q_cap = 8, .slots_per_destination = 2});
}

std::string Format(const planner::Plan& plan, const std::vector<std::string>& names,
                   OutputFormat format, size_t top = 10) {
  return cacheroute::testing::RequireOk(FormatPlan(plan, names, {.format = format, .top = top}));
}

TEST_CASE("json: exact document for a small plan") {
  CHECK(Format(SmallPlan(), kNames, OutputFormat::kJson) ==
        R"({
  "assignments": [
    {"key": "alpha", "rate": 10, "destinations": [0, 1]},
    {"key": "beta", "rate": 6, "destinations": [0]},
    {"key": "gamma", "rate": 3, "destinations": [1]}
  ],
  "loads": [11.75, 8.75],
  "stats": {
    "admitted_keys": 3,
    "slots_used": 4,
    "slot_capacity": 4,
    "imbalance": )" +
            ShortestDouble(11.75 / 10.25) +
            R"(,
    "cold_tail_rate": 1.5,
    "build_seconds": 0,
    "input_keys": 5,
    "capped_keys": 0,
    "total_rate": 20.5,
    "admitted_rate": 19,
    "max_load": 11.75,
    "mean_load": 10.25,
    "destinations": 2,
    "q_cap": 8,
    "slots_per_destination": 2
  }
}
)");
}

TEST_CASE("json: an empty plan is still one valid object") {
  const planner::Plan plan =
      MakePlan({}, {}, {.destinations = 3, .q_cap = 1, .slots_per_destination = 1});
  const std::string text = Format(plan, {}, OutputFormat::kJson);
  const std::optional<JsonValue> doc = ParseJson(text);
  REQUIRE(doc.has_value());
  REQUIRE(doc->Find("assignments") != nullptr);
  CHECK(doc->Find("assignments")->type == JsonValue::Type::kArray);
  CHECK(doc->Find("assignments")->array.empty());
  CHECK(doc->Find("loads")->array.size() == 3);
}

TEST_CASE("json: awkward keys and numbers survive a round trip") {
  const std::vector<std::string> names = {"quote\" backslash\\ slash/",
                                          "nl\ncr\rtab\tbell\x07"
                                          "del\x7f",
                                          "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80", "plain"};
  const std::vector<double> rates = {0.1, 1e-7, 123456789.123, 3.0000000000000004};
  const planner::Plan plan =
      MakePlan(names, rates, {.destinations = 7, .q_cap = 0.3, .slots_per_destination = 10});
  const std::string text = Format(plan, names, OutputFormat::kJson);
  CHECK(IsValidUtf8(text));
  CHECK(text.find("\\u0007") != std::string::npos);
  const std::optional<JsonValue> doc = ParseJson(text);
  REQUIRE(doc.has_value());
  REQUIRE(doc->type == JsonValue::Type::kObject);

  const JsonValue& assignments = *doc->Find("assignments");
  REQUIRE(assignments.array.size() == plan.size());
  for (size_t i = 0; i < plan.size(); ++i) {
    const JsonValue& a = assignments.array[i];
    REQUIRE(a.object.size() == 3);
    CHECK(a.object[0].name == "key");
    CHECK(a.object[1].name == "rate");
    CHECK(a.object[2].name == "destinations");
    CHECK(a.Find("key")->string == names[plan.key(i)]);
    CHECK(a.Find("rate")->number == plan.rate(i));  // exact: shortest round-trip text
    const JsonValue& destinations = *a.Find("destinations");
    REQUIRE(destinations.array.size() == plan.destinations(i).size());
    for (size_t j = 0; j < destinations.array.size(); ++j) {
      CHECK(destinations.array[j].number == plan.destinations(i)[j]);
    }
  }
  const JsonValue& loads = *doc->Find("loads");
  REQUIRE(loads.array.size() == 7);
  for (size_t r = 0; r < 7; ++r) CHECK(loads.array[r].number == plan.loads()[r]);

  const JsonValue& stats = *doc->Find("stats");
  for (const char* field : {"admitted_keys", "slots_used", "slot_capacity", "imbalance",
                            "cold_tail_rate", "build_seconds"}) {
    INFO(field);
    REQUIRE(stats.Find(field) != nullptr);
    CHECK(stats.Find(field)->type == JsonValue::Type::kNumber);
  }
  CHECK(stats.Find("admitted_keys")->number == plan.stats().admitted_keys);
  CHECK(stats.Find("imbalance")->number == plan.stats().imbalance);
}

TEST_CASE("json: a saturated slot capacity is printed as an exact integer") {
  const planner::Plan plan =
      MakePlan({"a"}, {1}, {.destinations = 2, .q_cap = 1, .slots_per_destination = UINT64_MAX});
  const std::optional<JsonValue> doc = ParseJson(Format(plan, {"a"}, OutputFormat::kJson));
  REQUIRE(doc.has_value());
  CHECK(doc->Find("stats")->Find("slot_capacity")->number_text == "18446744073709551615");
}

TEST_CASE("csv: header, one row per assignment, destinations joined by ';'") {
  CHECK(Format(SmallPlan(), kNames, OutputFormat::kCsv) ==
        "key,rate,k,destinations\n"
        "alpha,10,2,0;1\n"
        "beta,6,1,0\n"
        "gamma,3,1,1\n");
}

TEST_CASE("csv: keys with a comma, quote or line break are quoted") {
  const std::vector<std::string> names = {"a,b", "say \"x\"", "two\nlines", "cr\r", "plain"};
  const planner::Plan plan = MakePlan(names, {5, 4, 3, 2, 1},
                                      {.destinations = 1, .q_cap = 10, .slots_per_destination = 5});
  CHECK(Format(plan, names, OutputFormat::kCsv) ==
        "key,rate,k,destinations\n"
        "\"a,b\",5,1,0\n"
        "\"say \"\"x\"\"\",4,1,0\n"
        "\"two\nlines\",3,1,0\n"
        "\"cr\r\",2,1,0\n"
        "plain,1,1,0\n");
}

TEST_CASE("table: summary, hottest keys and one bar per destination") {
  const std::string text = Format(SmallPlan(), kNames, OutputFormat::kTable);
  INFO(text);
  for (const char* expected :
       {"Plan for R=2 destinations, q_cap=8, W=2 slots per destination\n",
        "  keys in                5\n", "  admitted keys          3  (2 not admitted)\n",
        "  slots used             4 / 4  (100.0%)\n", "  capped keys            0",
        "  total rate             20.5\n", "  admitted rate          19  (92.7% of total)\n",
        "  cold-tail rate         1.5  (7.3% of total)\n",
        "  imbalance (max/mean)   1.1463  (max load 11.75, mean load 10.25)\n",
        "  build time             0.000 ms\n", "Hottest 3 of 3 admitted keys\n",
        "  rank  key    rate  k  destinations\n", "     1  alpha    10  2  0,1\n",
        "     2  beta      6  1  0\n", "     3  gamma     3  1  1\n",
        "Expected load per destination (max 11.75, mean 10.25)\n"}) {
    CHECK(text.find(expected) != std::string::npos);
  }
  // The max load fills all 40 cells; 8.75/11.75 of 320 eighths is 238 = 29 full cells + 6/8.
  std::string full_bar;
  for (int i = 0; i < 40; ++i) full_bar += "█";
  std::string bar_1;
  for (int i = 0; i < 29; ++i) bar_1 += "█";
  bar_1 += "▊" + std::string(10, ' ');
  // Mean 10.25: 11.75 is 14.63% above it, 8.75 as far below.
  CHECK(text.find("     0  " + full_bar + "  11.75   +14.63%  ◀ max\n") != std::string::npos);
  CHECK(text.find("     1  " + bar_1 + "   8.75   -14.63%\n") != std::string::npos);
}

TEST_CASE("table: --top limits the listed keys") {
  const std::string one = Format(SmallPlan(), kNames, OutputFormat::kTable, /*top=*/1);
  CHECK(one.find("Hottest 1 of 3 admitted keys") != std::string::npos);
  CHECK(one.find("alpha") != std::string::npos);
  CHECK(one.find("beta") == std::string::npos);
  const std::string none = Format(SmallPlan(), kNames, OutputFormat::kTable, /*top=*/0);
  CHECK(none.find("No keys listed (3 admitted).") != std::string::npos);
  CHECK(none.find("alpha") == std::string::npos);
}

TEST_CASE("table: long and unprintable keys are escaped and cut") {
  const std::vector<std::string> names = {std::string(100, 'k'), "tab\there"};
  const planner::Plan plan =
      MakePlan(names, {2, 1}, {.destinations = 1, .q_cap = 10, .slots_per_destination = 2});
  const std::string text = Format(plan, names, OutputFormat::kTable);
  CHECK(text.find(std::string(39, 'k') + "…") != std::string::npos);
  CHECK(text.find(std::string(40, 'k')) == std::string::npos);
  CHECK(text.find("tab\\there") != std::string::npos);
  CHECK(text.find('\t') == std::string::npos);
}

TEST_CASE("table: many destinations get a histogram that stays short") {
  std::vector<std::string> names;
  std::vector<double> rates;
  for (int i = 0; i < 500; ++i) {
    names.push_back(absl::StrCat("key", i));
    rates.push_back(1.0 + (i % 37));
  }
  const planner::Plan plan =
      MakePlan(names, rates, {.destinations = 200, .q_cap = 100, .slots_per_destination = 2});
  const std::string text = Format(plan, names, OutputFormat::kTable);
  INFO(text);
  const std::string chart = text.substr(text.find("Expected load per destination"));
  const std::vector<absl::string_view> lines = absl::StrSplit(chart, '\n');
  CHECK(lines.size() < 40);
  CHECK(chart.find("min ") != std::string::npos);
  CHECK(chart.find("p50 ") != std::string::npos);
  CHECK(chart.find("most loaded: #") != std::string::npos);
  CHECK(chart.find("◀ max") != std::string::npos);
}

TEST_CASE("table: R at the chart limit still gets one bar per destination") {
  const planner::Plan plan = MakePlan(
      {"a"}, {1}, {.destinations = kMaxChartRows, .q_cap = 10, .slots_per_destination = 1});
  const std::string text = Format(plan, {"a"}, OutputFormat::kTable);
  const std::string chart = text.substr(text.find("Expected load per destination"));
  const std::vector<absl::string_view> lines = absl::StrSplit(chart, '\n', absl::SkipEmpty());
  CHECK(lines.size() == kMaxChartRows + 2);  // title, column header, one row each
}

// A byte-aware plan over three keys: alpha's 900-token prefix saves 900 tokens/s, gamma's 100
// saves 400; beta's 300 (600 tokens/s) does not fit the 1000-token budget once alpha is in.
planner::Plan BytesPlan() {
  const std::vector<planner::KeyRate> rates = {{0, 1}, {1, 2}, {2, 4}};
  const std::vector<planner::KeyTokens> tokens = {{900, 1000}, {300, 400}, {100, 150}};
  return cacheroute::testing::RequireOk(planner::BuildPlan(
      rates, {.destinations = 2, .q_cap = 8, .slots_per_destination = 1, .kv_budget_tokens = 500},
      nullptr, nullptr, {}, tokens));
}

TEST_CASE("byte-aware plans carry each key's reusable tokens and saved work") {
  const planner::Plan plan = BytesPlan();
  REQUIRE(plan.stats().byte_aware);
  const std::string csv = Format(plan, kNames, OutputFormat::kCsv);
  CHECK(csv ==
        "key,rate,k,destinations,reusable_tokens,saved_work,work\n"
        "gamma,4,1,0,100,400,200\n"
        "alpha,1,1,1,900,900,100\n");
  const std::optional<JsonValue> json = ParseJson(Format(plan, kNames, OutputFormat::kJson));
  REQUIRE(json.has_value());
  const JsonValue& assignments = *json->Find("assignments");
  REQUIRE(assignments.array.size() == 2);
  CHECK(assignments.array[0].Find("reusable_tokens")->number == 100);
  CHECK(assignments.array[1].Find("saved_work")->number == 900);
  const JsonValue& stats = *json->Find("stats");
  CHECK(stats.Find("kv_used")->number == 1000);
  CHECK(stats.Find("kv_budget")->number == 1000);
  CHECK(stats.Find("saved_work")->number == 1300);
  const std::string table = Format(plan, kNames, OutputFormat::kTable);
  CHECK_THAT(table, Catch::Contains("byte-aware: 500 KV tokens per destination"));
  CHECK_THAT(table, Catch::Contains("KV budget used         1000 / 1000 tokens  (100.0%)"));
  CHECK_THAT(table, Catch::Contains("saved work             1300 tokens/s"));
  CHECK_THAT(table, Catch::Contains("reusable  saved/s"));
  // A slot plan lists neither.
  CHECK(Format(SmallPlan(), kNames, OutputFormat::kCsv).rfind("key,rate,k,destinations\n", 0) == 0);
  CHECK(Format(SmallPlan(), kNames, OutputFormat::kTable).find("saved/s") == std::string::npos);
}

TEST_CASE("a key id without a name is an internal error and writes nothing") {
  const planner::Plan plan = SmallPlan();
  const std::vector<std::string> too_few = {"alpha"};
  absl::StatusOr<std::string> text = FormatPlan(plan, too_few, {.format = OutputFormat::kJson});
  CHECK(text.status().code() == absl::StatusCode::kInternal);
  std::ostringstream out;
  CHECK(WritePlan(plan, too_few, {.format = OutputFormat::kJson}, out).code() ==
        absl::StatusCode::kInternal);
  CHECK(out.str().empty());
}

TEST_CASE("WritePlan writes the same text as FormatPlan") {
  std::ostringstream out;
  REQUIRE(WritePlan(SmallPlan(), kNames, {.format = OutputFormat::kCsv}, out).ok());
  CHECK(out.str() == Format(SmallPlan(), kNames, OutputFormat::kCsv));
}

TEST_CASE("ParseOutputFormat") {
  CHECK(*ParseOutputFormat("table") == OutputFormat::kTable);
  CHECK(*ParseOutputFormat("json") == OutputFormat::kJson);
  CHECK(*ParseOutputFormat("csv") == OutputFormat::kCsv);
  CHECK(ParseOutputFormat("xml").status().message() == "\"xml\" is not one of table, json, csv");
  CHECK_FALSE(ParseOutputFormat("JSON").ok());
}

TEST_CASE("AppendJsonString escapes quotes, backslashes and control characters") {
  const auto json = [](absl::string_view s) {
    std::string out;
    AppendJsonString(&out, s);
    return out;
  };
  const std::vector<TextCase> cases = {
      {"plain", "\"plain\""},
      {"a\"b\\c", "\"a\\\"b\\\\c\""},
      {"\n\r\t\b\f", "\"\\n\\r\\t\\b\\f\""},
      {std::string("\x00\x01\x1f", 3), "\"\\u0000\\u0001\\u001f\""},
      {"\xC3\xA9", "\"\xC3\xA9\""},
      {"a\xFF"
       "b\xC3",
       "\"a\\ufffdb\\ufffd\""},
      {"\xED\xA0\x80", "\"\\ufffd\\ufffd\\ufffd\""},  // a UTF-16 surrogate
  };
  CheckEach(json, cases);
}

TEST_CASE("ShortestDouble round-trips and is valid JSON") {
  for (const double v : {0.0, 1.0, 0.1, 1.0 / 3.0, 1e21, 1e-7, 123456789.123, 5e-324,
                         std::numeric_limits<double>::max(), 11.75 / 10.25}) {
    const std::string text = ShortestDouble(v);
    INFO(text);
    double back = 0;
    std::from_chars(text.data(), text.data() + text.size(), back);
    CHECK(back == v);
    const std::optional<JsonValue> doc = ParseJson(text);
    REQUIRE(doc.has_value());
    CHECK(doc->type == JsonValue::Type::kNumber);
  }
  CHECK(ShortestDouble(10) == "10");
  CHECK(ShortestDouble(0.1) == "0.1");
}

TEST_CASE("CsvField quotes only when needed") {
  const std::vector<TextCase> cases = {
      {"plain key", "plain key"}, {"a,b", "\"a,b\""}, {"q\"", "\"q\"\"\""},
      {"l\n", "\"l\n\""},         {"r\r", "\"r\r\""},
  };
  CheckEach(CsvField, cases);
}

TEST_CASE("QuoteForMessage escapes and shortens") {
  const std::vector<TextCase> cases = {
      {"abc", "\"abc\""},
      {"a\"b\\", "\"a\\\"b\\\\\""},
      {"\n\x01\xFF", "\"\\n\\x01\\xff\""},
      {"\xC3\xA9", "\"\xC3\xA9\""},
      {std::string(100, 'x'), "\"" + std::string(60, 'x') + "...\""},
  };
  CheckEach(QuoteForMessage, cases);
}

TEST_CASE("DisplayText counts code points and cuts with an ellipsis") {
  size_t columns = 0;
  CHECK(DisplayText("abc", 3, &columns) == "abc");
  CHECK(columns == 3);
  CHECK(DisplayText("abcd", 3, &columns) == "ab…");
  CHECK(columns == 3);
  CHECK(DisplayText("\xC3\xA9\xC3\xA9", 2, &columns) == "\xC3\xA9\xC3\xA9");
  CHECK(columns == 2);
  CHECK(DisplayText("a\nb", 10, &columns) == "a\\nb");
  CHECK(columns == 4);
  CHECK(DisplayText("\xFF", 10, &columns) == "\\xff");
  CHECK(columns == 4);
}

}  // namespace
}  // namespace cacheroute::client
