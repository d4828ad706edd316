// Implementation of TableSnapshot, ComputeDelta, ApplyDelta and Diff. See table_snapshot.h.
//
// Validation is shared between FromProto and ApplyDelta (which checks a delta with the same rules,
// its fields prefixed "delta."), so that a table a gateway builds from deltas is held to the same
// invariants as one it receives whole.
#include "proto/table/table_snapshot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string_view>
#include <tuple>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace cacheroute::table {
namespace {

using ::google::protobuf::RepeatedField;
using ::google::protobuf::RepeatedPtrField;

bool IsFiniteNonNegative(double x) { return std::isfinite(x) && x >= 0.0; }

std::string FormatNumber(double x) { return absl::StrFormat("%g", x); }

// Hottest first; among equal rates, lower key ids first (the planner's order).
bool RateOrderLess(const TableEntry& a, const TableEntry& b) {
  return a.rate > b.rate || (a.rate == b.rate && a.key_id < b.key_id);
}

absl::Status ValidateDestinations(const RepeatedPtrField<std::string>& names,
                                  const RepeatedField<double>& loads, const std::string& prefix) {
  if (names.empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%sdestinations: empty; a table needs at least one destination", prefix));
  }
  absl::flat_hash_map<std::string, int> seen;
  for (int i = 0; i < names.size(); ++i) {
    if (names[i].empty()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%sdestinations[%d]: empty name", prefix, i));
    }
    auto [it, inserted] = seen.try_emplace(names[i], i);
    if (!inserted) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%sdestinations[%d]: \"%s\" repeats %sdestinations[%d]", prefix, i,
                          names[i], prefix, it->second));
    }
  }
  if (loads.size() != names.size()) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%sexpected_loads: %d entries for %d destinations; need one per destination", prefix,
        loads.size(), names.size()));
  }
  for (int i = 0; i < loads.size(); ++i) {
    if (!IsFiniteNonNegative(loads[i])) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%sexpected_loads[%d]: %s is not a finite number >= 0", prefix, i,
                          FormatNumber(loads[i])));
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateTiming(int64_t built_unix_ms, double ttl_seconds, const std::string& prefix) {
  if (built_unix_ms < 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%sbuilt_unix_ms: %d is negative", prefix, built_unix_ms));
  }
  if (!IsFiniteNonNegative(ttl_seconds)) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "%sttl_seconds: %s is not a finite number >= 0", prefix, FormatNumber(ttl_seconds)));
  }
  return absl::OkStatus();
}

bool ValidFraction(double x) { return std::isfinite(x) && x >= 0.0 && x <= 1.0; }

// The rollout of a table or delta (none when `present` is false); `prefix` is "" or "delta.".
absl::StatusOr<std::optional<TableRollout>> RolloutFromProto(bool present, const v1::Rollout& r,
                                                             const std::string& prefix) {
  if (!present) return std::optional<TableRollout>();
  if (!ValidFraction(r.table_fraction())) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%srollout.table_fraction: %s is not a number in [0, 1]", prefix,
                        FormatNumber(r.table_fraction())));
  }
  return std::optional<TableRollout>(TableRollout{r.state(), r.table_fraction()});
}

void RolloutToProto(const TableRollout& rollout, v1::Rollout* out) {
  out->set_state(rollout.state);
  out->set_table_fraction(rollout.table_fraction);
}

