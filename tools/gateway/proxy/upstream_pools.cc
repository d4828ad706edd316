// See upstream_pools.h.
#include "tools/gateway/proxy/upstream_pools.h"

#include <sys/socket.h>

#include <cerrno>

#include "tools/http/server.h"

namespace cacheroute::gateway {
namespace {

// A pooled socket whose peer has closed (or sent bytes it should not have) is not reusable.
bool StillOpen(int fd) {
  char byte;
  const ssize_t n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

}  // namespace

UpstreamPools::UpstreamPools(unsigned threads, uint32_t capacity) : threads_(threads) {
  for (PerThread& thread : threads_) thread.pools.resize(capacity);
}

std::vector<IdleConnection>* UpstreamPools::Idle(uint32_t d, const frontend::Member& member) {
  const int thread = http::Server::CurrentThread();
  if (thread < 0 || static_cast<size_t>(thread) >= threads_.size()) return nullptr;
  Pool& pool = threads_[thread].pools[d];
  if (pool.member_id != member.id) {  // connections to the member the index had before
    pool.idle.clear();
    pool.member_id = member.id;
  }
  return &pool.idle;
}

void UpstreamPools::Clear() {
  for (PerThread& thread : threads_) {
    for (Pool& pool : thread.pools) pool.idle.clear();
  }
}

bool UpstreamPools::TakeIdle(std::vector<IdleConnection>* idle,
                             std::optional<boost::beast::tcp_stream>& into) {
  if (idle == nullptr) return false;
  // A Beast stream's move allocates a new implementation: each one is moved once, out of the pool.
  for (; !idle->empty(); idle->pop_back()) {
    IdleConnection& connection = idle->back();
    // One that was in use moments ago is taken as it is (were it closed after all, the caller's
    // retry covers it); one that idled longer is checked first.
    if (std::chrono::steady_clock::now() - connection.since < kCheckIdleAfter ||
        StillOpen(connection.stream.socket().native_handle())) {
      into.emplace(std::move(connection.stream));
      idle->pop_back();
      return true;
    }
  }
  return false;
}

bool UpstreamPools::Return(std::vector<IdleConnection>* idle, boost::beast::tcp_stream&& stream) {
  if (idle == nullptr || idle->size() >= kMaxIdlePerDestination) return false;
  idle->push_back(IdleConnection{std::move(stream), std::chrono::steady_clock::now()});
  return true;
}

}  // namespace cacheroute::gateway
