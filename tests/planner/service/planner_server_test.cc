// Integration tests for the planner service: the real PlannerServer on a loopback port chosen by
// the kernel, driven over real gRPC. Time is a ManualClock, so rates and versions are exact; the
// table stream is read with blocking reads, never with sleeps.
#include "planner/service/planner_server.h"

#include <httplib.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/clock.h"
#include "cacheroute/v1/admin.grpc.pb.h"
#include "cacheroute/v1/rates.grpc.pb.h"
#include "cacheroute/v1/table.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "planner/key_id.h"
#include "proto/table/table_snapshot.h"
#include "tests/support/planner_config.h"
#include "tests/support/rate_reports.h"
#include "tests/support/require_ok.h"
#include "tests/support/test_certs.h"
#include "tools/eval/child_process.h"

namespace cacheroute::service {
namespace {

using Stream = grpc::ClientReaderWriter<v1::StreamTableRequest, v1::TableUpdate>;

std::string TempDir() {
  std::random_device rd;
  const auto dir = std::filesystem::temp_directory_path() /
                   ("cacheroute-planner-test-" + std::to_string(rd()) + std::to_string(rd()));
  std::filesystem::create_directories(dir);
  return dir.string();
}

// One slot on each of two destinations: C = 2, the two hottest keys are admitted. Its rate
// smoothing (1 s) is a short time constant against 100 s intervals: each plan follows the last
// interval's counts.
PlannerConfig TestConfig() {
  PlannerConfig config = testing::LoopbackPlannerConfig({"d0", "d1"});
  // Algorithm 1 exactly: these tests pin its tables (the default adds spills and splits keys).
  config.algorithm = "cacheroute-paper";
  config.max_keys_per_report = 10;
  return config;
}

// A planner plus client stubs; restartable on the same state directory.
class Fixture {
 public:
  explicit Fixture(PlannerConfig config = TestConfig())
      : config_(std::move(config)), clock_(absl::FromUnixSeconds(1'800'000'000)) {
    Start();
  }

  void Start() {
    server_ = cacheroute::testing::RequireOk(
        PlannerServer::Start(config_, &clock_, /*run_ticker=*/false));
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                   grpc::InsecureChannelCredentials());
    rates_ = v1::RateService::NewStub(channel_);
    tables_ = v1::TableService::NewStub(channel_);
    admin_ = v1::AdminService::NewStub(channel_);
  }
  void Stop() { server_.reset(); }

  grpc::Status Report(const std::string& gateway, uint64_t sequence,
                      const std::vector<std::pair<std::string, double>>& counts,
                      v1::ReportRatesResponse* response = nullptr, const std::string& token = "") {
    return Report(testing::MakeRateReport(gateway, sequence, clock_.Now(), counts), response,
                  token);
  }
  grpc::Status Report(const v1::ReportRatesRequest& request,
                      v1::ReportRatesResponse* response = nullptr, const std::string& token = "") {
    grpc::ClientContext context;
    if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
    v1::ReportRatesResponse ignored;
    return rates_->ReportRates(&context, request, response ? response : &ignored);
  }

  // Lets 100 s pass, then plans.
  v1::ReplanResponse Replan(const std::string& token = "") {
    clock_.Advance(absl::Seconds(100));
    grpc::ClientContext context;
    if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
    v1::ReplanResponse response;
    grpc::Status status = admin_->Replan(&context, {}, &response);
    INFO(status.error_message());
    REQUIRE(status.ok());
    return response;
  }

  v1::RoutingTable GetTable(uint64_t epoch = 0, uint64_t number = 0) {
    grpc::ClientContext context;
    v1::GetTableRequest request;
    request.mutable_version()->set_epoch(epoch);
    request.mutable_version()->set_number(number);
    v1::RoutingTable table;
    grpc::Status status = tables_->GetTable(&context, request, &table);
    INFO(status.error_message());
    REQUIRE(status.ok());
    return table;
  }

  v1::GetStatusResponse Status() {
    grpc::ClientContext context;
    v1::GetStatusResponse status;
    REQUIRE(admin_->GetStatus(&context, {}, &status).ok());
    return status;
  }

  // Opens a table stream on `context` and says hello on it as `gateway`.
  std::unique_ptr<Stream> Subscribe(grpc::ClientContext& context, const std::string& gateway) {
    std::unique_ptr<Stream> stream = tables_->StreamTable(&context);
    v1::StreamTableRequest hello;
    hello.set_gateway_id(gateway);
    REQUIRE(stream->Write(hello));
    return stream;
  }

