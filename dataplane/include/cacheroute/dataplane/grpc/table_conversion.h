// ToRoutingTable: a planner table (table::TableSnapshot, whose destinations are names) as the
// dataplane's RoutingTable over a gateway's own destination indices. The one conversion from the
// planner's tables to what a Router installs: TableSubscriber applies it to every table it
// receives, and tools that take the planner's tables another way (the fleet simulator, the replay
// tool's offline plan) use it too.
//
// Destinations are matched by name through `index_by_name` (name → the gateway's index, every
// index < destination_count). A name the gateway does not have is an error naming it, or, with
// ignore_unknown_destinations, left out: its load is dropped, it leaves every set it is in (a key
// left with none is not admitted) and it is no key's spill. Sets come out sorted; the version,
// expected loads and rollout fraction are the table's.
//
// Usage:
//   const auto index = DestinationIndexOf({"engine-0", "engine-1"});
//   Result<RoutingTable> table = ToRoutingTable(*snapshot, index, /*destination_count=*/2);
//   if (table.ok()) router.Install(std::make_shared<const RoutingTable>(*std::move(table)), now);
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cacheroute/dataplane/dispatch.h"
#include "cacheroute/dataplane/routing_table.h"
#include "cacheroute/dataplane/status.h"
#include "proto/table/table_snapshot.h"

namespace cacheroute::dataplane {

// name → index for destinations named in index order (names assumed distinct).
inline std::unordered_map<std::string, uint32_t> DestinationIndexOf(
    const std::vector<std::string>& names) {
  std::unordered_map<std::string, uint32_t> index;
  for (uint32_t i = 0; i < names.size(); ++i) index.emplace(names[i], i);
  return index;
}

inline Result<RoutingTable> ToRoutingTable(
    const table::TableSnapshot& table,
    const std::unordered_map<std::string, uint32_t>& index_by_name, uint32_t destination_count,
    bool ignore_unknown_destinations = false) {
  std::vector<uint32_t> index(table.destinations().size());
  for (size_t i = 0; i < index.size(); ++i) {
    auto it = index_by_name.find(table.destinations()[i]);
    if (it != index_by_name.end()) {
      index[i] = it->second;
    } else if (ignore_unknown_destinations) {
      index[i] = kNoDestination;
    } else {
      return Status::Error("destinations[" + std::to_string(i) + "]: '" + table.destinations()[i] +
                           "' is not a destination of this gateway");
    }
  }
  std::vector<double> loads(destination_count, 0.0);
  for (size_t i = 0; i < index.size(); ++i) {
    if (index[i] != kNoDestination) loads[index[i]] = table.expected_loads()[i];
  }
  std::vector<TableEntry> entries;
  entries.reserve(table.entries().size());
  for (const table::TableEntry& e : table.entries()) {
    TableEntry out;
    out.key_id = e.key_id;
    out.destinations.reserve(e.destinations.size());
    for (uint32_t d : e.destinations) {
      if (index[d] != kNoDestination) out.destinations.push_back(index[d]);
    }
    if (out.destinations.empty()) continue;  // every member unknown here: not admitted
    std::sort(out.destinations.begin(), out.destinations.end());
    if (e.spill.has_value() && index[*e.spill] != kNoDestination) out.spill = index[*e.spill];
    entries.push_back(std::move(out));
  }
  const table::TableVersion v = table.version();
  return RoutingTable::Build({.epoch = v.epoch, .number = v.number}, destination_count,
                             std::move(loads), entries, table.table_fraction());
}

}  // namespace cacheroute::dataplane
