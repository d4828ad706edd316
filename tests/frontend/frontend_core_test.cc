// FrontendCore: the request path every front end runs (the key from a header or the body, the
// pick by the policy of this thread's membership snapshot, the member it names), whether a request
// needs its body before it can be routed, and the one membership cache: a snapshot that always
// knows the index it was routed to, re-taken when the membership changes. Upstreams are addresses
// on loopback (nothing is sent to them); no planner.
#include "tools/frontend/frontend_core.h"

#include <catch2/catch.hpp>
#include <map>
#include <optional>
#include <set>
#include <string>

#include "absl/status/status.h"
#include "cacheroute/dataplane/key_id.h"

namespace cacheroute::frontend {
namespace {

FrontendConfig Config(const std::string& policy, int members) {
  FrontendConfig config;
  config.policy = policy;
  for (int i = 0; i < members; ++i) {
    config.upstreams.push_back(
        {"engine-" + std::to_string(i), "http://127.0.0.1:" + std::to_string(18001 + i)});
  }
  return config;
}

// Headers as a front end passes them: looked up by lower-case name.
struct Headers {
  std::map<std::string, std::string> values;
  std::optional<absl::string_view> operator()(absl::string_view name) const {
    auto it = values.find(std::string(name));
    if (it == values.end()) return std::nullopt;
    return absl::string_view(it->second);
  }
};

TEST_CASE("Route: the key header decides, the member is the picked index's, rates are counted") {
  StopSignal stop;
  FrontendCore core(Config("sticky", 4), stop);
  REQUIRE(core.Start().ok());
  const Headers headers{{{"x-cacheroute-key", "tenant-7"}}};
  std::set<std::string> members;
  for (int i = 0; i < 20; ++i) {
    RoutedRequest r = core.Route(headers, R"({"prompt": "hello"})", core.routing().clock().Now());
    REQUIRE(r.member() != nullptr);
    CHECK(r.member() == r.members->At(r.lifecycle.destination()));
    CHECK(r.lifecycle.keyed());
    members.insert(r.member()->name);
    r.lifecycle.UpstreamDone();
  }
  CHECK(members.size() == 1);  // sticky: one key, one member
  const dataplane::RateSnapshot rates = core.routing().recorder().Drain();
  REQUIRE(rates.counts.size() == 1);
  CHECK(rates.counts[0].key_id == dataplane::KeyId("tenant-7"));
  CHECK(rates.counts[0].count == 20);

  // No key anywhere (header absent, no user or system prompt): routed, not counted.
  RoutedRequest unkeyed =
      core.Route(Headers{}, R"({"messages": [{"role": "user", "content": "x"}]})",
                 core.routing().clock().Now());
  CHECK(unkeyed.member() != nullptr);
  CHECK(!unkeyed.lifecycle.keyed());
  CHECK(core.routing().recorder().Drain().counts.empty());
  core.Stop();
}

TEST_CASE(
    "NeedsBody: always under a token-counting dispatch, else only when the key may be in it") {
  StopSignal stop_a, stop_b;
  FrontendCore token_work(Config("cacheroute", 2), stop_a);
  FrontendCore paper(Config("cacheroute-paper", 2), stop_b);
  const Headers keyed{{{"x-cacheroute-key", "k"}}};
  CHECK(token_work.NeedsBody(keyed));
  CHECK(token_work.NeedsBody(Headers{}));
  CHECK(!paper.NeedsBody(keyed));  // the header comes first in key_from and is present
  CHECK(paper.NeedsBody(Headers{}));
}

TEST_CASE("the thread's snapshot follows a membership change and knows every routed index") {
  StopSignal stop;
  FrontendCore core(Config("flat-lb", 2), stop);
  REQUIRE(core.Start().ok());
  const std::shared_ptr<const Members> before = core.ThreadMembers();
  CHECK(core.ThreadMembers() == before);  // cached while the generation stays
  CHECK(before->count == 2);
  // engine-1 leaves and engine-2 takes its index.
  REQUIRE(
      core.membership()
          .Apply({{"engine-0", "http://127.0.0.1:18001"}, {"engine-2", "http://127.0.0.1:18003"}})
          .ok());
  const std::shared_ptr<const Members> after = core.ThreadMembers();
  CHECK(after != before);
  CHECK(after->generation > before->generation);
  CHECK(after->At(1)->name == "engine-2");
  CHECK(before->At(1)->name == "engine-1");  // a snapshot held stays as it was
  std::set<std::string> seen;
  for (int i = 0; i < 200; ++i) {
    RoutedRequest r = core.Route(Headers{}, "", core.routing().clock().Now());
    REQUIRE(r.member() != nullptr);
    seen.insert(r.member()->name);
    r.lifecycle.UpstreamDone();
  }
  CHECK(seen == std::set<std::string>{"engine-0", "engine-2"});
  RoutedRequest any = core.RouteAny(core.routing().clock().Now());
  CHECK(any.member() != nullptr);
  RoutedRequest moved = core.Redirect(std::move(any), 1);
  REQUIRE(moved.member() != nullptr);
  CHECK(moved.member()->name == "engine-2");
  core.Stop();
}

TEST_CASE("Explain: the table policies say why, routing nothing; others and keyless refuse") {
  StopSignal stop;
  FrontendCore core(Config("cacheroute", 3), stop);
  REQUIRE(core.Start().ok());
  const Headers keyed{{{"x-cacheroute-key", "tenant-7"}}};
  const absl::StatusOr<std::string> explained = core.Explain(keyed, R"({"prompt": "hello"})");
  REQUIRE(explained.ok());
  CHECK_THAT(*explained, Catch::Contains("\"rule\": \"token_work\""));
  CHECK_THAT(*explained, Catch::Contains("\"candidates\""));
  // Nothing was routed or counted.
  CHECK(core.routing().recorder().Drain().counts.empty());
  CHECK(core.routing().router().Remembered(dataplane::KeyId("tenant-7")).destination ==
        dataplane::kNoDestination);
  // The pick that follows on the same state goes where the explanation said (all three are
  // candidates of so small a fleet, so no random draw differs).
  RoutedRequest routed = core.Route(keyed, R"({"prompt": "hello"})", core.routing().clock().Now());
  REQUIRE(routed.member() != nullptr);
  CHECK_THAT(*explained, Catch::Contains("\"destination\": \"" + routed.member()->name + "\""));

  const absl::StatusOr<std::string> keyless =
      core.Explain(Headers{}, R"({"messages": [{"role": "user", "content": "x"}]})");
  CHECK(absl::IsInvalidArgument(keyless.status()));
  core.Stop();

  StopSignal stop_b;
  FrontendCore sticky(Config("sticky", 3), stop_b);
  CHECK(absl::IsFailedPrecondition(sticky.Explain(keyed, "{}").status()));
}

}  // namespace
}  // namespace cacheroute::frontend
