// Test-only: RawExchange(port, bytes) sends bytes on a fresh loopback connection and returns what
// comes back until the server closes, for requests no HTTP client library would send (malformed,
// oversized) and for reading a response's exact header lines.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdint>
#include <string>

namespace cacheroute::testing {

// What 127.0.0.1:`port` answers `bytes` with, until it closes the connection (or, so that a test
// fails instead of hanging, until nothing came for 20 s).
inline std::string RawExchange(int port, const std::string& bytes) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  const timeval give_up{.tv_sec = 20, .tv_usec = 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &give_up, sizeof give_up);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof address) == 0 &&
      ::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size())) {
    char buffer[4096];
    for (ssize_t n; (n = ::recv(fd, buffer, sizeof buffer, 0)) > 0;) out.append(buffer, n);
  }
  ::close(fd);
  return out;
}

}  // namespace cacheroute::testing