// Checks one assignment's destinations and rate; `field` names it, e.g. "assignments[4]".
absl::Status ValidateAssignment(const v1::Assignment& a, const std::string& field,
                                size_t num_destinations) {
  const auto& d = a.destinations();
  if (d.empty()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s.destinations: empty (key_id %u)", field, a.key_id()));
  }
  for (int j = 0; j < d.size(); ++j) {
    if (d[j] >= num_destinations) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s.destinations[%d]: %u is out of range for %u destinations (key_id %u)",
                          field, j, d[j], num_destinations, a.key_id()));
    }
    if (j > 0 && d[j] <= d[j - 1]) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s.destinations[%d]: %u after %u; destinations must be strictly ascending (key_id %u)",
          field, j, d[j], d[j - 1], a.key_id()));
    }
  }
  if (a.has_spill()) {
    if (a.spill() >= num_destinations) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s.spill: %u is out of range for %u destinations (key_id %u)", field,
                          a.spill(), num_destinations, a.key_id()));
    }
    if (std::find(d.begin(), d.end(), a.spill()) != d.end()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s.spill: %u is also in destinations (key_id %u)", field, a.spill(), a.key_id()));
    }
  }
  if (!IsFiniteNonNegative(a.rate())) {
    return absl::InvalidArgumentError(
        absl::StrFormat("%s.rate: %s is not a finite number >= 0 (key_id %u)", field,
                        FormatNumber(a.rate()), a.key_id()));
  }
  for (const auto& [name, set, value] :
       {std::tuple{"reusable_tokens", a.has_reusable_tokens(), a.reusable_tokens()},
        std::tuple{"saved_work", a.has_saved_work(), a.saved_work()}}) {
    if (set && !IsFiniteNonNegative(value)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s.%s: %s is not a finite number >= 0 (key_id %u)", field, name,
                          FormatNumber(value), a.key_id()));
    }
  }
  return absl::OkStatus();
}

TableEntry EntryFromProto(const v1::Assignment& a) {
  return {.key_id = a.key_id(),
          .rate = a.rate(),
          .destinations = {a.destinations().begin(), a.destinations().end()},
          .key = a.key(),
          .spill = a.has_spill() ? std::optional<uint32_t>(a.spill()) : std::nullopt,
          .reusable_tokens =
              a.has_reusable_tokens() ? std::optional<double>(a.reusable_tokens()) : std::nullopt,
          .saved_work = a.has_saved_work() ? std::optional<double>(a.saved_work()) : std::nullopt};
}

// Appends `assignments` (the field named `list` in errors: "assignments", "delta.upserts") to
// `entries` and their positions to `index` (key_id -> i), checking that each passes
// ValidateAssignment, that no key_id repeats and, with hottest_first, that no rate is above the
// one before it.
absl::Status EntriesFromProto(const RepeatedPtrField<v1::Assignment>& assignments,
                              absl::string_view list, size_t num_destinations, bool hottest_first,
                              std::vector<TableEntry>& entries,
                              absl::flat_hash_map<uint64_t, int>& index) {
  index.reserve(assignments.size());
  entries.reserve(assignments.size());
  for (int i = 0; i < assignments.size(); ++i) {
    const v1::Assignment& a = assignments[i];
    const std::string field = absl::StrFormat("%s[%d]", list, i);
    if (absl::Status s = ValidateAssignment(a, field, num_destinations); !s.ok()) return s;
    auto [it, inserted] = index.try_emplace(a.key_id(), i);
    if (!inserted) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s.key_id: %u repeats %s[%d]", field, a.key_id(), list, it->second));
    }
    if (hottest_first && i > 0 && a.rate() > assignments[i - 1].rate()) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "%s.rate: %s is above %s[%d].rate %s; %s must be hottest first", field,
          FormatNumber(a.rate()), list, i - 1, FormatNumber(assignments[i - 1].rate()), list));
    }
    entries.push_back(EntryFromProto(a));
  }
  return absl::OkStatus();
}

void EntryToProto(const TableEntry& e, v1::Assignment* a) {
  a->set_key_id(e.key_id);
  a->mutable_destinations()->Add(e.destinations.begin(), e.destinations.end());
  a->set_rate(e.rate);
  a->set_key(e.key);
  if (e.spill.has_value()) a->set_spill(*e.spill);
  if (e.reusable_tokens.has_value()) a->set_reusable_tokens(*e.reusable_tokens);
  if (e.saved_work.has_value()) a->set_saved_work(*e.saved_work);
}

