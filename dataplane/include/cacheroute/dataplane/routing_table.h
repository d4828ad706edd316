// RoutingTable: one immutable snapshot of the planner's routing table T(b) (paper §3.1,
// the CacheRoute paper), as the dataplane looks it up on every request.
//
// A table holds its version (epoch, number; ordered lexicographically, docs/protocol.md), the
// destination count R, the planner's expected load per destination, and for each admitted key id
// its small set of destination indices. Find(key_id) is one probe sequence in a flat
// open-addressing table with ordered linear probing (Robin Hood hashing) over 4-byte key tags; a
// miss (an unadmitted key, as most requests are) costs about as much as a hit. Memory
// (memory_bytes()): with one destination per key at most 16.1 bytes/key from 100 keys up.
//
// Invariants of a built table: every set is non-empty, sorted ascending, free of duplicates and
// holds only indices < destination_count; key ids are unique; expected_loads has
// destination_count finite non-negative entries. Build() checks all of these and returns an
// error naming the key and the value otherwise. A table never changes after Build, so any number
// of threads may read it at once. Layout and memory figures: docs/dataplane.md, "Routing table".
//
// Usage:
//   std::vector<TableEntry> entries = {{.key_id = KeyId("tenant-1"), .destinations = {3}},
//                                      {.key_id = KeyId("tenant-2"), .destinations = {0, 7}}};
//   Result<RoutingTable> table = RoutingTable::Build({.epoch = 1700000000, .number = 5},
//                                                    /*destination_count=*/8, loads, entries);
//   if (!table.ok()) return table.status();          // e.g. "unknown destination 9 for key ..."
//   for (uint32_t d : table->Find(KeyId("tenant-2"))) Consider(d);   // empty if not admitted
#pragma once

#include <algorithm>
#include <cmath>
#include <compare>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "cacheroute/dataplane/status.h"

namespace cacheroute::dataplane {

struct TableVersion {
  uint64_t epoch = 0;
  uint64_t number = 0;
  friend constexpr auto operator<=>(const TableVersion&, const TableVersion&) = default;
};

inline std::string ToString(const TableVersion& v) {
  return std::to_string(v.epoch) + "." + std::to_string(v.number);
}

// One admitted key and its destinations, as Build() takes them. Destinations may come unsorted.
// `spill` is the key's planned second choice (a destination outside the set), or kNoSpill.
inline constexpr uint32_t kNoSpill = 0xFFFFFFFFu;
struct TableEntry {
  uint64_t key_id = 0;
  std::vector<uint32_t> destinations;
  uint32_t spill = kNoSpill;
};

// A read-only view of one key's destination set: sorted, distinct indices, and its planned spill
// destination (outside the set) or kNoSpill. Points into the table, so it is valid while the
// table lives. Empty when the key is not admitted.
class DestinationSet {
 public:
  DestinationSet() = default;

  uint32_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  uint32_t spill() const { return spill_; }
  bool has_spill() const { return spill_ != kNoSpill; }
  uint32_t operator[](uint32_t i) const { return wide_ != nullptr ? wide_[i] : single_; }
  std::vector<uint32_t> ToVector() const { return {begin(), end()}; }

  class Iterator {
   public:
    using value_type = uint32_t;
    using difference_type = std::ptrdiff_t;
    Iterator() = default;
    Iterator(const DestinationSet* set, uint32_t i) : set_(set), i_(i) {}
    uint32_t operator*() const { return (*set_)[i_]; }
    Iterator& operator++() {
      ++i_;
      return *this;
    }
    Iterator operator++(int) {
      Iterator old = *this;
      ++i_;
      return old;
    }
    bool operator==(const Iterator& o) const { return i_ == o.i_; }

   private:
    const DestinationSet* set_ = nullptr;
    uint32_t i_ = 0;
  };
  Iterator begin() const { return {this, 0}; }
  Iterator end() const { return {this, size_}; }

 private:
  friend class RoutingTable;
  DestinationSet(uint32_t single, uint32_t spill) : single_(single), size_(1), spill_(spill) {}
  DestinationSet(const uint32_t* wide, uint32_t size, uint32_t spill)
      : wide_(wide), size_(size), spill_(spill) {}

  const uint32_t* wide_ = nullptr;  // the set in the table's overflow array, or
  uint32_t single_ = 0;             // its one member
  uint32_t size_ = 0;
  uint32_t spill_ = kNoSpill;
};

class RoutingTable {
 public:
  static constexpr double kMaxLoadFactor = 0.8;

  // Builds and validates a table. Errors (the table is not built): expected_loads of the wrong
  // size or with a negative/non-finite entry, an empty set, a destination >= destination_count,
  // a destination repeated within a set, a key id listed twice, a table_fraction outside [0, 1].
  // table_fraction: the rollout's share of keys routed by the table (arm_evidence.h, ArmOf);
  // the router sends the others to its fallback as Reason::kControlArm.
  static Result<RoutingTable> Build(TableVersion version, uint32_t destination_count,
                                    std::vector<double> expected_loads,
                                    std::span<const TableEntry> entries,
                                    double table_fraction = 1.0);

