// ShardLedger: a Router's request-side counters, kept per thread so that request threads share no
// written cache line (docs/dataplane.md, "Per-thread shards", "In-flight counts", "Token work and
// memory"). Per destination: requests in flight (picked − released), and with the token-work rule
// the ledger of queued prefill tokens, prefilling and decoding requests (and, when asked for, the
// prompt tokens in flight: DestinationWork::active_tokens); per shard the fleet's prefilling
// count, the Router's decision counters by Reason and the table slots' reader counts (TableSlots).
//
// A thread claims one of kShards shards on its first call (process-wide: the same index in every
// Router) and returns it at exit; threads beyond the first kShards − 1 share the last. A thread
// writes only its own shard (plain stores; atomic read-modify-writes in the shared one), reads its
// own live and the other shards' through cached sums refreshed every kViewTicks of its view reads
// or when a Pick's `now` is kMaxViewAge past the last drop (DropOldView). Each shard's state is a
// region of whole pages built with placement new: the Shard, then per group of kGroupSize
// destinations a block of counts, a block of cached sums, and with the ledger a block of its own
// ledger words and one of the others' sums (with active tokens two more).
//
// Invariants: the request side (CountPick, CountFirstToken, CountRelease, CountDecision, the *Seen
// reads) never locks, allocates or throws; SumInFlight and SumDecisions are exact at any time
// (releases are read before picks, so a sum never counts a release without its pick); a *Seen
// field that a thread's mix of live and cached words reads as negative reads as 0.
//
// Usage (the Router's):
//   const router_internal::ThreadShard& shard = router_internal::CurrentThreadShard();
//   LedgerState state = ledger.CountPick(shard, decision, prompt_tokens);   // InFlight keeps it
//   ledger.CountRelease(decision, prompt_tokens, state);                     // any thread
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>

#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/dispatch.h"
#include "cacheroute/dataplane/hot_path.h"

namespace cacheroute::dataplane {

namespace router_internal {

// Shard indices for request threads: [0, kShards - 1) are owned by one thread each, the last is
// shared by every thread that found none free.
inline constexpr uint32_t kShards = 64;
inline constexpr uint32_t kSharedShard = kShards - 1;

inline std::atomic<uint64_t>& ClaimedShards() {
  static std::atomic<uint64_t> claimed{uint64_t{1} << kSharedShard};  // the shared one: never owned
  return claimed;
}

// This thread's claim on a shard: taken on first use, returned when the thread exits.
class ThreadShard {
 public:
  ThreadShard() {
    uint64_t claimed = ClaimedShards().load(std::memory_order_relaxed);
    while (~claimed != 0) {
      const uint32_t free = static_cast<uint32_t>(std::countr_zero(~claimed));
      if (ClaimedShards().compare_exchange_weak(claimed, claimed | uint64_t{1} << free,
                                                std::memory_order_acq_rel)) {
        index_ = free;
        return;
      }
    }
  }
  ~ThreadShard() {
    if (owned()) ClaimedShards().fetch_and(~(uint64_t{1} << index_), std::memory_order_acq_rel);
  }
  ThreadShard(const ThreadShard&) = delete;
  ThreadShard& operator=(const ThreadShard&) = delete;

  uint32_t index() const { return index_; }
  bool owned() const { return index_ != kSharedShard; }

 private:
  uint32_t index_ = kSharedShard;
};

inline const ThreadShard& CurrentThreadShard() {
  thread_local const ThreadShard shard;
  return shard;
}

// Adds `delta` to a counter of a shard: a plain store in the thread's own shard, an atomic
// read-modify-write in the shared one. The order is a template argument so that each use is a
// few instructions the compiler inlines (a runtime order costs a switch).
template <typename T, std::memory_order kOrder = std::memory_order_relaxed>
inline void ShardAdd(std::atomic<T>& counter, T delta, bool owned) {
  if (owned) {
    counter.store(counter.load(std::memory_order_relaxed) + delta, kOrder);
  } else {
    counter.fetch_add(delta, kOrder == std::memory_order_release ? std::memory_order_acq_rel
                                                                 : std::memory_order_relaxed);
  }
}

}  // namespace router_internal

// Where a request counts in the token-work ledger while its InFlight token lives.
enum class LedgerState : uint8_t { kNone, kPrefill, kDecode };

// The Router's decisions by outcome, summed over the shards.
struct DecisionCounts {
  uint64_t planned = 0;
  uint64_t spilled = 0;  // of planned: sent outside the key's set (its spill, or a random one)
  // Fallback decisions by reason, indexed by Reason (kPlanned and kPolicy stay 0).
  std::array<uint64_t, kReasonCount> fallback{};
  uint64_t no_destination = 0;  // decisions that found no up destination at all
};

class ShardLedger {
 public:
  using ThreadShard = router_internal::ThreadShard;
  // Table slots whose readers each shard counts (TableSlots::kSlots ≤ this).
  static constexpr int kReaderSlots = 4;
  // Bounded staleness of the other threads' counts in the *Seen reads (docs/dataplane.md).
  static constexpr uint32_t kViewTicks = 1024;
  static constexpr Duration kMaxViewAge = std::chrono::microseconds(100);

