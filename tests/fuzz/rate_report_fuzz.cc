// Fuzz target: a rate report from the wire. Bytes → v1::ReportRatesRequest (as gRPC parses it) →
// ToRateReport → PlannerCore::ReportRates (RateAggregator::Apply validates), then a planning step.
// Invariants: a rejected report is InvalidArgument and changes nothing (the counters say one
// rejection and nothing else); an accepted one applied again is a duplicate; after any report the
// planner plans, and the table it publishes round-trips through ToProto → FromProto.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/time/time.h"
#include "base/clock.h"
#include "cacheroute/v1/rates.pb.h"
#include "planner/service/planner_core.h"
#include "planner/service/proto_convert.h"
#include "tests/fuzz/fuzz_check.h"

namespace cacheroute::service {
namespace {

PlannerConfig Config() {
  PlannerConfig config;
  config.destinations = {"d0", "d1", "d2", "d3"};
  config.q_cap = 10;
  config.slots_per_destination = 4;
  config.rate_smoothing = absl::Seconds(10);
  config.history = 2;
  return config;
}

void CheckRoundTrip(const table::TableSnapshot& snapshot) {
  absl::StatusOr<std::shared_ptr<const table::TableSnapshot>> back =
      table::TableSnapshot::FromProto(snapshot.ToProto());
  FUZZ_CHECK(back.ok(), back.status().ToString());
  FUZZ_CHECK((*back)->SameRouting(snapshot));
  FUZZ_CHECK((*back)->version() == snapshot.version());
}

}  // namespace
}  // namespace cacheroute::service

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cacheroute;
  using namespace cacheroute::service;
  v1::ReportRatesRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;

  base::ManualClock clock(absl::FromUnixSeconds(1'800'000'000));
  absl::StatusOr<std::unique_ptr<PlannerCore>> created = PlannerCore::Create(Config(), &clock);
  FUZZ_CHECK(created.ok(), created.status().ToString());
  PlannerCore& core = **created;

  const planner::RateReport report = ToRateReport(request);
  FUZZ_CHECK(report.counts.size() == static_cast<size_t>(request.counts_size()));
  absl::StatusOr<planner::ReportResult> result = core.ReportRates(report);
  const PlannerCore::Counters counters = core.counters();
  if (!result.ok()) {
    FUZZ_CHECK(result.status().code() == absl::StatusCode::kInvalidArgument,
               result.status().ToString());
    FUZZ_CHECK(!RejectReason(result.status()).empty(), result.status().ToString());
    FUZZ_CHECK(counters.reports_accepted == 0 && counters.reports_duplicate == 0 &&
               counters.key_counts_accepted == 0);
    FUZZ_CHECK(counters.reports_rejected.size() == 1 &&
               counters.reports_rejected.begin()->second == 1);
  } else {
    FUZZ_CHECK(counters.reports_rejected.empty());
    FUZZ_CHECK(result->accepted_keys <= report.counts.size());
    if (!result->duplicate) {
      // The same (gateway, sequence) again is a retry: acknowledged, not applied twice.
      absl::StatusOr<planner::ReportResult> again = core.ReportRates(report);
      FUZZ_CHECK(again.ok(), again.status().ToString());
      FUZZ_CHECK(again->duplicate);
      FUZZ_CHECK(core.counters().key_counts_accepted == counters.key_counts_accepted);
    }
  }

  // Whatever was reported, the planner still plans, and what it publishes is a valid table.
  clock.Advance(absl::Seconds(10));
  absl::StatusOr<PlanOutcome> outcome = core.Replan();
  FUZZ_CHECK(outcome.ok(), outcome.status().ToString());
  std::shared_ptr<const table::TableSnapshot> latest = core.Latest();
  FUZZ_CHECK(latest != nullptr);
  FUZZ_CHECK(latest->version() == outcome->version);
  CheckRoundTrip(*latest);
  for (const table::TableEntry& e : latest->entries()) {
    FUZZ_CHECK(e.rate >= 0 && std::isfinite(e.rate));
    FUZZ_CHECK(!e.destinations.empty());
  }
  (void)core.Status();
  return 0;
}
