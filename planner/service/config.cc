// Loading PlannerConfig from YAML and flags (config.h).
//
// One set of per-value checks serves the YAML parser, the flags and ValidatePlannerConfig, so a
// bad q_cap reads the same wherever it came from; only the name in front differs (`q_cap`,
// `--q-cap`). yaml-cpp and CLI11 throw; both are caught here and turned into InvalidArgument
// (bad input) or Internal (anything else), so no exception leaves this file.
#include "planner/service/config.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "base/config_file.h"
#include "base/status_macros.h"
#include "base/yaml_fields.h"
#include "planner/algorithm.h"
#include "yaml-cpp/yaml.h"

namespace cacheroute::service {
namespace {

using namespace base::yaml;  // NOLINT: the shared checks, parsers and field makers
using YamlField = base::yaml::Field<PlannerConfig>;

constexpr absl::string_view kProgram = "cacheroute-planner";

// ---- Per-value checks. `name` is the YAML key or the flag the value came from. ----

absl::Status CheckAlgorithm(absl::string_view name, absl::string_view value) {
  if (planner::ParseAlgorithm(value).ok()) return absl::OkStatus();
  return Invalid(
      name, absl::StrCat("must be one of ", planner::AlgorithmNames(), ", got ", Quote(value)));
}

absl::Status CheckPlacement(absl::string_view name, absl::string_view value) {
  if (value == "lpt" || value == "hashed") return absl::OkStatus();
  return Invalid(name, absl::StrCat("must be \"lpt\" or \"hashed\", got ", Quote(value)));
}

absl::Status CheckShare(absl::string_view name, double value) {
  if (value > 0 && value <= 1) return absl::OkStatus();
  return Invalid(name, absl::StrCat("must be a number in (0, 1], got ", value));
}

absl::Status CheckLogFormat(absl::string_view name, absl::string_view value) {
  if (value == "text" || value == "json") return absl::OkStatus();
  return Invalid(name, absl::StrCat("must be \"text\" or \"json\", got ", Quote(value)));
}

// HOST:PORT as gRPC and the metrics server take it: an IPv6 host goes in brackets, the port is
// 0 … 65535 (0 picks a free one).
absl::Status CheckHostPort(absl::string_view name, absl::string_view value, bool allow_empty) {
  return base::yaml::CheckHostPort(name, value, allow_empty, "[::]:50051");
}

// The token travels as "authorization: Bearer <token>", so it must be a valid header value
// without spaces. Its value is never echoed: error messages end up in logs.
absl::Status CheckToken(absl::string_view name, absl::string_view token) {
  for (const char c : token) {
    if (c < 0x21 || c > 0x7e) {
      return Invalid(name, "must be visible ASCII characters without spaces (value not shown)");
    }
  }
  return absl::OkStatus();
}

absl::Status CheckDestinations(absl::string_view name, const std::vector<std::string>& names) {
  if (names.empty()) return Invalid(name, "must name at least one destination, got none");
  if (names.size() > kMaxConfigDestinations) {
    return Invalid(name, absl::StrCat("at most ", kMaxConfigDestinations,
                                      " destinations are supported, got ", names.size()));
  }
  std::unordered_map<std::string_view, size_t> first_index;
  first_index.reserve(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    const std::string indexed = absl::StrCat(name, "[", i, "]");
    if (names[i].empty()) return Invalid(indexed, "name must be non-empty, got \"\"");
    const auto [it, inserted] = first_index.emplace(names[i], i);
    if (!inserted) {
      return Invalid(indexed, absl::StrCat("duplicate name ", Quote(names[i]), " (also ", name, "[",
                                           it->second, "])"));
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> NumberedDestinations(uint64_t count) {
  std::vector<std::string> names;
  names.reserve(count);
  for (uint64_t i = 0; i < count; ++i) names.push_back(absl::StrCat(i));
  return names;
}

// ---- Text → value, shared by YAML scalars and flags. ----

// ---- YAML. ----

bool LooksLikeInteger(absl::string_view text) {
  absl::ConsumePrefix(&text, "-");
  return !text.empty() && std::all_of(text.begin(), text.end(), absl::ascii_isdigit);
}

absl::StatusOr<std::vector<std::string>> YamlDestinations(absl::string_view name,
                                                          const YAML::Node& node) {
  if (node.IsSequence()) {
    std::vector<std::string> names;
    names.reserve(node.size());
    for (size_t i = 0; i < node.size(); ++i) {
      const std::string indexed = absl::StrCat(name, "[", i, "]");
      if (!node[i].IsScalar()) {
        return Invalid(indexed, absl::StrCat("expected a name, got ", DescribeNode(node[i])));
      }
      names.push_back(node[i].Scalar());
    }
    if (absl::Status status = CheckDestinations(name, names); !status.ok()) return status;
    return names;
  }
  if (node.IsScalar() && node.Tag() != "!" && LooksLikeInteger(node.Scalar())) {
    CACHEROUTE_ASSIGN_OR_RETURN(uint64_t count,
                                ParseInteger(name, node.Scalar(), 1, kMaxConfigDestinations));
    return NumberedDestinations(count);
  }
  return Invalid(name,
                 absl::StrCat("expected a count or a list of names, got ", DescribeNode(node)));
}

YamlField TlsStringField(absl::string_view key, std::string TlsConfig::*member) {
  return {key,
          [member](absl::string_view name, const YAML::Node& node,
                   PlannerConfig& config) -> absl::Status {
            CACHEROUTE_ASSIGN_OR_RETURN(config.tls.*member, YamlString(name, node));
            return absl::OkStatus();
          }};
}

const std::vector<YamlField>& TlsFields() {
  static const auto* const fields = new std::vector<YamlField>{
      TlsStringField("cert_file", &TlsConfig::cert_file),
      TlsStringField("key_file", &TlsConfig::key_file),
      TlsStringField("client_ca_file", &TlsConfig::client_ca_file),
  };
  return *fields;
}

template <typename T, typename Parse>
YamlField GateField(absl::string_view key, T planner::GateOptions::*member, Parse parse) {
  return {key,
          [member, parse](absl::string_view name, const YAML::Node& node,
                          PlannerConfig& config) -> absl::Status {
            auto value = parse(name, node);
            if (!value.ok()) return value.status();
            config.gate.*member = static_cast<T>(*value);
            return absl::OkStatus();
          }};
}

// The gate's keys; ranges beyond a value's type are GateOptions::Validate's.
const std::vector<YamlField>& GateFields() {
  constexpr uint64_t kMax32 = std::numeric_limits<uint32_t>::max();
  const auto integer = [](uint64_t max) {
    return [max](absl::string_view name, const YAML::Node& node) {
      return YamlInteger(name, node, 0, max);
    };
  };
  const auto number = [](absl::string_view name, const YAML::Node& node) {
    return YamlNonNegativeNumber(name, node);
  };
  static const auto* const fields = new std::vector<YamlField>{
      {"enabled",
       [](absl::string_view name, const YAML::Node& node, PlannerConfig& config) -> absl::Status {
         CACHEROUTE_ASSIGN_OR_RETURN(config.gate_enabled, YamlBool(name, node));
         return absl::OkStatus();
       }},
      GateField("min_samples", &planner::GateOptions::min_samples,
                integer(std::numeric_limits<uint64_t>::max())),
      GateField("window_intervals", &planner::GateOptions::window_intervals, integer(kMax32)),
      GateField("shadow_intervals", &planner::GateOptions::shadow_intervals, integer(kMax32)),
      GateField("canary_fraction", &planner::GateOptions::canary_fraction, number),
      GateField("control_fraction", &planner::GateOptions::control_fraction, number),
      GateField("promote_after", &planner::GateOptions::promote_after, integer(kMax32)),
      GateField("kv_hit_margin", &planner::GateOptions::kv_hit_margin, number),
      GateField("promote_better_after", &planner::GateOptions::promote_better_after,
                integer(kMax32)),
      GateField("canary_rollback_after", &planner::GateOptions::canary_rollback_after,
                integer(kMax32)),
      GateField("rollback_after", &planner::GateOptions::rollback_after, integer(kMax32)),
      GateField("retry_after", &planner::GateOptions::retry_after, integer(kMax32)),
      GateField("rolled_back_probe_fraction", &planner::GateOptions::rolled_back_probe_fraction,
                number),
      GateField("quantile", &planner::GateOptions::quantile, number),
      GateField("z", &planner::GateOptions::z, number),
      GateField("ttft_margin", &planner::GateOptions::ttft_margin, number),
      GateField("failure_margin", &planner::GateOptions::failure_margin, number),
      GateField("ttft_envelope_seconds", &planner::GateOptions::ttft_envelope_seconds, number),
      GateField("envelope_rollback_after", &planner::GateOptions::envelope_rollback_after,
                integer(kMax32)),
      GateField("envelope_min_samples", &planner::GateOptions::envelope_min_samples,
                integer(std::numeric_limits<uint64_t>::max())),
  };
  return *fields;
}

// The etcd section's keys (docs/ha.md).
const std::vector<YamlField>& EtcdFields() {
  const auto string_field = [](absl::string_view key, std::string EtcdConfig::*member) {
    return YamlField{key,
                     [member](absl::string_view name, const YAML::Node& node,
                              PlannerConfig& config) -> absl::Status {
                       CACHEROUTE_ASSIGN_OR_RETURN(config.etcd.*member, YamlString(name, node));
                       return absl::OkStatus();
                     }};
  };
  static const auto* const fields = new std::vector<YamlField>{
      {"endpoints",
       [](absl::string_view name, const YAML::Node& node, PlannerConfig& config) -> absl::Status {
         std::vector<std::string> endpoints;
         if (node.IsScalar()) {
           endpoints.push_back(node.Scalar());
         } else if (node.IsSequence()) {
           for (size_t i = 0; i < node.size(); ++i) {
             const std::string indexed = absl::StrCat(name, "[", i, "]");
             if (!node[i].IsScalar()) {
               return Invalid(indexed,
                              absl::StrCat("expected HOST:PORT, got ", DescribeNode(node[i])));
             }
             endpoints.push_back(node[i].Scalar());
           }
         } else {
           return Invalid(name,
                          absl::StrCat("expected a list of HOST:PORT, got ", DescribeNode(node)));
         }
         config.etcd.endpoints = std::move(endpoints);
         return absl::OkStatus();
       }},
      string_field("key_prefix", &EtcdConfig::key_prefix),
      {"lease_ttl_seconds",
       [](absl::string_view name, const YAML::Node& node, PlannerConfig& config) -> absl::Status {
         CACHEROUTE_ASSIGN_OR_RETURN(uint64_t value, YamlInteger(name, node, 1, 3600));
         config.etcd.lease_ttl_seconds = static_cast<int64_t>(value);
         return absl::OkStatus();
       }},
      string_field("replica_id", &EtcdConfig::replica_id),
      string_field("advertise", &EtcdConfig::advertise),
  };
  return *fields;
}

absl::Status CheckEtcd(const EtcdConfig& etcd) {
  if (!etcd.enabled) return absl::OkStatus();
  if (etcd.endpoints.empty()) {
    return Invalid("etcd.endpoints", "at least one HOST:PORT is required");
  }
  for (size_t i = 0; i < etcd.endpoints.size(); ++i) {
    if (absl::Status s = CheckHostPort(absl::StrCat("etcd.endpoints[", i, "]"), etcd.endpoints[i],
                                       /*allow_empty=*/false);
        !s.ok()) {
      return s;
    }
  }
  const std::string& prefix = etcd.key_prefix;
  if (prefix.size() < 2 || prefix.front() != '/' || prefix.back() != '/' ||
      prefix.find_first_of(" \t\r\n") != std::string::npos) {
    return Invalid("etcd.key_prefix",
                   absl::StrCat("must start and end with '/' (e.g. \"/cacheroute/prod/\") and hold "
                                "no whitespace, got ",
                                Quote(prefix)));
  }
  if (etcd.lease_ttl_seconds < 1 || etcd.lease_ttl_seconds > 3600) {
    return Invalid("etcd.lease_ttl_seconds",
                   absl::StrCat("must be in [1, 3600], got ", etcd.lease_ttl_seconds));
  }
  if (etcd.replica_id.size() > 256 ||
      etcd.replica_id.find_first_of(" \t\r\n") != std::string::npos) {
    return Invalid(
        "etcd.replica_id",
        absl::StrCat("must be at most 256 bytes without whitespace, got ", Quote(etcd.replica_id)));
  }
  return CheckHostPort("etcd.advertise", etcd.advertise, /*allow_empty=*/true);
}

// A section (tls, etcd, gate): a mapping of `fields`, applied with keys named "name.key"; null
// (every sub-key commented out) leaves the defaults. Anything else is an error saying that
// `expected` was.
absl::Status ApplySection(absl::string_view name, const YAML::Node& node,
                          absl::string_view expected, const std::vector<YamlField>& fields,
                          PlannerConfig& config) {
  if (node.IsNull()) return absl::OkStatus();
  if (!node.IsMap()) {
    return Invalid(name, absl::StrCat("expected ", expected, "; got ", DescribeNode(node)));
  }
  return ApplyMapping(absl::StrCat(name, "."), node, fields, config).status();
}

const std::vector<YamlField>& TopLevelFields() {
  constexpr uint64_t kNoMax = std::numeric_limits<uint64_t>::max();
  static const auto* const fields = new std::vector<YamlField>{
      StringField("listen", &PlannerConfig::listen,
                  [](absl::string_view name, absl::string_view value) {
                    return CheckHostPort(name, value, /*allow_empty=*/false);
                  }),
      StringField("metrics_listen", &PlannerConfig::metrics_listen,
                  [](absl::string_view name, absl::string_view value) {
                    return CheckHostPort(name, value, /*allow_empty=*/true);
                  }),
      {"tls",
       [](absl::string_view name, const YAML::Node& node, PlannerConfig& config) -> absl::Status {
         return ApplySection(name, node, "a mapping with cert_file, key_file, client_ca_file",
                             TlsFields(), config);
       }},
      {"etcd",
       [](absl::string_view name, const YAML::Node& node, PlannerConfig& config) -> absl::Status {
         if (node.IsMap()) config.etcd.enabled = true;
         return ApplySection(
             name, node,
             "a mapping (endpoints, key_prefix, lease_ttl_seconds, replica_id, advertise)",
             EtcdFields(), config);
       }},
      {"gate",
       [](absl::string_view name, const YAML::Node& node, PlannerConfig& config) -> absl::Status {
         return ApplySection(name, node, "a mapping (enabled, canary_fraction, …)", GateFields(),
                             config);
       }},
      // Setting one of token / token_file clears the other, so that a layer (YAML over
      // defaults, flags over YAML) replaces the way the token is given.
      {"token",
       [](absl::string_view name, const YAML::Node& node, PlannerConfig& config) -> absl::Status {
         CACHEROUTE_ASSIGN_OR_RETURN(std::string value, YamlString(name, node));
         if (absl::Status status = CheckToken(name, value); !status.ok()) return status;
         config.token = std::move(value);
         config.token_file.clear();
         return absl::OkStatus();
       }},
      {"token_file",
       [](absl::string_view name, const YAML::Node& node, PlannerConfig& config) -> absl::Status {
         CACHEROUTE_ASSIGN_OR_RETURN(config.token_file, YamlString(name, node));
         config.token.clear();
         return absl::OkStatus();
       }},
      {"token_required_for_reads",
       [](absl::string_view name, const YAML::Node& node, PlannerConfig& config) -> absl::Status {
         CACHEROUTE_ASSIGN_OR_RETURN(config.token_required_for_reads, YamlBool(name, node));
         return absl::OkStatus();
       }},
      StringField("state_dir", &PlannerConfig::state_dir, nullptr),
      {"destinations",
       [](absl::string_view name, const YAML::Node& node, PlannerConfig& config) -> absl::Status {
         CACHEROUTE_ASSIGN_OR_RETURN(config.destinations, YamlDestinations(name, node));
         return absl::OkStatus();
       }},
      PositiveNumberField("q_cap", &PlannerConfig::q_cap),
      IntegerField("slots_per_destination", &PlannerConfig::slots_per_destination, 1, kNoMax),
      NonNegativeNumberField("placement_stickiness", &PlannerConfig::placement_stickiness),
      {"follow_served",
       [](absl::string_view name, const YAML::Node& node, PlannerConfig& config) -> absl::Status {
         CACHEROUTE_ASSIGN_OR_RETURN(config.follow_served, YamlBool(name, node));
         return absl::OkStatus();
       }},
      StringField("algorithm", &PlannerConfig::algorithm, CheckAlgorithm),
      NonNegativeNumberField("kv_tokens_per_destination",
                             &PlannerConfig::kv_tokens_per_destination),
      ParsedField("planned_prefix_share", &PlannerConfig::planned_prefix_share,
                  [](absl::string_view name, const YAML::Node& node) -> absl::StatusOr<double> {
                    CACHEROUTE_ASSIGN_OR_RETURN(double value, YamlPositiveNumber(name, node));
                    if (absl::Status s = CheckShare(name, value); !s.ok()) return s;
                    return value;
                  }),
      NonNegativeNumberField("request_overhead_tokens", &PlannerConfig::request_overhead_tokens),
      DurationField("control_interval", &PlannerConfig::control_interval),
      DurationField("gate_interval", &PlannerConfig::gate_interval, /*zero_is_off=*/true),
      {"replicate",
       [](absl::string_view name, const YAML::Node& node, PlannerConfig& config) -> absl::Status {
         CACHEROUTE_ASSIGN_OR_RETURN(config.replicate, YamlBool(name, node));
         return absl::OkStatus();
       }},
      StringField("placement", &PlannerConfig::placement, CheckPlacement),
      IntegerField("placement_seed", &PlannerConfig::placement_seed, 0, kNoMax),
      IntegerField("max_plans", &PlannerConfig::max_plans, 0, kNoMax),
      PositiveNumberField("table_ttl_seconds", &PlannerConfig::table_ttl_seconds),
      IntegerField("history", &PlannerConfig::history, 1, kNoMax),
      DurationField("rate_smoothing", &PlannerConfig::rate_smoothing),
      DurationField("key_ttl", &PlannerConfig::key_ttl),
      IntegerField("max_keys_per_report", &PlannerConfig::max_keys_per_report, 1, kNoMax),
      IntegerField("max_message_bytes", &PlannerConfig::max_message_bytes, 1,
                   kMaxMessageBytesLimit),
      StringField("log_format", &PlannerConfig::log_format, CheckLogFormat),
  };
  return *fields;
}

absl::StatusOr<PlannerConfig> ParseYamlOrThrow(absl::string_view yaml, PlannerConfig config) {
  CACHEROUTE_ASSIGN_OR_RETURN(std::set<std::string> seen,
                              ApplyDocument(yaml, TopLevelFields(), config, "q_cap: 8"));
  if (seen.count("token") > 0 && seen.count("token_file") > 0) {
    return Invalid("token_file", "give either token or token_file, not both");
  }
  return config;
}

// ---- Flags. ----

struct Flags {
  std::string config;
  std::string listen;
  std::string metrics_listen;
  std::string state_dir;
  std::string destinations;
  std::string destination_names;
  std::string q_cap;
  std::string slots_per_destination;
  std::string placement_stickiness;
  std::string kv_tokens_per_destination;
  std::string planned_prefix_share;
  std::string control_interval;
  std::string token;
  std::string token_file;
  std::string tls_cert;
  std::string tls_key;
  std::string tls_client_ca;
  std::string log_format;
  std::string etcd_replica_id;
  std::string etcd_advertise;
};

// Flags are taken as strings and parsed here, so their errors read like the YAML ones.
absl::Status ApplyFlags(const CLI::App& app, const Flags& flags, PlannerConfig& config) {
  const auto given = [&app](const char* flag) { return app.count(flag) > 0; };
  if (given("--listen")) {
    if (absl::Status s = CheckHostPort("--listen", flags.listen, false); !s.ok()) return s;
    config.listen = flags.listen;
  }
  if (given("--metrics-listen")) {
    if (absl::Status s = CheckHostPort("--metrics-listen", flags.metrics_listen, true); !s.ok()) {
      return s;
    }
    config.metrics_listen = flags.metrics_listen;
  }
  if (given("--state-dir")) config.state_dir = flags.state_dir;
  if (given("--destinations")) {
    CACHEROUTE_ASSIGN_OR_RETURN(uint64_t count, ParseInteger("--destinations", flags.destinations,
                                                             1, kMaxConfigDestinations));
    config.destinations = NumberedDestinations(count);
  }
  if (given("--destination-names")) {
    std::vector<std::string> names = absl::StrSplit(flags.destination_names, ',');
    if (absl::Status s = CheckDestinations("--destination-names", names); !s.ok()) return s;
    config.destinations = std::move(names);
  }
  if (given("--q-cap")) {
    CACHEROUTE_ASSIGN_OR_RETURN(double q_cap, ParseNumber("--q-cap", flags.q_cap));
    if (absl::Status s = CheckPositiveFinite("--q-cap", q_cap); !s.ok()) return s;
    config.q_cap = q_cap;
  }
  if (given("--placement-stickiness")) {
    CACHEROUTE_ASSIGN_OR_RETURN(double value,
                                ParseNumber("--placement-stickiness", flags.placement_stickiness));
    if (absl::Status s = CheckNonNegativeFinite("--placement-stickiness", value); !s.ok()) {
      return s;
    }
    config.placement_stickiness = value;
  }
  if (given("--kv-tokens-per-destination")) {
    CACHEROUTE_ASSIGN_OR_RETURN(
        double value, ParseNumber("--kv-tokens-per-destination", flags.kv_tokens_per_destination));
    if (absl::Status s = CheckNonNegativeFinite("--kv-tokens-per-destination", value); !s.ok()) {
      return s;
    }
    config.kv_tokens_per_destination = value;
  }
  if (given("--planned-prefix-share")) {
    CACHEROUTE_ASSIGN_OR_RETURN(double value,
                                ParseNumber("--planned-prefix-share", flags.planned_prefix_share));
    if (absl::Status s = CheckShare("--planned-prefix-share", value); !s.ok()) return s;
    config.planned_prefix_share = value;
  }
  if (given("--slots-per-destination")) {
    CACHEROUTE_ASSIGN_OR_RETURN(config.slots_per_destination,
                                ParseInteger("--slots-per-destination", flags.slots_per_destination,
                                             1, std::numeric_limits<uint64_t>::max()));
  }
  if (given("--control-interval")) {
    CACHEROUTE_ASSIGN_OR_RETURN(config.control_interval,
                                ParseDurationText("--control-interval", flags.control_interval));
  }
  if (given("--token")) {
    if (absl::Status s = CheckToken("--token", flags.token); !s.ok()) return s;
    config.token = flags.token;
    config.token_file.clear();
  }
  if (given("--token-file")) {
    config.token_file = flags.token_file;
    config.token.clear();
  }
  if (given("--tls-cert")) config.tls.cert_file = flags.tls_cert;
  if (given("--tls-key")) config.tls.key_file = flags.tls_key;
  if (given("--tls-client-ca")) config.tls.client_ca_file = flags.tls_client_ca;
  if (given("--log-format")) {
    if (absl::Status s = CheckLogFormat("--log-format", flags.log_format); !s.ok()) return s;
    config.log_format = flags.log_format;
  }
  // Per replica (a Kubernetes pod passes $(POD_NAME) and $(POD_IP):50051), over the etcd section.
  if (given("--etcd-replica-id") || given("--etcd-advertise")) {
    if (!config.etcd.enabled) {
      return Invalid(given("--etcd-replica-id") ? "--etcd-replica-id" : "--etcd-advertise",
                     "needs an etcd section in the --config file");
    }
    if (given("--etcd-replica-id")) config.etcd.replica_id = flags.etcd_replica_id;
    if (given("--etcd-advertise")) {
      if (absl::Status s = CheckHostPort("--etcd-advertise", flags.etcd_advertise, false);
          !s.ok()) {
        return s;
      }
      config.etcd.advertise = flags.etcd_advertise;
    }
  }
  return absl::OkStatus();
}

void DeclareFlags(CLI::App& app, Flags& flags) {
  const PlannerConfig defaults;
  app.add_option("--config", flags.config,
                 "YAML configuration file (see deploy/planner.yaml); flags override it")
      ->type_name("FILE");
  app.add_option(
         "--listen", flags.listen,
         absl::StrCat("gRPC address; port 0 picks a free one (default ", defaults.listen, ")"))
      ->type_name("HOST:PORT");
  app.add_option("--metrics-listen", flags.metrics_listen,
                 absl::StrCat("HTTP /metrics and /healthz address, \"\" to disable (default ",
                              defaults.metrics_listen, ")"))
      ->type_name("HOST:PORT");
  app.add_option("--state-dir", flags.state_dir,
                 "Directory for the persisted table and rate state (default: none, in memory)")
      ->type_name("DIR");
  CLI::Option* destinations = app.add_option("--destinations", flags.destinations,
                                             "Number of destinations R, named 0 … R-1")
                                  ->type_name("N");
  CLI::Option* names = app.add_option("--destination-names", flags.destination_names,
                                      "Destination names, comma-separated")
                           ->type_name("a,b,c");
  destinations->excludes(names);
  app.add_option("--q-cap", flags.q_cap,
                 absl::StrCat("Per-assignment load cap, requests/s (default ", defaults.q_cap, ")"))
      ->type_name("Q");
  app.add_option("--slots-per-destination", flags.slots_per_destination,
                 absl::StrCat("Warm prefix slots per destination W (default ",
                              defaults.slots_per_destination, ")"))
      ->type_name("W");
  app.add_option("--placement-stickiness", flags.placement_stickiness,
                 absl::StrCat("Keep keys on their previous destinations while at most this "
                              "fraction above the mean load; 0 replans from scratch (default ",
                              defaults.placement_stickiness, ")"))
      ->type_name("S");
  app.add_option("--kv-tokens-per-destination", flags.kv_tokens_per_destination,
                 "The engines' KV capacity in tokens; > 0 turns on byte-aware planning "
                 "(default 0: off)")
      ->type_name("T");
  app.add_option("--planned-prefix-share", flags.planned_prefix_share,
                 absl::StrCat("Share of --kv-tokens-per-destination reserved for planned "
                              "prefixes, in (0, 1] (default ",
                              defaults.planned_prefix_share, ")"))
      ->type_name("S");
  app.add_option("--control-interval", flags.control_interval,
                 absl::StrCat("Time between plans, e.g. 10s, 500ms, 2m (default ",
                              absl::FormatDuration(defaults.control_interval), ")"))
      ->type_name("DURATION");
  CLI::Option* token =
      app.add_option("--token", flags.token,
                     "Bearer token for ReportRates and admin calls (visible in ps: prefer "
                     "--token-file)")
          ->type_name("T");
  CLI::Option* token_file =
      app.add_option("--token-file", flags.token_file, "File holding the bearer token")
          ->type_name("FILE");
  token->excludes(token_file);
  app.add_option("--etcd-replica-id", flags.etcd_replica_id,
                 "This replica's id among the etcd-coordinated planners (overrides "
                 "etcd.replica_id; default: the host name)")
      ->type_name("ID");
  app.add_option("--etcd-advertise", flags.etcd_advertise,
                 "Where the other replicas reach this gRPC port (overrides etcd.advertise)")
      ->type_name("HOST:PORT");
  app.add_option("--tls-cert", flags.tls_cert, "Server certificate chain (PEM); enables TLS")
      ->type_name("FILE");
  app.add_option("--tls-key", flags.tls_key, "Private key of --tls-cert (PEM)")->type_name("FILE");
  app.add_option("--tls-client-ca", flags.tls_client_ca,
                 "CA (PEM) that client certificates must chain to; enables mTLS")
      ->type_name("FILE");
  app.add_option(
         "--log-format", flags.log_format,
         absl::StrCat("Log lines on stderr: text or json (default ", defaults.log_format, ")"))
      ->type_name("FORMAT");
}

absl::StatusOr<PlannerConfig> LoadOrThrow(int argc, const char* const* argv) {
  CLI::App app{
      "CacheRoute planner: builds prefix-affinity routing tables from gateways' rates "
      "and streams them back.",
      std::string(kProgram)};
  Flags flags;
  DeclareFlags(app, flags);
  if (absl::Status s = base::ParseCommandLine(app, argc, argv); !s.ok()) return s;

  PlannerConfig config;
  if (app.count("--config") > 0) {
    CACHEROUTE_ASSIGN_OR_RETURN(
        config, base::ParseConfigFile(flags.config, config, &ParsePlannerConfigYaml));
  }
  if (absl::Status status = ApplyFlags(app, flags, config); !status.ok()) return status;

  if (!config.token_file.empty()) {
    const char* name = app.count("--token-file") > 0 ? "--token-file" : "token_file";
    CACHEROUTE_ASSIGN_OR_RETURN(std::string token, base::ReadConfigFile(name, config.token_file));
    absl::string_view trimmed = absl::StripTrailingAsciiWhitespace(token);
    if (trimmed.empty()) {
      return Invalid(name, absl::StrCat(Quote(config.token_file), " is empty"));
    }
    if (absl::Status s = CheckToken(absl::StrCat(name, " ", Quote(config.token_file)), trimmed);
        !s.ok()) {
      return s;
    }
    config.token = std::string(trimmed);
  }

  if (absl::Status status = ValidatePlannerConfig(config); !status.ok()) return status;
  return config;
}

}  // namespace

absl::StatusOr<PlannerConfig> ParsePlannerConfigYaml(absl::string_view text, PlannerConfig base) {
  return CatchingYaml([&] { return ParseYamlOrThrow(text, std::move(base)); });
}

absl::StatusOr<PlannerConfig> LoadPlannerConfig(int argc, const char* const* argv) {
  try {
    return LoadOrThrow(argc, argv);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("loading the configuration: ", e.what()));
  }
}

absl::Status ValidatePlannerConfig(const PlannerConfig& config) {
  const auto first_error = [](std::initializer_list<absl::Status> statuses) {
    for (const absl::Status& status : statuses) {
      if (!status.ok()) return status;
    }
    return absl::OkStatus();
  };
  constexpr uint64_t kNoMax = std::numeric_limits<uint64_t>::max();
  if (absl::Status status = first_error({
          CheckHostPort("listen", config.listen, /*allow_empty=*/false),
          CheckHostPort("metrics_listen", config.metrics_listen, /*allow_empty=*/true),
          CheckDestinations("destinations", config.destinations),
          CheckPositiveFinite("q_cap", config.q_cap),
          CheckIntegerRange("slots_per_destination", config.slots_per_destination, 1, kNoMax),
          CheckNonNegativeFinite("placement_stickiness", config.placement_stickiness),
          CheckPositiveDuration("control_interval", config.control_interval),
          CheckPositiveFinite("table_ttl_seconds", config.table_ttl_seconds),
          CheckIntegerRange("history", config.history, 1, kNoMax),
          CheckPositiveDuration("rate_smoothing", config.rate_smoothing),
          CheckPositiveDuration("key_ttl", config.key_ttl),
          CheckIntegerRange("max_keys_per_report", config.max_keys_per_report, 1, kNoMax),
          CheckIntegerRange("max_message_bytes", config.max_message_bytes, 1,
                            kMaxMessageBytesLimit),
          CheckToken("token", config.token),
          CheckLogFormat("log_format", config.log_format),
          CheckAlgorithm("algorithm", config.algorithm),
          CheckPlacement("placement", config.placement),
          CheckOffOrPositiveDuration("gate_interval", config.gate_interval),
          CheckNonNegativeFinite("kv_tokens_per_destination", config.kv_tokens_per_destination),
          CheckShare("planned_prefix_share", config.planned_prefix_share),
          CheckNonNegativeFinite("request_overhead_tokens", config.request_overhead_tokens),
      });
      !status.ok()) {
    return status;
  }
  if (config.kv_tokens_per_destination > 0 &&
      !planner::PlansByteAware(*planner::ParseAlgorithm(config.algorithm))) {
    return Invalid(
        "kv_tokens_per_destination",
        absl::StrCat("byte-aware planning is algorithm \"cacheroute\"'s; ", Quote(config.algorithm),
                     " plans by slots (set kv_tokens_per_destination to 0), got ",
                     config.kv_tokens_per_destination));
  }
  if (config.kv_tokens_per_destination > 0 && config.placement != "lpt") {
    return Invalid("placement", absl::StrCat("must be \"lpt\" with kv_tokens_per_destination > 0 "
                                             "(byte-aware planning places by LPT), got ",
                                             Quote(config.placement)));
  }
  const TlsConfig& tls = config.tls;
  if (tls.cert_file.empty() != tls.key_file.empty()) {
    return Invalid("tls",
                   absl::StrCat("cert_file and key_file must be set together, got "
                                "cert_file ",
                                Quote(tls.cert_file), " and key_file ", Quote(tls.key_file)));
  }
  if (!tls.client_ca_file.empty() && tls.cert_file.empty()) {
    return Invalid("tls.client_ca_file",
                   absl::StrCat("needs tls.cert_file and tls.key_file (client certificates are "
                                "checked over TLS), got ",
                                Quote(tls.client_ca_file), " without them"));
  }
  if (config.token_required_for_reads && config.token.empty() && config.token_file.empty()) {
    return Invalid("token_required_for_reads", "true needs a token (token or token_file)");
  }
  if (config.gate_enabled) {
    if (absl::Status status = config.gate.Validate(); !status.ok()) return status;
  }
  return CheckEtcd(config.etcd);
}

}  // namespace cacheroute::service
