// Implementation of Chunk and ChunkAssembler. See chunking.h.
//
// Chunk packs greedily from computed sizes instead of serialising trial chunks: each item's
// serialised size is known (ByteSizeLong plus its tag and length prefix), removed ids are one
// packed fixed64 field, and everything outside the body (nonce, the body's tag and length,
// chunk_index, chunk_count) is bounded from above. So the whole split costs one size pass.
#include "proto/table/chunking.h"

#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/io/coded_stream.h"

namespace cacheroute::table {
namespace {

using ::google::protobuf::io::CodedOutputStream;

// Fields 1..15 have one-byte tags.
size_t LengthDelimitedSize(size_t payload) {
  return 1 + CodedOutputStream::VarintSize64(payload) + payload;
}

size_t PackedFixed64Size(size_t n) { return n == 0 ? 0 : LengthDelimitedSize(8 * n); }

const char* BodyName(v1::TableUpdate::BodyCase body) {
  return body == v1::TableUpdate::kFull ? "full" : "delta";
}

// The first of the header fields RoutingTable and TableDelta share that is set, or nullptr.
template <class Body>
const char* SetSharedHeaderField(const Body& body) {
  if (body.has_version()) return "version";
  if (!body.destinations().empty()) return "destinations";
  if (!body.expected_loads().empty()) return "expected_loads";
  if (body.built_unix_ms() != 0) return "built_unix_ms";
  if (body.ttl_seconds() != 0) return "ttl_seconds";
  if (body.has_rollout()) return "rollout";
  return nullptr;
}

// The first header field set in a non-first chunk ("full.version"), or "" if none is.
std::string SetHeaderField(const v1::TableUpdate& chunk) {
  const char* field = nullptr;
  if (chunk.has_full()) {
    field = SetSharedHeaderField(chunk.full());
  } else {
    field = chunk.delta().has_base() ? "base" : SetSharedHeaderField(chunk.delta());
  }
  return field == nullptr ? "" : absl::StrCat(BodyName(chunk.body_case()), ".", field);
}

}  // namespace

std::vector<v1::TableUpdate> Chunk(v1::TableUpdate update, size_t max_bytes) {
  update.set_chunk_index(0);
  update.set_chunk_count(1);
  std::vector<v1::TableUpdate> chunks;
  if (update.body_case() == v1::TableUpdate::BODY_NOT_SET || update.ByteSizeLong() <= max_bytes) {
    chunks.push_back(std::move(update));
    return chunks;
  }

  const bool full = update.has_full();
  google::protobuf::RepeatedPtrField<v1::Assignment> items;
  google::protobuf::RepeatedField<uint64_t> removed;
  if (full) {
    items.Swap(update.mutable_full()->mutable_assignments());
  } else {
    items.Swap(update.mutable_delta()->mutable_upserts());
    removed.Swap(update.mutable_delta()->mutable_removed_key_ids());
  }
  const size_t header_bytes = full ? update.full().ByteSizeLong() : update.delta().ByteSizeLong();
  const std::string nonce = update.nonce();
  // Bytes outside the body: nonce, the body's tag and length, and chunk_index and chunk_count
  // (each at most a tag and a 5-byte varint).
  const size_t outside = (nonce.empty() ? 0 : LengthDelimitedSize(nonce.size())) + 1 +
                         CodedOutputStream::VarintSize64(max_bytes) + 2 * (1 + 5);
  const size_t budget = max_bytes > outside ? max_bytes - outside : 0;

  chunks.push_back(std::move(update));
  size_t item_bytes = header_bytes;  // the current chunk's body, packed removed ids excepted
  size_t removed_count = 0;          // removed ids in the current chunk
  bool has_items = false;
  // Whether to close the current chunk before adding an item that would make its body `bytes`
  // long. An item too big for any chunk still goes alone into one: it cannot be split.
  auto should_close = [&](size_t bytes) {
    return bytes > budget && (has_items || chunks.size() == 1);
  };
  auto open_chunk = [&] {
    v1::TableUpdate& next = chunks.emplace_back();
    if (full) {
      next.mutable_full();
    } else {
      next.mutable_delta();
    }
    item_bytes = 0;
    removed_count = 0;
    has_items = false;
  };

  for (int i = 0; i < items.size(); ++i) {
    const size_t size = LengthDelimitedSize(items.Get(i).ByteSizeLong());
    if (should_close(item_bytes + size)) open_chunk();
    v1::TableUpdate& chunk = chunks.back();
    v1::Assignment* slot =
        full ? chunk.mutable_full()->add_assignments() : chunk.mutable_delta()->add_upserts();
    *slot = std::move(*items.Mutable(i));
    item_bytes += size;
    has_items = true;
  }
  for (uint64_t key_id : removed) {
    if (should_close(item_bytes + PackedFixed64Size(removed_count + 1))) open_chunk();
    chunks.back().mutable_delta()->add_removed_key_ids(key_id);
    ++removed_count;
    has_items = true;
  }

  const uint32_t count = static_cast<uint32_t>(chunks.size());
  for (uint32_t i = 0; i < count; ++i) {
    chunks[i].set_nonce(nonce);
    chunks[i].set_chunk_index(i);
    chunks[i].set_chunk_count(count);
  }
  return chunks;
}

absl::StatusOr<std::optional<v1::TableUpdate>> ChunkAssembler::Add(v1::TableUpdate chunk) {
  auto fail = [this](std::string message) {
    Reset();
    return absl::InvalidArgumentError(std::move(message));
  };
  if (chunk.body_case() == v1::TableUpdate::BODY_NOT_SET) {
    return fail(absl::StrFormat("body: neither full nor delta (nonce \"%s\", chunk_index %u)",
                                chunk.nonce(), chunk.chunk_index()));
  }
  if (chunk.chunk_count() == 0) {
    return fail(
        absl::StrFormat("chunk_count: 0 (nonce \"%s\"); must be at least 1", chunk.nonce()));
  }
  if (chunk.chunk_index() >= chunk.chunk_count()) {
    return fail(absl::StrFormat("chunk_index: %u is not below chunk_count %u (nonce \"%s\")",
                                chunk.chunk_index(), chunk.chunk_count(), chunk.nonce()));
  }
  if (!pending_) {
    if (chunk.chunk_index() != 0) {
      return fail(absl::StrFormat(
          "chunk_index: %u (nonce \"%s\") but no update is in progress; expected chunk 0",
          chunk.chunk_index(), chunk.nonce()));
    }
    if (chunk.chunk_count() == 1) return std::optional<v1::TableUpdate>(std::move(chunk));
    pending_ = std::move(chunk);
    next_index_ = 1;
    return std::optional<v1::TableUpdate>();
  }

  const v1::TableUpdate& p = *pending_;
  if (chunk.nonce() != p.nonce()) {
    return fail(absl::StrFormat("nonce: \"%s\" in the middle of update \"%s\" (chunk %u of %u due)",
                                chunk.nonce(), p.nonce(), next_index_, p.chunk_count()));
  }
  if (chunk.chunk_count() != p.chunk_count()) {
    return fail(absl::StrFormat("chunk_count: %u, but update \"%s\" started with %u",
                                chunk.chunk_count(), p.nonce(), p.chunk_count()));
  }
  if (chunk.chunk_index() != next_index_) {
    return fail(absl::StrFormat("chunk_index: %u, expected %u (update \"%s\")", chunk.chunk_index(),
                                next_index_, p.nonce()));
  }
  if (chunk.body_case() != p.body_case()) {
    return fail(absl::StrFormat("body: a %s chunk in a %s update (\"%s\", chunk %u)",
                                BodyName(chunk.body_case()), BodyName(p.body_case()), p.nonce(),
                                next_index_));
  }
  if (std::string field = SetHeaderField(chunk); !field.empty()) {
    return fail(absl::StrFormat("%s: set in chunk %u of update \"%s\"; only chunk 0 carries it",
                                field, next_index_, p.nonce()));
  }

  if (chunk.has_full()) {
    auto* to = pending_->mutable_full()->mutable_assignments();
    for (v1::Assignment& a : *chunk.mutable_full()->mutable_assignments()) {
      *to->Add() = std::move(a);
    }
  } else {
    v1::TableDelta* to = pending_->mutable_delta();
    for (v1::Assignment& a : *chunk.mutable_delta()->mutable_upserts()) {
      *to->add_upserts() = std::move(a);
    }
    to->mutable_removed_key_ids()->Add(chunk.delta().removed_key_ids().begin(),
                                       chunk.delta().removed_key_ids().end());
  }
  if (++next_index_ < p.chunk_count()) return std::optional<v1::TableUpdate>();
  v1::TableUpdate whole = std::move(*pending_);
  Reset();
  whole.set_chunk_index(0);
  whole.set_chunk_count(1);
  return std::optional<v1::TableUpdate>(std::move(whole));
}

void ChunkAssembler::Reset() {
  pending_.reset();
  next_index_ = 0;
}

}  // namespace cacheroute::table
