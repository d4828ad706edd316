// ListenInBackground: serves a bound httplib::Server on a thread of its own and returns once it is
// accepting. httplib 0.11 (Debian 12) has no wait_until_ready(), and its stop() does nothing until
// listen_after_bind() has set is_running() (its first step), so a server stopped right after start
// would otherwise never stop and its thread never join. Used by every HTTP server in the project
// (the planner's metrics port, the gateway, the engine emulator). Header-only: needs httplib only.
//
// Usage:
//   int port = server.bind_to_any_port("127.0.0.1");
//   std::thread thread = ListenInBackground(server);
//   ...
//   server.stop();
//   thread.join();
#pragma once

#include <httplib.h>

#include <chrono>
#include <thread>

namespace cacheroute::base {

inline std::thread ListenInBackground(httplib::Server& server) {
  std::thread thread([&server] { server.listen_after_bind(); });
  // Bounded (10 s) in case listen_after_bind() fails at once and never reports running.
  for (int i = 0; i < 10'000 && !server.is_running(); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return thread;
}

}  // namespace cacheroute::base
