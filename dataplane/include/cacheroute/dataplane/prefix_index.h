// ApproxPrefixIndex: what a router remembers of the prompt blocks it sent to each destination, as
// the approximate modes of NVIDIA Dynamo's KV router (ai-dynamo/dynamo, lib/llm/src/kv_router/:
// blocks it routed, expiring after a TTL) and of the llm-d / Gateway API Inference Extension
// prefix-cache scorer (kubernetes-sigs/gateway-api-inference-extension, the prefix plugin: an LRU
// of blocks per server) keep it. The modern baseline policies (policies.h) are built on it.
//
// Entries are (block hash, destination) pairs, each with the time it was last recorded. A block
// hash is a chained hash (it stands for the whole prefix up to that block), so the overlap of a
// request at a destination is the longest run of its leading blocks recorded there. Eviction is
// least recently recorded first, either over one pool for all destinations (`total_blocks`) or
// per destination (`blocks_per_destination`); entries older than `ttl` (when set) count as absent.
//
// Memory is allocated once, at construction (about 32 bytes per entry); Record and Overlap never
// allocate. Not thread-safe: the policies that use it serialise their picks with a mutex, as the
// published routers serialise decisions through their indexer.
//
// Usage:
//   ApproxPrefixIndex index({.destinations = 8, .total_blocks = 1 << 20, .ttl = 120s});
//   index.Overlap(hashes, now, overlap);        // overlap[d]: leading blocks recorded at d
//   index.Record(hashes, chosen, now);          // after the pick, at once
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/random.h"

namespace cacheroute::dataplane {

struct PrefixIndexOptions {
  uint32_t destinations = 0;
  // Exactly one of these is non-zero: one LRU over every destination's blocks, or one per
  // destination.
  uint32_t total_blocks = 0;
  uint32_t blocks_per_destination = 0;
  Duration ttl = Duration::zero();  // zero: entries never expire by age
};

// For each destination d < min(out.size(), destinations), the number of leading blocks of `hashes`
// that `holds(hash, d)`: the overlap both prefix indexes compute (ApproxPrefixIndex here,
// KvEventIndex over the engines' events). `active` is the caller's scratch (no allocation once it
// has room for the destinations).
template <typename Holds>
void LeadingOverlap(std::span<const uint64_t> hashes, uint32_t destinations,
                    std::span<uint32_t> out, std::vector<uint32_t>& active, Holds holds) {
  std::fill(out.begin(), out.end(), 0);
  if (hashes.empty()) return;
  active.clear();
  for (uint32_t d = 0; d < out.size() && d < destinations; ++d) {
    if (holds(hashes[0], d)) {
      out[d] = 1;
      active.push_back(d);
    }
  }
  for (size_t i = 1; i < hashes.size() && !active.empty(); ++i) {
    size_t kept = 0;
    for (uint32_t d : active) {
      if (!holds(hashes[i], d)) continue;
      out[d] = static_cast<uint32_t>(i + 1);
      active[kept++] = d;
    }
    active.resize(kept);
  }
}

// The node arrays both prefix indexes keep (ApproxPrefixIndex here, KvEventIndex): nodes addressed
// by index, 0 (kNil) meaning none; each node on one doubly linked LRU list (`prev`/`next`, next
// toward older) and one hash-bucket chain (`chain`) keyed by (hash, destination). The list and
// bucket operations, written once for both node types.
namespace prefix_index_internal {

inline constexpr uint32_t kNil = 0;

struct NodeList {
  uint32_t newest = kNil, oldest = kNil;
  uint32_t size = 0, capacity = 0;
};

// Buckets for `nodes`: the power of two at least twice their number.
inline size_t BucketCount(size_t nodes) {
  size_t n = 1;
  while (n < 2 * nodes) n <<= 1;
  return n;
}

// The bucket of (hash, destination) among `buckets` (a power of two).
inline size_t Bucket(uint64_t hash, uint32_t destination, size_t buckets) {
  return Mix64(hash ^ (uint64_t{destination} * 0x9e3779b97f4a7c15ULL)) & (buckets - 1);
}

// The node holding (hash, destination), or kNil.
template <typename Node>
uint32_t Find(const std::vector<Node>& nodes, const std::vector<uint32_t>& buckets, uint64_t hash,
              uint32_t destination) {
  for (uint32_t i = buckets[Bucket(hash, destination, buckets.size())]; i != kNil;
       i = nodes[i].chain) {
    if (nodes[i].hash == hash && nodes[i].destination == destination) return i;
  }
  return kNil;
}

template <typename Node>
void Unlink(std::vector<Node>& nodes, NodeList& list, uint32_t i) {
  Node& n = nodes[i];
  (n.prev != kNil ? nodes[n.prev].next : list.newest) = n.next;
  (n.next != kNil ? nodes[n.next].prev : list.oldest) = n.prev;
  n.prev = n.next = kNil;
  --list.size;
}

template <typename Node>
void PushNewest(std::vector<Node>& nodes, NodeList& list, uint32_t i) {
  Node& n = nodes[i];
  n.prev = kNil;
  n.next = list.newest;
  (list.newest != kNil ? nodes[list.newest].prev : list.oldest) = i;
  list.newest = i;
  ++list.size;
}

}  // namespace prefix_index_internal

class ApproxPrefixIndex {
 public:
  explicit ApproxPrefixIndex(const PrefixIndexOptions& options)
      : options_(options),
        per_destination_(options.blocks_per_destination > 0),
        lists_(per_destination_ ? options.destinations : 1),
        capacity_(per_destination_
                      ? static_cast<size_t>(options.blocks_per_destination) * options.destinations
                      : options.total_blocks),
        nodes_(capacity_ + 1),
        buckets_(BucketCount(capacity_), kNil),
        stored_(options.destinations, 0) {
    active_.reserve(options.destinations);
    for (List& list : lists_) {
      list.capacity = per_destination_ ? options.blocks_per_destination : options.total_blocks;
    }
    // Node 0 is the nil sentinel; nodes 1..capacity_ start on the free list.
    for (size_t i = 1; i <= capacity_; ++i) nodes_[i].next = i < capacity_ ? i + 1 : kNil;
    free_ = capacity_ > 0 ? 1 : kNil;
  }

