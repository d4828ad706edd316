// See ext_proc_stream.h.
#include "tools/epp/ext_proc_stream.h"

#include <algorithm>

#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/util/json_util.h"
#include "tools/frontend/openai_fields.h"  // ErrorBody

namespace cacheroute::epp {
namespace {

using ::envoy::config::core::v3::HeaderMap;
using ::envoy::config::core::v3::HeaderValueOption;
using Mode = ::envoy::extensions::filters::http::ext_proc::v3::ProcessingMode;

absl::string_view ModeName(BodySendMode mode) {
  return Mode::BodySendMode_IsValid(mode) ? absl::string_view(Mode::BodySendMode_Name(mode))
                                          : absl::string_view("(unknown)");
}

bool FullDuplex(BodySendMode mode) { return mode == Mode::FULL_DUPLEX_STREAMED; }
bool Buffered(BodySendMode mode) {
  return mode == Mode::BUFFERED || mode == Mode::BUFFERED_PARTIAL;
}

// The headers of `map` (`where` names it in errors): values from raw_value, else value.
// *raw (when given): whether the data plane encodes values in raw_value, which is Envoy's default
// (envoy.reloadable_features.send_header_raw_value); false only when some value came in `value`
// and none in raw_value.
absl::Status ReadHeaders(const HeaderMap& map, absl::string_view where, HeaderList& out,
                         bool* raw = nullptr) {
  out.clear();
  out.reserve(map.headers_size());
  bool any_raw = false;
  bool any_value = false;
  for (int i = 0; i < map.headers_size(); ++i) {
    const auto& h = map.headers(i);
    if (h.key().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".headers[", i, "]: empty header name"));
    }
    any_raw = any_raw || !h.raw_value().empty();
    any_value = any_value || !h.value().empty();
    out.emplace_back(h.key(), h.raw_value().empty() ? h.value() : h.raw_value());
  }
  if (raw != nullptr) *raw = any_raw || !any_value;
  return absl::OkStatus();
}

// GIE's subset hint in the request's metadata, if any.
absl::StatusOr<std::optional<std::vector<std::string>>> ReadSubset(
    const ext_proc::ProcessingRequest& request) {
  const auto& namespaces = request.metadata_context().filter_metadata();
  const auto ns = namespaces.find(std::string(kSubsetNamespace));
  if (ns == namespaces.end()) return std::nullopt;
  const auto& fields = ns->second.fields();
  const auto entry = fields.find(std::string(kSubsetKey));
  if (entry == fields.end()) return std::nullopt;
  const std::string where = absl::StrCat("metadata_context.filter_metadata[\"", kSubsetNamespace,
                                         "\"][\"", kSubsetKey, "\"]");
  if (!entry->second.has_list_value()) {
    return absl::InvalidArgumentError(absl::StrCat(where, " is not a list of \"IP:PORT\" strings"));
  }
  std::vector<std::string> subset;
  const auto& values = entry->second.list_value().values();
  for (int i = 0; i < values.size(); ++i) {
    if (!values[i].has_string_value()) {
      return absl::InvalidArgumentError(absl::StrCat(where, "[", i, "] is not a string"));
    }
    subset.push_back(values[i].string_value());
  }
  return subset;
}

// GIE's served endpoint: in the response's metadata_context, else its response header; a
// metadata value that is not a string as its JSON text (the routing side finds no member by it).
std::optional<std::string> ReadServed(const ext_proc::ProcessingRequest& request,
                                      const HeaderList& response_headers) {
  const auto& namespaces = request.metadata_context().filter_metadata();
  if (const auto ns = namespaces.find(std::string(kDestinationNamespace)); ns != namespaces.end()) {
    const auto& fields = ns->second.fields();
    if (const auto entry = fields.find(std::string(kServedKey)); entry != fields.end()) {
      if (entry->second.has_string_value()) return entry->second.string_value();
      std::string text;
      (void)google::protobuf::util::MessageToJsonString(entry->second, &text);
      return text;
    }
  }
  if (std::optional<absl::string_view> header = FindHeader(response_headers, kServedKey)) {
    return std::string(*header);
  }
  return std::nullopt;
}

}  // namespace

void ExtProcStream::SetHeader(ext_proc::HeaderMutation& mutation, absl::string_view key,
                              absl::string_view value) const {
  HeaderValueOption* option = mutation.add_set_headers();
  option->mutable_header()->set_key(std::string(key));
  // Envoy reads a mutation's value from the field it sends values in, and refuses a header with
  // both set.
  if (raw_values_) {
    option->mutable_header()->set_raw_value(std::string(value));
  } else {
    option->mutable_header()->set_value(std::string(value));
  }
  // Envoy's ext_proc filter reads only the deprecated `append` (unset: false), and replaces every
  // value of the header when it is false. Said explicitly; append_action stays at its default, as
  // Envoy's HeaderValueOption refuses both set elsewhere (docs/epp.md).
  option->mutable_append()->set_value(false);
}

