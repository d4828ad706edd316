// Loading GatewayConfig from YAML and flags (gateway_config.h): the proxy's own keys beside the
// front end's (frontend_config.h), one table for both.
#include "tools/gateway/gateway_config.h"

#include <exception>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "base/config_file.h"
#include "base/status_macros.h"
#include "base/yaml_fields.h"
#include "yaml-cpp/yaml.h"

namespace cacheroute::gateway {
namespace {

using namespace base::yaml;  // NOLINT: the shared checks, parsers and field makers
using YamlField = base::yaml::Field<GatewayConfig>;

// The front end's keys, then the proxy's.
const std::vector<YamlField>& Fields() {
  static const auto* const fields = [] {
    auto* all = new std::vector<YamlField>;
    for (const Field<frontend::FrontendConfig>& f : frontend::FrontendConfigFields()) {
      all->push_back(
          {f.key, [apply = f.apply](absl::string_view name, const YAML::Node& node,
                                    GatewayConfig& config) { return apply(name, node, config); }});
    }
    for (YamlField f : {
             StringField<GatewayConfig>("listen", &GatewayConfig::listen,
                                        [](absl::string_view n, absl::string_view v) {
                                          return frontend::CheckHostPort(n, v);
                                        }),
             DurationField<GatewayConfig>("header_timeout", &GatewayConfig::header_timeout),
             DurationField<GatewayConfig>("read_timeout", &GatewayConfig::read_timeout),
             DurationField<GatewayConfig>("write_timeout", &GatewayConfig::write_timeout),
             IntegerField<GatewayConfig>("io_threads", &GatewayConfig::io_threads, 0, 256),
             DurationField<GatewayConfig>("drain_delay", &GatewayConfig::drain_delay,
                                          /*zero_is_off=*/true),
             DurationField<GatewayConfig>("drain_timeout", &GatewayConfig::drain_timeout),
             StringField<GatewayConfig>("tls_cert_file", &GatewayConfig::tls_cert_file, nullptr),
             StringField<GatewayConfig>("tls_key_file", &GatewayConfig::tls_key_file, nullptr),
             StringField<GatewayConfig>("api_key_file", &GatewayConfig::api_key_file, nullptr),
         }) {
      all->push_back(std::move(f));
    }
    return all;
  }();
  return *fields;
}

absl::StatusOr<GatewayConfig> ParseYamlOrThrow(absl::string_view yaml, GatewayConfig config) {
  CACHEROUTE_ASSIGN_OR_RETURN(std::set<std::string> seen,
                              ApplyDocument(yaml, Fields(), config, "policy: cacheroute"));
  return config;
}

struct Flags {
  std::string config;
  std::string listen;
  frontend::FrontendFlags frontend;
};

absl::Status ApplyFlags(const CLI::App& app, const Flags& flags, GatewayConfig& config) {
  if (app.count("--listen") > 0) {
    if (absl::Status s = frontend::CheckHostPort("--listen", flags.listen); !s.ok()) return s;
    config.listen = flags.listen;
  }
  return frontend::ApplyFrontendFlags(app, flags.frontend, config);
}

absl::StatusOr<GatewayConfig> LoadOrThrow(int argc, const char* const* argv) {
  CLI::App app{
      "CacheRoute gateway: an OpenAI-compatible HTTP proxy that routes each request to a model "
      "server by the planner's table.",
      "cacheroute-gateway"};
  Flags flags;
  app.add_option("--config", flags.config, "YAML configuration (see deploy/gateway.yaml)")
      ->type_name("FILE");
  app.add_option("--listen", flags.listen, "HTTP address; port 0 picks a free one")
      ->type_name("HOST:PORT");
  frontend::AddFrontendFlags(app, flags.frontend);
  if (absl::Status s = base::ParseCommandLine(app, argc, argv); !s.ok()) return s;
  GatewayConfig config;
  if (app.count("--config") > 0) {
    CACHEROUTE_ASSIGN_OR_RETURN(
        config, base::ParseConfigFile(flags.config, config, &ParseGatewayConfigYaml));
  }
  if (absl::Status s = ApplyFlags(app, flags, config); !s.ok()) return s;
  if (absl::Status s = ValidateGatewayConfig(config); !s.ok()) return s;
  return config;
}

}  // namespace

absl::StatusOr<GatewayConfig> ParseGatewayConfigYaml(absl::string_view yaml, GatewayConfig base) {
  return CatchingYaml([&] { return ParseYamlOrThrow(yaml, std::move(base)); });
}

absl::StatusOr<GatewayConfig> LoadGatewayConfig(int argc, const char* const* argv) {
  try {
    return LoadOrThrow(argc, argv);
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("loading the configuration: ", e.what()));
  }
}

absl::Status ValidateGatewayConfig(const GatewayConfig& config) {
  for (absl::Status s : {
           frontend::CheckHostPort("listen", config.listen),
           frontend::ValidateFrontendConfig(config),
           CheckPositiveDuration("header_timeout", config.header_timeout),
           CheckPositiveDuration("read_timeout", config.read_timeout),
           CheckPositiveDuration("write_timeout", config.write_timeout),
           CheckPositiveDuration("drain_timeout", config.drain_timeout),
           CheckOffOrPositiveDuration("drain_delay", config.drain_delay),
       }) {
    if (!s.ok()) return s;
  }
  if (config.tls_cert_file.empty() != config.tls_key_file.empty()) {
    return Invalid(config.tls_cert_file.empty() ? "tls_cert_file" : "tls_key_file",
                   "missing: give tls_cert_file and tls_key_file together");
  }
  return absl::OkStatus();
}

}  // namespace cacheroute::gateway
