// See error_body.h.
#include "tools/gateway/proxy/error_body.h"

#include <utility>

namespace cacheroute::gateway {

http::asio::awaitable<void> SendError(http::Exchange& x, int status, absl::string_view message,
                                      absl::string_view type, absl::string_view code,
                                      absl::string_view destination) {
  http::Response r = http::TextResponse(x.request(), status, "application/json",
                                        frontend::ErrorBody(message, type, code));
  if (!destination.empty()) {
    r.set("X-CacheRoute-Destination", std::string_view(destination.data(), destination.size()));
  }
  co_await x.Send(std::move(r));
}

}  // namespace cacheroute::gateway
