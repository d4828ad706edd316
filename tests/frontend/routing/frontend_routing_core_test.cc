// RoutingCore and RequestLifecycle (tools/frontend/routing/): what a pick records (rates, picks by
// reason) and what each lifecycle event feeds (in-flight count, durations, TTFT, served hit,
// rollout evidence), on a real Router with a ManualClock, so durations are exact.
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "cacheroute/dataplane/arm_evidence.h"
#include "cacheroute/dataplane/key_id.h"
#include "cacheroute/dataplane/policies.h"
#include "cacheroute/dataplane/routing_table.h"
#include "tools/frontend/routing/routing_core.h"

namespace cacheroute::frontend {
namespace {

using std::chrono::milliseconds;

struct Fixture {
  Fixture() { REQUIRE(core.router().Resize(2, nullptr, clock.Now()).ok); }
  std::string Page() {
    base::Exposition page("g_");
    const dataplane::RouterStats stats = core.Stats();
    core.RenderPicks(page, stats);
    core.RenderLoads(page, stats, labels);
    core.RenderLatency(page, labels);
    return page.Take();
  }
  bool Has(const std::string& line) { return absl::StrContains(Page(), line + "\n"); }
  // Installs a table planning `key` on destination 1, with a rollout of `table_fraction`.
  void InstallTable(const std::string& key, double table_fraction) {
    const std::vector<dataplane::TableEntry> entries = {
        {.key_id = dataplane::KeyId(key), .destinations = {1}}};
    auto table = dataplane::RoutingTable::Build({1, 1}, 2, {1.0, 1.0}, entries, table_fraction);
    REQUIRE(table.ok());
    REQUIRE(core.router()
                .Install(std::make_shared<const dataplane::RoutingTable>(*std::move(table)),
                         clock.Now())
                .ok);
  }

