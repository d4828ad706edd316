// PlannerConfig: everything `cacheroute-planner` is configured with, and how it is loaded: a YAML
// file (deploy/planner.yaml documents every key) overridden by command-line flags.
//
// Usage:
//   absl::StatusOr<PlannerConfig> config = LoadPlannerConfig(argc, argv);
//   if (absl::IsNotFound(config.status())) { std::cout << config.status().message(); return 0; }
//   if (!config.ok()) { std::cerr << config.status().message(); return 2; }
//
// Every error is InvalidArgument and names the YAML key (`q_cap`, `tls.cert_file`,
// `destinations[3]`) or the flag (`--q-cap`) and the offending value, except that the token is
// never echoed. yaml-cpp and CLI11 exceptions never leave these functions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/status_macros.h"
#include "planner/algorithm.h"
#include "planner/gate.h"

namespace cacheroute::service {

// The planner core's limit on R (planner/plan_builder.cc).
inline constexpr size_t kMaxConfigDestinations = size_t{1} << 20;
// gRPC takes the receive limit as an int.
inline constexpr size_t kMaxMessageBytesLimit = 2147483647;

struct TlsConfig {
  std::string cert_file;       // server certificate chain (PEM); TLS is on when set
  std::string key_file;        // its private key (PEM)
  std::string client_ca_file;  // when set, clients must present a certificate signed by it (mTLS)
};

// High availability (docs/ha.md): replicas coordinated through etcd. Absent (enabled false), the
// planner runs alone exactly as without HA.
struct EtcdConfig {
  bool enabled = false;                             // an `etcd:` section was given
  std::vector<std::string> endpoints;               // HOST:PORT of etcd's client URLs; required
  std::string key_prefix = "/cacheroute/default/";  // every key this cluster uses; ends in '/'
  int64_t lease_ttl_seconds = 5;                    // the leader's lease
  std::string replica_id;                           // "": the host name
  std::string advertise;  // how other replicas reach this gRPC port; "": listen
};

struct PlannerConfig {
  // The rollout gate (docs/gate.md, planner/gate.h): with gate_enabled (the default), every table
  // carries the gate's rollout and each control interval's evidence from the gateways decides
  // it; a planner without a persisted gate state starts in shadow. `gate: {enabled: false}` keeps
  // every key on the table from the first plan.
  bool gate_enabled = true;
  planner::GateOptions gate;
  // Network.
  std::string listen = "127.0.0.1:50051";         // gRPC, HOST:PORT (port 0: pick a free one)
  std::string metrics_listen = "127.0.0.1:9464";  // HTTP /metrics and /healthz; "" disables
  TlsConfig tls;
  // Auth: when non-empty, ReportRates and mutating admin calls need "authorization: Bearer
  // <token>".
  std::string token;
  // A file holding the token (trailing whitespace ignored), so that it need not appear in the
  // YAML file or on the command line. LoadPlannerConfig reads it into `token`; setting one of
  // token / token_file (in the YAML or by flag) clears the other.
  std::string token_file;
  bool token_required_for_reads = false;  // also GetStatus, Explain, Diff, GetTable, StreamTable

  // State: the latest table, its version and the rate state are persisted here ("" = in memory
  // only; a restart then starts a new epoch).
  std::string state_dir;

  // Fleet and plan.
  std::vector<std::string> destinations;  // names; `--destinations N` means "0" … "N-1"
  double q_cap = 8.0;                     // requests/s per assignment
  uint64_t slots_per_destination = 64;    // W
  // Placement hysteresis (planner::PlanConfig::stickiness): a key keeps its previous destinations
  // while that leaves them at most this fraction above the mean load; 0 replans from scratch
  // (Algorithm 1 exactly), which moves most keys every interval under noisy rates.
  double placement_stickiness = 0.1;
  // Keep an admitted key where the gateways last served it (the served_at of their rate reports)
  // whenever that keeps the destination within the stickiness cap (planner::PlanBuilder::Build's
  // warm hints; docs/dispatch.md, "The plan follows the cache"). Gateways that do not report
  // served_at leave nothing to follow.
  bool follow_served = true;
  // "cacheroute" (the default, planner::kDefaultAlgorithm: Algorithm 1 plus a planned spill
  // destination per key and load-adaptive k_b, planner::PlanConfig::spill and ::balance_share =
  // 0.5) or "cacheroute-paper" (Algorithm 1 as published). docs/dispatch.md says what each does
  // and what it measured.
  std::string algorithm = std::string(planner::AlgorithmName(planner::kDefaultAlgorithm));
  // Byte-aware planning (planner::PlanConfig::kv_budget_tokens, docs/planner.md): off while
  // kv_tokens_per_destination is 0. Otherwise keys are admitted by the prefill work their
  // affinity saves while Σ reusable tokens × k_b fits kv_tokens_per_destination ×
  // planned_prefix_share per destination (W is not used), from the sizes gateways report.
  double kv_tokens_per_destination = 0;  // the engines' KV capacity, tokens; finite, ≥ 0
  double planned_prefix_share = 0.5;     // the share reserved for planned prefixes, (0, 1]
  double request_overhead_tokens = 0;    // a request's decode in prefill-token equivalents, ≥ 0
  absl::Duration control_interval = absl::Seconds(10);
  // How often the rollout gate decides: 0 (the default) at every planning step; a duration below
  // control_interval also between planning steps, on the evidence reported since
  // (PlannerCore::ObserveGate), so the gate can follow the gateways' reports while the planner
  // plans less often. Finite, >= 0.
  absl::Duration gate_interval = absl::ZeroDuration();
  // Experiments (the defaults are the algorithm, and a deployment keeps them):
  // - the component ablation of the paper's §5.2 (Table 4): `replicate` false gives every
  //   admitted key one destination; `placement` "hashed" puts a key's destinations on a hash of
  //   (key, placement_seed), blind to load, instead of LPT (planner::PlanConfig);
  // - `max_plans` > 0: after that many plans, Replan keeps the last one (the rate interval still
  //   closes and the gate still decides; a changed split is published with the held plan).
  bool replicate = true;
  std::string placement = "lpt";  // "lpt" or "hashed"
  uint64_t placement_seed = 0;
  uint64_t max_plans = 0;
  double table_ttl_seconds = 60;  // gateways fall back to power of two past this age
  size_t history = 32;            // versions kept for GetTable and Diff

