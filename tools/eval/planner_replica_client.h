// PlannerReplicaClient: what the tools and tests that run planner replicas as processes ask one of
// them over gRPC (the HA test, cacheroute-ha-bench): its status (role, served version), Replan,
// ForceGate and ReportRates. Each call has a deadline (2 s for status, 10 s for the others) and
// returns the gRPC status or nullopt; nothing throws. Connect once the replica's port is known
// (again after a restart on a new port).
//
// Usage:
//   class Replica : public eval::PlannerReplicaClient { ... Connect("127.0.0.1:" + port) ... };
//   if (replica.IsLeader() && replica.Version() > before) ...;
//   v1::ReplanResponse replanned;
//   grpc::Status s = replica.Replan(&replanned);
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "cacheroute/v1/admin.grpc.pb.h"
#include "cacheroute/v1/rates.grpc.pb.h"

namespace cacheroute::eval {

class PlannerReplicaClient {
 public:
  // A plaintext channel to HOST:PORT.
  void Connect(const std::string& address) {
    address_ = address;
    channel_ = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
    admin_ = v1::AdminService::NewStub(channel_);
    rates_ = v1::RateService::NewStub(channel_);
  }

  const std::string& address() const { return address_; }
  std::shared_ptr<grpc::Channel> channel() const { return channel_; }

  // GetStatus, or nullopt when the replica does not answer.
  std::optional<v1::GetStatusResponse> Status() const {
    grpc::ClientContext context;
    SetDeadline(context, std::chrono::seconds(2));
    v1::GetStatusResponse response;
    if (!admin_->GetStatus(&context, {}, &response).ok()) return std::nullopt;
    return response;
  }
  bool IsLeader() const {
    const std::optional<v1::GetStatusResponse> status = Status();
    return status && status->ha().role() == "leader";
  }
  // The number of the version it serves; 0 without a table or an answer.
  uint64_t Version() const {
    const std::optional<v1::GetStatusResponse> status = Status();
    return status ? status->version().number() : 0;
  }

  grpc::Status Replan(v1::ReplanResponse* response) const {
    grpc::ClientContext context;
    SetDeadline(context, kCallDeadline);
    return admin_->Replan(&context, {}, response);
  }
  grpc::Status ForceGate(const std::string& state, const std::string& why,
                         v1::GateStatus* response) const {
    grpc::ClientContext context;
    SetDeadline(context, kCallDeadline);
    v1::ForceGateRequest request;
    request.set_state(state);
    request.set_why(why);
    return admin_->ForceGate(&context, request, response);
  }
  grpc::Status Report(const v1::ReportRatesRequest& request) const {
    grpc::ClientContext context;
    SetDeadline(context, kCallDeadline);
    v1::ReportRatesResponse response;
    return rates_->ReportRates(&context, request, &response);
  }

 private:
  static constexpr std::chrono::seconds kCallDeadline{10};
  static void SetDeadline(grpc::ClientContext& context, std::chrono::seconds deadline) {
    context.set_deadline(std::chrono::system_clock::now() + deadline);
  }

  std::string address_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::AdminService::Stub> admin_;
  std::unique_ptr<v1::RateService::Stub> rates_;
};

}  // namespace cacheroute::eval
