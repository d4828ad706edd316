// Test-only: a throwaway CA, a server certificate for 127.0.0.1 / localhost and a client
// certificate, all signed by the CA and valid for a day, made with the openssl command in `dir`
// (which the caller owns and removes), for tests of TLS and mutual TLS to the planner.
//
// Usage:
//   testing::TempDir dir("tls_test");
//   const testing::Certs certs = testing::MakeCerts(dir.path().string());
//   config.tls.cert_file = certs.server_cert;   // and certs.ca for the clients
#pragma once

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <string>

namespace cacheroute::testing {

struct Certs {
  std::string ca, server_cert, server_key, client_cert, client_key;
};

inline Certs MakeCerts(const std::string& d) {
  const auto shell = [](const std::string& command) {
    return std::system((command + " >/dev/null 2>&1").c_str()) == 0;
  };
  REQUIRE(shell("openssl req -x509 -newkey rsa:2048 -nodes -keyout " + d + "/ca.key -out " + d +
                "/ca.pem -days 1 -subj /CN=cacheroute-test-ca"));
  std::ofstream(d + "/server.ext") << "subjectAltName=IP:127.0.0.1,DNS:localhost\n";
  for (const std::string name : {"server", "client"}) {
    REQUIRE(shell("openssl req -newkey rsa:2048 -nodes -keyout " + d + "/" + name + ".key -out " +
                  d + "/" + name + ".csr -subj /CN=" + name));
    REQUIRE(shell("openssl x509 -req -in " + d + "/" + name + ".csr -CA " + d + "/ca.pem -CAkey " +
                  d + "/ca.key -CAcreateserial -days 1 -out " + d + "/" + name + ".pem" +
                  (name == "server" ? " -extfile " + d + "/server.ext" : std::string())));
  }
  return {.ca = d + "/ca.pem",
          .server_cert = d + "/server.pem",
          .server_key = d + "/server.key",
          .client_cert = d + "/client.pem",
          .client_key = d + "/client.key"};
}

}  // namespace cacheroute::testing
