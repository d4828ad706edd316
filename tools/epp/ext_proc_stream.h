// ExtProcStream: one ext_proc `Process` stream, that is one HTTP request as Envoy's ext_proc
// filter shows it to an endpoint picker, as a pure state machine. The server feeds it every
// ProcessingRequest in arrival order and sends what it returns; the machine asks its Exchange (the
// routing side) to route the request once it knows enough, and tells it what the response does.
// No gRPC, no threads, no clock.
//
// What it answers (docs/epp.md, "The ext_proc exchange", has the sequences):
//   - every phase with the ProcessingResponse of the same phase, in order per direction;
//   - the chosen endpoint (then Route::fallbacks, "IP:PORT,IP:PORT,…", GIE's fallback list) as
//     the request header x-gateway-destination-endpoint (overwriting any
//     the client sent: `append` false; route cache cleared) and the same value in
//     dynamic_metadata {"envoy.lb": {"x-gateway-destination-endpoint": "IP:PORT"}}, on the
//     request_headers answer, or in BUFFERED request mode on the request_body answer (Envoy picks
//     the upstream only after the body answer there);
//   - when routing needs the body (Exchange::NeedsBody) in FULL_DUPLEX_STREAMED mode, it holds the
//     request_headers answer until the body's end (or the request trailers), then sends it, with
//     content-length set to the body's size, followed by the body echoed in streamed_response
//     chunks of at most kMaxStreamedChunk bytes; once routed, every body chunk is echoed at once;
//   - no endpoint: immediate_response with the Route's status (503) and an OpenAI error body; a
//     request body held for routing (FULL_DUPLEX_STREAMED's chunks, or BUFFERED's one message)
//     over max_request_body: immediate_response 413. The stream is then done.
//   - header values in the field the request headers came in: raw_value (Envoy's default), or
//     value when the data plane sends values there (it then reads only `value` from mutations).
//
// Body modes: request NONE, BUFFERED, BUFFERED_PARTIAL, FULL_DUPLEX_STREAMED; response NONE,
// STREAMED, BUFFERED, BUFFERED_PARTIAL, FULL_DUPLEX_STREAMED. The configured modes hold unless the
// first message carries protocol_config (newer Envoys send it), which wins. Anything else is an
// error.
//
// Errors: a message that is malformed (no phase set, an empty header name, a :status that is not
// a number, a subset hint that is not a list of strings) is INVALID_ARGUMENT; one out of order
// (a body before its headers, a second request_headers, a response before the request was
// routed, anything after the response's end), an unsupported mode and observability_mode are
// FAILED_PRECONDITION. Each message names the phase and what was wrong. After an error or an
// immediate response the stream is done: the server ends it (Step::finish) and the machine
// ignores what still arrives.
//
// Usage:
//   ExtProcStream stream(options, exchange);
//   for each message read:
//     ExtProcStream::Step step = stream.Receive(request);
//     send step.responses in order; if (!step.status.ok() || step.finish) end the stream with
//     step.status (OK after an immediate response).
//   stream.Close();  // once the stream is over, whatever ended it; tells the Exchange
//
// Invariants: Exchange::RouteRequest is called at most once; Exchange::Finished exactly once after
// a route that chose an endpoint (complete = the response's end was seen), never otherwise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "envoy/service/ext_proc/v3/external_processor.pb.h"

namespace cacheroute::epp {

namespace ext_proc = ::envoy::service::ext_proc::v3;
using BodySendMode = ::envoy::extensions::filters::http::ext_proc::v3::ProcessingMode::BodySendMode;

// The GIE endpoint-picker protocol's names (docs/proposals/004-endpoint-picker-protocol).
inline constexpr absl::string_view kDestinationHeader = "x-gateway-destination-endpoint";
inline constexpr absl::string_view kDestinationNamespace = "envoy.lb";
inline constexpr absl::string_view kSubsetNamespace = "envoy.lb.subset_hint";
inline constexpr absl::string_view kSubsetKey = "x-gateway-destination-endpoint-subset";
// The endpoint that served the request (after the data plane's retries over the endpoints named),
// in the response's metadata_context under kDestinationNamespace (the protocol since GIE v1.0.0);
// some data planes send it as a response header of this name instead.
inline constexpr absl::string_view kServedKey = "x-gateway-destination-endpoint-served";

// Header names as Envoy sends them (lower case, pseudo-headers included) and their values.
using HeaderList = std::vector<std::pair<std::string, std::string>>;
// The value of `name` (lower case), or none.
std::optional<absl::string_view> FindHeader(const HeaderList& headers, absl::string_view name);

// What the machine knows of the request when it routes it.
struct RequestView {
  const HeaderList& headers;
  absl::string_view body;  // the whole body when it was read first; else empty
  bool body_read = false;
  // GIE's subset hint: the endpoints (IP:PORT) the data plane allows, or null (no restriction).
  const std::vector<std::string>* subset = nullptr;
};

// The routing side's answer.
struct Route {
  std::string endpoint;  // IP:PORT; empty: no endpoint can serve
  // Endpoints for the data plane to try next, in order (GIE's fallback list); named after
  // `endpoint`, comma-separated, in the header and the metadata alike.
  std::vector<std::string> fallbacks;
  // Without an endpoint: the immediate response's status and the OpenAI error's message, type and
  // code (a string, as OpenAI's are).
  int status = 503;
  std::string message;
  std::string type = "service_unavailable";
  std::string code = "no_upstream";
  // Without an endpoint: headers of the immediate response besides content-type (a shed
  // request's Retry-After).
  HeaderList immediate_headers;
};

// What the machine knows of the response when its headers arrive.
struct ResponseView {
  int status = 0;  // :status; 0 when missing
  const HeaderList& headers;
  // The endpoint the data plane says served the request (kServedKey: metadata_context, else the
  // response header), as sent (a metadata value that is not a string in its JSON text); none when
  // not said.
  std::optional<std::string> served;
};

// The routing side of one request (the EPP's request lifecycle).
class Exchange {
 public:
  virtual ~Exchange() = default;
  // True when the routing key may come from the body, given the headers (the machine then reads
  // the body before routing when the body mode allows).
  virtual bool NeedsBody(const HeaderList& headers) = 0;
  virtual Route RouteRequest(const RequestView& request) = 0;
  // The response's status and headers; returns the headers to add to the HTTP response (the
  // response_headers answer), e.g. X-CacheRoute-Destination. Then its body as it passes.
  virtual HeaderList ResponseHeaders(const ResponseView& response) = 0;
  virtual void ResponseBody(absl::string_view chunk) = 0;
  // The request is over: complete when the response's end was seen, else the stream ended first.
  virtual void Finished(bool complete) = 0;
};

struct ExtProcStreamOptions {
  // Used unless the first message carries protocol_config.
  BodySendMode request_body_mode =
      ::envoy::extensions::filters::http::ext_proc::v3::ProcessingMode::FULL_DUPLEX_STREAMED;
  BodySendMode response_body_mode =
      ::envoy::extensions::filters::http::ext_proc::v3::ProcessingMode::FULL_DUPLEX_STREAMED;
  // A request body held for routing beyond this many bytes gets 413.
  size_t max_request_body = 32u << 20;
};

class ExtProcStream {
 public:
  // Envoy's ext_proc documentation recommends streamed chunks of at most 64 KiB; a little under
  // that leaves room for the message's framing.
  static constexpr size_t kMaxStreamedChunk = 62 * 1024;

