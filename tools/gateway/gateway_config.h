// GatewayConfig: everything `cacheroute-gateway` is configured with, and how it is loaded: a YAML
// file (deploy/gateway.yaml documents every key) overridden by a few command-line flags.
//
// Usage:
//   absl::StatusOr<GatewayConfig> config = LoadGatewayConfig(argc, argv);
//   if (absl::IsNotFound(config.status())) { std::cout << config.status().message(); return 0; }
//   if (!config.ok()) { std::cerr << config.status().message(); return 2; }
//
// Every error is InvalidArgument and names the YAML key (`upstreams[2].url`, `policy`) or the
// flag (`--policy`) and the offending value. yaml-cpp and CLI11 exceptions never leave these
// functions.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/yaml_fields.h"

namespace CLI {
class App;
}  // namespace CLI

namespace cacheroute::gateway {

struct Upstream {
  std::string name;  // the planner's destination name for this model server
  std::string url;   // http://HOST:PORT (no path; plain HTTP)
};

struct GatewayConfig {
  // HTTP address of the gateway, HOST:PORT (port 0: pick a free one, logged at start).
  std::string listen = "127.0.0.1:8080";
  // Membership, from exactly one source: the static `upstreams` list; `upstreams_file`, a file
  // of the same list (membership/sources.h) re-read every membership_interval; or `upstreams_dns`,
  // NAME:PORT, whose A/AAAA records are the engines (a Kubernetes headless Service), re-resolved
  // as often, each address named "IP:PORT" (`dns_server` HOST:PORT overrides the system
  // resolver). With a dynamic source, changes reach the planner (SetDestinations) and at most
  // max_upstreams members are routed to.
  std::vector<Upstream> upstreams;
  std::string upstreams_file;
  std::string upstreams_dns;
  std::string dns_server;
  absl::Duration membership_interval = absl::Seconds(5);
  uint32_t max_upstreams = 256;
  // A name of cacheroute/dataplane/policy_registry.h (BuiltinPolicies): "cacheroute" routes by
  // the planner's table with CacheRoute's dispatch, "cacheroute-paper" by the same table with the
  // paper's; the alias "flatlb" is accepted for "flat-lb".
  std::string policy = "cacheroute";
  // The request header that carries the routing key (key_from's "header").
  std::string key_header = "X-CacheRoute-Key";
  // Where a request's routing key comes from, first match wins (openai_fields.h): "header" (the
  // key_header), "user" (the body's user), "system" (a hash of the chat request's system
  // message(s), or of a completion prompt's first prefix_bytes bytes). A request with none has
  // no key: power of two choices, not counted in rates.
  std::vector<std::string> key_from = {"header", "user", "system"};
  uint32_t prefix_bytes = 1024;

  // Planner replicas, each a gRPC HOST:PORT (YAML: one string, or a list; flag: a comma-separated
  // list); the table stream and the reports fail over between them (planner_channels.h). One
  // address may be a DNS name resolving to all replicas (a headless Service). Empty: no rate
  // reports and no table, so `cacheroute` routes every request by power of two choices.
  std::vector<std::string> planner;
  std::string gateway_id;  // required with a planner; unique per gateway
  absl::Duration report_interval = absl::Seconds(10);
  absl::Duration table_ttl = absl::Seconds(60);  // a table older than this is not routed by
  std::string table_cache;                       // file for the last table ("" = none)
  // Securing the planner connection, as the planner's `token_file` and `tls` settings require:
  // a file holding the bearer token (trailing whitespace ignored), sent on every RPC; a PEM root
  // CA, which turns TLS on; and, for mutual TLS, this gateway's certificate chain and key (both
  // or neither). The files are read by Gateway::Start.
  std::string planner_token_file;
  std::string planner_tls_ca_file;
  std::string planner_tls_cert_file;
  std::string planner_tls_key_file;

  // Upstream HTTP. header_timeout bounds the wait for a response's headers (a non-streamed
  // completion's come when it is generated); read_timeout the gap between two chunks of a body;
  // write_timeout one write, to an upstream or a client. None bounds a whole stream.
  absl::Duration connect_timeout = absl::Seconds(2);
  absl::Duration header_timeout = absl::Seconds(600);
  absl::Duration read_timeout = absl::Seconds(600);
  absl::Duration write_timeout = absl::Seconds(30);
  // Consecutive connect failures or resets before the response headers after which a
  // destination is marked down (timeouts never mark it down: slow is not dead).
  uint32_t failure_threshold = 3;
  // How often a down destination's GET /health is tried; a 200 marks it up again.
  absl::Duration probe_interval = absl::Seconds(2);
  // Active health checks (0: off): every health_check_interval each up destination's GET /health
  // must answer 200 within health_check_timeout; failure_threshold failures in a row mark it down
  // (vLLM answers /health at once however long its queue, so a busy engine passes).
  absl::Duration health_check_interval = absl::ZeroDuration();
  absl::Duration health_check_timeout = absl::Seconds(5);

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

