// The Envoy ext_proc messages of proto/envoy/ against Envoy's published API: every field of our
// definitions has the published name, number and type (the table below, transcribed from
// api/envoy/service/ext_proc/v3/external_processor.proto, api/envoy/config/core/v3/base.proto,
// api/envoy/extensions/filters/http/ext_proc/v3/processing_mode.proto and
// api/envoy/type/v3/http_status.proto of Envoy's main branch, as mirrored by
// envoyproxy/data-plane-api at 84e84367f256), messages encoded by hand from those numbers parse
// with our classes (published fields we left out, and fields no version has, are skipped), and
// what our classes encode decodes by hand to the published numbers.
#include <catch2/catch.hpp>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "envoy/service/ext_proc/v3/external_processor.grpc.pb.h"
#include "envoy/service/ext_proc/v3/external_processor.pb.h"
#include "google/protobuf/descriptor.h"
#include "tests/support/proto_wire.h"

namespace cacheroute::epp {
namespace {

using ::cacheroute::testing::FieldsNumbered;
using ::cacheroute::testing::OnlyField;
using ::cacheroute::testing::ReadWire;
using ::cacheroute::testing::WireField;
using ::cacheroute::testing::WireWriter;
using FD = google::protobuf::FieldDescriptor;
namespace ext_proc = ::envoy::service::ext_proc::v3;

struct PublishedField {
  std::string message;  // full name
  std::string field;
  int number;
  FD::Type type;
  std::string type_name;  // full name of a message or enum field's type; "" otherwise
  bool repeated;
};

constexpr const char* kCore = "envoy.config.core.v3.";
constexpr const char* kExtProc = "envoy.service.ext_proc.v3.";
constexpr const char* kMode = "envoy.extensions.filters.http.ext_proc.v3.ProcessingMode";

std::vector<PublishedField> Published() {
  const std::string core(kCore), svc(kExtProc), mode(kMode);
  return {
      {core + "Metadata", "filter_metadata", 1, FD::TYPE_MESSAGE,
       core + "Metadata.FilterMetadataEntry", true},
      {core + "HeaderValue", "key", 1, FD::TYPE_STRING, "", false},
      {core + "HeaderValue", "value", 2, FD::TYPE_STRING, "", false},
      {core + "HeaderValue", "raw_value", 3, FD::TYPE_BYTES, "", false},
      {core + "HeaderValueOption", "header", 1, FD::TYPE_MESSAGE, core + "HeaderValue", false},
      {core + "HeaderValueOption", "append", 2, FD::TYPE_MESSAGE, "google.protobuf.BoolValue",
       false},
      {core + "HeaderValueOption", "append_action", 3, FD::TYPE_ENUM,
       core + "HeaderValueOption.HeaderAppendAction", false},
      {core + "HeaderValueOption", "keep_empty_value", 4, FD::TYPE_BOOL, "", false},
      {core + "HeaderMap", "headers", 1, FD::TYPE_MESSAGE, core + "HeaderValue", true},
      {"envoy.type.v3.HttpStatus", "code", 1, FD::TYPE_ENUM, "envoy.type.v3.StatusCode", false},
      {mode, "request_header_mode", 1, FD::TYPE_ENUM, mode + ".HeaderSendMode", false},
      {mode, "response_header_mode", 2, FD::TYPE_ENUM, mode + ".HeaderSendMode", false},
      {mode, "request_body_mode", 3, FD::TYPE_ENUM, mode + ".BodySendMode", false},
      {mode, "response_body_mode", 4, FD::TYPE_ENUM, mode + ".BodySendMode", false},
      {mode, "request_trailer_mode", 5, FD::TYPE_ENUM, mode + ".HeaderSendMode", false},
      {mode, "response_trailer_mode", 6, FD::TYPE_ENUM, mode + ".HeaderSendMode", false},
      {svc + "ProtocolConfiguration", "request_body_mode", 1, FD::TYPE_ENUM, mode + ".BodySendMode",
       false},
      {svc + "ProtocolConfiguration", "response_body_mode", 2, FD::TYPE_ENUM,
       mode + ".BodySendMode", false},
      {svc + "ProtocolConfiguration", "send_body_without_waiting_for_header_response", 3,
       FD::TYPE_BOOL, "", false},
      {svc + "ProcessingRequest", "request_headers", 2, FD::TYPE_MESSAGE, svc + "HttpHeaders",
       false},
      {svc + "ProcessingRequest", "response_headers", 3, FD::TYPE_MESSAGE, svc + "HttpHeaders",
       false},
      {svc + "ProcessingRequest", "request_body", 4, FD::TYPE_MESSAGE, svc + "HttpBody", false},
      {svc + "ProcessingRequest", "response_body", 5, FD::TYPE_MESSAGE, svc + "HttpBody", false},
      {svc + "ProcessingRequest", "request_trailers", 6, FD::TYPE_MESSAGE, svc + "HttpTrailers",
       false},
      {svc + "ProcessingRequest", "response_trailers", 7, FD::TYPE_MESSAGE, svc + "HttpTrailers",
       false},
      {svc + "ProcessingRequest", "metadata_context", 8, FD::TYPE_MESSAGE, core + "Metadata",
       false},
      {svc + "ProcessingRequest", "observability_mode", 10, FD::TYPE_BOOL, "", false},
      {svc + "ProcessingRequest", "protocol_config", 11, FD::TYPE_MESSAGE,
       svc + "ProtocolConfiguration", false},
      {svc + "HttpHeaders", "headers", 1, FD::TYPE_MESSAGE, core + "HeaderMap", false},
      {svc + "HttpHeaders", "end_of_stream", 3, FD::TYPE_BOOL, "", false},
      {svc + "HttpBody", "body", 1, FD::TYPE_BYTES, "", false},
      {svc + "HttpBody", "end_of_stream", 2, FD::TYPE_BOOL, "", false},
      {svc + "HttpTrailers", "trailers", 1, FD::TYPE_MESSAGE, core + "HeaderMap", false},
      {svc + "ProcessingResponse", "request_headers", 1, FD::TYPE_MESSAGE, svc + "HeadersResponse",
       false},
      {svc + "ProcessingResponse", "response_headers", 2, FD::TYPE_MESSAGE, svc + "HeadersResponse",
       false},
      {svc + "ProcessingResponse", "request_body", 3, FD::TYPE_MESSAGE, svc + "BodyResponse",
       false},
      {svc + "ProcessingResponse", "response_body", 4, FD::TYPE_MESSAGE, svc + "BodyResponse",
       false},
      {svc + "ProcessingResponse", "request_trailers", 5, FD::TYPE_MESSAGE,
       svc + "TrailersResponse", false},
      {svc + "ProcessingResponse", "response_trailers", 6, FD::TYPE_MESSAGE,
       svc + "TrailersResponse", false},
      {svc + "ProcessingResponse", "immediate_response", 7, FD::TYPE_MESSAGE,
       svc + "ImmediateResponse", false},
      {svc + "ProcessingResponse", "dynamic_metadata", 8, FD::TYPE_MESSAGE,
       "google.protobuf.Struct", false},
      {svc + "ProcessingResponse", "mode_override", 9, FD::TYPE_MESSAGE, mode, false},
      {svc + "HeadersResponse", "response", 1, FD::TYPE_MESSAGE, svc + "CommonResponse", false},
      {svc + "BodyResponse", "response", 1, FD::TYPE_MESSAGE, svc + "CommonResponse", false},
      {svc + "TrailersResponse", "header_mutation", 1, FD::TYPE_MESSAGE, svc + "HeaderMutation",
       false},
      {svc + "CommonResponse", "status", 1, FD::TYPE_ENUM, svc + "CommonResponse.ResponseStatus",
       false},
      {svc + "CommonResponse", "header_mutation", 2, FD::TYPE_MESSAGE, svc + "HeaderMutation",
       false},
      {svc + "CommonResponse", "body_mutation", 3, FD::TYPE_MESSAGE, svc + "BodyMutation", false},
      {svc + "CommonResponse", "trailers", 4, FD::TYPE_MESSAGE, core + "HeaderMap", false},
      {svc + "CommonResponse", "clear_route_cache", 5, FD::TYPE_BOOL, "", false},
      {svc + "ImmediateResponse", "status", 1, FD::TYPE_MESSAGE, "envoy.type.v3.HttpStatus", false},
      {svc + "ImmediateResponse", "headers", 2, FD::TYPE_MESSAGE, svc + "HeaderMutation", false},
      {svc + "ImmediateResponse", "body", 3, FD::TYPE_BYTES, "", false},
      {svc + "ImmediateResponse", "grpc_status", 4, FD::TYPE_MESSAGE, svc + "GrpcStatus", false},
      {svc + "ImmediateResponse", "details", 5, FD::TYPE_STRING, "", false},
      {svc + "GrpcStatus", "status", 1, FD::TYPE_UINT32, "", false},
      {svc + "HeaderMutation", "set_headers", 1, FD::TYPE_MESSAGE, core + "HeaderValueOption",
       true},
      {svc + "HeaderMutation", "remove_headers", 2, FD::TYPE_STRING, "", true},
      {svc + "StreamedBodyResponse", "body", 1, FD::TYPE_BYTES, "", false},
      {svc + "StreamedBodyResponse", "end_of_stream", 2, FD::TYPE_BOOL, "", false},
      {svc + "BodyMutation", "body", 1, FD::TYPE_BYTES, "", false},
      {svc + "BodyMutation", "clear_body", 2, FD::TYPE_BOOL, "", false},
      {svc + "BodyMutation", "streamed_response", 3, FD::TYPE_MESSAGE, svc + "StreamedBodyResponse",
       false},
  };
}

// Published enum values (name, number) of the enums we define.
const std::vector<std::tuple<std::string, std::string, int>>& PublishedEnumValues() {
  static const std::vector<std::tuple<std::string, std::string, int>> values = [] {
    const std::string mode(kMode), core(kCore), svc(kExtProc);
    std::vector<std::tuple<std::string, std::string, int>> v = {
        {mode + ".BodySendMode", "NONE", 0},
        {mode + ".BodySendMode", "STREAMED", 1},
        {mode + ".BodySendMode", "BUFFERED", 2},
        {mode + ".BodySendMode", "BUFFERED_PARTIAL", 3},
        {mode + ".BodySendMode", "FULL_DUPLEX_STREAMED", 4},
        {mode + ".BodySendMode", "GRPC", 5},
        {mode + ".HeaderSendMode", "DEFAULT", 0},
        {mode + ".HeaderSendMode", "SEND", 1},
        {mode + ".HeaderSendMode", "SKIP", 2},
        {core + "HeaderValueOption.HeaderAppendAction", "APPEND_IF_EXISTS_OR_ADD", 0},
        {core + "HeaderValueOption.HeaderAppendAction", "ADD_IF_ABSENT", 1},
        {core + "HeaderValueOption.HeaderAppendAction", "OVERWRITE_IF_EXISTS_OR_ADD", 2},
        {core + "HeaderValueOption.HeaderAppendAction", "OVERWRITE_IF_EXISTS", 3},
        {svc + "CommonResponse.ResponseStatus", "CONTINUE", 0},
        {svc + "CommonResponse.ResponseStatus", "CONTINUE_AND_REPLACE", 1},
    };
    // StatusCode: ours lists the codes the endpoint picker answers with; Envoy's names them so.
    for (const auto& [name, code] :
         std::vector<std::pair<std::string, int>>{{"Empty", 0},
                                                  {"OK", 200},
                                                  {"BadRequest", 400},
                                                  {"PayloadTooLarge", 413},
                                                  {"TooManyRequests", 429},
                                                  {"InternalServerError", 500},
                                                  {"BadGateway", 502},
                                                  {"ServiceUnavailable", 503},
                                                  {"GatewayTimeout", 504}}) {
      v.emplace_back("envoy.type.v3.StatusCode", name, code);
    }
    return v;
  }();
  return values;
}

const google::protobuf::DescriptorPool& Pool() {
  // Linking the generated code registers every file; this makes sure it is loaded.
  (void)ext_proc::ProcessingRequest::descriptor();
  return *google::protobuf::DescriptorPool::generated_pool();
}

TEST_CASE("every field of our Envoy messages has the published name, number and type") {
  std::set<std::pair<std::string, std::string>> published;
  for (const PublishedField& p : Published()) {
    INFO(p.message << "." << p.field);
    published.insert({p.message, p.field});
    const google::protobuf::Descriptor* message = Pool().FindMessageTypeByName(p.message);
    REQUIRE(message != nullptr);
    const FD* field = message->FindFieldByName(p.field);
    REQUIRE(field != nullptr);
    CHECK(field->number() == p.number);
    CHECK(field->type() == p.type);
    CHECK(field->is_repeated() == p.repeated);
    if (field->message_type() != nullptr) CHECK(field->message_type()->full_name() == p.type_name);
    if (field->enum_type() != nullptr) CHECK(field->enum_type()->full_name() == p.type_name);
  }
  // And nothing of ours is missing from the table (a field added with a wrong number would be).
  for (const char* file : {"envoy/config/core/v3/base.proto", "envoy/type/v3/http_status.proto",
                           "envoy/extensions/filters/http/ext_proc/v3/processing_mode.proto",
                           "envoy/service/ext_proc/v3/external_processor.proto"}) {
    const google::protobuf::FileDescriptor* fd = Pool().FindFileByName(file);
    REQUIRE(fd != nullptr);
    std::vector<const google::protobuf::Descriptor*> messages;
    for (int i = 0; i < fd->message_type_count(); ++i) messages.push_back(fd->message_type(i));
    for (size_t m = 0; m < messages.size(); ++m) {
      const google::protobuf::Descriptor* d = messages[m];
      if (d->options().map_entry()) continue;
      for (int i = 0; i < d->nested_type_count(); ++i) messages.push_back(d->nested_type(i));
      for (int i = 0; i < d->field_count(); ++i) {
        INFO(d->full_name() << "." << d->field(i)->name());
        CHECK(published.count({d->full_name(), d->field(i)->name()}) == 1);
      }
    }
  }
}

TEST_CASE("every enum value of ours has the published name and number") {
  for (const auto& [enum_name, value, number] : PublishedEnumValues()) {
    INFO(enum_name << "." << value);
    const google::protobuf::EnumDescriptor* e = Pool().FindEnumTypeByName(enum_name);
    REQUIRE(e != nullptr);
    const google::protobuf::EnumValueDescriptor* v = e->FindValueByName(value);
    REQUIRE(v != nullptr);
    CHECK(v->number() == number);
  }
}

TEST_CASE("the service is Envoy's: /envoy.service.ext_proc.v3.ExternalProcessor/Process, streams") {
  const google::protobuf::ServiceDescriptor* service =
      Pool().FindServiceByName("envoy.service.ext_proc.v3.ExternalProcessor");
  REQUIRE(service != nullptr);
  const google::protobuf::MethodDescriptor* process = service->FindMethodByName("Process");
  REQUIRE(process != nullptr);
  CHECK(process->client_streaming());
  CHECK(process->server_streaming());
  CHECK(process->input_type()->full_name() == "envoy.service.ext_proc.v3.ProcessingRequest");
  CHECK(process->output_type()->full_name() == "envoy.service.ext_proc.v3.ProcessingResponse");
}

// google.protobuf.Struct, Value and ListValue by their (well-known) numbers.
WireWriter StringValue(const std::string& s) { return WireWriter().Bytes(3, s); }
WireWriter StructOf(const std::vector<std::pair<std::string, WireWriter>>& fields) {
  WireWriter w;
  for (const auto& [key, value] : fields) {
    w.Message(1, WireWriter().Bytes(1, key).Message(2, value));
  }
  return w;
}

TEST_CASE("a request_headers message encoded by hand from Envoy's numbers parses") {
  const WireWriter headers =
      WireWriter()
          .Message(1, WireWriter().Bytes(1, ":path").Bytes(3, "/v1/chat/completions"))
          .Message(1, WireWriter().Bytes(1, "x-old").Bytes(2, "value-not-raw"))
          // A field HeaderValue does not have: skipped.
          .Message(1, WireWriter().Bytes(1, "x-k").Bytes(3, "v").Varint(15, 7));
  const WireWriter subset_list = WireWriter()
                                     .Message(1, StringValue("10.0.0.1:8000"))  // ListValue.values
                                     .Message(1, StringValue("10.0.0.2:8000"));
  const WireWriter hint = StructOf({{"x-gateway-destination-endpoint-subset",
                                     WireWriter().Message(6, subset_list)}});  // Value.list_value
  const std::string bytes =
      WireWriter()
          .Message(2, WireWriter()
                          .Message(1, headers)
                          // 2: attributes (deprecated), left out of ours.
                          .Message(2, WireWriter().Bytes(1, "a").Message(2, StructOf({})))
                          .Varint(3, 0))
          .Message(8, WireWriter().Message(
                          1, WireWriter().Bytes(1, "envoy.lb.subset_hint").Message(2, hint)))
          // 9: attributes, left out of ours.
          .Message(9, WireWriter().Bytes(1, "request.path").Message(2, StructOf({})))
          .Varint(10, 0)
          .Message(11, WireWriter().Varint(1, 4).Varint(2, 2).Varint(3, 1))
          // Numbers no version of Envoy uses, of every wire type.
          .Varint(1000, 1)
          .Fixed64(1001, 2)
          .Fixed32(1002, 3)
          .Bytes(1003, "x")
          .str();
  ext_proc::ProcessingRequest request;
  REQUIRE(request.ParseFromString(bytes));
  REQUIRE(request.request_case() == ext_proc::ProcessingRequest::kRequestHeaders);
  const auto& h = request.request_headers();
  REQUIRE(h.headers().headers_size() == 3);
  CHECK(h.headers().headers(0).key() == ":path");
  CHECK(h.headers().headers(0).raw_value() == "/v1/chat/completions");
  CHECK(h.headers().headers(1).value() == "value-not-raw");
  CHECK(h.headers().headers(2).raw_value() == "v");
  CHECK_FALSE(h.end_of_stream());
  const auto& ns = request.metadata_context().filter_metadata();
  REQUIRE(ns.count("envoy.lb.subset_hint") == 1);
  const auto& list = ns.at("envoy.lb.subset_hint")
                         .fields()
                         .at("x-gateway-destination-endpoint-subset")
                         .list_value();
  REQUIRE(list.values_size() == 2);
  CHECK(list.values(1).string_value() == "10.0.0.2:8000");
  CHECK(request.protocol_config().request_body_mode() ==
        envoy::extensions::filters::http::ext_proc::v3::ProcessingMode::FULL_DUPLEX_STREAMED);
  CHECK(request.protocol_config().response_body_mode() ==
        envoy::extensions::filters::http::ext_proc::v3::ProcessingMode::BUFFERED);
  CHECK(request.protocol_config().send_body_without_waiting_for_header_response());
}

TEST_CASE("body, trailer and response phases encoded by hand parse to the right phase") {
  const std::string body = WireWriter()
                               .Bytes(1, "{\"user\":\"u\"}")
                               .Varint(2, 1)
                               // 3, 4: GRPC-mode fields, left out of ours.
                               .Varint(3, 1)
                               .Varint(4, 1)
                               .str();
  const std::string header_map =
      WireWriter().Message(1, WireWriter().Bytes(1, ":status").Bytes(3, "200")).str();
  struct Case {
    uint32_t number;
    std::string payload;
    ext_proc::ProcessingRequest::RequestCase expected;
  };
  const std::vector<Case> cases = {
      {4, body, ext_proc::ProcessingRequest::kRequestBody},
      {5, body, ext_proc::ProcessingRequest::kResponseBody},
      {3, WireWriter().Bytes(1, header_map).Varint(3, 1).str(),
       ext_proc::ProcessingRequest::kResponseHeaders},
      {6, WireWriter().Bytes(1, header_map).str(), ext_proc::ProcessingRequest::kRequestTrailers},
      {7, WireWriter().Bytes(1, header_map).str(), ext_proc::ProcessingRequest::kResponseTrailers},
  };
  for (const Case& c : cases) {
    INFO("field " << c.number);
    ext_proc::ProcessingRequest request;
    REQUIRE(request.ParseFromString(WireWriter().Bytes(c.number, c.payload).str()));
    REQUIRE(request.request_case() == c.expected);
    switch (c.expected) {
      case ext_proc::ProcessingRequest::kRequestBody:
        CHECK(request.request_body().body() == "{\"user\":\"u\"}");
        CHECK(request.request_body().end_of_stream());
        break;
      case ext_proc::ProcessingRequest::kResponseBody:
        CHECK(request.response_body().end_of_stream());
        break;
      case ext_proc::ProcessingRequest::kResponseHeaders:
        CHECK(request.response_headers().headers().headers(0).raw_value() == "200");
        CHECK(request.response_headers().end_of_stream());
        break;
      case ext_proc::ProcessingRequest::kRequestTrailers:
        CHECK(request.request_trailers().trailers().headers(0).key() == ":status");
        break;
      default:
        CHECK(request.response_trailers().trailers().headers_size() == 1);
    }
  }
}

// Decodes a HeaderValueOption by hand: (key, raw_value, value, append_action).
std::tuple<std::string, std::string, std::string, uint64_t> ReadOption(const std::string& bytes) {
  const std::vector<WireField> option = ReadWire(bytes);
  const std::vector<WireField> header = ReadWire(OnlyField(option, 1).bytes);
  const std::vector<WireField> action = FieldsNumbered(option, 3);
  const std::vector<WireField> value = FieldsNumbered(header, 2);
  return {OnlyField(header, 1).bytes, OnlyField(header, 3).bytes,
          value.empty() ? "" : value[0].bytes, action.empty() ? 0 : action[0].value};
}

TEST_CASE("what our classes encode decodes by hand to Envoy's numbers") {
  SECTION("a request_headers answer with a header, cleared route cache and dynamic metadata") {
    ext_proc::ProcessingResponse response;
    auto* common = response.mutable_request_headers()->mutable_response();
    auto* option = common->mutable_header_mutation()->add_set_headers();
    option->mutable_header()->set_key("x-gateway-destination-endpoint");
    option->mutable_header()->set_raw_value("10.0.0.1:8000");
    option->set_append_action(
        envoy::config::core::v3::HeaderValueOption::OVERWRITE_IF_EXISTS_OR_ADD);
    common->set_clear_route_cache(true);
    (*(*response.mutable_dynamic_metadata()->mutable_fields())["envoy.lb"]
          .mutable_struct_value()
          ->mutable_fields())["x-gateway-destination-endpoint"]
        .set_string_value("10.0.0.1:8000");

    const std::vector<WireField> top = ReadWire(response.SerializeAsString());
    const std::vector<WireField> common_fields =
        ReadWire(OnlyField(ReadWire(OnlyField(top, 1).bytes), 1).bytes);
    CHECK(OnlyField(common_fields, 5).value == 1);  // clear_route_cache
    const std::vector<WireField> mutation = ReadWire(OnlyField(common_fields, 2).bytes);
    const auto [key, raw, value, action] = ReadOption(OnlyField(mutation, 1).bytes);
    CHECK(key == "x-gateway-destination-endpoint");
    CHECK(raw == "10.0.0.1:8000");
    CHECK(value.empty());  // setting both is rejected by Envoy
    CHECK(action == 2);    // OVERWRITE_IF_EXISTS_OR_ADD
    // dynamic_metadata (8): Struct{fields{"envoy.lb": Value{struct_value(5): Struct{fields{
    // "x-gateway-destination-endpoint": Value{string_value(3)}}}}}}
    const std::vector<WireField> entry =
        ReadWire(OnlyField(ReadWire(OnlyField(top, 8).bytes), 1).bytes);
    CHECK(OnlyField(entry, 1).bytes == "envoy.lb");
    const std::vector<WireField> inner = ReadWire(
        OnlyField(ReadWire(OnlyField(ReadWire(OnlyField(entry, 2).bytes), 5).bytes), 1).bytes);
    CHECK(OnlyField(inner, 1).bytes == "x-gateway-destination-endpoint");
    CHECK(OnlyField(ReadWire(OnlyField(inner, 2).bytes), 3).bytes == "10.0.0.1:8000");
  }
  SECTION("an immediate response") {
    ext_proc::ProcessingResponse response;
    auto* immediate = response.mutable_immediate_response();
    immediate->mutable_status()->set_code(envoy::type::v3::ServiceUnavailable);
    auto* option = immediate->mutable_headers()->add_set_headers();
    option->mutable_header()->set_key("content-type");
    option->mutable_header()->set_raw_value("application/json");
    immediate->set_body("{}");
    immediate->set_details("why");
    const std::vector<WireField> fields =
        ReadWire(OnlyField(ReadWire(response.SerializeAsString()), 7).bytes);
    CHECK(OnlyField(ReadWire(OnlyField(fields, 1).bytes), 1).value == 503);
    CHECK(std::get<0>(ReadOption(OnlyField(ReadWire(OnlyField(fields, 2).bytes), 1).bytes)) ==
          "content-type");
    CHECK(OnlyField(fields, 3).bytes == "{}");
    CHECK(OnlyField(fields, 5).bytes == "why");
  }
  SECTION("streamed body answers of both directions, and the other phases' answers") {
    for (const uint32_t number : {3u, 4u}) {
      ext_proc::ProcessingResponse response;
      auto* body = number == 3 ? response.mutable_request_body() : response.mutable_response_body();
      auto* streamed =
          body->mutable_response()->mutable_body_mutation()->mutable_streamed_response();
      streamed->set_body("chunk");
      streamed->set_end_of_stream(true);
      const std::vector<WireField> common = ReadWire(
          OnlyField(ReadWire(OnlyField(ReadWire(response.SerializeAsString()), number).bytes), 1)
              .bytes);
      const std::vector<WireField> s =
          ReadWire(OnlyField(ReadWire(OnlyField(common, 3).bytes), 3).bytes);
      CHECK(OnlyField(s, 1).bytes == "chunk");
      CHECK(OnlyField(s, 2).value == 1);
    }
    ext_proc::ProcessingResponse headers, request_trailers, response_trailers;
    headers.mutable_response_headers();
    request_trailers.mutable_request_trailers();
    response_trailers.mutable_response_trailers();
    CHECK(OnlyField(ReadWire(headers.SerializeAsString()), 2).bytes.empty());
    CHECK(OnlyField(ReadWire(request_trailers.SerializeAsString()), 5).bytes.empty());
    CHECK(OnlyField(ReadWire(response_trailers.SerializeAsString()), 6).bytes.empty());
  }
}

}  // namespace
}  // namespace cacheroute::epp
