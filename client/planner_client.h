// PlannerClient: cacheroutectl's connection to a running planner (cacheroute-planner). It builds
// the gRPC channels from the global options (addresses, optional TLS root CA, optional bearer
// token), makes the unary calls with a deadline, and turns gRPC failures into absl::Status values
// whose codes give cacheroutectl's exit codes (command.h) and whose messages say what failed:
//   UNAVAILABLE, DEADLINE_EXCEEDED        → "planner HOST:PORT unavailable …" (exit 3)
//   UNAUTHENTICATED, PERMISSION_DENIED    → "planner HOST:PORT refused CALL …" (exit 4)
//   INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION → "CALL: <the planner's message>" (exit 2)
// Several replicas ("a:1,b:2", docs/ha.md): a unary call goes to the address that answered last
// (the first at start) and, on UNAVAILABLE or DEADLINE_EXCEEDED, to the next, each at most once;
// when none answers, the error joins every address's message with "; ". A call that timed out
// may have been applied by that replica too; the admin writes are idempotent and a report's
// (gateway, sequence) is applied once. Streams use the current address.
//
// Usage:
//   absl::StatusOr<std::unique_ptr<PlannerClient>> client = PlannerClient::Connect(options);
//   if (!client.ok()) return client.status();
//   absl::StatusOr<v1::GetStatusResponse> status = (*client)->GetStatus();
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cacheroute/v1/admin.grpc.pb.h"
#include "cacheroute/v1/rates.grpc.pb.h"
#include "cacheroute/v1/table.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace cacheroute::client {

struct PlannerOptions {
  std::string address = "127.0.0.1:50051";   // HOST:PORT[,HOST:PORT…]
  std::string token;                         // sent as "authorization: Bearer <token>" if set
  std::string tls_ca_file;                   // PEM root CA; TLS is on when set
  std::chrono::milliseconds deadline{5000};  // per unary call
};

class PlannerClient {
 public:
  // Reads the CA file if any (InvalidArgument naming --tls-ca if it cannot be read); an empty
  // address list or an empty item is InvalidArgument naming --planner. Does not connect: the
  // first call does.
  static absl::StatusOr<std::unique_ptr<PlannerClient>> Connect(const PlannerOptions& options);

  absl::StatusOr<v1::GetStatusResponse> GetStatus();
  absl::StatusOr<v1::RoutingTable> GetTable(const v1::Version& version);  // zero: the latest
  absl::StatusOr<v1::ExplainResponse> Explain(const v1::ExplainRequest& request);
  absl::StatusOr<v1::DiffResponse> Diff(const v1::DiffRequest& request);
  absl::StatusOr<v1::ReplanResponse> Replan();
  absl::StatusOr<v1::SetDestinationsResponse> SetDestinations(
      const v1::SetDestinationsRequest& request);
  absl::StatusOr<v1::DrainResponse> Drain(const v1::DrainRequest& request);
  absl::StatusOr<v1::GateStatus> ForceGate(const v1::ForceGateRequest& request);
  absl::StatusOr<v1::ReportRatesResponse> ReportRates(const v1::ReportRatesRequest& request);

  // For streams: adds the token to `context`, sets no deadline.
  void PrepareStreamContext(grpc::ClientContext* context) const;
  v1::TableService::Stub& tables() { return *replicas_[current_].tables; }

  // `status` of the call named `call` to the current address as an absl::Status (see above).
  absl::Status ToStatus(absl::string_view call, const grpc::Status& status) const;

  // The current address: the one that answered last, else the first.
  const std::string& address() const { return replicas_[current_].address; }
  size_t address_count() const { return replicas_.size(); }

 private:
  struct Replica {
    std::string address;
    std::shared_ptr<grpc::Channel> channel;
    std::unique_ptr<v1::RateService::Stub> rates;
    std::unique_ptr<v1::TableService::Stub> tables;
    std::unique_ptr<v1::AdminService::Stub> admin;
  };
  explicit PlannerClient(PlannerOptions options, std::vector<Replica> replicas);

  absl::Status ToStatusFor(const std::string& address, absl::string_view call,
                           const grpc::Status& status) const;
  template <typename Response, typename Invoke>
  absl::StatusOr<Response> Unary(absl::string_view call, Invoke invoke);

  const PlannerOptions options_;
  std::vector<Replica> replicas_;  // at least one
  size_t current_ = 0;
};

}  // namespace cacheroute::client
