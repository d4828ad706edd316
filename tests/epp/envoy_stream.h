// Test-only: a client that plays Envoy's ext_proc filter over a real gRPC stream: one
// EnvoyStream per HTTP request, sending ProcessingRequests and reading the answers.
//
// Usage:
//   auto stub = ext_proc::ExternalProcessor::NewStub(channel);
//   EnvoyStream s(*stub);
//   s.Send(Headers()); s.Send(Body("{}", true));
//   ext_proc::ProcessingResponse answer = s.Read();
//   CHECK(s.Finish().ok());   // half-closes, reads what is left, returns the server's status
#pragma once

#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <optional>

#include "envoy/service/ext_proc/v3/external_processor.grpc.pb.h"
#include "tools/epp/ext_proc_stream.h"

namespace cacheroute::epp {

class EnvoyStream {
 public:
  explicit EnvoyStream(ext_proc::ExternalProcessor::Stub& stub,
                       std::chrono::seconds deadline = std::chrono::seconds(60)) {
    context_.set_deadline(std::chrono::system_clock::now() + deadline);
    stream_ = stub.Process(&context_);
  }
  // False once the stream is broken (the server ended it).
  bool Send(const ext_proc::ProcessingRequest& request) { return stream_->Write(request); }
  // The next answer; none when the server ended the stream.
  std::optional<ext_proc::ProcessingResponse> TryRead() {
    ext_proc::ProcessingResponse response;
    if (!stream_->Read(&response)) return std::nullopt;
    return response;
  }
  ext_proc::ProcessingResponse Read() {
    std::optional<ext_proc::ProcessingResponse> response = TryRead();
    REQUIRE(response.has_value());
    return *response;
  }
  // Half-closes, drops any answers left and returns how the server ended the stream.
  grpc::Status Finish() {
    stream_->WritesDone();
    while (TryRead().has_value()) {
    }
    return stream_->Finish();
  }
  // The data plane goes away mid-request (a client that hung up, a gateway that died).
  void Cancel() { context_.TryCancel(); }

 private:
  grpc::ClientContext context_;
  std::unique_ptr<
      grpc::ClientReaderWriter<ext_proc::ProcessingRequest, ext_proc::ProcessingResponse>>
      stream_;
};

}  // namespace cacheroute::epp