  PlannerConfig config_;
  base::ManualClock clock_;
  std::unique_ptr<PlannerServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::RateService::Stub> rates_;
  std::unique_ptr<v1::TableService::Stub> tables_;
  std::unique_ptr<v1::AdminService::Stub> admin_;
};

std::set<std::string> AdmittedKeys(const v1::RoutingTable& table) {
  std::set<std::string> keys;
  for (const auto& a : table.assignments()) keys.insert(a.key());
  return keys;
}

v1::StreamTableRequest Ack(const std::string& gateway, const v1::TableUpdate& update,
                           const v1::Version& applied) {
  v1::StreamTableRequest request;
  request.set_gateway_id(gateway);
  request.set_response_nonce(update.nonce());
  *request.mutable_applied_version() = applied;
  return request;
}

TEST_CASE("gateways report, a version is published and streamed, then a delta") {
  Fixture f;
  // Two gateways; a and b are the hottest across them (a: 300+100, b: 200, c: 50).
  REQUIRE(f.Report("gw-1", 1, {{"a", 300}, {"b", 200}, {"c", 50}}).ok());
  REQUIRE(f.Report("gw-2", 1, {{"a", 100}}).ok());
  const v1::ReplanResponse first = f.Replan();
  CHECK(first.changed());
  CHECK(first.version().number() == 1);
  const v1::RoutingTable v1_table = f.GetTable();
  CHECK(AdmittedKeys(v1_table) == std::set<std::string>{"a", "b"});
  CHECK(v1_table.assignments(0).key() == "a");                         // hottest first
  CHECK(v1_table.assignments(0).rate() == Approx(4.0).epsilon(1e-6));  // 400 counts / 100 s

  grpc::ClientContext context;
  std::unique_ptr<Stream> stream = f.Subscribe(context, "gw-1");
  v1::TableUpdate update;
  REQUIRE(stream->Read(&update));
  REQUIRE(update.has_full());
  CHECK(update.full().version().number() == 1);
  CHECK(AdmittedKeys(update.full()) == std::set<std::string>{"a", "b"});
  absl::StatusOr<std::shared_ptr<const table::TableSnapshot>> applied =
      table::TableSnapshot::FromProto(update.full());
  REQUIRE(applied.ok());
  REQUIRE(stream->Write(Ack("gw-1", update, update.full().version())));

  // Same traffic again: same routing, so no new version.
  REQUIRE(f.Report("gw-1", 2, {{"a", 400}, {"b", 200}, {"c", 50}}).ok());
  CHECK_FALSE(f.Replan().changed());

  // c overtakes b: a new version, sent as a delta against version 1.
  REQUIRE(f.Report("gw-1", 3, {{"a", 400}, {"b", 10}, {"c", 500}}).ok());
  const v1::ReplanResponse second = f.Replan();
  CHECK(second.changed());
  CHECK(second.version().number() == 2);
  REQUIRE(stream->Read(&update));
  REQUIRE(update.has_delta());
  CHECK(update.delta().base().number() == 1);
  CHECK(update.delta().version().number() == 2);
  absl::StatusOr<std::shared_ptr<const table::TableSnapshot>> after =
      table::ApplyDelta(**applied, update.delta());
  REQUIRE(after.ok());
  const v1::RoutingTable latest = f.GetTable();
  CHECK(AdmittedKeys(latest) == std::set<std::string>{"a", "c"});
  CHECK((*after)->SameRouting(**table::TableSnapshot::FromProto(latest)));
  REQUIRE(stream->Write(Ack("gw-1", update, update.delta().version())));

  // The planner lists the subscribed gateway (recorded before its first table was sent).
  const v1::GetStatusResponse status = f.Status();
  bool found = false;
  for (const auto& g : status.gateways()) {
    if (g.gateway_id() == "gw-1" && g.subscribed()) found = true;
  }
  CHECK(found);
  stream->WritesDone();
  context.TryCancel();
}

TEST_CASE("a NACKed delta keeps the last good version and is answered with a full table") {
  Fixture f;
  REQUIRE(f.Report("gw", 1, {{"a", 300}, {"b", 200}, {"c", 50}}).ok());
  f.Replan();
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream = f.Subscribe(context, "gw");
  v1::TableUpdate full;
  REQUIRE(stream->Read(&full));
  REQUIRE(full.has_full());
  REQUIRE(stream->Write(Ack("gw", full, full.full().version())));

  REQUIRE(f.Report("gw", 2, {{"a", 300}, {"b", 10}, {"c", 500}}).ok());
  REQUIRE(f.Replan().changed());
  v1::TableUpdate delta;
  REQUIRE(stream->Read(&delta));
  REQUIRE(delta.has_delta());
  // The gateway rejects it, staying on version 1.
  v1::StreamTableRequest nack = Ack("gw", delta, full.full().version());
  nack.mutable_error()->set_code(3);
  nack.mutable_error()->set_message("simulated validation failure");
  REQUIRE(stream->Write(nack));
  v1::TableUpdate again;
  REQUIRE(stream->Read(&again));
  REQUIRE(again.has_full());
  CHECK(again.full().version().number() == 2);
  CHECK(again.nonce() != delta.nonce());
  context.TryCancel();
}

TEST_CASE("a slow subscriber gets the intermediate versions coalesced") {
  Fixture f;
  REQUIRE(f.Report("gw", 1, {{"a", 300}, {"b", 200}, {"c", 50}, {"d", 10}}).ok());
  f.Replan();
  grpc::ClientContext context;
  std::unique_ptr<Stream> stream = f.Subscribe(context, "slow");
  v1::TableUpdate full;
  REQUIRE(stream->Read(&full));
  REQUIRE(full.full().version().number() == 1);

  // Three new versions while version 1 is not yet acknowledged.
  const std::vector<std::vector<std::pair<std::string, double>>> rounds = {
      {{"a", 300}, {"c", 200}, {"b", 1}, {"d", 1}},
      {{"c", 300}, {"d", 200}, {"a", 1}, {"b", 1}},
      {{"b", 300}, {"d", 200}, {"a", 1}, {"c", 1}}};
  uint64_t sequence = 2;
  for (const auto& round : rounds) {
    REQUIRE(f.Report("gw", sequence++, round).ok());
    REQUIRE(f.Replan().changed());
  }
  REQUIRE(f.GetTable().version().number() == 4);
  // Only now the ACK: the next update is one delta from 1 straight to 4.
  REQUIRE(stream->Write(Ack("slow", full, full.full().version())));
  v1::TableUpdate update;
  REQUIRE(stream->Read(&update));
  REQUIRE(update.has_delta());
  CHECK(update.delta().base().number() == 1);
  CHECK(update.delta().version().number() == 4);
  context.TryCancel();
}

TEST_CASE("after a restart the planner serves the same version and numbers onward") {
  PlannerConfig config = TestConfig();
  config.state_dir = TempDir();
  Fixture f(config);
  REQUIRE(f.Report("gw", 1, {{"a", 300}, {"b", 200}, {"c", 50}}).ok());
  f.Replan();
  REQUIRE(f.Report("gw", 2, {{"a", 300}, {"b", 10}, {"c", 500}}).ok());
  f.Replan();
  const v1::RoutingTable before = f.GetTable();
  REQUIRE(before.version().number() == 2);

  f.Stop();
  f.Start();  // same state directory
  const v1::RoutingTable restored = f.GetTable();
  CHECK(restored.SerializeAsString() == before.SerializeAsString());
  // The rate state survived too: a duplicate sequence is still recognised.
  v1::ReportRatesResponse response;
  REQUIRE(f.Report("gw", 2, {{"a", 1}}, &response).ok());
  CHECK(response.duplicate());
  REQUIRE(f.Report("gw", 3, {{"b", 900}, {"c", 500}, {"a", 1}}).ok());
  const v1::ReplanResponse next = f.Replan();
  CHECK(next.changed());
  CHECK(next.version().epoch() == before.version().epoch());
  CHECK(next.version().number() == 3);
  std::filesystem::remove_all(config.state_dir);
}

TEST_CASE("byte-aware planning: reported sizes decide admission and survive a restart") {
  // Two destinations of 1M KV tokens, 0.5% reserved for planned prefixes: 10,000 tokens in all.
  // The caches are large for the traffic, so every prefix survives (nearly) and saved work is
  // rate × reusable tokens.
  PlannerConfig config = TestConfig();
  config.algorithm = "cacheroute";  // byte-aware planning is its
  config.state_dir = TempDir();
  config.kv_tokens_per_destination = 1e6;
  config.planned_prefix_share = 0.005;
  Fixture f(config);
  // Over the 10 s window, every request 1,000 tokens beyond its reusable prefix: "agent" 2/s of
  // 8,000 reusable tokens (16,000 tokens/s saved, 8,000 of the budget), "rag" 3/s of 4,000
  // (12,000; 4,000), "chat" 10/s of 200 (2,000; split over both destinations for its work, 400):
  // agent and chat fit, rag does not once agent is in.
  v1::ReportRatesRequest report =
      testing::MakeRateReport("gw", 1, f.clock_.Now(), {{"agent", 20}, {"chat", 100}, {"rag", 30}});
  const std::map<std::string, std::pair<double, double>> sizes = {
      {"agent", {8000, 9000}}, {"chat", {200, 1200}}, {"rag", {4000, 5000}}};
  for (v1::KeyCount& kc : *report.mutable_counts()) {
    kc.set_reusable_tokens(sizes.at(kc.key()).first * kc.count());
    kc.set_prompt_tokens(sizes.at(kc.key()).second * kc.count());
  }
  REQUIRE(f.Report(report).ok());
  f.Replan();
  const auto check = [&] {
    const v1::RoutingTable table = f.GetTable();
    std::map<std::string, v1::Assignment> by_key;
    for (const v1::Assignment& a : table.assignments()) by_key[a.key()] = a;
    REQUIRE(by_key.size() == 2);
    CHECK(by_key["agent"].reusable_tokens() == Approx(8000));
    CHECK(by_key["chat"].reusable_tokens() == Approx(200));
    CHECK(by_key["agent"].saved_work() > 0);
    const v1::GetStatusResponse status = f.Status();
    REQUIRE(status.has_byte_aware());
    CHECK(status.byte_aware().kv_budget_tokens() == 10000);
    CHECK(status.byte_aware().kv_used_tokens() == Approx(8400));
    CHECK(by_key["chat"].destinations_size() == 2);
    CHECK(status.byte_aware().measured_keys() == 3);
    grpc::ClientContext context;
    v1::ExplainRequest request;
    request.set_key("rag");
    v1::ExplainResponse rag;
    REQUIRE(f.admin_->Explain(&context, request, &rag).ok());
    CHECK_FALSE(rag.admitted());
    CHECK(rag.byte_aware());
    CHECK(rag.reusable_measured());
    CHECK(rag.reusable_tokens() == Approx(4000));
    CHECK(rag.prompt_tokens() == Approx(5000));
    CHECK_THAT(rag.reason(), Catch::Contains("KV budget"));
  };
  check();
  // The sizes are part of the persisted rate state.
  f.Stop();
  f.Start();
  f.Replan();
  check();
  // A size above its prompt is refused, naming the field.
  v1::ReportRatesRequest bad = testing::MakeRateReport("gw", 2, f.clock_.Now(), {{"chat", 1}});
  bad.mutable_counts(0)->set_prompt_tokens(10);
  bad.mutable_counts(0)->set_reusable_tokens(11);
  const grpc::Status refused = f.Report(bad);
  CHECK(refused.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  CHECK_THAT(refused.error_message(), Catch::Contains("counts[0].reusable_tokens"));
  std::filesystem::remove_all(config.state_dir);
}

TEST_CASE("bad reports and admin calls get INVALID_ARGUMENT and change nothing") {
  Fixture f;
  REQUIRE(f.Report("gw", 1, {{"a", 300}, {"b", 200}}).ok());
  f.Replan();
  const v1::GetStatusResponse before = f.Status();

  auto base = [&] {
    v1::ReportRatesRequest r;
    r.set_gateway_id("gw");
    r.set_sequence(2);
    r.set_window_start_unix_ms(1000);
    r.set_window_end_unix_ms(2000);
    v1::KeyCount* kc = r.add_counts();
    kc->set_key_id(KeyId("z"));
    kc->set_count(5);
    return r;
  };
  struct Case {
    std::string name;
    std::function<void(v1::ReportRatesRequest&)> mutate;
    std::string field;
  };
  const std::vector<Case> cases = {
      {"NaN count", [](auto& r) { r.mutable_counts(0)->set_count(std::nan("")); }, "count"},
      {"negative count", [](auto& r) { r.mutable_counts(0)->set_count(-1); }, "count"},
      {"empty gateway id", [](auto& r) { r.set_gateway_id(""); }, "gateway_id"},
      {"window end <= start", [](auto& r) { r.set_window_end_unix_ms(1000); }, "window_end"},
      {"too many keys",
       [](auto& r) {
         for (int i = 0; i < 11; ++i) {
           auto* kc = r.add_counts();
           kc->set_key_id(KeyId("k" + std::to_string(i)));
           kc->set_count(1);
         }
       },
       "counts"},
  };
  for (const Case& c : cases) {
    INFO(c.name);
    v1::ReportRatesRequest request = base();
    c.mutate(request);
    const grpc::Status status = f.Report(request);
    CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(status.error_message(), Catch::Contains(c.field));
  }
  {
    grpc::ClientContext context;
    v1::DrainRequest request;
    request.set_destination("no-such-destination");
    v1::DrainResponse response;
    const grpc::Status status = f.admin_->Drain(&context, request, &response);
    CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(status.error_message(), Catch::Contains("no-such-destination"));
  }
  {
    grpc::ClientContext context;
    v1::SetDestinationsRequest request;
    request.add_destinations("x");
    request.add_destinations("x");
    v1::SetDestinationsResponse response;
    const grpc::Status status = f.admin_->SetDestinations(&context, request, &response);
    CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(status.error_message(), Catch::Contains("duplicate"));
  }
  const v1::GetStatusResponse after = f.Status();
  CHECK(after.keys_known() == before.keys_known());
  CHECK(after.version().number() == before.version().number());
  CHECK(after.destinations_size() == 2);
  // The well-formed report with the same sequence is still accepted: nothing was consumed.
  v1::ReportRatesResponse response;
  REQUIRE(f.Report(base(), &response).ok());
  CHECK_FALSE(response.duplicate());
}

TEST_CASE("a drain replans at once and moves every key off the destination") {
  Fixture f;
  REQUIRE(f.Report("gw", 1, {{"a", 300}, {"b", 200}}).ok());
  f.Replan();
  grpc::ClientContext context;
  v1::DrainRequest request;
  request.set_destination("d1");
  v1::DrainResponse response;
  REQUIRE(f.admin_->Drain(&context, request, &response).ok());
  const v1::RoutingTable table = f.GetTable();
  CHECK(table.version().number() == response.version().number());
  CHECK(table.destinations_size() == 2);  // indices stay stable
  for (const auto& a : table.assignments()) {
    for (uint32_t d : a.destinations()) CHECK(d == 0);
  }
}

TEST_CASE("with a token configured, mutating calls without it are refused") {
  PlannerConfig config = TestConfig();
  config.token = "s3cret";
  Fixture f(config);
  CHECK(f.Report("gw", 1, {{"a", 1}}).error_code() == grpc::StatusCode::UNAUTHENTICATED);
  CHECK(f.Report("gw", 1, {{"a", 1}}, nullptr, "wrong").error_code() ==
        grpc::StatusCode::UNAUTHENTICATED);
  CHECK(f.Report("gw", 1, {{"a", 1}}, nullptr, "s3cret").ok());
  {
    grpc::ClientContext context;
    v1::ReplanResponse response;
    CHECK(f.admin_->Replan(&context, {}, &response).error_code() ==
          grpc::StatusCode::UNAUTHENTICATED);
  }
  f.Replan("s3cret");
  // The scheme's name is case-insensitive (RFC 9110, section 11.1); the token is not.
  const std::vector<std::pair<std::string, bool>> cases = {
      {"bearer s3cret", true}, {"BEARER s3cret", true}, {"bearer S3CRET", false}};
  uint64_t sequence = 2;
  for (const auto& [authorization, accepted] : cases) {
    grpc::ClientContext context;
    context.AddMetadata("authorization", authorization);
    v1::ReportRatesResponse response;
    const grpc::Status status = f.rates_->ReportRates(
        &context, testing::MakeRateReport("gw", sequence++, f.clock_.Now(), {{"a", 1}}), &response);
    INFO(authorization << ": " << status.error_message());
    CHECK(status.ok() == accepted);
  }
  // Reads are open unless token_required_for_reads.
  f.Status();
}

TEST_CASE("/metrics and /healthz are served over HTTP") {
  PlannerConfig config = TestConfig();
  config.metrics_listen = "127.0.0.1:0";
  Fixture f(config);
  REQUIRE(f.Report("gw", 1, {{"a", 300}, {"b", 200}}).ok());
  v1::ReportRatesRequest bad;
  bad.set_gateway_id("");
  CHECK_FALSE(f.Report(bad).ok());
  f.Replan();
  REQUIRE(f.server_->metrics_port() > 0);
  httplib::Client http("127.0.0.1", f.server_->metrics_port());
  const auto health = http.Get("/healthz");
  REQUIRE(health);
  CHECK(health->status == 200);
  const auto metrics = http.Get("/metrics");
  REQUIRE(metrics);
  CHECK(metrics->status == 200);
  const std::string& text = metrics->body;
  const std::string epoch = std::to_string(f.GetTable().version().epoch());
  for (const std::string& line :
       {"cacheroute_planner_table_version{epoch=\"" + epoch + "\"} 1",
        std::string("cacheroute_planner_plan_admitted_keys 2"),
        std::string("cacheroute_planner_reports_accepted_total 1"),
        std::string("cacheroute_planner_key_counts_accepted_total 2"),
        std::string("cacheroute_planner_reports_rejected_total{reason=\"gateway_id\"} 1"),
        std::string("cacheroute_planner_destination_expected_load{destination=\"d0\"}"),
        std::string("# TYPE cacheroute_planner_plans_total counter")}) {
    INFO(line);
    CHECK(text.find(line) != std::string::npos);
  }
}

TEST_CASE("/readyz: 503 with a reason until the planner has a table, then 200") {
  PlannerConfig config = TestConfig();
  config.metrics_listen = "127.0.0.1:0";
  Fixture f(config);
  httplib::Client http("127.0.0.1", f.server_->metrics_port());
  const auto before = http.Get("/readyz");
  REQUIRE(before);
  CHECK(before->status == 503);
  CHECK(before->body == "no table yet\n");
  f.Replan();
  const auto after = http.Get("/readyz");
  REQUIRE(after);
  CHECK(after->status == 200);
  CHECK(after->body == "ready\n");
  // Without etcd, GetStatus has no replica section.
  CHECK_FALSE(f.Status().has_ha());
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

grpc::Status StatusOver(const std::shared_ptr<grpc::Channel>& channel) {
  auto admin = v1::AdminService::NewStub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::GetStatusResponse response;
  return admin->GetStatus(&context, {}, &response);
}

TEST_CASE("TLS and mutual TLS with certificates generated at test time") {
  const std::string cert_dir = TempDir();
  const testing::Certs certs = testing::MakeCerts(cert_dir);
  base::ManualClock clock(absl::FromUnixSeconds(1'800'000'000));
  const std::string address = "127.0.0.1:";
  PlannerConfig config = TestConfig();
  config.tls.cert_file = certs.server_cert;
  config.tls.key_file = certs.server_key;
  // A client that trusts the CA and presents no certificate of its own.
  grpc::SslCredentialsOptions trusting_ca;
  trusting_ca.pem_root_certs = Slurp(certs.ca);

  SECTION("TLS: a client trusting the CA gets through, a plaintext client does not") {
    auto server = PlannerServer::Start(config, &clock, false);
    REQUIRE(server.ok());
    const std::string target = address + std::to_string((*server)->port());
    CHECK(StatusOver(grpc::CreateChannel(target, grpc::SslCredentials(trusting_ca))).ok());
    CHECK_FALSE(StatusOver(grpc::CreateChannel(target, grpc::InsecureChannelCredentials())).ok());
  }
  SECTION("mTLS: the client must present a certificate signed by the client CA") {
    config.tls.client_ca_file = certs.ca;
    auto server = PlannerServer::Start(config, &clock, false);
    REQUIRE(server.ok());
    const std::string target = address + std::to_string((*server)->port());
    grpc::SslCredentialsOptions with_cert = trusting_ca;
    with_cert.pem_cert_chain = Slurp(certs.client_cert);
    with_cert.pem_private_key = Slurp(certs.client_key);
    CHECK(StatusOver(grpc::CreateChannel(target, grpc::SslCredentials(with_cert))).ok());
    CHECK_FALSE(StatusOver(grpc::CreateChannel(target, grpc::SslCredentials(trusting_ca))).ok());
  }
  std::filesystem::remove_all(cert_dir);
}

// The real cacheroute-planner process, started on a free port; its port is read from its
// "started" log line. Its log is a file of its own, removed with the object.
class PlannerProcess {
 public:
  explicit PlannerProcess(const std::vector<std::string>& args)
      : log_dir_(TempDir()), log_(log_dir_ + "/planner.log") {
    std::vector<std::string> argv = {CACHEROUTE_PLANNER_PATH};
    argv.insert(argv.end(), args.begin(), args.end());
    child_ = testing::RequireOk(eval::ChildProcess::Spawn(std::move(argv), {.stderr_path = log_}));
    const std::string started = testing::RequireOk(
        eval::AwaitLogLine(*child_, log_, " started ", std::chrono::seconds(60)));
    port_ = eval::LogNumber(started, "port").value_or(0);
    REQUIRE(port_ > 0);
    restored_ = eval::LogField(started, "restored_version").value_or("");
  }
  ~PlannerProcess() {
    Kill();
    std::error_code ignored;
    std::filesystem::remove_all(log_dir_, ignored);
  }
  void Kill() {
    if (child_ != nullptr) child_->Kill();
  }
  int port() const { return port_; }
  const std::string& restored() const { return restored_; }

 private:
  std::string log_dir_;
  std::string log_;
  std::unique_ptr<eval::ChildProcess> child_;
  int port_ = 0;
  std::string restored_;
};

TEST_CASE("the planner process killed with SIGKILL restarts on its state directory") {
  const std::string state = TempDir();
  const std::vector<std::string> args = {
      "--listen",    "127.0.0.1:0", "--metrics-listen",   "",  "--destinations", "4",
      "--state-dir", state,         "--control-interval", "1h"};
  v1::RoutingTable before;
  {
    PlannerProcess planner(args);
    CHECK(planner.restored() == "none");
    auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(planner.port()),
                                       grpc::InsecureChannelCredentials());
    auto rates = v1::RateService::NewStub(channel);
    auto admin = v1::AdminService::NewStub(channel);
    auto tables = v1::TableService::NewStub(channel);
    v1::ReportRatesRequest report;
    report.set_gateway_id("gw");
    report.set_sequence(1);
    report.set_window_start_unix_ms(1);
    report.set_window_end_unix_ms(2);
    for (const std::string key : {"a", "b", "c"}) {
      v1::KeyCount* kc = report.add_counts();
      kc->set_key_id(KeyId(key));
      kc->set_count(100);
    }
    {
      grpc::ClientContext context;
      v1::ReportRatesResponse response;
      REQUIRE(rates->ReportRates(&context, report, &response).ok());
    }
    {
      grpc::ClientContext context;
      v1::ReplanResponse response;
      REQUIRE(admin->Replan(&context, {}, &response).ok());
    }
    grpc::ClientContext context;
    REQUIRE(tables->GetTable(&context, {}, &before).ok());
    REQUIRE(before.version().number() == 1);
    planner.Kill();  // no chance to save anything more
  }
  PlannerProcess again(args);
  CHECK(again.restored() == std::to_string(before.version().epoch()) + ".1");
  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(again.port()),
                                     grpc::InsecureChannelCredentials());
  auto tables = v1::TableService::NewStub(channel);
  grpc::ClientContext context;
  v1::RoutingTable after;
  REQUIRE(tables->GetTable(&context, {}, &after).ok());
  CHECK(after.SerializeAsString() == before.SerializeAsString());
  again.Kill();
  std::filesystem::remove_all(state);
}

TEST_CASE("the binary starts with the example config of deploy/") {
  const std::string state = TempDir();
  // Only what cannot work on a test machine is overridden: addresses and the state directory.
  PlannerProcess planner({"--config", std::string(CACHEROUTE_SOURCE_DIR) + "/deploy/planner.yaml",
                          "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
                          "--state-dir", state, "--log-format", "text"});
  auto admin = v1::AdminService::NewStub(grpc::CreateChannel(
      "127.0.0.1:" + std::to_string(planner.port()), grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  v1::GetStatusResponse status;
  REQUIRE(admin->GetStatus(&context, {}, &status).ok());
  CHECK(status.destinations_size() == 30);
  CHECK(status.destinations(0) == "vllm-0");
  planner.Kill();
  std::filesystem::remove_all(state);
}

}  // namespace
}  // namespace cacheroute::service
