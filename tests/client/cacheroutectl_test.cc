// End-to-end tests of the cacheroutectl binary: real files in a fresh temporary directory, real
// process, checked exit codes, stdout and stderr.
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "planner/algorithm.h"
#include "tests/support/json_reader.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"

#ifndef CACHEROUTECTL_PATH
#error "CACHEROUTECTL_PATH must name the cacheroutectl binary"
#endif

namespace cacheroute::client {
namespace {

using cacheroute::testing::TempDir;
using testing::JsonValue;
using testing::ParseJson;

constexpr char kFiveKeys[] =
    "key,rate\n"
    "alpha,10\n"
    "beta,6\n"
    "gamma,3\n"
    "delta,1\n"
    "epsilon,0.5\n";

using Result = cacheroute::testing::CommandResult;

// Runs cacheroutectl with `args`, standard input from `stdin_text` (empty input if unset).
Result Run(const std::vector<std::string>& args, const std::string& stdin_text = "") {
  return cacheroute::testing::RunCommand(CACHEROUTECTL_PATH, args, stdin_text);
}

// The paper's Algorithm 1, whose plans of kFiveKeys the cases below work out by hand (the default
// algorithm's differ: "--algorithm" below).
std::vector<std::string> PlanArgs(const std::string& rates, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"plan",
                                   "--rates",
                                   rates,
                                   "--destinations",
                                   "2",
                                   "--q-cap",
                                   "8",
                                   "--slots-per-destination",
                                   "2",
                                   "--algorithm",
                                   "cacheroute-paper"};
  args.insert(args.end(), extra.begin(), extra.end());
  return args;
}

// Checks the shape of a bad-input failure: exit 2, nothing on stdout, one line on stderr that
// carries the prefix and every one of `mentions`.
void CheckBadInput(const Result& result, const std::vector<std::string>& mentions) {
  INFO("stderr: " << result.err);
  CHECK(result.exit_code == 2);
  CHECK(result.out.empty());
  CHECK(result.err.rfind("cacheroutectl: error: ", 0) == 0);
  CHECK(result.err.find('\n') == result.err.size() - 1);
  for (const std::string& mention : mentions) CHECK(result.err.find(mention) != std::string::npos);
}

TEST_CASE("table output by default") {
  TempDir dir("cacheroutectl_test");
  const Result result = Run(PlanArgs(dir.Write("rates.csv", kFiveKeys)));
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  CHECK(result.err.empty());
  CHECK(result.out.find("  admitted keys          3  (2 not admitted)\n") != std::string::npos);
  CHECK(result.out.find("     1  alpha    10  2  0,1\n") != std::string::npos);
  CHECK(result.out.find("◀ max") != std::string::npos);
}

TEST_CASE("json output is one valid object with R loads") {
  TempDir dir("cacheroutectl_test");
  const Result result = Run(PlanArgs(dir.Write("rates.csv", kFiveKeys), {"--format", "json"}));
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  const std::optional<JsonValue> doc = ParseJson(result.out);
  REQUIRE(doc.has_value());
  REQUIRE(doc->type == JsonValue::Type::kObject);
  const JsonValue* loads = doc->Find("loads");
  REQUIRE(loads != nullptr);
  REQUIRE(loads->array.size() == 2);
  CHECK(loads->array[0].number == 11.75);
  CHECK(loads->array[1].number == 8.75);

  const JsonValue& assignments = *doc->Find("assignments");
  REQUIRE(assignments.array.size() == 3);
  CHECK(assignments.array[0].Find("key")->string == "alpha");
  CHECK(assignments.array[0].Find("destinations")->array.size() == 2);
  CHECK(assignments.array[2].Find("key")->string == "gamma");

  const JsonValue& stats = *doc->Find("stats");
  CHECK(stats.Find("admitted_keys")->number == 3);
  CHECK(stats.Find("slots_used")->number == 4);
  CHECK(stats.Find("slot_capacity")->number == 4);
  CHECK(stats.Find("cold_tail_rate")->number == 1.5);
  const double build_seconds = stats.Find("build_seconds")->number;
  CHECK(build_seconds >= 0);
  CHECK(build_seconds < 60);
}

TEST_CASE("csv output") {
  TempDir dir("cacheroutectl_test");
  const Result result = Run(PlanArgs(dir.Write("rates.csv", kFiveKeys), {"--format", "csv"}));
  REQUIRE(result.exit_code == 0);
  CHECK(result.out ==
        "key,rate,k,destinations\n"
        "alpha,10,2,0;1\n"
        "beta,6,1,0\n"
        "gamma,3,1,1\n");
}

TEST_CASE("--rates - reads standard input") {
  TempDir dir("cacheroutectl_test");
  const Result from_file = Run(PlanArgs(dir.Write("rates.csv", kFiveKeys), {"--format", "csv"}));
  const Result from_stdin = Run(PlanArgs("-", {"--format", "csv"}), kFiveKeys);
  REQUIRE(from_stdin.exit_code == 0);
  CHECK(from_stdin.out == from_file.out);

  const Result json = Run(PlanArgs("-", {"--format", "json"}), kFiveKeys);
  REQUIRE(json.exit_code == 0);
  const std::optional<JsonValue> doc = ParseJson(json.out);
  REQUIRE(doc.has_value());
  CHECK(doc->Find("loads")->array.size() == 2);
}

TEST_CASE("bad CSV from standard input names <stdin> and the line") {
  CheckBadInput(Run(PlanArgs("-"), "key,rate\na,1\nb,oops\n"),
                {"<stdin>: line 3: field 'rate': \"oops\" is not a number"});
}

TEST_CASE("CRLF, BOM and quoted keys in a real file") {
  TempDir dir("cacheroutectl_test");
  const std::string rates =
      dir.Write("rates.csv", "\xEF\xBB\xBFkey,rate\r\n\"a,\"\"b\"\"\",5\r\n\r\nc,1\r\n");
  const Result result = Run(PlanArgs(rates, {"--format", "csv"}));
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  CHECK(result.out == "key,rate,k,destinations\n\"a,\"\"b\"\"\",5,1,0\nc,1,1,1\n");
}

TEST_CASE("--top limits the table") {
  TempDir dir("cacheroutectl_test");
  const Result result = Run(PlanArgs(dir.Write("rates.csv", kFiveKeys), {"--top", "1"}));
  REQUIRE(result.exit_code == 0);
  CHECK(result.out.find("Hottest 1 of 3 admitted keys") != std::string::npos);
  CHECK(result.out.find("  beta ") == std::string::npos);
}

TEST_CASE("--help succeeds") {
  const Result result = Run({"plan", "--help"});
  CHECK(result.exit_code == 0);
  CHECK(result.out.find("--slots-per-destination") != std::string::npos);
  CHECK(result.err.empty());
}

TEST_CASE("usage errors exit 2 with a one-line message") {
  TempDir dir("cacheroutectl_test");
  const std::string rates = dir.Write("rates.csv", kFiveKeys);
  CheckBadInput(Run({}), {"subcommand"});
  CheckBadInput(Run({"frobnicate"}), {});
  CheckBadInput(
      Run({"plan", "--destinations", "2", "--q-cap", "8", "--slots-per-destination", "2"}),
      {"--rates"});
  CheckBadInput(Run({"plan", "--rates", rates, "--q-cap", "8", "--slots-per-destination", "2"}),
                {"--destinations"});
  CheckBadInput(Run(PlanArgs(rates, {"--frobnicate"})), {"--frobnicate"});
  CheckBadInput(Run(PlanArgs(rates, {"stray"})), {"stray"});
}

TEST_CASE("bad flag values exit 2 naming the flag and the value") {
  TempDir dir("cacheroutectl_test");
  const std::string rates = dir.Write("rates.csv", kFiveKeys);
  const auto run = [&](const std::string& destinations, const std::string& q_cap,
                       const std::string& slots, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {"plan",       "--rates", rates, "--destinations",
                                     destinations, "--q-cap", q_cap, "--slots-per-destination",
                                     slots};
    args.insert(args.end(), extra.begin(), extra.end());
    return Run(args);
  };
  CheckBadInput(run("0", "8", "2"), {"--destinations", "\"0\""});
  CheckBadInput(run("-3", "8", "2"), {"--destinations", "\"-3\""});
  CheckBadInput(run("two", "8", "2"), {"--destinations", "\"two\""});
  CheckBadInput(run("4294967296", "8", "2"), {"--destinations", "\"4294967296\""});
  CheckBadInput(run("2", "-1", "2"), {"--q-cap", "\"-1\""});
  CheckBadInput(run("2", "0", "2"), {"--q-cap", "\"0\""});
  CheckBadInput(run("2", "nan", "2"), {"--q-cap", "\"nan\""});
  CheckBadInput(run("2", "inf", "2"), {"--q-cap", "\"inf\""});
  CheckBadInput(run("2", "8", "0"), {"--slots-per-destination", "\"0\""});
  CheckBadInput(run("2", "8", "2", {"--format", "xml"}), {"--format", "\"xml\""});
  CheckBadInput(run("2", "8", "2", {"--top", "-1"}), {"--top", "\"-1\""});
}

TEST_CASE("--algorithm: the planner service's default, or Algorithm 1 as published") {
  TempDir dir("cacheroutectl_test");
  const std::string rates = dir.Write("rates.csv", kFiveKeys);
  const std::vector<std::string> base = {"plan", "--rates",  rates, "--destinations",
                                         "2",    "--q-cap",  "8",   "--slots-per-destination",
                                         "2",    "--format", "csv"};
  const auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = base;
    args.insert(args.end(), extra.begin(), extra.end());
    return Run(args);
  };
  // cacheroute, the default: the per-assignment cap is min(q_cap, 0.5 × 20.5 / 2) = 5.125, so
  // beta (6) is split too and the four slots go to alpha and beta.
  const Result by_default = with({});
  INFO("stderr: " << by_default.err);
  REQUIRE(by_default.exit_code == 0);
  CHECK(by_default.out ==
        "key,rate,k,destinations\n"
        "alpha,10,2,0;1\n"
        "beta,6,2,0;1\n");
  const Result named =
      with({"--algorithm", std::string(planner::AlgorithmName(planner::kDefaultAlgorithm))});
  REQUIRE(named.exit_code == 0);
  CHECK(named.out == by_default.out);
  CHECK(with({"--algorithm", "cacheroute"}).out == by_default.out);
  // The paper's fixed q_cap splits only alpha.
  const Result paper = with({"--algorithm", "cacheroute-paper"});
  REQUIRE(paper.exit_code == 0);
  CHECK(paper.out ==
        "key,rate,k,destinations\n"
        "alpha,10,2,0;1\n"
        "beta,6,1,0\n"
        "gamma,3,1,1\n");
  // --help names the default.
  const Result help = Run({"plan", "--help"});
  CHECK(help.out.find("--algorithm NAME=cacheroute ") != std::string::npos);

