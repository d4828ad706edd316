// Test-only: grpc.health.v1.Health/Check as a client calls it, with the two small messages
// encoded by hand (HealthCheckRequest{service = 1}, HealthCheckResponse{status = 1}), since Debian
// ships gRPC's health service but not its .proto for clients.
//
// Usage:
//   HealthCheck check = CheckHealth(channel, "readiness");
//   REQUIRE(check.status.ok()); CHECK(check.serving == kServing);
#pragma once

#include <grpcpp/grpcpp.h>
#include <grpcpp/impl/client_unary_call.h>
#include <grpcpp/impl/rpc_method.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/proto_wire.h"

namespace cacheroute::testing {

// HealthCheckResponse.ServingStatus.
inline constexpr int kUnknown = 0;
inline constexpr int kServing = 1;
inline constexpr int kNotServing = 2;

struct HealthCheck {
  grpc::Status status;
  int serving = kUnknown;
};

inline HealthCheck CheckHealth(const std::shared_ptr<grpc::Channel>& channel,
                               const std::string& service) {
  const std::string request = WireWriter().Bytes(1, service).str();
  grpc::Slice slice(request);
  grpc::ByteBuffer in(&slice, 1);
  grpc::ByteBuffer out;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  const grpc::internal::RpcMethod method("/grpc.health.v1.Health/Check",
                                         grpc::internal::RpcMethod::NORMAL_RPC);
  HealthCheck check;
  check.status = grpc::internal::BlockingUnaryCall(channel.get(), method, &context, in, &out);
  if (!check.status.ok()) return check;
  std::vector<grpc::Slice> slices;
  REQUIRE(out.Dump(&slices).ok());
  std::string bytes;
  for (const grpc::Slice& s : slices) {
    bytes.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  for (const WireField& f : ReadWire(bytes)) {
    if (f.number == 1) check.serving = static_cast<int>(f.value);
  }
  return check;
}

}  // namespace cacheroute::testing
