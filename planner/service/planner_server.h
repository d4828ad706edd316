// PlannerServer: the gRPC edge of the planner. It serves RateService, TableService (the
// bidirectional table stream of docs/protocol.md, driven by table::TableStream) and AdminService
// over a PlannerCore, ShareService (fleet sharing between gateways, share_service.h), plus
// grpc.health.v1 and server reflection; enforces the optional bearer token; and runs the
// control-interval ticker. Everything protocol-specific lives in the pure pieces (RateAggregator,
// TableStream, PlannerCore); this file only maps between gRPC and them.
//
// Usage:
//   absl::StatusOr<std::unique_ptr<PlannerServer>> server = PlannerServer::Start(config, &clock);
//   std::cout << "listening on port " << (*server)->port();
//   (*server)->Wait();   // until Shutdown() from another thread or a signal handler
#pragma once

#include <memory>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/notification.h"
#include "base/clock.h"
#include "grpcpp/server.h"
#include "planner/service/config.h"
#include "planner/service/metrics.h"
#include "planner/service/planner_core.h"
#include "planner/service/share_service.h"

namespace cacheroute::service {

class PlannerServices;
class HaReplica;

class PlannerServer {
 public:
  // Restores the state directory, binds `config.listen` (port 0 picks a free port) and starts
  // serving. With `run_ticker`, plans every config.control_interval of real time; tests pass
  // false and plan through AdminService.Replan. With config.etcd.enabled it runs as one of
  // several replicas (HaReplica): only the leader plans; admin writes on a follower are
  // forwarded to the leader; reports are replicated through etcd.
  static absl::StatusOr<std::unique_ptr<PlannerServer>> Start(const PlannerConfig& config,
                                                              base::Clock* clock,
                                                              bool run_ticker = true);
  ~PlannerServer();

  int port() const { return port_; }
  // The /metrics and /healthz HTTP port; 0 when metrics_listen is empty.
  int metrics_port() const { return metrics_ ? metrics_->port() : 0; }
  PlannerCore& core() { return *core_; }
  ShareService& share() { return *share_; }
  // With an etcd section: this replica's place among the replicas (docs/ha.md); else null.
  HaReplica* ha() { return ha_.get(); }
  // Stops accepting calls, ends streams, stops the ticker; a replica first resigns its
  // leadership so that another takes over at once. Idempotent.
  void Shutdown();
  // Blocks until Shutdown has been called.
  void Wait();

 private:
  PlannerServer() = default;

  std::unique_ptr<PlannerCore> core_;
  std::unique_ptr<PlannerServices> services_;
  std::unique_ptr<ShareService> share_;
  std::unique_ptr<HaReplica> ha_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<MetricsServer> metrics_;
  int port_ = 0;
  absl::Notification shutdown_;
  std::thread ticker_;
  absl::Mutex shutdown_mu_;
  bool shut_down_ ABSL_GUARDED_BY(shutdown_mu_) = false;
};

}  // namespace cacheroute::service