  // Rate estimation (see planner/rate_aggregator.h).
  absl::Duration rate_smoothing = absl::Seconds(60);
  absl::Duration key_ttl = absl::Minutes(10);
  size_t max_keys_per_report = 100000;
  size_t max_message_bytes = 16u << 20;  // gRPC receive limit; table chunks stay below 4 MiB

  // Logging: "text" or "json" lines on stderr.
  std::string log_format = "text";

  EtcdConfig etcd;
};

// Parses YAML text (the format of deploy/planner.yaml) over `base`: keys mirror the fields above
// in snake_case, with `tls` a nested mapping; durations are strings such as "10s", "500ms",
// "2m", "1h30m"; `destinations` is a count N (names "0" … "N-1") or a list of names. Keys absent
// from the document keep their value in `base`; an empty document returns `base` unchanged.
// Unknown or repeated keys, wrong types and out-of-range values are InvalidArgument naming the key
// and the value ("q_cap: must be a finite number > 0, got -1"). Checks that involve several keys
// (TLS cert without key, ...) are left to ValidatePlannerConfig, since flags may complete them.
// Pure: reads no files.
absl::StatusOr<PlannerConfig> ParsePlannerConfigYaml(absl::string_view yaml,
                                                     PlannerConfig base = {});

// Full loading: defaults, then `--config FILE` if given, then the other flags, then the token
// file if one is set. Flags:
//   --config FILE --listen HOST:PORT --metrics-listen HOST:PORT --state-dir DIR
//   --destinations N | --destination-names a,b,c --q-cap Q --slots-per-destination W
//   --kv-tokens-per-destination T --planned-prefix-share S
//   --control-interval DURATION (e.g. 10s, 500ms) --token T | --token-file F --tls-cert F
//   --tls-key F --tls-client-ca F --log-format text|json
//   --etcd-replica-id ID --etcd-advertise HOST:PORT (with an etcd section in the file only)
// `--help` is reported as a NotFound status whose message is the help text (exit 0 in main).
// The result is validated (ValidatePlannerConfig).
absl::StatusOr<PlannerConfig> LoadPlannerConfig(int argc, const char* const* argv);

// Checks ranges and consistency: 1 … kMaxConfigDestinations destinations with distinct, non-empty
// names; q_cap finite > 0; W ≥ 1; an algorithm of planner/algorithm.h; placement "lpt" or
// "hashed" ("lpt", and algorithm "cacheroute", with byte-aware planning); kv_tokens_per_destination
// and request_overhead_tokens finite ≥ 0; planned_prefix_share in (0, 1]; gate_interval finite >=
// 0; control_interval, rate_smoothing and key_ttl finite > 0; table_ttl_seconds finite > 0; history
// ≥ 1; max_keys_per_report ≥ 1; max_message_bytes in [1, kMaxMessageBytesLimit]; TLS cert and key
// both or neither, client CA only with them; a token of visible ASCII, and one present if
// token_required_for_reads; log_format "text" or "json"; listen HOST:PORT and metrics_listen
// HOST:PORT or "". With etcd.enabled: 1 or more endpoints, each HOST:PORT; key_prefix starting and
// ending with '/'; lease_ttl_seconds in [1, 3600]; replica_id and advertise (HOST:PORT or "")
// without whitespace.
absl::Status ValidatePlannerConfig(const PlannerConfig& config);

}  // namespace cacheroute::service
