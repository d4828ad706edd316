// Tests for the rates-file parser and the string-key → planner-id mapping (client/rates_csv.h).
#include "client/rates_csv.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "planner/plan_builder.h"
#include "tests/support/require_ok.h"
#include "tests/support/text_cases.h"

namespace cacheroute::client {
namespace {

using cacheroute::testing::CheckEach;

RatesCsv ParseOk(const std::string& text) {
  return cacheroute::testing::RequireOk(ParseRatesCsv(text));
}

std::string ParseError(const std::string& text) {
  absl::StatusOr<RatesCsv> csv = ParseRatesCsv(text);
  REQUIRE_FALSE(csv.ok());
  CHECK(csv.status().code() == absl::StatusCode::kInvalidArgument);
  return std::string(csv.status().message());
}

TEST_CASE("parses keys and rates in file order") {
  const RatesCsv csv = ParseOk("key,rate\nb,2.5\na,1e3\nc,0\nd,.5\n");
  CHECK(csv.keys == std::vector<std::string>{"b", "a", "c", "d"});
  CHECK(csv.rates == std::vector<double>{2.5, 1000.0, 0.0, 0.5});
}

TEST_CASE("header only is an empty table") {
  const RatesCsv csv = ParseOk("key,rate\n");
  CHECK(csv.keys.empty());
  CHECK(csv.rates.empty());
}

TEST_CASE("tolerates CRLF, a BOM, blank lines and a missing final newline") {
  const RatesCsv csv = ParseOk("\xEF\xBB\xBF\r\n\nkey,rate\r\n\r\nx,1\r\n\n\ny,2\r\n\r\nz,3");
  CHECK(csv.keys == std::vector<std::string>{"x", "y", "z"});
  CHECK(csv.rates == std::vector<double>{1, 2, 3});
}

TEST_CASE("a lone CR at the very end is a line end") {
  const RatesCsv csv = ParseOk("key,rate\nx,1\r");
  CHECK(csv.rates == std::vector<double>{1});
}

TEST_CASE("RFC 4180 quoted keys") {
  const RatesCsv csv = ParseOk(
      "key,rate\n"
      "\"a,b\",1\n"
      "\"say \"\"hi\"\"\",2\n"
      "\"two\nlines\",3\r\n"
      "\"\"\"\",4\n"
      "\"crlf\r\ninside\",5\r\n"
      "\"r\",\"6\"\n");
  CHECK(csv.keys ==
        std::vector<std::string>{"a,b", "say \"hi\"", "two\nlines", "\"", "crlf\r\ninside", "r"});
  CHECK(csv.rates == std::vector<double>{1, 2, 3, 4, 5, 6});
}

TEST_CASE("keys are kept byte for byte, spaces around rates are trimmed") {
  const RatesCsv csv = ParseOk("key,rate\n a ,  1.5 \n\xC3\xA9t\xC3\xA9,\t2\t\r\n");
  CHECK(csv.keys == std::vector<std::string>{" a ", "\xC3\xA9t\xC3\xA9"});
  CHECK(csv.rates == std::vector<double>{1.5, 2});
}

TEST_CASE("negative zero becomes zero") {
  const RatesCsv csv = ParseOk("key,rate\nx,-0\n");
  CHECK(csv.rates[0] == 0.0);
  CHECK_FALSE(std::signbit(csv.rates[0]));
}

TEST_CASE("header errors") {
  CheckEach(ParseError,
            {
                {"foo,bar\nx,1\n", "line 1: expected header 'key,rate', got \"foo,bar\""},
                {"\n\nKey,Rate\n", "line 3: expected header 'key,rate', got \"Key,Rate\""},
                {"x,1\n", "line 1: expected header 'key,rate', got \"x,1\""},
                {"key,rate,extra\n", "line 1: expected header 'key,rate', got \"key,rate,extra\""},
                {"", "line 1: expected header 'key,rate', got end of input"},
                {"\r\n\n", "line 3: expected header 'key,rate', got end of input"},
            });
}

TEST_CASE("size columns: reusable and prompt tokens, blank when not measured") {
  const RatesCsv csv = ParseOk(
      "key,rate,reusable_tokens,prompt_tokens\n"
      "a,2,300,1200\n"
      "b,1,,\n"
      "c,0.5, 50 ,\n");
  REQUIRE(csv.tokens.size() == 3);
  CHECK(csv.tokens[0].reusable == 300);
  CHECK(csv.tokens[0].prompt == 1200);
  CHECK(csv.tokens[1].reusable == planner::kUnmeasured);
  CHECK(csv.tokens[1].prompt == planner::kUnmeasured);
  CHECK(csv.tokens[2].reusable == 50);
  CHECK(csv.tokens[2].prompt == planner::kUnmeasured);
  const RatesCsv three = ParseOk("key,rate,reusable_tokens\nx,1,40\n");
  REQUIRE(three.tokens.size() == 1);
  CHECK(three.tokens[0].reusable == 40);
  // Without the columns there are no sizes; RankKeys keeps them in file order.
  CHECK(ParseOk("key,rate\nx,1\n").tokens.empty());
  const RankedRates ranked = RankKeys(ParseOk("key,rate,reusable_tokens\nz,1,7\ny,2,9\n"));
  REQUIRE(ranked.tokens.size() == 2);
  CHECK(ranked.tokens[0].reusable == 7);
  CHECK(ranked.rates[0].key == 1);  // "z" ranks after "y"
}

TEST_CASE("size errors name the line, the field and the value") {
  CheckEach(
      ParseError,
      {
          {"key,rate,reusable_tokens\na,1,-5\n", "line 2: field 'reusable_tokens': -5 is negative"},
          {"key,rate,reusable_tokens,prompt_tokens\na,1,10,abc\n",
           "line 2: field 'prompt_tokens': \"abc\" is not a number"},
          {"key,rate,reusable_tokens,prompt_tokens\na,1,10,5\n",
           "line 2: field 'reusable_tokens': 10 is more than prompt_tokens (5)"},
          {"key,rate,reusable_tokens,prompt_tokens\na,1,,5\n",
           "line 2: field 'prompt_tokens': given without reusable_tokens"},
          {"key,rate,reusable_tokens\na,1\n",
           "line 2: expected 3 fields (key,rate,reusable_tokens), got 2"},
          {"key,rate,reusable_token\na,1,2\n",
           "line 1: expected header 'key,rate', 'key,rate,reusable_tokens' or "
           "'key,rate,reusable_tokens,prompt_tokens', got \"key,rate,reusable_token\""},
      });
}

TEST_CASE("rate errors name the line, the field and the value") {
  CheckEach(ParseError,
            {
                {"key,rate\na,1\n\nb,abc\n", "line 4: field 'rate': \"abc\" is not a number"},
                {"key,rate\na,-3\n", "line 2: field 'rate': -3 is negative"},
                {"key,rate\na,-inf\n", "line 2: field 'rate': -inf is infinite"},
                {"key,rate\na,inf\n", "line 2: field 'rate': inf is infinite"},
                {"key,rate\na,Infinity\n", "line 2: field 'rate': Infinity is infinite"},
                {"key,rate\na,nan\n", "line 2: field 'rate': nan is NaN"},
                {"key,rate\na,NaN\n", "line 2: field 'rate': NaN is NaN"},
                {"key,rate\na,1e999\n", "line 2: field 'rate': 1e999 is out of range for a double"},
                {"key,rate\na,1.5x\n", "line 2: field 'rate': \"1.5x\" is not a number"},
                {"key,rate\na,+1\n", "line 2: field 'rate': \"+1\" is not a number"},
                {"key,rate\na,0x10\n", "line 2: field 'rate': \"0x10\" is not a number"},
                {"key,rate\na,1 2\n", "line 2: field 'rate': \"1 2\" is not a number"},
                {"key,rate\na,\n", "line 2: field 'rate': empty rate"},
                {"key,rate\na,  \r\n", "line 2: field 'rate': empty rate"},
            });
}

TEST_CASE("a long bad value is shortened in the message") {
  const std::string message = ParseError(absl::StrCat("key,rate\na,", std::string(500, 'z')));
  CHECK(message.size() < 120);
  CHECK(message.find("...\" is not a number") != std::string::npos);
}

TEST_CASE("key errors") {
  CheckEach(ParseError, {
                            {"key,rate\na,1\n\n\n\n\n\n,2\n", "line 8: field 'key': empty key"},
                            {"key,rate\n\"\",2\n", "line 2: field 'key': empty key"},
                            {"key,rate\nbar,1\nfoo,1\nx,2\n\nfoo,3\n",
                             "line 6: field 'key': duplicate key \"foo\" (first on line 3)"},
                            {"key,rate\n\"a\nb\",1\n\"a\nb\",2\n",
                             "line 4: field 'key': duplicate key \"a\\nb\" (first on line 2)"},
                            {"key,rate\n\xFF\xFE,1\n",
                             "line 2: field 'key': \"\\xff\\xfe\" is not valid UTF-8"},
                            {"key,rate\n\xC0\xAF,1\n",  // overlong '/'
                             "line 2: field 'key': \"\\xc0\\xaf\" is not valid UTF-8"},
                        });
}

TEST_CASE("wrong number of fields") {
  CheckEach(ParseError, {
                            {"key,rate\nonly\n", "line 2: expected 2 fields (key,rate), got 1"},
                            {"key,rate\na,1,2\n", "line 2: expected 2 fields (key,rate), got 3"},
                            {"key,rate\na,1,000\n", "line 2: expected 2 fields (key,rate), got 3"},
                            {"key,rate\na,1,\n", "line 2: expected 2 fields (key,rate), got 3"},
                        });
}

TEST_CASE("quoting errors") {
  CheckEach(
      ParseError,
      {
          {"key,rate\n\"abc,1\nx,2\n", "line 2: field 'key': unterminated quoted field"},
          {"key,rate\n\"ab\"c,1\n",
           "line 2: field 'key': unexpected \"c\" after the closing quote"},
          {"key,rate\nab\"c,1\n",
           "line 2: field 'key': quote inside an unquoted field; quote the whole field and double "
           "the quote (\"\")"},
          {"key,rate\nx,\"1\n", "line 2: field 'rate': unterminated quoted field"},
      });
}

TEST_CASE("line numbers count the lines inside quoted fields") {
  CheckEach(
      ParseError,
      {
          {"key,rate\n\"a\nb\nc\",1\nd,x\n", "line 5: field 'rate': \"x\" is not a number"},
          {"key,rate\r\n\"a\r\nb\",1\r\n\r\nd,-1\r\n", "line 5: field 'rate': -1 is negative"},
      });
}

TEST_CASE("the first error in file order is reported") {
  CheckEach(ParseError,
            {
                {"key,rate\na,1\na,2\nb,x\n",
                 "line 3: field 'key': duplicate key \"a\" (first on line 2)"},
                {"key,rate\na,1\nb,x\na,2\n", "line 3: field 'rate': \"x\" is not a number"},
            });
}

TEST_CASE("many lines parse, with distinct keys sharing long prefixes") {
  constexpr int kLines = 128'824;
  std::string text = "key,rate\n";
  for (int i = 0; i < kLines; ++i) {
    absl::StrAppend(&text, "tenant-", i % 977, "/prefix-", i, ",", i % 1000, ".25\n");
  }
  const RatesCsv csv = ParseOk(text);
  REQUIRE(csv.keys.size() == kLines);
  CHECK(csv.keys[12345] == "tenant-621/prefix-12345");
  CHECK(csv.rates[12345] == 345.25);
  CHECK(csv.keys.back() == absl::StrCat("tenant-", (kLines - 1) % 977, "/prefix-", kLines - 1));

  absl::StrAppend(&text, "tenant-5/prefix-5,1\n");
  CHECK(ParseError(text) == absl::StrCat("line ", kLines + 2,
                                         ": field 'key': duplicate key \"tenant-5/prefix-5\" "
                                         "(first on line 7)"));
}

TEST_CASE("key ids are byte-wise ranks") {
  RatesCsv csv;
  csv.keys = {"b", "a", "\xC3\xA9", "B", "ab", "a b"};
  csv.rates = {1, 2, 3, 4, 5, 6};
  const RankedRates ranked = RankKeys(csv);
  CHECK(ranked.key_names == std::vector<std::string>{"B", "a", "a b", "ab", "b", "\xC3\xA9"});
  REQUIRE(ranked.rates.size() == 6);
  const std::vector<uint64_t> expected_ids = {4, 1, 5, 0, 3, 2};
  for (size_t i = 0; i < csv.keys.size(); ++i) {
    CHECK(ranked.rates[i].key == expected_ids[i]);
    CHECK(ranked.rates[i].rate == csv.rates[i]);
    CHECK(ranked.key_names[ranked.rates[i].key] == csv.keys[i]);
  }
}

TEST_CASE("equal rates are admitted in key order, whatever the file order") {
  const RatesCsv csv = ParseOk("key,rate\nkiwi,5\nfig,5\napple,5\nbanana,1\ncherry,5\n");
  const RankedRates ranked = RankKeys(csv);
  // C = R·W = 3 slots and every k_b is 1: the three smallest of the four rate-5 keys get in.
  absl::StatusOr<planner::Plan> plan = planner::BuildPlan(
      ranked.rates, {.destinations = 3, .q_cap = 10, .slots_per_destination = 1});
  REQUIRE(plan.ok());
  std::vector<std::string> admitted;
  for (size_t i = 0; i < plan->size(); ++i) admitted.push_back(ranked.key_names[plan->key(i)]);
  CHECK(admitted == std::vector<std::string>{"apple", "cherry", "fig"});
}

}  // namespace
}  // namespace cacheroute::client