std::optional<absl::string_view> FindHeader(const HeaderList& headers, absl::string_view name) {
  for (const auto& [key, value] : headers) {
    if (key == name) return value;
  }
  return std::nullopt;
}

ExtProcStream::ExtProcStream(const ExtProcStreamOptions& options, Exchange& exchange)
    : options_(options),
      exchange_(exchange),
      request_mode_(options.request_body_mode),
      response_mode_(options.response_body_mode) {}

ExtProcStream::Step ExtProcStream::Fail(absl::StatusCode code, std::string message) {
  done_ = true;
  Step step;
  step.status = absl::Status(code, std::move(message));
  return step;
}

ExtProcStream::Step ExtProcStream::Receive(const ext_proc::ProcessingRequest& request) {
  if (done_) return {};  // the stream is being ended; what was in flight is dropped
  if (request.observability_mode()) {
    return Fail(absl::StatusCode::kFailedPrecondition,
                "observability_mode is set: the data plane would ignore the endpoint picker's "
                "answers (turn observability_mode off in the ext_proc filter)");
  }
  switch (request.request_case()) {
    case ext_proc::ProcessingRequest::kRequestHeaders:
      return RequestHeaders(request);
    case ext_proc::ProcessingRequest::kRequestBody:
      return RequestBody(request.request_body());
    case ext_proc::ProcessingRequest::kRequestTrailers:
      return RequestTrailers();
    case ext_proc::ProcessingRequest::kResponseHeaders:
      return ResponseHeaders(request);
    case ext_proc::ProcessingRequest::kResponseBody:
      return ResponseBody(request.response_body());
    case ext_proc::ProcessingRequest::kResponseTrailers:
      return ResponseTrailers();
    case ext_proc::ProcessingRequest::REQUEST_NOT_SET:
      break;
  }
  return Fail(absl::StatusCode::kInvalidArgument,
              "ProcessingRequest sets none of request_headers, request_body, request_trailers, "
              "response_headers, response_body, response_trailers");
}

void ExtProcStream::Immediate(Step& step, int status, absl::string_view message,
                              absl::string_view type, absl::string_view code,
                              absl::string_view details) {
  ext_proc::ImmediateResponse* immediate =
      step.responses.emplace_back().mutable_immediate_response();
  immediate->mutable_status()->set_code(static_cast<::envoy::type::v3::StatusCode>(status));
  SetHeader(*immediate->mutable_headers(), "content-type", "application/json");
  immediate->set_body(frontend::ErrorBody(message, type, code));
  immediate->set_details(std::string(details));
  done_ = true;
  step.finish = true;
}

void ExtProcStream::RouteNow(Step& step, bool as_body_answer) {
  RequestView view{.headers = request_headers_,
                   .body = body_,
                   .body_read = body_read_,
                   .subset = subset_.has_value() ? &*subset_ : nullptr};
  Route route = exchange_.RouteRequest(view);
  if (route.endpoint.empty()) {
    Immediate(step, route.status, route.message, route.type, route.code,
              route.status == 429 ? "cacheroute_shed" : "cacheroute_no_endpoint");
    for (const auto& [name, value] : route.immediate_headers) {
      SetHeader(*step.responses.back().mutable_immediate_response()->mutable_headers(), name,
                value);
    }
    return;
  }
  routed_ = true;
  ext_proc::ProcessingResponse& answer = step.responses.emplace_back();
  ext_proc::CommonResponse* common = as_body_answer
                                         ? answer.mutable_request_body()->mutable_response()
                                         : answer.mutable_request_headers()->mutable_response();
  ext_proc::HeaderMutation* mutation = common->mutable_header_mutation();
  std::string endpoints = std::move(route.endpoint);
  for (const std::string& fallback : route.fallbacks) absl::StrAppend(&endpoints, ",", fallback);
  SetHeader(*mutation, kDestinationHeader, endpoints);
  // FULL_DUPLEX_STREAMED drops content-length; the body was read whole, so its size is known.
  if (body_read_ && FullDuplex(request_mode_)) {
    SetHeader(*mutation, "content-length", absl::StrCat(body_.size()));
  }
  common->set_clear_route_cache(true);
  google::protobuf::Struct& lb =
      *(*answer.mutable_dynamic_metadata()->mutable_fields())[std::string(kDestinationNamespace)]
           .mutable_struct_value();
  (*lb.mutable_fields())[std::string(kDestinationHeader)].set_string_value(std::move(endpoints));
}

