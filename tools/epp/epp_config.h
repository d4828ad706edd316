// EppConfig: everything `cacheroute-epp` is configured with, and how it is loaded: a YAML file
// (deploy/epp.yaml documents every key) overridden by a few command-line flags. The front-end
// core's keys (membership, policy, routing key, planner, health, load) are cacheroute-gateway's
// too, parsed by the core's own field table (FrontendConfigFields) into `dataplane`, so they mean
// the same in both; the HTTP proxy's keys (timeouts, io_threads, api_key_file) are not accepted
// here.
//
// Usage:
//   absl::StatusOr<EppConfig> config = LoadEppConfig(argc, argv);
//   if (!config.ok()) return base::program::ConfigExit("cacheroute-epp", config.status());
//
// Every error is InvalidArgument and names the YAML key or the flag and the offending value.
#pragma once

#include <cstddef>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "tools/epp/ext_proc_stream.h"
#include "tools/frontend/frontend_config.h"

namespace cacheroute::epp {

struct EppConfig {
  // gRPC address (ext_proc and grpc.health.v1), HOST:PORT; port 0 picks a free one.
  std::string listen = "127.0.0.1:9002";
  // HTTP address of /metrics and /healthz, HOST:PORT.
  std::string metrics_listen = "127.0.0.1:9090";
  // The ext_proc filter's body modes (ExtProcStreamOptions), unless a stream's protocol_config
  // says otherwise: request NONE, BUFFERED or FULL_DUPLEX_STREAMED; response NONE, STREAMED,
  // BUFFERED or FULL_DUPLEX_STREAMED.
  BodySendMode request_body_mode = ExtProcStreamOptions().request_body_mode;
  BodySendMode response_body_mode = ExtProcStreamOptions().response_body_mode;
  size_t max_request_body = ExtProcStreamOptions().max_request_body;
  // Other up members named after the pick, least loaded first, for the data plane to retry on in
  // order (GIE's endpoint-picker protocol: "IP:PORT,IP:PORT,..."). 0: the pick alone, as GIE's
  // reference pickers (maxNumOfEndpoints 1).
  uint32_t fallback_endpoints = 0;
  // TLS of the gRPC listener: certificate chain and key (both or neither); a client CA requires
  // client certificates it signed (only with the pair).
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;
  // SIGTERM: readiness NOT_SERVING for drain_delay while serving, then streams in progress get
  // drain_timeout.
  absl::Duration drain_delay = absl::ZeroDuration();
  absl::Duration drain_timeout = absl::Seconds(30);
  // The front-end core's configuration (tools/frontend/frontend_config.h).
  frontend::FrontendConfig dataplane;
};

// Parses YAML text (the format of deploy/epp.yaml) over `base`; unknown, repeated or ill-typed
// keys are InvalidArgument naming the key and the value. Pure: reads no files.
absl::StatusOr<EppConfig> ParseEppConfigYaml(absl::string_view yaml, EppConfig base = {});

// Defaults, then `--config FILE`, then the flags:
//   --config FILE --listen HOST:PORT --metrics-listen HOST:PORT --planner HOST:PORT[,…]
//   --gateway-id ID --policy NAME --upstream NAME=URL (repeatable; replaces the membership)
// `--help` is a NotFound status carrying the help text. The result is validated.
absl::StatusOr<EppConfig> LoadEppConfig(int argc, const char* const* argv);

// The front-end core's checks (ValidateFrontendConfig), and: listen and metrics_listen HOST:PORT;
// tls_cert_file and tls_key_file both or neither, tls_client_ca_file only with them; a positive
// drain_timeout.
absl::Status ValidateEppConfig(const EppConfig& config);

// "FULL_DUPLEX_STREAMED" → the mode; `allowed` lists the accepted names (for the message).
absl::StatusOr<BodySendMode> ParseBodyMode(absl::string_view name, absl::string_view value,
                                           bool request);

}  // namespace cacheroute::epp
