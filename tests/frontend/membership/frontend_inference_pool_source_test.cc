// InferencePoolSource (tools/frontend/membership/inference_pool_source.h) against the API-server
// double (tools/eval/kube_api/kube_api_server.h) on loopback: the first list, readiness changes,
// bookmarks, 410 Gone (HTTP and ERROR event) and the relist, a dropped stream and a garbage line
// resumed from the last resourceVersion, failing lists retried, the pool's selector and ports
// edited, a missing pool waited for, an unusable spec, the cap; and ReadInferencePool.
#include "tools/frontend/membership/inference_pool_source.h"

#include <catch2/catch.hpp>
#include <mutex>
#include <string>
#include <vector>

#include "tests/support/eventually.h"
#include "tools/eval/kube_api/kube_api_server.h"
#include "tests/support/require_ok.h"

namespace cacheroute::frontend {
namespace {

const eval::KubeApiServer::Labels kVllm = {{"app", "vllm"}};
const CancelCheck kNever = [] { return false; };

std::vector<std::string> NamesOf(const std::vector<Upstream>& upstreams) {
  std::vector<std::string> names;
  for (const Upstream& u : upstreams) names.push_back(u.name);
  return names;
}

// The double, a client of it, and a source whose every on_members call is recorded.
class Fixture {
 public:
  explicit Fixture(size_t max_members = 256) {
    REQUIRE(api.ok());
    FrontendConfig config;
    config.kube_api_server = api.url();
    client = testing::RequireOk(KubeClient::Create(testing::RequireOk(KubeApiFor(config, {}))));
    options.pool = "pool";
    options.pool_namespace = "ns";
    options.max_members = max_members;
    options.backoff = {.initial = std::chrono::milliseconds(5),
                       .multiplier = 2.0,
                       .jitter = 0.2,
                       .max = std::chrono::milliseconds(40)};
    options.on_members = [this](std::vector<Upstream> members) {
      std::lock_guard<std::mutex> lock(mu_);
      calls_.push_back(NamesOf(members));
      urls_.clear();
      for (const Upstream& u : members) urls_.push_back(u.url);
    };
  }
  ~Fixture() {
    stop.Trigger();
    if (source) source->Join();
  }
  void Start() {
    source = std::make_unique<InferencePoolSource>(*client, options, stop);
    source->Start();
  }
  std::vector<std::string> Members() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_.empty() ? std::vector<std::string>{"(never called)"} : calls_.back();
  }
  std::vector<std::string> Urls() {
    std::lock_guard<std::mutex> lock(mu_);
    return urls_;
  }
  size_t Calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_.size();
  }
  // Waits until the members are `wanted`; true when they are.
  bool MembersBecome(const std::vector<std::string>& wanted) {
    return testing::Eventually([&] { return Members() == wanted; });
  }

  eval::KubeApiServer api;
  std::unique_ptr<KubeClient> client;
  InferencePoolOptions options;
  StopSignal stop;
  std::unique_ptr<InferencePoolSource> source;

 private:
  std::mutex mu_;
  std::vector<std::vector<std::string>> calls_;
  std::vector<std::string> urls_;
};

TEST_CASE("the first list: one member per ready pod and target port, sorted") {
  Fixture f;
  f.api.SetPool("ns", "pool", kVllm, {8000, 8001});
  f.api.SetPod("ns", "b", kVllm, "10.0.0.2", true);
  f.api.SetPod("ns", "a", kVllm, "10.0.0.1", true);
  f.api.SetPod("ns", "unready", kVllm, "10.0.0.3", false);
  f.api.SetPod("ns", "no-ip", kVllm, "", true);
  f.api.SetPod("ns", "leaving", kVllm, "10.0.0.4", true, /*deleting=*/true);
  f.api.SetPod("ns", "other-app", {{"app", "web"}}, "10.0.0.5", true);
  f.api.SetPod("other-ns", "elsewhere", kVllm, "10.0.0.6", true);
  f.api.SetPod("ns", "v6", kVllm, "fd00::7", true);
  f.Start();
  REQUIRE(f.MembersBecome({"10.0.0.1:8000", "10.0.0.1:8001", "10.0.0.2:8000", "10.0.0.2:8001",
                           "[fd00::7]:8000", "[fd00::7]:8001"}));
  CHECK(f.Urls().front() == "http://10.0.0.1:8000");
  CHECK(f.Urls().back() == "http://[fd00::7]:8001");
  // The members come from the list; the watches follow it.
  REQUIRE(testing::Eventually([&] { return f.api.open_watches() == 2; }));
  const auto watch = f.api.last_watch("pods");
  CHECK(watch.at("labelSelector") == "app=vllm");
  CHECK(watch.at("allowWatchBookmarks") == "true");
  CHECK(watch.at("timeoutSeconds") == "300");
  CHECK(f.api.last_watch("inferencepools").at("fieldSelector") == "metadata.name=pool");
}

