// PlannerLink (tools/frontend/planner_link/planner_link.h) against the real planner in-process:
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
#include "cacheroute/dataplane/key_sizes.h"
#include "cacheroute/dataplane/random.h"
#include "cacheroute/v1/admin.grpc.pb.h"
#include "support/planner_fixture.h"
#include "tests/support/eventually.h"
#include "tests/support/planner_config.h"
#include "tests/support/require_ok.h"
#include "tests/support/temp_dir.h"
#include "tools/frontend/planner_link/planner_link.h"

namespace cacheroute::frontend {
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
  FrontendConfig config;
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
  CHECK(absl::StrContains(page, "g_share_connected 0\n"));
  CHECK(absl::StrContains(page, "g_share_batches_sent_total 0\n"));
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

// What the gateway knows of a key reaches the planner with its rate: its mean prompt and cached
// tokens (KeySizes), which a byte-aware plan uses, and where the Router last sent it, where the
// plan then keeps it (follow_served).
// A key the Router sends to destination 1 of two (the second), so that a plan that follows where
// it was sent is told apart from one that fills the first destination first.
std::string KeySentToSecond(dataplane::Router& router) {
  dataplane::ManualClock clock;
  for (int i = 0; i < 64; ++i) {
    const std::string key = "tenant-" + std::to_string(i);
    const dataplane::InFlight sent =
        router.Pick(dataplane::PickRequest{.key_id = dataplane::KeyId(key), .prompt_tokens = 1000},
                    clock.Now());
    if (sent.destination() == 1) return key;
  }
  FAIL("no key went to destination 1");
  return "";
}

// The planner's explanation of `key_id`, which must be known.
v1::ExplainResponse Explain(testing::InProcessPlanner& planner, uint64_t key_id) {
  auto admin = v1::AdminService::NewStub(planner.NewChannel());
  grpc::ClientContext context;
  v1::ExplainRequest request;
  request.set_key_id(key_id);
  v1::ExplainResponse explained;
  const grpc::Status status = admin->Explain(&context, request, &explained);
  INFO(status.error_message());
  REQUIRE(status.ok());
  REQUIRE(explained.known());
  return explained;
}

// What the gateway knows of a key reaches the planner with its rate: where the Router last sent it,
// where the plan then keeps it (follow_served), and its mean prompt and cached tokens (KeySizes),
// which a byte-aware plan uses.
TEST_CASE("reports carry where each key was last sent, and its sizes") {
  Fixture f;
  const uint64_t key_id = dataplane::KeyId(KeySentToSecond(f.router));
  dataplane::KeySizes sizes;
  // Its prompts share their first 37 blocks; compared at the grid's positions, up to block 32 (the
  // deepest grid block below 37): 33 blocks, 528 tokens.
  for (int i = 0; i < 4; ++i) {
    std::vector<uint64_t> hashes;
    for (uint64_t b = 0; b < 62; ++b) hashes.push_back(b < 37 ? b + 1 : 1000 * (i + 1) + b);
    sizes.ObservePrompt(key_id, hashes, 1000);
    sizes.Add(key_id, 1000, 600);
  }

  SECTION("served_at: the plan keeps the key where it was sent") {
    // Algorithm 1 (one destination per key below q_cap; the default spreads a key that carries
    // the whole fleet's load), with a stickiness that lets the one key stay where it is warm
    // (without one, a warm destination is kept only while it stays at or under the mean load).
    service::PlannerConfig config = testing::LoopbackPlannerConfig({"a", "b"});
    config.algorithm = "cacheroute-paper";
    config.placement_stickiness = 1;
    testing::InProcessPlanner planner(config);
    f.config.planner = {planner.target()};
    f.recorder.Record(key_id);
    std::unique_ptr<PlannerLink> link = testing::RequireOk(
        PlannerLink::Start(f.config, f.router, f.recorder, f.evidence, {"a", "b"}, true, &sizes));
    REQUIRE(testing::Eventually([&] { return link->ReporterStats().requests_reported == 1; }));
    planner.Replan();
    const v1::ExplainResponse explained = Explain(planner, key_id);
    REQUIRE(explained.admitted());
    CHECK(std::vector<uint32_t>(explained.destinations().begin(), explained.destinations().end()) ==
          std::vector<uint32_t>{1});
    CHECK_FALSE(explained.byte_aware());
  }
  SECTION("sizes: a byte-aware plan measures the key") {
    service::PlannerConfig config = testing::LoopbackPlannerConfig({"a", "b"});
    config.kv_tokens_per_destination = 100000;
    testing::InProcessPlanner planner(config);
    f.config.planner = {planner.target()};
    for (int i = 0; i < 10; ++i) f.recorder.Record(key_id);
    std::unique_ptr<PlannerLink> link = testing::RequireOk(
        PlannerLink::Start(f.config, f.router, f.recorder, f.evidence, {"a", "b"}, true, &sizes));
    REQUIRE(testing::Eventually([&] { return link->ReporterStats().requests_reported == 10; }));
    planner.Replan();
    const v1::ExplainResponse explained = Explain(planner, key_id);
    CHECK(explained.byte_aware());
    CHECK(explained.reusable_measured());
    CHECK(explained.prompt_tokens() == Approx(1000));
    CHECK(explained.reusable_tokens() == Approx(33 * 16));
  }
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
}  // namespace cacheroute::frontend