  uint32_t destinations() const { return options_.destinations; }
  // Blocks recorded at `destination` and not yet evicted (expired ones included): the "tree size"
  // Dynamo breaks ties with.
  uint32_t stored(uint32_t destination) const { return stored_[destination]; }

  // For each destination d < out.size(), the number of leading blocks of `hashes` recorded at d and
  // not expired at `now`.
  void Overlap(std::span<const uint64_t> hashes, Time now, std::span<uint32_t> out) const {
    LeadingOverlap(hashes, options_.destinations, out, active_,
                   [&](uint64_t hash, uint32_t d) { return Live(Find(hash, d), now); });
  }

  // Records every block of `hashes` at `destination` as of `now` (most recent first, so that a
  // prompt's prefix outlives its suffix when the LRU evicts).
  void Record(std::span<const uint64_t> hashes, uint32_t destination, Time now) {
    if (destination >= options_.destinations || capacity_ == 0) return;
    for (size_t i = hashes.size(); i-- > 0;) Touch(hashes[i], destination, now);
  }

 private:
  static constexpr uint32_t kNil = prefix_index_internal::kNil;
  struct Node {
    uint64_t hash = 0;
    Duration::rep touched = 0;
    uint32_t destination = 0;
    uint32_t prev = kNil, next = kNil;  // LRU list (next: toward older), or the free list
    uint32_t chain = kNil;              // hash bucket chain
  };
  using List = prefix_index_internal::NodeList;
  static size_t BucketCount(size_t capacity) { return prefix_index_internal::BucketCount(capacity); }
  size_t Bucket(uint64_t hash, uint32_t destination) const {
    return prefix_index_internal::Bucket(hash, destination, buckets_.size());
  }
  uint32_t Find(uint64_t hash, uint32_t destination) const {
    return prefix_index_internal::Find(nodes_, buckets_, hash, destination);
  }
  bool Live(uint32_t node, Time now) const {
    if (node == kNil) return false;
    if (options_.ttl == Duration::zero()) return true;
    return now.time_since_epoch().count() - nodes_[node].touched <= options_.ttl.count();
  }
  List& ListOf(uint32_t destination) { return lists_[per_destination_ ? destination : 0]; }

  void Unlink(List& list, uint32_t i) { prefix_index_internal::Unlink(nodes_, list, i); }
  void PushNewest(List& list, uint32_t i) { prefix_index_internal::PushNewest(nodes_, list, i); }
  void Unchain(uint32_t i) {
    uint32_t* link = &buckets_[Bucket(nodes_[i].hash, nodes_[i].destination)];
    while (*link != i) link = &nodes_[*link].chain;
    *link = nodes_[i].chain;
    nodes_[i].chain = kNil;
  }

  void Touch(uint64_t hash, uint32_t destination, Time now) {
    List& list = ListOf(destination);
    uint32_t i = Find(hash, destination);
    if (i != kNil) {
      Unlink(list, i);
    } else {
      if (list.size >= list.capacity || free_ == kNil) {
        i = list.oldest;  // a full list evicts its own oldest entry
        Unlink(list, i);
        Unchain(i);
        --stored_[nodes_[i].destination];
      } else {
        i = free_;
        free_ = nodes_[i].next;
      }
      Node& n = nodes_[i];
      n.hash = hash;
      n.destination = destination;
      const size_t b = Bucket(hash, destination);
      n.chain = buckets_[b];
      buckets_[b] = i;
      ++stored_[destination];
    }
    nodes_[i].touched = now.time_since_epoch().count();
    PushNewest(list, i);
  }

  const PrefixIndexOptions options_;
  const bool per_destination_;
  std::vector<List> lists_;
  const size_t capacity_;
  std::vector<Node> nodes_;
  std::vector<uint32_t> buckets_;
  std::vector<uint32_t> stored_;
  uint32_t free_ = kNil;
  mutable std::vector<uint32_t> active_;  // Overlap's scratch; reserved at first use
};

}  // namespace cacheroute::dataplane
