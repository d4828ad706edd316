// Tests for tools/eval/workload/mooncake and json_line: reading Mooncake-format JSONL traces (keys
// from hash ids, errors naming the line and field), rescaling, the write/read round trip, and the
// trace statistics (distinct keys, token-weighted prefix reuse). Every file is written by the test.
#include <catch2/catch.hpp>
#include <sstream>
#include <string>

#include "tests/support/temp_dir.h"
#include "tools/eval/workload/json_line.h"
#include "tools/eval/workload/mooncake.h"
#include "tools/eval/workload/workload.h"
#include "tools/eval/workload/workload_stats.h"

namespace cacheroute::workload {
namespace {

using ::cacheroute::testing::TempDir;

absl::StatusOr<Workload> Parse(const std::string& text, TraceReadOptions options = {}) {
  std::istringstream in(text);
  return ReadMooncakeTrace(in, options, "t.jsonl");
}

std::string ErrorOf(const std::string& text) {
  const absl::StatusOr<Workload> w = Parse(text);
  REQUIRE_FALSE(w.ok());
  CHECK(w.status().code() == absl::StatusCode::kInvalidArgument);
  return std::string(w.status().message());
}

constexpr char kTrace[] =
    R"({"timestamp": 0, "input_length": 1200, "output_length": 50, "hash_ids": [0, 1, 2]})"
    "\n"
    R"({"timestamp": 3000, "input_length": 700, "output_length": 7, "hash_ids": [0, 1]})"
    "\n\n"
    R"({"timestamp": 3000, "input_length": 100, "output_length": 3, "hash_ids": [0]})"
    "\n"
    R"({"timestamp": 9000, "input_length": 1100, "output_length": 9, "hash_ids": [0, 4, 5]})"
    "\n";

TEST_CASE("Reads the Mooncake fields and derives keys from the first hash ids") {
  const absl::StatusOr<Workload> w = Parse(kTrace);
  REQUIRE(w.ok());
  CHECK(w->block_size == 512);
  REQUIRE(w->requests.size() == 4);
  const Request& r = w->requests[0];
  CHECK(r.arrival_s == 0);
  CHECK(r.input_length == 1200);
  CHECK(r.output_length == 50);
  CHECK(r.hash_ids == std::vector<uint64_t>{0, 1, 2});
  CHECK(r.key == "h0-1");  // two blocks by default
  CHECK(w->requests[1].arrival_s == 3.0);
  CHECK(w->requests[2].key == "h0");  // a request shorter than the key takes what it has
  CHECK(w->requests[3].key == "h0-4");
  CHECK(w->requests[0].thread_id != w->requests[1].thread_id);
  CHECK(w->requests[1].turn == 1);

  const absl::StatusOr<Workload> one = Parse(kTrace, {.block_size = 16, .key_blocks = 1});
  REQUIRE(one.ok());
  CHECK(one->block_size == 16);
  for (const Request& q : one->requests) CHECK(q.key == "h0");
  const absl::StatusOr<Workload> three = Parse(kTrace, {.key_blocks = 3});
  REQUIRE(three.ok());
  CHECK(three->requests[0].key == "h0-1-2");
  CHECK(KeyFromBlocks(std::vector<uint64_t>{12, 873, 5}, 2) == "h12-873");
}

TEST_CASE("Trace statistics: keys, rate and token-weighted prefix reuse") {
  const absl::StatusOr<Workload> w = Parse(kTrace);
  REQUIRE(w.ok());
  const WorkloadStats s = MeasureWorkload(*w);
  CHECK(s.requests == 4);
  CHECK(s.duration_s == 9.0);
  CHECK(s.qps == Approx(4.0 / 9.0));
  CHECK(s.keys_with_requests == 3);  // h0-1 twice, h0, h0-4
  CHECK(s.largest_key_requests == 2);
  CHECK(s.mean_input_tokens == Approx(3100.0 / 4));
  // Reused: request 2 has blocks 0,1 (700 tokens, all of them); request 3 block 0 (its 100
  // tokens); request 4 block 0 (512 tokens). Total input 3100.
  CHECK(s.prefix_reuse == Approx((700.0 + 100 + 512) / 3100));
  CHECK(std::isnan(s.few_shot_break_rate));
  CHECK(std::isnan(s.share_before_current_turn));
}

TEST_CASE("Parse errors name the line and the field") {
  const std::string ok =
      R"({"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]})"
      "\n";
  std::string e = ErrorOf(ok + "\n" + R"({"timestamp": 1, "input_length": 10,)" + "\n");
  CHECK_THAT(e, Catch::Contains("t.jsonl line 3") && Catch::Contains("malformed JSON"));
  e = ErrorOf(ok + R"({"timestamp": 1, "output_length": 1, "hash_ids": []})");
  CHECK_THAT(e, Catch::Contains("line 2") && Catch::Contains("\"input_length\"") &&
                    Catch::Contains("missing"));
  e = ErrorOf(R"({"timestamp": 1, "input_length": -5, "output_length": 1, "hash_ids": []})");
  CHECK_THAT(
      e, Catch::Contains("line 1") && Catch::Contains("\"input_length\"") && Catch::Contains("-5"));
  e = ErrorOf(R"({"timestamp": "soon", "input_length": 5, "output_length": 1, "hash_ids": []})");
  CHECK_THAT(e, Catch::Contains("\"timestamp\"") && Catch::Contains("\"soon\""));
  e = ErrorOf(R"({"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": 7})");
  CHECK_THAT(e, Catch::Contains("\"hash_ids\"") && Catch::Contains("array"));
  e = ErrorOf(R"({"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": [1, "x"]})");
  CHECK_THAT(e, Catch::Contains("\"hash_ids\"") && Catch::Contains("element 1"));
  e = ErrorOf(
      R"({"timestamp": 1, "input_length": 5000000000, "output_length": 1, "hash_ids": []})");
  CHECK_THAT(e, Catch::Contains("\"input_length\"") && Catch::Contains("5000000000"));
  e = ErrorOf(R"([1, 2, 3])");
  CHECK_THAT(e, Catch::Contains("line 1") && Catch::Contains("object"));
  e = ErrorOf(
      R"({"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": [], "key": 3})");
  CHECK_THAT(e, Catch::Contains("\"key\""));
  e = ErrorOf(
      R"({"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [], "block_size": 16})"
      "\n"
      R"({"timestamp": 1, "input_length": 5, "output_length": 1, "hash_ids": [], "block_size": 32})");
  CHECK_THAT(e, Catch::Contains("line 2") && Catch::Contains("\"block_size\""));
  e = ErrorOf("{\"timestamp\": 1, \"input_length\": 5} trailing");
  CHECK_THAT(e, Catch::Contains("line 1") && Catch::Contains("column"));

  const absl::StatusOr<Workload> missing = ReadMooncakeTraceFile("/nonexistent/t.jsonl", {});
  CHECK(missing.status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("Lines out of order are sorted by arrival; unknown fields are ignored") {
  const absl::StatusOr<Workload> w = Parse(
      R"({"timestamp": 5000, "input_length": 1, "output_length": 1, "hash_ids": [9], "x": {"y": [null, true]}})"
      "\n"
      R"({"timestamp": 1000.5, "input_length": 2, "output_length": 1, "hash_ids": [8]})"
      "\r\n");
  REQUIRE(w.ok());
  REQUIRE(w->requests.size() == 2);
  CHECK(w->requests[0].arrival_s == Approx(1.0005));
  CHECK(w->requests[1].hash_ids[0] == 9);
}

TEST_CASE("Rescaling arrival times reaches a target QPS or a speed-up") {
  absl::StatusOr<Workload> w = Parse(kTrace);
  REQUIRE(w.ok());
  REQUIRE(RescaleToQps(*w, 2.0).ok());
  CHECK(MeasureWorkload(*w).qps == Approx(2.0));
  REQUIRE(ScaleArrivalTimes(*w, 0.5).ok());
  CHECK(MeasureWorkload(*w).qps == Approx(4.0));
  CHECK(ScaleArrivalTimes(*w, 0).code() == absl::StatusCode::kInvalidArgument);
  CHECK(RescaleToQps(*w, -1).code() == absl::StatusCode::kInvalidArgument);
  absl::StatusOr<Workload> single =
      Parse(R"({"timestamp": 0, "input_length": 1, "output_length": 1, "hash_ids": [1]})");
  REQUIRE(single.ok());
  CHECK(RescaleToQps(*single, 1).code() == absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("A generated workload survives a write/read round trip") {
  WorkloadProfile p = PaperPrimaryProfile();
  p.top_k = 32;
  p.qps = 50;
  p.duration_s = 20;
  const absl::StatusOr<GeneratedWorkload> g = GenerateWorkload(p);
  REQUIRE(g.ok());
  REQUIRE(!g->workload.requests.empty());
  TempDir dir("mooncake_trace_test");
  const std::string path = dir.File("generated.jsonl");
  REQUIRE(WriteMooncakeTraceFile(g->workload, path).ok());
  const absl::StatusOr<Workload> back = ReadMooncakeTraceFile(path, {});
  REQUIRE(back.ok());
  CHECK(back->block_size == p.block_size);  // from the lines, not the 512 default
  REQUIRE(back->requests.size() == g->workload.requests.size());
  for (size_t i = 0; i < back->requests.size(); ++i) {
    const Request& a = g->workload.requests[i];
    const Request& b = back->requests[i];
    REQUIRE(b.arrival_s == Approx(a.arrival_s).margin(1e-6));
    REQUIRE(b.key == a.key);
    REQUIRE(b.input_length == a.input_length);
    REQUIRE(b.output_length == a.output_length);
    REQUIRE(b.hash_ids == a.hash_ids);
    REQUIRE(b.thread_id == a.thread_id);
    REQUIRE(b.turn == a.turn);
    REQUIRE(b.current_turn_length == a.current_turn_length);
  }
  // --key-blocks replaces the written keys.
  const absl::StatusOr<Workload> rekeyed = ReadMooncakeTraceFile(path, {.key_blocks = 1});
  REQUIRE(rekeyed.ok());
  CHECK(rekeyed->requests[0].key.rfind("h", 0) == 0);
}

TEST_CASE("Keys with quotes and large ids are written as valid JSON and read back") {
  Workload w;
  w.block_size = 4;
  w.requests.push_back({.arrival_s = 1.25,
                        .key = "a \"quoted\"\\key\n",
                        .input_length = 5,
                        .output_length = 2,
                        .hash_ids = {18446744073709551615ULL, 1},
                        .thread_id = 7,
                        .turn = 2});
  std::ostringstream out;
  REQUIRE(WriteMooncakeTrace(w, out).ok());
  CHECK_THAT(out.str(), Catch::StartsWith("{\"timestamp\": 1250, "));
  const absl::StatusOr<Workload> back = Parse(out.str());
  REQUIRE(back.ok());
  CHECK(back->requests[0].key == w.requests[0].key);
  CHECK(back->requests[0].hash_ids == w.requests[0].hash_ids);
  CHECK(back->requests[0].thread_id == 7);
  CHECK(back->requests[0].turn == 2);
}

TEST_CASE("Dense remapping keeps the prefix structure") {
  Workload w;
  for (const std::vector<uint64_t>& ids :
       {std::vector<uint64_t>{900, 17, 5}, {900, 17, 1ULL << 63}, {42}}) {
    w.requests.emplace_back().hash_ids = ids;
    w.requests.back().input_length = static_cast<uint32_t>(16 * ids.size());
  }
  const WorkloadStats before = MeasureWorkload(w);
  RemapHashIdsDense(w);
  CHECK(w.requests[0].hash_ids == std::vector<uint64_t>{0, 1, 2});
  CHECK(w.requests[1].hash_ids == std::vector<uint64_t>{0, 1, 3});
  CHECK(w.requests[2].hash_ids == std::vector<uint64_t>{4});
  CHECK(MeasureWorkload(w).prefix_reuse == before.prefix_reuse);
}

TEST_CASE("The JSON reader is strict and bounded") {
  absl::StatusOr<JsonValue> v = ParseJson(R"( {"a": "x\u00e9\ud83d\ude00\n", "b": [1.5e2, -0]} )");
  REQUIRE(v.ok());
  CHECK(v->Find("a")->text == "x\xc3\xa9\xf0\x9f\x98\x80\n");
  CHECK(v->Find("b")->items[0].AsDouble() == 150.0);
  CHECK(v->Find("b")->items[0].AsUint64() == 150u);
  CHECK(v->Find("b")->items[1].AsUint64() == 0u);
  CHECK_FALSE(ParseJson(R"({"a": 1,})").ok());
  CHECK_FALSE(ParseJson(R"({"a": 01})").ok());
  CHECK_FALSE(ParseJson(R"({"a": "\ud83d"})").ok());
  CHECK_FALSE(ParseJson("{\"a\": \"tab\there\"}").ok());
  CHECK_FALSE(ParseJson(R"({"a": tru})").ok());
  CHECK_FALSE(ParseJson("").ok());
  CHECK_FALSE(ParseJson(std::string(10000, '[')).ok());  // too deep, not a stack overflow
  CHECK_FALSE(ParseJson(R"({"a": 1.5})")->Find("a")->AsUint64().has_value());
  CHECK_FALSE(ParseJson(R"({"a": -2})")->Find("a")->AsUint64().has_value());
  CHECK(JsonQuote("a\"b\\\x01") == R"("a\"b\\\u0001")");
}

}  // namespace
}  // namespace cacheroute::workload
