// TableSnapshot: one published, immutable routing table (version, destination names, expected
// loads, admitted keys with their destination sets), and the deltas and diffs between two of them.
// Part of the table protocol layer (proto/table/), which knows the wire messages but not the
// planner: the planner builds snapshots from its plans (planner/plan_snapshot.h, SnapshotFromPlan).
//
// Snapshots are published by pointer swap and read concurrently without locks, so a snapshot is
// only ever held as std::shared_ptr<const TableSnapshot> and never changes after construction.
//
// Invariants of every snapshot (whether built by FromEntries, FromProto or ApplyDelta):
//   - at least one destination; names are non-empty and distinct; expected_loads() has one finite
//     load >= 0 per destination;
//   - every entry has a distinct key_id, a finite rate >= 0, a non-empty, strictly ascending
//     destination set of indices into destinations(), and a spill (if any) in range, not in it;
//   - entries() are hottest first (rates non-increasing);
//   - ttl_seconds() is finite and >= 0, built_unix_ms() >= 0; a rollout's table_fraction is in
//     [0, 1] (FromProto and ApplyDelta reject others as rollout.table_fraction).
//
// A delta carries only what routing needs (keys new or moved, keys removed, destinations, loads):
// ApplyDelta(base, ComputeDelta(base, target)) routes like `target`; docs/protocol.md, "Tables".
//
// Usage:
//   auto candidate = TableSnapshot::FromEntries(version, names, loads, std::move(entries), ms, 60);
//   if (!candidate->SameRouting(*published)) published = candidate->WithVersion(next_version);
//   v1::TableDelta delta = ComputeDelta(*acked, *published);  // planner → gateway
//   absl::StatusOr<std::shared_ptr<const TableSnapshot>> next = ApplyDelta(*acked, delta);
//   if (const TableEntry* e = (*next)->Find(key_id)) Route(e->destinations);
#pragma once

#include <compare>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "cacheroute/v1/admin.pb.h"
#include "cacheroute/v1/table.pb.h"

namespace cacheroute::table {

// A routing-table version, ordered by (epoch, number); (0, 0) means "none" (see common.proto).
struct TableVersion {
  uint64_t epoch = 0;
  uint64_t number = 0;

  auto operator<=>(const TableVersion&) const = default;
  bool IsZero() const { return epoch == 0 && number == 0; }
  std::string ToString() const;  // "3.17"

  static TableVersion FromProto(const v1::Version& version) {
    return {version.epoch(), version.number()};
  }
  v1::Version ToProto() const;
};

// One admitted key and the destinations it is planned on.
struct TableEntry {
  uint64_t key_id = 0;
  double rate = 0.0;                   // planned requests/s
  std::vector<uint32_t> destinations;  // indices into TableSnapshot::destinations(), ascending
  std::string key{};                   // readable key, or ""
  // The planned spill destination (an index like `destinations`, not among them), if any.
  std::optional<uint32_t> spill{};
  // Byte-aware plans: the reusable tokens and saved work (tokens/s) as planned; informational.
  std::optional<double> reusable_tokens{};
  std::optional<double> saved_work{};

  bool operator==(const TableEntry&) const = default;
};

// The rollout gate's split (v1::Rollout): keys whose ArmOf(key_id, table_fraction) is the table
// arm are routed by the table, the others by the control policy.
struct TableRollout {
  std::string state;            // "shadow", "canary", "enabled", "rolled_back"
  double table_fraction = 1.0;  // in [0, 1]

  bool operator==(const TableRollout&) const = default;
};

// Made only as std::shared_ptr (the factories below), so weak_from_this() names its owner.
class TableSnapshot : public std::enable_shared_from_this<TableSnapshot> {
 public:
  // From content the caller built itself (the planner, from a Plan: planner/plan_snapshot.h).
  // Preconditions: the snapshot invariants above hold for the arguments. They are checked (in
  // O(entries + destinations)); a violation is a caller bug, reported on stderr and aborting,
  // since there is no input to reject. Untrusted input goes through FromProto instead.
  static std::shared_ptr<const TableSnapshot> FromEntries(TableVersion version,
                                                          std::vector<std::string> destinations,
                                                          std::vector<double> expected_loads,
                                                          std::vector<TableEntry> entries,
                                                          int64_t built_unix_ms,
                                                          double ttl_seconds);

  // Validated conversion from the wire (persistence, gateways, tests). InvalidArgument, naming the
  // field and value, for: no destinations, an empty or repeated destination name, expected_loads
  // not one per destination, a NaN/infinite/negative load, rate or ttl_seconds, a negative
  // built_unix_ms, a repeated key_id, an empty, unsorted or repeated destination set, a
  // destination index out of range, or assignments not hottest first.
  static absl::StatusOr<std::shared_ptr<const TableSnapshot>> FromProto(
      const v1::RoutingTable& table);
  v1::RoutingTable ToProto() const;

