// PlannerLink (tools/gateway/planner_link/planner_link.h) against the real planner in-process:
// the table stream and its log lines, rate reports with their last one at Stop, SetDestinations
// reports, and the files it reads at start.
#include <fcntl.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "cacheroute/dataplane/key_id.h"
#include "cacheroute/dataplane/random.h"
#include "support/planner_fixture.h"
#include "tests/support/eventually.h"
#include "tests/support/planner_config.h"
#include "tests/support/require_ok.h"
#include "tests/support/temp_dir.h"
#include "tools/gateway/planner_link/planner_link.h"

namespace cacheroute::gateway {
namespace {

struct Fixture {
  Fixture() {
    config.planner = {planner.target()};
    config.gateway_id = "gw-link";
    config.report_interval = absl::Milliseconds(50);
    REQUIRE(router.Resize(2, nullptr, {}).ok);
  }
  absl::StatusOr<std::unique_ptr<PlannerLink>> Start() {
    return PlannerLink::Start(config, router, recorder, evidence, {"a", "b"}, true);
  }
  std::vector<std::string> PlannerNames() {
    const v1::GetStatusResponse status = planner.Status();
    return {status.destinations().begin(), status.destinations().end()};
  }

  testing::InProcessPlanner planner{testing::LoopbackPlannerConfig({"a", "b"})};
  GatewayConfig config;
  dataplane::SeededRandom random{2};
  dataplane::Router router{{.destination_count = 0, .capacity = 4}, random};
  dataplane::RateRecorder recorder;
  dataplane::EvidenceRecorder evidence;
};

// What the process writes to stderr (base::LogEvent's lines) while it lives, in a file.
class StderrCapture {
 public:
  explicit StderrCapture(std::string path) : path_(std::move(path)) {
    std::fflush(stderr);
    saved_ = dup(2);
    const int fd = open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    REQUIRE(fd >= 0);
    dup2(fd, 2);
    close(fd);
  }
  ~StderrCapture() {
    std::fflush(stderr);
    dup2(saved_, 2);
    close(saved_);
  }
  // Lines so far that name `event`.
  int Count(const std::string& event) const {
    std::ifstream in(path_);
    int n = 0;
    for (std::string line; std::getline(in, line);) n += absl::StrContains(line, event) ? 1 : 0;
    return n;
  }

 private:
  std::string path_;
  int saved_ = -1;
};

std::string Page(const PlannerLink* link) {
  base::Exposition page("g_");
  RenderPlannerLink(page, link);
  return page.Take();
}

TEST_CASE("without a link the planner families are zeros") {
  const std::string page = Page(nullptr);
  CHECK(absl::StrContains(page, "g_planner_connected 0\n"));
  CHECK(absl::StrContains(page, "g_rate_reports_total 0\n"));
  CHECK(absl::StrContains(page, "g_rate_report_failures_total 0\n"));
}

TEST_CASE("the link opens the table stream and reports rates, the last one at Stop") {
  Fixture f;
  std::unique_ptr<PlannerLink> link = testing::RequireOk(f.Start());
  CHECK(testing::Eventually([&] { return link->SubscriberStats().connected; }));
  CHECK(absl::StrContains(Page(link.get()), "g_planner_connected 1\n"));
  f.recorder.Record(dataplane::KeyId("tenant-1"));
  CHECK(testing::Eventually([&] { return link->ReporterStats().requests_reported == 1; }));
  f.recorder.Record(dataplane::KeyId("tenant-1"));
  link->Stop();
  CHECK(link->ReporterStats().requests_reported == 2);
  CHECK(f.planner.LastSequence("gw-link") > 0);
}

TEST_CASE("the table stream's loss and its recovery are logged once each") {
  Fixture f;
  testing::TempDir dir("planner_link_log");
  StderrCapture log(dir.File("stderr"));
  std::unique_ptr<PlannerLink> link = testing::RequireOk(f.Start());
  REQUIRE(testing::Eventually([&] { return log.Count("table_stream_open") == 1; }));
  CHECK(link->SubscriberStats().connected);
  f.planner.Stop();
  REQUIRE(testing::Eventually([&] { return log.Count("table_stream_lost") == 1; }));
  // Reconnect attempts fail while the planner is away; they log nothing more.
  REQUIRE(testing::Eventually([&] { return link->SubscriberStats().disconnects >= 2; }));
  f.planner.Start();  // the same port
  REQUIRE(testing::Eventually([&] { return log.Count("table_stream_back") == 1; }));
  link->Stop();
  CHECK(log.Count("table_stream_open") == 1);
  CHECK(log.Count("table_stream_lost") == 1);
  CHECK(log.Count("table_stream_back") == 1);
}

TEST_CASE("ReportDestinations gives the planner the names; Remap re-maps the Router") {
  Fixture f;
  std::unique_ptr<PlannerLink> link = testing::RequireOk(f.Start());
  CHECK(link->ReportDestinations({"a", "b", "c"}));
  CHECK(f.PlannerNames() == std::vector<std::string>{"a", "b", "c"});
  CHECK(link->Remap({"a", "b", "c"}).ok());
  CHECK(f.router.destination_count() == 3);
  f.planner.Stop();
  CHECK_FALSE(link->ReportDestinations({"a"}));  // retried by the caller's next round
}

TEST_CASE("credential and token files are read at start; errors name the key") {
  Fixture f;
  testing::TempDir dir("planner_link_test");
  f.config.planner_token_file = dir.Write("token", "  \n");
  absl::Status s = f.Start().status();
  CHECK(absl::IsInvalidArgument(s));
  CHECK(absl::StrContains(s.message(), "planner_token_file"));
  f.config.planner_token_file.clear();
  f.config.planner_tls_ca_file = dir.File("missing-ca.pem");
  s = f.Start().status();
  CHECK(absl::IsInvalidArgument(s));
  CHECK(absl::StrContains(s.message(), "planner_tls_ca_file"));
  CHECK(absl::StrContains(s.message(), "missing-ca.pem"));
}

}  // namespace
}  // namespace cacheroute::gateway