TEST_CASE("readiness, deletion and new pods change the members as their events arrive") {
  Fixture f;
  f.api.SetPool("ns", "pool", kVllm, {8000});
  f.api.SetPod("ns", "a", kVllm, "10.0.0.1", true);
  f.Start();
  REQUIRE(f.MembersBecome({"10.0.0.1:8000"}));
  f.api.SetPod("ns", "b", kVllm, "10.0.0.2", false);  // not ready: no change
  f.api.SetPod("ns", "b", kVllm, "10.0.0.2", true);
  CHECK(f.MembersBecome({"10.0.0.1:8000", "10.0.0.2:8000"}));
  f.api.SetPod("ns", "a", kVllm, "10.0.0.1", false);
  CHECK(f.MembersBecome({"10.0.0.2:8000"}));
  f.api.SetPod("ns", "b", kVllm, "10.0.0.2", true, /*deleting=*/true);
  CHECK(f.MembersBecome({}));
  f.api.SetPod("ns", "a", kVllm, "10.0.0.1", true);
  CHECK(f.MembersBecome({"10.0.0.1:8000"}));
  f.api.DeletePod("ns", "a");
  CHECK(f.MembersBecome({}));
  // Relabelled out of the selector (the watch says DELETED), and back (ADDED).
  f.api.SetPod("ns", "c", kVllm, "10.0.0.3", true);
  CHECK(f.MembersBecome({"10.0.0.3:8000"}));
  f.api.SetPod("ns", "c", {{"app", "web"}}, "10.0.0.3", true);
  CHECK(f.MembersBecome({}));
  f.api.SetPod("ns", "c", kVllm, "10.0.0.3", true);
  CHECK(f.MembersBecome({"10.0.0.3:8000"}));
  CHECK(f.api.lists("pods") == 1);  // all through one watch
  CHECK(f.source->watch_restarts() == 0);
}

TEST_CASE("a bookmark advances the resourceVersion resumed from, and changes nothing") {
  Fixture f;
  f.api.SetPool("ns", "pool", kVllm, {8000});
  f.api.SetPod("ns", "a", kVllm, "10.0.0.1", true);
  f.Start();
  REQUIRE(f.MembersBecome({"10.0.0.1:8000"}));
  REQUIRE(testing::Eventually([&] { return f.api.watches("pods") >= 1; }));
  const std::string first = f.api.last_watch("pods").at("resourceVersion");
  f.api.SetPod("ns", "elsewhere", kVllm, "10.0.0.9", true);
  f.api.DeletePod("ns", "elsewhere");  // two events the pod watch sees, no net change
  REQUIRE(f.MembersBecome({"10.0.0.1:8000"}));
  const size_t calls = f.Calls();
  f.api.Bookmark();
  const std::string bookmark = std::to_string(f.api.resource_version());
  // Resume the watch to see where from: it must be the bookmark's version.
  REQUIRE(testing::Eventually([&] {
    f.api.DropWatches();
    return f.api.last_watch("pods").at("resourceVersion") == bookmark;
  }));
  CHECK(first != bookmark);
  CHECK(f.api.lists("pods") == 1);
  CHECK(f.Members() == std::vector<std::string>{"10.0.0.1:8000"});
  CHECK(f.Calls() <= calls + 2);  // the pod that came and went at most; never for the bookmark
}

void GoneThenRelist(bool as_event) {
  Fixture f;
  f.api.set_gone_as_event(as_event);
  f.api.SetPool("ns", "pool", kVllm, {8000});
  f.api.SetPod("ns", "a", kVllm, "10.0.0.1", true);
  f.Start();
  REQUIRE(f.MembersBecome({"10.0.0.1:8000"}));
  // The watch fails (500s) while a pod changes and the history is compacted: resuming from the
  // old resourceVersion is 410 Gone, and only a new list finds the change.
  const int watches = f.api.watches("pods");
  f.api.FailNext(1000000, 500);
  f.api.DropWatches();
  REQUIRE(testing::Eventually([&] { return f.api.watches("pods") >= watches + 2; }));
  f.api.SetPod("ns", "b", kVllm, "10.0.0.2", true);
  f.api.Compact();
  f.api.FailNext(0, 500);
  CHECK(f.MembersBecome({"10.0.0.1:8000", "10.0.0.2:8000"}));
  CHECK(f.source->relists() >= 1);
  CHECK(f.api.lists("pods") >= 2);
  CHECK(f.source->watch_restarts() >= 2);
}

TEST_CASE("410 Gone as an HTTP status: the pods are listed again") { GoneThenRelist(false); }
TEST_CASE("410 Gone as an ERROR event: the pods are listed again") { GoneThenRelist(true); }

