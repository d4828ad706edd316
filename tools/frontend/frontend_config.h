// FrontendConfig: what every CacheRoute front end (cacheroute-gateway, cacheroute-epp) is
// configured with for the core they share (frontend_core.h): membership, routing, the planner
// link, health and engine load. Each front end's own configuration holds these keys
// (FrontendConfig derives from FrontendConfig; EppConfig has one as `dataplane`) and reads them
// with the same fields, flags and checks, so a key means the same in both. deploy/gateway.yaml
// documents every key.
//
// Usage:
//   for (const base::yaml::Field<FrontendConfig>& f : FrontendConfigFields()) …  // a front end's
//                                                                                 // key table
//   AddFrontendFlags(app, flags); … ApplyFrontendFlags(app, flags, config);
//   if (absl::Status s = ValidateFrontendConfig(config); !s.ok()) …              // names the key
//
// Every error is InvalidArgument and names the YAML key (`upstreams[2].url`, `policy`) or the
// flag (`--policy`) and the offending value. yaml-cpp and CLI11 exceptions never leave these
// functions.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/yaml_fields.h"

namespace CLI {
class App;
}  // namespace CLI

namespace cacheroute::frontend {

struct Upstream {
  std::string name;  // the planner's destination name for this model server
  std::string url;   // http://HOST:PORT (no path; plain HTTP)
};

struct FrontendConfig {
  // Membership, from exactly one source: the static `upstreams` list; `upstreams_file`, a file
  // of the same list (membership/sources.h) re-read every membership_interval; `upstreams_dns`,
  // NAME:PORT, whose A/AAAA records are the engines (a Kubernetes headless Service), re-resolved
  // as often, each address named "IP:PORT" (`dns_server` HOST:PORT overrides the system
  // resolver); or `upstreams_inference_pool`, the name of a GIE InferencePool watched through the
  // Kubernetes API (membership/inference_pool_source.h): one member "IP:PORT" per ready pod its
  // selector matches and target port, changed as soon as the API server reports it. With a
  // dynamic source, changes reach the planner (SetDestinations) and at most max_upstreams
  // members are routed to.
  std::vector<Upstream> upstreams;
  std::string upstreams_file;
  std::string upstreams_dns;
  std::string dns_server;
  std::string upstreams_inference_pool;
  // The pool's namespace; "": this pod's own (kInClusterNamespaceFile).
  std::string inference_pool_namespace;
  // The Kubernetes API server, http(s)://HOST:PORT; "": in-cluster (KUBERNETES_SERVICE_HOST and
  // _PORT, with the service account's token and CA). kube_token_file holds the bearer token,
  // re-read for every request (bound tokens rotate); kube_ca_file the PEM CA bundle that the
  // server's certificate must chain to. With kube_api_server set, no token file means no token
  // and no CA file the system's CAs; without it both default to the service account's files.
  std::string kube_api_server;
  std::string kube_token_file;
  std::string kube_ca_file;
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
  // reports and no table, so `cacheroute` routes every request by its fallback.
  std::vector<std::string> planner;
  std::string gateway_id;  // required with a planner; unique per front end
  absl::Duration report_interval = absl::Seconds(10);
  absl::Duration table_ttl = absl::Seconds(60);  // a table older than this is not routed by
  std::string table_cache;                       // file for the last table ("" = none)
  // Securing the planner connection, as the planner's `token_file` and `tls` settings require:
  // a file holding the bearer token (trailing whitespace ignored), sent on every RPC; a PEM root
  // CA, which turns TLS on; and, for mutual TLS, this front end's certificate chain and key (both
  // or neither). The files are read when the front end starts.
  std::string planner_token_file;
  std::string planner_tls_ca_file;
  std::string planner_tls_cert_file;
  std::string planner_tls_key_file;
  // Fleet sharing (planner_link/share_link.h): with a planner, every share_interval (1ms..10s)
  // this front end sends the planner what its picks placed and its work in flight, and applies
  // what the other front ends sent, so that several route as one. Off: it routes on its own.
  bool share = true;
  absl::Duration share_interval = absl::Milliseconds(5);
  // Connecting to an upstream (the gateway's requests, health checks, probes and load scrapes).
  absl::Duration connect_timeout = absl::Seconds(2);
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
  // Engine-reported load (off by default). Every `load_scrape_interval` the front end GETs each
  // up upstream's /metrics and reads `load_metric` (summed over its label sets); the Router's load
  // of that destination is then in_flight + external_load_weight * that value (router.h, "Load
  // signal"). In-flight counts only this front end's requests; the engine's queue counts every
  // front end's. A failed scrape, or a page without the metric, sets the reported load to 0. Off,
  // a policy that reads the engines' metrics (llm-d) still has them scraped every second
  // (EffectiveLoadScrapeInterval).
  absl::Duration load_scrape_interval = absl::ZeroDuration();  // 0: off
  std::string load_metric = "vllm:num_requests_waiting";
  double external_load_weight = 1.0;
  // Shedding and priority (routing/admission.h; docs/gateway.md, "Shedding and priority"); off by
  // default. On, a destination is saturated when the prefill tokens the dispatch counts queued
  // there (its ledger plus the other gateways' shared work) reach shed_saturation_tokens (an
  // engine's prefill rate in tokens/s times the seconds of queue it may hold), or when its scraped
  // KV cache usage reaches shed_saturation_kv_usage (GIE's 0.8; needs load scraping: without a
  // scrape the usage reads 0); when every up
  // destination is, a request waits in a queue of shed_queue_capacity requests (higher priority
  // first) for at most shed_queue_timeout, or is answered 429 with Retry-After
  // (shed_retry_after, whole seconds). Needs a policy whose dispatch keeps the token-work ledger
  // (every policy but cacheroute-paper).
  bool shed = false;
  double shed_saturation_tokens = 16384;
  double shed_saturation_kv_usage = 0.8;
  uint32_t shed_queue_capacity = 128;
  absl::Duration shed_queue_timeout = absl::Seconds(5);
  absl::Duration shed_retry_after = absl::Seconds(1);
  // A request's priority: the integer of the objective its x-gateway-inference-objective header
  // names (GIE's InferenceObjective: higher first, negative sheddable); a request without the
  // header, or naming no objective here, has priority 0.
  std::map<std::string, int> objectives;
};

// The request header naming a request's objective (GIE's InferenceObjective).
inline constexpr char kObjectiveHeader[] = "x-gateway-inference-objective";
// The priority of a request whose objective header is `objective` (none: absent): its entry in
// config.objectives, else 0.
int PriorityOf(const FrontendConfig& config, const std::optional<std::string_view>& objective);

// The YAML keys of FrontendConfig, one Field each (base/yaml_fields.h): a front end puts them in
// its own key table. Keys mirror the fields; `upstreams` is a list of {name, url} mappings;
// durations are strings such as "10s", "500ms".
const std::vector<base::yaml::Field<FrontendConfig>>& FrontendConfigFields();

// The front ends' shared flags: --planner, --gateway-id, --policy and --upstream (repeatable;
// replaces the configured membership, whatever its source). Add them to a CLI11 app, parse, then
// apply those given.
struct FrontendFlags {
  std::string planner;
  std::string gateway_id;
  std::string policy;
  std::vector<std::string> upstreams;
};
void AddFrontendFlags(CLI::App& app, FrontendFlags& flags);
absl::Status ApplyFrontendFlags(const CLI::App& app, const FrontendFlags& flags,
                                FrontendConfig& config);

// Checks consistency: one membership source (at least one static upstream, or upstreams_file,
// upstreams_dns or upstreams_inference_pool; inference_pool_namespace and the kube_* keys only
// with the last; a pool name a DNS subdomain, a namespace a DNS label), names distinct and
// non-empty, URLs http://HOST:PORT; each planner address HOST:PORT, without repeats (the list may
// be empty); a policy of dataplane::BuiltinPolicies(); a gateway_id when a planner is set;
// positive durations; failure_threshold >= 1; key_from names from kKeySources without repeats; a
// non-empty key_header made of header-name characters.
absl::Status ValidateFrontendConfig(const FrontendConfig& config);

// Whether the membership comes from a dynamic source (upstreams_file, upstreams_dns or
// upstreams_inference_pool) rather than the static upstreams.
bool DynamicMembership(const FrontendConfig& config);

// How often the engines' /metrics are scraped: load_scrape_interval when set; when it is off and
// the policy reads the engines' metrics (dataplane::PolicyInfo::reads_scraped_metrics: llm-d),
// kPolicyMetricsScrapeInterval, since without them that policy sees every engine idle and empty.
// Zero: no scraping.
inline constexpr absl::Duration kPolicyMetricsScrapeInterval = absl::Seconds(1);
absl::Duration EffectiveLoadScrapeInterval(const FrontendConfig& config);

// An upstream list on its own (membership/sources.h's upstreams_file): YAML, either a sequence of
// {name, url} or a mapping whose one key `upstreams` holds it; checked as `upstreams` is (at
// least one, distinct names, http://HOST:PORT), errors naming `upstreams[i].…`. Pure.
absl::StatusOr<std::vector<Upstream>> ParseUpstreamListYaml(absl::string_view yaml);

// http://HOST:PORT split into its parts ("[::1]" keeps its brackets off in `host`).
struct UpstreamAddress {
  std::string host;
  int port = 0;
};
absl::StatusOr<UpstreamAddress> ParseUpstreamUrl(absl::string_view name, absl::string_view url);

// The service account's directory in a pod, and the files of it the pool source reads.
inline constexpr char kServiceAccountDir[] = "/var/run/secrets/kubernetes.io/serviceaccount";
inline constexpr char kInClusterNamespaceFile[] =
    "/var/run/secrets/kubernetes.io/serviceaccount/namespace";

// kube_api_server: http://HOST:PORT or https://HOST:PORT (no path; an IPv6 host in brackets);
// InvalidArgument naming `key` and the value otherwise.
struct KubeServerAddress {
  bool tls = false;
  std::string host;  // without brackets
  int port = 0;
};
absl::StatusOr<KubeServerAddress> ParseKubeApiServer(absl::string_view key,
                                                     absl::string_view value);

// HOST:PORT (an IPv6 host in brackets; port 0 allowed: "pick a free one"); InvalidArgument naming
// `name` and the value otherwise.
absl::Status CheckHostPort(absl::string_view name, absl::string_view value);

// "IPV4:PORT" (port 1..65535) of a DNS server (dns_server, membership/sources.h's DnsSource);
// InvalidArgument naming `key` and the value otherwise.
struct DnsServerAddress {
  std::string ip;  // dotted IPv4
  int port = 0;
};
absl::StatusOr<DnsServerAddress> ParseDnsServer(absl::string_view key, absl::string_view value);

// The whole file `path` that the key `key` names (api_key_file, planner_token_file, the PEM
// files), read when the front end starts: InvalidArgument naming the key and the path when it
// cannot be read or holds only whitespace.
absl::StatusOr<std::string> ReadNonEmptyFile(absl::string_view key, const std::string& path);

}  // namespace cacheroute::frontend