  // Counts for `capacity` destinations; with `token_work` the token-work ledger too, and with
  // `active_tokens` (token work only) each destination's prompt tokens in flight.
  ShardLedger(uint32_t capacity, bool token_work, bool active_tokens)
      : capacity_(capacity),
        groups_((capacity + kGroupSize - 1) / kGroupSize),
        token_work_(token_work),
        active_tokens_(token_work && active_tokens),
        region_bytes_(RegionBytes(groups_, BlocksPerGroup())),
        regions_(static_cast<std::byte*>(::operator new[](router_internal::kShards* region_bytes_,
                                                          std::align_val_t{kPageBytes}))) {
    for (uint32_t s = 0; s < router_internal::kShards; ++s) {
      std::byte* region = Region(s);
      new (region) Shard;
      const uint32_t blocks = BlocksPerGroup() * groups_;
      for (uint32_t g = 0; g < blocks; ++g) {
        std::byte* block = region + sizeof(Shard) + g * sizeof(CountsBlock);
        if (g < groups_) {
          new (block) CountsBlock;
        } else if (g < 2 * groups_) {
          new (block) ViewBlock;
        } else {
          new (block) WorkBlock;
        }
      }
    }
  }
  ShardLedger(const ShardLedger&) = delete;
  ShardLedger& operator=(const ShardLedger&) = delete;

  uint32_t capacity() const { return capacity_; }
  bool token_work() const { return token_work_; }
  bool active_tokens() const { return active_tokens_; }

  // Counts a request routed to decision.destination (< capacity()) in flight in the thread's
  // shard, and with the ledger its expected uncached tokens (QueuedTokens) as queued prefill and
  // its prompt as active tokens. Returns where the request now counts in the ledger.
  LedgerState CountPick(const ThreadShard& thread_shard, const Decision& decision,
                        uint32_t prompt_tokens) {
    const uint32_t s = thread_shard.index();
    const uint32_t d = decision.destination;
    UseShard(s);
    router_internal::ShardAdd<uint32_t>(Counts(s, d).picked, 1, thread_shard.owned());
    if (!token_work_) return LedgerState::kNone;
    AddWord(thread_shard, d, kOwnWords, QueuedTokens(decision, prompt_tokens) + kPrefillOne);
    AddPrefilling(thread_shard, 1);
    if (active_tokens_) AddWord(thread_shard, d, kOwnActive, prompt_tokens);
    return LedgerState::kPrefill;
  }

  // The request's first token arrived: its prefill leaves the queue and it counts as decoding.
  void CountFirstToken(const Decision& decision, uint32_t prompt_tokens) {
    const ThreadShard& thread_shard = router_internal::CurrentThreadShard();
    UseShard(thread_shard.index());
    AddWord(thread_shard, decision.destination, kOwnWords,
            kDecodeOne - kPrefillOne - QueuedTokens(decision, prompt_tokens));
    AddPrefilling(thread_shard, -1);
  }

