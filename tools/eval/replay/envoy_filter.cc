// See envoy_filter.h.
#include "tools/eval/replay/envoy_filter.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace cacheroute::replay {
namespace {

namespace ext_proc = ::envoy::service::ext_proc::v3;

constexpr absl::string_view kEndpointHeader = "x-gateway-destination-endpoint";

// The streamed body an answer carries back, and whether it ends the body; false when the answer
// is not a body answer of that side.
bool StreamedBody(const ext_proc::ProcessingResponse& answer, bool request, size_t* bytes,
                  bool* end) {
  if (request ? !answer.has_request_body() : !answer.has_response_body()) return false;
  const ext_proc::BodyResponse& body = request ? answer.request_body() : answer.response_body();
  const ext_proc::StreamedBodyResponse& streamed =
      body.response().body_mutation().streamed_response();
  *bytes = streamed.body().size();
  *end = streamed.end_of_stream();
  return true;
}

}  // namespace

void EnvoyFilter::AddHeader(ext_proc::HttpHeaders& headers, absl::string_view key,
                            absl::string_view value) const {
  auto* h = headers.mutable_headers()->add_headers();
  h->set_key(std::string(key));
  if (field_ == HeaderField::kRawValue) {
    h->set_raw_value(std::string(value));
  } else {
    h->set_value(std::string(value));
  }
}

std::string EnvoyFilter::MutationValue(const envoy::config::core::v3::HeaderValue& header) const {
  return field_ == HeaderField::kRawValue ? header.raw_value() : header.value();
}

EnvoyFilter::EnvoyFilter(ext_proc::ExternalProcessor::Stub& stub, std::chrono::seconds deadline,
                         HeaderField field)
    : field_(field) {
  context_.set_deadline(std::chrono::system_clock::now() + deadline);
  stream_ = stub.Process(&context_);
}

EnvoyFilter::~EnvoyFilter() {
  if (!finished_) {
    context_.TryCancel();
    stream_->Finish();
  }
}

absl::StatusOr<std::string> EnvoyFilter::Route(const Headers& headers, absl::string_view body) {
  ext_proc::ProcessingRequest request;
  ext_proc::HttpHeaders& h = *request.mutable_request_headers();
  AddHeader(h, ":method", "POST");
  AddHeader(h, ":path", "/v1/completions");
  AddHeader(h, ":scheme", "http");
  AddHeader(h, "content-type", "application/json");
  for (const auto& [key, value] : headers) AddHeader(h, absl::AsciiStrToLower(key), value);
  ext_proc::ProtocolConfiguration& protocol = *request.mutable_protocol_config();
  protocol.set_request_body_mode(
      envoy::extensions::filters::http::ext_proc::v3::ProcessingMode::FULL_DUPLEX_STREAMED);
  protocol.set_response_body_mode(
      envoy::extensions::filters::http::ext_proc::v3::ProcessingMode::FULL_DUPLEX_STREAMED);
  if (!stream_->Write(request)) return absl::UnavailableError("ext_proc stream broke");
  request.Clear();
  request.mutable_request_body()->set_body(std::string(body));
  request.mutable_request_body()->set_end_of_stream(true);
  if (!stream_->Write(request)) return absl::UnavailableError("ext_proc stream broke");

  ext_proc::ProcessingResponse answer;
  if (!stream_->Read(&answer)) return absl::UnavailableError("ext_proc stream ended unanswered");
  if (answer.has_immediate_response()) {
    immediate_status_ = static_cast<int>(answer.immediate_response().status().code());
    return absl::FailedPreconditionError(absl::StrCat("the endpoint picker answered ",
                                                      immediate_status_, ": ",
                                                      answer.immediate_response().body()));
  }
  if (!answer.has_request_headers()) {
    return absl::InternalError("the endpoint picker's first answer is not request_headers");
  }
  std::string endpoint;
  for (const auto& set : answer.request_headers().response().header_mutation().set_headers()) {
    if (absl::AsciiStrToLower(set.header().key()) == kEndpointHeader) {
      endpoint = MutationValue(set.header());
    }
  }
  if (!ReadEcho(/*request=*/true, body.size(), /*end_of_stream=*/true)) {
    return absl::UnavailableError("ext_proc stream broke while the body came back");
  }
  if (endpoint.empty()) return absl::InternalError("the endpoint picker named no endpoint");
  return endpoint;
}

bool EnvoyFilter::ResponseHeaders(int status, Headers* added) {
  ext_proc::ProcessingRequest request;
  AddHeader(*request.mutable_response_headers(), ":status", absl::StrCat(status));
  AddHeader(*request.mutable_response_headers(), "content-type", "text/event-stream");
  if (!stream_->Write(request)) return false;
  ext_proc::ProcessingResponse answer;
  if (!stream_->Read(&answer) || !answer.has_response_headers()) return false;
  if (added != nullptr) {
    for (const auto& set : answer.response_headers().response().header_mutation().set_headers()) {
      added->emplace_back(absl::AsciiStrToLower(set.header().key()), MutationValue(set.header()));
    }
  }
  return true;
}

bool EnvoyFilter::ResponseBody(absl::string_view chunk, bool end_of_stream) {
  if (chunk.empty() && !end_of_stream) return true;
  ext_proc::ProcessingRequest request;
  request.mutable_response_body()->set_body(std::string(chunk));
  request.mutable_response_body()->set_end_of_stream(end_of_stream);
  if (!stream_->Write(request)) return false;
  return ReadEcho(/*request=*/false, chunk.size(), end_of_stream);
}

bool EnvoyFilter::ReadEcho(bool request, size_t bytes, bool end_of_stream) {
  size_t back = 0;
  bool ended = false;
  while (back < bytes || (end_of_stream && !ended)) {
    ext_proc::ProcessingResponse answer;
    if (!stream_->Read(&answer)) return false;
    size_t n = 0;
    bool end = false;
    if (!StreamedBody(answer, request, &n, &end)) return false;
    back += n;
    ended = ended || end;
  }
  return true;
}

grpc::Status EnvoyFilter::Finish() {
  finished_ = true;
  stream_->WritesDone();
  ext_proc::ProcessingResponse ignored;
  while (stream_->Read(&ignored)) {
  }
  return stream_->Finish();
}

}  // namespace cacheroute::replay