void ExtProcStream::Echo(Step& step, bool request, absl::string_view bytes, bool end_of_stream) {
  if (bytes.empty() && !end_of_stream) return;  // nothing to forward yet
  size_t at = 0;
  do {
    const size_t n = std::min(kMaxStreamedChunk, bytes.size() - at);
    ext_proc::ProcessingResponse& answer = step.responses.emplace_back();
    ext_proc::BodyResponse* body =
        request ? answer.mutable_request_body() : answer.mutable_response_body();
    ext_proc::StreamedBodyResponse* streamed =
        body->mutable_response()->mutable_body_mutation()->mutable_streamed_response();
    streamed->set_body(std::string(bytes.substr(at, n)));
    at += n;
    streamed->set_end_of_stream(end_of_stream && at == bytes.size());
  } while (at < bytes.size());
}

ExtProcStream::Step ExtProcStream::RequestHeaders(const ext_proc::ProcessingRequest& request) {
  if (request_phase_ != Side::kNotStarted) {
    return Fail(absl::StatusCode::kFailedPrecondition,
                "request_headers arrived a second time on one stream (one stream per request)");
  }
  if (request.has_protocol_config()) {
    request_mode_ = request.protocol_config().request_body_mode();
    response_mode_ = request.protocol_config().response_body_mode();
  }
  if (request_mode_ != Mode::NONE && !Buffered(request_mode_) && !FullDuplex(request_mode_)) {
    return Fail(absl::StatusCode::kFailedPrecondition,
                absl::StrCat("request_body_mode ", ModeName(request_mode_),
                             " is not supported: use FULL_DUPLEX_STREAMED (as GIE gateways do), "
                             "BUFFERED or NONE"));
  }
  if (response_mode_ == Mode::GRPC || !Mode::BodySendMode_IsValid(response_mode_)) {
    return Fail(absl::StatusCode::kFailedPrecondition,
                absl::StrCat("response_body_mode ", ModeName(response_mode_),
                             " is not supported: use FULL_DUPLEX_STREAMED, BUFFERED, STREAMED or "
                             "NONE"));
  }
  if (absl::Status s = ReadHeaders(request.request_headers().headers(), "request_headers",
                                   request_headers_, &raw_values_);
      !s.ok()) {
    return Fail(s.code(), std::string(s.message()));
  }
  absl::StatusOr<std::optional<std::vector<std::string>>> subset = ReadSubset(request);
  if (!subset.ok()) return Fail(subset.status().code(), std::string(subset.status().message()));
  subset_ = *std::move(subset);

  const bool end = request.request_headers().end_of_stream();
  request_phase_ = end ? Side::kEnded : Side::kBody;
  Step step;
  if (end || request_mode_ == Mode::NONE || !exchange_.NeedsBody(request_headers_)) {
    RouteNow(step, /*as_body_answer=*/false);
  } else if (FullDuplex(request_mode_)) {
    holding_ = true;  // answered once the body has arrived
  } else {
    // BUFFERED: Envoy waits for this answer before it sends the body, and picks the upstream
    // only after the body's answer, which carries the destination.
    step.responses.emplace_back().mutable_request_headers();
  }
  return step;
}

ExtProcStream::Step ExtProcStream::RequestBody(const ext_proc::HttpBody& body) {
  if (request_phase_ != Side::kBody) {
    return Fail(absl::StatusCode::kFailedPrecondition,
                request_phase_ == Side::kNotStarted
                    ? "request_body before request_headers"
                    : "request_body after the request's end (end_of_stream was seen)");
  }
  if (request_mode_ == Mode::NONE) {
    return Fail(absl::StatusCode::kFailedPrecondition,
                "request_body arrived while request_body_mode is NONE: configure the endpoint "
                "picker's request_body_mode as the ext_proc filter's processing_mode");
  }
  const bool end = body.end_of_stream();
  if (end) request_phase_ = Side::kEnded;
  Step step;
  if (FullDuplex(request_mode_)) {
    if (!holding_) {
      Echo(step, /*request=*/true, body.body(), end);
      return step;
    }
    if (TooLarge(step, body_.size() + body.body().size())) return step;
    body_ += body.body();
    if (end) Release(step, /*end_of_stream=*/true);
    return step;
  }
  // BUFFERED, BUFFERED_PARTIAL: the whole body in this message (cut at Envoy's buffer limit in
  // BUFFERED_PARTIAL, where end_of_stream may then be false).
  if (!routed_ && !body_answered_) {
    body_answered_ = true;
    if (TooLarge(step, body.body().size())) return step;
    body_ = body.body();
    body_read_ = true;
    RouteNow(step, /*as_body_answer=*/true);
    body_.clear();
    return step;
  }
  step.responses.emplace_back().mutable_request_body();
  return step;
}

