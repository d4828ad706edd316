// ExtProcStream, the per-stream ext_proc state machine, fed the message sequences Envoy's ext_proc
// filter sends in each body mode, and every out-of-order or malformed message it should refuse.
// The Exchange here records what the machine asks of the routing side and answers with a fixed
// endpoint: the machine's contract is the protocol, which the real routing side does not change
// (the EPP's server and equivalence tests run it with the real one).
#include "tools/epp/ext_proc_stream.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "epp/ext_proc_messages.h"

namespace cacheroute::epp {
namespace {

using Mode = ::envoy::extensions::filters::http::ext_proc::v3::ProcessingMode;
using Step = ExtProcStream::Step;

class RecordingExchange : public Exchange {
 public:
  bool needs_body = true;
  std::string endpoint = "10.0.0.7:8000";
  std::vector<std::string> fallbacks;
  struct Routed {
    HeaderList headers;
    std::string body;
    bool body_read;
    std::optional<std::vector<std::string>> subset;
  };
  std::vector<Routed> routes;
  std::vector<int> statuses;
  std::vector<std::optional<std::string>> served;  // each response's served endpoint
  std::string response_body;
  std::vector<bool> finished;  // the `complete` of each Finished call

  bool NeedsBody(const HeaderList& headers) override { return needs_body; }
  Route RouteRequest(const RequestView& request) override {
    routes.push_back({request.headers, std::string(request.body), request.body_read,
                      request.subset != nullptr ? std::optional(*request.subset) : std::nullopt});
    Route route;
    route.endpoint = endpoint;
    route.fallbacks = fallbacks;
    if (endpoint.empty()) route.message = "no upstream is up";
    return route;
  }
  HeaderList ResponseHeaders(const ResponseView& response) override {
    statuses.push_back(response.status);
    served.push_back(response.served);
    return {{"x-cacheroute-destination", "engine-7"}};
  }
  void ResponseBody(absl::string_view chunk) override {
    response_body.append(chunk.data(), chunk.size());
  }
  void Finished(bool complete) override { finished.push_back(complete); }
};

// The set_headers of a mutation as (key, value) read as Envoy's ext_proc filter reads them: from
// raw_value (`raw`, its default) or only from value (send_header_raw_value off). CHECKs that the
// other field is never set beside it and that every header replaces any of its name: `append`
// set to false (the only field the filter reads) and append_action left at its default (Envoy's
// HeaderValueOption refuses both).
HeaderList SetHeaders(const ext_proc::HeaderMutation& mutation, bool raw = true) {
  HeaderList out;
  for (const auto& option : mutation.set_headers()) {
    CHECK((raw ? option.header().value() : option.header().raw_value()).empty());
    CHECK(option.has_append());
    CHECK_FALSE(option.append().value());
    CHECK(option.append_action() ==
          envoy::config::core::v3::HeaderValueOption::APPEND_IF_EXISTS_OR_ADD);
    out.emplace_back(option.header().key(),
                     raw ? option.header().raw_value() : option.header().value());
  }
  return out;
}

// CHECKs that `common` routes to `endpoint` (header, cleared route cache) and that `response`
// carries it as envoy.lb dynamic metadata; `raw`: as SetHeaders.
void CheckRoutes(const ext_proc::ProcessingResponse& response,
                 const ext_proc::CommonResponse& common, const std::string& endpoint,
                 bool raw = true) {
  CHECK(FindHeader(SetHeaders(common.header_mutation(), raw), "x-gateway-destination-endpoint") ==
        std::optional<absl::string_view>(endpoint));
  CHECK(common.clear_route_cache());
  const auto& ns = response.dynamic_metadata().fields();
  REQUIRE(ns.count("envoy.lb") == 1);
  CHECK(ns.at("envoy.lb")
            .struct_value()
            .fields()
            .at("x-gateway-destination-endpoint")
            .string_value() == endpoint);
}

// The streamed_response bytes of request (or response) body answers, and whether the last says
// end_of_stream (CHECKs that no earlier one does).
std::pair<std::string, bool> Echoed(const std::vector<ext_proc::ProcessingResponse>& responses,
                                    bool request) {
  std::string bytes;
  bool end = false;
  for (const auto& r : responses) {
    REQUIRE((request ? r.has_request_body() : r.has_response_body()));
    const auto& body = request ? r.request_body() : r.response_body();
    REQUIRE(body.response().body_mutation().has_streamed_response());
    CHECK_FALSE(end);
    bytes += body.response().body_mutation().streamed_response().body();
    end = body.response().body_mutation().streamed_response().end_of_stream();
  }
  return {bytes, end};
}

std::vector<ext_proc::ProcessingResponse> Tail(const Step& step, size_t from) {
  return {step.responses.begin() + static_cast<long>(from), step.responses.end()};
}

TEST_CASE("FULL_DUPLEX_STREAMED: the headers answer waits for the body, which is echoed after it") {
  RecordingExchange exchange;
  ExtProcStream stream({}, exchange);
  Step step = stream.Receive(Headers());
  CHECK(step.responses.empty());
  CHECK(step.status.ok());
  CHECK(stream.Receive(Body("{\"messages\":", false)).responses.empty());
  step = stream.Receive(Body("[]}", true));
  REQUIRE(step.status.ok());
  REQUIRE(step.responses.size() == 2);
  REQUIRE(step.responses[0].has_request_headers());
  const auto& common = step.responses[0].request_headers().response();
  CheckRoutes(step.responses[0], common, "10.0.0.7:8000");
  CHECK(FindHeader(SetHeaders(common.header_mutation()), "content-length") ==
        std::optional<absl::string_view>("15"));
  CHECK(Echoed(Tail(step, 1), true) == std::pair<std::string, bool>("{\"messages\":[]}", true));
  REQUIRE(exchange.routes.size() == 1);
  CHECK(exchange.routes[0].body == "{\"messages\":[]}");
  CHECK(exchange.routes[0].body_read);
  CHECK(FindHeader(exchange.routes[0].headers, ":path") ==
        std::optional<absl::string_view>("/v1/chat/completions"));
  CHECK(stream.routed());

  step = stream.Receive(ResponseHeaders("200"));
  REQUIRE(step.responses.size() == 1);
  REQUIRE(step.responses[0].has_response_headers());
  CHECK(SetHeaders(step.responses[0].response_headers().response().header_mutation()) ==
        HeaderList{{"x-cacheroute-destination", "engine-7"}});
  CHECK(exchange.statuses == std::vector<int>{200});
  step = stream.Receive(ResponseBody("data: {}\n\n", false));
  CHECK(Echoed(step.responses, false) == std::pair<std::string, bool>("data: {}\n\n", false));
  CHECK(exchange.finished.empty());
  step = stream.Receive(ResponseBody("data: [DONE]\n\n", true));
  CHECK(Echoed(step.responses, false) == std::pair<std::string, bool>("data: [DONE]\n\n", true));
  CHECK(exchange.response_body == "data: {}\n\ndata: [DONE]\n\n");
  CHECK(exchange.finished == std::vector<bool>{true});
  stream.Close();
  CHECK(exchange.finished == std::vector<bool>{true});  // once
}

TEST_CASE("FULL_DUPLEX_STREAMED: a key from the headers routes at once and echoes chunk by chunk") {
  RecordingExchange exchange;
  exchange.needs_body = false;
  ExtProcStream stream({}, exchange);
  Step step = stream.Receive(Headers(false, {{"x-cacheroute-key", "tenant-1"}}));
  REQUIRE(step.responses.size() == 1);
  CheckRoutes(step.responses[0], step.responses[0].request_headers().response(), "10.0.0.7:8000");
  // The body is not read, so its size is not known.
  CHECK_FALSE(
      FindHeader(SetHeaders(step.responses[0].request_headers().response().header_mutation()),
                 "content-length"));
  CHECK_FALSE(exchange.routes[0].body_read);
  CHECK(Echoed(stream.Receive(Body("ab", false)).responses, true) ==
        std::pair<std::string, bool>("ab", false));
  CHECK(stream.Receive(Body("", false)).responses.empty());  // nothing to forward
  CHECK(Echoed(stream.Receive(Body("c", true)).responses, true) ==
        std::pair<std::string, bool>("c", true));
  // The upstream may answer before the request body ends; here it answers after.
  CHECK(stream.Receive(ResponseHeaders("200", /*end_of_stream=*/true)).responses.size() == 1);
  CHECK(exchange.finished == std::vector<bool>{true});
}

TEST_CASE("a request without a body (end_of_stream on its headers) is routed at once") {
  for (const BodySendMode mode : {Mode::FULL_DUPLEX_STREAMED, Mode::BUFFERED, Mode::NONE}) {
    INFO(Mode::BodySendMode_Name(mode));
    RecordingExchange exchange;
    ExtProcStream stream({.request_body_mode = mode}, exchange);
    const Step step = stream.Receive(Headers(/*end_of_stream=*/true));
    REQUIRE(step.responses.size() == 1);
    CheckRoutes(step.responses[0], step.responses[0].request_headers().response(), "10.0.0.7:8000");
    CHECK(exchange.routes.size() == 1);
  }
}

TEST_CASE("FULL_DUPLEX_STREAMED with request trailers: routed at the trailers, echo without end") {
  RecordingExchange exchange;
  ExtProcStream stream({}, exchange);
  stream.Receive(Headers());
  stream.Receive(Body("{\"user\":\"u\"}", false));
  const Step step = stream.Receive(RequestTrailers());
  REQUIRE(step.responses.size() == 3);
  CHECK(step.responses[0].has_request_headers());
  CHECK(Echoed({step.responses[1]}, true) ==
        std::pair<std::string, bool>("{\"user\":\"u\"}", false));
  CHECK(step.responses[2].has_request_trailers());
  CHECK(exchange.routes.at(0).body == "{\"user\":\"u\"}");
}

TEST_CASE("a large body is echoed in chunks of at most kMaxStreamedChunk bytes") {
  RecordingExchange exchange;
  ExtProcStream stream({}, exchange);
  stream.Receive(Headers());
  std::string body(2 * ExtProcStream::kMaxStreamedChunk + 17, 'x');
  for (size_t i = 0; i < body.size(); ++i) body[i] = static_cast<char>('a' + i % 26);
  const Step step = stream.Receive(Body(body, true));
  REQUIRE(step.responses.size() == 4);  // the headers answer, then three chunks
  for (size_t i = 1; i < 4; ++i) {
    CHECK(step.responses[i]
              .request_body()
              .response()
              .body_mutation()
              .streamed_response()
              .body()
              .size() <= ExtProcStream::kMaxStreamedChunk);
  }
  CHECK(Echoed(Tail(step, 1), true) == std::pair<std::string, bool>(body, true));
  // A large response chunk too.
  stream.Receive(ResponseHeaders("200"));
  const Step response = stream.Receive(ResponseBody(body, true));
  CHECK(response.responses.size() == 3);
  CHECK(Echoed(response.responses, false) == std::pair<std::string, bool>(body, true));
}

// The OpenAI error of an immediate response, checked whole.
void CheckImmediate(const Step& step, int status, const std::string& type, const std::string& code,
                    const std::string& message_part) {
  REQUIRE(step.responses.size() == 1);
  REQUIRE(step.responses[0].has_immediate_response());
  const auto& immediate = step.responses[0].immediate_response();
  CHECK(immediate.status().code() == status);
  CHECK(SetHeaders(immediate.headers()) == HeaderList{{"content-type", "application/json"}});
  const nlohmann::json body = nlohmann::json::parse(immediate.body());
  CHECK(body["error"]["code"] == code);  // a string, as OpenAI's codes are
  CHECK(body["error"]["type"] == type);
  CHECK(body["error"]["param"].is_null());
  INFO(body.dump());
  CHECK(absl::StrContains(body["error"]["message"].get<std::string>(), message_part));
  CHECK_FALSE(immediate.details().empty());
  CHECK(step.status.ok());
  CHECK(step.finish);
}

TEST_CASE("no endpoint: an immediate 503 with an OpenAI error body, and the stream is done") {
  RecordingExchange exchange;
  exchange.endpoint.clear();
  ExtProcStream stream({}, exchange);
  stream.Receive(Headers());
  CheckImmediate(stream.Receive(Body("{}", true)), 503, "service_unavailable", "no_upstream",
                 "no upstream is up");
  CHECK(stream.done());
  CHECK_FALSE(stream.routed());
  // What Envoy still had in flight is ignored; nothing was routed, so nothing finishes.
  CHECK(stream.Receive(Body("late", true)).responses.empty());
  stream.Close();
  CHECK(exchange.finished.empty());
}

TEST_CASE("a body held for routing beyond max_request_body gets an immediate 413") {
  RecordingExchange exchange;
  ExtProcStream stream({.max_request_body = 10}, exchange);
  stream.Receive(Headers());
  CHECK(stream.Receive(Body("0123456789", false)).responses.empty());  // 10: at the limit
  CheckImmediate(stream.Receive(Body("x", true)), 413, "invalid_request_error", "body_too_large",
                 "max_request_body (10 bytes)");
  CHECK(exchange.routes.empty());
  // BUFFERED and BUFFERED_PARTIAL: the body held for routing arrives in one message.
  for (const BodySendMode mode : {Mode::BUFFERED, Mode::BUFFERED_PARTIAL}) {
    CAPTURE(mode);
    RecordingExchange buffered;
    ExtProcStream whole({.request_body_mode = mode, .max_request_body = 10}, buffered);
    REQUIRE(whole.Receive(Headers()).responses.size() == 1);  // answered at once
    CheckImmediate(whole.Receive(Body("01234567890", mode == Mode::BUFFERED)), 413,
                   "invalid_request_error", "body_too_large", "max_request_body (10 bytes)");
    CHECK(buffered.routes.empty());
    CHECK(whole.done());
    RecordingExchange at_limit;
    ExtProcStream fits({.request_body_mode = mode, .max_request_body = 10}, at_limit);
    fits.Receive(Headers());
    const Step routed = fits.Receive(Body("0123456789", true));  // 10: at the limit
    REQUIRE(routed.responses.size() == 1);
    CheckRoutes(routed.responses[0], routed.responses[0].request_body().response(),
                "10.0.0.7:8000");
  }
  // Once routed on the headers, the body is only passed through: no limit.
  RecordingExchange by_header;
  by_header.needs_body = false;
  ExtProcStream passing({.max_request_body = 10}, by_header);
  passing.Receive(Headers());
  CHECK(Echoed(passing.Receive(Body(std::string(100, 'x'), true)).responses, true).first.size() ==
        100);
}

TEST_CASE("BUFFERED: the headers are answered at once and the destination rides the body answer") {
  RecordingExchange exchange;
  ExtProcStream stream({.request_body_mode = Mode::BUFFERED, .response_body_mode = Mode::BUFFERED},
                       exchange);
  Step step = stream.Receive(Headers());
  REQUIRE(step.responses.size() == 1);
  REQUIRE(step.responses[0].has_request_headers());
  CHECK_FALSE(step.responses[0].request_headers().response().has_header_mutation());
  CHECK_FALSE(step.responses[0].has_dynamic_metadata());
  step = stream.Receive(Body("{\"user\":\"u\"}", true));
  REQUIRE(step.responses.size() == 1);
  REQUIRE(step.responses[0].has_request_body());
  const auto& common = step.responses[0].request_body().response();
  CheckRoutes(step.responses[0], common, "10.0.0.7:8000");
  // Envoy keeps content-length in BUFFERED mode, and the body passes unchanged.
  CHECK_FALSE(FindHeader(SetHeaders(common.header_mutation()), "content-length"));
  CHECK_FALSE(common.has_body_mutation());
  CHECK(exchange.routes.at(0).body == "{\"user\":\"u\"}");
  stream.Receive(ResponseHeaders("200"));
  step = stream.Receive(ResponseBody("{\"usage\":{}}", true));
  REQUIRE(step.responses.size() == 1);
  CHECK(step.responses[0].has_response_body());
  CHECK_FALSE(step.responses[0].response_body().response().has_body_mutation());
  CHECK(exchange.finished == std::vector<bool>{true});
}

TEST_CASE("BUFFERED with a key from the headers: routed at the headers, the body answer is empty") {
  RecordingExchange exchange;
  exchange.needs_body = false;
  ExtProcStream stream({.request_body_mode = Mode::BUFFERED}, exchange);
  Step step = stream.Receive(Headers());
  CheckRoutes(step.responses.at(0), step.responses[0].request_headers().response(),
              "10.0.0.7:8000");
  step = stream.Receive(Body("{}", true));
  REQUIRE(step.responses.size() == 1);
  CHECK_FALSE(step.responses[0].request_body().response().has_header_mutation());
}

TEST_CASE("protocol_config in the first message overrides the configured body modes") {
  RecordingExchange exchange;
  ExtProcStream stream({.request_body_mode = Mode::BUFFERED, .response_body_mode = Mode::BUFFERED},
                       exchange);
  CHECK(stream.Receive(WithConfig(Headers(), Mode::FULL_DUPLEX_STREAMED, Mode::STREAMED))
            .responses.empty());  // held: full duplex
  CHECK(stream.request_body_mode() == Mode::FULL_DUPLEX_STREAMED);
  CHECK(stream.response_body_mode() == Mode::STREAMED);
  CHECK(stream.Receive(Body("{}", true)).responses.size() == 2);
  stream.Receive(ResponseHeaders("200"));
  // STREAMED responses: one empty answer per chunk.
  const Step step = stream.Receive(ResponseBody("x", false));
  REQUIRE(step.responses.size() == 1);
  CHECK_FALSE(step.responses[0].response_body().response().has_body_mutation());
}

TEST_CASE("request_body_mode NONE routes on the headers; a body then is refused") {
  RecordingExchange exchange;
  ExtProcStream stream({.request_body_mode = Mode::NONE}, exchange);
  CHECK(stream.Receive(Headers()).responses.size() == 1);
  const Step step = stream.Receive(Body("{}", true));
  CHECK(step.status.code() == absl::StatusCode::kFailedPrecondition);
  CHECK(absl::StrContains(step.status.message(), "request_body_mode is NONE"));
}

// The status a fresh stream ends with after `messages` (all but the last must be accepted).
absl::Status After(const std::vector<ext_proc::ProcessingRequest>& messages,
                   RecordingExchange& exchange, ExtProcStreamOptions options = {}) {
  ExtProcStream stream(options, exchange);
  for (size_t i = 0; i + 1 < messages.size(); ++i) {
    const Step step = stream.Receive(messages[i]);
    INFO("message " << i);
    REQUIRE(step.status.ok());
  }
  const Step last = stream.Receive(messages.back());
  CHECK(last.responses.empty());
  CHECK(stream.done());
  // After an error, whatever still arrives is ignored.
  CHECK(stream.Receive(messages.back()).responses.empty());
  stream.Close();
  return last.status;
}

struct BadCase {
  std::string name;
  std::vector<ext_proc::ProcessingRequest> messages;
  absl::StatusCode code;
  std::string message;
};

TEST_CASE("out-of-order and malformed messages end the stream with a status naming what") {
  ext_proc::ProcessingRequest empty_name = Headers();
  empty_name.mutable_request_headers()->mutable_headers()->mutable_headers(1)->clear_key();
  ext_proc::ProcessingRequest observing = Headers();
  observing.set_observability_mode(true);
  google::protobuf::Value not_list;
  not_list.set_string_value("10.0.0.1:8000");
  google::protobuf::Value list_of_numbers;
  list_of_numbers.mutable_list_value()->add_values()->set_number_value(1);
  const absl::StatusCode kFailed = absl::StatusCode::kFailedPrecondition;
  const absl::StatusCode kInvalid = absl::StatusCode::kInvalidArgument;
  const std::vector<BadCase> cases = {
      {"nothing set",
       {ext_proc::ProcessingRequest()},
       kInvalid,
       "ProcessingRequest sets none of request_headers, request_body, request_trailers, "
       "response_headers, response_body, response_trailers"},
      {"body first", {Body("{}", true)}, kFailed, "request_body before request_headers"},
      {"trailers first", {RequestTrailers()}, kFailed, "request_trailers before request_headers"},
      {"headers twice",
       {Headers(), Headers()},
       kFailed,
       "request_headers arrived a second time on one stream (one stream per request)"},
      {"body after its end",
       {Headers(), Body("{}", true), Body("{}", true)},
       kFailed,
       "request_body after the request's end (end_of_stream was seen)"},
      {"trailers after the end",
       {Headers(true), RequestTrailers()},
       kFailed,
       "request_trailers after the request's end (end_of_stream was seen)"},
      {"response while held",
       {Headers(), ResponseHeaders("200")},
       kFailed,
       "response_headers before the request was routed (its request_headers answer was not sent "
       "yet)"},
      {"response twice",
       {Headers(true), ResponseHeaders("200"), ResponseHeaders("200")},
       kFailed,
       "response_headers arrived a second time on one stream"},
      {"response body first",
       {Headers(true), ResponseBody("x", true)},
       kFailed,
       "response_body before response_headers (the ext_proc filter's response_header_mode must "
       "be SEND)"},
      {"response body after its end",
       {Headers(true), ResponseHeaders("200"), ResponseBody("x", true), ResponseBody("y", true)},
       kFailed,
       "response_body after the response's end (end_of_stream was seen)"},
      {"response trailers first",
       {Headers(true), ResponseTrailers()},
       kFailed,
       "response_trailers before response_headers"},
      {"empty header name",
       {empty_name},
       kInvalid,
       "request_headers.headers[1]: empty header name"},
      {"bad status",
       {Headers(true), ResponseHeaders("2x0")},
       kInvalid,
       "response_headers: :status \"2x0\" is not an HTTP status code"},
      {"observability",
       {observing},
       kFailed,
       "observability_mode is set: the data plane would ignore the endpoint picker's answers "
       "(turn observability_mode off in the ext_proc filter)"},
      {"STREAMED requests",
       {WithConfig(Headers(), Mode::STREAMED, Mode::FULL_DUPLEX_STREAMED)},
       kFailed,
       "request_body_mode STREAMED is not supported: use FULL_DUPLEX_STREAMED (as GIE gateways "
       "do), BUFFERED or NONE"},
      {"GRPC requests",
       {WithConfig(Headers(), Mode::GRPC, Mode::FULL_DUPLEX_STREAMED)},
       kFailed,
       "request_body_mode GRPC is not supported: use FULL_DUPLEX_STREAMED (as GIE gateways do), "
       "BUFFERED or NONE"},
      {"GRPC responses",
       {WithConfig(Headers(), Mode::FULL_DUPLEX_STREAMED, Mode::GRPC)},
       kFailed,
       "response_body_mode GRPC is not supported: use FULL_DUPLEX_STREAMED, BUFFERED, STREAMED or "
       "NONE"},
      {"unknown mode",
       {WithConfig(Headers(), static_cast<BodySendMode>(9), Mode::FULL_DUPLEX_STREAMED)},
       kFailed,
       "request_body_mode (unknown) is not supported: use FULL_DUPLEX_STREAMED (as GIE gateways "
       "do), BUFFERED or NONE"},
      {"subset not a list",
       {WithSubset(Headers(), not_list)},
       kInvalid,
       "metadata_context.filter_metadata[\"envoy.lb.subset_hint\"]"
       "[\"x-gateway-destination-endpoint-subset\"] is not a list of \"IP:PORT\" strings"},
      {"subset of numbers",
       {WithSubset(Headers(), list_of_numbers)},
       kInvalid,
       "metadata_context.filter_metadata[\"envoy.lb.subset_hint\"]"
       "[\"x-gateway-destination-endpoint-subset\"][0] is not a string"},
      {"buffered trailers first",
       {WithConfig(Headers(), Mode::BUFFERED, Mode::BUFFERED), RequestTrailers()},
       kFailed,
       "request_trailers before request_body in BUFFERED mode: the destination goes on the "
       "body's answer"},
  };
  for (const BadCase& c : cases) {
    INFO(c.name);
    RecordingExchange exchange;
    const absl::Status status = After(c.messages, exchange);
    CHECK(status.code() == c.code);
    CHECK(status.message() == c.message);
    // A routed request finishes exactly once, by the response's end or when the stream closes.
    CHECK(exchange.finished.size() == exchange.routes.size());
  }
}

// Envoy's ext_proc filter applying a header mutation to `headers` as its mutation_utils.cc does:
// the value from raw_value (or only from value when `raw` is off), and `append` (unset: false)
// adding a value beside those of the name, else replacing all of them.
void ApplyAsEnvoy(const ext_proc::HeaderMutation& mutation, bool raw, HeaderList& headers) {
  for (const auto& option : mutation.set_headers()) {
    const std::string& value = raw ? option.header().raw_value() : option.header().value();
    if (!option.has_append() || !option.append().value()) {
      std::erase_if(headers, [&](const auto& h) { return h.first == option.header().key(); });
    }
    headers.emplace_back(option.header().key(), value);
  }
}

TEST_CASE("header values are answered in the field the request's headers came in") {
  for (const bool raw : {true, false}) {
    CAPTURE(raw);
    const auto as_sent = [raw](ext_proc::ProcessingRequest r) {
      return raw ? r : InValueField(std::move(r));
    };
    RecordingExchange exchange;
    ExtProcStream stream({}, exchange);
    // The client sent its own destination header: Envoy must end up with the picker's alone.
    const HeaderList client = {{"x-gateway-destination-endpoint", "10.9.9.9:1"}};
    stream.Receive(as_sent(Headers(false, client)));
    Step step = stream.Receive(Body("{}", true));
    REQUIRE(step.responses.size() == 2);
    const auto& common = step.responses[0].request_headers().response();
    CheckRoutes(step.responses[0], common, "10.0.0.7:8000", raw);
    CHECK(FindHeader(SetHeaders(common.header_mutation(), raw), "content-length") ==
          std::optional<absl::string_view>("2"));
    HeaderList applied = {{":path", "/v1/chat/completions"}, client[0]};
    ApplyAsEnvoy(common.header_mutation(), raw, applied);
    CHECK(applied == HeaderList{{":path", "/v1/chat/completions"},
                                {"x-gateway-destination-endpoint", "10.0.0.7:8000"},
                                {"content-length", "2"}});
    // The response's headers and an immediate response's, likewise.
    step = stream.Receive(as_sent(ResponseHeaders("200")));
    REQUIRE(step.responses.size() == 1);
    CHECK(SetHeaders(step.responses[0].response_headers().response().header_mutation(), raw) ==
          HeaderList{{"x-cacheroute-destination", "engine-7"}});
    RecordingExchange none;
    none.endpoint.clear();
    ExtProcStream refused({}, none);
    refused.Receive(as_sent(Headers()));
    step = refused.Receive(Body("{}", true));
    REQUIRE(step.responses.size() == 1);
    CHECK(SetHeaders(step.responses[0].immediate_response().headers(), raw) ==
          HeaderList{{"content-type", "application/json"}});
  }
}

TEST_CASE("the subset hint reaches the routing side; header values fall back to value") {
  RecordingExchange exchange;
  ExtProcStream stream({}, exchange);
  ext_proc::ProcessingRequest headers =
      WithSubset(Headers(true), StringList({"10.0.0.1:8000", "10.0.0.7:8000"}));
  auto* old = headers.mutable_request_headers()->mutable_headers()->add_headers();
  old->set_key("x-cacheroute-key");
  old->set_value("from-value");
  stream.Receive(headers);
  REQUIRE(exchange.routes.size() == 1);
  CHECK(exchange.routes[0].subset ==
        std::optional(std::vector<std::string>{"10.0.0.1:8000", "10.0.0.7:8000"}));
  CHECK(FindHeader(exchange.routes[0].headers, "x-cacheroute-key") ==
        std::optional<absl::string_view>("from-value"));

  RecordingExchange none;
  ExtProcStream without({}, none);
  without.Receive(Headers(true));
  CHECK_FALSE(none.routes.at(0).subset.has_value());
  RecordingExchange empty;
  ExtProcStream empty_list({}, empty);
  empty_list.Receive(WithSubset(Headers(true), StringList({})));
  CHECK(empty.routes.at(0).subset == std::optional(std::vector<std::string>{}));
}

TEST_CASE("fallbacks follow the endpoint, comma-separated, in the header and the metadata alike") {
  for (const BodySendMode mode : {Mode::FULL_DUPLEX_STREAMED, Mode::BUFFERED}) {
    CAPTURE(mode);
    RecordingExchange exchange;
    exchange.fallbacks = {"10.0.0.8:8000", "[fd00::9]:8000"};
    ExtProcStream stream({.request_body_mode = mode}, exchange);
    stream.Receive(Headers());
    const Step step = stream.Receive(Body("{}", true));
    const ext_proc::ProcessingResponse& routed = step.responses.at(0);
    CheckRoutes(routed,
                mode == Mode::BUFFERED ? routed.request_body().response()
                                       : routed.request_headers().response(),
                "10.0.0.7:8000,10.0.0.8:8000,[fd00::9]:8000");
  }
}

TEST_CASE("the served endpoint reaches the routing side: metadata first, else the header") {
  const auto served_by = [](const ext_proc::ProcessingRequest& response_headers) {
    RecordingExchange exchange;
    ExtProcStream stream({}, exchange);
    stream.Receive(Headers(true));
    const Step step = stream.Receive(response_headers);
    CHECK(step.status.ok());
    REQUIRE(exchange.served.size() == 1);
    return exchange.served[0];
  };
  CHECK_FALSE(served_by(ResponseHeaders("200")).has_value());
  CHECK(served_by(WithServed(ResponseHeaders("200"), String("10.0.0.8:8000"))) ==
        std::optional<std::string>("10.0.0.8:8000"));
  ext_proc::ProcessingRequest with_header = ResponseHeaders("200");
  auto* h = with_header.mutable_response_headers()->mutable_headers()->add_headers();
  h->set_key("x-gateway-destination-endpoint-served");
  h->set_raw_value("10.0.0.9:8000");
  CHECK(served_by(with_header) == std::optional<std::string>("10.0.0.9:8000"));
  CHECK(served_by(WithServed(with_header, String("10.0.0.8:8000"))) ==
        std::optional<std::string>("10.0.0.8:8000"));
  // Not a string: passed on as its JSON text, which names no endpoint; the stream goes on.
  CHECK(served_by(WithServed(ResponseHeaders("200"), StringList({"10.0.0.8:8000"}))) ==
        std::optional<std::string>(R"(["10.0.0.8:8000"])"));
}

TEST_CASE("a stream that ends before the response's end finishes the request once, incomplete") {
  RecordingExchange exchange;
  ExtProcStream stream({}, exchange);
  stream.Receive(Headers(true));
  stream.Receive(ResponseHeaders("200"));
  stream.Receive(ResponseBody("data: {}\n\n", false));
  stream.Close();
  stream.Close();
  CHECK(exchange.finished == std::vector<bool>{false});
  // Response trailers end the response too.
  RecordingExchange trailers;
  ExtProcStream with_trailers({}, trailers);
  with_trailers.Receive(Headers(true));
  with_trailers.Receive(ResponseHeaders("200"));
  const Step step = with_trailers.Receive(ResponseTrailers());
  REQUIRE(step.responses.size() == 1);
  CHECK(step.responses[0].has_response_trailers());
  CHECK(trailers.finished == std::vector<bool>{true});
  // A response without :status is reported as 0.
  RecordingExchange no_status;
  ExtProcStream missing({}, no_status);
  missing.Receive(Headers(true));
  ext_proc::ProcessingRequest bare;
  bare.mutable_response_headers();
  missing.Receive(bare);
  CHECK(no_status.statuses == std::vector<int>{0});
}

}  // namespace
}  // namespace cacheroute::epp
