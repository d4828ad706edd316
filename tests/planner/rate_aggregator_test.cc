// Tests for planner/rate_aggregator: every validation error (and that a rejected report changes
// nothing), duplicate reports, the EWMA against its formula (one step exactly, many steps against
// the closed form for a steady rate), key and gateway expiry, names, order, and Export/Restore.
// Time is always a fixed absl::Time; nothing sleeps or reads a clock.
#include "planner/rate_aggregator.h"

#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "tests/support/require_ok.h"

namespace cacheroute::planner {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1'700'000'000);
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

absl::Time At(double seconds) { return kT0 + absl::Seconds(seconds); }

KeyCountReport Entry(uint64_t key_id, double count = 0) {
  KeyCountReport entry;
  entry.key_id = key_id;
  entry.count = count;
  return entry;
}

RateReport Report(std::string gateway, uint64_t sequence,
                  std::vector<std::pair<uint64_t, double>> counts, double other = 0) {
  RateReport report;
  report.gateway_id = std::move(gateway);
  report.sequence = sequence;
  report.window_start_unix_ms = 1'700'000'000'000;
  report.window_end_unix_ms = 1'700'000'010'000;
  for (auto [key, count] : counts) report.counts.push_back(Entry(key, count));
  report.other_count = other;
  return report;
}

ReportResult MustApply(RateAggregator& aggregator, const RateReport& report, absl::Time now) {
  return cacheroute::testing::RequireOk(aggregator.Apply(report, now));
}

using RateList = std::vector<std::pair<uint64_t, double>>;

RateList RatesOf(const RateAggregator& aggregator) {
  RateList list;
  for (const KeyRate& kr : aggregator.Rates()) list.emplace_back(kr.key, kr.rate);
  return list;
}

// α and one EWMA step exactly as the header states them.
double Alpha(double dt, double tau) { return 1 - std::exp(-dt / tau); }
double Step(double rate, double counts, double dt, double tau) {
  const double alpha = Alpha(dt, tau);
  return alpha * (counts / dt) + (1 - alpha) * rate;
}

TEST_CASE("ValidateOptions accepts the defaults and names each bad field") {
  CHECK(RateAggregator::ValidateOptions({}).ok());
  struct Case {
    RateAggregatorOptions options;
    std::string message;
  };
  std::vector<Case> cases = {
      {{.smoothing = absl::ZeroDuration()}, "smoothing: must be finite and > 0, got 0"},
      {{.smoothing = absl::Seconds(-1)}, "smoothing: must be finite and > 0, got -1s"},
      {{.smoothing = absl::InfiniteDuration()}, "smoothing: must be finite and > 0, got inf"},
      {{.key_ttl = absl::ZeroDuration()}, "key_ttl: must be finite and > 0, got 0"},
      {{.key_ttl = absl::InfiniteDuration()}, "key_ttl: must be finite and > 0, got inf"},
      {{.max_keys_per_report = 0}, "max_keys_per_report: must be between 1 and 4294967295, got 0"},
      {{.max_keys_per_report = size_t{1} << 32},
       "max_keys_per_report: must be between 1 and 4294967295, got 4294967296"},
  };
  for (const Case& c : cases) {
    absl::Status status = RateAggregator::ValidateOptions(c.options);
    CHECK(status.code() == absl::StatusCode::kInvalidArgument);
    CHECK(status.message() == c.message);
  }
}

TEST_CASE("Apply rejects every invalid field, naming it and its value, and applies nothing") {
  RateAggregator aggregator({.max_keys_per_report = 5}, kT0);
  // Some state to compare against: two keys, a name, a gateway, an unkeyed rate.
  RateReport first = Report("gw-a", 1, {{10, 4}, {20, 2}}, 3);
  first.counts[0].key = "tenant-10";
  MustApply(aggregator, first, At(1));
  aggregator.CloseInterval(At(10));
  MustApply(aggregator, Report("gw-a", 2, {{10, 1}}, 1), At(11));
  const RateAggregator::State before = aggregator.Export();

  auto with = [](auto change) {
    RateReport report = Report("gw-b", 7, {{10, 1}, {30, 2}, {40, 3}});
    change(report);
    return report;
  };
  struct Case {
    RateReport report;
    std::string message;
  };
  const std::string long_id(129, 'g');
  const std::string long_key(257, 'k');
  std::vector<Case> cases = {
      {with([](RateReport& r) { r.gateway_id = ""; }), "gateway_id: must not be empty"},
      {with([&](RateReport& r) { r.gateway_id = long_id; }),
       "gateway_id: must be at most 128 bytes, got 129 bytes"},
      {with([](RateReport& r) { r.window_start_unix_ms = r.window_end_unix_ms = 1000; }),
       "window_end_unix_ms: must be > window_start_unix_ms (1000), got 1000"},
      {with([](RateReport& r) {
         r.window_start_unix_ms = 5000;
         r.window_end_unix_ms = -5000;
       }),
       "window_end_unix_ms: must be > window_start_unix_ms (5000), got -5000"},
      {with([](RateReport& r) {
         r.window_start_unix_ms = 0;
         r.window_end_unix_ms = 3'600'001;
       }),
       "window_end_unix_ms: must be at most 3600000 ms (1 hour) after window_start_unix_ms (0), "
       "got 3600001"},
      {with([](RateReport& r) {
         r.window_start_unix_ms = std::numeric_limits<int64_t>::min();
         r.window_end_unix_ms = std::numeric_limits<int64_t>::max();
       }),
       "window_end_unix_ms: must be at most 3600000 ms (1 hour) after window_start_unix_ms "
       "(-9223372036854775808), got 9223372036854775807"},
      {with([](RateReport& r) { r.other_count = -1; }),
       "other_count: must be a finite number >= 0, got -1"},
      {with([](RateReport& r) { r.other_count = kNaN; }),
       "other_count: must be a finite number >= 0, got nan"},
      {with([](RateReport& r) { r.other_count = 2e15; }),
       "other_count: must be at most 1e+15, got 2e+15"},
      {with([](RateReport& r) {
         for (uint64_t k = 100; k < 103; ++k) r.counts.push_back(Entry(k, 1));
       }),
       "counts: 6 entries, more than the limit of 5"},
      {with([](RateReport& r) { r.counts[2].count = kNaN; }),
       "counts[2].count: must be a finite number >= 0, got nan"},
      {with([](RateReport& r) { r.counts[1].count = -0.5; }),
       "counts[1].count: must be a finite number >= 0, got -0.5"},
      {with([](RateReport& r) { r.counts[0].count = kInf; }),
       "counts[0].count: must be a finite number >= 0, got inf"},
      {with([](RateReport& r) { r.counts[2].count = 1e300; }),
       "counts[2].count: must be at most 1e+15, got 1e+300"},
      {with([](RateReport& r) { r.counts[1].prompt_tokens = -kInf; }),
       "counts[1].prompt_tokens: must be a finite number >= 0, got -inf"},
      {with([](RateReport& r) {
         r.counts[2].prompt_tokens = 10;
         r.counts[2].reusable_tokens = kNaN;
       }),
       "counts[2].reusable_tokens: must be a finite number >= 0, got nan"},
      {with([](RateReport& r) { r.counts[0].reusable_tokens = 5; }),
       "counts[0].reusable_tokens: needs prompt_tokens for the same requests, got none"},
      {with([](RateReport& r) {
         r.counts[1].prompt_tokens = 10;
         r.counts[1].reusable_tokens = 10.5;
       }),
       "counts[1].reusable_tokens: 10.5 is more than its prompt_tokens (10)"},
      {with([&](RateReport& r) { r.counts[2].key = long_key; }),
       "counts[2].key: must be at most 256 bytes, got 257 bytes"},
      {with([](RateReport& r) { r.counts[2].key_id = 10; }),
       "counts[2].key_id: duplicate key id 10 (also counts[0])"},
      {with([](RateReport& r) {
         r.counts.push_back(Entry(30, 1));  // index 3 repeats index 1
       }),
       "counts[3].key_id: duplicate key id 30 (also counts[1])"},
      // The first error in field order is the one reported.
      {with([](RateReport& r) {
         r.counts[1].key_id = 10;
         r.counts[2].count = -1;
       }),
       "counts[1].key_id: duplicate key id 10 (also counts[0])"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<ReportResult> result = aggregator.Apply(c.report, At(12));
    CHECK(result.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(result.status().message() == c.message);
  }
  absl::StatusOr<ReportResult> result =
      aggregator.Apply(Report("gw-b", 1, {}), absl::InfiniteFuture());
  CHECK(result.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(result.status().message() ==
        "now: must be a finite time between the years 1678 and 2262, got infinite-future");

  // Nothing of the rejected reports was applied: not now, and not after the next close.
  CHECK(aggregator.Export() == before);
  aggregator.CloseInterval(At(20));
  RateAggregator reference = *RateAggregator::Restore(before, {.max_keys_per_report = 5});
  reference.CloseInterval(At(20));
  CHECK(RatesOf(aggregator) == RatesOf(reference));
  CHECK(aggregator.UnkeyedRate() == reference.UnkeyedRate());
  CHECK(aggregator.Gateways() == reference.Gateways());
  CHECK_FALSE(aggregator.RateOf(30).has_value());
}

TEST_CASE("a valid report with edge values is accepted") {
  RateAggregator aggregator({.max_keys_per_report = 3}, kT0);
  RateReport report = Report(std::string(128, 'g'), 0, {{1, 0}, {2, 1e15}, {3, 0.25}}, 1e15);
  report.counts[0].key = std::string(256, 'k');
  report.counts[1].prompt_tokens = 0;
  report.window_start_unix_ms = -1;
  report.window_end_unix_ms = 3'600'000 - 1;  // exactly one hour
  ReportResult result = MustApply(aggregator, report, At(1));
  CHECK_FALSE(result.duplicate);
  CHECK(result.accepted_keys == 3);
  CHECK(aggregator.known_keys() == 3);
  // An empty report is valid too: it only tells that the gateway saw no traffic.
  CHECK(MustApply(aggregator, Report("empty", 1, {}), At(1)).accepted_keys == 0);
}

TEST_CASE("duplicate key ids are found in large reports, wherever they are") {
  RateAggregator aggregator({}, kT0);
  std::mt19937_64 random(42);
  RateReport report = Report("gw", 1, {});
  for (size_t i = 0; i < 50'000; ++i) report.counts.push_back(Entry(random(), 1));
  for (size_t trial = 0; trial < 5; ++trial) {
    RateReport bad = report;
    const size_t first = random() % 50'000;
    size_t second = random() % 50'000;
    if (second == first) second = (second + 1) % 50'000;
    bad.counts[second].key_id = bad.counts[first].key_id;
    const size_t lo = std::min(first, second), hi = std::max(first, second);
    absl::StatusOr<ReportResult> result = aggregator.Apply(bad, At(1));
    CHECK(result.status().message() ==
          "counts[" + std::to_string(hi) + "].key_id: duplicate key id " +
              std::to_string(bad.counts[lo].key_id) + " (also counts[" + std::to_string(lo) + "])");
  }
  CHECK(aggregator.known_keys() == 0);
  // Sequential ids (a worst case for weak hashing) and the valid report itself pass.
  RateReport sequential = Report("gw", 1, {});
  for (uint64_t k = 0; k < 50'000; ++k) sequential.counts.push_back(Entry(k << 20));
  CHECK(MustApply(aggregator, sequential, At(1)).accepted_keys == 50'000);
  CHECK(MustApply(aggregator, Report("gw", 2, {}), At(1)).accepted_keys == 0);
  report.sequence = 3;
  CHECK(MustApply(aggregator, report, At(1)).accepted_keys == 50'000);
}

TEST_CASE("a repeated or older sequence is a duplicate and applies nothing") {
  RateAggregator aggregator({}, kT0);
  CHECK_FALSE(MustApply(aggregator, Report("gw", 5, {{1, 10}}, 2), At(1)).duplicate);
  const RateAggregator::State after_first = aggregator.Export();
  for (uint64_t sequence : {5, 4, 0}) {
    ReportResult retry = MustApply(aggregator, Report("gw", sequence, {{1, 10}, {2, 1}}, 2), At(2));
    CHECK(retry.duplicate);
    CHECK(retry.accepted_keys == 0);
  }
  CHECK(aggregator.Export() == after_first);
  // Another gateway's sequence numbers are its own; a later one from "gw" is applied.
  CHECK_FALSE(MustApply(aggregator, Report("other", 5, {{1, 10}}), At(3)).duplicate);
  CHECK_FALSE(MustApply(aggregator, Report("gw", 7, {{1, 10}}), At(4)).duplicate);
  aggregator.CloseInterval(At(10));
  CHECK(*aggregator.RateOf(1) == Approx(Step(0, 30, 10, 60)).epsilon(1e-12));
  CHECK(aggregator.UnkeyedRate() == Approx(Step(0, 2, 10, 60)).epsilon(1e-12));
  const std::vector<GatewayInfo> gateways = aggregator.Gateways();
  REQUIRE(gateways.size() == 2);
  CHECK(gateways[0] ==
        GatewayInfo{.gateway_id = "gw", .last_sequence = 7, .last_report = At(4), .reports = 2});
  CHECK(gateways[1] ==
        GatewayInfo{.gateway_id = "other", .last_sequence = 5, .last_report = At(3), .reports = 1});
}

TEST_CASE("one interval follows the EWMA formula exactly") {
  const double tau = 60;
  RateAggregator aggregator({.smoothing = absl::Seconds(tau)}, kT0);
  MustApply(aggregator, Report("gw", 1, {{7, 50}}, 5), At(1));
  aggregator.CloseInterval(At(10));
  // A new key starts from 0: after one interval its rate is α·s, not s.
  const double r1 = Step(0, 50, 10, tau);
  CHECK(r1 == Approx(Alpha(10, tau) * 5.0).epsilon(1e-14));
  CHECK(*aggregator.RateOf(7) == Approx(r1).epsilon(1e-14));
  CHECK(aggregator.UnkeyedRate() == Approx(Step(0, 5, 10, tau)).epsilon(1e-14));

  MustApply(aggregator, Report("gw", 2, {{7, 30}, {8, 4}}, 0), At(12));
  aggregator.CloseInterval(At(17.5));
  const double r2 = Step(r1, 30, 7.5, tau);
  CHECK(*aggregator.RateOf(7) == Approx(r2).epsilon(1e-14));
  CHECK(*aggregator.RateOf(8) == Approx(Step(0, 4, 7.5, tau)).epsilon(1e-14));
  // No report at all: the rate only decays.
  aggregator.CloseInterval(At(47.5));
  CHECK(*aggregator.RateOf(7) == Approx(r2 * std::exp(-30 / tau)).epsilon(1e-14));
  CHECK(aggregator.UnkeyedRate() ==
        Approx(Step(Step(Step(0, 5, 10, tau), 0, 7.5, tau), 0, 30, tau)).epsilon(1e-14));
}

TEST_CASE("a zero-length or backward interval changes nothing") {
  RateAggregator aggregator({}, kT0);
  MustApply(aggregator, Report("gw", 1, {{7, 50}}, 5), At(1));
  aggregator.CloseInterval(At(10));
  MustApply(aggregator, Report("gw", 2, {{7, 20}}), At(11));
  const RateAggregator::State state = aggregator.Export();
  aggregator.CloseInterval(At(10));
  aggregator.CloseInterval(At(3));
  CHECK(aggregator.Export() == state);
  // The counts stay pending for the next real close.
  aggregator.CloseInterval(At(20));
  CHECK(*aggregator.RateOf(7) == Approx(Step(Step(0, 50, 10, 60), 20, 10, 60)).epsilon(1e-14));
}

TEST_CASE("counts from several gateways add up and converge to the true rate") {
  const double tau = 60;
  RateAggregator aggregator({.smoothing = absl::Seconds(tau)}, kT0);
  // Three gateways each see 10 requests/s for key 1 and 2/s of unlisted traffic, reporting every
  // second; the planner closes an interval every 5 s, then 7 s, alternating.
  uint64_t sequence = 0;
  double t = 0, next_close = 5;
  bool short_interval = false;
  while (t < 600) {
    t += 1;
    ++sequence;
    for (const char* gateway : {"gw-a", "gw-b", "gw-c"}) {
      MustApply(aggregator, Report(gateway, sequence, {{1, 10}, {2, 0}}, 2), At(t));
    }
    if (t == next_close) {
      aggregator.CloseInterval(At(t));
      next_close += short_interval ? 5 : 7;
      short_interval = !short_interval;
    }
  }
  aggregator.CloseInterval(At(600));
  // Closed form for a steady rate s from 0: s·(1 − e^(−T/τ)), whatever the interval lengths.
  const double settled = 1 - std::exp(-600 / tau);
  CHECK(*aggregator.RateOf(1) == Approx(30 * settled).epsilon(1e-12));
  CHECK(*aggregator.RateOf(1) == Approx(30).epsilon(1e-4));
  CHECK(*aggregator.RateOf(2) == 0);
  CHECK(aggregator.UnkeyedRate() == Approx(6 * settled).epsilon(1e-12));
  for (const GatewayInfo& gateway : aggregator.Gateways()) CHECK(gateway.reports == 600);
}

TEST_CASE("keys and gateways not reported for key_ttl are forgotten") {
  RateAggregator aggregator({.key_ttl = absl::Minutes(10)}, kT0);
  RateReport report = Report("gw-old", 1, {{1, 10}, {2, 10}});
  report.counts[0].key = "one";
  MustApply(aggregator, report, At(0));
  MustApply(aggregator, Report("gw-new", 1, {{2, 1}}), At(300));
  aggregator.CloseInterval(At(600));  // key 1 is exactly key_ttl old: kept
  CHECK(aggregator.known_keys() == 2);
  CHECK(aggregator.Gateways().size() == 2);
  aggregator.CloseInterval(At(601));  // older than key_ttl now
  CHECK_FALSE(aggregator.RateOf(1).has_value());
  CHECK(aggregator.KeyName(1).empty());
  CHECK(aggregator.RateOf(2).has_value());
  CHECK(RatesOf(aggregator).size() == 1);
  std::vector<GatewayInfo> gateways = aggregator.Gateways();
  REQUIRE(gateways.size() == 1);
  CHECK(gateways[0].gateway_id == "gw-new");
  // A forgotten gateway may start its sequence again; a forgotten key starts again from 0.
  CHECK_FALSE(MustApply(aggregator, Report("gw-old", 1, {{1, 6}}), At(602)).duplicate);
  CHECK(*aggregator.RateOf(1) == 0);
  aggregator.CloseInterval(At(612));
  CHECK(*aggregator.RateOf(1) == Approx(Step(0, 6, 11, 60)).epsilon(1e-14));
  aggregator.CloseInterval(At(900));  // key 2 was last reported at 300
  CHECK(aggregator.RateOf(2).has_value());
  aggregator.CloseInterval(At(900.001));
  CHECK_FALSE(aggregator.RateOf(2).has_value());
}

TEST_CASE("Rates() lists every known key in ascending id order") {
  RateAggregator aggregator({}, kT0);
  std::mt19937_64 random(7);
  std::vector<uint64_t> ids;
  RateReport report = Report("gw", 1, {});
  for (int i = 0; i < 1000; ++i) {
    ids.push_back(random());
    report.counts.push_back(Entry(ids.back(), double(i)));
  }
  report.counts.push_back(Entry(0, 1));
  report.counts.push_back(Entry(std::numeric_limits<uint64_t>::max(), 1));
  ids.push_back(0);
  ids.push_back(std::numeric_limits<uint64_t>::max());
  MustApply(aggregator, report, At(1));
  // Before any close, new keys are listed with rate 0.
  for (const KeyRate& kr : aggregator.Rates()) CHECK(kr.rate == 0);
  aggregator.CloseInterval(At(2));
  std::vector<KeyRate> rates = aggregator.Rates();
  std::sort(ids.begin(), ids.end());
  REQUIRE(rates.size() == ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    CHECK(rates[i].key == ids[i]);
    CHECK(rates[i].rate == *aggregator.RateOf(ids[i]));
  }
  CHECK(aggregator.known_keys() == ids.size());
  CHECK_FALSE(aggregator.RateOf(12345).has_value());
}

TEST_CASE("KeyName keeps the last readable key sent") {
  RateAggregator aggregator({}, kT0);
  RateReport report = Report("gw", 1, {{1, 1}, {2, 1}});
  report.counts[0].key = "tenant/alpha";
  MustApply(aggregator, report, At(1));
  CHECK(aggregator.KeyName(1) == "tenant/alpha");
  CHECK(aggregator.KeyName(2).empty());  // reported, never with a name
  CHECK(aggregator.KeyName(3).empty());  // never reported
  // A report without a name keeps the old one; a different name replaces it.
  MustApply(aggregator, Report("gw", 2, {{1, 1}}), At(2));
  CHECK(aggregator.KeyName(1) == "tenant/alpha");
  report = Report("gw", 3, {{1, 1}, {2, 1}});
  report.counts[0].key = "tenant/alpha-renamed";
  report.counts[1].key = std::string("bin\0ary", 7);
  MustApply(aggregator, report, At(3));
  CHECK(aggregator.KeyName(1) == "tenant/alpha-renamed");
  CHECK(aggregator.KeyName(2) == std::string_view("bin\0ary", 7));
}

TEST_CASE("ServedAt keeps the last destination a report served the key at") {
  RateAggregator aggregator({}, kT0);
  RateReport report = Report("gw-a", 1, {{1, 1}, {2, 1}});
  report.counts[0].served_at = "engine-3";
  MustApply(aggregator, report, At(1));
  CHECK(aggregator.ServedAt(1) == "engine-3");
  CHECK(aggregator.ServedAt(2).empty());
  CHECK(aggregator.ServedAt(3).empty());
  CHECK(aggregator.KeyName(1).empty());  // a served_at alone names nothing
  // Another gateway's later report moves it; one that says nothing keeps it.
  report = Report("gw-b", 1, {{1, 1}});
  report.counts[0].served_at = "engine-5";
  MustApply(aggregator, report, At(2));
  MustApply(aggregator, Report("gw-a", 2, {{1, 1}}), At(3));
  CHECK(aggregator.ServedAt(1) == "engine-5");
  // Soft state: not exported.
  absl::StatusOr<RateAggregator> restored = RateAggregator::Restore(aggregator.Export(), {});
  REQUIRE(restored.ok());
  CHECK(restored->ServedAt(1).empty());
  // Too long: refused, naming the field.
  report = Report("gw-a", 3, {{1, 1}});
  report.counts[0].served_at = std::string(RateAggregator::kMaxKeyBytes + 1, 'x');
  absl::StatusOr<ReportResult> refused = aggregator.Apply(report, At(4));
  REQUIRE_FALSE(refused.ok());
  CHECK(std::string(refused.status().message()).find("counts[0].served_at") != std::string::npos);
}

// Feeds the same scripted traffic to an aggregator: reports from two gateways with names and
// unkeyed counts, closes at uneven times.
void Drive(RateAggregator& aggregator, int from_step, int to_step) {
  for (int step = from_step; step < to_step; ++step) {
    RateReport report = Report(step % 2 ? "gw-a" : "gw-b", step, {}, step % 3 + 0.5);
    for (uint64_t k = 0; k < 20; ++k) {
      if ((k + step) % 4 == 0) continue;
      report.counts.push_back(Entry(k * 1000 + step % 7, double(k % 5) + 0.5));
      if (k == 3) report.counts.back().key = "key-" + std::to_string(k * 1000 + step % 7);
      if (k % 3 == 0) {  // sizes for some keys
        report.counts.back().prompt_tokens = 1000.0 * (k + 1) + step;
        report.counts.back().reusable_tokens = 300.0 * (k + 1) + step % 5;
      }
    }
    MustApply(aggregator, report, At(step * 3.5));
    if (step % 3 == 2) aggregator.CloseInterval(At(step * 3.5 + 1.25));
  }
}

TEST_CASE("Export then Restore continues exactly") {
  const RateAggregatorOptions options = {.smoothing = absl::Seconds(30),
                                         .key_ttl = absl::Seconds(60)};
  RateAggregator original(options, kT0);
  Drive(original, 0, 40);  // the last step leaves counts pending
  const RateAggregator::State state = original.Export();
  REQUIRE(state.unkeyed_pending > 0);
  REQUIRE(std::any_of(state.keys.begin(), state.keys.end(),
                      [](const RateAggregator::State::Key& k) { return k.pending > 0; }));
  REQUIRE(std::is_sorted(state.keys.begin(), state.keys.end(),
                         [](const auto& a, const auto& b) { return a.key_id < b.key_id; }));

  absl::StatusOr<RateAggregator> restored = RateAggregator::Restore(state, options);
  REQUIRE(restored.ok());
  CHECK(restored->Export() == state);
  CHECK(RatesOf(*restored) == RatesOf(original));
  CHECK(restored->Gateways() == original.Gateways());
  CHECK(restored->UnkeyedRate() == original.UnkeyedRate());
  CHECK(restored->KeyName(3000 + 39 % 7) == original.KeyName(3000 + 39 % 7));

  // The same traffic afterwards gives bit-identical results, including duplicates and expiry.
  Drive(original, 40, 100);
  Drive(*restored, 40, 100);
  CHECK(MustApply(original, Report("gw-a", 99, {{1, 1}}), At(400)).duplicate);
  CHECK(MustApply(*restored, Report("gw-a", 99, {{1, 1}}), At(400)).duplicate);
  original.CloseInterval(At(1000));
  restored->CloseInterval(At(1000));
  CHECK(restored->Export() == original.Export());
  CHECK(RatesOf(*restored) == RatesOf(original));

  // Restore takes keys in any order.
  RateAggregator::State shuffled = state;
  std::reverse(shuffled.keys.begin(), shuffled.keys.end());
  std::reverse(shuffled.gateways.begin(), shuffled.gateways.end());
  CHECK(RateAggregator::Restore(shuffled, options)->Export() == state);
}

TEST_CASE("Restore rejects an invalid state, naming the field and value") {
  RateAggregator aggregator({}, kT0);
  RateReport report = Report("gw", 1, {{5, 1}, {6, 2}});
  MustApply(aggregator, report, At(1));
  const RateAggregator::State good = aggregator.Export();
  REQUIRE(RateAggregator::Restore(good, {}).ok());

  auto with = [&](auto change) {
    RateAggregator::State state = good;
    change(state);
    return state;
  };
  struct Case {
    RateAggregator::State state;
    std::string message;
  };
  std::vector<Case> cases = {
      {with([](auto& s) { s.last_close = absl::InfinitePast(); }),
       "last_close: must be a finite time between the years 1678 and 2262, got infinite-past"},
      {with([](auto& s) { s.unkeyed_rate = kNaN; }),
       "unkeyed_rate: must be a finite number >= 0, got nan"},
      {with([](auto& s) { s.unkeyed_pending = -2; }),
       "unkeyed_pending: must be a finite number >= 0, got -2"},
      {with([](auto& s) { s.keys[1].rate = kInf; }),
       "keys[1].rate: must be a finite number >= 0, got inf"},
      {with([](auto& s) { s.keys[0].pending = -1; }),
       "keys[0].pending: must be a finite number >= 0, got -1"},
      {with([](auto& s) { s.keys[1].last_report = absl::InfiniteFuture(); }),
       "keys[1].last_report: must be a finite time between the years 1678 and 2262, got "
       "infinite-future"},
      {with([](auto& s) { s.keys[0].name = std::string(300, 'x'); }),
       "keys[0].name: must be at most 256 bytes, got 300 bytes"},
      {with([](auto& s) { s.keys[1].key_id = 5; }),
       "keys[1].key_id: duplicate key id 5 (also keys[0])"},
      {with([](auto& s) { s.keys[0].reusable = kNaN; }),
       "keys[0].reusable: must be a finite number >= 0 or -1 (unmeasured), got nan"},
      {with([](auto& s) { s.keys[1].prompt = -3; }),
       "keys[1].prompt: must be a finite number >= 0 or -1 (unmeasured), got -3"},
      {with([](auto& s) { s.keys[0].pending_measured = -1; }),
       "keys[0].pending_measured: must be a finite number >= 0, got -1"},
      {with([](auto& s) { s.keys[1].pending_reusable = 1e300; }),
       "keys[1].pending_reusable: must be a finite number >= 0, got 1e+300"},
      {with([](auto& s) { s.gateways[0].gateway_id = ""; }),
       "gateways[0].gateway_id: must not be empty"},
      {with([](auto& s) { s.gateways.push_back(s.gateways[0]); }),
       "gateways[1].gateway_id: duplicate gateway id \"gw\" (also gateways[0])"},
      {with([](auto& s) { s.gateways[0].last_report = absl::InfiniteFuture(); }),
       "gateways[0].last_report: must be a finite time between the years 1678 and 2262, got "
       "infinite-future"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<RateAggregator> restored = RateAggregator::Restore(c.state, {});
    CHECK(restored.status().code() == absl::StatusCode::kInvalidArgument);
    CHECK(restored.status().message() == c.message);
  }
  CHECK(RateAggregator::Restore(good, {.key_ttl = absl::ZeroDuration()}).status().message() ==
        "key_ttl: must be finite and > 0, got 0");
}

TEST_CASE("reported sizes give each key its smoothed mean reusable and prompt tokens") {
  const double tau = 20;
  RateAggregator aggregator({.smoothing = absl::Seconds(tau)}, kT0);
  // Key 1: two gateways, 10 requests sharing 4,000 of 5,000 tokens in all; key 2: no sizes.
  RateReport a = Report("gw-a", 1, {{1, 6}, {2, 3}});
  a.counts[0].prompt_tokens = 3000;
  a.counts[0].reusable_tokens = 2400;
  RateReport b = Report("gw-b", 1, {{1, 4}});
  b.counts[0].prompt_tokens = 2000;
  b.counts[0].reusable_tokens = 1600;
  MustApply(aggregator, a, At(1));
  MustApply(aggregator, b, At(2));
  // Before the first close there are no sizes yet.
  CHECK(aggregator.TokensOf(1)->reusable == kUnmeasured);
  CHECK_FALSE(aggregator.TokensOf(3).has_value());
  aggregator.CloseInterval(At(10));
  CHECK(aggregator.TokensOf(1)->reusable == 400);
  CHECK(aggregator.TokensOf(1)->prompt == 500);
  CHECK(aggregator.TokensOf(2)->reusable == kUnmeasured);
  CHECK(aggregator.TokensOf(2)->prompt == kUnmeasured);
  // The next interval's mean (1,000 of 2,000 per request) is smoothed in with the rates' α; an
  // interval without sizes leaves them as they are.
  RateReport c = Report("gw-a", 2, {{1, 2}});
  c.counts[0].prompt_tokens = 4000;
  c.counts[0].reusable_tokens = 2000;
  MustApply(aggregator, c, At(11));
  aggregator.CloseInterval(At(20));
  const double alpha = Alpha(10, tau);
  CHECK(aggregator.TokensOf(1)->reusable == Approx(alpha * 1000 + (1 - alpha) * 400));
  CHECK(aggregator.TokensOf(1)->prompt == Approx(alpha * 2000 + (1 - alpha) * 500));
  MustApply(aggregator, Report("gw-a", 3, {{1, 2}}), At(21));
  const KeyTokens before = *aggregator.TokensOf(1);
  aggregator.CloseInterval(At(30));
  CHECK(aggregator.TokensOf(1)->reusable == before.reusable);
  // Estimates lists the rates and, at the same index, the sizes.
  std::vector<KeyRate> rates;
  std::vector<KeyTokens> tokens;
  aggregator.Estimates(rates, tokens);
  RateList listed;
  for (const KeyRate& kr : rates) listed.emplace_back(kr.key, kr.rate);
  CHECK(listed == RatesOf(aggregator));
  REQUIRE(tokens.size() == 2);
  CHECK(tokens[0].reusable == before.reusable);
  CHECK(tokens[1].reusable == kUnmeasured);
}

// Not run by default (`rate_aggregator_test "[.benchmark]"` runs it): prints the cost of Apply per
// entry for a steady state of `keys` known keys and reports of 100,000 random ones of them. Prints
// figures only; asserts nothing about time.
// An arm report whose TTFT samples are `ttft` (seconds), one request each, plus `extra` requests
// without a TTFT; `failed` of them failed.
ArmReport Arm(const std::vector<double>& ttft, uint64_t extra, uint64_t failed, uint64_t prompt,
              uint64_t cached) {
  dataplane::TtftHistogram h;
  for (double t : ttft) h.Observe(t);
  ArmReport arm;
  arm.requests = ttft.size() + extra;
  arm.failures = failed;
  arm.prompt_tokens = prompt;
  arm.cached_tokens = cached;
  arm.ttft_bucket_counts.assign(h.counts().begin(), h.counts().end());
  return arm;
}

TEST_CASE("per-arm evidence from several gateways merges exactly, once per report") {
  const absl::Time t0 = absl::FromUnixSeconds(1'700'000'000);
  RateAggregator aggregator(RateAggregatorOptions{}, t0);
  std::mt19937_64 random(7);
  std::uniform_real_distribution<double> seconds(0.0, 3.0);
  dataplane::Evidence expected;
  for (int g = 0; g < 3; ++g) {
    for (uint64_t seq = 1; seq <= 4; ++seq) {
      std::vector<double> table_ttft(20 + g), control_ttft(10 + seq);
      for (double& t : table_ttft) t = seconds(random);
      for (double& t : control_ttft) t = seconds(random);
      RateReport report = Report("gw-" + std::to_string(g), seq, {{1, 5}});
      report.evidence = EvidenceReport{.table_fraction = 0.2,
                                       .table = Arm(table_ttft, 2, 1, 1000, 600),
                                       .control = Arm(control_ttft, 0, 0, 500, 100)};
      MustApply(aggregator, report, t0);
      CHECK(MustApply(aggregator, report, t0).duplicate);  // a retry adds nothing
      for (double t : table_ttft) expected.table.ttft.Observe(t);
      for (double t : control_ttft) expected.control.ttft.Observe(t);
      expected.table.requests += table_ttft.size() + 2;
      expected.table.failures += 1;
      expected.table.prompt_tokens += 1000;
      expected.table.cached_tokens += 600;
      expected.control.requests += control_ttft.size();
      expected.control.prompt_tokens += 500;
      expected.control.cached_tokens += 100;
    }
  }
  // Evidence of another split (an older table) is dropped.
  RateReport old = Report("gw-9", 1, {{1, 5}});
  old.evidence =
      EvidenceReport{.table_fraction = 0.05, .table = Arm({9.0}, 0, 0, 0, 0), .control = {}};
  MustApply(aggregator, old, t0);

  const dataplane::Evidence merged = aggregator.TakeEvidence(0.2);
  CHECK(merged.table.requests == expected.table.requests);
  CHECK(merged.table.failures == expected.table.failures);
  CHECK(merged.table.prompt_tokens == expected.table.prompt_tokens);
  CHECK(merged.table.cached_tokens == expected.table.cached_tokens);
  CHECK(merged.table.ttft.counts() == expected.table.ttft.counts());
  CHECK(merged.control.requests == expected.control.requests);
  CHECK(merged.control.ttft.counts() == expected.control.ttft.counts());
  CHECK(aggregator.TakeEvidence(0.2).table.requests == 0);  // taken
}

TEST_CASE("invalid evidence is rejected, naming the field and value, and applies nothing") {
  const absl::Time t0 = absl::FromUnixSeconds(1'700'000'000);
  RateAggregator aggregator(RateAggregatorOptions{}, t0);
  struct Case {
    std::function<void(EvidenceReport&)> mutate;
    const char* message;
  };
  const std::vector<Case> cases = {
      {[](EvidenceReport& e) { e.table_fraction = 1.5; },
       "evidence.table_fraction: must be a number in [0, 1], got 1.5"},
      {[](EvidenceReport& e) { e.table.failures = e.table.requests + 1; },
       "evidence.table.failures: 4 is more than its requests (3)"},
      {[](EvidenceReport& e) { e.control.cached_tokens = 11; },
       "evidence.control.cached_tokens: 11 is more than its prompt_tokens (10)"},
      {[](EvidenceReport& e) { e.table.ttft_bucket_counts.resize(5); },
       "evidence.table.ttft_bucket_counts: 5 counts, want 22 (one per bucket) or none"},
      {[](EvidenceReport& e) { e.table.ttft_bucket_counts[0] += 5; },
       "evidence.table.ttft_bucket_counts: 8 samples, more than its requests (3)"},
      {[](EvidenceReport& e) { e.control.requests = uint64_t{1} << 60; },
       "evidence.control.requests: must be at most"},
  };
  for (const Case& c : cases) {
    RateReport report = Report("gw", 1, {{1, 5}});
    EvidenceReport e{.table_fraction = 0.2,
                     .table = Arm({0.1, 0.2, 0.3}, 0, 0, 10, 5),
                     .control = Arm({0.1}, 0, 0, 10, 5)};
    c.mutate(e);
    report.evidence = e;
    absl::StatusOr<ReportResult> result = aggregator.Apply(report, t0);
    REQUIRE_FALSE(result.ok());
    CHECK_THAT(std::string(result.status().message()), Catch::Contains(c.message));
  }
  CHECK(aggregator.TakeEvidence(0.2).table.requests == 0);
  CHECK(aggregator.Gateways().empty());
}

TEST_CASE("benchmark: Apply cost per entry", "[.benchmark]") {
  for (size_t keys : {size_t{128'824}, size_t{1'000'000}, size_t{10'000'000}}) {
    RateAggregator aggregator({}, kT0);
    std::mt19937_64 random(1);
    std::vector<uint64_t> ids(keys);
    for (uint64_t& id : ids) id = random();
    RateReport report = Report("gw", 0, {});
    for (size_t begin = 0; begin < keys; begin += 100'000) {
      report.counts.clear();
      for (size_t i = begin; i < std::min(keys, begin + 100'000); ++i) {
        report.counts.push_back(Entry(ids[i], 1));
      }
      ++report.sequence;
      MustApply(aggregator, report, At(0));
    }
    std::vector<RateReport> reports(10, Report("gw", 0, {}));
    for (RateReport& r : reports) {
      std::shuffle(ids.begin(), ids.end(), random);
      for (size_t i = 0; i < std::min<size_t>(keys, 100'000); ++i) {
        r.counts.push_back(Entry(ids[i], 1));
      }
    }
    size_t entries = 0;
    const auto start = std::chrono::steady_clock::now();
    for (RateReport& r : reports) {
      r.sequence = ++report.sequence;
      entries += MustApply(aggregator, r, At(1)).accepted_keys;
    }
    const double apply_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const auto close_start = std::chrono::steady_clock::now();
    aggregator.CloseInterval(At(10));
    const double close_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - close_start).count();
    const auto rates_start = std::chrono::steady_clock::now();
    const size_t listed = aggregator.Rates().size();
    const double rates_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - rates_start).count();
    std::printf(
        "%9zu keys: Apply %.1f ns/entry (%.2fM entries/s), CloseInterval %.1f ms, Rates() %.1f ms "
        "(%zu keys)\n",
        keys, apply_s * 1e9 / entries, entries / apply_s / 1e6, close_s * 1e3, rates_s * 1e3,
        listed);
  }
}

}  // namespace
}  // namespace cacheroute::planner
