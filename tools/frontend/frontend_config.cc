// FrontendConfig's keys, flags and checks (frontend_config.h).
//
// The same per-value checks serve YAML keys and flags, so a bad policy reads the same wherever it
// came from; only the name in front differs (`policy`, `--policy`). yaml-cpp and CLI11 throw; both
// are caught here and turned into InvalidArgument (bad input) or Internal (anything else).
#include "tools/frontend/frontend_config.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cmath>
#include <exception>
#include <functional>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/config_file.h"
#include "base/status_macros.h"
#include "base/yaml_fields.h"
#include "cacheroute/dataplane/policy_registry.h"
#include "tools/frontend/openai_fields.h"
#include "yaml-cpp/yaml.h"

namespace cacheroute::frontend {
namespace {

using namespace base::yaml;  // NOLINT: the shared checks, parsers and field makers
using YamlField = base::yaml::Field<FrontendConfig>;

// ---- Per-value checks; `name` is the YAML key or the flag. ----

// HOST:PORT; an IPv6 host goes in brackets. Returns the host without brackets and the port.
absl::StatusOr<UpstreamAddress> SplitHostPort(absl::string_view name, absl::string_view value) {
  CACHEROUTE_ASSIGN_OR_RETURN(HostPort split, base::yaml::SplitHostPort(name, value, "[::1]:8000"));
  return UpstreamAddress{std::move(split.host), split.port};
}

absl::Status CheckHostPort(absl::string_view name, absl::string_view value, bool allow_empty) {
  return base::yaml::CheckHostPort(name, value, allow_empty, "[::1]:8000");
}

// The planner list: every address HOST:PORT, none twice. `name` is the key or the flag.
// A YAML list names its items `planner[i]` even when it has one; a string of one address names
// it `planner`.
absl::Status CheckPlanners(absl::string_view name, const std::vector<std::string>& planners,
                           bool from_list = false) {
  std::set<std::string> seen;
  for (size_t i = 0; i < planners.size(); ++i) {
    const std::string indexed =
        planners.size() == 1 && !from_list ? std::string(name) : absl::StrCat(name, "[", i, "]");
    if (absl::Status s = CheckHostPort(indexed, planners[i], false); !s.ok()) return s;
    if (!seen.insert(planners[i]).second) {
      return Invalid(indexed, absl::StrCat("duplicate address ", Quote(planners[i])));
    }
  }
  return absl::OkStatus();
}

// "a:1,b:2" (the flag; one YAML string too): split on commas, blanks around them ignored; ""
// is the empty list.
std::vector<std::string> SplitPlannerList(absl::string_view value) {
  std::vector<std::string> planners;
  if (absl::StripAsciiWhitespace(value).empty()) return planners;
  for (absl::string_view part : absl::StrSplit(value, ',')) {
    planners.emplace_back(absl::StripAsciiWhitespace(part));
  }
  return planners;
}

absl::Status YamlPlanners(absl::string_view name, const YAML::Node& node, FrontendConfig& config) {
  std::vector<std::string> planners;
  if (node.IsSequence()) {
    for (size_t i = 0; i < node.size(); ++i) {
      CACHEROUTE_ASSIGN_OR_RETURN(std::string s,
                                  YamlString(absl::StrCat(name, "[", i, "]"), node[i]));
      planners.push_back(std::move(s));
    }
    if (planners.empty()) return Invalid(name, "an empty list; leave the key out for no planner");
    if (absl::Status c = CheckPlanners(name, planners, true); !c.ok()) return c;
  } else {
    absl::StatusOr<std::string> s = YamlString(name, node);
    if (!s.ok()) {
      return Invalid(
          name, absl::StrCat("expected HOST:PORT or a list of them, got ", DescribeNode(node)));
    }
    planners = SplitPlannerList(*s);
    if (absl::Status c = CheckPlanners(name, planners); !c.ok()) return c;
  }
  config.planner = std::move(planners);
  return absl::OkStatus();
}

absl::Status CheckPolicy(absl::string_view name, absl::string_view value) {
  const dataplane::PolicyRegistry& policies = dataplane::BuiltinPolicies();
  if (const dataplane::PolicyInfo* info =
          policies.Find(std::string_view(value.data(), value.size()));
      info != nullptr) {
    // The front ends subscribe to no engine's KV events: such a policy would see none.
    if (info->reads_kv_events) {
      return Invalid(name, absl::StrCat("reads the engines' KV events, which this front end does "
                                        "not subscribe to (a simulator baseline); got ",
                                        Quote(value)));
    }
    return absl::OkStatus();
  }
  return Invalid(name, absl::StrCat("must be one of ", policies.Known(), "; got ", Quote(value)));
}

// RFC 9110 token characters.
absl::Status CheckHeaderName(absl::string_view name, absl::string_view value) {
  static constexpr absl::string_view kSpecials = "!#$%&'*+-.^_`|~";
  const bool ok = !value.empty() && std::all_of(value.begin(), value.end(), [](char c) {
    return absl::ascii_isalnum(c) || kSpecials.find(c) != absl::string_view::npos;
  });
  if (ok) return absl::OkStatus();
  return Invalid(name, absl::StrCat("must be a non-empty HTTP header name, got ", Quote(value)));
}

// A Prometheus metric name: [a-zA-Z_:][a-zA-Z0-9_:]*.
absl::Status CheckMetricName(absl::string_view name, absl::string_view value) {
  bool ok = !value.empty() && !absl::ascii_isdigit(static_cast<unsigned char>(value[0]));
  for (char c : value)
    ok = ok && (absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == ':');
  if (ok) return absl::OkStatus();
  return Invalid(name,
                 absl::StrCat("must be a Prometheus metric name ([a-zA-Z_:][a-zA-Z0-9_:]*), got ",
                              Quote(value)));
}

// NAME:PORT of upstreams_dns (empty: not used); the port is the engines' and must not be 0.
absl::Status CheckDnsName(absl::string_view name, absl::string_view value) {
  if (value.empty()) return absl::OkStatus();
  CACHEROUTE_ASSIGN_OR_RETURN(UpstreamAddress address, SplitHostPort(name, value));
  if (address.port == 0) {
    return Invalid(name, absl::StrCat("the engines' port must be 1 to 65535, got ", Quote(value)));
  }
  return absl::OkStatus();
}

// dns_server: empty, or IPV4:PORT as membership/sources.h's resolver takes it.
absl::Status CheckDnsServer(absl::string_view name, absl::string_view value) {
  if (value.empty()) return absl::OkStatus();
  return ParseDnsServer(name, value).status();
}

// A Kubernetes object name: a DNS-1123 subdomain (pools) or label (namespaces): lowercase
// letters, digits and '-' ('.' too in a subdomain), starting and ending with a letter or digit,
// at most 253 (63) characters (Kubernetes docs, "Object Names and IDs"). Empty: not used.
absl::Status CheckKubeName(absl::string_view name, absl::string_view value, bool subdomain) {
  if (value.empty()) return absl::OkStatus();
  const size_t max = subdomain ? 253 : 63;
  const auto alnum = [](char c) { return absl::ascii_islower(c) || absl::ascii_isdigit(c); };
  bool ok = value.size() <= max && alnum(value.front()) && alnum(value.back());
  for (char c : value) ok = ok && (alnum(c) || c == '-' || (subdomain && c == '.'));
  if (ok) return absl::OkStatus();
  return Invalid(name, absl::StrCat("must be a Kubernetes name (a DNS ",
                                    subdomain ? "subdomain" : "label", ": lowercase letters, "
                                    "digits, '-'", subdomain ? ", '.'" : "", "; at most ", max,
                                    " characters), got ", Quote(value)));
}

absl::Status CheckKubeApiServer(absl::string_view name, absl::string_view value) {
  if (value.empty()) return absl::OkStatus();
  return ParseKubeApiServer(name, value).status();
}

absl::Status CheckUpstreams(absl::string_view name, const std::vector<Upstream>& upstreams) {
  if (upstreams.empty()) return Invalid(name, "must list at least one upstream, got none");
  std::set<std::string> names;
  for (size_t i = 0; i < upstreams.size(); ++i) {
    const std::string indexed = absl::StrCat(name, "[", i, "]");
    if (upstreams[i].name.empty()) {
      return Invalid(absl::StrCat(indexed, ".name"), "must be non-empty, got \"\"");
    }
    if (!names.insert(upstreams[i].name).second) {
      return Invalid(absl::StrCat(indexed, ".name"),
                     absl::StrCat("duplicate name ", Quote(upstreams[i].name)));
    }
    CACHEROUTE_ASSIGN_OR_RETURN(UpstreamAddress address,
                                ParseUpstreamUrl(absl::StrCat(indexed, ".url"), upstreams[i].url));
  }
  return absl::OkStatus();
}

// ---- YAML. ----

absl::StatusOr<std::vector<Upstream>> YamlUpstreams(absl::string_view name,
                                                    const YAML::Node& node) {
  if (!node.IsSequence()) {
    return Invalid(name, absl::StrCat("expected a list of {name, url}, got ", DescribeNode(node)));
  }
  std::vector<Upstream> upstreams;
  for (size_t i = 0; i < node.size(); ++i) {
    const std::string indexed = absl::StrCat(name, "[", i, "]");
    const YAML::Node& item = node[i];
    if (!item.IsMap()) {
      return Invalid(
          indexed, absl::StrCat("expected a mapping with name and url, got ", DescribeNode(item)));
    }
    Upstream upstream;
    std::set<std::string> seen;
    for (const auto& entry : item) {
      const std::string key = entry.first.IsScalar() ? entry.first.Scalar() : "";
      const std::string field = absl::StrCat(indexed, ".", absl::CHexEscape(key));
      if (key != "name" && key != "url")
        return Invalid(field, "unknown key; known keys: name, url");
      if (!seen.insert(key).second) return Invalid(field, "given more than once");
      CACHEROUTE_ASSIGN_OR_RETURN(std::string value, YamlString(field, entry.second));
      (key == "name" ? upstream.name : upstream.url) = std::move(value);
    }
    if (seen.count("name") == 0) return Invalid(absl::StrCat(indexed, ".name"), "missing");
    if (seen.count("url") == 0) return Invalid(absl::StrCat(indexed, ".url"), "missing");
    upstreams.push_back(std::move(upstream));
  }
  if (absl::Status s = CheckUpstreams(name, upstreams); !s.ok()) return s;
  return upstreams;
}

absl::Status CheckKeyFrom(absl::string_view name, const std::vector<std::string>& sources) {
  if (sources.empty()) {
    return Invalid(name, "must name at least one of header, user, system");
  }
  std::set<std::string> seen;
  for (const std::string& s : sources) {
    if (std::find(std::begin(kKeySources), std::end(kKeySources), s) == std::end(kKeySources)) {
      return Invalid(name,
                     absl::StrCat("unknown source ", Quote(s), "; known: header, user, system"));
    }
    if (!seen.insert(s).second) return Invalid(name, absl::StrCat(Quote(s), " given twice"));
  }
  return absl::OkStatus();
}

absl::Status KeyFrom(absl::string_view name, const YAML::Node& node, FrontendConfig& config) {
  if (!node.IsSequence()) {
    return Invalid(name, absl::StrCat("expected a list such as [header, user, system], got ",
                                      DescribeNode(node)));
  }
  std::vector<std::string> sources;
  for (size_t i = 0; i < node.size(); ++i) {
    CACHEROUTE_ASSIGN_OR_RETURN(std::string s,
                                YamlString(absl::StrCat(name, "[", i, "]"), node[i]));
    sources.push_back(std::move(s));
  }
  if (absl::Status s = CheckKeyFrom(name, sources); !s.ok()) return s;
  config.key_from = std::move(sources);
  return absl::OkStatus();
}

// objectives: a mapping of objective name → integer priority.
absl::Status YamlObjectives(absl::string_view name, const YAML::Node& node,
                            FrontendConfig& config) {
  if (!node.IsMap()) {
    return Invalid(name, absl::StrCat("expected a mapping of objective name to priority, got ",
                                      DescribeNode(node)));
  }
  std::map<std::string, int> objectives;
  for (const auto& entry : node) {
    const std::string key = entry.first.IsScalar() ? entry.first.Scalar() : "";
    const std::string field = absl::StrCat(name, ".", absl::CHexEscape(key));
    if (key.empty()) return Invalid(field, "an objective name must be non-empty");
    CACHEROUTE_ASSIGN_OR_RETURN(std::string text, YamlPlainScalar(field, entry.second, "an integer"));
    int priority = 0;
    if (!absl::SimpleAtoi(text, &priority) || priority < -1'000'000 || priority > 1'000'000) {
      return Invalid(field,
                     absl::StrCat("must be an integer in [-1000000, 1000000], got ", Quote(text)));
    }
    if (!objectives.emplace(key, priority).second) return Invalid(field, "given more than once");
  }
  config.objectives = std::move(objectives);
  return absl::OkStatus();
}

// The shedding keys, when shed is on.
absl::Status CheckShedding(const FrontendConfig& config) {
  if (!config.shed) return absl::OkStatus();
  if (dataplane::DispatchFor(config.policy).rule != dataplane::DispatchRule::kTokenWork) {
    return Invalid("shed", absl::StrCat("needs a policy whose dispatch counts queued prefill "
                                        "tokens (every policy but cacheroute-paper); policy is ",
                                        Quote(config.policy)));
  }
  for (absl::Status s : {
           CheckPositiveFinite("shed_saturation_tokens", config.shed_saturation_tokens),
           config.shed_saturation_kv_usage > 0 && config.shed_saturation_kv_usage <= 1
               ? absl::OkStatus()
               : Invalid("shed_saturation_kv_usage",
                         absl::StrCat("must be in (0, 1], got ", config.shed_saturation_kv_usage)),
           CheckPositiveDuration("shed_queue_timeout", config.shed_queue_timeout),
           CheckPositiveDuration("shed_retry_after", config.shed_retry_after),
       }) {
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

}  // namespace

int PriorityOf(const FrontendConfig& config, const std::optional<std::string_view>& objective) {
  if (!objective.has_value()) return 0;
  const auto it = config.objectives.find(std::string(*objective));
  return it == config.objectives.end() ? 0 : it->second;
}

const std::vector<base::yaml::Field<FrontendConfig>>& FrontendConfigFields() {
  static const auto* const fields = new std::vector<YamlField>{
      YamlField{"upstreams",
                [](absl::string_view name, const YAML::Node& node,
                   FrontendConfig& config) -> absl::Status {
                  CACHEROUTE_ASSIGN_OR_RETURN(config.upstreams, YamlUpstreams(name, node));
                  return absl::OkStatus();
                }},
      StringField("upstreams_file", &FrontendConfig::upstreams_file, nullptr),
      StringField("upstreams_dns", &FrontendConfig::upstreams_dns, CheckDnsName),
      StringField("dns_server", &FrontendConfig::dns_server, CheckDnsServer),
      StringField("upstreams_inference_pool", &FrontendConfig::upstreams_inference_pool,
                  [](absl::string_view name, absl::string_view value) {
                    return CheckKubeName(name, value, /*subdomain=*/true);
                  }),
      StringField("inference_pool_namespace", &FrontendConfig::inference_pool_namespace,
                  [](absl::string_view name, absl::string_view value) {
                    return CheckKubeName(name, value, /*subdomain=*/false);
                  }),
      StringField("kube_api_server", &FrontendConfig::kube_api_server, CheckKubeApiServer),
      StringField("kube_token_file", &FrontendConfig::kube_token_file, nullptr),
      StringField("kube_ca_file", &FrontendConfig::kube_ca_file, nullptr),
      DurationField("membership_interval", &FrontendConfig::membership_interval),
      IntegerField("max_upstreams", &FrontendConfig::max_upstreams, 1, 4096),
      StringField("policy", &FrontendConfig::policy, CheckPolicy),
      StringField("key_header", &FrontendConfig::key_header, CheckHeaderName),
      YamlField{"planner", YamlPlanners},
      StringField("gateway_id", &FrontendConfig::gateway_id, nullptr),
      DurationField("report_interval", &FrontendConfig::report_interval),
      DurationField("table_ttl", &FrontendConfig::table_ttl),
      StringField("table_cache", &FrontendConfig::table_cache, nullptr),
      StringField("planner_token_file", &FrontendConfig::planner_token_file, nullptr),
      StringField("planner_tls_ca_file", &FrontendConfig::planner_tls_ca_file, nullptr),
      StringField("planner_tls_cert_file", &FrontendConfig::planner_tls_cert_file, nullptr),
      StringField("planner_tls_key_file", &FrontendConfig::planner_tls_key_file, nullptr),
      ParsedField("share", &FrontendConfig::share, YamlBool),
      DurationField("share_interval", &FrontendConfig::share_interval),
      DurationField("connect_timeout", &FrontendConfig::connect_timeout),
      IntegerField("failure_threshold", &FrontendConfig::failure_threshold, 1, 1'000'000),
      DurationField("probe_interval", &FrontendConfig::probe_interval),
      DurationField("health_check_interval", &FrontendConfig::health_check_interval,
                    /*zero_is_off=*/true),
      DurationField("health_check_timeout", &FrontendConfig::health_check_timeout),
      YamlField{"key_from", KeyFrom},
      IntegerField("prefix_bytes", &FrontendConfig::prefix_bytes, 1, 1u << 20),
      DurationField("load_scrape_interval", &FrontendConfig::load_scrape_interval,
                    /*zero_is_off=*/true),
      StringField("load_metric", &FrontendConfig::load_metric, CheckMetricName),
      NonNegativeNumberField("external_load_weight", &FrontendConfig::external_load_weight),
      ParsedField("shed", &FrontendConfig::shed, YamlBool),
      PositiveNumberField("shed_saturation_tokens", &FrontendConfig::shed_saturation_tokens),
      PositiveNumberField("shed_saturation_kv_usage", &FrontendConfig::shed_saturation_kv_usage),
      IntegerField("shed_queue_capacity", &FrontendConfig::shed_queue_capacity, 0, 1'000'000),
      DurationField("shed_queue_timeout", &FrontendConfig::shed_queue_timeout),
      DurationField("shed_retry_after", &FrontendConfig::shed_retry_after),
      YamlField{"objectives", YamlObjectives},
  };
  return *fields;
}

void AddFrontendFlags(CLI::App& app, FrontendFlags& flags) {
  app.add_option("--planner", flags.planner,
                 "Planner gRPC address, or several replicas' comma-separated; \"\" for none")
      ->type_name("HOST:PORT[,HOST:PORT…]");
  app.add_option("--gateway-id", flags.gateway_id, "This front end's id at the planner")
      ->type_name("ID");
  app.add_option("--policy", flags.policy,
                 absl::StrCat("Routing policy:\n", dataplane::BuiltinPolicies().Listing()))
      ->type_name("NAME");
  app.add_option("--upstream", flags.upstreams,
                 "Upstream model server, repeatable; replaces the file's list")
      ->type_name("NAME=URL");
}

absl::Status ApplyFrontendFlags(const CLI::App& app, const FrontendFlags& flags,
                                FrontendConfig& config) {
  const auto given = [&app](const char* flag) { return app.count(flag) > 0; };
  if (given("--planner")) {
    std::vector<std::string> planners = SplitPlannerList(flags.planner);
    if (absl::Status s = CheckPlanners("--planner", planners); !s.ok()) return s;
    config.planner = std::move(planners);
  }
  if (given("--gateway-id")) config.gateway_id = flags.gateway_id;
  if (given("--policy")) {
    if (absl::Status s = CheckPolicy("--policy", flags.policy); !s.ok()) return s;
    config.policy = flags.policy;
  }
  if (given("--upstream")) {
    std::vector<Upstream> upstreams;
    for (const std::string& flag : flags.upstreams) {
      const size_t eq = flag.find('=');
      if (eq == std::string::npos) {
        return Invalid("--upstream", absl::StrCat("expected NAME=URL, got ", Quote(flag)));
      }
      upstreams.push_back({flag.substr(0, eq), flag.substr(eq + 1)});
    }
    if (absl::Status s = CheckUpstreams("--upstream", upstreams); !s.ok()) return s;
    config.upstreams = std::move(upstreams);
    config.upstreams_file.clear();  // the flags replace the file's membership, whatever its source
    config.upstreams_dns.clear();
    config.upstreams_inference_pool.clear();
  }
  return absl::OkStatus();
}

absl::StatusOr<UpstreamAddress> ParseUpstreamUrl(absl::string_view name, absl::string_view url) {
  absl::string_view rest = url;
  if (!absl::ConsumePrefix(&rest, "http://")) {
    return Invalid(name, absl::StrCat("must be http://HOST:PORT, got ", Quote(url)));
  }
  absl::ConsumeSuffix(&rest, "/");
  if (absl::StrContains(rest, '/')) {
    return Invalid(name, absl::StrCat("must be http://HOST:PORT without a path, got ", Quote(url)));
  }
  absl::StatusOr<UpstreamAddress> address = SplitHostPort(name, rest);
  if (!address.ok()) {
    return Invalid(name, absl::StrCat("must be http://HOST:PORT with a port from 1 to 65535, got ",
                                      Quote(url)));
  }
  if (address->port == 0) {
    return Invalid(name, absl::StrCat("port must be between 1 and 65535, got ", Quote(url)));
  }
  return address;
}

namespace {

absl::StatusOr<std::vector<Upstream>> ParseUpstreamListOrThrow(absl::string_view yaml) {
  const YamlDocuments documents = LoadDocuments(std::string(yaml));
  if (documents.count > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected one YAML document, got ", documents.count, " (separated by ---)"));
  }
  if (documents.count == 0 || documents.first.IsNull()) {
    return YamlUpstreams("upstreams", YAML::Node(YAML::NodeType::Sequence));  // none: an error
  }
  const YAML::Node& root = documents.first;
  if (root.IsSequence()) return YamlUpstreams("upstreams", root);
  if (!root.IsMap()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the document must be a list of {name, url} or a mapping with the key upstreams, got ",
        DescribeNode(root)));
  }
  for (const auto& entry : root) {
    const std::string key = entry.first.IsScalar() ? entry.first.Scalar() : "";
    if (key != "upstreams") {
      return Invalid(absl::CHexEscape(key), "unknown key; the only key is upstreams");
    }
  }
  if (root.size() > 1) return Invalid("upstreams", "given more than once");
  return YamlUpstreams("upstreams", root["upstreams"]);
}

}  // namespace

absl::StatusOr<std::vector<Upstream>> ParseUpstreamListYaml(absl::string_view yaml) {
  return CatchingYaml([&] { return ParseUpstreamListOrThrow(yaml); });
}

namespace {
// Exactly one of upstreams, upstreams_file, upstreams_dns and upstreams_inference_pool; a static
// list within max_upstreams is not required (the Router is sized by it), but a dynamic source
// needs room. The pool's own keys only with a pool.
absl::Status CheckMembershipSource(const FrontendConfig& config) {
  const int sources = (config.upstreams.empty() ? 0 : 1) + (config.upstreams_file.empty() ? 0 : 1) +
                      (config.upstreams_dns.empty() ? 0 : 1) +
                      (config.upstreams_inference_pool.empty() ? 0 : 1);
  if (sources > 1) {
    const char* key = !config.upstreams_inference_pool.empty() ? "upstreams_inference_pool"
                      : !config.upstreams_dns.empty()          ? "upstreams_dns"
                                                               : "upstreams_file";
    return Invalid(key, "give one membership source: upstreams, upstreams_file, upstreams_dns or "
                        "upstreams_inference_pool");
  }
  if (config.upstreams_inference_pool.empty()) {
    for (const auto& [key, value] :
         {std::pair<const char*, const std::string*>{"inference_pool_namespace",
                                                     &config.inference_pool_namespace},
          {"kube_api_server", &config.kube_api_server},
          {"kube_token_file", &config.kube_token_file},
          {"kube_ca_file", &config.kube_ca_file}}) {
      if (!value->empty()) {
        return Invalid(key, absl::StrCat("is only used with upstreams_inference_pool, which is "
                                         "not set; got ",
                                         Quote(*value)));
      }
    }
  }
  if (sources == 0 || !config.upstreams.empty())
    return CheckUpstreams("upstreams", config.upstreams);
  if (config.max_upstreams < 1) return Invalid("max_upstreams", "must be >= 1, got 0");
  return absl::OkStatus();
}
}  // namespace

absl::Duration EffectiveLoadScrapeInterval(const FrontendConfig& config) {
  if (config.load_scrape_interval > absl::ZeroDuration()) return config.load_scrape_interval;
  const dataplane::PolicyInfo* info = dataplane::BuiltinPolicies().Find(config.policy);
  return info != nullptr && info->reads_scraped_metrics ? kPolicyMetricsScrapeInterval
                                                        : absl::ZeroDuration();
}

absl::Status ValidateFrontendConfig(const FrontendConfig& config) {
  for (absl::Status s : {
           CheckMembershipSource(config),
           CheckDnsName("upstreams_dns", config.upstreams_dns),
           CheckDnsServer("dns_server", config.dns_server),
           CheckKubeName("upstreams_inference_pool", config.upstreams_inference_pool, true),
           CheckKubeName("inference_pool_namespace", config.inference_pool_namespace, false),
           CheckKubeApiServer("kube_api_server", config.kube_api_server),
           CheckPositiveDuration("membership_interval", config.membership_interval),
           CheckPolicy("policy", config.policy),
           CheckHeaderName("key_header", config.key_header),
           CheckPlanners("planner", config.planner),
           CheckPositiveDuration("report_interval", config.report_interval),
           CheckPositiveDuration("table_ttl", config.table_ttl),
           CheckPositiveDuration("connect_timeout", config.connect_timeout),
           CheckPositiveDuration("probe_interval", config.probe_interval),
           CheckOffOrPositiveDuration("health_check_interval", config.health_check_interval),
           CheckPositiveDuration("health_check_timeout", config.health_check_timeout),
           CheckOffOrPositiveDuration("load_scrape_interval", config.load_scrape_interval),
           CheckMetricName("load_metric", config.load_metric),
           CheckNonNegativeFinite("external_load_weight", config.external_load_weight),
       }) {
    if (!s.ok()) return s;
  }
  if (!config.planner.empty() && config.gateway_id.empty()) {
    return Invalid("gateway_id",
                   absl::StrCat("must be set when planner is set (planner = ",
                                Quote(absl::StrJoin(config.planner, ",")), "), got \"\""));
  }
  if (config.planner_tls_cert_file.empty() != config.planner_tls_key_file.empty()) {
    const bool cert = !config.planner_tls_cert_file.empty();
    return Invalid(
        cert ? "planner_tls_key_file" : "planner_tls_cert_file",
        absl::StrCat("must be set with ",
                     cert ? "planner_tls_cert_file = " : "planner_tls_key_file = ",
                     Quote(cert ? config.planner_tls_cert_file : config.planner_tls_key_file),
                     " (mutual TLS needs both), got \"\""));
  }
  if (!config.planner_tls_cert_file.empty() && config.planner_tls_ca_file.empty()) {
    return Invalid("planner_tls_ca_file", absl::StrCat("must be set with planner_tls_cert_file = ",
                                                       Quote(config.planner_tls_cert_file),
                                                       " (TLS needs the CA), got \"\""));
  }
  if (config.share_interval < absl::Milliseconds(1) || config.share_interval > absl::Seconds(10)) {
    return Invalid("share_interval", absl::StrCat("must be in [1ms, 10s], got ",
                                                  absl::FormatDuration(config.share_interval)));
  }
  if (config.failure_threshold < 1) {
    return Invalid("failure_threshold",
                   absl::StrCat("must be >= 1, got ", config.failure_threshold));
  }
  if (absl::Status s = CheckKeyFrom("key_from", config.key_from); !s.ok()) return s;
  if (absl::Status s = CheckShedding(config); !s.ok()) return s;
  return absl::OkStatus();
}

absl::StatusOr<DnsServerAddress> ParseDnsServer(absl::string_view key, absl::string_view value) {
  const absl::Status invalid = Invalid(
      key, absl::StrCat("must be IPV4:PORT with a port from 1 to 65535 (e.g. \"10.96.0.10:53\"), "
                        "got ",
                        Quote(value)));
  const size_t colon = value.rfind(':');
  if (colon == absl::string_view::npos) return invalid;
  const std::string ip(value.substr(0, colon));
  const absl::string_view port_text = value.substr(colon + 1);
  in_addr parsed{};
  if (inet_pton(AF_INET, ip.c_str(), &parsed) != 1) return invalid;
  int port = 0;
  if (port_text.empty() || port_text.size() > 5 ||
      !std::all_of(port_text.begin(), port_text.end(),
                   [](char c) { return absl::ascii_isdigit(static_cast<unsigned char>(c)); }) ||
      !absl::SimpleAtoi(port_text, &port) || port < 1 || port > 65535) {
    return invalid;
  }
  return DnsServerAddress{ip, port};
}

absl::Status CheckHostPort(absl::string_view name, absl::string_view value) {
  return CheckHostPort(name, value, /*allow_empty=*/false);
}

absl::StatusOr<KubeServerAddress> ParseKubeApiServer(absl::string_view key,
                                                     absl::string_view value) {
  const absl::Status invalid =
      Invalid(key, absl::StrCat("must be https://HOST:PORT or http://HOST:PORT (no path), got ",
                                Quote(value)));
  KubeServerAddress address;
  absl::string_view rest = value;
  if (absl::ConsumePrefix(&rest, "https://")) {
    address.tls = true;
  } else if (!absl::ConsumePrefix(&rest, "http://")) {
    return invalid;
  }
  absl::ConsumeSuffix(&rest, "/");
  if (absl::StrContains(rest, '/')) return invalid;
  absl::StatusOr<UpstreamAddress> split = SplitHostPort(key, rest);
  if (!split.ok() || split->port == 0 || split->host.empty()) return invalid;
  address.host = std::move(split->host);
  address.port = split->port;
  return address;
}

absl::StatusOr<std::string> ReadNonEmptyFile(absl::string_view key, const std::string& path) {
  absl::StatusOr<std::string> text = base::ReadConfigFile(key, path);
  if (text.ok() && absl::StripAsciiWhitespace(*text).empty()) {
    return absl::InvalidArgumentError(absl::StrCat(key, ": \"", path, "\" is empty"));
  }
  return text;
}

bool DynamicMembership(const FrontendConfig& config) {
  return !config.upstreams_file.empty() || !config.upstreams_dns.empty() ||
         !config.upstreams_inference_pool.empty();
}

}  // namespace cacheroute::frontend