  // Ends a request counted by CountPick, in the releasing thread's shard (any thread). The
  // release order of the count pairs with SumInFlight's acquire.
  void CountRelease(const Decision& decision, uint32_t prompt_tokens, LedgerState state) {
    const ThreadShard& thread_shard = router_internal::CurrentThreadShard();
    const uint32_t d = decision.destination;
    UseShard(thread_shard.index());
    if (state != LedgerState::kNone) {
      if (state == LedgerState::kDecode) {
        AddWord(thread_shard, d, kOwnWords, -kDecodeOne);
      } else {
        AddWord(thread_shard, d, kOwnWords, -(QueuedTokens(decision, prompt_tokens) + kPrefillOne));
        AddPrefilling(thread_shard, -1);
      }
      if (active_tokens_) AddWord(thread_shard, d, kOwnActive, -uint64_t{prompt_tokens});
    }
    router_internal::ShardAdd<uint32_t, std::memory_order_release>(
        Counts(thread_shard.index(), d).released, 1, thread_shard.owned());
  }

  // Counts one decision of the Router's own in the thread's shard (RouterStats).
  void CountDecision(const ThreadShard& thread_shard, const Decision& decision) {
    Shard& shard = ShardAt(thread_shard.index());
    const bool owned = thread_shard.owned();
    if (decision.planned) {
      router_internal::ShardAdd<uint64_t>(shard.planned, 1, owned);
      if (decision.spilled) router_internal::ShardAdd<uint64_t>(shard.spilled, 1, owned);
    } else {
      router_internal::ShardAdd<uint64_t>(shard.fallback[static_cast<int>(decision.reason)], 1,
                                          owned);
    }
    if (decision.destination == kNoDestination) {
      router_internal::ShardAdd<uint64_t>(shard.no_destination, 1, owned);
    }
  }

  // Shard `shard`'s reader counts of the table slots, kReaderSlots of them (TableSlots::ReadGuard).
  std::atomic<uint32_t>* Readers(uint32_t shard) const { return ShardAt(shard).readers.data(); }

  // Whether any thread is reading table slot `slot` (TableSlots::Install only).
  bool HasReaders(int slot) const {
    for (uint32_t i = 0; i < router_internal::kShards; ++i) {
      if (ShardAt(i).readers[slot].load(std::memory_order_seq_cst) != 0) return true;
    }
    return false;
  }

  // in_flight(d) as the thread owning `thread_shard` sees it: its own shard live, the others'
  // cached (one view read).
  int64_t InFlightSeen(const ThreadShard& thread_shard, uint32_t d) {
    const uint32_t s = thread_shard.index();
    const ViewBlock& view = CurrentView(thread_shard, d / kGroupSize);
    const DestinationCounts& mine = Counts(s, d);
    const uint32_t own =
        mine.picked.load(std::memory_order_relaxed) - mine.released.load(std::memory_order_relaxed);
    const uint32_t seen = own + view.others[d % kGroupSize].load(std::memory_order_relaxed);
    return std::max<int32_t>(0, static_cast<int32_t>(seen));
  }

  // The ledger of `d` as the thread sees it, as InFlightSeen, with active tokens when kept: one
  // view read (LoadView::Work). Zeros without the ledger.
  DestinationWork WorkSeen(const ThreadShard& thread_shard, uint32_t d) {
    return LedgerSeen</*kActive=*/true>(thread_shard, d, /*count=*/true);
  }
  // The same without counting a view read and without active tokens: what the token-work rule
  // reads per candidate (its decision counts one view read, CountViewRead).
  CACHEROUTE_HOT_INLINE DestinationWork QueueSeen(const ThreadShard& thread_shard, uint32_t d) {
    return LedgerSeen</*kActive=*/false>(thread_shard, d, /*count=*/false);
  }

  // Requests prefilling over the whole fleet as this thread sees it: its own shard's count live,
  // the other shards' cached for kViewTicks view reads (or until DropOldView). A read counts in
  // the view tick unless `count` is false. (In the shared shard two threads may refresh at once:
  // each stores a valid sum.)
  double FleetPrefillingSeen(const ThreadShard& thread_shard, bool count = true) {
    if (!token_work_) return 0;
    const uint32_t s = thread_shard.index();
    Shard& shard = ShardAt(s);
    const uint32_t now_tick =
        count ? CountViewRead(thread_shard) : shard.view_tick.load(std::memory_order_relaxed);
    if (now_tick - shard.prefilling_tick.load(std::memory_order_relaxed) >= kViewTicks) {
      int32_t others = 0;
      const uint64_t exclude = uint64_t{1} << s;
      for (uint64_t m = used_shards_.load(std::memory_order_acquire) & ~exclude; m != 0;
           m &= m - 1) {
        others += ShardAt(std::countr_zero(m)).prefilling.load(std::memory_order_relaxed);
      }
      shard.others_prefilling.store(others, std::memory_order_relaxed);
      shard.prefilling_tick.store(now_tick, std::memory_order_relaxed);
    }
    const int32_t seen = shard.prefilling.load(std::memory_order_relaxed) +
                         shard.others_prefilling.load(std::memory_order_relaxed);
    return static_cast<double>(std::max(0, seen));
  }