// FromEntries' preconditions are the caller's to keep; breaking one is a programming error.
void CheckPrecondition(bool ok, const std::string& what) {
  if (ok) return;
  std::fprintf(stderr, "TableSnapshot::FromEntries: precondition violated: %s\n", what.c_str());
  std::abort();
}

}  // namespace

std::string TableVersion::ToString() const { return absl::StrCat(epoch, ".", number); }

v1::Version TableVersion::ToProto() const {
  v1::Version v;
  v.set_epoch(epoch);
  v.set_number(number);
  return v;
}

TableSnapshot::TableSnapshot(TableVersion version, std::vector<std::string> destinations,
                             std::vector<double> expected_loads,
                             std::shared_ptr<const Content> content, int64_t built_unix_ms,
                             double ttl_seconds, std::optional<TableRollout> rollout)
    : version_(version),
      destinations_(std::move(destinations)),
      expected_loads_(std::move(expected_loads)),
      content_(std::move(content)),
      built_unix_ms_(built_unix_ms),
      ttl_seconds_(ttl_seconds),
      rollout_(std::move(rollout)) {}

std::shared_ptr<const TableSnapshot> TableSnapshot::Create(
    TableVersion version, std::vector<std::string> destinations, std::vector<double> expected_loads,
    std::vector<TableEntry> entries, int64_t built_unix_ms, double ttl_seconds,
    std::optional<TableRollout> rollout) {
  auto content = std::make_shared<Content>();
  content->index.reserve(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    content->index.emplace(entries[i].key_id, static_cast<uint32_t>(i));
  }
  content->entries = std::move(entries);
  return std::shared_ptr<const TableSnapshot>(
      new TableSnapshot(version, std::move(destinations), std::move(expected_loads),
                        std::move(content), built_unix_ms, ttl_seconds, std::move(rollout)));
}

std::shared_ptr<const TableSnapshot> TableSnapshot::FromEntries(
    TableVersion version, std::vector<std::string> destinations, std::vector<double> expected_loads,
    std::vector<TableEntry> entries, int64_t built_unix_ms, double ttl_seconds) {
  CheckPrecondition(!destinations.empty(), "no destinations");
  absl::flat_hash_set<std::string_view> names;
  for (const std::string& name : destinations) {
    CheckPrecondition(!name.empty() && names.insert(name).second,
                      absl::StrCat("empty or repeated destination name \"", name, "\""));
  }
  CheckPrecondition(expected_loads.size() == destinations.size(),
                    absl::StrFormat("%u expected loads for %u destinations", expected_loads.size(),
                                    destinations.size()));
  for (size_t i = 0; i < expected_loads.size(); ++i) {
    if (IsFiniteNonNegative(expected_loads[i])) continue;
    CheckPrecondition(false, absl::StrFormat("expected_loads[%u] = %s is not a finite number >= 0",
                                             i, FormatNumber(expected_loads[i])));
  }
  CheckPrecondition(built_unix_ms >= 0 && IsFiniteNonNegative(ttl_seconds),
                    "negative built_unix_ms, or ttl_seconds not a finite number >= 0");
  const size_t num_destinations = destinations.size();
  for (size_t i = 0; i < entries.size(); ++i) {
    const TableEntry& e = entries[i];
    const bool rate_ok = IsFiniteNonNegative(e.rate) && (i == 0 || e.rate <= entries[i - 1].rate);
    const bool destinations_ok =
        !e.destinations.empty() && e.destinations.back() < num_destinations &&
        std::adjacent_find(e.destinations.begin(), e.destinations.end(),
                           std::greater_equal<uint32_t>()) == e.destinations.end();
    const bool spill_ok =
        !e.spill.has_value() ||
        (*e.spill < num_destinations &&
         !std::binary_search(e.destinations.begin(), e.destinations.end(), *e.spill));
    if (rate_ok && destinations_ok && spill_ok) continue;
    const char* what = !rate_ok           ? "rate not a finite number >= 0 or not hottest first"
                       : !destinations_ok ? "destinations empty, not ascending or out of range"
                                          : "spill out of range or among the destinations";
    CheckPrecondition(false, absl::StrFormat("entries[%u] (key_id %u): %s", i, e.key_id, what));
  }
  std::shared_ptr<const TableSnapshot> snapshot =
      Create(version, std::move(destinations), std::move(expected_loads), std::move(entries),
             built_unix_ms, ttl_seconds);
  CheckPrecondition(snapshot->content_->index.size() == snapshot->entries().size(),
                    "repeated key_id among the entries");
  return snapshot;
}

