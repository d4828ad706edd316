// ServedHit (tools/frontend/routing/served_hit.h): the served KV hit over an exponential window,
// the per-destination counters, and what the Router is given.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "cacheroute/dataplane/random.h"
#include "tools/frontend/routing/served_hit.h"

namespace cacheroute::frontend {
namespace {

struct Fixture {
  dataplane::SeededRandom random{9};
  dataplane::Router router{{.destination_count = 2}, random};
  ServedHit hit{2, router};
  std::vector<std::string> labels = {"destination=\"e0\"", "destination=\"e1\""};
  std::string Page() {
    base::Exposition page("g_");
    hit.Render(page, labels);
    return page.Take();
  }
};

TEST_CASE(
    "before any answer reports cached tokens there is no measure and the router is given none") {
  Fixture f;
  f.hit.Record(0, true, {.prompt_tokens = 100, .cached_tokens = std::nullopt});
  f.hit.Record(0, true, {.prompt_tokens = 0, .cached_tokens = 0});  // no prompt tokens
  CHECK_FALSE(f.hit.measured().has_value());
  CHECK(f.router.measured_hit() == 0.0);
  CHECK(absl::StrContains(f.Page(), "g_measured_kv_hit_ratio 0\n"));
  CHECK(absl::StrContains(f.Page(), "g_prompt_tokens_total{destination=\"e0\",planned=\"1\"} 0\n"));
}

TEST_CASE("the measure is cached / prompt tokens, and the Router is given it") {
  Fixture f;
  f.hit.Record(0, true, {.prompt_tokens = 100, .cached_tokens = 60});
  f.hit.Record(1, false, {.prompt_tokens = 100, .cached_tokens = 20});
  REQUIRE(f.hit.measured().has_value());
  // Two answers: the first weighs kKeep of the second.
  const double want = (60 * ServedHit::kKeep + 20) / (100 * ServedHit::kKeep + 100);
  CHECK(*f.hit.measured() == Approx(want));
  CHECK(f.router.measured_hit() == Approx(want));
  const std::string page = f.Page();
  CHECK(absl::StrContains(page, "g_prompt_tokens_total{destination=\"e0\",planned=\"1\"} 100\n"));
  CHECK(absl::StrContains(page, "g_cached_tokens_total{destination=\"e0\",planned=\"1\"} 60\n"));
  CHECK(absl::StrContains(page, "g_cached_tokens_total{destination=\"e1\",planned=\"0\"} 20\n"));
  CHECK(absl::StrContains(page, "g_cached_tokens_total{destination=\"e1\",planned=\"1\"} 0\n"));
}

TEST_CASE("the window forgets: after a few thousand answers only the recent ones count") {
  Fixture f;
  for (int i = 0; i < 1000; ++i) f.hit.Record(0, true, {.prompt_tokens = 10, .cached_tokens = 10});
  CHECK(*f.hit.measured() == Approx(1.0));
  for (int i = 0; i < 5000; ++i) f.hit.Record(0, true, {.prompt_tokens = 10, .cached_tokens = 0});
  // What is left of the first thousand: kKeep^5000 of their weight, under 1%.
  CHECK(*f.hit.measured() < 0.01);
}

TEST_CASE("Reset zeroes one destination's counters; the fleet's measure stays") {
  Fixture f;
  f.hit.Record(0, true, {.prompt_tokens = 100, .cached_tokens = 50});
  f.hit.Record(1, true, {.prompt_tokens = 100, .cached_tokens = 50});
  f.hit.Reset(0);
  const std::string page = f.Page();
  CHECK(absl::StrContains(page, "g_prompt_tokens_total{destination=\"e0\",planned=\"1\"} 0\n"));
  CHECK(absl::StrContains(page, "g_prompt_tokens_total{destination=\"e1\",planned=\"1\"} 100\n"));
  CHECK(*f.hit.measured() == Approx(0.5));
}

}  // namespace
}  // namespace cacheroute::frontend
