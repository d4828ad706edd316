// TableClientState: the gateway side of TableService.StreamTable as a pure state machine (no
// gRPC, no clock): it reassembles chunks, applies full tables and deltas with validation, keeps
// the last good table, and says what to answer (ACK or NACK). Used by tests against TableStream
// and by the dataplane's table subscriber, which owns the stream and publishes current().
//
// Invariants: current() only ever moves to a valid table with a version at least as new (a full
// table older than current(), or with the zero version, is NACKed; a delta applies only on top of
// exactly its base); a rejected update leaves current() unchanged, so a gateway keeps routing on
// its last good table (docs/protocol.md, "Tables"). Not thread-safe.
//
// Usage:
//   TableClientState state("gw-7", /*cached=*/LoadFromDisk());
//   stream->Write(state.OnConnect());                       // on every (re)connect
//   while (stream->Read(&update)) {
//     absl::StatusOr<std::optional<v1::StreamTableRequest>> answer = state.OnUpdate(update);
//     if (!answer.ok()) { Log(answer.status()); continue; }  // nothing to answer
//     if (*answer) stream->Write(**answer);                  // nullopt: more chunks to come
//     router.Publish(state.current());
//   }
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "cacheroute/v1/table.pb.h"
#include "proto/table/chunking.h"
#include "proto/table/table_snapshot.h"

namespace cacheroute::table {

class TableClientState {
 public:
  // `cached` (may be null) is a table kept from an earlier stream, e.g. loaded from disk.
  explicit TableClientState(std::string gateway_id,
                            std::shared_ptr<const TableSnapshot> cached = nullptr);

  // The first request of a (new) stream: the gateway id and the version applied. Drops any
  // partly received update, since nonces do not survive a reconnect.
  v1::StreamTableRequest OnConnect();

  // An extra check run on every table that passed validation, just before it would become
  // current(): an error NACKs it (with that error) and keeps the last good table. The dataplane's
  // subscriber uses it to install the table in its Router, so a table the gateway cannot route by
  // (e.g. naming a destination it does not know) is refused on the wire, not silently ignored.
  using Acceptor = std::function<absl::Status(const TableSnapshot&)>;
  void SetAcceptor(Acceptor acceptor) { acceptor_ = std::move(acceptor); }

  // Takes one received chunk. Returns nullopt while chunks are missing, else the request to send:
  // an ACK (response_nonce, applied_version = the new version) or a NACK (response_nonce,
  // applied_version = the version kept, error = the reason: code and message of the failed
  // validation). InvalidArgument only when there is no nonce to answer.
  absl::StatusOr<std::optional<v1::StreamTableRequest>> OnUpdate(const v1::TableUpdate& update);

  // The table in force, or null before the first one.
  std::shared_ptr<const TableSnapshot> current() const { return current_; }
  TableVersion version() const { return current_ ? current_->version() : TableVersion{}; }
  uint64_t acks_sent() const { return acks_sent_; }
  uint64_t nacks_sent() const { return nacks_sent_; }
  // The error of the last NACK sent (OK if none yet).
  const absl::Status& last_error() const { return last_error_; }

 private:
  // Validates and applies a whole update; the new table, or why not.
  absl::StatusOr<std::shared_ptr<const TableSnapshot>> Apply(const v1::TableUpdate& update) const;

  std::string gateway_id_;
  std::shared_ptr<const TableSnapshot> current_;
  ChunkAssembler assembler_;
  Acceptor acceptor_;
  uint64_t acks_sent_ = 0;
  uint64_t nacks_sent_ = 0;
  absl::Status last_error_;
};

}  // namespace cacheroute::table
