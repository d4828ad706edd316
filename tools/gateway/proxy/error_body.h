// Error answers in the shape the OpenAI API and vLLM use, so that clients' error handling works
// unchanged against the gateway:
//   {"error":{"message":"…","type":"…","param":null,"code":502}}
// `type` is invalid_request_error (the client's fault: 400, 401, 404, 405), upstream_error (502),
// upstream_timeout (504) or service_unavailable (503). An answer about an upstream names it in
// X-CacheRoute-Destination.
//
// The body is openai_fields.h's ErrorBody.
//
// Usage (in a handler coroutine):
//   co_await SendError(x, 503, "no upstream is up", "service_unavailable");
#pragma once

#include <string>

#include "absl/strings/string_view.h"
#include "tools/gateway/openai_fields.h"  // ErrorBody
#include "tools/http/server.h"

namespace cacheroute::gateway {

// Answers `x` with `status` and ErrorBody; with `destination`, naming it in
// X-CacheRoute-Destination.
http::asio::awaitable<void> SendError(http::Exchange& x, int status, absl::string_view message,
                                      absl::string_view type, absl::string_view destination = "");

}  // namespace cacheroute::gateway
