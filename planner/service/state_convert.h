// Conversions between the planner's in-memory rate state and its on-disk form
// (cacheroute.v1.RateState in planner_state.proto).
#pragma once

#include "absl/status/statusor.h"
#include "cacheroute/v1/planner_state.pb.h"
#include "planner/rate_aggregator.h"

namespace cacheroute::service {

v1::RateState RateAggregatorToProto(const planner::RateAggregator& rates);

// Validates through RateAggregator::Restore.
absl::StatusOr<planner::RateAggregator> RateAggregatorFromProto(
    const v1::RateState& state, const planner::RateAggregatorOptions& options);

}  // namespace cacheroute::service