absl::StatusOr<std::shared_ptr<const TableSnapshot>> TableSnapshot::FromProto(
    const v1::RoutingTable& table) {
  if (absl::Status s = ValidateDestinations(table.destinations(), table.expected_loads(), "");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ValidateTiming(table.built_unix_ms(), table.ttl_seconds(), ""); !s.ok()) {
    return s;
  }
  std::vector<TableEntry> entries;
  absl::flat_hash_map<uint64_t, int> seen;
  if (absl::Status s =
          EntriesFromProto(table.assignments(), "assignments", table.destinations_size(),
                           /*hottest_first=*/true, entries, seen);
      !s.ok()) {
    return s;
  }
  absl::StatusOr<std::optional<TableRollout>> rollout =
      RolloutFromProto(table.has_rollout(), table.rollout(), "");
  if (!rollout.ok()) return rollout.status();
  return Create(TableVersion::FromProto(table.version()),
                {table.destinations().begin(), table.destinations().end()},
                {table.expected_loads().begin(), table.expected_loads().end()}, std::move(entries),
                table.built_unix_ms(), table.ttl_seconds(), *std::move(rollout));
}

v1::RoutingTable TableSnapshot::ToProto() const {
  v1::RoutingTable table;
  *table.mutable_version() = version_.ToProto();
  table.mutable_destinations()->Add(destinations_.begin(), destinations_.end());
  table.mutable_expected_loads()->Add(expected_loads_.begin(), expected_loads_.end());
  table.mutable_assignments()->Reserve(static_cast<int>(entries().size()));
  for (const TableEntry& e : entries()) EntryToProto(e, table.add_assignments());
  table.set_built_unix_ms(built_unix_ms_);
  table.set_ttl_seconds(ttl_seconds_);
  if (rollout_) RolloutToProto(*rollout_, table.mutable_rollout());
  return table;
}

namespace {

// Whether a gateway routes a key of `a` as one of `b`: the same destination set and spill.
bool SameRoute(const TableEntry& a, const TableEntry& b) {
  return a.destinations == b.destinations && a.spill == b.spill;
}

}  // namespace

bool TableSnapshot::SameRouting(const TableSnapshot& other) const {
  if (destinations_ != other.destinations_ || rollout_ != other.rollout_) return false;
  if (content_ == other.content_) return true;
  if (entries().size() != other.entries().size()) return false;
  for (const TableEntry& e : entries()) {
    const TableEntry* o = other.Find(e.key_id);
    if (o == nullptr || !SameRoute(*o, e)) return false;
  }
  return true;
}

std::shared_ptr<const TableSnapshot> TableSnapshot::WithVersion(TableVersion version) const {
  return std::shared_ptr<const TableSnapshot>(new TableSnapshot(
      version, destinations_, expected_loads_, content_, built_unix_ms_, ttl_seconds_, rollout_));
}

std::shared_ptr<const TableSnapshot> TableSnapshot::WithRollout(
    std::optional<TableRollout> rollout) const {
  CheckPrecondition(!rollout || ValidFraction(rollout->table_fraction),
                    "rollout.table_fraction is not in [0, 1]");
  return std::shared_ptr<const TableSnapshot>(new TableSnapshot(
      version_, destinations_, expected_loads_, content_, built_unix_ms_, ttl_seconds_,
      std::move(rollout)));
}

const TableEntry* TableSnapshot::Find(uint64_t key_id) const {
  auto it = content_->index.find(key_id);
  return it == content_->index.end() ? nullptr : &content_->entries[it->second];
}

