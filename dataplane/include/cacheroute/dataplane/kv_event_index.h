// KvEventIndex: which destinations hold each KV block, as the engines report it in their KV events
// (vLLM's BlockStored / BlockRemoved / AllBlocksCleared, published per scheduler step), plus
// speculative entries for the blocks a router has just sent somewhere, which stand in for the
// events that have not arrived yet. The index behind the precise baselines (policies_precise.h):
// llm-d's precise prefix-cache scorer (llm-d-kv-cache-manager's event-fed block index, with
// speculative entries of a short TTL) and NVIDIA Dynamo's KV router in exact mode (its indexer fed
// by the workers' KV events).
//
// Entries are (block hash, destination) pairs. A resident entry exists from the destination's
// stored event to its removed or cleared event; a speculative one from Record until `ttl` later, or
// until the destination's stored event for it makes it resident. A block hash is chained (it
// stands for the whole prefix up to its block), so a request's overlap at a destination is the
// longest run of its leading blocks present there.
//
// Memory is allocated once, at construction: one entry per KV block of the fleet
// (destinations × blocks_per_destination, the largest destination's block count) and
// `speculative_blocks` more, about 40 bytes each. Events the engines' caches could not have sent
// (more blocks stored at a destination than it has) evict that destination's oldest resident
// entry; a full speculative pool evicts its oldest. Thread-safe: every call takes the index's
// mutex, as an event subscriber's thread feeds it while the picks read it.
//
// Usage:
//   KvEventIndex index({.destinations = 8, .blocks_per_destination = 40071});
//   index.Apply(destination, events);           // a batch of one engine's KV events, in order
//   index.Overlap(hashes, now, overlap);        // overlap[d]: leading blocks present at d
//   index.Record(hashes, chosen, now);          // speculative, after the pick
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <vector>

#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/prefix_index.h"
#include "cacheroute/dataplane/random.h"

namespace cacheroute::dataplane {

enum class KvEventKind : uint8_t { kStored, kRemoved, kCleared };

// One block's event (kCleared ignores the hash: every block of the destination goes).
struct KvEvent {
  KvEventKind kind = KvEventKind::kStored;
  uint64_t hash = 0;
};

struct KvEventIndexOptions {
  uint32_t destinations = 0;
  uint32_t blocks_per_destination = 0;  // resident entries per destination: its KV blocks
  uint32_t speculative_blocks = 1u << 18;
  Duration speculative_ttl = std::chrono::seconds(2);
};

class KvEventIndex {
 public:
  explicit KvEventIndex(const KvEventIndexOptions& options)
      : options_(options),
        lists_(options.destinations + 1),
        nodes_(static_cast<size_t>(options.destinations) * options.blocks_per_destination +
               options.speculative_blocks + 1),
        buckets_(BucketCount(nodes_.size()), kNil) {
    for (uint32_t d = 0; d < options.destinations; ++d) {
      lists_[d].capacity = options.blocks_per_destination;
    }
    lists_[Speculative()].capacity = options.speculative_blocks;
    // Node 0 is the nil sentinel; the others start on the free list.
    for (size_t i = 1; i < nodes_.size(); ++i) {
      nodes_[i].next = i + 1 < nodes_.size() ? static_cast<uint32_t>(i + 1) : kNil;
    }
    free_ = nodes_.size() > 1 ? 1 : kNil;
    active_.reserve(options.destinations);
  }

  uint32_t destinations() const { return options_.destinations; }
  // Resident blocks at `destination`: the size of its cache as its events describe it.
  uint32_t resident(uint32_t destination) const {
    const std::lock_guard<std::mutex> lock(mu_);
    return destination < options_.destinations ? lists_[destination].size : 0;
  }
  // Speculative entries held (expired ones included until Record reclaims them).
  uint32_t speculative() const {
    const std::lock_guard<std::mutex> lock(mu_);
    return lists_[Speculative()].size;
  }

  // One batch of `destination`'s events, applied in order.
  void Apply(uint32_t destination, std::span<const KvEvent> events) {
    const std::lock_guard<std::mutex> lock(mu_);
    if (destination >= options_.destinations) return;
    for (const KvEvent& e : events) {
      switch (e.kind) {
        case KvEventKind::kStored:
          StoredLocked(e.hash, destination);
          break;
        case KvEventKind::kRemoved:
          RemovedLocked(e.hash, destination);
          break;
        case KvEventKind::kCleared:
          ClearedLocked(destination);
          break;
      }
    }
  }

  // For each destination d < out.size(), the number of leading blocks of `hashes` resident at d or
  // speculatively there and not expired at `now`.
  void Overlap(std::span<const uint64_t> hashes, Time now, std::span<uint32_t> out) const {
    const std::lock_guard<std::mutex> lock(mu_);
    LeadingOverlap(hashes, options_.destinations, out, active_,
                   [&](uint64_t hash, uint32_t d) { return Live(Find(hash, d), now); });
  }

