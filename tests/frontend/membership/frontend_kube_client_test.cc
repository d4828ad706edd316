// KubeClient (tools/frontend/membership/kube_client.h) against the API-server double
// (tools/eval/kube_api/kube_api_server.h) on loopback: a list, a streamed watch line by line, a watch
// the server ends, a dropped stream, an HTTP error with its Status body, cancellation, the token
// file re-read on every request, TLS with the server's CA; and the in-cluster configuration.
// The double serves HTTPS in this file (cpp-httplib's OpenSSL support, this TU only).
#ifndef CPPHTTPLIB_OPENSSL_SUPPORT
#define CPPHTTPLIB_OPENSSL_SUPPORT
#endif
#include "tools/frontend/membership/kube_client.h"

#include <catch2/catch.hpp>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "nlohmann/json.hpp"
#include "tests/support/eventually.h"
#include "tools/eval/kube_api/kube_api_server.h"
#include "tests/support/require_ok.h"
#include "tests/support/temp_dir.h"
#include "tests/support/test_certs.h"

namespace cacheroute::frontend {
namespace {

constexpr char kPods[] = "/api/v1/namespaces/ns/pods";
const CancelCheck kNever = [] { return false; };

std::unique_ptr<KubeClient> ClientFor(const eval::KubeApiServer& api,
                                      const std::string& token_file = "") {
  FrontendConfig config;
  config.kube_api_server = api.url();
  config.kube_token_file = token_file;
  return testing::RequireOk(KubeClient::Create(testing::RequireOk(KubeApiFor(config, {}))));
}

// A watch on its own thread, its lines collected for the main thread to check.
class BackgroundWatch {
 public:
  BackgroundWatch(KubeClient& client, std::string target, size_t stop_after = 1000,
                  CancelCheck cancelled = kNever)
      : thread_([this, &client, target, stop_after, cancelled] {
          absl::StatusOr<KubeResponse> result = client.Watch(
              target,
              [this, stop_after](absl::string_view line) {
                std::lock_guard<std::mutex> lock(mu_);
                lines_.emplace_back(line);
                return lines_.size() < stop_after;
              },
              cancelled, absl::Seconds(20));
          std::lock_guard<std::mutex> lock(mu_);
          result_ = std::move(result);
          done_ = true;
        }) {}
  ~BackgroundWatch() { thread_.join(); }
  bool done() {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }
  size_t lines() {
    std::lock_guard<std::mutex> lock(mu_);
    return lines_.size();
  }
  std::vector<std::string> Lines() {
    std::lock_guard<std::mutex> lock(mu_);
    return lines_;
  }
  absl::StatusOr<KubeResponse> Result() {
    thread_.join();
    thread_ = std::thread([] {});
    return result_;
  }

