// Conversions between the planner's in-memory forms and their protos: a gateway's rate report as
// it arrives on the wire (cacheroute.v1.ReportRatesRequest in rates.proto, from RateService or
// replicated through etcd) and the rate state on disk (cacheroute.v1.RateState in
// planner_state.proto). Field by field, no validation: RateAggregator validates what it applies
// (PlannerCore::ReportRates) and what it restores (RateAggregator::Restore).
//
// Usage:
//   absl::StatusOr<planner::ReportResult> r = core->ReportRates(ToRateReport(request));
//   v1::RateState saved = RateAggregatorToProto(aggregator);
#pragma once

#include "absl/status/statusor.h"
#include "cacheroute/v1/planner_state.pb.h"
#include "cacheroute/v1/rates.pb.h"
#include "planner/rate_aggregator.h"

namespace cacheroute::service {

// The wire report field by field (prompt_tokens and reusable_tokens only when set; the evidence
// only when present).
planner::RateReport ToRateReport(const v1::ReportRatesRequest& request);

v1::RateState RateAggregatorToProto(const planner::RateAggregator& rates);

// Validates through RateAggregator::Restore.
absl::StatusOr<planner::RateAggregator> RateAggregatorFromProto(
    const v1::RateState& state, const planner::RateAggregatorOptions& options);

}  // namespace cacheroute::service
