// TableStream: the server side of one gateway's TableService.StreamTable, as a pure state machine
// (no gRPC, no clock, no threads). The gRPC reactor feeds it the gateway's requests and every
// published snapshot, and writes out whatever TakeUpdate returns. Protocol: docs/protocol.md and
// table.proto.
//
// Invariants:
//   - nothing is sent before the gateway's first request, which must name it (gateway_id);
//   - the first update on a stream is a full table; later ones are deltas from the version the
//     gateway acknowledged on this stream, except after a NACKed delta (then a full table);
//   - at most one update is unacknowledged; while it is, only the latest published snapshot is
//     remembered, so a slow gateway skips intermediate versions instead of queueing them;
//   - a version is sent only if it is newer than the version the gateway has (acknowledged, or
//     declared in its first request) and than any full table it NACKed: never backwards, never a
//     version it has already, never a full table it rejected again;
//   - nonces are "<stream_id>-<n>" for n = 1, 2, …: distinct on the stream, no clock involved.
//
// Not thread-safe: the reactor serialises calls (e.g. under its own lock).
//
// Usage (inside the reactor, under its lock):
//   TableStream stream(absl::StrCat(peer, "#", ++streams));
//   stream.OnPublish(planner.latest());                     // and again on every publish
//   absl::Status s = stream.OnRequest(request);             // on every read
//   if (!s.ok()) Finish(ToGrpcStatus(s));
//   for (v1::TableUpdate& chunk : stream.TakeUpdate()) Write(chunk);  // after reads, publishes
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "cacheroute/v1/table.pb.h"
#include "proto/table/table_snapshot.h"

namespace cacheroute::table {

// gRPC's default receive limit (4 MiB) less headroom for framing.
inline constexpr size_t kDefaultMaxMessageBytes = (size_t{4} << 20) - (size_t{64} << 10);

// Longest gateway_id accepted (as for ReportRatesRequest.gateway_id).
inline constexpr size_t kMaxGatewayIdBytes = 128;

class TableStream {
 public:
  // `stream_id` prefixes the nonces, so it should be unique among the planner's streams; updates
  // are chunked to at most `max_message_bytes` per message.
  explicit TableStream(std::string stream_id, size_t max_message_bytes = kDefaultMaxMessageBytes);

  // Handles one request from the gateway. InvalidArgument, naming the field and value, if the
  // first request has no gateway_id (or one over 128 bytes), if a later request names another
  // gateway, or if an ACK's applied_version is not the version the acknowledged update carried;
  // the stream should then be closed. A request whose response_nonce is not the outstanding
  // update's (stale, unknown, or empty after the first request) is ignored.
  absl::Status OnRequest(const v1::StreamTableRequest& request);

  // Remembers `latest` as the snapshot to bring the gateway to. Null, or a version not newer than
  // the latest already given, is ignored.
  void OnPublish(std::shared_ptr<const TableSnapshot> latest);

  // The chunks of the update to send now, or nothing: something is sent only after the first
  // request, when no update is outstanding and the latest snapshot is newer than what the gateway
  // has (and than a full table it NACKed). The update then counts as outstanding.
  std::vector<v1::TableUpdate> TakeUpdate();

  const std::string& stream_id() const { return stream_id_; }
  // Empty until the first request.
  const std::string& gateway_id() const { return gateway_id_; }
  // The version the gateway has: the last it acknowledged on this stream, or else the one its
  // first request declared (zero: none).
  TableVersion acked_version() const { return acked_version_; }
  uint64_t nacks() const { return nacks_; }
  uint64_t updates_sent() const { return updates_sent_; }  // updates, not chunks
  bool awaiting_ack() const { return outstanding_.has_value(); }

 private:
  struct Outstanding {
    std::string nonce;
    std::shared_ptr<const TableSnapshot> snapshot;
    bool delta = false;
  };

  const std::string stream_id_;
  const size_t max_message_bytes_;
  std::string gateway_id_;
  bool opened_ = false;
  TableVersion acked_version_;
  // The snapshot the gateway acknowledged on this stream: the base of the next delta. Null until
  // then (a version declared in the first request has no snapshot here, so a full table follows).
  std::shared_ptr<const TableSnapshot> acked_;
  std::shared_ptr<const TableSnapshot> latest_;
  std::optional<Outstanding> outstanding_;
  // The newest full table the gateway NACKed: resending it would be rejected again.
  TableVersion rejected_version_;
  // Set by a NACKed delta, cleared by the next ACK: the gateway's table may not be the base we
  // believe, so only a full table is safe.
  bool full_required_ = false;
  uint64_t next_nonce_ = 1;
  uint64_t nacks_ = 0;
  uint64_t updates_sent_ = 0;
};

}  // namespace cacheroute::table
