// ShareService: the planner's gRPC edge of fleet sharing (proto/cacheroute/v1/share.proto). Each
// gateway or endpoint picker keeps one bidirectional Share stream open; every batch it sends is
// published to this process's ShareExchange (planner/share/share_exchange.h), and every batch the
// other gateways publish is written back to it, the recent past first. Without etcd the planner
// serves it; with etcd, only the leader (the planner's `serving` check: the others answer
// FAILED_PRECONDITION naming it, at the stream's start and at every batch), so that every gateway
// shares through one exchange.
//
// A stream's gateway is the first batch's gateway_id (then it subscribes); a later batch naming
// another, or a batch the exchange refuses, ends the stream with INVALID_ARGUMENT naming the
// field. Writes are driven by publishing: whenever a batch is published, every other stream that
// has no write outstanding takes its subscription's queue and writes it (one ShareUpdate per
// write, split below gRPC's default 4 MiB receive limit). A slow stream's backlog is bounded by the
// exchange's per-subscriber queue, which drops the oldest batches first.
//
// Usage (inside the planner's server):
//   ShareService share({}, clock, [&](grpc::CallbackServerContext* c) { return Auth(c); });
//   builder.RegisterService(&share);
//   …
//   share.Shutdown();  // ends every stream (UNAVAILABLE), then the server can stop at once
//
// Thread safety: the reactors run on gRPC's threads; Stats and Shutdown from any thread. Lock
// order: the service's streams mutex, then a stream's, then the exchange's.
#pragma once

#include <functional>
#include <set>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "base/clock.h"
#include "cacheroute/v1/share.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "planner/share/share_exchange.h"

namespace cacheroute::service {

class ShareService final : public v1::ShareService::CallbackService {
 public:
  // OK, or the status a stream is refused with (the bearer-token check).
  using Authorize = std::function<grpc::Status(grpc::CallbackServerContext*)>;

  // OK while this process serves sharing (checked at every batch read; null: always): a replica
  // that stops leading ends its streams with the status, so that they move to the leader.
  using Serving = std::function<grpc::Status()>;

  ShareService(const planner::ShareExchangeOptions& options, base::Clock& clock,
               Authorize authorize, Serving serving = nullptr);
  ~ShareService() override;

  grpc::ServerBidiReactor<v1::ShareRequest, v1::ShareUpdate>* Share(
      grpc::CallbackServerContext* context) override;

  // Ends every open stream with UNAVAILABLE and refuses new ones. Idempotent.
  void Shutdown();

  planner::ShareExchangeStats Stats() const { return exchange_.Stats(); }

 private:
  class Reactor;
  // Adds a subscribed stream to the fan-out; false after Shutdown.
  bool Register(Reactor* reactor);
  void Unregister(Reactor* reactor);
  // Lets every registered stream write what its subscription holds.
  void Deliver();

  planner::ShareExchange exchange_;
  const Authorize authorize_;
  const Serving serving_;
  absl::Mutex streams_mu_;
  std::set<Reactor*> streams_ ABSL_GUARDED_BY(streams_mu_);
  bool shut_down_ ABSL_GUARDED_BY(streams_mu_) = false;
};

}  // namespace cacheroute::service
