// EnvoyFilter: one HTTP request's ext_proc exchange with an endpoint picker, played as Envoy's
// ext_proc filter plays it in the Gateway API Inference Extension's set-up: request and response
// bodies FULL_DUPLEX_STREAMED (announced in the first message's protocol_config), response headers
// sent. The request's headers and body go to the picker and its answer names the endpoint
// (x-gateway-destination-endpoint); then the response's headers and every body chunk go through
// the picker, and each counts as delivered only once the picker has answered it, as Envoy forwards
// what the processor sends back. cacheroute-replay --ext-proc uses it to put real endpoint pickers
// between the workload and the engines (docs/replay.md, "Through endpoint pickers").
//
// Usage (one per request, from one thread):
//   EnvoyFilter filter(stub, std::chrono::seconds(600));
//   absl::StatusOr<std::string> endpoint = filter.Route({{"x-cacheroute-key", "k"}}, body);
//   // … send the request to *endpoint …
//   filter.ResponseHeaders(200, &added);   // `added`: the headers the picker adds to the response
//   filter.ResponseBody(chunk, false);     // each chunk, then
//   filter.ResponseBody("", true);
//   filter.Finish();
//
// Header values travel as Envoy's runtime flag envoy.reloadable_features.send_header_raw_value
// puts them: in raw_value (on, Envoy's default) or in value (off); the filter reads the picker's
// header mutations from that field alone, as Envoy does (HeaderField).
//
// Route's errors: Unavailable when the stream broke; FailedPrecondition carrying the HTTP status
// the picker answered itself (an immediate response, e.g. 503 when no endpoint is up), available
// from ImmediateStatus(); Internal when the answer names no endpoint.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "envoy/service/ext_proc/v3/external_processor.grpc.pb.h"

namespace cacheroute::replay {

// Which field of Envoy's HeaderValue carries header values, both ways.
enum class HeaderField { kRawValue, kValue };

class EnvoyFilter {
 public:
  using Headers = std::vector<std::pair<std::string, std::string>>;

  EnvoyFilter(envoy::service::ext_proc::v3::ExternalProcessor::Stub& stub,
              std::chrono::seconds deadline, HeaderField field = HeaderField::kRawValue);
  ~EnvoyFilter();
  EnvoyFilter(const EnvoyFilter&) = delete;
  EnvoyFilter& operator=(const EnvoyFilter&) = delete;

  // Sends POST /v1/completions with `headers` (lower-case names) and `body`, and reads the
  // picker's answers up to the body's; the endpoint it named (HOST:PORT).
  absl::StatusOr<std::string> Route(const Headers& headers, absl::string_view body);
  // The HTTP status of the picker's immediate response, after Route failed with one; else 0.
  int ImmediateStatus() const { return immediate_status_; }

  // The response's status line; `added` receives the headers the picker's answer sets. False when
  // the stream broke.
  bool ResponseHeaders(int status, Headers* added);
  // One chunk of the response body (the last with end_of_stream); returns once the picker has sent
  // the chunk back. False when the stream broke.
  bool ResponseBody(absl::string_view chunk, bool end_of_stream);
  // Half-closes and returns how the picker ended the stream.
  grpc::Status Finish();

 private:
  // Reads answers for a body of `bytes` on the request (or response) side until all of it came
  // back, and its end when `end_of_stream`.
  bool ReadEcho(bool request, size_t bytes, bool end_of_stream);

  void AddHeader(envoy::service::ext_proc::v3::HttpHeaders& headers, absl::string_view key,
                 absl::string_view value) const;
  // A header mutation's value, from the field Envoy reads.
  std::string MutationValue(const envoy::config::core::v3::HeaderValue& header) const;

  const HeaderField field_;
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<envoy::service::ext_proc::v3::ProcessingRequest,
                                           envoy::service::ext_proc::v3::ProcessingResponse>>
      stream_;
  int immediate_status_ = 0;
  bool finished_ = false;
};

}  // namespace cacheroute::replay