  // Same routing: the same destination names (by index), the same rollout and the same admitted
  // keys, each with the same destination set and spill; rates, loads, keys' names, version and
  // times may differ. The planner publishes a new version only when this is false.
  bool SameRouting(const TableSnapshot& other) const;

  // This table's content under another version (the entries are shared, not copied).
  std::shared_ptr<const TableSnapshot> WithVersion(TableVersion version) const;
  // This table with another rollout (none: every key by the table). Precondition, checked as
  // FromEntries checks its own: table_fraction is in [0, 1].
  std::shared_ptr<const TableSnapshot> WithRollout(std::optional<TableRollout> rollout) const;

  // The entry for `key_id`, or null if the key is not admitted. One hash probe.
  const TableEntry* Find(uint64_t key_id) const;

  TableVersion version() const { return version_; }
  const std::vector<std::string>& destinations() const { return destinations_; }
  const std::vector<double>& expected_loads() const { return expected_loads_; }
  const std::vector<TableEntry>& entries() const { return content_->entries; }  // hottest first
  int64_t built_unix_ms() const { return built_unix_ms_; }
  double ttl_seconds() const { return ttl_seconds_; }
  const std::optional<TableRollout>& rollout() const { return rollout_; }
  // The share of keys routed by the table: the rollout's, or 1 without one.
  double table_fraction() const { return rollout_ ? rollout_->table_fraction : 1.0; }

 private:
  // The entries and their index, shared between snapshots that differ only in version.
  struct Content {
    std::vector<TableEntry> entries;
    absl::flat_hash_map<uint64_t, uint32_t> index;  // key_id -> position in entries
  };

  friend absl::StatusOr<std::shared_ptr<const TableSnapshot>> ApplyDelta(
      const TableSnapshot& base, const v1::TableDelta& delta);

  TableSnapshot(TableVersion version, std::vector<std::string> destinations,
                std::vector<double> expected_loads, std::shared_ptr<const Content> content,
                int64_t built_unix_ms, double ttl_seconds, std::optional<TableRollout> rollout);
  // Indexes `entries` (whose key ids the caller has checked to be distinct) and wraps it all.
  static std::shared_ptr<const TableSnapshot> Create(TableVersion version,
                                                     std::vector<std::string> destinations,
                                                     std::vector<double> expected_loads,
                                                     std::vector<TableEntry> entries,
                                                     int64_t built_unix_ms, double ttl_seconds,
                                                     std::optional<TableRollout> rollout = {});

  TableVersion version_;
  std::vector<std::string> destinations_;
  std::vector<double> expected_loads_;
  std::shared_ptr<const Content> content_;
  int64_t built_unix_ms_ = 0;
  double ttl_seconds_ = 0.0;
  std::optional<TableRollout> rollout_;
};

// The delta from `base` to `target`: upserts are the keys new in `target` or whose destination
// set or spill changed (hottest first; rate-only and name-only changes are not sent), removed_key_ids the
// keys gone (in base's order); plus target's version, destinations, loads, built time and TTL.
v1::TableDelta ComputeDelta(const TableSnapshot& base, const TableSnapshot& target);

// Applies `delta` on top of `base` (the gateway side; also tests and the dataplane).
// FailedPrecondition if delta.base != base.version(); InvalidArgument, naming the field and value,
// if delta.version is not newer than delta.base, for the same content errors FromProto rejects,
// for a removed key that base does not have or that is also upserted, and for a kept key whose
// destinations fall outside the new destination list. The result's entries are ordered by
// (rate descending, key_id ascending) among the keys that moved, merged into base's order.
absl::StatusOr<std::shared_ptr<const TableSnapshot>> ApplyDelta(const TableSnapshot& base,
                                                                const v1::TableDelta& delta);

// One key in a diff; destinations are indices into the respective table.
struct KeyChange {
  uint64_t key_id = 0;
  std::string key;                          // readable key (from `to` when it has one)
  std::vector<uint32_t> from_destinations;  // empty for an added key
  std::vector<uint32_t> to_destinations;    // empty for a removed key

  bool operator==(const KeyChange&) const = default;
};

// What changed between two tables, for the admin API. Destinations are compared by name, so a
// membership change that renumbers the same servers moves nothing.
struct TableDiff {
  TableVersion from;
  TableVersion to;
  std::vector<KeyChange> moved;    // admitted in both, on different destinations (to's order)
  std::vector<KeyChange> added;    // admitted only in `to` (to's order)
  std::vector<KeyChange> removed;  // admitted only in `from` (from's order)
  // Share of `to`'s admitted rate whose key is on at least one destination it was not on in
  // `from` (new keys count fully): the traffic that starts cold. In [0, 1]; 0 if `to` has no rate.
  double churn = 0.0;

  v1::DiffResponse ToProto() const;
};

TableDiff Diff(const TableSnapshot& from, const TableSnapshot& to);

}  // namespace cacheroute::table
