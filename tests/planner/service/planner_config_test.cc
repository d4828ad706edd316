// Tests for planner configuration loading (planner/service/config.h): the YAML format, the flags
// over it, validation, and the shipped files under deploy/ (planner.yaml and the Kubernetes
// manifests), so that an example that no longer loads fails the build's tests.
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "planner/service/config.h"
#include "tests/support/require_ok.h"
#include "tests/support/text_cases.h"
#include "yaml-cpp/yaml.h"

#ifndef CACHEROUTE_SOURCE_DIR
#error "CACHEROUTE_SOURCE_DIR must name the source tree (see tests/CMakeLists.txt)"
#endif

namespace cacheroute::service {
namespace {

namespace fs = std::filesystem;
using cacheroute::testing::CheckEach;
using cacheroute::testing::CheckEachArgs;

const fs::path kDeployDir = fs::path(CACHEROUTE_SOURCE_DIR) / "deploy";

PlannerConfig ParseOk(const std::string& yaml, PlannerConfig base = {}) {
  INFO(yaml);
  return cacheroute::testing::RequireOk(ParsePlannerConfigYaml(yaml, std::move(base)));
}

std::string ParseError(const std::string& yaml) {
  absl::StatusOr<PlannerConfig> config = ParsePlannerConfigYaml(yaml);
  INFO(yaml);
  REQUIRE_FALSE(config.ok());
  CHECK(config.status().code() == absl::StatusCode::kInvalidArgument);
  return std::string(config.status().message());
}

// A file under the temporary directory, removed when the object goes out of scope.
class TempFile {
 public:
  explicit TempFile(const std::string& contents) {
    static int counter = 0;
    path_ = fs::temp_directory_path() /
            absl::StrCat("planner_config_test_", getpid(), "_", counter++, ".yaml");
    std::ofstream out(path_, std::ios::binary);
    out << contents;
    out.close();
    REQUIRE(out.good());
  }
  ~TempFile() {
    std::error_code ignored;
    fs::remove(path_, ignored);
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  std::string path() const { return path_.string(); }

 private:
  fs::path path_;
};

absl::StatusOr<PlannerConfig> Load(std::vector<std::string> args) {
  args.insert(args.begin(), "cacheroute-planner");
  std::vector<const char*> argv;
  for (const std::string& arg : args) argv.push_back(arg.c_str());
  return LoadPlannerConfig(static_cast<int>(argv.size()), argv.data());
}

PlannerConfig LoadOk(std::vector<std::string> args) {
  return cacheroute::testing::RequireOk(Load(std::move(args)));
}

std::string LoadError(std::vector<std::string> args) {
  absl::StatusOr<PlannerConfig> config = Load(std::move(args));
  REQUIRE_FALSE(config.ok());
  CHECK(config.status().code() == absl::StatusCode::kInvalidArgument);
  return std::string(config.status().message());
}

std::string ReadText(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

PlannerConfig ValidConfig() {
  PlannerConfig config;
  config.destinations = {"a", "b", "c"};
  return config;
}

// ---- YAML ----

TEST_CASE("an empty or comment-only document leaves the base unchanged") {
  PlannerConfig base;
  base.q_cap = 3.5;
  base.destinations = {"x"};
  base.control_interval = absl::Milliseconds(250);
  for (const std::string yaml : {"", "\n", "# only a comment\n", "---\n", "~\n"}) {
    const PlannerConfig config = ParseOk(yaml, base);
    CHECK(config.q_cap == 3.5);
    CHECK(config.destinations == std::vector<std::string>{"x"});
    CHECK(config.control_interval == absl::Milliseconds(250));
    CHECK(config.listen == "127.0.0.1:50051");
  }
}

TEST_CASE("absent keys keep their base value") {
  PlannerConfig base;
  base.history = 7;
  base.log_format = "json";
  const PlannerConfig config = ParseOk("q_cap: 2\n", base);
  CHECK(config.q_cap == 2.0);
  CHECK(config.history == 7);
  CHECK(config.log_format == "json");
}

TEST_CASE("parses every key") {
  const PlannerConfig config = ParseOk(R"(
listen: "[::]:6000"
metrics_listen: ""
tls:
  cert_file: /tls/cert.pem
  key_file: /tls/key.pem
  client_ca_file: /tls/ca.pem
token: s3cret-Token
token_required_for_reads: true
state_dir: /var/lib/cr
destinations: [a, b, c]
q_cap: 2.5
slots_per_destination: 128
control_interval: 500ms
table_ttl_seconds: 12.5
history: 9
rate_smoothing: 2m
key_ttl: 1h30m
max_keys_per_report: 5000
max_message_bytes: 1048576
log_format: json
)");
  CHECK(config.listen == "[::]:6000");
  CHECK(config.metrics_listen.empty());
  CHECK(config.tls.cert_file == "/tls/cert.pem");
  CHECK(config.tls.key_file == "/tls/key.pem");
  CHECK(config.tls.client_ca_file == "/tls/ca.pem");
  CHECK(config.token == "s3cret-Token");
  CHECK(config.token_file.empty());
  CHECK(config.token_required_for_reads);
  CHECK(config.state_dir == "/var/lib/cr");
  CHECK(config.destinations == std::vector<std::string>{"a", "b", "c"});
  CHECK(config.q_cap == 2.5);
  CHECK(config.slots_per_destination == 128);
  CHECK(config.control_interval == absl::Milliseconds(500));
  CHECK(config.table_ttl_seconds == 12.5);
  CHECK(config.history == 9);
  CHECK(config.rate_smoothing == absl::Minutes(2));
  CHECK(config.key_ttl == absl::Minutes(90));
  CHECK(config.max_keys_per_report == 5000);
  CHECK(config.max_message_bytes == 1048576);
  CHECK(config.log_format == "json");
  CHECK(ValidatePlannerConfig(config).ok());
}

TEST_CASE("the experiment keys parse; their defaults are the algorithm's") {
  const PlannerConfig defaults;
  CHECK(defaults.gate_interval == absl::ZeroDuration());
  CHECK(defaults.replicate);
  CHECK(defaults.placement == "lpt");
  CHECK(defaults.max_plans == 0);
  const PlannerConfig config = ParseOk(R"(
gate_interval: 5s
replicate: false
placement: hashed
placement_seed: 42
max_plans: 1
algorithm: cacheroute-paper
)");
  CHECK(config.gate_interval == absl::Seconds(5));
  CHECK_FALSE(config.replicate);
  CHECK(config.placement == "hashed");
  CHECK(config.placement_seed == 42);
  CHECK(config.max_plans == 1);
  CHECK(config.algorithm == "cacheroute-paper");
  CHECK(ParseOk("gate_interval: 0s").gate_interval == absl::ZeroDuration());
  CheckEach(ParseError,
            {
                {"placement: random", "placement: must be \"lpt\" or \"hashed\", got \"random\""},
                {"algorithm: greedy",
                 "algorithm: must be one of cacheroute, cacheroute-paper, got \"greedy\""},
                {"gate_interval: -1s",
                 "gate_interval: must be 0 (off) or a finite duration > 0, got -1s"},
                {"max_plans: -1", "max_plans: must be an integer >= 0, got -1"},
            });
}

TEST_CASE("durations take a unit") {
  CHECK(ParseOk("control_interval: 10s").control_interval == absl::Seconds(10));
  CHECK(ParseOk("control_interval: 500ms").control_interval == absl::Milliseconds(500));
  CHECK(ParseOk("control_interval: \"2m\"").control_interval == absl::Minutes(2));
  CHECK(ParseOk("rate_smoothing: 1.5s").rate_smoothing == absl::Milliseconds(1500));
  CHECK(ParseOk("key_ttl: 1h").key_ttl == absl::Hours(1));

  CheckEach(
      ParseError,
      {
          {"control_interval: 10x",
           "control_interval: \"10x\" is not a duration (write e.g. \"10s\", \"500ms\", \"2m\")"},
          {"control_interval: 0s", "control_interval: must be a finite duration > 0, got 0"},
          {"rate_smoothing: -5s", "rate_smoothing: must be a finite duration > 0, got -5s"},
          {"key_ttl: inf", "key_ttl: must be a finite duration > 0, got inf"},
      });
  CHECK(absl::StartsWith(ParseError("control_interval: 10"),
                         "control_interval: \"10\" is not a duration"));
  CHECK(absl::StartsWith(ParseError("key_ttl: [1s]"), "key_ttl: expected a duration"));
}

TEST_CASE("destinations as a count are named 0 to N-1") {
  CHECK(ParseOk("destinations: 3").destinations == std::vector<std::string>{"0", "1", "2"});
  CHECK(ParseOk("destinations: 1").destinations == std::vector<std::string>{"0"});
  CHECK(ParseOk("destinations: 1048576").destinations.size() == 1048576);
  CheckEach(
      ParseError,
      {
          {"destinations: 0", "destinations: must be an integer between 1 and 1048576, got 0"},
          {"destinations: -2", "destinations: must be an integer between 1 and 1048576, got -2"},
          {"destinations: 1048577",
           "destinations: must be an integer between 1 and 1048576, got 1048577"},
      });
}

TEST_CASE("destinations as a list of names") {
  CHECK(ParseOk("destinations:\n  - vllm-0\n  - vllm-1\n  - 7\n").destinations ==
        std::vector<std::string>{"vllm-0", "vllm-1", "7"});
  CheckEach(ParseError,
            {
                {"destinations: [a, b, a]",
                 "destinations[2]: duplicate name \"a\" (also destinations[0])"},
                {"destinations: [a, \"\"]", "destinations[1]: name must be non-empty, got \"\""},
                {"destinations: [a, [b]]", "destinations[1]: expected a name, got a sequence"},
                {"destinations: [a, ~]", "destinations[1]: expected a name, got null"},
                {"destinations: []", "destinations: must name at least one destination, got none"},
                {"destinations: vllm-0",
                 "destinations: expected a count or a list of names, got \"vllm-0\""},
                {"destinations: {a: 1}",
                 "destinations: expected a count or a list of names, got a mapping"},
            });
}

TEST_CASE("unknown keys are errors naming the key") {
  CheckEach(ParseError,
            {
                {"q_capp: 8", "q_capp: unknown key (did you mean q_cap?)"},
                {"destination: 3", "destination: unknown key (did you mean destinations?)"},
                {"tls:\n  cert: a.pem\n", "tls.cert: unknown key (did you mean tls.cert_file?)"},
                {"tls:\n  bogus: x\n",
                 "tls.bogus: unknown key; known keys: cert_file, key_file, client_ca_file"},
            });
  const std::string unrelated = ParseError("frobnicate: 1");
  CHECK(absl::StartsWith(unrelated, "frobnicate: unknown key; known keys: listen, "));
  CHECK(absl::StrContains(unrelated, "log_format"));
}

TEST_CASE("the gate section parses, and its errors name gate.<field> and the value") {
  absl::StatusOr<PlannerConfig> parsed = ParsePlannerConfigYaml(
      "gate:\n  enabled: true\n  canary_fraction: 0.1\n  promote_after: 5\n  z: 3.09\n"
      "  envelope_rollback_after: 4\n  envelope_min_samples: 50\n");
  REQUIRE(parsed.ok());
  CHECK(parsed->gate_enabled);
  CHECK(parsed->gate.canary_fraction == 0.1);
  CHECK(parsed->gate.promote_after == 5);
  CHECK(parsed->gate.z == 3.09);
  CHECK(parsed->gate.envelope_rollback_after == 4);
  CHECK(parsed->gate.envelope_min_samples == 50);
  CHECK(parsed->gate.min_samples == planner::GateOptions{}.min_samples);  // untouched
  CHECK(PlannerConfig{}.gate_enabled);                                     // on by default
  absl::StatusOr<PlannerConfig> off = ParsePlannerConfigYaml("gate:\n  enabled: false\n");
  REQUIRE(off.ok());
  CHECK_FALSE(off->gate_enabled);
  CHECK(ParseError("gate:\n  canary: 0.1\n") ==
        "gate.canary: unknown key (did you mean gate.canary_fraction?)");
  CHECK(absl::StartsWith(ParseError("gate:\n  enabled: maybe\n"), "gate.enabled: "));
  CHECK(absl::StartsWith(ParseError("gate: 3\n"), "gate: expected a mapping"));
  PlannerConfig config = ValidConfig();
  config.gate_enabled = true;
  config.gate.canary_fraction = 1.5;
  const absl::Status status = ValidatePlannerConfig(config);
  REQUIRE_FALSE(status.ok());
  CHECK_THAT(std::string(status.message()), Catch::Contains("gate.canary_fraction"));
  CHECK_THAT(std::string(status.message()), Catch::Contains("1.5"));
  config.gate_enabled = false;  // a bad gate that is off is not checked
  CHECK(ValidatePlannerConfig(config).ok());
}

TEST_CASE("the etcd section parses with defaults, and its errors name etcd.<field> and the value") {
  CHECK_FALSE(PlannerConfig{}.etcd.enabled);  // no section: the planner runs alone
  absl::StatusOr<PlannerConfig> minimal =
      ParsePlannerConfigYaml("etcd:\n  endpoints: [10.0.0.1:2379, 'etcd-1:2379']\n");
  REQUIRE(minimal.ok());
  CHECK(minimal->etcd.enabled);
  CHECK(minimal->etcd.endpoints == std::vector<std::string>{"10.0.0.1:2379", "etcd-1:2379"});
  CHECK(minimal->etcd.key_prefix == "/cacheroute/default/");
  CHECK(minimal->etcd.lease_ttl_seconds == 5);
  CHECK(minimal->etcd.replica_id.empty());  // the host name, at start
  CHECK(minimal->etcd.advertise.empty());   // the listen address, at start
  PlannerConfig base = ValidConfig();
  absl::StatusOr<PlannerConfig> full = ParsePlannerConfigYaml(
      "etcd:\n  endpoints: [127.0.0.1:2379]\n  key_prefix: /cacheroute/prod/\n"
      "  lease_ttl_seconds: 3\n  replica_id: planner-0\n  advertise: 10.0.0.5:50051\n",
      base);
  REQUIRE(full.ok());
  CHECK(full->etcd.key_prefix == "/cacheroute/prod/");
  CHECK(full->etcd.lease_ttl_seconds == 3);
  CHECK(full->etcd.replica_id == "planner-0");
  CHECK(full->etcd.advertise == "10.0.0.5:50051");
  CHECK(ValidatePlannerConfig(*full).ok());

  CHECK(ParseError("etcd:\n  endpoint: [a:1]\n") ==
        "etcd.endpoint: unknown key (did you mean etcd.endpoints?)");
  CHECK(absl::StartsWith(ParseError("etcd: 3\n"), "etcd: expected a mapping"));
  CHECK(absl::StartsWith(ParseError("etcd:\n  endpoints: {a: 1}\n"), "etcd.endpoints: "));
  CHECK(absl::StartsWith(ParseError("etcd:\n  endpoints: [[a]]\n"), "etcd.endpoints[0]: "));
  CHECK(absl::StartsWith(ParseError("etcd:\n  lease_ttl_seconds: 0\n"),
                         "etcd.lease_ttl_seconds: "));
  CHECK_THAT(ParseError("etcd:\n  lease_ttl_seconds: 99999\n"), Catch::Contains("99999"));

  const auto validation_error = [&](const std::string& yaml) {
    absl::StatusOr<PlannerConfig> parsed = ParsePlannerConfigYaml(yaml, base);
    REQUIRE(parsed.ok());
    const absl::Status status = ValidatePlannerConfig(*parsed);
    REQUIRE_FALSE(status.ok());
    CHECK(status.code() == absl::StatusCode::kInvalidArgument);
    return std::string(status.message());
  };
  CHECK(absl::StartsWith(validation_error("etcd:\n  key_prefix: /x/\n"), "etcd.endpoints: "));
  CHECK(absl::StartsWith(validation_error("etcd:\n  endpoints: []\n"), "etcd.endpoints: "));
  const std::string bad_endpoint = validation_error("etcd:\n  endpoints: [a:1, nope]\n");
  CHECK(absl::StartsWith(bad_endpoint, "etcd.endpoints[1]: "));
  CHECK_THAT(bad_endpoint, Catch::Contains("nope"));
  const std::string bad_prefix =
      validation_error("etcd:\n  endpoints: [a:1]\n  key_prefix: cacheroute\n");
  CHECK(absl::StartsWith(bad_prefix, "etcd.key_prefix: "));
  CHECK_THAT(bad_prefix, Catch::Contains("\"cacheroute\""));
  CHECK(absl::StartsWith(
      validation_error("etcd:\n  endpoints: [a:1]\n  replica_id: \"a b\"\n"), "etcd.replica_id: "));
  const std::string bad_advertise =
      validation_error("etcd:\n  endpoints: [a:1]\n  advertise: 10.0.0.5\n");
  CHECK(absl::StartsWith(bad_advertise, "etcd.advertise: "));
  CHECK_THAT(bad_advertise, Catch::Contains("10.0.0.5"));
}

TEST_CASE("a key given twice is an error") {
  CHECK(ParseError("q_cap: 1\nq_cap: 2\n") == "q_cap: given more than once");
}

TEST_CASE("wrong types name the key and the value") {
  CheckEach(
      ParseError,
      {
          {"q_cap: \"8\"", "q_cap: expected a number, got the quoted string \"8\""},
          {"q_cap: fast", "q_cap: expected a number, got \"fast\""},
          {"q_cap: [8]", "q_cap: expected a number, got a sequence"},
          {"q_cap:", "q_cap: expected a number, got null"},
          {"history: 1.5", "history: expected an integer, got \"1.5\""},
          {"slots_per_destination: lots",
           "slots_per_destination: expected an integer, got \"lots\""},
          {"token_required_for_reads: maybe",
           "token_required_for_reads: expected true or false, got \"maybe\""},
          {"token_required_for_reads: \"true\"",
           "token_required_for_reads: expected true or false, got the quoted string \"true\""},
          {"state_dir:", "state_dir: expected a string, got null (write \"\" for an empty string)"},
          {"listen: {host: x}", "listen: expected a string, got a mapping"},
          {"tls:\n  key_file: [a]\n", "tls.key_file: expected a string, got a sequence"},
      });
  CHECK(absl::StartsWith(ParseError("tls: on"), "tls: expected a mapping"));
  CHECK(ParseOk("token_required_for_reads: false").token_required_for_reads == false);
  CHECK(ParseOk("tls:\n").tls.cert_file.empty());
}

TEST_CASE("out-of-range values name the key and the value") {
  CheckEach(
      ParseError,
      {
          {"q_cap: -1", "q_cap: must be a finite number > 0, got -1"},
          {"q_cap: 0", "q_cap: must be a finite number > 0, got 0"},
          {"q_cap: .inf", "q_cap: must be a finite number > 0, got inf"},
          {"q_cap: .nan", "q_cap: must be a finite number > 0, got nan"},
          {"table_ttl_seconds: 0", "table_ttl_seconds: must be a finite number > 0, got 0"},
          {"slots_per_destination: 0", "slots_per_destination: must be an integer >= 1, got 0"},
          {"slots_per_destination: -64", "slots_per_destination: must be an integer >= 1, got -64"},
          {"history: 0", "history: must be an integer >= 1, got 0"},
          {"placement_stickiness: -0.5",
           "placement_stickiness: must be a finite number >= 0, got -0.5"},
          {"max_keys_per_report: 0", "max_keys_per_report: must be an integer >= 1, got 0"},
          {"kv_tokens_per_destination: -1",
           "kv_tokens_per_destination: must be a finite number >= 0, got -1"},
          {"planned_prefix_share: 0", "planned_prefix_share: must be a finite number > 0, got 0"},
          {"planned_prefix_share: 1.5",
           "planned_prefix_share: must be a number in (0, 1], got 1.5"},
          {"request_overhead_tokens: .nan",
           "request_overhead_tokens: must be a finite number >= 0, got nan"},
          {"max_message_bytes: 2147483648",
           "max_message_bytes: must be an integer between 1 and 2147483647, got 2147483648"},
          {"log_format: xml", "log_format: must be \"text\" or \"json\", got \"xml\""},
          {"listen: localhost", "listen: must be HOST:PORT, got \"localhost\""},
          {"listen: \"\"", "listen: must be HOST:PORT, got \"\""},
          {"listen: \":50051\"", "listen: must be HOST:PORT with a non-empty host, got \":50051\""},
          {"listen: \"::1:50051\"",
           "listen: an IPv6 host goes in brackets, e.g. [::]:50051, got \"::1:50051\""},
          {"metrics_listen: \"0.0.0.0:65536\"",
           "metrics_listen: port must be an integer between 0 and 65535, got \"0.0.0.0:65536\""},
          {"metrics_listen: \"0.0.0.0:http\"",
           "metrics_listen: port must be an integer between 0 and 65535, got \"0.0.0.0:http\""},
      });
  CHECK(ParseOk("placement_stickiness: 0").placement_stickiness == 0);
  CHECK(ParseOk("placement_stickiness: 0.25").placement_stickiness == 0.25);
  CHECK(ParseOk("kv_tokens_per_destination: 641136").kv_tokens_per_destination == 641136);
  CHECK(ParseOk("planned_prefix_share: 1").planned_prefix_share == 1);
  CHECK(ParseOk("request_overhead_tokens: 105").request_overhead_tokens == 105);
  CHECK(ParseOk("listen: \"localhost:0\"").listen == "localhost:0");
  CHECK(ParseOk("listen: \"[::1]:50051\"").listen == "[::1]:50051");
}

TEST_CASE("token and token_file replace each other but not in one document") {
  PlannerConfig base;
  base.token = "from-base";
  const PlannerConfig with_file = ParseOk("token_file: /run/secrets/token\n", base);
  CHECK(with_file.token.empty());
  CHECK(with_file.token_file == "/run/secrets/token");
  CHECK(ParseOk("token: t\n", with_file).token_file.empty());
  CHECK(ParseError("token: a\ntoken_file: /t\n") ==
        "token_file: give either token or token_file, not both");
}

TEST_CASE("a token with spaces is rejected without echoing it") {
  const std::string message = ParseError("token: \"hunter2 secret\"");
  CHECK(message == "token: must be visible ASCII characters without spaces (value not shown)");
  CHECK_FALSE(absl::StrContains(message, "hunter2"));
}

TEST_CASE("malformed YAML reports the position") {
  CHECK(absl::StartsWith(ParseError("q_cap: [1, 2\n"), "line "));
  CHECK(absl::StartsWith(ParseError("listen: a\n  bad: - x\n"), "line 2"));
  CHECK(absl::StartsWith(ParseError("just a string"), "the document must be a mapping"));
  CheckEach(
      ParseError,
      {
          {"[1, 2]", "the document must be a mapping of keys (e.g. \"q_cap: 8\"), got a sequence"},
          {"q_cap: 1\n---\nq_cap: 2\n", "expected one YAML document, got 2 (separated by ---)"},
          {"? [a]\n: 1\n", "the document: keys must be strings, got a sequence as a key"},
      });
}

TEST_CASE("text on which yaml-cpp's LoadAll never ends is read at once (found by fuzzing)") {
  // yaml-cpp 0.7 hands out the same empty document forever on a lone "," (jbeder/yaml-cpp#1040);
  // LoadAll collected them until memory ran out. It is one empty document now.
  PlannerConfig base;
  base.q_cap = 3.5;
  for (const std::string yaml : {",", ",\n", "\n,\n", "# c\n,"}) {
    CHECK(ParseOk(yaml, base).q_cap == 3.5);
  }
  CHECK(ParseError("q_cap: 1\n---\n,\n") ==
        "expected one YAML document, got 2 (separated by ---)");
}

// ---- Validation ----

TEST_CASE("defaults with destinations validate") {
  CHECK(ValidatePlannerConfig(ValidConfig()).ok());
  const absl::Status status = ValidatePlannerConfig(PlannerConfig{});
  CHECK(status.code() == absl::StatusCode::kInvalidArgument);
  CHECK(status.message() == "destinations: must name at least one destination, got none");
}

TEST_CASE("each validation error names the field and the value") {
  struct Case {
    const char* what;
    std::function<void(PlannerConfig&)> mutate;
    std::string message;
  };
  const std::vector<Case> cases = {
      {"listen", [](PlannerConfig& c) { c.listen = ""; }, "listen: must be HOST:PORT, got \"\""},
      {"metrics_listen", [](PlannerConfig& c) { c.metrics_listen = "x:-1"; },
       "metrics_listen: port must be an integer between 0 and 65535, got \"x:-1\""},
      {"empty name",
       [](PlannerConfig& c) {
         c.destinations = {"a", ""};
       },
       "destinations[1]: name must be non-empty, got \"\""},
      {"duplicate name",
       [](PlannerConfig& c) {
         c.destinations = {"a", "b", "b"};
       },
       "destinations[2]: duplicate name \"b\" (also destinations[1])"},
      {"too many destinations",
       [](PlannerConfig& c) { c.destinations.assign(kMaxConfigDestinations + 1, "x"); },
       "destinations: at most 1048576 destinations are supported, got 1048577"},
      {"q_cap", [](PlannerConfig& c) { c.q_cap = -1; },
       "q_cap: must be a finite number > 0, got -1"},
      {"q_cap NaN", [](PlannerConfig& c) { c.q_cap = std::nan(""); },
       "q_cap: must be a finite number > 0, got nan"},
      {"kv_tokens_per_destination", [](PlannerConfig& c) { c.kv_tokens_per_destination = -2; },
       "kv_tokens_per_destination: must be a finite number >= 0, got -2"},
      {"planned_prefix_share", [](PlannerConfig& c) { c.planned_prefix_share = 0; },
       "planned_prefix_share: must be a number in (0, 1], got 0"},
      {"request_overhead_tokens", [](PlannerConfig& c) { c.request_overhead_tokens = -1; },
       "request_overhead_tokens: must be a finite number >= 0, got -1"},
      {"the paper's algorithm with byte-aware planning",
       [](PlannerConfig& c) {
         c.kv_tokens_per_destination = 641136;
         c.algorithm = "cacheroute-paper";
       },
       "kv_tokens_per_destination: byte-aware planning is algorithm \"cacheroute\"'s; "
       "\"cacheroute-paper\" plans by slots (set kv_tokens_per_destination to 0), got 641136"},
      {"hashed placement with byte-aware planning",
       [](PlannerConfig& c) {
         c.kv_tokens_per_destination = 641136;
         c.placement = "hashed";
       },
       "placement: must be \"lpt\" with kv_tokens_per_destination > 0 (byte-aware planning "
       "places by LPT), got \"hashed\""},
      {"W", [](PlannerConfig& c) { c.slots_per_destination = 0; },
       "slots_per_destination: must be an integer >= 1, got 0"},
      {"control_interval", [](PlannerConfig& c) { c.control_interval = absl::ZeroDuration(); },
       "control_interval: must be a finite duration > 0, got 0"},
      {"table_ttl_seconds",
       [](PlannerConfig& c) { c.table_ttl_seconds = std::numeric_limits<double>::infinity(); },
       "table_ttl_seconds: must be a finite number > 0, got inf"},
      {"history", [](PlannerConfig& c) { c.history = 0; },
       "history: must be an integer >= 1, got 0"},
      {"rate_smoothing", [](PlannerConfig& c) { c.rate_smoothing = absl::Seconds(-1); },
       "rate_smoothing: must be a finite duration > 0, got -1s"},
      {"key_ttl", [](PlannerConfig& c) { c.key_ttl = absl::InfiniteDuration(); },
       "key_ttl: must be a finite duration > 0, got inf"},
      {"max_keys_per_report", [](PlannerConfig& c) { c.max_keys_per_report = 0; },
       "max_keys_per_report: must be an integer >= 1, got 0"},
      {"max_message_bytes", [](PlannerConfig& c) { c.max_message_bytes = 0; },
       "max_message_bytes: must be an integer between 1 and 2147483647, got 0"},
      {"log_format", [](PlannerConfig& c) { c.log_format = "XML"; },
       "log_format: must be \"text\" or \"json\", got \"XML\""},
      {"token", [](PlannerConfig& c) { c.token = "a\nb"; },
       "token: must be visible ASCII characters without spaces (value not shown)"},
      {"cert without key", [](PlannerConfig& c) { c.tls.cert_file = "c.pem"; },
       "tls: cert_file and key_file must be set together, got cert_file \"c.pem\" and "
       "key_file \"\""},
      {"key without cert", [](PlannerConfig& c) { c.tls.key_file = "k.pem"; },
       "tls: cert_file and key_file must be set together, got cert_file \"\" and key_file "
       "\"k.pem\""},
      {"client CA without cert", [](PlannerConfig& c) { c.tls.client_ca_file = "ca.pem"; },
       "tls.client_ca_file: needs tls.cert_file and tls.key_file (client certificates are "
       "checked over TLS), got \"ca.pem\" without them"},
      {"reads need a token", [](PlannerConfig& c) { c.token_required_for_reads = true; },
       "token_required_for_reads: true needs a token (token or token_file)"},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    PlannerConfig config = ValidConfig();
    c.mutate(config);
    const absl::Status status = ValidatePlannerConfig(config);
    CHECK(status.code() == absl::StatusCode::kInvalidArgument);
    CHECK(status.message() == c.message);
  }
}

TEST_CASE("full TLS, mTLS and a token validate") {
  PlannerConfig config = ValidConfig();
  config.tls = {.cert_file = "c.pem", .key_file = "k.pem", .client_ca_file = "ca.pem"};
  config.token = "abc";
  config.token_required_for_reads = true;
  config.metrics_listen = "";
  CHECK(ValidatePlannerConfig(config).ok());
}

// ---- Flags ----

TEST_CASE("flags alone, without a config file") {
  const PlannerConfig config =
      LoadOk({"--destinations", "4", "--q-cap", "2.5", "--control-interval", "750ms"});
  CHECK(config.destinations == std::vector<std::string>{"0", "1", "2", "3"});
  CHECK(config.q_cap == 2.5);
  CHECK(config.control_interval == absl::Milliseconds(750));
  CHECK(config.listen == PlannerConfig{}.listen);
  CHECK(config.history == PlannerConfig{}.history);
}

TEST_CASE("flags override the YAML file, which overrides the defaults") {
  const TempFile file(R"(
listen: "0.0.0.0:7000"
metrics_listen: "0.0.0.0:7001"
state_dir: /from/yaml
destinations: [y0, y1, y2]
q_cap: 3
slots_per_destination: 10
control_interval: 20s
history: 5
token: from-yaml
tls: {cert_file: yaml.crt}
log_format: json
)");
  SECTION("YAML only") {
    const PlannerConfig config = LoadOk({"--config", file.path(), "--tls-key", "flag.key"});
    CHECK(config.listen == "0.0.0.0:7000");
    CHECK(config.metrics_listen == "0.0.0.0:7001");
    CHECK(config.state_dir == "/from/yaml");
    CHECK(config.destinations == std::vector<std::string>{"y0", "y1", "y2"});
    CHECK(config.q_cap == 3.0);
    CHECK(config.slots_per_destination == 10);
    CHECK(config.control_interval == absl::Seconds(20));
    CHECK(config.history == 5);
    CHECK(config.token == "from-yaml");
    CHECK(config.tls.cert_file == "yaml.crt");
    CHECK(config.tls.key_file == "flag.key");
    CHECK(config.log_format == "json");
    CHECK(config.key_ttl == PlannerConfig{}.key_ttl);  // not in the file: the default
  }
  SECTION("every flag") {
    const PlannerConfig config = LoadOk({"--config",
                                         file.path(),
                                         "--listen",
                                         "127.0.0.1:0",
                                         "--metrics-listen",
                                         "",
                                         "--state-dir",
                                         "/from/flag",
                                         "--destination-names",
                                         "f0,f1",
                                         "--q-cap",
                                         "9.5",
                                         "--slots-per-destination",
                                         "99",
                                         "--control-interval",
                                         "2m",
                                         "--token",
                                         "from-flag",
                                         "--tls-cert",
                                         "flag.crt",
                                         "--tls-key",
                                         "flag.key",
                                         "--tls-client-ca",
                                         "flag-ca.crt",
                                         "--log-format",
                                         "text"});
    CHECK(config.listen == "127.0.0.1:0");
    CHECK(config.metrics_listen.empty());
    CHECK(config.state_dir == "/from/flag");
    CHECK(config.destinations == std::vector<std::string>{"f0", "f1"});
    CHECK(config.q_cap == 9.5);
    CHECK(config.slots_per_destination == 99);
    CHECK(config.control_interval == absl::Minutes(2));
    CHECK(config.token == "from-flag");
    CHECK(config.tls.cert_file == "flag.crt");
    CHECK(config.tls.key_file == "flag.key");
    CHECK(config.tls.client_ca_file == "flag-ca.crt");
    CHECK(config.log_format == "text");
    CHECK(config.history == 5);  // no flag: the file's value
  }
  SECTION("--destinations N replaces the file's names") {
    const PlannerConfig config =
        LoadOk({"--config", file.path(), "--tls-key", "k", "--destinations", "2"});
    CHECK(config.destinations == std::vector<std::string>{"0", "1"});
  }
  SECTION("the merged result is validated") {
    // The file's cert has no key until a flag gives one.
    CHECK(LoadError({"--config", file.path()}) ==
          "tls: cert_file and key_file must be set together, got cert_file \"yaml.crt\" and "
          "key_file \"\"");
  }
}

TEST_CASE("bad flag values name the flag and the value") {
  CheckEachArgs(
      LoadError,
      {
          {{"--destinations", "0"},
           "--destinations: must be an integer between 1 and 1048576, got 0"},
          {{"--destinations", "3", "--q-cap", "-1"},
           "--q-cap: must be a finite number > 0, got -1"},
          {{"--destinations", "3", "--q-cap", "lots"}, "--q-cap: expected a number, got \"lots\""},
          {{"--destinations", "3", "--placement-stickiness", "-1"},
           "--placement-stickiness: must be a finite number >= 0, got -1"},
          {{"--destinations", "3", "--slots-per-destination", "0"},
           "--slots-per-destination: must be an integer >= 1, got 0"},
          {{"--destinations", "3", "--kv-tokens-per-destination", "-5"},
           "--kv-tokens-per-destination: must be a finite number >= 0, got -5"},
          {{"--destinations", "3", "--planned-prefix-share", "2"},
           "--planned-prefix-share: must be a number in (0, 1], got 2"},
          {{"--destinations", "3", "--control-interval", "10x"},
           "--control-interval: \"10x\" is not a duration (write e.g. \"10s\", \"500ms\", \"2m\")"},
          {{"--destination-names", "a,,b"},
           "--destination-names[1]: name must be non-empty, got \"\""},
          {{"--destination-names", "a,b,a"},
           "--destination-names[2]: duplicate name \"a\" (also --destination-names[0])"},
          {{"--destinations", "3", "--listen", "nowhere"},
           "--listen: must be HOST:PORT, got \"nowhere\""},
          {{"--destinations", "3", "--log-format", "xml"},
           "--log-format: must be \"text\" or \"json\", got \"xml\""},
          // Validation still applies when nothing names the destinations.
          {{}, "destinations: must name at least one destination, got none"},
      });
}

TEST_CASE("CLI11 parse errors become InvalidArgument with CLI11's message") {
  CHECK(absl::StrContains(LoadError({"--destinations", "3", "--no-such-flag"}), "--no-such-flag"));
  CHECK(absl::StrContains(LoadError({"--destinations", "3", "stray"}), "stray"));
  CHECK(absl::StrContains(LoadError({"--destinations"}), "--destinations"));
  CHECK(absl::StrContains(LoadError({"--destinations", "3", "--destination-names", "a"}),
                          "excludes"));
  CHECK(absl::StrContains(LoadError({"--destinations", "3", "--token", "a", "--token-file", "f"}),
                          "excludes"));
}

TEST_CASE("--help is NotFound carrying the help text") {
  for (const char* flag : {"--help", "-h"}) {
    const absl::StatusOr<PlannerConfig> config = Load({flag});
    REQUIRE(config.status().code() == absl::StatusCode::kNotFound);
    const std::string help(config.status().message());
    CHECK(absl::StrContains(help, "cacheroute-planner"));
    for (const char* documented :
         {"--config", "--listen", "--metrics-listen", "--state-dir", "--destinations",
          "--destination-names", "--q-cap", "--slots-per-destination", "--control-interval",
          "--token", "--token-file", "--tls-cert", "--tls-key", "--tls-client-ca",
          "--log-format"}) {
      INFO(documented);
      CHECK(absl::StrContains(help, documented));
    }
  }
}

TEST_CASE("--etcd-replica-id and --etcd-advertise override the etcd section, and need one") {
  const TempFile config("destinations: 2\netcd:\n  endpoints: [127.0.0.1:2379]\n  replica_id: x\n");
  const PlannerConfig loaded = LoadOk({"--config", config.path(), "--etcd-replica-id", "planner-1",
                                       "--etcd-advertise", "10.1.2.3:50051"});
  CHECK(loaded.etcd.enabled);
  CHECK(loaded.etcd.replica_id == "planner-1");
  CHECK(loaded.etcd.advertise == "10.1.2.3:50051");
  const TempFile alone("destinations: 2\n");
  CHECK(LoadError({"--config", alone.path(), "--etcd-replica-id", "p"}) ==
        "--etcd-replica-id: needs an etcd section in the --config file");
  CHECK(absl::StartsWith(
      LoadError({"--config", config.path(), "--etcd-advertise", "nope"}), "--etcd-advertise: "));
}

TEST_CASE("a missing config file names --config and the path") {
  const std::string path =
      (fs::temp_directory_path() / "planner_config_test_does_not_exist.yaml").string();
  CHECK(LoadError({"--config", path}) ==
        absl::StrCat("--config: cannot open \"", path, "\": No such file or directory"));
}

TEST_CASE("errors inside the config file are prefixed with its path") {
  const TempFile file("destinations: 3\nq_cap: -1\n");
  CHECK(LoadError({"--config", file.path()}) ==
        absl::StrCat(file.path(), ": q_cap: must be a finite number > 0, got -1"));
}

TEST_CASE("the token file is read, trimmed, and never echoed") {
  const TempFile token("tok-123\n");
  SECTION("from the YAML file") {
    const TempFile config(absl::StrCat("destinations: 2\ntoken_file: ", token.path(), "\n"));
    const PlannerConfig loaded = LoadOk({"--config", config.path()});
    CHECK(loaded.token == "tok-123");
    CHECK(loaded.token_file == token.path());
  }
  SECTION("from the flag, replacing the file's token") {
    const TempFile config("destinations: 2\ntoken: yaml-token\n");
    const PlannerConfig loaded = LoadOk({"--config", config.path(), "--token-file", token.path()});
    CHECK(loaded.token == "tok-123");
  }
  SECTION("--token replaces the file's token_file") {
    const TempFile config("destinations: 2\ntoken_file: /nonexistent/token\n");
    CHECK(LoadOk({"--config", config.path(), "--token", "direct"}).token == "direct");
  }
  SECTION("empty, missing and malformed token files") {
    const TempFile empty(" \n");
    CHECK(LoadError({"--destinations", "2", "--token-file", empty.path()}) ==
          absl::StrCat("--token-file: \"", empty.path(), "\" is empty"));
    CHECK(absl::StartsWith(LoadError({"--destinations", "2", "--token-file", "/nonexistent/token"}),
                           "--token-file: cannot open \"/nonexistent/token\""));
    const TempFile spaced("two words\n");
    const std::string message = LoadError({"--destinations", "2", "--token-file", spaced.path()});
    CHECK(absl::StartsWith(message, absl::StrCat("--token-file \"", spaced.path(), "\": ")));
    CHECK_FALSE(absl::StrContains(message, "words"));
  }
}

// ---- The shipped files under deploy/ ----

TEST_CASE("deploy/planner.yaml parses and validates") {
  const PlannerConfig config = ParseOk(ReadText(kDeployDir / "planner.yaml"));
  CHECK(ValidatePlannerConfig(config).ok());
  REQUIRE(config.destinations.size() == 30);
  CHECK(config.destinations.front() == "vllm-0");
  CHECK(config.destinations.back() == "vllm-29");
  CHECK(config.listen == "0.0.0.0:50051");
  CHECK(config.metrics_listen == "0.0.0.0:9464");
  CHECK(config.state_dir == "/var/lib/cacheroute");
  CHECK(config.token.empty());
  CHECK(config.token_file.empty());
  // The example spells out the defaults it documents.
  const PlannerConfig defaults;
  CHECK(config.q_cap == defaults.q_cap);
  CHECK(config.slots_per_destination == defaults.slots_per_destination);
  CHECK(config.control_interval == defaults.control_interval);
  CHECK(config.table_ttl_seconds == defaults.table_ttl_seconds);
  CHECK(config.history == defaults.history);
  CHECK(config.rate_smoothing == defaults.rate_smoothing);
  CHECK(config.key_ttl == defaults.key_ttl);
  CHECK(config.max_keys_per_report == defaults.max_keys_per_report);
  CHECK(config.max_message_bytes == defaults.max_message_bytes);

  // And loads the way the container runs it.
  const std::string path = (kDeployDir / "planner.yaml").string();
  CHECK(LoadOk({"--config", path}).destinations.size() == 30);
}

std::vector<fs::path> KubernetesManifests() {
  std::vector<fs::path> paths;
  for (const fs::directory_entry& entry : fs::directory_iterator(kDeployDir / "k8s")) {
    if (entry.path().extension() == ".yaml") paths.push_back(entry.path());
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

TEST_CASE("every deploy/k8s/*.yaml parses and each document has apiVersion and kind") {
  const std::vector<fs::path> paths = KubernetesManifests();
  REQUIRE_FALSE(paths.empty());
  std::multiset<std::string> objects;  // "Kind/name"
  for (const fs::path& path : paths) {
    INFO(path.string());
    std::vector<YAML::Node> documents;
    REQUIRE_NOTHROW(documents = YAML::LoadAll(ReadText(path)));
    CHECK_FALSE(documents.empty());
    for (const YAML::Node& document : documents) {
      if (document.IsNull()) continue;  // a trailing "---"
      REQUIRE(document.IsMap());
      REQUIRE(document["apiVersion"].IsScalar());
      REQUIRE(document["kind"].IsScalar());
      CHECK_FALSE(document["apiVersion"].Scalar().empty());
      if (document["kind"].Scalar() == "Kustomization") continue;  // has no metadata.name
      REQUIRE(document["metadata"]["name"].IsScalar());
      objects.insert(document["kind"].Scalar() + "/" + document["metadata"]["name"].Scalar());
    }
  }
  for (const char* object :
       {"Deployment/cacheroute-planner", "Service/cacheroute-planner",
        "Service/cacheroute-planner-replicas", "ConfigMap/cacheroute-planner-config",
        "PodDisruptionBudget/cacheroute-planner", "StatefulSet/etcd", "Service/etcd",
        "PodDisruptionBudget/etcd", "Deployment/cacheroute-gateway", "Service/cacheroute-gateway",
        "ConfigMap/cacheroute-gateway-config", "PodDisruptionBudget/cacheroute-gateway"}) {
    INFO(object);
    CHECK(objects.count(object) == 1);
  }
}

// The manifests agree with each other and with the planner: the ConfigMap's planner.yaml loads,
// the Deployment mounts it and the state volume where that config expects them, and the probes
// and ports match the listen addresses.
TEST_CASE("the Kubernetes manifests are consistent with the planner config") {
  // "Kind/name" -> document: the planner's objects, not the gateways' beside them.
  std::map<std::string, YAML::Node> by_name;
  for (const fs::path& path : KubernetesManifests()) {
    for (const YAML::Node& document : YAML::LoadAll(ReadText(path))) {
      // Skips the Kustomization (no metadata); IsDefined is false, not a throw, for a missing key.
      if (document.IsMap() && document["metadata"].IsDefined()) {
        by_name[document["kind"].as<std::string>() + "/" +
                document["metadata"]["name"].as<std::string>()] = document;
      }
    }
  }
  REQUIRE(by_name.count("ConfigMap/cacheroute-planner-config") == 1);
  REQUIRE(by_name.count("Deployment/cacheroute-planner") == 1);
  const YAML::Node config_map = by_name["ConfigMap/cacheroute-planner-config"];
  REQUIRE(config_map["data"]["planner.yaml"].IsScalar());
  // The whole file, its `etcd` section included (checked below against etcd.yaml).
  const std::string planner_text = config_map["data"]["planner.yaml"].Scalar();
  const YAML::Node etcd = YAML::Load(planner_text)["etcd"];
  REQUIRE(etcd.IsMap());
  const PlannerConfig config = ParseOk(planner_text);
  CHECK(ValidatePlannerConfig(config).ok());
  CHECK(config.etcd.enabled);
  CHECK(config.state_dir.empty());  // etcd holds the state (deploy/README.md)
  CHECK(absl::EndsWith(config.listen, ":50051"));
  CHECK(absl::EndsWith(config.metrics_listen, ":9464"));

  const YAML::Node deployment = by_name["Deployment/cacheroute-planner"];
  CHECK(deployment["spec"]["replicas"].as<int>() == 3);
  CHECK(deployment["spec"]["strategy"]["type"].as<std::string>() == "RollingUpdate");
  CHECK(deployment["spec"]["strategy"]["rollingUpdate"]["maxUnavailable"].as<int>() == 0);
  const YAML::Node pod = deployment["spec"]["template"]["spec"];
  REQUIRE(pod["containers"].size() == 1);
  const YAML::Node container = pod["containers"][0];
  std::set<std::string> mount_paths;
  for (const YAML::Node& mount : container["volumeMounts"]) {
    mount_paths.insert(mount["mountPath"].as<std::string>());
  }
  CHECK(mount_paths.count("/etc/cacheroute") == 1);
  // Probes: readiness /readyz, liveness /healthz, both on the metrics port (9464).
  int metrics_port = 0;
  for (const YAML::Node& port : container["ports"]) {
    if (port["name"].as<std::string>() == "metrics") metrics_port = port["containerPort"].as<int>();
  }
  CHECK(metrics_port == 9464);
  CHECK(container["readinessProbe"]["httpGet"]["path"].as<std::string>() == "/readyz");
  CHECK(container["readinessProbe"]["httpGet"]["port"].as<std::string>() == "metrics");
  CHECK(container["livenessProbe"]["httpGet"]["path"].as<std::string>() == "/healthz");
  CHECK(container["livenessProbe"]["httpGet"]["port"].as<std::string>() == "metrics");
  CHECK(pod["securityContext"]["runAsNonRoot"].as<bool>());
  // Each pod's etcd identity: its name and IP from the Downward API, as the planner's flags.
  CHECK_FALSE(pod["initContainers"].IsDefined());
  std::vector<std::string> args;
  for (const YAML::Node& arg : container["args"]) args.push_back(arg.as<std::string>());
  CHECK(args == std::vector<std::string>{"--etcd-replica-id", "$(POD_NAME)", "--etcd-advertise",
                                         "$(POD_IP):50051"});
  std::map<std::string, std::string> field_of;
  for (const YAML::Node& env : container["env"]) {
    field_of[env["name"].as<std::string>()] =
        env["valueFrom"]["fieldRef"]["fieldPath"].as<std::string>();
  }
  CHECK(field_of["POD_NAME"] == "metadata.name");
  CHECK(field_of["POD_IP"] == "status.podIP");
  // The planner's loader takes those flags with this config (values as Kubernetes expands them).
  const TempFile rendered(planner_text);
  const PlannerConfig with_flags = LoadOk({"--config", rendered.path(), "--etcd-replica-id",
                                           "cacheroute-planner-6d9f-x2k4", "--etcd-advertise",
                                           "10.244.1.7:50051"});
  CHECK(with_flags.etcd.replica_id == "cacheroute-planner-6d9f-x2k4");
  CHECK(with_flags.etcd.advertise == "10.244.1.7:50051");
  CHECK(etcd["lease_ttl_seconds"].as<int>() > 0);
  CHECK(absl::EndsWith(etcd["key_prefix"].as<std::string>(), "/"));

  // etcd: 3 members with volumes behind a headless Service; the planner's endpoints are they.
  REQUIRE(by_name.count("StatefulSet/etcd") == 1);
  const YAML::Node etcd_set = by_name["StatefulSet/etcd"];
  CHECK(etcd_set["spec"]["replicas"].as<int>() == 3);
  CHECK(etcd_set["spec"]["serviceName"].as<std::string>() == "etcd");
  CHECK(etcd_set["spec"]["volumeClaimTemplates"].size() == 1);
  CHECK(by_name["Service/etcd"]["spec"]["clusterIP"].as<std::string>() == "None");
  const std::string etcd_args =
      YAML::Dump(etcd_set["spec"]["template"]["spec"]["containers"][0]["args"]);
  REQUIRE(etcd["endpoints"].size() == 3);
  for (int i = 0; i < 3; ++i) {
    INFO(i);
    CHECK(absl::StrContains(etcd_args, absl::StrCat("etcd-", i, "=http://etcd-", i, ".etcd.")));
    CHECK(etcd["endpoints"][i].as<std::string>() ==
          absl::StrCat("etcd-", i, ".etcd.cacheroute.svc:2379"));
  }
  // Both budgets keep 2 of 3, selecting their pods.
  for (const char* name : {"cacheroute-planner", "etcd"}) {
    INFO(name);
    const YAML::Node pdb = by_name[absl::StrCat("PodDisruptionBudget/", name)];
    REQUIRE(pdb.IsMap());
    CHECK(pdb["spec"]["minAvailable"].as<int>() == 2);
    CHECK(pdb["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"].as<std::string>() ==
          name);
  }
}

}  // namespace
}  // namespace cacheroute::service
