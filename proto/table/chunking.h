// Chunking: splitting a TableUpdate that exceeds the gRPC message limit into several chunks, and
// putting them back together on the gateway (table.proto, TableUpdate; docs/protocol.md).
//
// Invariants of Chunk's output: every chunk has the update's nonce, chunk_index 0, 1, …, and the
// same chunk_count; chunk 0 carries every header field (version, base, destinations, loads, built
// time, TTL) and later chunks only more assignments (full) or upserts and removed ids (delta), in
// the original order; each chunk serialises to at most max_bytes, except when a single item (or
// chunk 0's header with no item) is larger than max_bytes on its own: that item then gets a chunk
// of its own, which is larger. Reassembling the chunks gives back the update, with chunk_index 0
// and chunk_count 1.
//
// Usage (server):
//   for (v1::TableUpdate& chunk : Chunk(std::move(update), kMaxMessageBytes)) Write(chunk);
// Usage (gateway):
//   ChunkAssembler assembler;
//   absl::StatusOr<std::optional<v1::TableUpdate>> whole = assembler.Add(std::move(chunk));
//   if (!whole.ok()) Nack(...); else if (*whole) Apply(**whole);  // nullopt: more chunks to come
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "cacheroute/v1/table.pb.h"

namespace cacheroute::table {

// Splits `update` into chunks of at most `max_bytes` serialised bytes each (see above). An update
// that fits is returned alone, with chunk_index 0 and chunk_count 1.
std::vector<v1::TableUpdate> Chunk(v1::TableUpdate update, size_t max_bytes);

// Reassembles the chunks of one update at a time, as they arrive in order on a stream. Not
// thread-safe. After an error the partial update is dropped and the next chunk must be a chunk 0.
class ChunkAssembler {
 public:
  // Returns the whole update once its last chunk arrived, nullopt while chunks are missing, and
  // InvalidArgument, naming the field and value, for: no body, chunk_count 0, chunk_index not the
  // next expected one (or not below chunk_count), a nonce, chunk_count or body kind that changes
  // in the middle of an update, or header fields repeated in a later chunk.
  absl::StatusOr<std::optional<v1::TableUpdate>> Add(v1::TableUpdate chunk);

  // Drops a partial update (e.g. when the stream reconnects: nonces do not survive it).
  void Reset();
  bool in_progress() const { return pending_.has_value(); }

 private:
  std::optional<v1::TableUpdate> pending_;
  uint32_t next_index_ = 0;
};

}  // namespace cacheroute::table
