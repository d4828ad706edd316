// MembershipWatcher (tools/frontend/membership/membership_watcher.h): the first membership from
// each source, polling an upstreams_file (a real file) and a DNS name (a DNS server on loopback),
// and reporting the names to a real planner in-process through a PlannerLink.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "cacheroute/dataplane/evidence_recorder.h"
#include "cacheroute/dataplane/random.h"
#include "cacheroute/dataplane/rate_recorder.h"
#include "cacheroute/dataplane/router.h"
#include "support/dns_server.h"
#include "tools/eval/kube_api/kube_api_server.h"
#include "support/planner_fixture.h"
#include "tests/support/planner_config.h"
#include "tests/support/require_ok.h"
#include "tests/support/temp_dir.h"
#include "tools/frontend/membership/membership_watcher.h"

namespace cacheroute::frontend {
namespace {

std::string UpstreamsYaml(const std::vector<std::string>& names) {
  std::string text = "upstreams:\n";
  for (const std::string& n : names) {
    absl::StrAppend(&text, "  - {name: ", n, ", url: \"http://127.0.0.1:8000\"}\n");
  }
  return text;
}

Membership MakeMembership(bool dynamic) { return Membership({.capacity = 8, .dynamic = dynamic}); }

TEST_CASE("InitialMembers: the static list, the file read once, a DNS name with none yet") {
  FrontendConfig config;
  config.upstreams = {{"a", "http://127.0.0.1:8000"}};
  CHECK(testing::RequireOk(InitialMembers(config)).size() == 1);

  testing::TempDir dir("watcher_test");
  config.upstreams.clear();
  config.upstreams_file = dir.Write("upstreams.yaml", UpstreamsYaml({"x", "y"}));
  CHECK(testing::RequireOk(InitialMembers(config)).size() == 2);
  config.upstreams_file = dir.File("missing.yaml");
  CHECK_FALSE(InitialMembers(config).ok());  // a bad configuration stops the start

  testing::DnsServer dns;
  config.upstreams_file.clear();
  config.upstreams_dns = "engines.test:8000";
  config.dns_server = dns.address();
  config.membership_interval = absl::Seconds(1);
  CHECK(testing::RequireOk(InitialMembers(config)).empty());  // engines not ready: none yet
  dns.SetA("engines.test", {"127.0.0.2", "127.0.0.3"});
  CHECK(testing::RequireOk(InitialMembers(config)).size() == 2);
}

TEST_CASE("InitialMembers and the watcher with an InferencePool: read once, then each change") {
  eval::KubeApiServer api;
  REQUIRE(api.ok());
  FrontendConfig config;
  config.upstreams_inference_pool = "pool";
  config.inference_pool_namespace = "ns";
  config.kube_api_server = api.url();
  CHECK(testing::RequireOk(InitialMembers(config)).empty());  // no pool yet: none, logged
  api.SetPool("ns", "pool", {{"app", "vllm"}}, {8000});
  api.SetPod("ns", "a", {{"app", "vllm"}}, "127.0.0.2", true);
  const std::vector<Upstream> initial = testing::RequireOk(InitialMembers(config));
  REQUIRE(initial.size() == 1);
  CHECK(initial[0].name == "127.0.0.2:8000");

  Membership membership = MakeMembership(true);
  REQUIRE(membership.Apply(initial).ok());
  StopSignal stop;
  MembershipWatcher watcher(config, membership, nullptr, stop);
  watcher.Start();
  api.SetPod("ns", "b", {{"app", "vllm"}}, "127.0.0.3", true);
  CHECK(testing::Eventually([&] { return membership.Names().size() == 2; }));
  api.SetPod("ns", "a", {{"app", "vllm"}}, "127.0.0.2", false);
  CHECK(testing::Eventually(
      [&] { return membership.Names() == std::vector<std::string>{"127.0.0.3:8000"}; }));
  stop.Trigger();
  watcher.Join();

  config.kube_api_server = "https://127.0.0.1:1";  // a configuration that cannot work
  config.kube_ca_file = "/nonexistent/ca.crt";
  const absl::Status bad = InitialMembers(config).status();
  CHECK(absl::IsInvalidArgument(bad));
  CHECK_THAT(std::string(bad.message()), Catch::StartsWith("kube_ca_file"));
}

TEST_CASE("PollOnce applies a changed upstreams_file and keeps the members when it cannot read") {
  testing::TempDir dir("watcher_test");
  FrontendConfig config;
  config.upstreams_file = dir.Write("upstreams.yaml", UpstreamsYaml({"a", "b"}));
  Membership membership = MakeMembership(true);
  REQUIRE(membership.Apply(testing::RequireOk(InitialMembers(config))).ok());
  StopSignal stop;
  MembershipWatcher watcher(config, membership, nullptr, stop);

  watcher.PollOnce();  // unchanged: nothing applied
  CHECK(membership.generation() == 1);
  dir.Write("upstreams.yaml", UpstreamsYaml({"a", "c", "b"}));
  watcher.PollOnce();
  CHECK(membership.Names() == std::vector<std::string>{"a", "b", "c"});
  CHECK(membership.generation() == 2);
  dir.Write("upstreams.yaml", "upstreams: [");  // broken: the members stay
  watcher.PollOnce();
  CHECK(membership.Names() == std::vector<std::string>{"a", "b", "c"});
}

TEST_CASE("PollOnce follows a DNS name's addresses") {
  testing::DnsServer dns;
  dns.SetA("engines.test", {"127.0.0.2"});
  FrontendConfig config;
  config.upstreams_dns = "engines.test:8000";
  config.dns_server = dns.address();
  Membership membership = MakeMembership(true);
  StopSignal stop;
  MembershipWatcher watcher(config, membership, nullptr, stop);
  watcher.PollOnce();
  CHECK(membership.Names() == std::vector<std::string>{"127.0.0.2:8000"});
  dns.SetA("engines.test", {"127.0.0.2", "127.0.0.3"});
  watcher.PollOnce();
  CHECK(membership.Names() == std::vector<std::string>{"127.0.0.2:8000", "127.0.0.3:8000"});
}

TEST_CASE("ReportOnce sends the names to the planner, again after a change") {
  testing::InProcessPlanner planner(testing::LoopbackPlannerConfig({"a", "b"}));
  FrontendConfig config;
  config.planner = {planner.target()};
  config.gateway_id = "gw-watcher";
  testing::TempDir dir("watcher_test");
  config.upstreams_file = dir.Write("upstreams.yaml", UpstreamsYaml({"a", "b", "c"}));
  dataplane::SeededRandom random(1);
  dataplane::Router router({.destination_count = 0, .capacity = 8}, random);
  dataplane::RateRecorder recorder;
  dataplane::EvidenceRecorder evidence;
  std::unique_ptr<PlannerLink> link;
  Membership membership({.capacity = 8, .dynamic = true, .install = [&](const auto& names) {
                           return link != nullptr ? link->Remap(names) : absl::OkStatus();
                         }});
  REQUIRE(membership.Apply(testing::RequireOk(InitialMembers(config))).ok());
  REQUIRE(router.Resize(3, nullptr, {}).ok);
  link = testing::RequireOk(
      PlannerLink::Start(config, router, recorder, evidence, membership.Names(), true));
  StopSignal stop;
  MembershipWatcher watcher(config, membership, link.get(), stop);

  const auto planner_names = [&] {
    const v1::GetStatusResponse status = planner.Status();
    return std::vector<std::string>(status.destinations().begin(), status.destinations().end());
  };
  watcher.ReportOnce();
  CHECK(planner_names() == std::vector<std::string>{"a", "b", "c"});
  dir.Write("upstreams.yaml", UpstreamsYaml({"a", "c"}));
  watcher.PollOnce();
  watcher.ReportOnce();
  std::vector<std::string> names = planner_names();
  std::sort(names.begin(), names.end());
  CHECK(names == std::vector<std::string>{"a", "c"});
}

TEST_CASE("the watcher's thread polls until its StopSignal is triggered") {
  testing::TempDir dir("watcher_test");
  FrontendConfig config;
  config.upstreams_file = dir.Write("upstreams.yaml", UpstreamsYaml({"a"}));
  config.membership_interval = absl::Milliseconds(10);
  Membership membership = MakeMembership(true);
  StopSignal stop;
  MembershipWatcher watcher(config, membership, nullptr, stop);
  watcher.Start();
  CHECK(testing::Eventually([&] { return membership.Names().size() == 1; }));
  dir.Write("upstreams.yaml", UpstreamsYaml({"a", "b"}));
  CHECK(testing::Eventually([&] { return membership.Names().size() == 2; }));
  stop.Trigger();
  watcher.Join();
}

}  // namespace
}  // namespace cacheroute::frontend