bool ExtProcStream::TooLarge(Step& step, size_t bytes) {
  if (bytes <= options_.max_request_body) return false;
  Immediate(step, 413,
            absl::StrCat("the request body exceeds the endpoint picker's max_request_body (",
                         options_.max_request_body, " bytes)"),
            "invalid_request_error", "body_too_large", "cacheroute_body_too_large");
  return true;
}

void ExtProcStream::Release(Step& step, bool end_of_stream) {
  holding_ = false;
  body_read_ = true;
  RouteNow(step, /*as_body_answer=*/false);
  if (routed_) Echo(step, /*request=*/true, body_, end_of_stream);
  body_.clear();
  body_.shrink_to_fit();
}

ExtProcStream::Step ExtProcStream::RequestTrailers() {
  if (request_phase_ != Side::kBody) {
    return Fail(absl::StatusCode::kFailedPrecondition,
                request_phase_ == Side::kNotStarted
                    ? "request_trailers before request_headers"
                    : "request_trailers after the request's end (end_of_stream was seen)");
  }
  request_phase_ = Side::kEnded;
  Step step;
  if (holding_) {
    // FULL_DUPLEX_STREAMED: trailers say the body is complete (its last chunk had no
    // end_of_stream, so neither has the echo's).
    Release(step, /*end_of_stream=*/false);
    if (done_) return step;
  } else if (!routed_ && Buffered(request_mode_)) {
    return Fail(absl::StatusCode::kFailedPrecondition,
                "request_trailers before request_body in BUFFERED mode: the destination goes on "
                "the body's answer");
  }
  step.responses.emplace_back().mutable_request_trailers();
  return step;
}

ExtProcStream::Step ExtProcStream::ResponseHeaders(const ext_proc::ProcessingRequest& request) {
  const ext_proc::HttpHeaders& headers = request.response_headers();
  if (!routed_) {
    return Fail(absl::StatusCode::kFailedPrecondition,
                "response_headers before the request was routed (its request_headers answer was "
                "not sent yet)");
  }
  if (response_phase_ != Side::kNotStarted) {
    return Fail(absl::StatusCode::kFailedPrecondition,
                "response_headers arrived a second time on one stream");
  }
  HeaderList list;
  if (absl::Status s = ReadHeaders(headers.headers(), "response_headers", list); !s.ok()) {
    return Fail(s.code(), std::string(s.message()));
  }
  int status = 0;
  if (std::optional<absl::string_view> value = FindHeader(list, ":status")) {
    if (!absl::SimpleAtoi(*value, &status) || status < 100 || status > 999) {
      return Fail(
          absl::StatusCode::kInvalidArgument,
          absl::StrCat("response_headers: :status \"", *value, "\" is not an HTTP status code"));
    }
  }
  response_phase_ = Side::kBody;
  const HeaderList to_add = exchange_.ResponseHeaders(
      {.status = status, .headers = list, .served = ReadServed(request, list)});
  Step step;
  ext_proc::HeadersResponse* answer = step.responses.emplace_back().mutable_response_headers();
  if (!to_add.empty()) {
    ext_proc::HeaderMutation* mutation = answer->mutable_response()->mutable_header_mutation();
    for (const auto& [key, value] : to_add) SetHeader(*mutation, key, value);
  }
  if (headers.end_of_stream()) Complete();
  return step;
}

ExtProcStream::Step ExtProcStream::ResponseBody(const ext_proc::HttpBody& body) {
  if (response_phase_ != Side::kBody) {
    return Fail(absl::StatusCode::kFailedPrecondition,
                response_phase_ == Side::kNotStarted
                    ? "response_body before response_headers (the ext_proc filter's "
                      "response_header_mode must be SEND)"
                    : "response_body after the response's end (end_of_stream was seen)");
  }
  exchange_.ResponseBody(body.body());
  Step step;
  if (FullDuplex(response_mode_)) {
    Echo(step, /*request=*/false, body.body(), body.end_of_stream());
  } else {
    step.responses.emplace_back().mutable_response_body();
  }
  if (body.end_of_stream()) Complete();
  return step;
}

ExtProcStream::Step ExtProcStream::ResponseTrailers() {
  if (response_phase_ != Side::kBody) {
    return Fail(absl::StatusCode::kFailedPrecondition,
                response_phase_ == Side::kNotStarted
                    ? "response_trailers before response_headers"
                    : "response_trailers after the response's end (end_of_stream was seen)");
  }
  Complete();
  Step step;
  step.responses.emplace_back().mutable_response_trailers();
  return step;
}

void ExtProcStream::Complete() {
  response_phase_ = Side::kEnded;
  if (routed_ && !finished_) {
    finished_ = true;
    exchange_.Finished(/*complete=*/true);
  }
}

void ExtProcStream::Close() {
  done_ = true;
  if (routed_ && !finished_) {
    finished_ = true;
    exchange_.Finished(/*complete=*/false);
  }
}

}  // namespace cacheroute::epp