  dataplane::ManualClock clock;
  RoutingCore core{{.capacity = 4, .seed = 11}, clock};
  std::vector<std::string> labels = {"destination=\"e0\"", "destination=\"e1\""};
};

TEST_CASE("a keyed request is recorded under its key and counted by its pick's reason") {
  Fixture f;
  RequestLifecycle request = f.core.Route("tenant-1", nullptr, f.clock.Now());
  CHECK(request.ok());
  CHECK(request.keyed());
  CHECK(request.reason() == dataplane::Reason::kNoTable);
  const dataplane::RateSnapshot rates = f.core.recorder().Drain();
  CHECK(rates.total == 1);
  REQUIRE(rates.counts.size() == 1);
  CHECK(rates.counts[0].key_id == dataplane::KeyId("tenant-1"));
  CHECK(f.Has("g_picks_total{reason=\"no_table\"} 1"));
  CHECK(f.Has("g_table_version{epoch=\"0\"} 0"));
}

TEST_CASE("a request without a key goes by power of two, is not recorded, counts as no_key") {
  Fixture f;
  RequestLifecycle request = f.core.Route(std::nullopt, nullptr, f.clock.Now());
  CHECK(request.ok());
  CHECK_FALSE(request.keyed());
  CHECK(f.core.recorder().Drain().total == 0);
  CHECK(f.Has("g_picks_total{reason=\"no_key\"} 1"));
  RequestLifecycle any = f.core.RouteAny(f.clock.Now());  // /v1/models: not a pick
  CHECK(any.ok());
  CHECK(f.Has("g_picks_total{reason=\"policy\"} 0"));
}

TEST_CASE("another policy picks; the pick is tracked in flight like the Router's own") {
  Fixture f;
  dataplane::StickyPolicy sticky(2);
  RequestLifecycle request = f.core.Route("tenant-1", &sticky, f.clock.Now());
  CHECK(request.reason() == dataplane::Reason::kPolicy);
  CHECK(f.core.Stats().in_flight[request.destination()] == 1);
  CHECK(f.Has("g_picks_total{reason=\"policy\"} 1"));
  CHECK(f.core.recorder().Drain().total == 1);  // rates are recorded whatever the policy
}

TEST_CASE("a policy that counts its own requests in flight hears of their end, once") {
  Fixture f;
  dataplane::DynamoKvPolicy dynamo(2, f.core.random(), f.clock);
  {
    RequestLifecycle request = f.core.Route("tenant-1", &dynamo, f.clock.Now());
    RequestLifecycle other = f.core.Route("tenant-2", &dynamo, f.clock.Now());
    CHECK(dynamo.in_flight() == 2);
    request.UpstreamDone();
    CHECK(dynamo.in_flight() == 1);
    request.UpstreamDone();  // counted once
    CHECK(dynamo.in_flight() == 1);
  }
  // A request that never reached its upstream ends when destroyed; so does a redirected one.
  CHECK(dynamo.in_flight() == 0);
  RequestLifecycle routed = f.core.Route("tenant-3", &dynamo, f.clock.Now());
  RequestLifecycle moved = f.core.Redirect(std::move(routed), 0);
  CHECK(dynamo.in_flight() == 0);
}

TEST_CASE("Redirect moves a routed request's in-flight count; key, rate and reason stay") {
  Fixture f;
  f.InstallTable("tenant-1", 1.0);
  RequestLifecycle routed = f.core.Route("tenant-1", nullptr, f.clock.Now());
  REQUIRE(routed.destination() == 1);
  RequestLifecycle moved = f.core.Redirect(std::move(routed), 0);
  CHECK(moved.destination() == 0);
  CHECK_FALSE(moved.planned());
  CHECK(moved.keyed());
  CHECK(moved.reason() == dataplane::Reason::kPlanned);
  CHECK(f.core.Stats().in_flight == std::vector<int64_t>{1, 0});
  CHECK(f.core.recorder().Drain().total == 1);  // recorded once, by Route
  CHECK(f.Has("g_picks_total{reason=\"planned\"} 1"));
  moved.UpstreamDone();
  CHECK(f.core.Stats().in_flight == std::vector<int64_t>{0, 0});
}

TEST_CASE("UpstreamDone releases the in-flight count once and observes the duration") {
  Fixture f;
  f.InstallTable("tenant-1", 1.0);
  RequestLifecycle request = f.core.Route("tenant-1", nullptr, f.clock.Now());
  REQUIRE(request.destination() == 1);
  CHECK(request.planned());
  CHECK(f.Has("g_in_flight{destination=\"e1\"} 1"));
  f.clock.Advance(milliseconds(3));
  request.UpstreamDone();
  f.clock.Advance(milliseconds(100));
  request.UpstreamDone();  // counted once
  CHECK(f.Has("g_in_flight{destination=\"e1\"} 0"));
  CHECK(f.Has("g_destination_request_duration_seconds_count{destination=\"e1\"} 1"));
  CHECK(f.Has("g_destination_request_duration_seconds_sum{destination=\"e1\"} 0.003"));
  CHECK(f.Has("g_destination_request_duration_seconds_bucket{destination=\"e1\",le=\"0.0025\"} 0"));
  CHECK(f.Has("g_destination_request_duration_seconds_bucket{destination=\"e1\",le=\"0.005\"} 1"));
}

TEST_CASE("a request that never reached its upstream is released without a duration") {
  Fixture f;
  {
    RequestLifecycle request = f.core.Route("tenant-1", nullptr, f.clock.Now());
    CHECK(f.core.Stats().in_flight[request.destination()] == 1);
  }
  CHECK(f.core.Stats().in_flight[0] + f.core.Stats().in_flight[1] == 0);
  CHECK(f.Has("g_destination_request_duration_seconds_count{destination=\"e0\"} 0"));
  CHECK(f.Has("g_destination_request_duration_seconds_count{destination=\"e1\"} 0"));
}

TEST_CASE(
    "FirstToken: a stream's first byte is its TTFT; a unary answer's is not in the histogram") {
  Fixture f;
  f.InstallTable("tenant-1", 1.0);
  RequestLifecycle stream = f.core.Route("tenant-1", nullptr, f.clock.Now());
  f.clock.Advance(milliseconds(20));
  stream.FirstToken(/*streamed=*/true);
  f.clock.Advance(milliseconds(500));
  stream.FirstToken(/*streamed=*/true);  // later chunks are not first
  RequestLifecycle unary = f.core.Route("tenant-1", nullptr, f.clock.Now());
  unary.FirstToken(/*streamed=*/false);
  CHECK(f.Has("g_time_to_first_token_seconds_count{destination=\"e1\"} 1"));
  CHECK(f.Has("g_time_to_first_token_seconds_sum{destination=\"e1\"} 0.02"));
}

TEST_CASE("Usage feeds the served hit of the request's destination, planned or not") {
  Fixture f;
  f.InstallTable("tenant-1", 1.0);
  RequestLifecycle planned = f.core.Route("tenant-1", nullptr, f.clock.Now());
  planned.Usage({.prompt_tokens = 100, .cached_tokens = 80});
  CHECK(*f.core.served_hit().measured() == Approx(0.8));
  base::Exposition page("g_");
  f.core.served_hit().Render(page, f.labels);
  CHECK(absl::StrContains(page.Take(),
                          "g_cached_tokens_total{destination=\"e1\",planned=\"1\"} 80\n"));
}

// A routing input with `bytes` bytes of prompt text (and no blocks).
RoutingInput Prompted(const std::string& key, uint64_t bytes) {
  return {.key = key, .prompt = {.text_bytes = bytes}, .block_hashes = {}};
}

TEST_CASE("a pick queues its estimated prompt; FirstToken moves it to decoding") {
  Fixture f;
  dataplane::StickyPolicy sticky(2);
  int key = 0;  // a new key each time: a returning one is expected warm where it went
  for (const bool streamed : {true, false}) {
    for (dataplane::Policy* policy :
         {static_cast<dataplane::Policy*>(nullptr), static_cast<dataplane::Policy*>(&sticky)}) {
      INFO("streamed " << streamed << ", policy " << (policy != nullptr ? "sticky" : "router"));
      RequestLifecycle request =
          f.core.Route(Prompted(absl::StrCat("tenant-", ++key), 4000), policy, f.clock.Now());
      REQUIRE(request.ok());
      CHECK(request.prompt_tokens() == 1000);  // 4 bytes a token before any usage
      const uint32_t d = request.destination();
      const dataplane::LoadView& loads = f.core.router().loads();
      CHECK(loads.Work(d).queued_prefill_tokens == 1000);
      CHECK(loads.Work(d).prefilling == 1);
      CHECK(loads.Work(d).decoding == 0);
      request.FirstToken(streamed);
      CHECK(loads.Work(d).queued_prefill_tokens == 0);
      CHECK(loads.Work(d).prefilling == 0);
      CHECK(loads.Work(d).decoding == 1);
      request.FirstToken(streamed);  // once
      CHECK(loads.Work(d).decoding == 1);
      request.UpstreamDone();
      CHECK(loads.Work(d).decoding == 0);
    }
  }
}

TEST_CASE("a request without a key, or redirected, is queued with its prompt too") {
  Fixture f;
  const dataplane::LoadView& loads = f.core.router().loads();
  RequestLifecycle none = f.core.Route(
      RoutingInput{.key = std::nullopt, .prompt = {.text_bytes = 800}, .block_hashes = {}}, nullptr,
      f.clock.Now());
  CHECK_FALSE(none.keyed());
  CHECK(loads.Work(none.destination()).queued_prefill_tokens == 200);
  none.UpstreamDone();
  RequestLifecycle moved =
      f.core.Redirect(f.core.Route(Prompted("tenant-2", 1200), nullptr, f.clock.Now()), 0);
  CHECK(moved.prompt_tokens() == 300);
  CHECK(loads.Work(0).queued_prefill_tokens == 300);
  CHECK(loads.Work(1).queued_prefill_tokens == 0);
}

TEST_CASE("Usage calibrates the prompt estimate and tells the Router what was served") {
  Fixture f;
  RequestLifecycle first = f.core.Route(Prompted("tenant-1", 4000), nullptr, f.clock.Now());
  CHECK(first.prompt_tokens() == 1000);
  first.FirstToken(/*streamed=*/false);
  first.Usage({.prompt_tokens = 500, .cached_tokens = 200});  // 8 bytes a token
  first.UpstreamDone();
  CHECK(f.core.prompt_estimate().bytes_per_token() == Approx(8.0));
  // The decision expected only the template (a new key): the Router measures the template from it.
  CHECK(f.core.router().template_tokens() == Approx(200));
  RequestLifecycle second = f.core.Route(Prompted("tenant-9", 4000), nullptr, f.clock.Now());
  CHECK(second.prompt_tokens() == 500);
  // The Router expects the template cached: 500 − 200 queued.
  CHECK(f.core.router().loads().Work(second.destination()).queued_prefill_tokens == 300);
  // Without cached tokens the Router is told nothing; the estimate still learns.
  second.Usage({.prompt_tokens = 1000, .cached_tokens = std::nullopt});
  CHECK(f.core.router().template_tokens() == Approx(200));
  CHECK(f.core.prompt_estimate().bytes_per_token() < 8.0);
}

TEST_CASE("block hashes reach the Router: new keys with a known prefix go where it went") {
  Fixture f;
  const RoutingInput first{.key = "tenant-0",
                           .prompt = {.text_bytes = 64 * 64},
                           .block_hashes = {11, 12, 13, 14, 15, 16, 17, 18, 19, 20}};
  RequestLifecycle seed = f.core.Route(first, nullptr, f.clock.Now());
  const uint32_t d = seed.destination();
  seed.UpstreamDone();
  for (int i = 1; i <= 12; ++i) {
    RoutingInput input = first;
    input.key = absl::StrCat("tenant-", i);
    RequestLifecycle request = f.core.Route(input, nullptr, f.clock.Now());
    CHECK(request.destination() == d);
    request.UpstreamDone();
  }
}

// The rate reports' sizes: a keyed request's prompt is compared with its key's previous one by
// block hashes (reusable tokens) and its answer gives the prompt and cached tokens (KeySizes).
TEST_CASE("keyed requests measure their key's sizes for the rate reports") {
  Fixture f;
  const uint64_t key_id = dataplane::KeyId("tenant-s");
  // 40 blocks of 16 tokens (640 tokens); the next turn shares the first 25.
  std::vector<uint64_t> hashes(40);
  for (size_t b = 0; b < hashes.size(); ++b) hashes[b] = 1000 + b;
  RoutingInput input{.key = "tenant-s", .prompt = {.text_bytes = 40 * 64}, .block_hashes = hashes};
  RequestLifecycle first = f.core.Route(input, nullptr, f.clock.Now());
  CHECK_FALSE(f.core.key_sizes().Get(key_id).has_value());  // nothing compared or answered yet
  first.Usage({.prompt_tokens = 640, .cached_tokens = 0});
  first.UpstreamDone();
  for (size_t b = 25; b < hashes.size(); ++b) input.block_hashes[b] = 5000 + b;
  RequestLifecycle second = f.core.Route(input, nullptr, f.clock.Now());
  second.Usage({.prompt_tokens = 640, .cached_tokens = 384});
  second.UpstreamDone();
  const std::optional<dataplane::KeySize> size = f.core.key_sizes().Get(key_id);
  REQUIRE(size.has_value());
  CHECK(size->prompt_tokens == 640);
  REQUIRE(size->reusable_tokens.has_value());
  CHECK(*size->reusable_tokens == 25 * 16);  // block 24 is a grid position: exact here
  // A request without a key measures nothing.
  RequestLifecycle none =
      f.core.Route(RoutingInput{.key = std::nullopt, .prompt = {}, .block_hashes = hashes}, nullptr,
                   f.clock.Now());
  none.UpstreamDone();
  CHECK(f.core.key_sizes().Get(key_id)->answers == 2);
}

TEST_CASE("Finish: a keyed request's evidence while the table has a rollout, once") {
  Fixture f;
  SECTION("no rollout: no evidence") {
    f.InstallTable("tenant-1", 1.0);
    RequestLifecycle request = f.core.Route("tenant-1", nullptr, f.clock.Now());
    request.Finish(200);
    CHECK_FALSE(f.core.evidence().Drain().has_value());
  }
  SECTION("a rollout: TTFT, failure and tokens on the key's arm") {
    f.InstallTable("tenant-1", 0.5);
    const dataplane::Arm arm = dataplane::ArmOf(dataplane::KeyId("tenant-1"), 0.5);
    RequestLifecycle ok = f.core.Route("tenant-1", nullptr, f.clock.Now());
    CHECK(ok.reason() == (arm == dataplane::Arm::kTable ? dataplane::Reason::kPlanned
                                                        : dataplane::Reason::kControlArm));
    f.clock.Advance(milliseconds(40));
    ok.FirstToken(/*streamed=*/true);
    ok.Usage({.prompt_tokens = 100, .cached_tokens = 30});
    ok.Finish(200);
    ok.Finish(200);  // once
    RequestLifecycle failed = f.core.Route("tenant-1", nullptr, f.clock.Now());
    failed.Finish(502);
    RequestLifecycle keyless = f.core.Route(std::nullopt, nullptr, f.clock.Now());
    keyless.Finish(200);  // not evidence
    const std::optional<dataplane::WindowEvidence> window = f.core.evidence().Drain();
    REQUIRE(window.has_value());
    CHECK(window->table_fraction == 0.5);
    const dataplane::ArmEvidence& e = window->evidence.of(arm);
    CHECK(e.requests == 2);
    CHECK(e.failures == 1);
    CHECK(e.prompt_tokens == 100);
    CHECK(e.cached_tokens == 30);
    CHECK(e.ttft.count() == 1);
    CHECK(window->evidence
              .of(arm == dataplane::Arm::kTable ? dataplane::Arm::kControl : dataplane::Arm::kTable)
              .requests == 0);
  }
}

TEST_CASE("answers measure their destination's cache turnover once its KV capacity is known") {
  Fixture f;
  auto served = [&f](uint64_t prompt, uint64_t cached, uint64_t completion) {
    RequestLifecycle r = f.core.Route("k", nullptr, f.clock.Now());
    r.FirstToken(true);
    r.Usage({.prompt_tokens = prompt, .cached_tokens = cached, .completion_tokens = completion});
    r.UpstreamDone();
    return r.destination();
  };
  const uint32_t d = served(1000, 400, 200);
  CHECK(!f.core.measured_turnover(d).has_value());  // no capacity known: no turnover
  REQUIRE(f.core.router().SetKvCapacity(d, 48000).ok);
  REQUIRE(f.core.router().SetKvCapacity(1 - d, 48000).ok);
  // A first intake of 800 new tokens (600 uncached + 200 generated), over the 60-s window:
  // 13.33 tokens/s, so 48,000 tokens of KV turn over in 3,600 s.
  f.core.ResetDestination(d);
  REQUIRE(served(1000, 400, 200) == d);  // the key's memory keeps it there
  REQUIRE(f.core.measured_turnover(d).has_value());
  CHECK(std::chrono::duration<double>(*f.core.measured_turnover(d)).count() ==
        Approx(3600).epsilon(1e-9));
  // 60 s later the intake has decayed by 1/e before the next 800 tokens.
  f.clock.Advance(std::chrono::seconds(60));
  REQUIRE(served(1000, 400, 200) == d);
  const double rate = 800.0 / 60 * std::exp(-1.0) + 800.0 / 60;
  CHECK(std::chrono::duration<double>(*f.core.measured_turnover(d)).count() ==
        Approx(48000 / rate).epsilon(1e-9));
  // Without cached tokens nothing is known of what was new.
  f.core.ResetDestination(d);
  RequestLifecycle unknown = f.core.Route("k", nullptr, f.clock.Now());
  unknown.Usage({.prompt_tokens = 1000, .cached_tokens = std::nullopt, .completion_tokens = 5});
  CHECK(!f.core.measured_turnover(unknown.destination()).has_value());
}

TEST_CASE("with measure_turnover off no answer sets a turnover") {
  dataplane::ManualClock clock;
  RoutingCore core({.capacity = 2, .seed = 3, .measure_turnover = false}, clock);
  REQUIRE(core.router().Resize(2, nullptr, clock.Now()).ok);
  REQUIRE(core.router().SetKvCapacity(0, 1000).ok);
  REQUIRE(core.router().SetKvCapacity(1, 1000).ok);
  RequestLifecycle r = core.Route("k", nullptr, clock.Now());
  r.Usage({.prompt_tokens = 100, .cached_tokens = 0, .completion_tokens = 10});
  CHECK(!core.measured_turnover(r.destination()).has_value());
}

TEST_CASE("ResetDestination zeroes a new member's durations; AnyUp follows the Router") {
  Fixture f;
  RequestLifecycle request = f.core.RouteAny(f.clock.Now());
  const uint32_t d = request.destination();
  request.UpstreamDone();
  CHECK(f.Has(absl::StrCat("g_destination_request_duration_seconds_count{", f.labels[d], "} 1")));
  f.core.ResetDestination(d);
  CHECK(f.Has(absl::StrCat("g_destination_request_duration_seconds_count{", f.labels[d], "} 0")));
  CHECK(f.core.AnyUp());
  (void)f.core.router().MarkDown(0);
  (void)f.core.router().MarkDown(1);
  CHECK_FALSE(f.core.AnyUp());
  CHECK_FALSE(f.core.Route("tenant-1", nullptr, f.clock.Now()).ok());
}

}  // namespace
}  // namespace cacheroute::frontend