  // Counts one view read in this thread's tick; returns the tick before it.
  CACHEROUTE_HOT_INLINE uint32_t CountViewRead(const ThreadShard& thread_shard) {
    std::atomic<uint32_t>& tick = ShardAt(thread_shard.index()).view_tick;
    const uint32_t now_tick = tick.load(std::memory_order_relaxed);
    router_internal::ShardAdd<uint32_t>(tick, 1, thread_shard.owned());
    return now_tick;
  }

  // Drops this thread's cached sums when `now` moved more than kMaxViewAge since it last did.
  void DropOldView(const ThreadShard& thread_shard, Time now) {
    Shard& shard = ShardAt(thread_shard.index());
    const Duration::rep t = now.time_since_epoch().count();
    const Duration::rep last = shard.view_time.load(std::memory_order_relaxed);
    // Unsigned, so that a `now` earlier than the last one (another thread's, in the shared shard)
    // also drops the view: a refresh too many, never a view kept too long.
    if (static_cast<uint64_t>(t) - static_cast<uint64_t>(last) <=
        static_cast<uint64_t>(kMaxViewAge.count())) {
      return;
    }
    shard.view_time.store(t, std::memory_order_relaxed);
    router_internal::ShardAdd<uint32_t>(shard.view_tick, kViewTicks, thread_shard.owned());
  }

  // Σ picked − Σ released of `d` over the used shards (mod 2^32): exact. Releases first, with
  // acquire: a release counted here happened after its pick, which the second pass then sees
  // (the shard's bit included), so the sum never counts a release without its pick.
  uint32_t SumInFlight(uint32_t d) const {
    uint32_t released = 0;
    for (uint64_t m = used_shards_.load(std::memory_order_acquire); m != 0; m &= m - 1) {
      released += Counts(std::countr_zero(m), d).released.load(std::memory_order_acquire);
    }
    uint32_t picked = 0;
    for (uint64_t m = used_shards_.load(std::memory_order_acquire); m != 0; m &= m - 1) {
      picked += Counts(std::countr_zero(m), d).picked.load(std::memory_order_relaxed);
    }
    return picked - released;
  }

  // The token-work ledger of `d` summed over the used shards' own words (zeros without it): what
  // the Router shares with other gateways. Another thread's pick and release may be seen apart;
  // negative fields read as 0.
  DestinationWork SumWork(uint32_t d) const {
    if (!token_work_) return {};
    uint64_t word = 0;
    for (uint64_t m = used_shards_.load(std::memory_order_acquire); m != 0; m &= m - 1) {
      word += WorkAt(std::countr_zero(m), d / kGroupSize, kOwnWords)
                  .words[d % kGroupSize]
                  .load(std::memory_order_relaxed);
    }
    return DecodeWork(word);
  }

  DecisionCounts SumDecisions() const {
    DecisionCounts sum;
    for (uint32_t s = 0; s < router_internal::kShards; ++s) {
      const Shard& shard = ShardAt(s);
      sum.planned += shard.planned.load(std::memory_order_relaxed);
      sum.spilled += shard.spilled.load(std::memory_order_relaxed);
      for (int r = 0; r < kReasonCount; ++r) {
        sum.fallback[r] += shard.fallback[r].load(std::memory_order_relaxed);
      }
      sum.no_destination += shard.no_destination.load(std::memory_order_relaxed);
    }
    return sum;
  }

 private:
  // Blocks are 128 bytes, not 64, because x86's adjacent-line prefetcher moves lines in pairs.
  static constexpr size_t kFalseSharingBytes = 128;
  // Each shard's state is a region of whole pages: the L2 streamer prefetches ahead within a
  // 4 KiB page, so two threads' state on one page still costs misses (measured: two threads at
  // 1.7x instead of 2.0x of one with 256-byte shards side by side).
  static constexpr size_t kPageBytes = 4096;

