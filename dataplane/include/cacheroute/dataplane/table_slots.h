// TableSlots: a Router's installed routing table and the destination count it routes over, swapped
// without a lock on the request side (docs/dataplane.md, "Tables", "Why not
// std::atomic<std::shared_ptr>").
//
// kSlots slots each hold a shared_ptr to a table; an atomic index names the current one. A reader
// (ReadGuard) counts itself in the current slot in its own shard (ShardLedger::Readers), re-reads
// the index and backs off if it moved; Install fills a slot that is neither current nor read, then
// publishes its index (the Dekker pattern, both sides sequentially consistent), so a reader never
// sees a slot being overwritten and old tables are destroyed on the installing thread.
//
// The NACK rule (docs/protocol.md): Install keeps the last good table unless the new one is
// strictly newer and has the current destination count; Resize changes the count together with a
// table re-mapped to it (at least as new) or none. A table not installed or refreshed within the
// TTL is stale. Lookup says what the table says about a key: its set, or why the request is not
// planned (Reason).
//
// Thread safety: Install, Resize and the stats are serialised by a mutex that request threads never
// take; ReadGuard, Lookup, count() and table_fraction() are lock-free.
//
// Usage (the Router's):
//   TableSlots tables(/*count=*/30, /*capacity=*/30, std::chrono::seconds(60), ledger);
//   Status s = tables.Install(table, now);                       // the NACK's message when not ok
//   const TableSlots::ReadGuard guard(tables, ledger.Readers(shard.index()), shard.owned());
//   TableLookup lookup = tables.Lookup(guard.table(), key_id, now);   // valid while `guard` lives
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "cacheroute/dataplane/arm_evidence.h"
#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/dispatch.h"
#include "cacheroute/dataplane/routing_table.h"
#include "cacheroute/dataplane/shard_ledger.h"
#include "cacheroute/dataplane/status.h"

namespace cacheroute::dataplane {

// What the table says about a key: its set (empty when there is no usable table or the key is not
// admitted) and why a request is not planned (kPlanned when it may be).
struct TableLookup {
  DestinationSet set;
  Reason reason = Reason::kPlanned;
};

// The table's part of RouterStats.
struct TableStats {
  uint64_t installs = 0;
  uint64_t rejected_installs = 0;
  std::string last_rejection;
  bool has_table = false;
  bool stale = false;
  TableVersion version;
  Duration table_age = Duration::zero();      // since the installed table was installed
  Duration since_refresh = Duration::zero();  // since it was installed or last refreshed
};

class TableSlots {
 public:
  static constexpr int kSlots = 4;
  static_assert(kSlots <= ShardLedger::kReaderSlots);

  // `readers`: whose shards count the slots' readers; must outlive this. A `ttl` of zero: never
  // stale.
  TableSlots(uint32_t count, uint32_t capacity, Duration ttl, const ShardLedger& readers)
      : capacity_(capacity), ttl_(ttl), readers_(readers), count_(count) {}
  TableSlots(const TableSlots&) = delete;
  TableSlots& operator=(const TableSlots&) = delete;

  uint32_t count() const { return count_.load(std::memory_order_relaxed); }
  const std::atomic<uint32_t>& count_ref() const { return count_; }

  // Installs `table` if it is valid; otherwise keeps the current one and returns the reason (what
  // the table stream sends back as a NACK).
  Status Install(std::shared_ptr<const RoutingTable> table, Time now) {
    std::lock_guard<std::mutex> lock(install_mu_);
    Status status = CheckInstallableLocked(table.get(), /*same_version_ok=*/false);
    if (!status.ok) {
      ++rejected_installs_;
      last_rejection_ = status.message;
      return status;
    }
    InstallLocked(std::move(table), now);
    ++installs_;
    return Status::Ok();
  }

