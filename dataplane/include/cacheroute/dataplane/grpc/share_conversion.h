// The fleet-sharing wire format (proto/cacheroute/v1/share.proto) to and from the dataplane's
// types: a gateway's drained PlacementBatch and ledger work become one v1::ShareBatch over
// destination names; a received batch becomes a PlacementBatch and per-destination work over the
// receiving gateway's own indices. The planner's share service checks every batch with
// CheckShareBatch before it forwards it; receivers convert with FromShareBatch, which skips
// destinations they do not have.
//
// Times travel as ages: a placement's age_ms is measured from the batch's sending, and the
// planner adds how long it held the batch (held_ms), so clocks need not agree across machines.
//
// Usage (a gateway):
//   v1::ShareBatch out = ToShareBatch("gw-1", names, outbox.Drain(), &work, clock.Now());
//   ReceivedShare in;
//   FromShareBatch(update.batches(i), index_by_name, clock.Now(), in);
//   router.Learn(in.placements);
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/dispatch.h"
#include "cacheroute/dataplane/key_memory.h"
#include "cacheroute/dataplane/placement_outbox.h"
#include "cacheroute/dataplane/status.h"
#include "cacheroute/v1/share.pb.h"

namespace cacheroute::dataplane {

inline constexpr int kMaxShareGridHashes = 64;
inline constexpr uint32_t kMaxShareGrid = 128;
inline constexpr int kMaxShareDestinations = 65536;
inline constexpr size_t kMaxShareNameBytes = 256;

// The batch a gateway sends: `placements` (over the indices of `names`) and, when `work` is set,
// its ledger's work per destination (work->size() ≤ names.size(); destinations with no work are
// left out).
inline v1::ShareBatch ToShareBatch(const std::string& gateway_id,
                                   const std::vector<std::string>& names,
                                   const PlacementBatch& placements,
                                   const std::vector<DestinationWork>* work, Time now) {
  v1::ShareBatch out;
  out.set_gateway_id(gateway_id);
  for (const std::string& name : names) out.add_destinations(name);
  for (const SharedPlacement& p : placements.placements) {
    if (p.destination >= names.size()) continue;
    v1::SharedPlacement* q = out.add_placements();
    q->set_key_id(p.key_id);
    q->set_has_key(p.key);
    q->set_destination(p.destination);
    q->set_prompt_tokens(std::min<uint32_t>(p.prompt_tokens, KeyMemory::kMaxPromptTokens));
    const auto age = std::chrono::duration_cast<std::chrono::milliseconds>(now - p.sent).count();
    q->set_age_ms(static_cast<uint32_t>(std::clamp<int64_t>(age, 0, UINT32_MAX)));
    // A placement deeper than the wire allows keeps its first kMaxShareGridHashes positions.
    const std::span<const uint64_t> hashes = placements.HashesOf(p);
    const uint32_t first = std::min(p.first_grid, kMaxShareGrid);
    const size_t count =
        std::min<size_t>({hashes.size(), kMaxShareGridHashes, size_t{kMaxShareGrid - first}});
    q->set_first_grid(first);
    for (size_t i = 0; i < count; ++i) q->add_grid_hashes(hashes[i]);
  }
  if (work != nullptr) {
    out.set_has_work(true);
    for (uint32_t d = 0; d < work->size() && d < names.size(); ++d) {
      const DestinationWork& w = (*work)[d];
      if (w.queued_prefill_tokens <= 0 && w.prefilling <= 0 && w.decoding <= 0) continue;
      v1::DestinationWork* q = out.add_work();
      q->set_destination(d);
      q->set_queued_prefill_tokens(static_cast<uint64_t>(std::max(0.0, w.queued_prefill_tokens)));
      q->set_prefilling(static_cast<uint32_t>(std::max(0.0, w.prefilling)));
      q->set_decoding(static_cast<uint32_t>(std::max(0.0, w.decoding)));
    }
  }
  return out;
}

// Ok, or the first field that breaks share.proto's bounds, named with its value.
inline Status CheckShareBatch(const v1::ShareBatch& batch) {
  auto bad = [](const std::string& field, const std::string& why) {
    return Status::Error("share batch " + field + ": " + why);
  };
  if (batch.gateway_id().empty() || batch.gateway_id().size() > kMaxShareNameBytes) {
    return bad("gateway_id",
               "must be 1-256 bytes, got " + std::to_string(batch.gateway_id().size()));
  }
  if (batch.destinations_size() > kMaxShareDestinations) {
    return bad("destinations", "at most 65536, got " + std::to_string(batch.destinations_size()));
  }
  for (int i = 0; i < batch.destinations_size(); ++i) {
    const size_t n = batch.destinations(i).size();
    if (n == 0 || n > kMaxShareNameBytes) {
      return bad("destinations[" + std::to_string(i) + "]",
                 "must be 1-256 bytes, got " + std::to_string(n));
    }
  }
  const auto count = static_cast<uint32_t>(batch.destinations_size());
  for (int i = 0; i < batch.placements_size(); ++i) {
    const v1::SharedPlacement& p = batch.placements(i);
    const std::string at = "placements[" + std::to_string(i) + "].";
    if (p.destination() >= count) {
      return bad(at + "destination", "must index destinations (" + std::to_string(count) +
                                         "), got " + std::to_string(p.destination()));
    }
    if (p.grid_hashes_size() > kMaxShareGridHashes) {
      return bad(at + "grid_hashes", "at most 64, got " + std::to_string(p.grid_hashes_size()));
    }
    if (p.first_grid() + static_cast<uint32_t>(p.grid_hashes_size()) > kMaxShareGrid) {
      return bad(at + "first_grid", "first_grid + grid_hashes must be <= 128, got " +
                                        std::to_string(p.first_grid()) + " + " +
                                        std::to_string(p.grid_hashes_size()));
    }
    if (!p.has_key() && p.grid_hashes_size() == 0) {
      return bad(at + "has_key", "a placement without a key must carry grid_hashes");
    }
  }
  for (int i = 0; i < batch.work_size(); ++i) {
    if (batch.work(i).destination() >= count) {
      return bad("work[" + std::to_string(i) + "].destination",
                 "must index destinations (" + std::to_string(count) + "), got " +
                     std::to_string(batch.work(i).destination()));
    }
  }
  return Status::Ok();
}

// A received batch over the receiver's indices.
struct ReceivedShare {
  PlacementBatch placements;
  // The sender's work per receiver index (size = the receiver's destination count) when the
  // batch carried work; none when it did not (the sender's previous work stands).
  std::optional<std::vector<DestinationWork>> work;
  uint64_t unknown_destinations = 0;  // placements and work entries left out
};

// Converts `batch` (checked by CheckShareBatch) at `now`; destinations not in `index_by_name`
// (name → index < destination_count) are left out and counted.
inline ReceivedShare FromShareBatch(const v1::ShareBatch& batch,
                                    const std::unordered_map<std::string, uint32_t>& index_by_name,
                                    uint32_t destination_count, Time now) {
  ReceivedShare out;
  std::vector<uint32_t> local(static_cast<size_t>(batch.destinations_size()), kNoDestination);
  for (int i = 0; i < batch.destinations_size(); ++i) {
    const auto it = index_by_name.find(batch.destinations(i));
    if (it != index_by_name.end() && it->second < destination_count) local[i] = it->second;
  }
  const auto held = std::chrono::milliseconds(batch.held_ms());
  std::vector<uint64_t> hashes;
  for (const v1::SharedPlacement& p : batch.placements()) {
    const uint32_t d = p.destination() < local.size() ? local[p.destination()] : kNoDestination;
    if (d == kNoDestination) {
      ++out.unknown_destinations;
      continue;
    }
    const Time sent =
        now - std::chrono::duration_cast<Duration>(std::chrono::milliseconds(p.age_ms()) + held);
    hashes.assign(p.grid_hashes().begin(), p.grid_hashes().end());
    out.placements.Add({.key_id = p.key_id(),
                        .destination = d,
                        .prompt_tokens = p.prompt_tokens(),
                        .sent = sent,
                        .key = p.has_key(),
                        .first_grid = p.first_grid()},
                       hashes);
  }
  if (batch.has_work()) {
    out.work.emplace(destination_count);
    for (const v1::DestinationWork& w : batch.work()) {
      const uint32_t d = w.destination() < local.size() ? local[w.destination()] : kNoDestination;
      if (d == kNoDestination) {
        ++out.unknown_destinations;
        continue;
      }
      (*out.work)[d] = {.queued_prefill_tokens = static_cast<double>(w.queued_prefill_tokens()),
                        .prefilling = static_cast<double>(w.prefilling()),
                        .decoding = static_cast<double>(w.decoding())};
    }
  }
  return out;
}

}  // namespace cacheroute::dataplane