  // In-flight counts and views, by groups of kGroupSize destinations: one block of counts and one
  // of cached sums per group and shard, so that a refresh moves one block per other shard for
  // sixteen destinations.
  struct DestinationCounts {
    std::atomic<uint32_t> picked{0};    // written only by the shard's thread(s)
    std::atomic<uint32_t> released{0};  // written only by the shard's thread(s)
  };
  static constexpr uint32_t kGroupSize = kFalseSharingBytes / sizeof(DestinationCounts);
  struct alignas(kFalseSharingBytes) CountsBlock {
    std::array<DestinationCounts, kGroupSize> counts;
  };
  // This shard's cached sums of the other shards' in-flight counts (two's complement, mod 2^32)
  // and the view tick they were read at.
  struct alignas(kFalseSharingBytes) ViewBlock {
    std::atomic<uint32_t> tick{0};
    std::array<std::atomic<uint32_t>, kGroupSize> others{};
  };
  static_assert(sizeof(ViewBlock) == sizeof(CountsBlock));
  // Ledger words, kept like the in-flight counts: per shard and destination one word of what this
  // shard's thread(s) added and removed, read as the thread's own word live plus cached sums of
  // the other shards' words (refreshed with the in-flight view). Fields, low to high: queued
  // prefill tokens (32 bits), prefilling requests (16), decoding requests (16), each a
  // two's-complement count that may be negative in one shard (a release by a thread that did not
  // pick). Words add field by field in modular arithmetic (carries and borrows included), so a sum
  // of words decodes exactly (DecodeWork) while each field's true total is within its signed range.
  // Active tokens are one two's-complement word per destination in blocks of their own.
  struct alignas(kFalseSharingBytes) WorkBlock {
    std::array<std::atomic<uint64_t>, kGroupSize> words{};
  };
  static_assert(sizeof(WorkBlock) == sizeof(CountsBlock));
  static constexpr uint64_t kPrefillOne = uint64_t{1} << 32;
  static constexpr uint64_t kDecodeOne = uint64_t{1} << 48;
  // Which WorkBlocks of a group: this shard's ledger words, its cached sums of the others', and
  // the same for active tokens.
  static constexpr int kOwnWords = 0;
  static constexpr int kOthersWords = 1;
  static constexpr int kOwnActive = 2;
  static constexpr int kOthersActive = 3;

  // One thread's (or, for the shared shard, many threads') reader counts, stats counters and
  // in-flight view state, on cache lines of their own.
  struct alignas(kFalseSharingBytes) Shard {
    std::array<std::atomic<uint32_t>, kReaderSlots> readers{};  // readers in each table slot
    alignas(64) std::atomic<uint64_t> planned{0};
    std::atomic<uint64_t> spilled{0};
    std::array<std::atomic<uint64_t>, kReasonCount> fallback{};  // by Reason
    std::atomic<uint64_t> no_destination{0};
    // The in-flight view: its tick, advanced by every view read and by kViewTicks when a Pick's
    // `now` finds it older than kMaxViewAge; `now` when it last was.
    alignas(64) std::atomic<uint32_t> view_tick{kViewTicks};  // every cached sum starts stale
    std::atomic<Duration::rep> view_time{0};
    std::atomic<bool> used{false};       // this shard holds in-flight counts of this ledger
    std::atomic<int32_t> prefilling{0};  // the token-work ledger's prefilling count, this shard's
    // The other shards' prefilling counts summed, and the view tick they were read at.
    std::atomic<int32_t> others_prefilling{0};
    std::atomic<uint32_t> prefilling_tick{0};
  };

