// Implementation of SnapshotFromPlan. See plan_snapshot.h.
#include "planner/plan_snapshot.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cacheroute/dataplane/grpc/table_conversion.h"

namespace cacheroute::planner {
namespace {

// The preconditions on `active` are the caller's to keep; breaking one is a programming error.
// (TableSnapshot::FromEntries checks the names, loads, times and entries the same way.)
void CheckPrecondition(bool ok, const std::string& what) {
  if (ok) return;
  std::fprintf(stderr, "SnapshotFromPlan: precondition violated: %s\n", what.c_str());
  std::abort();
}

}  // namespace

std::shared_ptr<const table::TableSnapshot> SnapshotFromPlan(
    table::TableVersion version, const Plan& plan, std::vector<std::string> destinations,
    std::span<const uint32_t> active, std::function<std::string_view(uint64_t)> key_name,
    int64_t built_unix_ms, double ttl_seconds) {
  CheckPrecondition(!destinations.empty(), "no destinations");
  CheckPrecondition(active.size() == plan.loads().size(),
                    absl::StrFormat("%u active destinations for a plan over %u", active.size(),
                                    plan.loads().size()));
  std::vector<double> loads(destinations.size(), 0.0);  // drained destinations carry nothing
  std::vector<bool> used(destinations.size(), false);
  for (size_t i = 0; i < active.size(); ++i) {
    CheckPrecondition(active[i] < destinations.size() && !used[active[i]],
                      absl::StrFormat("active[%u] = %u is out of range for %u destinations or "
                                      "repeated",
                                      i, active[i], destinations.size()));
    used[active[i]] = true;
    loads[active[i]] = plan.loads()[i];
  }

  std::vector<table::TableEntry> entries(plan.size());
  for (size_t i = 0; i < plan.size(); ++i) {
    table::TableEntry& e = entries[i];
    e.key_id = plan.key(i);
    e.rate = plan.rate(i);
    std::span<const uint32_t> planned = plan.destinations(i);
    e.destinations.reserve(planned.size());
    for (uint32_t d : planned) e.destinations.push_back(active[d]);
    // Plan sets are ascending in plan indices; they stay so only if `active` is ascending.
    if (!std::is_sorted(e.destinations.begin(), e.destinations.end())) {
      std::sort(e.destinations.begin(), e.destinations.end());
    }
    if (plan.spill(i) != kNoSpill) e.spill = active[plan.spill(i)];
    if (plan.stats().byte_aware) {
      e.reusable_tokens = plan.reusable_tokens(i);
      e.saved_work = plan.saved_work(i);
    }
    if (key_name) e.key = std::string(key_name(e.key_id));
  }
  return table::TableSnapshot::FromEntries(version, std::move(destinations), std::move(loads),
                                           std::move(entries), built_unix_ms, ttl_seconds);
}

std::vector<std::string> DestinationNames(uint32_t count) {
  std::vector<std::string> names;
  names.reserve(count);
  for (uint32_t i = 0; i < count; ++i) names.push_back(absl::StrCat(i));
  return names;
}

dataplane::Result<dataplane::RoutingTable> RoutingTableFromPlan(const Plan& plan,
                                                                table::TableVersion version) {
  const uint32_t count = static_cast<uint32_t>(plan.loads().size());
  std::vector<std::string> names = DestinationNames(count);
  const auto index = dataplane::DestinationIndexOf(names);
  std::vector<uint32_t> active(count);
  for (uint32_t i = 0; i < count; ++i) active[i] = i;
  const std::shared_ptr<const table::TableSnapshot> snapshot =
      SnapshotFromPlan(version, plan, std::move(names), active, /*key_name=*/nullptr,
                       /*built_unix_ms=*/0, /*ttl_seconds=*/0);
  return dataplane::ToRoutingTable(*snapshot, index, count);
}

}  // namespace cacheroute::planner
