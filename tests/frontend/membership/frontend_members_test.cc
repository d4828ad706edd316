// Membership (tools/frontend/membership/members.h): snapshots, index stability, the hooks a change
// calls, the policy built per snapshot, and members that cannot join. Addresses are loopback
// literals (resolved for real); a resolver failure is injected through MembershipOptions::resolve.
#include <catch2/catch.hpp>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "cacheroute/dataplane/routing_table.h"
#include "tools/frontend/membership/members.h"

namespace cacheroute::frontend {
namespace {

using dataplane::kNoDestination;

// Records what Membership tells the rest of the dataplane.
struct Recorder {
  std::vector<std::pair<uint32_t, uint32_t>> occupants;  // (d, from) of each new occupant
  std::vector<std::vector<std::string>> installs;
  std::vector<uint32_t> policies_built;  // the count of each make_policy call
  absl::Status install_status = absl::OkStatus();

  MembershipOptions Options(uint32_t capacity, bool dynamic = false, bool per_count = false) {
    return {.capacity = capacity,
            .dynamic = dynamic,
            .make_policy = [this](uint32_t n) -> std::unique_ptr<dataplane::Policy> {
              policies_built.push_back(n);
              return std::make_unique<dataplane::StickyPolicy>(n);
            },
            .policy_per_count = per_count,
            .new_occupant = [this](uint32_t d, uint32_t from) { occupants.emplace_back(d, from); },
            .install =
                [this](const std::vector<std::string>& names) {
                  installs.push_back(names);
                  return install_status;
                }};
  }
};

std::vector<Upstream> List(const std::vector<std::string>& names, int port = 8000) {
  std::vector<Upstream> list;
  for (const std::string& n : names) list.push_back({n, absl::StrCat("http://127.0.0.1:", port)});
  return list;
}

TEST_CASE("the first membership: members by index, each new, installed once") {
  Recorder r;
  Membership membership(r.Options(4));
  CHECK(membership.Current()->count == 0);
  CHECK(membership.generation() == 0);
  REQUIRE(membership.Apply(List({"a", "b", "c"})).ok());
  const std::shared_ptr<const Members> m = membership.Current();
  CHECK(m->generation == 1);
  CHECK(membership.generation() == 1);
  CHECK(m->Names() == std::vector<std::string>{"a", "b", "c"});
  CHECK(m->At(1)->host_header == "127.0.0.1:8000");
  CHECK_FALSE(m->At(1)->endpoints.empty());
  CHECK(m->At(3) == nullptr);
  CHECK(m->At(kNoDestination) == nullptr);
  CHECK(membership.IndexOf("c") == 2);
  CHECK(membership.IndexOf("z") == kNoDestination);
  CHECK(r.occupants == std::vector<std::pair<uint32_t, uint32_t>>{
                           {0, kNoDestination}, {1, kNoDestination}, {2, kNoDestination}});
  CHECK(r.installs == std::vector<std::vector<std::string>>{{"a", "b", "c"}});
}

TEST_CASE("a member leaves: the others keep their index, the last fills the hole") {
  Recorder r;
  Membership membership(r.Options(4));
  REQUIRE(membership.Apply(List({"a", "b", "c", "d"})).ok());
  const std::shared_ptr<const Members> before = membership.Current();
  r.occupants.clear();
  REQUIRE(membership.Apply(List({"a", "c", "d"})).ok());
  const std::shared_ptr<const Members> after = membership.Current();
  CHECK(after->Names() == std::vector<std::string>{"a", "d", "c"});
  CHECK(after->At(0) == before->At(0));  // the same member object
  CHECK(after->At(2) == before->At(2));
  // d moved from 3 to 1: its health goes with it; index 3 still finds d for requests in flight.
  CHECK(r.occupants == std::vector<std::pair<uint32_t, uint32_t>>{{1, 3}});
  CHECK(after->At(3) != nullptr);
  CHECK(after->At(3)->name == "d");
  CHECK(after->generation == 2);
  CHECK(r.installs.back() == std::vector<std::string>{"a", "d", "c"});
}

TEST_CASE("members that join take the holes first, then the end, up to the capacity") {
  Recorder r;
  Membership membership(r.Options(4));
  REQUIRE(membership.Apply(List({"a", "b", "c"})).ok());
  r.occupants.clear();
  REQUIRE(membership.Apply(List({"a", "c", "x", "y", "z"})).ok());
  // b's index 1 goes to x, y joins at the end; z finds no room (capacity 4).
  CHECK(membership.Names() == std::vector<std::string>{"a", "x", "c", "y"});
  CHECK(r.occupants ==
        std::vector<std::pair<uint32_t, uint32_t>>{{1, kNoDestination}, {3, kNoDestination}});
}

TEST_CASE("a member whose URL changed is a new member under its name") {
  Recorder r;
  Membership membership(r.Options(2));
  REQUIRE(membership.Apply(List({"a", "b"})).ok());
  const std::shared_ptr<const Members> before = membership.Current();
  r.occupants.clear();
  r.installs.clear();
  std::vector<Upstream> moved = List({"a", "b"});
  moved[1].url = "http://127.0.0.1:9000";
  REQUIRE(membership.Apply(moved).ok());
  CHECK(membership.Names() == std::vector<std::string>{"a", "b"});
  CHECK(membership.Current()->At(1) != before->At(1));
  CHECK(membership.Current()->At(1)->url == "http://127.0.0.1:9000");
  CHECK(r.occupants == std::vector<std::pair<uint32_t, uint32_t>>{{1, kNoDestination}});
  CHECK(r.installs.size() == 1);
}

TEST_CASE("the policy: built with the first snapshot; per count only when it depends on it") {
  SECTION("a hashed policy is rebuilt when the count changes, not otherwise") {
    Recorder r;
    Membership membership(r.Options(4, false, /*per_count=*/true));
    REQUIRE(membership.Apply(List({"a", "b"})).ok());
    dataplane::Policy* first = membership.Current()->policy.get();
    REQUIRE(first != nullptr);
    std::vector<Upstream> moved = List({"a", "b"});
    moved[0].url = "http://127.0.0.1:9000";
    REQUIRE(membership.Apply(moved).ok());
    CHECK(membership.Current()->policy.get() == first);
    REQUIRE(membership.Apply(List({"a", "b", "c"})).ok());
    CHECK(r.policies_built == std::vector<uint32_t>{2, 3});
  }
  SECTION("another policy keeps its memory across changes") {
    Recorder r;
    Membership membership(r.Options(4));
    REQUIRE(membership.Apply(List({"a", "b"})).ok());
    dataplane::Policy* first = membership.Current()->policy.get();
    REQUIRE(membership.Apply(List({"a", "b", "c"})).ok());
    CHECK(membership.Current()->policy.get() == first);
    CHECK(r.policies_built == std::vector<uint32_t>{2});
  }
}

TEST_CASE("a member that does not resolve: an error for the static list, left out when dynamic") {
  const auto failing = [](const UpstreamAddress& a) -> absl::StatusOr<Endpoints> {
    if (a.host == "gone.example") return absl::UnavailableError("cannot resolve \"gone.example\"");
    return ResolveAddress(a);
  };
  std::vector<Upstream> list = List({"a", "b"});
  list[1].url = "http://gone.example:8000";
  SECTION("static") {
    Recorder r;
    MembershipOptions options = r.Options(2);
    options.resolve = failing;
    Membership membership(std::move(options));
    const absl::Status s = membership.Apply(list);
    CHECK(absl::IsInvalidArgument(s));
    CHECK(absl::StrContains(s.message(), "upstreams[1].url: cannot resolve \"gone.example\""));
    CHECK(membership.Current()->count == 0);
    CHECK(r.installs.empty());
  }
  SECTION("dynamic") {
    Recorder r;
    MembershipOptions options = r.Options(2, /*dynamic=*/true);
    options.resolve = failing;
    Membership membership(std::move(options));
    REQUIRE(membership.Apply(list).ok());
    CHECK(membership.Names() == std::vector<std::string>{"a"});
  }
}

TEST_CASE("a URL that does not parse is InvalidArgument naming it, the snapshot unchanged") {
  Recorder r;
  Membership membership(r.Options(2, /*dynamic=*/true));
  REQUIRE(membership.Apply(List({"a"})).ok());
  const absl::Status s = membership.Apply({{"a", "http://127.0.0.1:8000"}, {"b", "ftp://x"}});
  CHECK(absl::IsInvalidArgument(s));
  CHECK(absl::StrContains(s.message(), "upstreams[1].url"));
  CHECK(membership.generation() == 1);
}

TEST_CASE("a failed install is the error of Apply") {
  Recorder r;
  r.install_status = absl::InternalError("table re-map refused");
  Membership membership(r.Options(2));
  const absl::Status s = membership.Apply(List({"a"}));
  CHECK(s.code() == absl::StatusCode::kInternal);
  CHECK(s.message() == "membership: table re-map refused");
}

TEST_CASE("Render: the member count and the changes applied") {
  Recorder r;
  Membership membership(r.Options(3));
  REQUIRE(membership.Apply(List({"a", "b"})).ok());
  REQUIRE(membership.Apply(List({"a", "b", "c"})).ok());
  base::Exposition page("g_");
  membership.Render(page);
  const std::string text = page.Take();
  CHECK(absl::StrContains(text, "\ng_members 3\n"));
  CHECK(absl::StrContains(text, "\ng_membership_changes_total 1\n"));
}

}  // namespace
}  // namespace cacheroute::frontend
