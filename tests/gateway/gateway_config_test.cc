// GatewayConfig loading: YAML keys and flags, the errors that name the field and the value, the
// shipped example (deploy/gateway.yaml), and the binary's exit code 2 on bad configuration.
#include "tools/gateway/gateway_config.h"

#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace cacheroute::gateway {
namespace {

constexpr char kMinimal[] = R"(
upstreams:
  - {name: engine-0, url: "http://127.0.0.1:8001"}
  - {name: engine-1, url: "http://127.0.0.1:8002/"}
)";

std::string ErrorOf(const std::string& yaml) {
  absl::StatusOr<GatewayConfig> config = ParseGatewayConfigYaml(yaml);
  if (config.ok()) {
    absl::Status s = ValidateGatewayConfig(*config);
    return s.ok() ? "" : std::string(s.message());
  }
  CHECK(config.status().code() == absl::StatusCode::kInvalidArgument);
  return std::string(config.status().message());
}

absl::StatusOr<GatewayConfig> Load(std::vector<std::string> args) {
  args.insert(args.begin(), "cacheroute-gateway");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  return LoadGatewayConfig(static_cast<int>(argv.size()), argv.data());
}

TEST_CASE("a minimal YAML file gets the documented defaults") {
  absl::StatusOr<GatewayConfig> config = ParseGatewayConfigYaml(kMinimal);
  REQUIRE(config.ok());
  REQUIRE(ValidateGatewayConfig(*config).ok());
  REQUIRE(config->upstreams.size() == 2);
  CHECK(config->upstreams[1].name == "engine-1");
  CHECK(config->policy == "cacheroute");
  CHECK(config->key_header == "X-CacheRoute-Key");
  CHECK(config->planner.empty());
  CHECK(config->failure_threshold == 3);
  CHECK(config->report_interval == absl::Seconds(10));
  CHECK(config->table_ttl == absl::Seconds(60));
  CHECK(config->load_scrape_interval == absl::ZeroDuration());  // off
  CHECK(config->load_metric == "vllm:num_requests_waiting");
  CHECK(config->external_load_weight == 1.0);
}

TEST_CASE("every key is read") {
  absl::StatusOr<GatewayConfig> config = ParseGatewayConfigYaml(std::string(kMinimal) + R"(
listen: "[::1]:0"
policy: chwbl
key_header: X-Tenant
planner: planner.internal:50051
gateway_id: gw-7
report_interval: 500ms
table_ttl: 2m
table_cache: /var/lib/gw/table.pb
connect_timeout: 250ms
read_timeout: 30s
write_timeout: 5s
failure_threshold: 5
probe_interval: 1s
io_threads: 8
header_timeout: 90s
drain_timeout: 45s
drain_delay: 5s
key_from: [user, header]
prefix_bytes: 256
tls_cert_file: /etc/gw/listen.pem
tls_key_file: /etc/gw/listen.key
api_key_file: /etc/gw/api-keys
load_scrape_interval: 250ms
load_metric: "vllm:num_requests_running"
external_load_weight: 0.5
planner_token_file: /etc/gw/token
planner_tls_ca_file: /etc/gw/ca.pem
planner_tls_cert_file: /etc/gw/gw.pem
planner_tls_key_file: /etc/gw/gw.key
)");
  INFO(config.status().ToString());
  REQUIRE(config.ok());
  REQUIRE(ValidateGatewayConfig(*config).ok());
  CHECK(config->listen == "[::1]:0");
  CHECK(config->policy == "chwbl");
  CHECK(config->key_header == "X-Tenant");
  CHECK(config->planner == std::vector<std::string>{"planner.internal:50051"});
  CHECK(config->gateway_id == "gw-7");
  CHECK(config->report_interval == absl::Milliseconds(500));
  CHECK(config->table_ttl == absl::Minutes(2));
  CHECK(config->table_cache == "/var/lib/gw/table.pb");
  CHECK(config->connect_timeout == absl::Milliseconds(250));
  CHECK(config->read_timeout == absl::Seconds(30));
  CHECK(config->write_timeout == absl::Seconds(5));
  CHECK(config->failure_threshold == 5);
  CHECK(config->probe_interval == absl::Seconds(1));
  CHECK(config->io_threads == 8);
  CHECK(config->header_timeout == absl::Seconds(90));
  CHECK(config->drain_timeout == absl::Seconds(45));
  CHECK(config->drain_delay == absl::Seconds(5));
  CHECK(config->key_from == std::vector<std::string>{"user", "header"});
  CHECK(config->prefix_bytes == 256);
  CHECK(config->tls_cert_file == "/etc/gw/listen.pem");
  CHECK(config->tls_key_file == "/etc/gw/listen.key");
  CHECK(config->api_key_file == "/etc/gw/api-keys");
  CHECK(config->load_scrape_interval == absl::Milliseconds(250));
  CHECK(config->load_metric == "vllm:num_requests_running");
  CHECK(config->external_load_weight == 0.5);
  CHECK(config->planner_token_file == "/etc/gw/token");
  CHECK(config->planner_tls_ca_file == "/etc/gw/ca.pem");
  CHECK(config->planner_tls_cert_file == "/etc/gw/gw.pem");
  CHECK(config->planner_tls_key_file == "/etc/gw/gw.key");
  // 0 turns scraping off explicitly.
  absl::StatusOr<GatewayConfig> off =
      ParseGatewayConfigYaml(std::string(kMinimal) + "load_scrape_interval: 0s\n");
  REQUIRE(off.ok());
  CHECK(off->load_scrape_interval == absl::ZeroDuration());
}