  // From now on `count` destinations (≤ capacity; 0, with no table, routes nowhere), with `table`
  // (of `count` destinations, at least as new as the installed one) or none until the next
  // Install. See Router::Resize.
  Status Resize(uint32_t count, std::shared_ptr<const RoutingTable> table, Time now) {
    std::lock_guard<std::mutex> lock(install_mu_);
    if (count > capacity_ || (count == 0 && table != nullptr)) {
      return Status::Error("destination count " + std::to_string(count) + " is not in [" +
                           (table != nullptr ? "1" : "0") + ", " + std::to_string(capacity_) +
                           "] (the Router's capacity)");
    }
    if (table != nullptr) {
      if (table->destination_count() != count) {
        return Status::Error("table " + ToString(table->version()) + " has destination_count " +
                             std::to_string(table->destination_count()) + ", not the new count " +
                             std::to_string(count));
      }
      Status status = CheckInstallableLocked(table.get(), /*same_version_ok=*/true);
      if (!status.ok) return status;
    }
    count_.store(count, std::memory_order_seq_cst);
    if (table != nullptr) {
      InstallLocked(std::move(table), now);
    } else {
      current_.store(-1, std::memory_order_seq_cst);
      table_fraction_.store(1.0, std::memory_order_relaxed);
    }
    return Status::Ok();
  }

  // The installed table is confirmed current at `now`, which restarts its TTL.
  void Refresh(Time now) {
    refreshed_at_.store(now.time_since_epoch().count(), std::memory_order_relaxed);
  }

  // The installed table's rollout share of keys on the table arm (1 without a table or rollout).
  double table_fraction() const { return table_fraction_.load(std::memory_order_relaxed); }

  // The installed table (nullptr before the first Install). Takes the install lock.
  std::shared_ptr<const RoutingTable> table() const {
    std::lock_guard<std::mutex> lock(install_mu_);
    const int current = current_.load(std::memory_order_seq_cst);
    return current < 0 ? nullptr : tables_[current];
  }

  TableStats Stats(Time now) const {
    std::lock_guard<std::mutex> lock(install_mu_);
    TableStats stats;
    stats.installs = installs_;
    stats.rejected_installs = rejected_installs_;
    stats.last_rejection = last_rejection_;
    stats.has_table = current_.load(std::memory_order_seq_cst) >= 0;
    if (stats.has_table) {
      stats.version = installed_version_;
      stats.table_age = now - Time(Duration(installed_at_.load(std::memory_order_relaxed)));
      stats.since_refresh = now - Time(Duration(refreshed_at_.load(std::memory_order_relaxed)));
      stats.stale = IsStale(now);
    }
    return stats;
  }

  // Holds the current slot for the duration of one lookup: `readers` are the calling thread's
  // shard's counts (ShardLedger::Readers), `owned` whether the thread owns that shard.
  class ReadGuard {
   public:
    ReadGuard(const TableSlots& slots, std::atomic<uint32_t>* readers, bool owned) : owned_(owned) {
      for (;;) {
        const int s = slots.current_.load(std::memory_order_seq_cst);
        if (s < 0) return;
        std::atomic<uint32_t>& slot_readers = readers[s];
        // The Dekker store: ordered before the re-read of current_ below. A read-modify-write
        // even in an owned shard, because a plain seq_cst store would cost the same fence.
        slot_readers.fetch_add(1, std::memory_order_seq_cst);
        if (slots.current_.load(std::memory_order_seq_cst) == s) {
          readers_ = &slot_readers;
          table_ = slots.tables_[s].get();
          return;
        }
        Leave(slot_readers);  // replaced meanwhile; retry
      }
    }
    ~ReadGuard() {
      if (readers_ != nullptr) Leave(*readers_);
    }
    ReadGuard(const ReadGuard&) = delete;
    ReadGuard& operator=(const ReadGuard&) = delete;
    const RoutingTable* table() const { return table_; }

   private:
    // Release: the lookup's reads happen before the writer, seeing the count drop, reuses the slot.
    void Leave(std::atomic<uint32_t>& readers) {
      router_internal::ShardAdd<uint32_t, std::memory_order_release>(readers, ~uint32_t{0}, owned_);
    }