TEST_CASE("a dropped stream and a garbage line: logged, the watch resumes, nothing is lost") {
  Fixture f;
  f.api.SetPool("ns", "pool", kVllm, {8000});
  f.api.SetPod("ns", "a", kVllm, "10.0.0.1", true);
  f.Start();
  REQUIRE(f.MembersBecome({"10.0.0.1:8000"}));
  REQUIRE(testing::Eventually([&] { return f.api.open_watches() == 2; }));
  f.api.DropWatches();
  f.api.SetPod("ns", "b", kVllm, "10.0.0.2", true);  // while no watch is open, maybe
  CHECK(f.MembersBecome({"10.0.0.1:8000", "10.0.0.2:8000"}));
  CHECK(f.source->watch_restarts() >= 1);
  const uint64_t restarts = f.source->watch_restarts();
  f.api.SendGarbage();
  f.api.SetPod("ns", "a", kVllm, "10.0.0.1", false);
  CHECK(f.MembersBecome({"10.0.0.2:8000"}));
  CHECK(f.source->watch_restarts() > restarts);
  CHECK(f.api.lists("pods") == 1);  // resumed, never relisted
  CHECK(f.source->relists() == 0);
}

TEST_CASE("failing and slow lists are retried with backoff until they answer") {
  Fixture f;
  f.api.SetPool("ns", "pool", kVllm, {8000});
  f.api.SetPod("ns", "a", kVllm, "10.0.0.1", true);
  f.api.FailNext(5, 500);
  f.api.set_delay(std::chrono::milliseconds(30));
  f.Start();
  CHECK(f.MembersBecome({"10.0.0.1:8000"}));
  CHECK(f.api.lists("pods") + f.api.lists("inferencepools") >= 3);
}

TEST_CASE("editing the pool's selector or ports restarts the pods' watch; members follow") {
  Fixture f;
  f.api.SetPool("ns", "pool", kVllm, {8000});
  f.api.SetPod("ns", "a", kVllm, "10.0.0.1", true);
  f.api.SetPod("ns", "b", {{"app", "vllm-next"}}, "10.0.0.2", true);
  f.Start();
  REQUIRE(f.MembersBecome({"10.0.0.1:8000"}));
  f.api.SetPool("ns", "pool", {{"app", "vllm-next"}}, {8000});
  CHECK(f.MembersBecome({"10.0.0.2:8000"}));
  CHECK(testing::Eventually(
      [&] { return f.api.last_watch("pods")["labelSelector"] == "app=vllm-next"; }));
  f.api.SetPool("ns", "pool", {{"app", "vllm-next"}}, {9000, 9001});
  CHECK(f.MembersBecome({"10.0.0.2:9000", "10.0.0.2:9001"}));
  CHECK(f.source->pool_changes() == 3);
}

TEST_CASE("a missing pool is logged and waited for; an unusable spec keeps the last members") {
  Fixture f;
  f.api.SetPod("ns", "a", kVllm, "10.0.0.1", true);
  const absl::Status missing = ReadInferencePool(*f.client, f.options, kNever).status();
  CHECK(absl::IsNotFound(missing));
  CHECK_THAT(std::string(missing.message()),
             Catch::Contains("InferencePool \"pool\" not found in namespace \"ns\""));
  f.Start();
  REQUIRE(testing::Eventually([&] { return f.api.watches("inferencepools") >= 1; }));
  CHECK(f.Calls() == 0);
  f.api.SetPool("ns", "pool", kVllm, {8000});
  CHECK(f.MembersBecome({"10.0.0.1:8000"}));

  f.api.SetPoolObject("ns", "pool", {{"spec", {{"selector", {{"matchLabels", {{"app", "x"}}}}},
                                               {"targetPorts", {{{"number", 70000}}}}}}});
  const absl::Status bad = ReadInferencePool(*f.client, f.options, kNever).status();
  CHECK(absl::IsFailedPrecondition(bad));
  CHECK_THAT(std::string(bad.message()), Catch::Contains("spec.targetPorts[0].number") &&
                                             Catch::Contains("70000"));
  f.api.SetPod("ns", "b", kVllm, "10.0.0.2", true);  // the old selection is still watched
  CHECK(f.MembersBecome({"10.0.0.1:8000", "10.0.0.2:8000"}));
  f.api.DeletePool("ns", "pool");
  f.api.SetPod("ns", "c", kVllm, "10.0.0.3", true);
  CHECK(f.MembersBecome({"10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"}));
}

TEST_CASE("at most max_members, the first by name; ReadInferencePool reads the same") {
  Fixture f(/*max_members=*/2);
  f.api.SetPool("ns", "pool", kVllm, {8000});
  for (int i = 1; i <= 4; ++i) {
    f.api.SetPod("ns", "p" + std::to_string(i), kVllm, "10.0.0." + std::to_string(i), true);
  }
  CHECK(NamesOf(testing::RequireOk(ReadInferencePool(*f.client, f.options, kNever))) ==
        std::vector<std::string>{"10.0.0.1:8000", "10.0.0.2:8000"});
  f.Start();
  CHECK(f.MembersBecome({"10.0.0.1:8000", "10.0.0.2:8000"}));
}

}  // namespace
}  // namespace cacheroute::frontend
