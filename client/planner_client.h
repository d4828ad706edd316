// PlannerClient: cacheroutectl's connection to a running planner (cacheroute-planner). It builds
// the gRPC channel from the global options (address, optional TLS root CA, optional bearer
// token), makes the unary calls with a deadline, and turns gRPC failures into absl::Status values
// whose codes give cacheroutectl's exit codes (command.h) and whose messages say what failed:
//   UNAVAILABLE, DEADLINE_EXCEEDED        → "planner HOST:PORT unavailable …" (exit 3)
//   UNAUTHENTICATED, PERMISSION_DENIED    → "planner HOST:PORT refused CALL …" (exit 4)
//   INVALID_ARGUMENT, NOT_FOUND, FAILED_PRECONDITION → "CALL: <the planner's message>" (exit 2)
//
// Usage:
//   absl::StatusOr<std::unique_ptr<PlannerClient>> client = PlannerClient::Connect(options);
//   if (!client.ok()) return client.status();
//   absl::StatusOr<v1::GetStatusResponse> status = (*client)->GetStatus();
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cacheroute/v1/admin.grpc.pb.h"
#include "cacheroute/v1/rates.grpc.pb.h"
#include "cacheroute/v1/table.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace cacheroute::client {

struct PlannerOptions {
  std::string address = "127.0.0.1:50051";   // HOST:PORT
  std::string token;                         // sent as "authorization: Bearer <token>" if set
  std::string tls_ca_file;                   // PEM root CA; TLS is on when set
  std::chrono::milliseconds deadline{5000};  // per unary call
};

class PlannerClient {
 public:
  // Reads the CA file if any (InvalidArgument naming --tls-ca if it cannot be read); does not
  // connect: the first call does.
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
  v1::TableService::Stub& tables() { return *tables_; }

  // `status` of the call named `call` as an absl::Status (see the header comment).
  absl::Status ToStatus(absl::string_view call, const grpc::Status& status) const;

  const std::string& address() const { return options_.address; }

 private:
  explicit PlannerClient(PlannerOptions options, std::shared_ptr<grpc::Channel> channel);

  template <typename Response, typename Invoke>
  absl::StatusOr<Response> Unary(absl::string_view call, Invoke invoke);

  const PlannerOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::RateService::Stub> rates_;
  std::unique_ptr<v1::TableService::Stub> tables_;
  std::unique_ptr<v1::AdminService::Stub> admin_;
};

}  // namespace cacheroute::client