  CheckBadInput(with({"--algorithm", "paper"}), {"--algorithm", "\"paper\"", "cacheroute-paper"});
  CheckBadInput(with({"--algorithm", ""}), {"--algorithm", "\"\""});
  // Byte-aware planning is cacheroute's, as the planner service's config says.
  const std::string sizes = dir.Write("sizes.csv", "key,rate,reusable_tokens\na,1,100\n");
  CheckBadInput(Run({"plan", "--rates", sizes, "--destinations", "2", "--q-cap", "8",
                     "--kv-budget-tokens", "1000", "--algorithm", "cacheroute-paper"}),
                {"--kv-budget-tokens", "\"cacheroute-paper\" plans by slots"});
}

TEST_CASE("byte-aware planning from a rates file with sizes") {
  TempDir dir("cacheroutectl_test");
  const std::string rates = dir.Write("sizes.csv",
                                      "key,rate,reusable_tokens,prompt_tokens\n"
                                      "chat,10,200,1200\n"
                                      "agent,2,30000,31000\n"
                                      "rag,0.5,90000,91000\n"
                                      "new,1,,\n");
  const std::vector<std::string> base = {"plan",  "--rates",  rates, "--destinations",
                                         "2",     "--q-cap",  "8",   "--kv-budget-tokens",
                                         "40000", "--format", "csv"};
  const Result result = Run(base);
  INFO("stderr: " << result.err);
  REQUIRE(result.exit_code == 0);
  // The fleet budget (80,000 tokens) admits agent (60,000 tokens/s saved) and chat (2,000); rag's
  // 90,000-token prefix does not fit; "new" is planned with the measured keys' means.
  CHECK(result.out.rfind("key,rate,k,destinations,reusable_tokens,saved_work,work\n", 0) == 0);
  CHECK(result.out.find("\nagent,2,1,") != std::string::npos);
  CHECK(result.out.find("\nchat,10,") != std::string::npos);
  CHECK(result.out.find("rag") == std::string::npos);
  const Result table =
      Run({"plan", "--rates", rates, "--destinations", "2", "--q-cap", "8", "--kv-budget-tokens",
           "40000", "--kv-capacity-tokens", "80000", "--request-overhead-tokens", "100"});
  REQUIRE(table.exit_code == 0);
  CHECK(table.out.find("saved work") != std::string::npos);
  CHECK(table.out.find("cache turnover") != std::string::npos);
}

