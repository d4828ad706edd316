// Test-only: the ProcessingRequests Envoy's ext_proc filter sends, built the way it builds them
// (header values in raw_value, or with InValueField in value; pseudo-headers included), for the
// tests of cacheroute-epp.
//
// Usage:
//   Receive(Headers());  Receive(Body("{...}", true));  Receive(ResponseHeaders("200"));
#pragma once

#include <string>
#include <vector>

#include "tools/epp/ext_proc_stream.h"

namespace cacheroute::epp {

// A chat completion's request headers (POST /v1/chat/completions, JSON), then `extra`.
inline ext_proc::ProcessingRequest Headers(bool end_of_stream = false,
                                           const HeaderList& extra = {}) {
  ext_proc::ProcessingRequest r;
  auto* map = r.mutable_request_headers()->mutable_headers();
  for (const auto& [key, value] : HeaderList{{":method", "POST"},
                                             {":path", "/v1/chat/completions"},
                                             {"content-type", "application/json"}}) {
    auto* h = map->add_headers();
    h->set_key(key);
    h->set_raw_value(value);
  }
  for (const auto& [key, value] : extra) {
    auto* h = map->add_headers();
    h->set_key(key);
    h->set_raw_value(value);
  }
  r.mutable_request_headers()->set_end_of_stream(end_of_stream);
  return r;
}

// `r` as an Envoy with envoy.reloadable_features.send_header_raw_value off sends it: every
// header value in `value` instead of raw_value.
inline ext_proc::ProcessingRequest InValueField(ext_proc::ProcessingRequest r) {
  envoy::config::core::v3::HeaderMap* map =
      r.has_request_headers()    ? r.mutable_request_headers()->mutable_headers()
      : r.has_response_headers() ? r.mutable_response_headers()->mutable_headers()
                                 : nullptr;
  if (map == nullptr) return r;
  for (auto& h : *map->mutable_headers()) {
    if (h.raw_value().empty()) continue;
    h.set_value(h.raw_value());
    h.clear_raw_value();
  }
  return r;
}

inline ext_proc::ProcessingRequest WithConfig(ext_proc::ProcessingRequest r,
                                              BodySendMode request_mode,
                                              BodySendMode response_mode) {
  r.mutable_protocol_config()->set_request_body_mode(request_mode);
  r.mutable_protocol_config()->set_response_body_mode(response_mode);
  return r;
}

inline ext_proc::ProcessingRequest WithSubset(ext_proc::ProcessingRequest r,
                                              const google::protobuf::Value& value) {
  (*(*r.mutable_metadata_context()->mutable_filter_metadata())["envoy.lb.subset_hint"]
        .mutable_fields())["x-gateway-destination-endpoint-subset"] = value;
  return r;
}

// GIE's served endpoint in the message's metadata_context, as the data plane reports it on the
// response headers.
inline ext_proc::ProcessingRequest WithServed(ext_proc::ProcessingRequest r,
                                              const google::protobuf::Value& value) {
  (*(*r.mutable_metadata_context()->mutable_filter_metadata())["envoy.lb"]
        .mutable_fields())["x-gateway-destination-endpoint-served"] = value;
  return r;
}

inline google::protobuf::Value String(const std::string& s) {
  google::protobuf::Value v;
  v.set_string_value(s);
  return v;
}

inline google::protobuf::Value StringList(const std::vector<std::string>& items) {
  google::protobuf::Value v;
  auto* list = v.mutable_list_value();
  for (const std::string& s : items) list->add_values()->set_string_value(s);
  return v;
}

inline ext_proc::ProcessingRequest Body(const std::string& bytes, bool end_of_stream) {
  ext_proc::ProcessingRequest r;
  r.mutable_request_body()->set_body(bytes);
  r.mutable_request_body()->set_end_of_stream(end_of_stream);
  return r;
}

inline ext_proc::ProcessingRequest RequestTrailers() {
  ext_proc::ProcessingRequest r;
  r.mutable_request_trailers();
  return r;
}

inline ext_proc::ProcessingRequest ResponseHeaders(const std::string& status,
                                                   bool end_of_stream = false) {
  ext_proc::ProcessingRequest r;
  auto* h = r.mutable_response_headers()->mutable_headers()->add_headers();
  h->set_key(":status");
  h->set_raw_value(status);
  auto* ct = r.mutable_response_headers()->mutable_headers()->add_headers();
  ct->set_key("content-type");
  ct->set_raw_value("text/event-stream");
  r.mutable_response_headers()->set_end_of_stream(end_of_stream);
  return r;
}

inline ext_proc::ProcessingRequest ResponseBody(const std::string& bytes, bool end_of_stream) {
  ext_proc::ProcessingRequest r;
  r.mutable_response_body()->set_body(bytes);
  r.mutable_response_body()->set_end_of_stream(end_of_stream);
  return r;
}

inline ext_proc::ProcessingRequest ResponseTrailers() {
  ext_proc::ProcessingRequest r;
  r.mutable_response_trailers();
  return r;
}

}  // namespace cacheroute::epp