TEST_CASE("text on which yaml-cpp's LoadAll never ends is read at once (found by fuzzing)") {
  // yaml-cpp 0.7 hands out the same empty document forever on a lone "," (jbeder/yaml-cpp#1040);
  // LoadAll collected them until memory ran out. It is one empty document now.
  for (const std::string yaml : {",", ",\n", "\n,\n"}) {
    absl::StatusOr<GatewayConfig> config = ParseGatewayConfigYaml(yaml);
    REQUIRE(config.ok());
    CHECK(config->upstreams.empty());
    absl::StatusOr<std::vector<frontend::Upstream>> list = frontend::ParseUpstreamListYaml(yaml);
    REQUIRE_FALSE(list.ok());
    CHECK_THAT(std::string(list.status().message()),
               Catch::Contains("upstreams: must list at least one upstream"));
  }
  CHECK(ErrorOf(std::string(kMinimal) + "---\n,\n") ==
        "expected one YAML document, got 2 (separated by ---)");
  absl::StatusOr<std::vector<frontend::Upstream>> two =
      frontend::ParseUpstreamListYaml("- {name: a, url: \"http://h:1\"}\n---\n,");
  REQUIRE_FALSE(two.ok());
  CHECK_THAT(std::string(two.status().message()), Catch::Contains("got 2"));
}

