// Forwarder: sends one client request to the upstream it was routed to and relays the answer, on
// the I/O thread that serves the request, in these steps:
//   1. connect or reuse   a pooled keep-alive connection that is still open, else a new one
//                         (connect_timeout);
//   2. send the request   headers copied but hop-by-hop ones, Host set to the upstream's, the
//                         client's Authorization dropped when the gateway checks API keys
//                         (write_timeout);
//   3. read the head      (header_timeout); a pooled connection found closed before any byte of
//                         the answer is retried once on a new one;
//   4. relay the body     a stream (chunked or unsized) chunk by chunk as it arrives, a sized
//                         answer whole (read_timeout between two reads; at most 64 MiB);
//   5. classify errors    for DestinationHealth (ErrorKind) and the client: 502 for a failed
//                         connect, a reset or a malformed head, 504 for a timeout before the head;
//                         after the head a break cuts the stream (or makes a unary answer a 502)
//                         and never marks the destination down.
// The answer carries X-CacheRoute-Destination and X-CacheRoute-Planned. The RequestLifecycle
// hears of the first token, the usage and the end of the upstream's part (always, on every path).
// The connection goes back to the thread's pool when the answer was read to its end and both
// sides keep it open.
//
// With a Rewrite the gateway makes the answer from the upstream's: the request goes to another
// target and the upstream's whole answer (a stream too) is read and turned into the client's
// (GET /v1/models/{id} from GET /v1/models).
//
// Usage (in the handler coroutine, with `member` the one `request` was routed to):
//   const int status = co_await forwarder.Forward(x, member, request);
//
// Thread-safety: Forward runs on the I/O threads of an http::Server; each call touches only its
// own thread's pools.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "tools/frontend/health/destination_health.h"
#include "tools/frontend/membership/members.h"
#include "tools/frontend/metrics/request_metrics.h"
#include "tools/frontend/routing/request_lifecycle.h"
#include "tools/gateway/gateway_config.h"
#include "tools/gateway/proxy/upstream_pools.h"
#include "tools/http/server.h"

namespace cacheroute::gateway {

class Forwarder {
 public:
  // Reads connect_timeout, write_timeout, header_timeout and read_timeout of `config`.
  Forwarder(const GatewayConfig& config, bool strip_authorization, UpstreamPools& pools,
            frontend::DestinationHealth& health, frontend::RequestMetrics& metrics);

  struct Rewrite {
    std::string target;  // what is asked of the upstream instead of the client's target
    // Turns the upstream's status and whole body into the client's (the upstream's headers stay,
    // Content-Length set from the new body).
    std::function<void(int& status, std::string& body)> answer;
  };

  // The status the client was answered with. `rewrite`: see above (null: relayed as it comes).
  http::asio::awaitable<int> Forward(http::Exchange& x, const frontend::Member& member,
                                     frontend::RequestLifecycle& request,
                                     const Rewrite* rewrite = nullptr);

 private:
  struct Call;     // the upstream side of one forwarded request
  struct Failure;  // what went wrong before the response head
  struct Relayed {
    int status;     // what the client was answered with
    bool reusable;  // the answer was read to its end and delivered
  };

  http::asio::awaitable<std::optional<Failure>> Open(
      Call& call, boost::beast::http::request<boost::beast::http::string_body>& upstream);
  http::asio::awaitable<std::optional<Failure>> Connect(Call& call);
  Failure HeadFailure(const boost::beast::error_code& ec, bool write_failed, bool timed_out) const;
  // The answer after its head, `header` being the client's (moved from).
  http::asio::awaitable<Relayed> RelayStream(http::Exchange& x, Call& call,
                                             boost::beast::http::response_header<>& header,
                                             frontend::RequestLifecycle& request);
  http::asio::awaitable<Relayed> RelayUnary(http::Exchange& x, Call& call,
                                            boost::beast::http::response_header<>& header,
                                            frontend::RequestLifecycle& request,
                                            const Rewrite* rewrite);
  // Around one read of the body into `chunk`: arming its timeout, then collecting what it got
  // (need_buffer, a full chunk, is no error).
  void BeginBodyRead(Call& call, char* chunk) const;
  size_t EndBodyRead(Call& call, boost::beast::error_code& ec) const;
  // A body that broke off after the head: counted, never marking the destination down.
  void RecordBodyError(Call& call, const boost::beast::error_code& ec);
  void Recycle(Call& call, bool reusable);

  const GatewayConfig& config_;
  const bool strip_authorization_;
  UpstreamPools& pools_;
  frontend::DestinationHealth& health_;
  frontend::RequestMetrics& metrics_;
};

}  // namespace cacheroute::gateway
