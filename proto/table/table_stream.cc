// Implementation of TableStream. See table_stream.h.
#include "proto/table/table_stream.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "proto/table/chunking.h"

namespace cacheroute::table {

TableStream::TableStream(std::string stream_id, size_t max_message_bytes)
    : stream_id_(std::move(stream_id)), max_message_bytes_(max_message_bytes) {}

absl::Status TableStream::OnRequest(const v1::StreamTableRequest& request) {
  if (!opened_) {
    if (request.gateway_id().empty()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("gateway_id: empty in the first request of stream %s", stream_id_));
    }
    if (request.gateway_id().size() > kMaxGatewayIdBytes) {
      return absl::InvalidArgumentError(
          absl::StrFormat("gateway_id: %u bytes, more than %u (stream %s)",
                          request.gateway_id().size(), kMaxGatewayIdBytes, stream_id_));
    }
    gateway_id_ = request.gateway_id();
    // A gateway that kept a table across the reconnect says which; anything not newer would be
    // refused by it, so that version is where sending starts.
    acked_version_ = TableVersion::FromProto(request.applied_version());
    opened_ = true;
    // Nothing was sent on this stream yet, so a response_nonce here can only be stale.
    return absl::OkStatus();
  }
  if (!request.gateway_id().empty() && request.gateway_id() != gateway_id_) {
    return absl::InvalidArgumentError(
        absl::StrFormat("gateway_id: \"%s\" on a stream opened by \"%s\" (stream %s)",
                        request.gateway_id(), gateway_id_, stream_id_));
  }
  if (!outstanding_ || request.response_nonce() != outstanding_->nonce) {
    return absl::OkStatus();  // stale or unknown nonce: answers an update that is superseded
  }

  if (request.has_error()) {
    // NACK: the gateway keeps its previous table. After a rejected delta its table may not be
    // the base we assumed, so the next update is a full table (possibly of the same version).
    // A rejected full table would be rejected again: wait for a newer version.
    ++nacks_;
    if (outstanding_->delta) {
      full_required_ = true;
    } else {
      rejected_version_ = std::max(rejected_version_, outstanding_->snapshot->version());
    }
    outstanding_.reset();
    return absl::OkStatus();
  }

  const TableVersion sent = outstanding_->snapshot->version();
  const TableVersion applied = TableVersion::FromProto(request.applied_version());
  if (applied != sent) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "applied_version: %s in the ACK of update %s, which carried version %s (gateway %s)",
        applied.ToString(), outstanding_->nonce, sent.ToString(), gateway_id_));
  }
  acked_ = std::move(outstanding_->snapshot);
  acked_version_ = sent;
  full_required_ = false;
  outstanding_.reset();
  return absl::OkStatus();
}

void TableStream::OnPublish(std::shared_ptr<const TableSnapshot> latest) {
  if (latest == nullptr) return;
  if (latest_ != nullptr && latest->version() <= latest_->version()) return;
  latest_ = std::move(latest);
}

std::vector<v1::TableUpdate> TableStream::TakeUpdate() {
  if (!opened_ || outstanding_ || latest_ == nullptr) return {};
  const TableVersion version = latest_->version();
  if (version <= acked_version_ || version <= rejected_version_) return {};

  v1::TableUpdate update;
  update.set_nonce(absl::StrCat(stream_id_, "-", next_nonce_++));
  const bool delta = acked_ != nullptr && !full_required_;
  if (delta) {
    *update.mutable_delta() = ComputeDelta(*acked_, *latest_);
  } else {
    *update.mutable_full() = latest_->ToProto();
  }
  outstanding_ = Outstanding{update.nonce(), latest_, delta};
  ++updates_sent_;
  return Chunk(std::move(update), max_message_bytes_);
}

}  // namespace cacheroute::table