TEST_CASE("byte-aware usage errors exit 2 naming the flag") {
  TempDir dir("cacheroutectl_test");
  const std::string plain = dir.Write("rates.csv", kFiveKeys);
  const std::string unmeasured = dir.Write("unmeasured.csv", "key,rate,reusable_tokens\na,1,\n");
  const std::vector<std::string> base = {"plan", "--rates", plain, "--destinations",
                                         "2",    "--q-cap", "8"};
  const auto with = [&](std::vector<std::string> extra, const std::string& file = "") {
    std::vector<std::string> args = base;
    if (!file.empty()) args[2] = file;
    args.insert(args.end(), extra.begin(), extra.end());
    return Run(args);
  };
  CheckBadInput(with({}), {"--slots-per-destination", "--kv-budget-tokens"});
  CheckBadInput(with({"--kv-budget-tokens", "100"}), {"reusable_tokens column"});
  CheckBadInput(with({"--kv-budget-tokens", "100"}, unmeasured), {"at least one key"});
  CheckBadInput(with({"--kv-budget-tokens", "0"}), {"--kv-budget-tokens", "\"0\""});
  CheckBadInput(with({"--slots-per-destination", "2", "--kv-capacity-tokens", "10"}),
                {"--kv-capacity-tokens", "needs --kv-budget-tokens"});
  CheckBadInput(with({"--kv-budget-tokens", "100", "--request-overhead-tokens", "-1"}, unmeasured),
                {"--request-overhead-tokens", "\"-1\""});
}