TEST_CASE("bad values are errors that name the field and the value") {
  const std::string base = kMinimal;
  struct Case {
    std::string yaml;
    std::vector<std::string> expected;  // substrings of the message
  };
  const std::vector<Case> cases = {
      {base + "policy: roundrobin\n", {"policy", "\"roundrobin\"", "cacheroute"}},
      {base + "listen: localhost\n", {"listen", "HOST:PORT", "\"localhost\""}},
      {base + "listen: 127.0.0.1:70000\n", {"listen", "port", "70000"}},
      {base + "planner: nohost\n", {"planner", "\"nohost\""}},
      {base + "planner: 127.0.0.1:50051\n", {"gateway_id", "planner", "127.0.0.1:50051"}},
      {base + "gateway_id: g\nplanner: [\"a:1\", nohost]\n", {"planner[1]", "\"nohost\""}},
      {base + "gateway_id: g\nplanner: [\"a:1\", \"a:1\"]\n",
       {"planner[1]", "duplicate", "\"a:1\""}},
      {base + "gateway_id: g\nplanner: []\n", {"planner", "empty list"}},
      {base + "gateway_id: g\nplanner: {a: 1}\n", {"planner", "HOST:PORT or a list"}},
      {base + "gateway_id: g\nplanner: \"a:1,b\"\n", {"planner[1]", "\"b\""}},
      {base + "report_interval: soon\n", {"report_interval", "\"soon\"", "duration"}},
      {base + "probe_interval: 0s\n", {"probe_interval", "0"}},
      {base + "load_scrape_interval: -1s\n", {"load_scrape_interval", "-1s"}},
      {base + "load_metric: \"queue depth\"\n", {"load_metric", "\"queue depth\""}},
      {base + "load_metric: \"\"\n", {"load_metric", "\"\""}},
      {base + "external_load_weight: -0.5\n", {"external_load_weight", "-0.5"}},
      {base + "planner_tls_ca_file: ca.pem\nplanner_tls_cert_file: gw.pem\n",
       {"planner_tls_key_file", "\"gw.pem\"", "both"}},
      {base + "planner_tls_ca_file: ca.pem\nplanner_tls_key_file: gw.key\n",
       {"planner_tls_cert_file", "\"gw.key\""}},
      {base + "planner_tls_cert_file: gw.pem\nplanner_tls_key_file: gw.key\n",
       {"planner_tls_ca_file", "\"gw.pem\""}},
      {base + "external_load_weight: lots\n", {"external_load_weight", "\"lots\""}},
      {base + "failure_threshold: 0\n", {"failure_threshold", "0"}},
      {base + "failure_threshold: -2\n", {"failure_threshold", "-2"}},
      {base + "failure_threshold: \"3\"\n", {"failure_threshold", "\"3\""}},
      {base + "key_header: \"X Key\"\n", {"key_header", "\"X Key\""}},
      {base + "polcy: sticky\n", {"polcy", "unknown key"}},
      {base + "policy: sticky\npolicy: chwbl\n", {"policy", "more than once"}},
      {"upstreams: []\n", {"upstreams", "at least one"}},
      {"upstreams: engine-0\n", {"upstreams", "\"engine-0\""}},
      {"upstreams:\n  - {name: a, url: \"https://x:1\"}\n", {"upstreams[0].url", "https://x:1"}},
      {"upstreams:\n  - {name: a, url: \"http://x\"}\n", {"upstreams[0].url", "http://x"}},
      {"upstreams:\n  - {name: a, url: \"http://x:1/v1\"}\n", {"upstreams[0].url", "path"}},
      {"upstreams:\n  - {name: a, url: \"http://x:0\"}\n", {"upstreams[0].url", "http://x:0"}},
      {"upstreams:\n  - {name: a}\n", {"upstreams[0].url", "missing"}},
      {"upstreams:\n  - {name: a, url: \"http://x:1\", weight: 2}\n",
       {"upstreams[0].weight", "unknown key"}},
      {"upstreams:\n  - {name: a, url: \"http://x:1\"}\n  - {name: a, url: \"http://y:1\"}\n",
       {"upstreams[1].name", "duplicate", "\"a\""}},
      {base + "upstreams_file: /etc/upstreams.yaml\n", {"upstreams_file", "one membership source"}},
      {"upstreams_file: /a.yaml\nupstreams_dns: \"engines:8000\"\n",
       {"upstreams_dns", "one membership source"}},
      {"upstreams_dns: engines\n", {"upstreams_dns", "HOST:PORT", "\"engines\""}},
      {"upstreams_dns: \"engines:0\"\n", {"upstreams_dns", "1 to 65535", "\"engines:0\""}},
      {"upstreams_dns: \"engines:8000\"\ndns_server: nowhere\n", {"dns_server", "\"nowhere\""}},
      {"upstreams_dns: \"engines:8000\"\nmembership_interval: 0s\n", {"membership_interval"}},
      {"upstreams_dns: \"engines:8000\"\nmax_upstreams: 0\n", {"max_upstreams", "0"}},
      {"listen: [1, 2\n", {"line"}},
      {"- a\n- b\n", {"mapping"}},
      {"", {"upstreams", "at least one"}},
  };
  for (const Case& c : cases) {
    INFO(c.yaml);
    const std::string message = ErrorOf(c.yaml);
    INFO(message);
    REQUIRE_FALSE(message.empty());
    for (const std::string& part : c.expected) CHECK(message.find(part) != std::string::npos);
  }
}

TEST_CASE("planner is one address, a YAML list, or a comma-separated string or flag") {
  const std::string base = std::string(kMinimal) + "gateway_id: gw-1\n";
  const std::vector<std::string> both = {"10.0.0.1:50051", "planner-1.planner:50051"};
  for (const std::string& yaml :
       {base + "planner: [\"10.0.0.1:50051\", \"planner-1.planner:50051\"]\n",
        base + "planner:\n  - 10.0.0.1:50051\n  - planner-1.planner:50051\n",
        base + "planner: \"10.0.0.1:50051, planner-1.planner:50051\"\n"}) {
    INFO(yaml);
    absl::StatusOr<GatewayConfig> config = ParseGatewayConfigYaml(yaml);
    INFO(config.status().ToString());
    REQUIRE(config.ok());
    CHECK(ValidateGatewayConfig(*config).ok());
    CHECK(config->planner == both);
  }
  absl::StatusOr<GatewayConfig> flag =
      Load({"--upstream", "a=http://127.0.0.1:7001", "--gateway-id", "gw-1", "--planner",
            "127.0.0.1:1,[::1]:2,planner:3"});
  INFO(flag.status().ToString());
  REQUIRE(flag.ok());
  CHECK(flag->planner == std::vector<std::string>{"127.0.0.1:1", "[::1]:2", "planner:3"});
  CHECK(Load({"--upstream", "a=http://127.0.0.1:7001", "--planner", ""})->planner.empty());
  const absl::Status bad = Load({"--upstream", "a=http://127.0.0.1:7001", "--gateway-id", "g",
                                 "--planner", "127.0.0.1:1,:x"})
                               .status();
  CHECK(bad.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(bad.message()), Catch::Contains("--planner[1]"));
  CHECK_THAT(std::string(bad.message()), Catch::Contains("\":x\""));
}