v1::TableDelta ComputeDelta(const TableSnapshot& base, const TableSnapshot& target) {
  v1::TableDelta delta;
  *delta.mutable_base() = base.version().ToProto();
  *delta.mutable_version() = target.version().ToProto();
  delta.mutable_destinations()->Add(target.destinations().begin(), target.destinations().end());
  delta.mutable_expected_loads()->Add(target.expected_loads().begin(),
                                      target.expected_loads().end());
  for (const TableEntry& e : target.entries()) {
    const TableEntry* b = base.Find(e.key_id);
    if (b == nullptr || !SameRoute(*b, e)) EntryToProto(e, delta.add_upserts());
  }
  for (const TableEntry& e : base.entries()) {
    if (target.Find(e.key_id) == nullptr) delta.add_removed_key_ids(e.key_id);
  }
  delta.set_built_unix_ms(target.built_unix_ms());
  delta.set_ttl_seconds(target.ttl_seconds());
  if (target.rollout()) RolloutToProto(*target.rollout(), delta.mutable_rollout());
  return delta;
}

absl::StatusOr<std::shared_ptr<const TableSnapshot>> ApplyDelta(const TableSnapshot& base,
                                                                const v1::TableDelta& delta) {
  const TableVersion delta_base = TableVersion::FromProto(delta.base());
  const TableVersion version = TableVersion::FromProto(delta.version());
  if (delta_base != base.version()) {
    return absl::FailedPreconditionError(
        absl::StrFormat("delta.base: %s does not match the applied version %s",
                        delta_base.ToString(), base.version().ToString()));
  }
  if (version <= delta_base) {
    return absl::InvalidArgumentError(
        absl::StrFormat("delta.version: %s is not newer than delta.base %s", version.ToString(),
                        delta_base.ToString()));
  }
  if (absl::Status s = ValidateDestinations(delta.destinations(), delta.expected_loads(), "delta.");
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ValidateTiming(delta.built_unix_ms(), delta.ttl_seconds(), "delta.");
      !s.ok()) {
    return s;
  }
  absl::StatusOr<std::optional<TableRollout>> rollout =
      RolloutFromProto(delta.has_rollout(), delta.rollout(), "delta.");
  if (!rollout.ok()) return rollout.status();
  const size_t num_destinations = delta.destinations_size();

  std::vector<TableEntry> upserts;
  absl::flat_hash_map<uint64_t, int> upserted;  // key_id -> index in delta.upserts
  if (absl::Status s = EntriesFromProto(delta.upserts(), "delta.upserts", num_destinations,
                                        /*hottest_first=*/false, upserts, upserted);
      !s.ok()) {
    return s;
  }
  absl::flat_hash_set<uint64_t> removed;
  removed.reserve(delta.removed_key_ids_size());
  for (int i = 0; i < delta.removed_key_ids_size(); ++i) {
    const uint64_t key_id = delta.removed_key_ids(i);
    if (base.Find(key_id) == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrFormat("delta.removed_key_ids[%d]: key_id %u is not in the base table %s", i,
                          key_id, base.version().ToString()));
    }
    if (auto it = upserted.find(key_id); it != upserted.end()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("delta.removed_key_ids[%d]: key_id %u is also in delta.upserts[%d]", i,
                          key_id, it->second));
    }
    if (!removed.insert(key_id).second) {
      return absl::InvalidArgumentError(
          absl::StrFormat("delta.removed_key_ids[%d]: key_id %u is repeated", i, key_id));
    }
  }

  // Kept entries are already hottest first (base's invariant); upserts are sorted here, then the
  // two runs are merged, so the result is hottest first in O(n + u log u).
  std::vector<TableEntry> kept;
  kept.reserve(base.entries().size());
  const bool filter = !upserted.empty() || !removed.empty();
  for (const TableEntry& e : base.entries()) {
    if (filter && (upserted.contains(e.key_id) || removed.contains(e.key_id))) continue;
    if (e.destinations.back() >= num_destinations) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "delta: key_id %u keeps destination %u from base %s, out of range for the %u "
          "destinations of version %s; the delta must upsert or remove it",
          e.key_id, e.destinations.back(), base.version().ToString(), num_destinations,
          version.ToString()));
    }
    kept.push_back(e);
  }
  std::stable_sort(upserts.begin(), upserts.end(), RateOrderLess);
  std::vector<TableEntry> entries;
  entries.reserve(kept.size() + upserts.size());
  auto k = kept.begin();
  auto u = upserts.begin();
  while (k != kept.end() || u != upserts.end()) {
    if (u != upserts.end() && (k == kept.end() || RateOrderLess(*u, *k))) {
      entries.push_back(std::move(*u++));
    } else {
      entries.push_back(std::move(*k++));
    }
  }
  return TableSnapshot::Create(version, {delta.destinations().begin(), delta.destinations().end()},
                               {delta.expected_loads().begin(), delta.expected_loads().end()},
                               std::move(entries), delta.built_unix_ms(), delta.ttl_seconds(),
                               *std::move(rollout));
}

