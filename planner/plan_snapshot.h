// SnapshotFromPlan: the planner's side of the table protocol. Turns a Plan (plan_builder.h) into
// the immutable table::TableSnapshot that the planner publishes (proto/table/table_snapshot.h).
// It lives here, not in proto/table/, so that the protocol layer does not depend on the planner.
//
// Plan destination index i is member index active[i]: `destinations` are all member names,
// drained ones included, so indices stay stable across drains; a drained member gets load 0 and
// no keys. Destination sets are mapped through `active` and kept ascending (sorted if `active` is
// not), the spill likewise; key_name(key_id) gives the readable key or "" (`key_name` may be
// null; the view it returns is copied at once, but must not point into a temporary: a lambda
// that returns a std::string would leave it dangling).
//
// Preconditions (a caller bug otherwise, reported on stderr and aborting, since there is no input
// to reject): active.size() == plan.loads().size(); active's indices are distinct and
// < destinations.size(); names are non-empty and distinct; built_unix_ms >= 0; ttl_seconds finite
// and >= 0. The result holds every TableSnapshot invariant.
//
// RoutingTableFromPlan: a plan as the RoutingTable a gateway would install, for tools that route
// by a plan without a planner (the replay tool's offline plan): SnapshotFromPlan over
// destinations named "0" … "R-1", then the gateways' own conversion
// (cacheroute/dataplane/grpc/table_conversion.h), so there is one path from a plan to a table.
//
// Usage:
//   auto candidate = SnapshotFromPlan(next_version, plan, member_names, active,
//                                     /*key_name=*/nullptr, now_unix_ms, /*ttl_seconds=*/60);
//   if (!candidate->SameRouting(*published)) published = candidate;
//   dataplane::Result<dataplane::RoutingTable> table = RoutingTableFromPlan(plan, {1, 1});
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cacheroute/dataplane/routing_table.h"
#include "cacheroute/dataplane/status.h"
#include "planner/plan_builder.h"
#include "proto/table/table_snapshot.h"

namespace cacheroute::planner {

std::shared_ptr<const table::TableSnapshot> SnapshotFromPlan(
    table::TableVersion version, const Plan& plan, std::vector<std::string> destinations,
    std::span<const uint32_t> active, std::function<std::string_view(uint64_t)> key_name,
    int64_t built_unix_ms, double ttl_seconds);

// The names a planner gives R destinations by count (`--destinations R`): "0" … "R-1".
std::vector<std::string> DestinationNames(uint32_t count);

dataplane::Result<dataplane::RoutingTable> RoutingTableFromPlan(const Plan& plan,
                                                                table::TableVersion version);

}  // namespace cacheroute::planner
