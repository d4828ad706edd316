// Test-only: FreeLoopbackPort() is a loopback TCP port nobody listens on right now, never handed
// out twice in one process (bind to port 0, read the port, close).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <vector>

namespace cacheroute::testing {

inline int FreeLoopbackPort() {
  static std::vector<int> handed_out;
  for (int attempt = 0; attempt < 50; ++attempt) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    socklen_t len = sizeof(addr);
    REQUIRE(getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    close(fd);
    const int port = ntohs(addr.sin_port);
    bool seen = false;
    for (int p : handed_out) seen = seen || p == port;
    if (!seen) {
      handed_out.push_back(port);
      return port;
    }
  }
  FAIL("no free port");
  return 0;
}

}  // namespace cacheroute::testing