  // The destinations of key_id, or an empty set if it is not admitted. Lock-free, no allocation.
  DestinationSet Find(uint64_t key_id) const {
    // Sorted keys from the home on, compared by their high halves (tags) first: every slot passed
    // holds a smaller key, and the first one that does not (an empty slot at the latest, whose
    // tag is the largest) decides. The array always ends with an empty slot, so the loop needs no
    // bounds check. Slots with an equal tag (the key itself, or rarely another key sharing its
    // high half) are told apart by the low half, in key order.
    const auto tag = static_cast<uint32_t>(key_id >> 32);
    const auto low = static_cast<uint32_t>(key_id);
    size_t i = Home(key_id);
    while (tags_[i] < tag) ++i;
    for (; tags_[i] == tag; ++i) {
      const Slot& slot = slots_[i];
      if (slot.value == kEmpty || slot.low > low) return {};
      if (slot.low == low) return View(slot.value);
    }
    return {};
  }

  TableVersion version() const { return version_; }
  double table_fraction() const { return table_fraction_; }
  uint32_t destination_count() const { return destination_count_; }
  std::span<const double> expected_loads() const { return expected_loads_; }
  size_t key_count() const { return key_count_; }

  // Memory accounting, for the bytes-per-key figure: the slot array (home slots, tail and end
  // slot) plus the overflow array. The expected loads (8 bytes per destination) are not per key.
  size_t memory_bytes() const { return capacity() * slot_size() + overflow_bytes(); }
  size_t capacity() const { return tags_.size(); }  // all slots: home, tail and spare
  size_t home_slots() const { return home_slots_; }
  static constexpr size_t slot_size() { return sizeof(uint32_t) + sizeof(Slot); }
  size_t overflow_bytes() const { return overflow_.size() * sizeof(uint32_t); }

 private:
  // A slot's value: 0 when empty, d + 1 for the one destination d, kPairBit | d << 15 | spill for
  // one destination and a spill (both < 2^15), or kOverflowBit | offset of the set
  // [size | kOverflowBit if a spill follows, d0, d1, ..., spill] in overflow_.
  static constexpr uint32_t kEmpty = 0;
  static constexpr uint32_t kOverflowBit = 0x80000000;
  static constexpr uint32_t kPairBit = 0x40000000;
  static constexpr uint32_t kPairMax = 1u << 15;  // destinations a pair value can hold

  static constexpr uint64_t kEmptyKey = ~uint64_t{0};

  // A slot is the high half of a key id in tags_ and its low half and value in slots_ at the
  // same index.
  struct Slot {
    uint32_t low = static_cast<uint32_t>(kEmptyKey);
    uint32_t value = kEmpty;
  };
  static_assert(sizeof(Slot) == 8);

  // ⌊key_id · H / 2^64⌋: uniform over [0, H) for mixed ids, and monotone in key_id.
  size_t Home(uint64_t key_id) const {
    return static_cast<size_t>((static_cast<unsigned __int128>(key_id) * home_slots_) >> 64);
  }

  DestinationSet View(uint32_t value) const {
    if ((value & (kOverflowBit | kPairBit)) == 0) return DestinationSet(value - 1, kNoSpill);
    if ((value & kOverflowBit) == 0) {
      return DestinationSet((value >> 15) & (kPairMax - 1), value & (kPairMax - 1));
    }
    const uint32_t offset = value & ~kOverflowBit;
    const uint32_t header = overflow_[offset];
    const uint32_t size = header & ~kOverflowBit;
    return DestinationSet(&overflow_[offset + 1], size,
                          (header & kOverflowBit) != 0 ? overflow_[offset + 1 + size] : kNoSpill);
  }