  // Engine-reported load (off by default). Every `load_scrape_interval` the gateway GETs each up
  // upstream's /metrics and reads `load_metric` (summed over its label sets); the Router's load
  // of that destination is then in_flight + external_load_weight * that value (router.h, "Load
  // signal"). In-flight counts only this gateway's requests; the engine's queue counts every
  // gateway's. A failed scrape, or a page without the metric, sets the reported load to 0.
  absl::Duration load_scrape_interval = absl::ZeroDuration();  // 0: off
  std::string load_metric = "vllm:num_requests_waiting";
  double external_load_weight = 1.0;
};

// Parses YAML text (the format of deploy/gateway.yaml) over `base`. Keys mirror the fields above;
// `upstreams` is a list of {name, url} mappings; durations are strings such as "10s", "500ms".
// Keys absent from the document keep their value in `base`. Unknown or repeated keys, wrong types
// and out-of-range values are InvalidArgument naming the key and the value. Pure: reads no files.
absl::StatusOr<GatewayConfig> ParseGatewayConfigYaml(absl::string_view yaml,
                                                     GatewayConfig base = {});

// An upstream list on its own (membership/sources.h's upstreams_file): YAML, either a sequence of
// {name, url} or a mapping whose one key `upstreams` holds it; checked as `upstreams` is (at
// least one, distinct names, http://HOST:PORT), errors naming `upstreams[i].…`. Pure.
absl::StatusOr<std::vector<Upstream>> ParseUpstreamListYaml(absl::string_view yaml);

// Full loading: defaults, then `--config FILE`, then the flags:
//   --config FILE --listen HOST:PORT --planner HOST:PORT[,HOST:PORT…] --gateway-id ID --policy NAME
//   --upstream NAME=URL (repeatable; replaces the file's list)
// `--help` is reported as a NotFound status whose message is the help text. The result is
// validated (ValidateGatewayConfig).
absl::StatusOr<GatewayConfig> LoadGatewayConfig(int argc, const char* const* argv);

// The keys of the dataplane a front end embeds (embedded_dataplane.h): membership, routing,
// planner, health and load; every key of ParseGatewayConfigYaml but the HTTP front end's listen,
// header/read/write_timeout, io_threads, drain_delay, drain_timeout, tls_cert_file, tls_key_file
// and api_key_file. Another front end (tools/epp) parses them into its GatewayConfig with these
// very fields, so a key means the same in both.
const std::vector<base::yaml::Field<GatewayConfig>>& DataplaneConfigFields();

// The dataplane's flags, shared likewise: --planner, --gateway-id, --policy and --upstream
// (repeatable; replaces the configured membership, whatever its source). Add them to a CLI11 app,
// parse, then apply those given.
struct DataplaneFlags {
  std::string planner;
  std::string gateway_id;
  std::string policy;
  std::vector<std::string> upstreams;
};
void AddDataplaneFlags(CLI::App& app, DataplaneFlags& flags);
absl::Status ApplyDataplaneFlags(const CLI::App& app, const DataplaneFlags& flags,
                                 GatewayConfig& config);

// Checks consistency: one membership source (at least one static upstream, or upstreams_file,
// or upstreams_dns), names distinct and non-empty, URLs http://HOST:PORT;
// listen HOST:PORT; each planner address HOST:PORT, without repeats (the list may be empty); a
// policy of dataplane::BuiltinPolicies(); a gateway_id when a planner is set; positive durations;
// failure_threshold >= 1; key_from names from kKeySources without repeats; tls_cert_file and
// tls_key_file both or neither; a non-empty key_header made of header-name characters.
absl::Status ValidateGatewayConfig(const GatewayConfig& config);

// http://HOST:PORT split into its parts ("[::1]" keeps its brackets off in `host`).
struct UpstreamAddress {
  std::string host;
  int port = 0;
};
absl::StatusOr<UpstreamAddress> ParseUpstreamUrl(absl::string_view name, absl::string_view url);

// The whole file `path` that the key `key` names (api_key_file, planner_token_file, the PEM
// files), read when the gateway starts: InvalidArgument naming the key and the path when it cannot
// be read or holds only whitespace.
absl::StatusOr<std::string> ReadNonEmptyFile(absl::string_view key, const std::string& path);

}  // namespace cacheroute::gateway