  // Blocks per group in a region: counts and view; with the ledger its words and their sums; with
  // active tokens theirs.
  uint32_t BlocksPerGroup() const { return 2 + (token_work_ ? 2 : 0) + (active_tokens_ ? 2 : 0); }
  // A shard's region: the Shard, then its blocks group by group within each kind, rounded up to
  // whole pages.
  static size_t RegionBytes(uint32_t groups, uint32_t blocks_per_group) {
    const size_t bytes = sizeof(Shard) + blocks_per_group * size_t{groups} * sizeof(CountsBlock);
    return (bytes + kPageBytes - 1) / kPageBytes * kPageBytes;
  }
  struct RegionsDelete {
    void operator()(std::byte* p) const { ::operator delete[](p, std::align_val_t{kPageBytes}); }
  };
  std::byte* Region(uint32_t shard) const { return regions_.get() + shard * region_bytes_; }
  Shard& ShardAt(uint32_t shard) const {
    return *std::launder(reinterpret_cast<Shard*>(Region(shard)));
  }
  CountsBlock& CountsAt(uint32_t shard, uint32_t group) const {
    return *std::launder(reinterpret_cast<CountsBlock*>(Region(shard) + sizeof(Shard) +
                                                        group * sizeof(CountsBlock)));
  }
  ViewBlock& ViewAt(uint32_t shard, uint32_t group) const {
    return *std::launder(reinterpret_cast<ViewBlock*>(Region(shard) + sizeof(Shard) +
                                                      (groups_ + group) * sizeof(CountsBlock)));
  }
  // Block `which` (kOwnWords … kOthersActive) of a group.
  WorkBlock& WorkAt(uint32_t shard, uint32_t group, int which) const {
    return *std::launder(reinterpret_cast<WorkBlock*>(
        Region(shard) + sizeof(Shard) + ((2 + which) * groups_ + group) * sizeof(CountsBlock)));
  }
  DestinationCounts& Counts(uint32_t shard, uint32_t d) const {
    return CountsAt(shard, d / kGroupSize).counts[d % kGroupSize];
  }

  // A sum of ledger words, field by field from the low end (each field signed), negative fields
  // read as 0 (a release seen before its pick: another thread's, not yet in the cached sums).
  CACHEROUTE_HOT_INLINE static DestinationWork DecodeWork(uint64_t word) {
    const auto queued = static_cast<int32_t>(static_cast<uint32_t>(word));
    word = (word - static_cast<uint64_t>(int64_t{queued})) >> 32;
    const auto prefilling = static_cast<int16_t>(static_cast<uint16_t>(word));
    word = (word - static_cast<uint64_t>(int64_t{prefilling})) >> 16;
    const auto decoding = static_cast<int16_t>(static_cast<uint16_t>(word));
    return {.queued_prefill_tokens = static_cast<double>(std::max<int32_t>(0, queued)),
            .prefilling = static_cast<double>(std::max<int16_t>(0, prefilling)),
            .decoding = static_cast<double>(std::max<int16_t>(0, decoding))};
  }

  template <bool kActive>
  CACHEROUTE_HOT_INLINE DestinationWork LedgerSeen(const ThreadShard& thread_shard, uint32_t d,
                                                   bool count) {
    if (!token_work_) return {};
    const uint32_t s = thread_shard.index();
    const uint32_t group = d / kGroupSize;
    CurrentView(thread_shard, group, count);
    const uint32_t i = d % kGroupSize;
    DestinationWork work =
        DecodeWork(WorkAt(s, group, kOwnWords).words[i].load(std::memory_order_relaxed) +
                   WorkAt(s, group, kOthersWords).words[i].load(std::memory_order_relaxed));
    if constexpr (kActive) {
      if (active_tokens_) {
        const uint64_t active =
            WorkAt(s, group, kOwnActive).words[i].load(std::memory_order_relaxed) +
            WorkAt(s, group, kOthersActive).words[i].load(std::memory_order_relaxed);
        work.active_tokens =
            static_cast<double>(std::max<int64_t>(0, static_cast<int64_t>(active)));
      }
    }
    return work;
  }

  // The ledger's share of a request: its expected uncached tokens as queued prefill.
  static uint64_t QueuedTokens(const Decision& decision, uint32_t prompt_tokens) {
    return decision.expected_uncached_tokens > 0 ? decision.expected_uncached_tokens
                                                 : prompt_tokens;
  }
  // Adds `delta` (mod 2^64) to `d`'s word in block `which` of the thread's shard.
  void AddWord(const ThreadShard& thread_shard, uint32_t d, int which, uint64_t delta) {
    router_internal::ShardAdd<uint64_t>(
        WorkAt(thread_shard.index(), d / kGroupSize, which).words[d % kGroupSize], delta,
        thread_shard.owned());
  }
  // The fleet's prefilling count, in the thread's shard.
  void AddPrefilling(const ThreadShard& thread_shard, int32_t delta) {
    router_internal::ShardAdd<int32_t>(ShardAt(thread_shard.index()).prefilling, delta,
                                       thread_shard.owned());
  }

