// TableStream: one client of TableService.StreamTable for the benchmarks, a gRPC callback
// reactor that applies every update with table::TableClientState, ACKs it and reports each
// applied version (number) to a callback, on gRPC's thread. Only the latest ACK is kept while a
// write is in flight. Cancel() ends the stream; AwaitDone() waits until gRPC has finished it.
//
// Usage:
//   auto stream = std::make_unique<TableStream>(stub.get(), "gw-7",
//                                               [&](uint64_t version) { applied(version); });
//   ...
//   stream->Cancel();
//   stream->AwaitDone();
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "cacheroute/v1/table.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "proto/table/table_client_state.h"

namespace cacheroute::bench {

class TableStream final : public grpc::ClientBidiReactor<cacheroute::v1::StreamTableRequest, cacheroute::v1::TableUpdate> {
 public:
  TableStream(cacheroute::v1::TableService::Stub* stub, std::string gateway_id,
             std::function<void(uint64_t)> on_version)
      : state_(std::move(gateway_id)), on_version_(std::move(on_version)) {
    stub->async()->StreamTable(&context_, this);
    first_ = state_.OnConnect();
    writing_ = true;
    StartWrite(&first_);
    StartRead(&update_);
    StartCall();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;
    absl::StatusOr<std::optional<cacheroute::v1::StreamTableRequest>> answer = state_.OnUpdate(update_);
    if (answer.ok() && answer->has_value()) {
      const uint64_t version = state_.version().number;
      std::lock_guard<std::mutex> lock(mu_);
      if (writing_) {
        pending_ = **answer;  // only the latest answer matters
      } else {
        current_ = **answer;
        writing_ = true;
        StartWrite(&current_);
      }
      on_version_(version);
    }
    StartRead(&update_);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    if (ok && pending_.has_value()) {
      current_ = *std::move(pending_);
      pending_.reset();
      writing_ = true;
      StartWrite(&current_);
    }
  }

  void OnDone(const grpc::Status&) override {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    done_cv_.notify_all();
  }

  void Cancel() { context_.TryCancel(); }
  void AwaitDone() {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return done_; });
  }

 private:
  grpc::ClientContext context_;
  table::TableClientState state_;
  std::function<void(uint64_t)> on_version_;
  cacheroute::v1::StreamTableRequest first_;
  cacheroute::v1::TableUpdate update_;
  std::mutex mu_;
  cacheroute::v1::StreamTableRequest current_;
  std::optional<cacheroute::v1::StreamTableRequest> pending_;
  bool writing_ = false;
  bool done_ = false;
  std::condition_variable done_cv_;
};

}  // namespace cacheroute::bench
