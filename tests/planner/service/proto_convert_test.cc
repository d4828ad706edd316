// Tests for planner/service/proto_convert: a wire rate report field by field (optional fields only
// when set), and the rate state through its proto and back to an equal state.
#include "planner/service/proto_convert.h"

#include <catch2/catch.hpp>
#include <vector>

#include "absl/time/time.h"
#include "tests/support/require_ok.h"

namespace cacheroute::service {
namespace {

TEST_CASE("ToRateReport copies every field, the optional ones only when set") {
  v1::ReportRatesRequest request;
  request.set_gateway_id("gw-1");
  request.set_sequence(17);
  request.set_window_start_unix_ms(1000);
  request.set_window_end_unix_ms(11000);
  request.set_other_count(2.5);
  v1::KeyCount* measured = request.add_counts();
  measured->set_key_id(42);
  measured->set_count(7);
  measured->set_prompt_tokens(700);
  measured->set_reusable_tokens(300);
  measured->set_key("tenant/a");
  measured->set_served_at("pod-3");
  v1::KeyCount* bare = request.add_counts();
  bare->set_key_id(43);
  bare->set_count(0.5);

  planner::RateReport report = ToRateReport(request);
  CHECK(report.gateway_id == "gw-1");
  CHECK(report.sequence == 17);
  CHECK(report.window_start_unix_ms == 1000);
  CHECK(report.window_end_unix_ms == 11000);
  CHECK(report.other_count == 2.5);
  REQUIRE(report.counts.size() == 2);
  CHECK(report.counts[0].key_id == 42);
  CHECK(report.counts[0].count == 7);
  CHECK(report.counts[0].prompt_tokens == 700);
  CHECK(report.counts[0].reusable_tokens == 300);
  CHECK(report.counts[0].key == "tenant/a");
  CHECK(report.counts[0].served_at == "pod-3");
  CHECK(report.counts[1].key_id == 43);
  CHECK(report.counts[1].count == 0.5);
  CHECK_FALSE(report.counts[1].prompt_tokens.has_value());
  CHECK_FALSE(report.counts[1].reusable_tokens.has_value());
  CHECK(report.counts[1].key.empty());
  CHECK_FALSE(report.evidence.has_value());

  v1::GateEvidence* evidence = request.mutable_evidence();
  evidence->set_table_fraction(0.95);
  evidence->mutable_table()->set_requests(100);
  evidence->mutable_table()->set_failures(2);
  evidence->mutable_table()->set_prompt_tokens(5000);
  evidence->mutable_table()->set_cached_tokens(4000);
  evidence->mutable_table()->add_ttft_bucket_counts(60);
  evidence->mutable_table()->add_ttft_bucket_counts(40);
  evidence->mutable_control()->set_requests(5);
  report = ToRateReport(request);
  REQUIRE(report.evidence.has_value());
  CHECK(report.evidence->table_fraction == 0.95);
  CHECK(report.evidence->table.requests == 100);
  CHECK(report.evidence->table.failures == 2);
  CHECK(report.evidence->table.prompt_tokens == 5000);
  CHECK(report.evidence->table.cached_tokens == 4000);
  CHECK(report.evidence->table.ttft_bucket_counts == std::vector<uint64_t>{60, 40});
  CHECK(report.evidence->control.requests == 5);
  CHECK(report.evidence->control.ttft_bucket_counts.empty());
}

TEST_CASE("the rate state survives its proto exactly") {
  const planner::RateAggregatorOptions options;
  const absl::Time start = absl::FromUnixSeconds(1'800'000'000);
  planner::RateAggregator rates(options, start);
  v1::ReportRatesRequest request;
  request.set_gateway_id("gw-1");
  request.set_sequence(1);
  request.set_window_start_unix_ms(absl::ToUnixMillis(start));
  request.set_window_end_unix_ms(absl::ToUnixMillis(start + absl::Seconds(10)));
  request.set_other_count(3);
  v1::KeyCount* count = request.add_counts();
  count->set_key_id(42);
  count->set_count(30);
  count->set_prompt_tokens(3000);
  count->set_reusable_tokens(1200);
  count->set_key("tenant/a");
  request.add_counts()->set_key_id(7);
  REQUIRE(rates.Apply(ToRateReport(request), start + absl::Seconds(10)).ok());
  rates.CloseInterval(start + absl::Seconds(10));
  request.set_sequence(2);  // pending counts after the close
  REQUIRE(rates.Apply(ToRateReport(request), start + absl::Seconds(15)).ok());

  const v1::RateState proto = RateAggregatorToProto(rates);
  CHECK(proto.keys_size() == 2);
  const planner::RateAggregator back =
      cacheroute::testing::RequireOk(RateAggregatorFromProto(proto, options));
  CHECK(back.Export() == rates.Export());
  CHECK(back.KeyName(42) == "tenant/a");
}

}  // namespace
}  // namespace cacheroute::service
