// See upstream_get.h.
#include "tools/frontend/health/upstream_get.h"

#include <chrono>
#include <string>

namespace cacheroute::frontend {
namespace {

// httplib's timeouts: whole seconds and the microseconds beyond them.
std::pair<time_t, time_t> SecondsAndMicros(absl::Duration d) {
  const auto micros = absl::ToChronoMicroseconds(d).count();
  return {static_cast<time_t>(micros / 1'000'000), static_cast<time_t>(micros % 1'000'000)};
}

}  // namespace

httplib::Result UpstreamGet(const UpstreamAddress& address, absl::string_view path,
                            absl::Duration connect_timeout, absl::Duration read_timeout) {
  httplib::Client client(address.host, address.port);
  const auto [connect_s, connect_us] = SecondsAndMicros(connect_timeout);
  const auto [read_s, read_us] = SecondsAndMicros(read_timeout);
  client.set_connection_timeout(connect_s, connect_us);
  client.set_read_timeout(read_s, read_us);
  return client.Get(std::string(path));
}

}  // namespace cacheroute::frontend
