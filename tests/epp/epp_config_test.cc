// EppConfig loading: the endpoint picker's own keys and the dataplane's (the gateway's field
// table), flags, errors naming the key and the value, the shipped example (deploy/epp.yaml), the
// Kubernetes manifests of deploy/k8s/inference agreeing with each other and with the loader, and
// the binary's exit code 2 on bad configuration.
#include "tools/epp/epp_config.h"

#include <sys/wait.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/support/text_cases.h"
#include "yaml-cpp/yaml.h"

namespace cacheroute::epp {
namespace {

namespace fs = std::filesystem;
using Mode = ::envoy::extensions::filters::http::ext_proc::v3::ProcessingMode;

constexpr char kMinimal[] = "upstreams:\n  - {name: engine-0, url: \"http://127.0.0.1:8001\"}\n";

std::string ErrorOf(const std::string& yaml) {
  absl::StatusOr<EppConfig> config = ParseEppConfigYaml(yaml);
  if (config.ok()) {
    const absl::Status s = ValidateEppConfig(*config);
    return s.ok() ? "" : std::string(s.message());
  }
  CHECK(config.status().code() == absl::StatusCode::kInvalidArgument);
  return std::string(config.status().message());
}

absl::StatusOr<EppConfig> Load(std::vector<std::string> args) {
  args.insert(args.begin(), "cacheroute-epp");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  return LoadEppConfig(static_cast<int>(argv.size()), argv.data());
}

std::string ReadText(const fs::path& path) {
  std::ifstream in(path);
  REQUIRE(in);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

const fs::path kDeploy = fs::path(CACHEROUTE_SOURCE_DIR) / "deploy";

TEST_CASE("defaults: GIE's body modes and port; the dataplane keys keep the gateway's defaults") {
  absl::StatusOr<EppConfig> config = ParseEppConfigYaml(kMinimal);
  REQUIRE(config.ok());
  REQUIRE(ValidateEppConfig(*config).ok());
  CHECK(config->listen == "127.0.0.1:9002");
  CHECK(config->metrics_listen == "127.0.0.1:9090");
  CHECK(config->request_body_mode == Mode::FULL_DUPLEX_STREAMED);
  CHECK(config->response_body_mode == Mode::FULL_DUPLEX_STREAMED);
  CHECK(config->max_request_body == 32u << 20);
  CHECK(config->fallback_endpoints == 0);  // GIE's reference pickers name one endpoint
  CHECK(config->drain_timeout == absl::Seconds(30));
  const frontend::FrontendConfig gateway_defaults;
  CHECK(config->dataplane.policy == gateway_defaults.policy);
  CHECK(config->dataplane.key_from == gateway_defaults.key_from);
  CHECK(config->dataplane.health_check_interval == gateway_defaults.health_check_interval);
  CHECK(config->dataplane.upstreams.size() == 1);
}

TEST_CASE("every key is read, the front-end core's into its configuration") {
  absl::StatusOr<EppConfig> config = ParseEppConfigYaml(R"(
listen: "[::1]:0"
metrics_listen: 127.0.0.1:0
request_body_mode: BUFFERED
response_body_mode: STREAMED
max_request_body: 1024
fallback_endpoints: 3
tls_cert_file: /c.pem
tls_key_file: /k.pem
tls_client_ca_file: /ca.pem
drain_delay: 5s
drain_timeout: 1m
upstreams_dns: "pool.serving.svc.cluster.local:8000"
policy: dualmap
key_header: X-Tenant
key_from: [user, header]
planner: [10.0.0.1:50051, 10.0.0.2:50051]
gateway_id: epp-7
health_check_interval: 5s
load_scrape_interval: 1s
)");
  INFO(config.status().ToString());
  REQUIRE(config.ok());
  CHECK(ValidateEppConfig(*config).ok());
  CHECK(config->listen == "[::1]:0");
  CHECK(config->request_body_mode == Mode::BUFFERED);
  CHECK(config->response_body_mode == Mode::STREAMED);
  CHECK(config->max_request_body == 1024);
  CHECK(config->fallback_endpoints == 3);
  CHECK(config->tls_client_ca_file == "/ca.pem");
  CHECK(config->drain_delay == absl::Seconds(5));
  CHECK(config->drain_timeout == absl::Minutes(1));
  CHECK(config->dataplane.upstreams_dns == "pool.serving.svc.cluster.local:8000");
  CHECK(config->dataplane.policy == "dualmap");
  CHECK(config->dataplane.key_header == "X-Tenant");
  CHECK(config->dataplane.key_from == std::vector<std::string>{"user", "header"});
  CHECK(config->dataplane.planner.size() == 2);
  CHECK(config->dataplane.gateway_id == "epp-7");
  CHECK(config->dataplane.health_check_interval == absl::Seconds(5));
  CHECK(config->dataplane.load_scrape_interval == absl::Seconds(1));
}

TEST_CASE("bad configurations name the key and the value") {
  const std::string m = kMinimal;
  testing::CheckEach(
      ErrorOf,
      {
          {m + "request_body_mode: STREAMED\n",
           "request_body_mode: must be one of FULL_DUPLEX_STREAMED, BUFFERED, NONE, got "
           "\"STREAMED\""},
          {m + "response_body_mode: grpc\n",
           "response_body_mode: must be one of FULL_DUPLEX_STREAMED, BUFFERED, STREAMED, NONE, got "
           "\"grpc\""},
          {m + "tls_cert_file: /c.pem\n",
           "tls_key_file: tls_cert_file and tls_key_file go together: set both or neither"},
          {m + "tls_client_ca_file: /ca.pem\n",
           "tls_client_ca_file: needs tls_cert_file and tls_key_file (TLS) as well"},
      });
  // The exact texts of the shared checks are theirs; here, that they name the key.
  for (const auto& [yaml, key] : std::vector<std::pair<std::string, std::string>>{
           {m + "max_request_body: 0\n", "max_request_body"},
           {m + "fallback_endpoints: 17\n", "fallback_endpoints"},
           {m + "fallback_endpoints: -1\n", "fallback_endpoints"},
           {m + "listen: 9002\n", "listen"},
           {m + "metrics_listen: nowhere\n", "metrics_listen"},
           {m + "drain_timeout: 0s\n", "drain_timeout"},
           {m + "policy: random\n", "policy"},
           {m + "upstreams_dns: \"no port\"\n", "upstreams_dns"},
           {"upstreams: []\n", "upstreams"}}) {
    INFO(yaml);
    CHECK(ErrorOf(yaml).rfind(key, 0) == 0);
  }
  // The gateway's HTTP keys mean nothing to an endpoint picker.
  for (const char* key : {"io_threads: 2", "header_timeout: 1s", "read_timeout: 1s",
                          "write_timeout: 1s", "api_key_file: /k"}) {
    INFO(key);
    CHECK(ErrorOf(m + key + "\n").find("unknown key") != std::string::npos);
  }
}

TEST_CASE("flags override the file") {
  const std::string path = "epp_config_test.yaml";
  std::ofstream(path) << kMinimal << "policy: sticky\n";
  absl::StatusOr<EppConfig> config =
      Load({"--config", path, "--policy", "preble", "--planner", "127.0.0.1:50051", "--gateway-id",
            "epp-1", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"});
  INFO(config.status().ToString());
  REQUIRE(config.ok());
  CHECK(config->dataplane.policy == "preble");
  CHECK(config->listen == "127.0.0.1:0");
  CHECK(config->metrics_listen == "127.0.0.1:0");
  CHECK(config->dataplane.planner == std::vector<std::string>{"127.0.0.1:50051"});
  CHECK(config->dataplane.gateway_id == "epp-1");
  config = Load({"--config", path, "--upstream", "x=http://127.0.0.1:7001"});
  REQUIRE(config.ok());
  REQUIRE(config->dataplane.upstreams.size() == 1);
  CHECK(config->dataplane.upstreams[0].name == "x");
  CHECK(Load({"--config", path, "--listen", "nowhere"}).status().message().find("--listen") !=
        absl::string_view::npos);
  CHECK(Load({"--config", path, "--metrics-listen", "x"})
            .status()
            .message()
            .find("--metrics-listen") != absl::string_view::npos);
  CHECK(Load({"--help"}).status().code() == absl::StatusCode::kNotFound);
  std::remove(path.c_str());
}

TEST_CASE("deploy/epp.yaml is valid") {
  absl::StatusOr<EppConfig> config = ParseEppConfigYaml(ReadText(kDeploy / "epp.yaml"));
  INFO(config.status().ToString());
  REQUIRE(config.ok());
  CHECK(ValidateEppConfig(*config).ok());
}

// The documents of deploy/k8s/inference by "Kind/name".
std::map<std::string, YAML::Node> InferenceManifests() {
  std::map<std::string, YAML::Node> by_name;
  for (const fs::directory_entry& entry : fs::directory_iterator(kDeploy / "k8s" / "inference")) {
    if (entry.path().extension() != ".yaml") continue;
    INFO(entry.path().string());
    std::vector<YAML::Node> documents;
    REQUIRE_NOTHROW(documents = YAML::LoadAll(ReadText(entry.path())));
    for (const YAML::Node& document : documents) {
      if (document.IsNull()) continue;
      REQUIRE(document["apiVersion"].IsScalar());
      REQUIRE(document["kind"].IsScalar());
      const std::string name = document["kind"].Scalar() == "Kustomization"
                                   ? entry.path().filename().string()
                                   : document["metadata"]["name"].Scalar();
      REQUIRE(by_name.emplace(document["kind"].Scalar() + "/" + name, document).second);
    }
  }
  return by_name;
}

TEST_CASE("deploy/k8s/inference: the pool, its endpoint picker and its access agree") {
  std::map<std::string, YAML::Node> m = InferenceManifests();
  for (const char* object :
       {"InferencePool/vllm-pool", "Service/cacheroute-epp", "ServiceAccount/cacheroute-epp",
        "Role/cacheroute-epp", "RoleBinding/cacheroute-epp",
        "ConfigMap/cacheroute-epp-config", "Deployment/cacheroute-epp",
        "PodDisruptionBudget/cacheroute-epp", "Kustomization/kustomization.yaml",
        "Gateway/inference-gateway", "HTTPRoute/llm"}) {
    INFO(object);
    REQUIRE(m.count(object) == 1);
  }
  const YAML::Node pool = m["InferencePool/vllm-pool"];
  CHECK(pool["apiVersion"].Scalar() == "inference.networking.k8s.io/v1");
  const YAML::Node service = m["Service/cacheroute-epp"];
  const YAML::Node deployment = m["Deployment/cacheroute-epp"];
  const YAML::Node container = deployment["spec"]["template"]["spec"]["containers"][0];

  // The pool names the EPP's Service and its gRPC port.
  CHECK(pool["spec"]["endpointPickerRef"]["name"].Scalar() == service["metadata"]["name"].Scalar());
  const YAML::Node grpc_port = service["spec"]["ports"][0];
  CHECK(grpc_port["name"].Scalar() == "grpc");
  CHECK(pool["spec"]["endpointPickerRef"]["port"]["number"].as<int>() ==
        grpc_port["port"].as<int>());
  CHECK(grpc_port["appProtocol"].Scalar() == "http2");
  // The Deployment runs as the ServiceAccount that the RoleBinding gives the Role: get, list
  // and watch of pods and inferencepools, what the pool source asks.
  const YAML::Node pod_spec = deployment["spec"]["template"]["spec"];
  CHECK(pod_spec["serviceAccountName"].Scalar() == "cacheroute-epp");
  CHECK(pod_spec["automountServiceAccountToken"].as<bool>());
  const YAML::Node binding = m["RoleBinding/cacheroute-epp"];
  CHECK(binding["subjects"][0]["kind"].Scalar() == "ServiceAccount");
  CHECK(binding["subjects"][0]["name"].Scalar() == "cacheroute-epp");
  CHECK(binding["roleRef"]["kind"].Scalar() == "Role");
  CHECK(binding["roleRef"]["name"].Scalar() == "cacheroute-epp");
  std::set<std::string> granted;
  for (const YAML::Node& rule : m["Role/cacheroute-epp"]["rules"]) {
    for (const YAML::Node& group : rule["apiGroups"]) {
      for (const YAML::Node& resource : rule["resources"]) {
        for (const YAML::Node& verb : rule["verbs"]) {
          granted.insert(group.Scalar() + "/" + resource.Scalar() + ":" + verb.Scalar());
        }
      }
    }
  }
  for (const char* verb : {"get", "list", "watch"}) {
    CHECK(granted.count(std::string("/pods:") + verb) == 1);
    CHECK(granted.count(std::string("inference.networking.k8s.io/inferencepools:") + verb) == 1);
  }
  CHECK(YAML::Dump(service["spec"]["selector"]) ==
        YAML::Dump(deployment["spec"]["selector"]["matchLabels"]));

  // The ConfigMap's epp.yaml loads, listens where the Deployment's ports and probes look, and
  // reads its members from the pool (in its own namespace, the kustomization's).
  const std::string text = m["ConfigMap/cacheroute-epp-config"]["data"]["epp.yaml"].Scalar();
  absl::StatusOr<EppConfig> config = ParseEppConfigYaml(text);
  INFO(config.status().ToString());
  REQUIRE(config.ok());
  CHECK(config->dataplane.gateway_id.empty());  // each pod passes its own (below)
  config->dataplane.gateway_id = "cacheroute-epp-0";
  CHECK(ValidateEppConfig(*config).ok());
  CHECK(config->dataplane.upstreams_inference_pool == pool["metadata"]["name"].Scalar());
  CHECK(config->dataplane.inference_pool_namespace.empty());
  CHECK(config->dataplane.kube_api_server.empty());  // in-cluster
  std::map<std::string, int> ports;
  for (const YAML::Node& p : container["ports"])
    ports[p["name"].Scalar()] = p["containerPort"].as<int>();
  CHECK(config->listen == absl::StrCat("0.0.0.0:", ports["grpc"]));
  CHECK(config->metrics_listen == absl::StrCat("0.0.0.0:", ports["metrics"]));
  CHECK(container["readinessProbe"]["grpc"]["port"].as<int>() == ports["grpc"]);
  CHECK(container["readinessProbe"]["grpc"]["service"].Scalar() == "readiness");
  CHECK(container["livenessProbe"]["grpc"]["service"].Scalar() == "liveness");
  CHECK(config->dataplane.health_check_interval > absl::ZeroDuration());
  // The grace period covers the drain and the last rate report.
  CHECK(absl::Seconds(
            deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"].as<int>()) >
        config->drain_delay + config->drain_timeout);
  // Each pod reports under its own name.
  bool gateway_id = false;
  for (const YAML::Node& arg : container["args"]) {
    gateway_id |= arg.Scalar() == "--gateway-id=$(POD_NAME)";
  }
  CHECK(gateway_id);

  // The kustomization applies every manifest but the example.
  std::set<std::string> resources;
  for (const YAML::Node& r : m["Kustomization/kustomization.yaml"]["resources"]) {
    resources.insert(r.Scalar());
  }
  for (const fs::directory_entry& entry : fs::directory_iterator(kDeploy / "k8s" / "inference")) {
    const std::string file = entry.path().filename().string();
    if (file == "kustomization.yaml") continue;
    INFO(file);
    CHECK(resources.count(file) == (file == "istio-gateway-example.yaml" ? 0u : 1u));
  }
  // The example's route sends to the pool.
  const YAML::Node backend = m["HTTPRoute/llm"]["spec"]["rules"][0]["backendRefs"][0];
  CHECK(backend["kind"].Scalar() == "InferencePool");
  CHECK(backend["group"].Scalar() == "inference.networking.k8s.io");
  CHECK(backend["name"].Scalar() == pool["metadata"]["name"].Scalar());
}

int ExitCode(const std::string& args) {
  const std::string command = std::string(CACHEROUTE_EPP_PATH) + " " + args + " >/dev/null 2>&1";
  const int status = std::system(command.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST_CASE("the binary exits with code 2 on a bad configuration or flag") {
  CHECK(ExitCode("--policy nope --upstream a=http://127.0.0.1:1") == 2);
  CHECK(ExitCode("--upstream a=ftp://127.0.0.1:1") == 2);
  CHECK(ExitCode("--listen 127.0.0.1:0") == 2);  // no member source
  CHECK(ExitCode("--bogus") == 2);
  CHECK(ExitCode("--help") == 0);
}

}  // namespace
}  // namespace cacheroute::epp
