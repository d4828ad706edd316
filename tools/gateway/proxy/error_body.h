// Error answers in the shape the OpenAI API uses, so that clients' error handling works unchanged
// against the gateway:
//   {"error":{"message":"…","type":"…","param":null,"code":"upstream_error"}}
// `type` is invalid_request_error (the client's fault: 401, 404, 405), upstream_error (502),
// upstream_timeout (504) or service_unavailable (503); `code` a string naming the error
// (docs/gateway.md, "Errors"), as OpenAI's codes are strings. An answer about an upstream names it
// in X-CacheRoute-Destination.
//
// The body is openai_fields.h's ErrorBody.
//
// Usage (in a handler coroutine):
//   co_await SendError(x, 503, "no upstream is up", "service_unavailable", "no_upstream");
#pragma once

#include <string>

#include "absl/strings/string_view.h"
#include "tools/frontend/openai_fields.h"  // ErrorBody
#include "tools/http/server.h"

namespace cacheroute::gateway {

// Answers `x` with `status` and ErrorBody; with `destination`, naming it in
// X-CacheRoute-Destination.
http::asio::awaitable<void> SendError(http::Exchange& x, int status, absl::string_view message,
                                      absl::string_view type, absl::string_view code,
                                      absl::string_view destination = "");

}  // namespace cacheroute::gateway