TableDiff Diff(const TableSnapshot& from, const TableSnapshot& to) {
  TableDiff diff;
  diff.from = from.version();
  diff.to = to.version();

  // Destinations are servers: compare by name, so renumbering alone moves no key.
  constexpr int64_t kNotInFrom = -1;
  absl::flat_hash_map<std::string_view, uint32_t> from_index;
  for (size_t i = 0; i < from.destinations().size(); ++i) {
    from_index.emplace(from.destinations()[i], static_cast<uint32_t>(i));
  }
  std::vector<int64_t> to_from(to.destinations().size(), kNotInFrom);
  for (size_t i = 0; i < to.destinations().size(); ++i) {
    if (auto it = from_index.find(to.destinations()[i]); it != from_index.end()) {
      to_from[i] = it->second;
    }
  }

  double total_rate = 0.0;
  double cold_rate = 0.0;
  std::vector<int64_t> translated;
  for (const TableEntry& e : to.entries()) {
    total_rate += e.rate;
    const TableEntry* f = from.Find(e.key_id);
    if (f == nullptr) {
      diff.added.push_back({e.key_id, e.key, {}, e.destinations});
      cold_rate += e.rate;
      continue;
    }
    translated.clear();
    for (uint32_t d : e.destinations) translated.push_back(to_from[d]);
    std::sort(translated.begin(), translated.end());
    // Every destination of `to` that was one of the key's destinations in `from`?
    const bool warm =
        std::includes(f->destinations.begin(), f->destinations.end(), translated.begin(),
                      translated.end(), [](int64_t a, int64_t b) { return a < b; });
    const bool same = warm && translated.size() == f->destinations.size();
    if (!warm) cold_rate += e.rate;
    if (!same) {
      diff.moved.push_back(
          {e.key_id, e.key.empty() ? f->key : e.key, f->destinations, e.destinations});
    }
  }
  for (const TableEntry& e : from.entries()) {
    if (to.Find(e.key_id) == nullptr) diff.removed.push_back({e.key_id, e.key, e.destinations, {}});
  }
  diff.churn = total_rate > 0.0 ? std::min(1.0, cold_rate / total_rate) : 0.0;
  return diff;
}

v1::DiffResponse TableDiff::ToProto() const {
  v1::DiffResponse response;
  *response.mutable_from() = from.ToProto();
  *response.mutable_to() = to.ToProto();
  auto add = [](const KeyChange& c, v1::KeyMove* move) {
    move->set_key_id(c.key_id);
    move->set_key(c.key);
    move->mutable_from_destinations()->Add(c.from_destinations.begin(), c.from_destinations.end());
    move->mutable_to_destinations()->Add(c.to_destinations.begin(), c.to_destinations.end());
  };
  for (const KeyChange& c : moved) add(c, response.add_moved());
  for (const KeyChange& c : added) add(c, response.add_added());
  for (const KeyChange& c : removed) add(c, response.add_removed());
  response.set_churn(churn);
  return response;
}

}  // namespace cacheroute::table