TEST_CASE("a dynamic membership source replaces the static list") {
  absl::StatusOr<GatewayConfig> dns = ParseGatewayConfigYaml(
      "upstreams_dns: \"vllm.serving.svc.cluster.local:8000\"\ndns_server: \"10.0.0.10:53\"\n"
      "membership_interval: 2s\nmax_upstreams: 64\n");
  REQUIRE(dns.ok());
  CHECK(ValidateGatewayConfig(*dns).ok());
  CHECK(dns->upstreams.empty());
  CHECK(dns->upstreams_dns == "vllm.serving.svc.cluster.local:8000");
  CHECK(dns->dns_server == "10.0.0.10:53");
  CHECK(dns->membership_interval == absl::Seconds(2));
  CHECK(dns->max_upstreams == 64);
  absl::StatusOr<GatewayConfig> file =
      ParseGatewayConfigYaml("upstreams_file: /etc/cacheroute/upstreams.yaml\n");
  REQUIRE(file.ok());
  CHECK(ValidateGatewayConfig(*file).ok());
  CHECK(file->membership_interval == absl::Seconds(5));
  CHECK(file->max_upstreams == 256);
}

TEST_CASE("flags override the file") {
  const std::string path = "gateway_config_test.yaml";
  {
    std::ofstream out(path);
    out << kMinimal << "policy: sticky\nlisten: 127.0.0.1:9000\n";
  }
  absl::StatusOr<GatewayConfig> config =
      Load({"--config", path, "--policy", "preble", "--planner", "127.0.0.1:50051", "--gateway-id",
            "gw-1", "--listen", "127.0.0.1:0"});
  INFO(config.status().ToString());
  REQUIRE(config.ok());
  CHECK(config->policy == "preble");
  CHECK(config->listen == "127.0.0.1:0");
  CHECK(config->planner == std::vector<std::string>{"127.0.0.1:50051"});
  CHECK(config->gateway_id == "gw-1");
  CHECK(config->upstreams.size() == 2);

  config = Load({"--config", path, "--upstream", "x=http://127.0.0.1:7001", "--upstream",
                 "y=http://127.0.0.1:7002"});
  REQUIRE(config.ok());
  REQUIRE(config->upstreams.size() == 2);
  CHECK(config->upstreams[0].name == "x");
  CHECK(config->upstreams[1].url == "http://127.0.0.1:7002");

  CHECK(Load({"--config", path, "--policy", "random"}).status().message().find("--policy") !=
        absl::string_view::npos);
  CHECK(Load({"--upstream", "nourl"}).status().message().find("NAME=URL") !=
        absl::string_view::npos);
  CHECK(Load({"--config", "/nonexistent/gw.yaml"}).status().message().find("/nonexistent") !=
        absl::string_view::npos);
  CHECK(Load({"--config", path, "--no-such-flag"}).status().code() ==
        absl::StatusCode::kInvalidArgument);
  CHECK(Load({"--help"}).status().code() == absl::StatusCode::kNotFound);
  std::remove(path.c_str());
}

TEST_CASE("deploy/gateway.yaml is valid") {
  std::ifstream in(std::string(CACHEROUTE_SOURCE_DIR) + "/deploy/gateway.yaml");
  REQUIRE(in);
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<GatewayConfig> config = ParseGatewayConfigYaml(text.str());
  INFO(config.status().ToString());
  REQUIRE(config.ok());
  CHECK(ValidateGatewayConfig(*config).ok());
}

int ExitCode(const std::string& args) {
  const std::string command =
      std::string(CACHEROUTE_GATEWAY_PATH) + " " + args + " >/dev/null 2>&1";
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST_CASE("the binary exits with code 2 on a bad configuration or flag") {
  CHECK(ExitCode("--policy nope --upstream a=http://127.0.0.1:1") == 2);
  CHECK(ExitCode("--upstream a=ftp://127.0.0.1:1") == 2);
  CHECK(ExitCode("--listen 127.0.0.1:0") == 2);  // no upstream
  CHECK(ExitCode("--bogus") == 2);
  CHECK(ExitCode("--help") == 0);
}

}  // namespace
}  // namespace cacheroute::gateway
