// DestinationHealth (tools/frontend/health/destination_health.h): the outlier state machine on a
// real Router. Slow is not dead: only failed connects and resets before the headers mark a
// destination down, once per outage; answers, probes and health checks move it back and forth.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "base/exposition.h"
#include "cacheroute/dataplane/random.h"
#include "cacheroute/dataplane/router.h"
#include "tools/frontend/health/destination_health.h"

namespace cacheroute::frontend {
namespace {

struct Fixture {
  dataplane::SeededRandom random{7};
  dataplane::Router router{{.destination_count = 2}, random};
  DestinationHealth health{2, /*failure_threshold=*/3, router};
  Member member{.name = "e0", .url = "http://127.0.0.1:1"};
  std::vector<std::string> labels = {"destination=\"e0\"", "destination=\"e1\""};

  std::string Page(bool kinds = false) {
    base::Exposition page("g_");
    if (kinds) {
      health.RenderErrorKinds(page, labels);
    } else {
      health.RenderCounters(page, labels);
    }
    return page.Take();
  }
  bool Has(const std::string& line, bool kinds = false) {
    return absl::StrContains(Page(kinds), line + "\n");
  }
};

TEST_CASE("failure_threshold connect failures or resets in a row mark a destination down once") {
  Fixture f;
  f.health.RecordError(0, f.member, ErrorKind::kConnect, "refused");
  f.health.RecordError(0, f.member, ErrorKind::kReset, "reset");
  CHECK(f.health.Up(0));
  f.health.RecordError(0, f.member, ErrorKind::kConnect, "refused");
  CHECK_FALSE(f.health.Up(0));
  CHECK(f.health.Up(1));
  // More failures during the same outage do not mark it again.
  f.health.RecordError(0, f.member, ErrorKind::kConnect, "refused");
  CHECK(f.Has("g_destination_marked_down_total{destination=\"e0\"} 1"));
  CHECK(f.Has("g_upstream_errors_total{destination=\"e0\"} 4"));
  CHECK(f.Has("g_upstream_error_kinds_total{destination=\"e0\",kind=\"connect\"} 3", true));
  CHECK(f.Has("g_upstream_error_kinds_total{destination=\"e0\",kind=\"reset\"} 1", true));
}

TEST_CASE(
    "slow is not dead: timeouts, protocol errors and breaks after the headers never mark down") {
  Fixture f;
  for (int i = 0; i < 10; ++i) {
    f.health.RecordError(0, f.member, ErrorKind::kHeaderTimeout, "slow");
    f.health.RecordError(0, f.member, ErrorKind::kIdleTimeout, "slow body", false);
    f.health.RecordError(0, f.member, ErrorKind::kProtocol, "garbage");
    f.health.RecordError(0, f.member, ErrorKind::kReset, "broke off", /*may_mark_down=*/false);
  }
  CHECK(f.health.Up(0));
  CHECK(f.Has("g_upstream_errors_total{destination=\"e0\"} 40"));
  CHECK(f.Has("g_destination_marked_down_total{destination=\"e0\"} 0"));
  CHECK(f.Has("g_upstream_error_kinds_total{destination=\"e0\",kind=\"header_timeout\"} 10", true));
  CHECK(f.Has("g_upstream_error_kinds_total{destination=\"e0\",kind=\"idle_timeout\"} 10", true));
  CHECK(f.Has("g_upstream_error_kinds_total{destination=\"e0\",kind=\"protocol\"} 10", true));
}

TEST_CASE("an answered request resets the count of failures in a row") {
  Fixture f;
  for (int i = 0; i < 5; ++i) {
    f.health.RecordError(0, f.member, ErrorKind::kConnect, "refused");
    f.health.RecordError(0, f.member, ErrorKind::kConnect, "refused");
    f.health.RecordSuccess(0);
  }
  CHECK(f.health.Up(0));
}

TEST_CASE("a probe's 200 brings a down destination back; the next outage is marked again") {
  Fixture f;
  for (int i = 0; i < 3; ++i) f.health.RecordError(0, f.member, ErrorKind::kConnect, "refused");
  REQUIRE_FALSE(f.health.Up(0));
  f.health.ProbeAnswered(0, f.member);
  CHECK(f.health.Up(0));
  for (int i = 0; i < 3; ++i) f.health.RecordError(0, f.member, ErrorKind::kReset, "reset");
  CHECK_FALSE(f.health.Up(0));
  CHECK(f.Has("g_destination_marked_down_total{destination=\"e0\"} 2"));
}

TEST_CASE("failed active health checks in a row mark an up destination down; a pass resets them") {
  Fixture f;
  f.health.HealthCheckFailed(1, f.member, 503);
  f.health.HealthCheckFailed(1, f.member, 0);
  f.health.HealthCheckPassed(1);
  f.health.HealthCheckFailed(1, f.member, 0);
  f.health.HealthCheckFailed(1, f.member, 0);
  CHECK(f.health.Up(1));
  f.health.HealthCheckFailed(1, f.member, 0);
  CHECK_FALSE(f.health.Up(1));
  CHECK(f.Has("g_health_check_failures_total{destination=\"e1\"} 5"));
  CHECK(f.Has("g_destination_marked_down_total{destination=\"e1\"} 1"));
  CHECK(f.Has("g_upstream_errors_total{destination=\"e1\"} 0"));
}

TEST_CASE("Reset: a new member at an index starts with zeroed counters, up or down as given") {
  Fixture f;
  for (int i = 0; i < 3; ++i) f.health.RecordError(0, f.member, ErrorKind::kConnect, "refused");
  REQUIRE_FALSE(f.health.Up(0));
  f.health.Reset(0, /*up=*/true);
  CHECK(f.health.Up(0));
  CHECK(f.Has("g_upstream_errors_total{destination=\"e0\"} 0"));
  CHECK(f.Has("g_destination_marked_down_total{destination=\"e0\"} 0"));
  // Its failures in a row start from zero too: two more do not mark it down.
  f.health.RecordError(0, f.member, ErrorKind::kConnect, "refused");
  f.health.RecordError(0, f.member, ErrorKind::kConnect, "refused");
  CHECK(f.health.Up(0));
  f.health.Reset(1, /*up=*/false);  // a member moved here from a down index
  CHECK_FALSE(f.health.Up(1));
}

}  // namespace
}  // namespace cacheroute::frontend