    const bool owned_;
    std::atomic<uint32_t>* readers_ = nullptr;
    const RoutingTable* table_ = nullptr;
  };

  // What `table` (a ReadGuard's) says about `key_id` at `now`.
  TableLookup Lookup(const RoutingTable* table, uint64_t key_id, Time now) const {
    if (table == nullptr) return {.set = {}, .reason = Reason::kNoTable};
    if (IsStale(now)) return {.set = {}, .reason = Reason::kStale};
    // A rollout keeps the keys of its control arm off the table, admitted or not: they get what
    // Flat-LB gives (power of two choices), so the arm measures the baseline.
    if (table->table_fraction() < 1 && ArmOf(key_id, table->table_fraction()) == Arm::kControl) {
      return {.set = {}, .reason = Reason::kControlArm};
    }
    const DestinationSet set = table->Find(key_id);
    if (set.empty()) return {.set = {}, .reason = Reason::kNotAdmitted};
    return {.set = set};
  }

 private:
  void InstallLocked(std::shared_ptr<const RoutingTable> table, Time now) {
    const int current = current_.load(std::memory_order_seq_cst);
    int target = -1;
    while (target < 0) {
      for (int s = 0; s < kSlots; ++s) {
        if (s != current && !readers_.HasReaders(s)) {
          target = s;
          break;
        }
      }
      // Every other slot still has a reader that entered before its table was replaced; each
      // leaves after one lookup.
      if (target < 0) std::this_thread::yield();
    }
    tables_[target] = std::move(table);  // drops an old table here, off the request path
    installed_version_ = tables_[target]->version();
    table_fraction_.store(tables_[target]->table_fraction(), std::memory_order_relaxed);
    installed_at_.store(now.time_since_epoch().count(), std::memory_order_relaxed);
    refreshed_at_.store(now.time_since_epoch().count(), std::memory_order_relaxed);
    current_.store(target, std::memory_order_seq_cst);
  }

  bool IsStale(Time now) const {
    if (ttl_ == Duration::zero()) return false;
    const Time refreshed(Duration(refreshed_at_.load(std::memory_order_relaxed)));
    return now - refreshed > ttl_;
  }

  Status CheckInstallableLocked(const RoutingTable* table, bool same_version_ok) const {
    if (table == nullptr) return Status::Error("table is null");
    if (!same_version_ok && table->destination_count() != count()) {
      return Status::Error("table " + ToString(table->version()) + " has destination_count " +
                           std::to_string(table->destination_count()) +
                           ", the router routes over " + std::to_string(count()) +
                           " destinations (unknown destination)");
    }
    const bool older = same_version_ok ? table->version() < installed_version_
                                       : !(installed_version_ < table->version());
    if (current_.load(std::memory_order_seq_cst) >= 0 && older) {
      return Status::Error("version regression: table " + ToString(table->version()) +
                           " is not newer than the installed " + ToString(installed_version_));
    }
    return Status::Ok();
  }

  const uint32_t capacity_;
  const Duration ttl_;
  const ShardLedger& readers_;
  std::atomic<uint32_t> count_;  // destinations routed over (Resize), ≤ capacity_

  // tables_[s] is written only by Install, while slot s is not current and has no reader.
  std::array<std::shared_ptr<const RoutingTable>, kSlots> tables_;
  std::atomic<int> current_{-1};             // index into tables_, -1 before the first Install
  std::atomic<double> table_fraction_{1.0};  // of the installed table
  std::atomic<Duration::rep> installed_at_{0};
  std::atomic<Duration::rep> refreshed_at_{0};

  mutable std::mutex install_mu_;   // serialises Install and Resize; never taken by a reader
  TableVersion installed_version_;  // guarded by install_mu_
  uint64_t installs_ = 0;           // guarded by install_mu_
  uint64_t rejected_installs_ = 0;  // guarded by install_mu_
  std::string last_rejection_;      // guarded by install_mu_
};

}  // namespace cacheroute::dataplane