  TableVersion version_;
  double table_fraction_ = 1.0;
  uint32_t destination_count_ = 0;
  std::vector<double> expected_loads_;
  size_t key_count_ = 0;
  size_t home_slots_ = 1;
  std::vector<uint32_t> tags_;  // high halves of key ids; kEmptyKey's in empty slots
  std::vector<Slot> slots_;
  std::vector<uint32_t> overflow_;
};

inline Result<RoutingTable> RoutingTable::Build(TableVersion version, uint32_t destination_count,
                                                std::vector<double> expected_loads,
                                                std::span<const TableEntry> entries,
                                                double table_fraction) {
  if (!(table_fraction >= 0 && table_fraction <= 1)) {
    return Status::Error("table_fraction = " + std::to_string(table_fraction) +
                         " is not in [0, 1]");
  }
  if (expected_loads.size() != destination_count) {
    return Status::Error("expected_loads has " + std::to_string(expected_loads.size()) +
                         " entries, want destination_count = " + std::to_string(destination_count));
  }
  for (uint32_t d = 0; d < destination_count; ++d) {
    if (!std::isfinite(expected_loads[d]) || expected_loads[d] < 0) {
      return Status::Error("expected_loads[" + std::to_string(d) +
                           "] = " + std::to_string(expected_loads[d]) +
                           " is not a finite non-negative number");
    }
  }

  RoutingTable table;
  table.version_ = version;
  table.table_fraction_ = table_fraction;
  table.destination_count_ = destination_count;
  table.expected_loads_ = std::move(expected_loads);
  table.key_count_ = entries.size();

  table.home_slots_ = std::max<size_t>(
      1, static_cast<size_t>(std::ceil(static_cast<double>(entries.size()) / kMaxLoadFactor)));
  // The home slots, then spare empty slots for the tail (a few slots for mixed ids), at least one
  // of which stays empty to end every probe. A longer tail grows the array.
  const size_t slots = table.home_slots_ + 8 + table.home_slots_ / 512;
  // Built as whole key ids beside their values, then split into tags_ and slots_.
  std::vector<uint64_t> keys(slots, kEmptyKey);
  std::vector<uint32_t> values(slots, kEmpty);

  std::vector<uint32_t> set;
  for (const TableEntry& entry : entries) {
    // Named only on error, so a good build allocates no strings per key.
    auto key = [&entry] { return "key " + std::to_string(entry.key_id); };
    if (entry.destinations.empty()) return Status::Error(key() + " has an empty destination set");
    if (entry.destinations.size() > destination_count) {
      return Status::Error(
          key() + " has " + std::to_string(entry.destinations.size()) +
          " destinations, more than destination_count = " + std::to_string(destination_count));
    }
    set.assign(entry.destinations.begin(), entry.destinations.end());
    std::sort(set.begin(), set.end());
    if (set.back() >= destination_count) {
      return Status::Error("unknown destination " + std::to_string(set.back()) + " for " + key() +
                           " (destination_count = " + std::to_string(destination_count) + ")");
    }
    if (auto dup = std::adjacent_find(set.begin(), set.end()); dup != set.end()) {
      return Status::Error("destination " + std::to_string(*dup) + " appears twice for " + key());
    }
    const uint32_t spill = entry.spill;
    const bool has_spill = spill != kNoSpill;
    if (has_spill && spill >= destination_count) {
      return Status::Error("unknown spill destination " + std::to_string(spill) + " for " + key() +
                           " (destination_count = " + std::to_string(destination_count) + ")");
    }
    if (has_spill && std::binary_search(set.begin(), set.end(), spill)) {
      return Status::Error("spill destination " + std::to_string(spill) + " for " + key() +
                           " is also in its destination set");
    }

    uint32_t incoming;
    if (set.size() == 1 && !has_spill && set[0] + 1 < kPairBit) {
      incoming = set[0] + 1;
    } else if (set.size() == 1 && has_spill && set[0] < kPairMax && spill < kPairMax) {
      incoming = kPairBit | set[0] << 15 | spill;
    } else {
      if (table.overflow_.size() + 2 + set.size() > kOverflowBit) {
        return Status::Error("the destination sets of more than 2^31 entries do not fit (at " +
                             key() + ")");
      }
      incoming = kOverflowBit | static_cast<uint32_t>(table.overflow_.size());
      table.overflow_.push_back(static_cast<uint32_t>(set.size()) | (has_spill ? kOverflowBit : 0));
      table.overflow_.insert(table.overflow_.end(), set.begin(), set.end());
      if (has_spill) table.overflow_.push_back(spill);
    }

    // Ordered insertion: skip the smaller keys from the home on; the key goes where the first
    // larger key or empty slot is, and the run from there to the next empty slot moves up by one
    // (the Robin Hood displacement, in key order).
    size_t i = table.Home(entry.key_id);
    while (keys[i] < entry.key_id) ++i;
    if (keys[i] == entry.key_id && values[i] != kEmpty) {
      return Status::Error(key() + " is listed twice");
    }
    size_t empty = i;
    while (values[empty] != kEmpty) ++empty;
    if (empty == keys.size() - 1) {  // keep an empty slot at the end
      keys.push_back(kEmptyKey);
      values.emplace_back();
    }
    const auto shift = [i, empty](auto& v) {
      std::move_backward(v.begin() + static_cast<std::ptrdiff_t>(i),
                         v.begin() + static_cast<std::ptrdiff_t>(empty),
                         v.begin() + static_cast<std::ptrdiff_t>(empty + 1));
    };
    shift(keys);
    shift(values);
    keys[i] = entry.key_id;
    values[i] = incoming;
  }
  table.tags_.resize(keys.size());
  table.slots_.resize(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    table.tags_[i] = static_cast<uint32_t>(keys[i] >> 32);
    table.slots_[i] = {static_cast<uint32_t>(keys[i]), values[i]};
  }
  // A grown overflow array may have left spare capacity behind.
  if (table.overflow_.capacity() != table.overflow_.size()) table.overflow_.shrink_to_fit();
  return table;
}

}  // namespace cacheroute::dataplane
