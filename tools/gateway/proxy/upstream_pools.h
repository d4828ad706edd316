// UpstreamPools: what each I/O thread of the proxy keeps of the upstreams: its idle keep-alive
// connections per destination. Each thread touches only its own (its sockets use its executor),
// so taking and returning a connection needs no lock and no re-registration with another
// thread's reactor.
//
// Usage (on an I/O thread of the http::Server):
//   std::vector<IdleConnection>* idle = pools.Idle(d, member);   // null off the I/O threads
//   std::optional<beast::tcp_stream> c;
//   if (UpstreamPools::TakeIdle(idle, c)) …;
//   … UpstreamPools::Return(idle, std::move(*c));        // false: full, the caller closes it
//
// A destination's pooled connections belong to the member they were opened to: asked for another
// member at that index (Member::id), the thread closes them first. Clear (after the server's
// threads stopped, before its contexts go) closes all.
#pragma once

#include <boost/beast/core/tcp_stream.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "tools/frontend/membership/members.h"

namespace cacheroute::gateway {

struct IdleConnection {
  boost::beast::tcp_stream stream;
  std::chrono::steady_clock::time_point since;  // when it was returned
};

class UpstreamPools {
 public:
  // Idle connections kept per I/O thread and destination; more are closed.
  static constexpr size_t kMaxIdlePerDestination = 4096;
  // A pooled connection idle for longer than this is checked (a non-blocking peek) before reuse.
  static constexpr auto kCheckIdleAfter = std::chrono::milliseconds(200);

  UpstreamPools(unsigned threads, uint32_t capacity);

  // The calling I/O thread's idle connections to `member` at `d`; null off the I/O threads.
  std::vector<IdleConnection>* Idle(uint32_t d, const frontend::Member& member);
  void Clear();

  // Moves a pooled connection that is still open (one returned moments ago is taken as it is)
  // into `into`; false when there is none. Closed ones found on the way are dropped.
  static bool TakeIdle(std::vector<IdleConnection>* idle,
                       std::optional<boost::beast::tcp_stream>& into);
  // Keeps `stream` for reuse; false (and `stream` untouched) when `idle` is full.
  static bool Return(std::vector<IdleConnection>* idle, boost::beast::tcp_stream&& stream);

 private:
  struct Pool {
    uint64_t member_id = 0;  // whose connections these are
    std::vector<IdleConnection> idle;
  };
  struct PerThread {
    std::vector<Pool> pools;  // by destination
  };
  std::vector<PerThread> threads_;
};

}  // namespace cacheroute::gateway