  // Makes `shard` part of every sum before it first counts anything. The seq_cst
  // read-modify-write is ordered before the shard's first count, so a sum that sees a count of
  // the shard (or anything that happened after it) also sees the shard's bit.
  void UseShard(uint32_t shard) {
    std::atomic<bool>& used = ShardAt(shard).used;
    // Acquire/release: a thread that finds the flag set (a previous owner's, or a thread sharing
    // the shared shard) is ordered after the read-modify-write that set the bit.
    if (used.load(std::memory_order_acquire)) return;
    used_shards_.fetch_or(uint64_t{1} << shard, std::memory_order_seq_cst);
    used.store(true, std::memory_order_release);
  }

  // Counts one view read in this thread's tick (unless `count` is false) and returns its view of
  // `group`, re-read first when kViewTicks reads have passed since it was.
  CACHEROUTE_HOT_INLINE const ViewBlock& CurrentView(const ThreadShard& thread_shard,
                                                     uint32_t group, bool count = true) {
    const uint32_t s = thread_shard.index();
    const uint32_t now_tick =
        count ? CountViewRead(thread_shard) : ShardAt(s).view_tick.load(std::memory_order_relaxed);
    const ViewBlock& view = ViewAt(s, group);
    if (now_tick - view.tick.load(std::memory_order_relaxed) >= kViewTicks) {
      RefreshView(s, group, now_tick);
    }
    return view;
  }

  // Re-reads shard `s`'s view of one group of destinations from the other used shards, releases
  // before picks as in SumInFlight, and with the ledger the sums of their ledger words (and active
  // tokens). (In the shared shard two threads may refresh at once: each stores a valid sum, so the
  // view holds one of them per destination.)
  void RefreshView(uint32_t s, uint32_t group, uint32_t now_tick) {
    const uint32_t first = group * kGroupSize;
    const uint32_t n = std::min(kGroupSize, capacity_ - first);
    const uint64_t exclude = uint64_t{1} << s;
    std::array<uint32_t, kGroupSize> sums{};
    for (uint64_t m = used_shards_.load(std::memory_order_acquire) & ~exclude; m != 0; m &= m - 1) {
      const CountsBlock& block = CountsAt(std::countr_zero(m), group);
      for (uint32_t i = 0; i < n; ++i) {
        sums[i] -= block.counts[i].released.load(std::memory_order_acquire);
      }
    }
    for (uint64_t m = used_shards_.load(std::memory_order_acquire) & ~exclude; m != 0; m &= m - 1) {
      const CountsBlock& block = CountsAt(std::countr_zero(m), group);
      for (uint32_t i = 0; i < n; ++i) {
        sums[i] += block.counts[i].picked.load(std::memory_order_relaxed);
      }
    }
    ViewBlock& view = ViewAt(s, group);
    for (uint32_t i = 0; i < n; ++i) view.others[i].store(sums[i], std::memory_order_relaxed);
    if (token_work_) RefreshWords(s, group, n, exclude, kOwnWords, kOthersWords);
    if (active_tokens_) RefreshWords(s, group, n, exclude, kOwnActive, kOthersActive);
    view.tick.store(now_tick, std::memory_order_relaxed);
  }
  void RefreshWords(uint32_t s, uint32_t group, uint32_t n, uint64_t exclude, int own, int others) {
    std::array<uint64_t, kGroupSize> words{};
    for (uint64_t m = used_shards_.load(std::memory_order_acquire) & ~exclude; m != 0; m &= m - 1) {
      const WorkBlock& block = WorkAt(std::countr_zero(m), group, own);
      for (uint32_t i = 0; i < n; ++i) words[i] += block.words[i].load(std::memory_order_relaxed);
    }
    WorkBlock& cached = WorkAt(s, group, others);
    for (uint32_t i = 0; i < n; ++i) cached.words[i].store(words[i], std::memory_order_relaxed);
  }

  const uint32_t capacity_;
  const uint32_t groups_;  // destination groups of kGroupSize
  const bool token_work_;
  const bool active_tokens_;
  const size_t region_bytes_;
  std::unique_ptr<std::byte[], RegionsDelete> regions_;  // kShards regions (see Region)
  std::atomic<uint64_t> used_shards_{0};                 // bit s: shard s has counted here
};

}  // namespace cacheroute::dataplane
