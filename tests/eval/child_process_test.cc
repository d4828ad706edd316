// tools/eval/child_process.h: a real child (/bin/sh) that writes a log file; waiting for its
// ready line, reading fields from it, and a child that exits without one.
#include "tools/eval/child_process.h"

#include <signal.h>
#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <string>

#include "tests/support/eventually.h"
#include "tests/support/require_ok.h"
#include "tests/support/temp_dir.h"

namespace cacheroute::eval {
namespace {

using namespace std::chrono_literals;

// /bin/sh running `script` with its output in `log`.
std::unique_ptr<ChildProcess> Shell(const std::string& script, const std::string& log) {
  return testing::RequireOk(
      ChildProcess::Spawn({"/bin/sh", "-c", script}, {.stdout_path = log, .stderr_path = log}));
}

TEST_CASE("AwaitLogLine returns the first complete line with the marker") {
  testing::TempDir dir("child_process_test");
  const std::string log = dir.File("child.log");
  std::unique_ptr<ChildProcess> child = Shell(
      "echo booting; sleep 0.2; echo 'ts=1 level=info event=started port=4321 metrics_port=99 "
      "restored_version=3.7'; echo 'event=started port=1'; exec sleep 30",
      log);
  const std::string line = testing::RequireOk(AwaitLogLine(*child, log, "event=started", 60s));
  CHECK(line == "ts=1 level=info event=started port=4321 metrics_port=99 restored_version=3.7");
  CHECK(LogNumber(line, "port") == 4321);  // not the "port=" inside "metrics_port="
  CHECK(LogNumber(line, "metrics_port") == 99);
  CHECK(LogField(line, "restored_version") == "3.7");
  CHECK(LogField(line, "ts") == "1");
  CHECK(LogField(line, "missing") == std::nullopt);
  CHECK(LogField(line, "level=info") == std::nullopt);
  CHECK(LogNumber(line, "level") == std::nullopt);  // "info" is not a number
  const int status = child->Stop(SIGTERM, 10s);
  CHECK(WIFSIGNALED(status));
}

TEST_CASE("AwaitLogLine reports a child that exits without the line, with its log") {
  testing::TempDir dir("child_process_test");
  const std::string log = dir.File("child.log");
  std::unique_ptr<ChildProcess> child = Shell("echo 'cannot bind'; exit 3", log);
  absl::StatusOr<std::string> line = AwaitLogLine(*child, log, "event=started", 60s);
  CHECK(line.status().code() == absl::StatusCode::kUnavailable);
  CHECK(line.status().message().find("cannot bind") != std::string::npos);
}

TEST_CASE("AwaitLogLine gives up after its timeout; a partial line does not count") {
  testing::TempDir dir("child_process_test");
  const std::string log = dir.File("child.log");
  std::unique_ptr<ChildProcess> child = Shell("printf 'event=started port=5'; exec sleep 30", log);
  REQUIRE(testing::Eventually([&] { return !ReadTextFile(log).empty(); }));
  absl::StatusOr<std::string> line = AwaitLogLine(*child, log, "event=started", 300ms);
  CHECK(line.status().code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(child->pid() > 0);  // still running; the destructor kills it
}

TEST_CASE("ReadTextFile is empty for a file that does not exist") {
  CHECK(ReadTextFile("/nonexistent/cacheroute/child.log").empty());
}

}  // namespace
}  // namespace cacheroute::eval