 private:
  std::mutex mu_;
  std::vector<std::string> lines_;
  absl::StatusOr<KubeResponse> result_ = absl::UnknownError("not done");
  bool done_ = false;
  std::thread thread_;
};

TEST_CASE("Get lists a collection; an error status comes back with its Status body") {
  eval::KubeApiServer api;
  REQUIRE(api.ok());
  api.SetPod("ns", "p0", {{"app", "vllm"}}, "10.0.0.1", true);
  std::unique_ptr<KubeClient> client = ClientFor(api);
  KubeResponse list = testing::RequireOk(client->Get(kPods, kNever));
  CHECK(list.status == 200);
  const nlohmann::json body = nlohmann::json::parse(list.body);
  CHECK(body["items"].size() == 1);
  CHECK(body["metadata"]["resourceVersion"] == "2");

  api.FailNext(1, 500);
  KubeResponse failed = testing::RequireOk(client->Get(kPods, kNever));
  CHECK(failed.status == 500);
  CHECK_THAT(failed.body, Catch::Contains("injected failure"));
}

TEST_CASE("Watch hands over each event line as it arrives, until told to stop") {
  eval::KubeApiServer api;
  REQUIRE(api.ok());
  std::unique_ptr<KubeClient> client = ClientFor(api);
  BackgroundWatch watch(*client, std::string(kPods) + "?watch=1&resourceVersion=1", 2);
  REQUIRE(testing::Eventually([&] { return api.open_watches() == 1; }));
  api.SetPod("ns", "p0", {{"app", "vllm"}}, "10.0.0.1", false);
  REQUIRE(testing::Eventually([&] { return watch.lines() == 1; }));
  CHECK_FALSE(watch.done());  // the stream stays open between events
  api.SetPod("ns", "p0", {{"app", "vllm"}}, "10.0.0.1", true);
  KubeResponse done = testing::RequireOk(watch.Result());
  CHECK(done.status == 200);
  const std::vector<std::string> lines = watch.Lines();
  REQUIRE(lines.size() == 2);
  CHECK(nlohmann::json::parse(lines[0])["type"] == "ADDED");
  CHECK(nlohmann::json::parse(lines[1])["type"] == "MODIFIED");
  CHECK(nlohmann::json::parse(lines[1])["object"]["metadata"]["resourceVersion"] == "3");
}

TEST_CASE("Watch: a stream the server ends is OK, a dropped one Unavailable, 410 its status") {
  eval::KubeApiServer api;
  REQUIRE(api.ok());
  std::unique_ptr<KubeClient> client = ClientFor(api);
  {
    BackgroundWatch watch(*client, std::string(kPods) + "?watch=1&timeoutSeconds=1");
    CHECK(testing::RequireOk(watch.Result()).status == 200);
  }
  {
    BackgroundWatch watch(*client, std::string(kPods) + "?watch=1");
    REQUIRE(testing::Eventually([&] { return api.open_watches() == 1; }));
    api.DropWatches();
    const absl::StatusOr<KubeResponse> dropped = watch.Result();
    CHECK(absl::IsUnavailable(dropped.status()));
    CHECK_THAT(std::string(dropped.status().message()), Catch::Contains(api.url()));
  }
  api.SetPod("ns", "p0", {}, "10.0.0.1", true);
  api.Compact();
  {
    BackgroundWatch watch(*client, std::string(kPods) + "?watch=1&resourceVersion=1");
    const KubeResponse gone = testing::RequireOk(watch.Result());
    CHECK(gone.status == 410);
    CHECK_THAT(gone.body, Catch::Contains("too old resource version"));
    CHECK(watch.lines() == 0);
  }
}

TEST_CASE("a request is cancelled when its check turns true; a closed port is Unavailable") {
  eval::KubeApiServer api;
  REQUIRE(api.ok());
  std::unique_ptr<KubeClient> client = ClientFor(api);
  std::atomic<bool> cancel{false};
  BackgroundWatch watch(*client, std::string(kPods) + "?watch=1", 1000,
                        [&cancel] { return cancel.load(); });
  REQUIRE(testing::Eventually([&] { return api.open_watches() == 1; }));
  cancel = true;
  CHECK(absl::IsCancelled(watch.Result().status()));

  int port = 0;
  {
    eval::KubeApiServer gone;
    port = std::stoi(gone.url().substr(gone.url().rfind(':') + 1));
  }
  FrontendConfig config;
  config.kube_api_server = "http://127.0.0.1:" + std::to_string(port);
  auto closed = testing::RequireOk(KubeClient::Create(testing::RequireOk(KubeApiFor(config, {}))));
  const absl::Status refused = closed->Get(kPods, kNever).status();
  CHECK(absl::IsUnavailable(refused));
  CHECK_THAT(std::string(refused.message()), Catch::Contains("connecting"));
}

TEST_CASE("the bearer token is read from its file for every request (bound tokens rotate)") {
  eval::KubeApiServer api;
  REQUIRE(api.ok());
  testing::TempDir dir("kube_client_test");
  const std::string token_file = dir.Write("token", "first\n");
  std::unique_ptr<KubeClient> client = ClientFor(api, token_file);
  api.RequireToken("first");
  CHECK(testing::RequireOk(client->Get(kPods, kNever)).status == 200);
  api.RequireToken("second");
  CHECK(testing::RequireOk(client->Get(kPods, kNever)).status == 401);
  dir.Write("token", "second");
  CHECK(testing::RequireOk(client->Get(kPods, kNever)).status == 200);

  std::filesystem::remove(token_file);
  const absl::Status missing = client->Get(kPods, kNever).status();
  CHECK(absl::IsUnavailable(missing));
  CHECK_THAT(std::string(missing.message()), Catch::StartsWith("kube_token_file"));
}

TEST_CASE("HTTPS: the server's certificate is checked against kube_ca_file, host included") {
  testing::TempDir dir("kube_client_tls_test");
  const testing::Certs certs = testing::MakeCerts(dir.path().string());
  eval::KubeApiServer api(certs.server_cert, certs.server_key);
  REQUIRE(api.ok());
  api.SetPod("ns", "a", {{"app", "vllm"}}, "10.0.0.1", true);
  api.RequireToken("secret");
  dir.Write("token", "secret\n");
  FrontendConfig config;
  config.kube_api_server = api.url();
  REQUIRE(absl::StartsWith(config.kube_api_server, "https://127.0.0.1:"));
  config.kube_token_file = dir.File("token");
  config.kube_ca_file = certs.ca;
  auto client = testing::RequireOk(KubeClient::Create(testing::RequireOk(KubeApiFor(config, {}))));
  const KubeResponse list = testing::RequireOk(client->Get(kPods, kNever));
  CHECK(list.status == 200);
  CHECK(nlohmann::json::parse(list.body)["items"].size() == 1);
  // A watch over TLS streams its lines too.
  api.SetPod("ns", "b", {{"app", "vllm"}}, "10.0.0.2", true);
  BackgroundWatch watch(*client, std::string(kPods) + "?watch=1&resourceVersion=0", 2);
  CHECK(testing::Eventually([&] { return watch.done(); }));
  CHECK(watch.lines() == 2);

  // Another CA did not sign the server's certificate: the handshake fails, nothing is read.
  testing::TempDir other("kube_client_tls_other");
  config.kube_ca_file = testing::MakeCerts(other.path().string()).ca;
  auto stranger =
      testing::RequireOk(KubeClient::Create(testing::RequireOk(KubeApiFor(config, {}))));
  const absl::Status refused = stranger->Get(kPods, kNever).status();
  CHECK(absl::IsUnavailable(refused));
  // By name too: the certificate names localhost.
  config.kube_ca_file = certs.ca;
  const std::string port = api.url().substr(api.url().rfind(':') + 1);
  config.kube_api_server = "https://localhost:" + port;
  auto by_name =
      testing::RequireOk(KubeClient::Create(testing::RequireOk(KubeApiFor(config, {}))));
  CHECK(testing::RequireOk(by_name->Get(kPods, kNever)).status == 200);
  // A certificate the right CA signed for another host: refused.
  const std::string d = dir.path().string();
  std::ofstream(d + "/elsewhere.ext") << "subjectAltName=DNS:elsewhere.example\n";
  REQUIRE(std::system(("openssl req -newkey rsa:2048 -nodes -keyout " + d + "/elsewhere.key -out " +
                       d + "/elsewhere.csr -subj /CN=elsewhere.example >/dev/null 2>&1 && "
                       "openssl x509 -req -in " + d + "/elsewhere.csr -CA " + certs.ca +
                       " -CAkey " + d + "/ca.key -CAcreateserial -days 1 -out " + d +
                       "/elsewhere.pem -extfile " + d + "/elsewhere.ext >/dev/null 2>&1")
                          .c_str()) == 0);
  eval::KubeApiServer misnamed(d + "/elsewhere.pem", d + "/elsewhere.key");
  REQUIRE(misnamed.ok());
  config.kube_api_server = misnamed.url();
  auto to_misnamed =
      testing::RequireOk(KubeClient::Create(testing::RequireOk(KubeApiFor(config, {}))));
  CHECK(absl::IsUnavailable(to_misnamed->Get(kPods, kNever).status()));
}

TEST_CASE("in-cluster configuration: the service host and port, the service account's files") {
  FrontendConfig config;
  config.upstreams_inference_pool = "pool";
  testing::TempDir dir("kube_client_test");
  InClusterEnvironment environment{
      .service_host = "", .service_port = "", .service_account_dir = dir.path().string()};
  const absl::Status outside = KubeApiFor(config, environment).status();
  CHECK_THAT(std::string(outside.message()),
             Catch::StartsWith("kube_api_server: not set, and KUBERNETES_SERVICE_HOST"));
  const absl::Status no_namespace = PoolNamespace(config, environment).status();
  CHECK(absl::IsInvalidArgument(no_namespace));
  CHECK_THAT(std::string(no_namespace.message()), Catch::StartsWith("inference_pool_namespace"));

  environment.service_host = "10.96.0.1";
  environment.service_port = "443";
  dir.Write("namespace", "serving\n");
  const KubeApi api = testing::RequireOk(KubeApiFor(config, environment));
  CHECK(api.server_text == "https://10.96.0.1:443");
  CHECK(api.server.tls);
  CHECK(api.token_file == dir.File("token"));
  CHECK(api.ca_file == dir.File("ca.crt"));
  CHECK(testing::RequireOk(PoolNamespace(config, environment)) == "serving");
  config.inference_pool_namespace = "other";
  CHECK(testing::RequireOk(PoolNamespace(config, environment)) == "other");

  // A CA bundle that does not load names the key.
  dir.Write("ca.crt", "not a certificate");
  const absl::Status bad_ca = KubeClient::Create(api).status();
  CHECK(absl::IsInvalidArgument(bad_ca));
  CHECK_THAT(std::string(bad_ca.message()), Catch::StartsWith("kube_ca_file"));
}

}  // namespace
}  // namespace cacheroute::frontend
