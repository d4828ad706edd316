// Implementation of TableClientState. See table_client_state.h.
#include "proto/table/table_client_state.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace cacheroute::table {

TableClientState::TableClientState(std::string gateway_id,
                                   std::shared_ptr<const TableSnapshot> cached)
    : gateway_id_(std::move(gateway_id)), current_(std::move(cached)) {}

v1::StreamTableRequest TableClientState::OnConnect() {
  assembler_.Reset();
  v1::StreamTableRequest request;
  request.set_gateway_id(gateway_id_);
  *request.mutable_applied_version() = version().ToProto();
  return request;
}

absl::StatusOr<std::optional<v1::StreamTableRequest>> TableClientState::OnUpdate(
    const v1::TableUpdate& update) {
  if (update.nonce().empty()) {
    // Without a nonce there is nothing to answer; the server will not count this as an ACK.
    assembler_.Reset();
    return absl::InvalidArgumentError(absl::StrFormat(
        "nonce: empty (chunk_index %u); the update cannot be answered", update.chunk_index()));
  }
  v1::StreamTableRequest answer;
  answer.set_response_nonce(update.nonce());

  // A broken chunk sequence is NACKed rather than dropped: the server keeps one update
  // outstanding until it is answered, so staying silent would stall the stream.
  absl::StatusOr<std::optional<v1::TableUpdate>> whole = assembler_.Add(update);
  if (whole.ok() && !whole->has_value()) return std::optional<v1::StreamTableRequest>();
  absl::StatusOr<std::shared_ptr<const TableSnapshot>> table =
      whole.ok() ? Apply(**whole) : whole.status();
  if (table.ok() && acceptor_) {
    if (absl::Status accepted = acceptor_(**table); !accepted.ok()) table = accepted;
  }
  if (!table.ok()) {
    ++nacks_sent_;
    last_error_ = table.status();
    v1::ErrorDetail* error = answer.mutable_error();
    error->set_code(static_cast<int32_t>(table.status().code()));  // same values as google.rpc
    error->set_message(std::string(table.status().message()));
  } else {
    ++acks_sent_;
    current_ = *std::move(table);
  }
  *answer.mutable_applied_version() = version().ToProto();
  return std::optional<v1::StreamTableRequest>(std::move(answer));
}

absl::StatusOr<std::shared_ptr<const TableSnapshot>> TableClientState::Apply(
    const v1::TableUpdate& update) const {
  if (update.has_delta()) {
    if (current_ == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrFormat("delta.base: %s, but no table is applied yet",
                          TableVersion::FromProto(update.delta().base()).ToString()));
    }
    return ApplyDelta(*current_, update.delta());
  }
  absl::StatusOr<std::shared_ptr<const TableSnapshot>> table =
      TableSnapshot::FromProto(update.full());
  if (!table.ok()) {
    return absl::Status(table.status().code(), absl::StrCat("full.", table.status().message()));
  }
  const TableVersion version = (*table)->version();
  if (version.IsZero()) {
    return absl::InvalidArgumentError("full.version: 0.0 is the zero version, which means none");
  }
  // Equal is accepted: the same version is the same table; only going backwards is refused.
  if (version < this->version()) {
    return absl::InvalidArgumentError(
        absl::StrFormat("full.version: %s is older than the applied version %s", version.ToString(),
                        this->version().ToString()));
  }
  return table;
}

}  // namespace cacheroute::table
