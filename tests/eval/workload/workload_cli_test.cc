// The real cacheroute-workload binary: generate writes a readable JSONL workload and prints its
// statistics, read/convert take it back, and bad flags or bad trace lines exit 2 naming the field.
#include <catch2/catch.hpp>
#include <string>

#include "support/run_command.h"
#include "support/temp_dir.h"

namespace cacheroute::workload {
namespace {

using testing::CommandResult;
using testing::RunCommand;
using testing::TempDir;

TEST_CASE("generate writes a workload that read takes back") {
  TempDir dir("workload_cli_test");
  const std::string out = dir.File("w.jsonl");
  CommandResult gen =
      RunCommand(CACHEROUTE_WORKLOAD_PATH, {"generate", "--keys", "1000", "--top-k", "40", "--qps",
                                            "20", "--duration", "30", "--seed", "3", "--out", out});
  INFO(gen.err);
  REQUIRE(gen.exit_code == 0);
  CHECK(gen.out.find("multi-turn request share") != std::string::npos);

  CommandResult read = RunCommand(CACHEROUTE_WORKLOAD_PATH, {"read", out, "--block-size", "16"});
  INFO(read.err);
  REQUIRE(read.exit_code == 0);
  CHECK(read.out.find("distinct keys") != std::string::npos);

  // The same seed gives the same file.
  const std::string again = dir.File("again.jsonl");
  REQUIRE(RunCommand(CACHEROUTE_WORKLOAD_PATH,
                     {"generate", "--keys", "1000", "--top-k", "40", "--qps", "20", "--duration",
                      "30", "--seed", "3", "--out", again})
              .exit_code == 0);
  CHECK(dir.Read("w.jsonl") == dir.Read("again.jsonl"));
  CHECK(!dir.Read("w.jsonl").empty());
}

TEST_CASE("bad flags exit 2 naming the flag and the value") {
  CommandResult r = RunCommand(CACHEROUTE_WORKLOAD_PATH, {"generate", "--qps", "-5"});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("--qps") != std::string::npos);
  CHECK(r.err.find("-5") != std::string::npos);

  CommandResult top = RunCommand(CACHEROUTE_WORKLOAD_PATH, {"generate", "--keys", "10", "--top-k",
                                                            "99", "--out", "/dev/null"});
  CHECK(top.exit_code == 2);
  CHECK(top.err.find("99") != std::string::npos);
}

TEST_CASE("a bad trace line exits 2 naming the line and the field") {
  TempDir dir("workload_cli_test");
  const std::string trace = dir.Write(
      "bad.jsonl",
      "{\"timestamp\": 0, \"input_length\": 20, \"output_length\": 1, \"hash_ids\": [1]}\n"
      "{\"timestamp\": 1, \"input_length\": \"x\"}\n");
  CommandResult r = RunCommand(CACHEROUTE_WORKLOAD_PATH, {"read", trace});
  CHECK(r.exit_code == 2);
  CHECK(r.err.find("line 2") != std::string::npos);
  CHECK(r.err.find("input_length") != std::string::npos);
}

}  // namespace
}  // namespace cacheroute::workload