TEST_CASE("unreadable rates files exit 2") {
  TempDir dir("cacheroutectl_test");
  const std::string missing = (dir.path() / "missing.csv").string();
  CheckBadInput(Run(PlanArgs(missing)), {"--rates", missing, "No such file or directory"});
  CheckBadInput(Run(PlanArgs(dir.path().string())), {"--rates", "Is a directory"});
}

TEST_CASE("CSV errors exit 2 and never print a partial document") {
  TempDir dir("cacheroutectl_test");
  const std::string bad = dir.Write("bad.csv", "key,rate\na,1\nb,2\nc,-3\n");
  CheckBadInput(Run(PlanArgs(bad, {"--format", "json"})),
                {"bad.csv: line 4: field 'rate': -3 is negative"});
  const std::string dup = dir.Write("dup.csv", "key,rate\na,1\nb,2\na,3\n");
  CheckBadInput(Run(PlanArgs(dup, {"--format", "json"})),
                {"line 4: field 'key': duplicate key \"a\" (first on line 2)"});
  const std::string header = dir.Write("header.csv", "foo,bar\n");
  CheckBadInput(Run(PlanArgs(header)), {"line 1: expected header 'key,rate', got \"foo,bar\""});
}

TEST_CASE("rates whose sum overflows are rejected as bad input") {
  TempDir dir("cacheroutectl_test");
  const std::string huge = dir.Write("huge.csv", "key,rate\na,1e308\nb,1e308\n");
  CheckBadInput(Run(PlanArgs(huge, {"--format", "json"})), {"--rates", "sum"});
}

TEST_CASE("an empty table plans to nothing") {
  TempDir dir("cacheroutectl_test");
  const Result result = Run(PlanArgs(dir.Write("empty.csv", "key,rate\n"), {"--format", "json"}));
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  const std::optional<JsonValue> doc = ParseJson(result.out);
  REQUIRE(doc.has_value());
  CHECK(doc->Find("assignments")->array.empty());
  CHECK(doc->Find("loads")->array.size() == 2);
}

}  // namespace
}  // namespace cacheroute::client
