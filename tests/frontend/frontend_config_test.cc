// FrontendConfig: its key table (every key a front end shares, none of a front end's own), the
// flags, and the checks that name the key and the value. Each front end's loading of the whole
// file is tested with it (tests/gateway/gateway_config_test.cc, tests/epp/epp_config_test.cc).
#include "tools/frontend/frontend_config.h"

#include <catch2/catch.hpp>
#include <set>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "base/yaml_fields.h"
#include "yaml-cpp/yaml.h"

namespace cacheroute::frontend {
namespace {

absl::StatusOr<FrontendConfig> Parse(const std::string& yaml) {
  FrontendConfig config;
  absl::StatusOr<std::set<std::string>> seen = base::yaml::CatchingYaml(
      [&] { return base::yaml::ApplyDocument(yaml, FrontendConfigFields(), config, "policy: x"); });
  if (!seen.ok()) return seen.status();
  return config;
}

constexpr char kMinimal[] = R"(
upstreams:
  - {name: engine-0, url: "http://127.0.0.1:8001"}
)";

TEST_CASE("the key table holds every shared key and none of a front end's own") {
  std::set<std::string> keys;
  for (const auto& field : FrontendConfigFields()) keys.insert(std::string(field.key));
  for (const char* own :
       {"listen", "header_timeout", "read_timeout", "write_timeout", "io_threads", "drain_delay",
        "drain_timeout", "tls_cert_file", "tls_key_file", "api_key_file"}) {
    INFO(own);
    CHECK(keys.count(own) == 0);
  }
  for (const char* shared : {"upstreams", "upstreams_dns", "upstreams_inference_pool",
                             "inference_pool_namespace", "kube_api_server", "kube_token_file",
                             "kube_ca_file", "policy", "key_from", "planner",
                             "gateway_id", "connect_timeout", "health_check_interval",
                             "load_scrape_interval", "share", "share_interval"}) {
    INFO(shared);
    CHECK(keys.count(shared) == 1);
  }
  CHECK(keys.size() == 41);
}

TEST_CASE("fleet sharing is on by default, every 25ms; share_interval is bounded to [1ms, 10s]") {
  absl::StatusOr<FrontendConfig> config = Parse(kMinimal);
  REQUIRE(config.ok());
  CHECK(config->share);
  CHECK(config->share_interval == absl::Milliseconds(5));

  config = Parse(std::string(kMinimal) + "share: false\nshare_interval: 100ms\n");
  REQUIRE(config.ok());
  CHECK_FALSE(config->share);
  CHECK(config->share_interval == absl::Milliseconds(100));
  CHECK(ValidateFrontendConfig(*config).ok());

  for (const char* value : {"20s", "500us"}) {
    config = Parse(std::string(kMinimal) + "share_interval: " + value + "\n");
    REQUIRE(config.ok());
    const absl::Status s = ValidateFrontendConfig(*config);
    INFO(s.message());
    CHECK_THAT(std::string(s.message()),
               Catch::StartsWith("share_interval: must be in [1ms, 10s]"));
  }
  const absl::StatusOr<FrontendConfig> bad = Parse(std::string(kMinimal) + "share: maybe\n");
  REQUIRE_FALSE(bad.ok());
  CHECK_THAT(std::string(bad.status().message()), Catch::StartsWith("share"));
}

TEST_CASE("a parsed config validates, and a bad value names the key and the value") {
  absl::StatusOr<FrontendConfig> config =
      Parse(std::string(kMinimal) + "policy: sticky\nkey_from: [user, header]\n");
  REQUIRE(config.ok());
  CHECK(config->policy == "sticky");
  CHECK(config->key_from == std::vector<std::string>{"user", "header"});
  CHECK(ValidateFrontendConfig(*config).ok());

  // The precise baselines need a KV event feed that no front end has.
  absl::StatusOr<FrontendConfig> precise = Parse(std::string(kMinimal) + "policy: llm-d-precise\n");
  REQUIRE_FALSE(precise.ok());
  CHECK_THAT(std::string(precise.status().message()), Catch::Contains("KV events"));
  absl::StatusOr<FrontendConfig> bad = Parse(std::string(kMinimal) + "policy: random\n");
  REQUIRE(!bad.ok());
  CHECK_THAT(std::string(bad.status().message()), Catch::StartsWith("policy: "));
  CHECK_THAT(std::string(bad.status().message()), Catch::Contains("\"random\""));

  config->planner = {"127.0.0.1:50051"};
  const absl::Status no_id = ValidateFrontendConfig(*config);
  CHECK_THAT(std::string(no_id.message()), Catch::StartsWith("gateway_id: must be set"));

  FrontendConfig empty;
  CHECK_THAT(std::string(ValidateFrontendConfig(empty).message()),
             Catch::StartsWith("upstreams: must list at least one upstream"));
}

TEST_CASE("shedding is off by default; its keys parse, validate and name the key and value") {
  absl::StatusOr<FrontendConfig> config = Parse(kMinimal);
  REQUIRE(config.ok());
  CHECK_FALSE(config->shed);
  CHECK(config->objectives.empty());
  CHECK(PriorityOf(*config, std::nullopt) == 0);

  config = Parse(std::string(kMinimal) +
                 "shed: true\nshed_saturation_tokens: 8000\nshed_saturation_kv_usage: 0.5\n"
                 "shed_queue_capacity: 0\n"
                 "shed_queue_timeout: 2s\nshed_retry_after: 3s\n"
                 "objectives: {chat: 10, batch: -1}\n");
  REQUIRE(config.ok());
  CHECK(ValidateFrontendConfig(*config).ok());
  CHECK(config->shed);
  CHECK(config->shed_saturation_tokens == 8000);
  CHECK(config->shed_saturation_kv_usage == 0.5);
  CHECK(config->shed_queue_capacity == 0);
  CHECK(config->shed_queue_timeout == absl::Seconds(2));
  CHECK(config->shed_retry_after == absl::Seconds(3));
  CHECK(PriorityOf(*config, "chat") == 10);
  CHECK(PriorityOf(*config, "batch") == -1);
  CHECK(PriorityOf(*config, "unknown") == 0);

  const auto error = [](const std::string& yaml) {
    absl::StatusOr<FrontendConfig> c = Parse(std::string(kMinimal) + yaml);
    if (c.ok()) return std::string(ValidateFrontendConfig(*c).message());
    return std::string(c.status().message());
  };
  CHECK_THAT(error("shed_saturation_tokens: -5\n"),
             Catch::Contains("shed_saturation_tokens") && Catch::Contains("-5"));
  CHECK_THAT(error("shed: true\nshed_saturation_kv_usage: 1.5\n"),
             Catch::Contains("shed_saturation_kv_usage") && Catch::Contains("1.5"));
  CHECK_THAT(error("shed_queue_capacity: lots\n"),
             Catch::Contains("shed_queue_capacity") && Catch::Contains("lots"));
  CHECK_THAT(error("shed_queue_timeout: 0s\n"), Catch::Contains("shed_queue_timeout"));
  CHECK_THAT(error("objectives: {chat: high}\n"),
             Catch::Contains("objectives.chat") && Catch::Contains("high"));
  CHECK_THAT(error("objectives: [chat]\n"), Catch::Contains("objectives"));
  // The paper's dispatch keeps no queued prefill: nothing to measure saturation by.
  CHECK_THAT(error("shed: true\npolicy: cacheroute-paper\n"),
             Catch::Contains("shed") && Catch::Contains("cacheroute-paper"));
  // Off, the paper's policy is fine.
  CHECK(error("policy: cacheroute-paper\n").empty());
}

TEST_CASE("engines are scraped when configured, or when the policy reads their metrics") {
  FrontendConfig config;
  config.policy = "chwbl";
  CHECK(EffectiveLoadScrapeInterval(config) == absl::ZeroDuration());
  config.policy = "llm-d";  // its queue and KV scores would be constant without a scrape
  CHECK(EffectiveLoadScrapeInterval(config) == kPolicyMetricsScrapeInterval);
  config.load_scrape_interval = absl::Milliseconds(250);
  CHECK(EffectiveLoadScrapeInterval(config) == absl::Milliseconds(250));
  config.policy = "flat-lb";
  CHECK(EffectiveLoadScrapeInterval(config) == absl::Milliseconds(250));
}

TEST_CASE("the shared flags override the configuration") {
  CLI::App app;
  FrontendFlags flags;
  AddFrontendFlags(app, flags);
  std::vector<std::string> args = {"--upstream", "y=http://127.0.0.1:7002",
                                   "--upstream", "x=http://127.0.0.1:7001",
                                   "--policy",   "preble"};
  std::reverse(args.begin(), args.end());  // CLI11 parses a vector from its back
  app.parse(args);
  FrontendConfig config;
  config.upstreams_dns = "vllm.test:8000";
  config.upstreams_inference_pool = "vllm-pool";
  REQUIRE(ApplyFrontendFlags(app, flags, config).ok());
  CHECK(config.policy == "preble");
  REQUIRE(config.upstreams.size() == 2);
  CHECK(config.upstreams[0].name == "y");
  CHECK(config.upstreams_dns.empty());  // the flags replace the membership, whatever its source
  CHECK(config.upstreams_inference_pool.empty());
  CHECK(ValidateFrontendConfig(config).ok());

  CLI::App bad_app;
  FrontendFlags bad_flags;
  AddFrontendFlags(bad_app, bad_flags);
  bad_app.parse(std::vector<std::string>{"nourl", "--upstream"});
  const absl::Status s = ApplyFrontendFlags(bad_app, bad_flags, config);
  CHECK_THAT(std::string(s.message()), Catch::StartsWith("--upstream: expected NAME=URL"));
}

TEST_CASE("the InferencePool source: its keys, checked, and only with a pool") {
  absl::StatusOr<FrontendConfig> config = Parse(
      "upstreams_inference_pool: vllm-pool\ninference_pool_namespace: serving\n"
      "kube_api_server: \"https://10.96.0.1:443\"\nkube_token_file: /t\nkube_ca_file: /ca\n");
  REQUIRE(config.ok());
  CHECK(config->upstreams_inference_pool == "vllm-pool");
  CHECK(config->inference_pool_namespace == "serving");
  CHECK(config->kube_token_file == "/t");
  CHECK(config->kube_ca_file == "/ca");
  CHECK(ValidateFrontendConfig(*config).ok());

  const auto error = [](const std::string& yaml) {
    absl::StatusOr<FrontendConfig> parsed = Parse(yaml);
    if (!parsed.ok()) return std::string(parsed.status().message());
    return std::string(ValidateFrontendConfig(*parsed).message());
  };
  CHECK_THAT(error("upstreams_inference_pool: Vllm_Pool\n"),
             Catch::StartsWith("upstreams_inference_pool: must be a Kubernetes name") &&
                 Catch::Contains("\"Vllm_Pool\""));
  CHECK_THAT(error("upstreams_inference_pool: p\ninference_pool_namespace: a.b\n"),
             Catch::StartsWith("inference_pool_namespace: must be a Kubernetes name (a DNS label"));
  CHECK_THAT(error("upstreams_inference_pool: p\nkube_api_server: \"10.0.0.1:443\"\n"),
             Catch::StartsWith("kube_api_server: must be https://HOST:PORT") &&
                 Catch::Contains("\"10.0.0.1:443\""));
  CHECK_THAT(error("upstreams_inference_pool: p\nkube_api_server: \"https://h:443/api\"\n"),
             Catch::StartsWith("kube_api_server: "));
  CHECK_THAT(error("upstreams_inference_pool: p\nupstreams_dns: \"vllm.test:8000\"\n"),
             Catch::StartsWith("upstreams_inference_pool: give one membership source"));
  CHECK_THAT(error(std::string(kMinimal) + "kube_token_file: /t\n"),
             Catch::StartsWith("kube_token_file: is only used with upstreams_inference_pool"));

  absl::StatusOr<KubeServerAddress> server = ParseKubeApiServer("k", "http://[::1]:8080/");
  REQUIRE(server.ok());
  CHECK_FALSE(server->tls);
  CHECK(server->host == "::1");
  CHECK(server->port == 8080);
  CHECK(ParseKubeApiServer("k", "https://kubernetes.default.svc:443")->tls);
  CHECK_FALSE(ParseKubeApiServer("k", "https://:443").ok());
}

TEST_CASE("CheckHostPort and ParseDnsServer name the key and the value") {
  CHECK(CheckHostPort("listen", "127.0.0.1:0").ok());
  CHECK(CheckHostPort("listen", "[::1]:8080").ok());
  CHECK_THAT(std::string(CheckHostPort("listen", "nope").message()),
             Catch::StartsWith("listen: ") && Catch::Contains("\"nope\""));
  absl::StatusOr<DnsServerAddress> dns = ParseDnsServer("dns_server", "10.96.0.10:53");
  REQUIRE(dns.ok());
  CHECK(dns->port == 53);
  CHECK_THAT(std::string(ParseDnsServer("dns_server", "10.0.0.1").status().message()),
             Catch::StartsWith("dns_server: ") && Catch::Contains("\"10.0.0.1\""));
}

}  // namespace
}  // namespace cacheroute::frontend
