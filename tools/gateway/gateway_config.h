// GatewayConfig: everything `cacheroute-gateway` is configured with, and how it is loaded: a YAML
// file (deploy/gateway.yaml documents every key) overridden by a few command-line flags. The keys
// of the core every front end shares (membership, routing, planner, health, load) are
// FrontendConfig's (tools/frontend/frontend_config.h), read by the same fields and checks; the
// rest are the HTTP proxy's own.
//
// Usage:
//   absl::StatusOr<GatewayConfig> config = LoadGatewayConfig(argc, argv);
//   if (absl::IsNotFound(config.status())) { std::cout << config.status().message(); return 0; }
//   if (!config.ok()) { std::cerr << config.status().message(); return 2; }
//
// Every error is InvalidArgument and names the YAML key (`upstreams[2].url`, `listen`) or the
// flag (`--policy`) and the offending value. yaml-cpp and CLI11 exceptions never leave these
// functions.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "tools/frontend/frontend_config.h"

namespace cacheroute::gateway {

struct GatewayConfig : frontend::FrontendConfig {
  // HTTP address of the gateway, HOST:PORT (port 0: pick a free one, logged at start).
  std::string listen = "127.0.0.1:8080";
  // Upstream HTTP (connect_timeout is FrontendConfig's). header_timeout bounds the wait for a
  // response's headers (a non-streamed completion's come when it is generated); read_timeout the
  // gap between two chunks of a body; write_timeout one write, to an upstream or a client. None
  // bounds a whole stream.
  absl::Duration header_timeout = absl::Seconds(600);
  absl::Duration read_timeout = absl::Seconds(600);
  absl::Duration write_timeout = absl::Seconds(30);
  // I/O threads serving every connection (0: one per core).
  uint32_t io_threads = 0;
  // On SIGTERM (Gateway::Drain): first drain_delay with /healthz answering 503 while still
  // serving (so that a load balancer or Kubernetes readiness sees it and stops sending), then the
  // listener closes and requests in progress get up to drain_timeout to finish.
  absl::Duration drain_delay = absl::ZeroDuration();
  absl::Duration drain_timeout = absl::Seconds(30);
  // The listener: TLS with a PEM certificate chain and key (both or neither), and client API
  // keys: a file with one key per line (blank lines and `#` comments ignored); when set, every
  // /v1/ request needs `Authorization: Bearer <key>` (401 otherwise), and that header is not
  // passed upstream.
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string api_key_file;
};

// Parses YAML text (the format of deploy/gateway.yaml) over `base`. Keys mirror the fields above
// and FrontendConfig's. Keys absent from the document keep their value in `base`. Unknown or
// repeated keys, wrong types and out-of-range values are InvalidArgument naming the key and the
// value. Pure: reads no files.
absl::StatusOr<GatewayConfig> ParseGatewayConfigYaml(absl::string_view yaml,
                                                     GatewayConfig base = {});

// Full loading: defaults, then `--config FILE`, then the flags:
//   --config FILE --listen HOST:PORT and the front end's (frontend::AddFrontendFlags):
//   --planner HOST:PORT[,HOST:PORT…] --gateway-id ID --policy NAME --upstream NAME=URL
// `--help` is reported as a NotFound status whose message is the help text. The result is
// validated (ValidateGatewayConfig).
absl::StatusOr<GatewayConfig> LoadGatewayConfig(int argc, const char* const* argv);

// frontend::ValidateFrontendConfig, then the proxy's own: listen HOST:PORT, positive timeouts,
// tls_cert_file and tls_key_file both or neither.
absl::Status ValidateGatewayConfig(const GatewayConfig& config);

}  // namespace cacheroute::gateway
