// See epp_config.h.
#include "tools/epp/epp_config.h"

#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/config_file.h"
#include "base/status_macros.h"
#include "base/yaml_fields.h"

namespace cacheroute::epp {
namespace {

using namespace base::yaml;  // NOLINT: the shared checks, parsers and field makers
using EppField = Field<EppConfig>;
using Mode = ::envoy::extensions::filters::http::ext_proc::v3::ProcessingMode;

constexpr absl::string_view kIpv6Example = "[::]:9002";
constexpr uint64_t kMaxFallbacks = 16;

absl::Status CheckListen(absl::string_view name, absl::string_view value) {
  return CheckHostPort(name, value, /*allow_empty=*/false, kIpv6Example);
}

// A body mode field: its name in Envoy's spelling.
EppField ModeField(absl::string_view key, BodySendMode EppConfig::*member, bool request) {
  return {key,
          [member, request](absl::string_view name, const YAML::Node& node,
                            EppConfig& config) -> absl::Status {
            CACHEROUTE_ASSIGN_OR_RETURN(std::string text, YamlString(name, node));
            CACHEROUTE_ASSIGN_OR_RETURN(config.*member, ParseBodyMode(name, text, request));
            return absl::OkStatus();
          }};
}

const std::vector<EppField>& Fields() {
  static const auto* const fields = [] {
    auto* f = new std::vector<EppField>{
        StringField("listen", &EppConfig::listen, CheckListen),
        StringField("metrics_listen", &EppConfig::metrics_listen, CheckListen),
        ModeField("request_body_mode", &EppConfig::request_body_mode, /*request=*/true),
        ModeField("response_body_mode", &EppConfig::response_body_mode, /*request=*/false),
        IntegerField("max_request_body", &EppConfig::max_request_body, 1, uint64_t{1} << 30),
        IntegerField("fallback_endpoints", &EppConfig::fallback_endpoints, 0, kMaxFallbacks),
        StringField("tls_cert_file", &EppConfig::tls_cert_file, nullptr),
        StringField("tls_key_file", &EppConfig::tls_key_file, nullptr),
        StringField("tls_client_ca_file", &EppConfig::tls_client_ca_file, nullptr),
        DurationField("drain_delay", &EppConfig::drain_delay, /*zero_is_off=*/true),
        DurationField("drain_timeout", &EppConfig::drain_timeout),
    };
    // The front-end core's keys, parsed by its own table into `dataplane`.
    for (const Field<frontend::FrontendConfig>& d : frontend::FrontendConfigFields()) {
      f->push_back({d.key, [apply = d.apply](absl::string_view name, const YAML::Node& node,
                                             EppConfig& config) {
                      return apply(name, node, config.dataplane);
                    }});
    }
    return f;
  }();
  return *fields;
}

absl::StatusOr<EppConfig> ParseOrThrow(absl::string_view yaml, EppConfig config) {
  CACHEROUTE_ASSIGN_OR_RETURN(std::set<std::string> seen,
                              ApplyDocument(yaml, Fields(), config, "policy: cacheroute"));
  return config;
}

struct Flags {
  std::string config;
  std::string listen;
  std::string metrics_listen;
  frontend::FrontendFlags dataplane;
};

absl::StatusOr<EppConfig> LoadOrThrow(int argc, const char* const* argv) {
  CLI::App app{
      "CacheRoute endpoint picker: serves Envoy's ext_proc protocol for the Gateway API Inference "
      "Extension, choosing each request's model server by the planner's table.",
      "cacheroute-epp"};
  Flags flags;
  app.add_option("--config", flags.config, "YAML configuration (see deploy/epp.yaml)")
      ->type_name("FILE");
  app.add_option("--listen", flags.listen, "gRPC address (ext_proc, health); port 0: a free one")
      ->type_name("HOST:PORT");
  app.add_option("--metrics-listen", flags.metrics_listen, "HTTP address of /metrics, /healthz")
      ->type_name("HOST:PORT");
  frontend::AddFrontendFlags(app, flags.dataplane);
  if (absl::Status s = base::ParseCommandLine(app, argc, argv); !s.ok()) return s;
  EppConfig config;
  if (app.count("--config") > 0) {
    CACHEROUTE_ASSIGN_OR_RETURN(config,
                                base::ParseConfigFile(flags.config, config, &ParseEppConfigYaml));
  }
  if (app.count("--listen") > 0) {
    if (absl::Status s = CheckListen("--listen", flags.listen); !s.ok()) return s;
    config.listen = flags.listen;
  }
  if (app.count("--metrics-listen") > 0) {
    if (absl::Status s = CheckListen("--metrics-listen", flags.metrics_listen); !s.ok()) return s;
    config.metrics_listen = flags.metrics_listen;
  }
  if (absl::Status s = frontend::ApplyFrontendFlags(app, flags.dataplane, config.dataplane);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = ValidateEppConfig(config); !s.ok()) return s;
  return config;
}

}  // namespace

absl::StatusOr<BodySendMode> ParseBodyMode(absl::string_view name, absl::string_view value,
                                           bool request) {
  const std::vector<BodySendMode> allowed =
      request ? std::vector<BodySendMode>{Mode::FULL_DUPLEX_STREAMED, Mode::BUFFERED, Mode::NONE}
              : std::vector<BodySendMode>{Mode::FULL_DUPLEX_STREAMED, Mode::BUFFERED,
                                          Mode::STREAMED, Mode::NONE};
  std::vector<std::string> names;
  for (const BodySendMode mode : allowed) {
    if (value == Mode::BodySendMode_Name(mode)) return mode;
    names.push_back(Mode::BodySendMode_Name(mode));
  }
  return Invalid(
      name, absl::StrCat("must be one of ", absl::StrJoin(names, ", "), ", got ", Quote(value)));
}

absl::StatusOr<EppConfig> ParseEppConfigYaml(absl::string_view yaml, EppConfig base) {
  return CatchingYaml([&] { return ParseOrThrow(yaml, std::move(base)); });
}

absl::StatusOr<EppConfig> LoadEppConfig(int argc, const char* const* argv) {
  return CatchingYaml([&] { return LoadOrThrow(argc, argv); });
}

absl::Status ValidateEppConfig(const EppConfig& config) {
  if (absl::Status s = CheckListen("listen", config.listen); !s.ok()) return s;
  if (absl::Status s = CheckListen("metrics_listen", config.metrics_listen); !s.ok()) return s;
  if (absl::Status s = frontend::ValidateFrontendConfig(config.dataplane); !s.ok()) return s;
  if (config.tls_cert_file.empty() != config.tls_key_file.empty()) {
    return Invalid(config.tls_cert_file.empty() ? "tls_cert_file" : "tls_key_file",
                   "tls_cert_file and tls_key_file go together: set both or neither");
  }
  if (!config.tls_client_ca_file.empty() && config.tls_cert_file.empty()) {
    return Invalid("tls_client_ca_file", "needs tls_cert_file and tls_key_file (TLS) as well");
  }
  if (absl::Status s = CheckPositiveDuration("drain_timeout", config.drain_timeout); !s.ok()) {
    return s;
  }
  return absl::OkStatus();
}

}  // namespace cacheroute::epp