  // Speculative entries for every block of `hashes` at `destination`, live until now + ttl (a
  // resident block stays resident). Reclaims the expired ones first.
  void Record(std::span<const uint64_t> hashes, uint32_t destination, Time now) {
    const std::lock_guard<std::mutex> lock(mu_);
    if (destination >= options_.destinations) return;
    List& list = lists_[Speculative()];
    const Duration::rep at = now.time_since_epoch().count();
    while (list.oldest != kNil && nodes_[list.oldest].expires < at)
      Release(Speculative(), list.oldest);
    if (list.capacity == 0) return;
    const Duration::rep expires = at + options_.speculative_ttl.count();
    // Most recent first, so that a prompt's prefix outlives its suffix when the pool is full.
    for (size_t i = hashes.size(); i-- > 0;) {
      uint32_t n = Find(hashes[i], destination);
      if (n != kNil && nodes_[n].resident) continue;
      if (n != kNil) {
        Unlink(list, n);
      } else {
        n = Allocate(Speculative(), hashes[i], destination);
      }
      nodes_[n].expires = expires;
      PushNewest(list, n);
    }
  }

 private:
  static constexpr uint32_t kNil = prefix_index_internal::kNil;
  struct Node {
    uint64_t hash = 0;
    Duration::rep expires = 0;  // speculative entries only
    uint32_t destination = 0;
    uint32_t prev = kNil, next = kNil;  // its list (next: toward older), or the free list
    uint32_t chain = kNil;              // hash bucket chain
    bool resident = false;
  };
  using List = prefix_index_internal::NodeList;
  static size_t BucketCount(size_t nodes) { return prefix_index_internal::BucketCount(nodes); }
  // Lists 0..destinations−1 hold each destination's resident entries; the last, the speculative.
  uint32_t Speculative() const { return options_.destinations; }

  size_t Bucket(uint64_t hash, uint32_t destination) const {
    return prefix_index_internal::Bucket(hash, destination, buckets_.size());
  }
  uint32_t Find(uint64_t hash, uint32_t destination) const {
    return prefix_index_internal::Find(nodes_, buckets_, hash, destination);
  }
  bool Live(uint32_t node, Time now) const {
    return node != kNil &&
           (nodes_[node].resident || now.time_since_epoch().count() <= nodes_[node].expires);
  }

  void Unlink(List& list, uint32_t i) { prefix_index_internal::Unlink(nodes_, list, i); }
  void PushNewest(List& list, uint32_t i) { prefix_index_internal::PushNewest(nodes_, list, i); }
  // Takes `i` off list `l` and its bucket chain, onto the free list.
  void Release(uint32_t l, uint32_t i) {
    Unlink(lists_[l], i);
    uint32_t* link = &buckets_[Bucket(nodes_[i].hash, nodes_[i].destination)];
    while (*link != i) link = &nodes_[*link].chain;
    *link = nodes_[i].chain;
    nodes_[i] = Node{};
    nodes_[i].next = free_;
    free_ = i;
  }
  // A fresh node for (hash, destination), chained but on no list; list `l` gives up its oldest
  // entry first when full.
  uint32_t Allocate(uint32_t l, uint64_t hash, uint32_t destination) {
    if (lists_[l].size >= lists_[l].capacity) Release(l, lists_[l].oldest);
    const uint32_t i = free_;
    free_ = nodes_[i].next;
    Node& n = nodes_[i];
    n = Node{};
    n.hash = hash;
    n.destination = destination;
    const size_t b = Bucket(hash, destination);
    n.chain = buckets_[b];
    buckets_[b] = i;
    return i;
  }

  void StoredLocked(uint64_t hash, uint32_t destination) {
    List& list = lists_[destination];
    if (list.capacity == 0) return;
    uint32_t n = Find(hash, destination);
    if (n != kNil && nodes_[n].resident) return;
    if (n != kNil) {  // speculative until now: it becomes resident
      Unlink(lists_[Speculative()], n);
      if (list.size >= list.capacity) Release(destination, list.oldest);
    } else {
      n = Allocate(destination, hash, destination);
    }
    nodes_[n].resident = true;
    PushNewest(list, n);
  }
  void RemovedLocked(uint64_t hash, uint32_t destination) {
    const uint32_t n = Find(hash, destination);
    if (n != kNil && nodes_[n].resident) Release(destination, n);
  }
  void ClearedLocked(uint32_t destination) {
    while (lists_[destination].oldest != kNil) Release(destination, lists_[destination].oldest);
  }

  const KvEventIndexOptions options_;
  mutable std::mutex mu_;
  std::vector<List> lists_;               // guarded by mu_
  std::vector<Node> nodes_;               // guarded by mu_
  std::vector<uint32_t> buckets_;         // guarded by mu_
  uint32_t free_ = kNil;                  // guarded by mu_
  mutable std::vector<uint32_t> active_;  // Overlap's scratch; guarded by mu_
};

}  // namespace cacheroute::dataplane