  struct Step {
    std::vector<ext_proc::ProcessingResponse> responses;  // to send, in order
    absl::Status status;  // not OK: end the stream with it (after sending `responses`)
    bool finish = false;  // an immediate response was sent: end the stream with OK
  };

  ExtProcStream(const ExtProcStreamOptions& options, Exchange& exchange);
  ExtProcStream(const ExtProcStream&) = delete;
  ExtProcStream& operator=(const ExtProcStream&) = delete;

  Step Receive(const ext_proc::ProcessingRequest& request);
  // The stream is over; tells the Exchange when it routed and the response did not end. Idempotent.
  void Close();

  // What the stream has decided (for logs and tests).
  bool routed() const { return routed_; }
  bool done() const { return done_; }
  BodySendMode request_body_mode() const { return request_mode_; }
  BodySendMode response_body_mode() const { return response_mode_; }

 private:
  // Where one direction (request or response) is.
  enum class Side : uint8_t { kNotStarted, kBody, kEnded };

  Step Fail(absl::StatusCode code, std::string message);
  // Routes with what is known; on success appends the answer carrying the destination (a
  // request_headers answer, or a request_body one in BUFFERED mode), else the immediate response.
  void RouteNow(Step& step, bool as_body_answer);
  // FULL_DUPLEX_STREAMED, holding: routes on the body read, then echoes it.
  void Release(Step& step, bool end_of_stream);
  // A body of `bytes` held for routing beyond max_request_body: appends the immediate 413.
  bool TooLarge(Step& step, size_t bytes);
  // Appends a header that replaces any of that name, in the stream's value encoding.
  void SetHeader(ext_proc::HeaderMutation& mutation, absl::string_view key,
                 absl::string_view value) const;
  void Immediate(Step& step, int status, absl::string_view message, absl::string_view type,
                 absl::string_view code, absl::string_view details);
  // Appends request_body (or response_body) answers echoing `bytes` as streamed_response chunks.
  static void Echo(Step& step, bool request, absl::string_view bytes, bool end_of_stream);
  Step RequestHeaders(const ext_proc::ProcessingRequest& request);
  Step RequestBody(const ext_proc::HttpBody& body);
  Step RequestTrailers();
  Step ResponseHeaders(const ext_proc::ProcessingRequest& request);
  Step ResponseBody(const ext_proc::HttpBody& body);
  Step ResponseTrailers();
  void Complete();

  const ExtProcStreamOptions options_;
  Exchange& exchange_;
  BodySendMode request_mode_;
  BodySendMode response_mode_;
  Side request_phase_ = Side::kNotStarted;
  Side response_phase_ = Side::kNotStarted;
  bool done_ = false;  // an error or an immediate response ended it, or Close
  HeaderList request_headers_;
  // Header values travel in raw_value (Envoy's default) or, when the request headers came in
  // `value` (send_header_raw_value off), in `value`: answers use the same field.
  bool raw_values_ = true;
  std::optional<std::vector<std::string>> subset_;
  bool holding_ = false;        // FULL_DUPLEX: the request_headers answer waits for the body
  bool body_answered_ = false;  // BUFFERED: the body message was answered
  bool body_read_ = false;      // routed on the whole body
  std::string body_;            // held for routing
  bool routed_ = false;         // an endpoint was chosen
  bool finished_ = false;       // Exchange::Finished was called
};

}  // namespace cacheroute::epp
