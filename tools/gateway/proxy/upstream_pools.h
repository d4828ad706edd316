// UpstreamPools: what each I/O thread of the proxy keeps of the upstreams: its own copy of the
// membership snapshot and its idle keep-alive connections per destination. Each thread touches
// only its own (its sockets use its executor), so taking and returning a connection needs no lock
// and no re-registration with another thread's reactor, and holding the snapshot costs an
// uncontended reference count.
//
// Usage (on an I/O thread of the http::Server):
//   std::shared_ptr<const Members> members = pools.ThreadMembers(membership);
//   std::vector<IdleConnection>* idle = pools.Idle(d);   // null off the I/O threads
//   std::optional<beast::tcp_stream> c;
//   if (UpstreamPools::TakeIdle(idle, c)) …;
//   … UpstreamPools::Return(idle, std::move(*c));        // false: full, the caller closes it
//
// A thread's copy is refreshed when the membership's generation moved; then the pooled
// connections of every index whose member changed are closed. Clear (after the server's threads
// stopped, before its contexts go) closes all.
#pragma once

#include <boost/beast/core/tcp_stream.hpp>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "tools/gateway/membership/members.h"

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

  // The calling I/O thread's copy of membership.Current(); off the I/O threads, Current() itself.
  std::shared_ptr<const Members> ThreadMembers(const Membership& membership);
  // The calling I/O thread's idle connections to `d`; null off the I/O threads.
  std::vector<IdleConnection>* Idle(uint32_t d);
  void Clear();

  // Moves a pooled connection that is still open (one returned moments ago is taken as it is)
  // into `into`; false when there is none. Closed ones found on the way are dropped.
  static bool TakeIdle(std::vector<IdleConnection>* idle,
                       std::optional<boost::beast::tcp_stream>& into);
  // Keeps `stream` for reuse; false (and `stream` untouched) when `idle` is full.
  static bool Return(std::vector<IdleConnection>* idle, boost::beast::tcp_stream&& stream);

 private:
  struct PerThread {
    std::shared_ptr<const Members> members;
    std::vector<std::vector<IdleConnection>> idle;  // by destination
  };
  std::vector<PerThread> threads_;
};

}  // namespace cacheroute::gateway
