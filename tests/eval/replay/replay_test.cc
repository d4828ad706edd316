// cacheroute-replay as a real process against three in-process engine emulators at time scale 0,
// over real HTTP on loopback: its served KV hit equals the engines' own prefix-cache counters, its
// per-destination counts equal what each engine served, failures are counted when an engine is
// down, routing decisions are a function of the seed, and through two in-process endpoint pickers
// (--ext-proc) every request is routed by the picker it was dealt and served where it named, with
// header values in raw_value or (--ext-proc-header-value) in value; through a gateway that sheds,
// its 429s are counted apart from the failures, as many as it says it shed.
#include <httplib.h>

#include <catch2/catch.hpp>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"
#include "tests/support/eventually.h"
#include "tests/support/require_ok.h"
#include "tools/epp/epp.h"
#include "tools/epp/epp_config.h"
#include "tools/gateway/gateway.h"
#include "tools/eval/engine_emu/server.h"
#include "tools/eval/replay/replay.h"
#include "tools/eval/workload/json_line.h"
#include "tools/eval/workload/mooncake.h"
#include "tools/eval/workload/workload.h"

namespace cacheroute::replay {
namespace {

using workload::JsonValue;

std::unique_ptr<engine_emu::EmuServer> StartEmu(int index) {
  engine_emu::EmuOptions options;
  options.engine_label = std::to_string(index);
  options.http_threads = 64;
  options.runner.profile = *sim::FindEngineProfile("llama-8b-h100");
  options.runner.profile.kv_blocks = 600;  // small, so placement matters to the hit rate
  options.runner.time_scale = 0;
  absl::StatusOr<std::unique_ptr<engine_emu::EmuServer>> server =
      engine_emu::EmuServer::Start(options);
  REQUIRE(server.ok());
  return *std::move(server);
}

// A small semi-synthetic workload: 32 keys, 150 QPS for 2 s.
std::string WriteWorkload(const testing::TempDir& dir) {
  workload::WorkloadProfile profile = workload::PaperPrimaryProfile();
  profile.keys = 1000;
  profile.top_k = 32;
  profile.qps = 150;
  profile.duration_s = 2;
  profile.seed = 5;
  absl::StatusOr<workload::GeneratedWorkload> g = workload::GenerateWorkload(profile);
  REQUIRE(g.ok());
  REQUIRE(g->workload.requests.size() > 100);
  const std::string path = dir.File("workload.jsonl");
  REQUIRE(workload::WriteMooncakeTraceFile(g->workload, path).ok());
  return path;
}

struct Run {
  int exit_code = -1;
  std::string output;
  JsonValue report;
};

Run Replay(std::vector<std::string> args, const std::string& json_path) {
  args.insert(args.end(), {"--json", json_path});
  const testing::CommandResult result = testing::RunCommand(CACHEROUTE_REPLAY_PATH, args);
  Run run;
  run.exit_code = result.exit_code;
  run.output = result.out + result.err;
  INFO(absl::StrJoin(args, " ") << "\n" << run.output);
  REQUIRE(run.exit_code == 0);
  std::ifstream in(json_path);
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<JsonValue> v = workload::ParseJson(text.str());
  REQUIRE(v.ok());
  run.report = *v;
  return run;
}

uint64_t U(const JsonValue& v, const char* name) {
  const JsonValue* f = v.Find(name);
  REQUIRE(f != nullptr);
  REQUIRE(f->AsUint64().has_value());
  return *f->AsUint64();
}

std::string Url(const engine_emu::EmuServer& s) {
  return "http://127.0.0.1:" + std::to_string(s.port());
}

TEST_CASE("the replay's served KV hit equals the engines' own prefix-cache counters") {
  testing::TempDir dir("replay_test");
  const std::string workload = WriteWorkload(dir);
  for (const char* policy : {"flatlb", "cacheroute"}) {
    INFO(policy);
    std::vector<std::unique_ptr<engine_emu::EmuServer>> engines;
    std::string urls;
    for (int i = 0; i < 3; ++i) {
      engines.push_back(StartEmu(i));
      urls += (i ? "," : "") + Url(*engines.back());
    }
    std::vector<std::string> args = {"--workload", workload,    "--engines", urls,       "--policy",
                                     policy,       "--speedup", "4",         "--prompt", "stub"};
    if (std::string(policy) == "cacheroute") args.push_back("--plan-from-workload");
    Run run = Replay(args, dir.File(std::string(policy) + ".json"));
    const JsonValue& r = run.report;
    CHECK(U(r, "failed") == 0);
    CHECK(U(r, "succeeded") == U(r, "requests"));
    // Scrape what the engines counted (the same counters /metrics shows).
    uint64_t hits = 0, queries = 0;
    const JsonValue& destinations = *r.Find("destinations");
    REQUIRE(destinations.items.size() == 3);
    for (int i = 0; i < 3; ++i) {
      httplib::Client client("127.0.0.1", engines[i]->port());
      httplib::Result page = client.Get("/metrics");
      REQUIRE(page);
      const engine_emu::EngineMetrics m = engines[i]->runner().Metrics();
      const std::string labels =
          "{model_name=\"cacheroute-emu\",engine=\"" + std::to_string(i) + "\"} ";
      CHECK(page->body.find("vllm:prefix_cache_hits_total" + labels +
                            std::to_string(m.prefix_hits) + "\n") != std::string::npos);
      hits += m.prefix_hits;
      queries += m.prefix_queries;
      // Each destination in the report is the engine that served it.
      CHECK(U(destinations.items[i], "requests") == m.finished);
      CHECK(U(destinations.items[i], "cached_tokens") == m.prefix_hits);
      CHECK(U(destinations.items[i], "prompt_tokens") == m.prefix_queries);
    }
    CHECK(hits > 0);
    CHECK(U(r, "cached_tokens") == hits);
    CHECK(U(r, "prompt_tokens") == queries);  // queries count every prompt token
    CHECK(r.Find("kv_hit")->AsDouble().value() ==
          Approx(static_cast<double>(hits) / static_cast<double>(queries)).epsilon(1e-5));
    if (std::string(policy) == "cacheroute") CHECK(r.Find("plan") != nullptr);
  }
}

TEST_CASE("requests to an engine that is down count as failures") {
  testing::TempDir dir("replay_test");
  const std::string workload = WriteWorkload(dir);
  auto up0 = StartEmu(0);
  auto up1 = StartEmu(1);
  int down_port;
  {
    auto gone = StartEmu(2);
    down_port = gone->port();
  }  // stopped: nothing listens there now
  const std::string urls =
      Url(*up0) + "," + Url(*up1) + ",http://127.0.0.1:" + std::to_string(down_port);
  Run run = Replay({"--workload", workload, "--engines", urls, "--policy", "sticky", "--speedup",
                    "4", "--timeout", "5", "--no-stream"},
                   dir.File("down.json"));
  const JsonValue& r = run.report;
  const JsonValue& down = r.Find("destinations")->items.at(2);
  CHECK(U(down, "requests") > 0);
  CHECK(U(down, "succeeded") == 0);
  CHECK(U(*r.Find("failures"), "connect_error") == U(down, "requests"));
  CHECK(U(r, "failed") == U(down, "requests"));
  CHECK(U(r, "succeeded") + U(r, "failed") == U(r, "requests"));
  CHECK(U(r, "succeeded") == up0->runner().Metrics().finished + up1->runner().Metrics().finished);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST_CASE("routing decisions are a function of the seed") {
  testing::TempDir dir("replay_test");
  const std::string workload = WriteWorkload(dir);
  const std::string urls = "http://127.0.0.1:1,http://127.0.0.1:2,http://127.0.0.1:3";
  auto assignments = [&](const char* policy, const char* seed, const std::string& name) {
    std::vector<std::string> args = {"--workload", workload,        "--engines",   urls,
                                     "--policy",   policy,          "--seed",      seed,
                                     "--dry-run",  "--assignments", dir.File(name)};
    if (std::string(policy) == "cacheroute") args.push_back("--plan-from-workload");
    Replay(args, dir.File(name + ".json"));
    return ReadFile(dir.File(name));
  };
  for (const char* policy : {"flatlb", "chwbl", "dualmap", "preble", "cacheroute"}) {
    INFO(policy);
    const std::string a = assignments(policy, "7", "a.csv");
    CHECK(a.size() > 100);
    CHECK(a == assignments(policy, "7", "b.csv"));
  }
  CHECK(assignments("flatlb", "7", "c.csv") != assignments("flatlb", "8", "d.csv"));

  // A live run of a load-blind policy sends each engine the same requests every time.
  std::vector<std::string> counts;
  for (int round = 0; round < 2; ++round) {
    std::vector<std::unique_ptr<engine_emu::EmuServer>> engines;
    std::string live;
    for (int i = 0; i < 3; ++i) {
      engines.push_back(StartEmu(i));
      live += (i ? "," : "") + Url(*engines.back());
    }
    Run run = Replay({"--workload", workload, "--engines", live, "--policy", "sticky", "--speedup",
                      "4", "--prompt", "stub", "--assignments", dir.File("live.csv")},
                     dir.File("live.json"));
    counts.push_back(ReadFile(dir.File("live.csv")));
  }
  CHECK(counts[0] == counts[1]);
}

TEST_CASE("through a gateway, destinations come from its X-CacheRoute-Destination header") {
  auto ok = [](const std::string& via, bool planned, uint64_t prompt, uint64_t cached) {
    Outcome o;
    o.via = via;
    o.planned = planned;
    o.prompt_tokens = prompt;
    o.cached_tokens = cached;
    return o;
  };
  Outcome failed;
  failed.kind = OutcomeKind::kHttpError;
  failed.via = "engine-1";
  const std::vector<Outcome> outcomes = {
      ok("engine-1", true, 100, 60), ok("engine-0", false, 50, 0), ok("engine-1", true, 100, 100),
      failed, ok("", false, 10, 0)};
  const ReplayReport report = BuildReport(outcomes, {}, 1.0);
  REQUIRE(report.destinations.size() == 2);
  CHECK(report.destinations[0].name == "engine-0");
  CHECK(report.destinations[0].requests == 1);
  CHECK(report.destinations[0].prefill_tokens == 50);
  CHECK(report.destinations[1].name == "engine-1");
  CHECK(report.destinations[1].requests == 3);
  CHECK(report.destinations[1].succeeded == 2);
  CHECK(report.destinations[1].prefill_tokens == 40);
  CHECK(report.planned == 2);
  CHECK(report.succeeded == 4);
  CHECK(report.prefill_imbalance == Approx(50.0 / 45.0));
}

TEST_CASE("429s are counted apart from failures, with their latency; goodput counts the SLO") {
  auto outcome = [](OutcomeKind kind, double ttft, double latency) {
    Outcome o;
    o.kind = kind;
    o.ttft_s = ttft;
    o.latency_s = latency;
    o.http_status = kind == OutcomeKind::kShed ? 429 : 200;
    return o;
  };
  const std::vector<Outcome> outcomes = {
      outcome(OutcomeKind::kOk, 0.5, 1.0),      outcome(OutcomeKind::kOk, 2.0, 3.0),
      outcome(OutcomeKind::kOk, 4.0, 5.0),      outcome(OutcomeKind::kShed, 0, 0.002),
      outcome(OutcomeKind::kShed, 0, 0.004),    outcome(OutcomeKind::kShed, 0, 0.100),
      outcome(OutcomeKind::kTimeout, 0, 60.0)};
  const ReplayReport r = BuildReport(outcomes, {}, 4.0, 2.0);
  CHECK(r.requests == 7);
  CHECK(r.succeeded == 3);
  CHECK(r.shed == 3);
  CHECK(r.failed == 1);  // the timeout; the 429s are not failures
  CHECK(r.shed_latency_p50_s == 0.004);
  CHECK(r.shed_latency_p99_s == 0.100);
  CHECK(r.within_slo == 2);  // TTFT 0.5 and 2.0 (≤ 2.0); 4.0 is over
  CHECK(r.goodput == Approx(0.5));  // 2 within the SLO over 4 s
  CHECK(r.ttft_p99_s == 4.0);       // TTFT of the admitted requests only

  absl::StatusOr<JsonValue> json = workload::ParseJson(FormatReportJson(r));
  REQUIRE(json.ok());
  CHECK(U(*json, "shed") == 3);
  CHECK(U(*json, "failed") == 1);
  CHECK(U(*json, "within_slo") == 2);
  CHECK(json->Find("failures")->Find("shed") == nullptr);
  CHECK(json->Find("shed_latency_p99_seconds")->AsDouble().value() == Approx(0.1));
  CHECK(json->Find("goodput")->AsDouble().value() == Approx(0.5));
  const std::string table = FormatReportTable(r);
  CHECK_THAT(table, Catch::Contains("shed (429)          3") && Catch::Contains("goodput 0.50/s") &&
                        Catch::Contains("(timeout 1)"));
  // Without an SLO there is no goodput.
  CHECK(workload::ParseJson(FormatReportJson(BuildReport(outcomes, {}, 4.0)))->Find("goodput") ==
        nullptr);
}

TEST_CASE("through a gateway that sheds, its 429s are counted as shed, as many as it shed") {
  testing::TempDir dir("replay_test");
  const std::string workload = WriteWorkload(dir);
  // One engine on real time: a request's prefill stays queued for a while.
  engine_emu::EmuOptions options;
  options.engine_label = "0";
  options.http_threads = 64;
  options.runner.profile = *sim::FindEngineProfile("llama-8b-h100");
  options.runner.time_scale = 1;
  std::unique_ptr<engine_emu::EmuServer> engine =
      testing::RequireOk(engine_emu::EmuServer::Start(options));
  gateway::GatewayConfig config;
  config.listen = "127.0.0.1:0";
  config.upstreams.push_back({"e0", Url(*engine)});
  config.io_threads = 2;
  // Any queued prefill saturates the engine and nobody waits: a request arriving while another's
  // prefill is queued is shed at once.
  config.shed = true;
  config.shed_saturation_tokens = 1;
  config.shed_queue_capacity = 0;
  std::unique_ptr<gateway::Gateway> gateway = testing::RequireOk(gateway::Gateway::Start(config));
  // 1,500 QPS offered for 0.2 s to one engine.
  Run run = Replay({"--workload", workload, "--gateway",
                    absl::StrCat("http://127.0.0.1:", gateway->port()), "--speedup", "10",
                    "--duration", "0.2", "--prompt", "stub", "--slo", "600"},
                   dir.File("shed.json"));
  const JsonValue& r = run.report;
  const uint64_t shed = U(r, "shed");
  CHECK(shed > 0);
  CHECK(U(r, "failed") == 0);
  CHECK(U(r, "succeeded") + shed == U(r, "requests"));
  CHECK(U(r, "succeeded") == engine->runner().Metrics().finished);
  CHECK(U(r, "within_slo") == U(r, "succeeded"));  // the SLO is beyond the replay's timeout
  CHECK(r.Find("shed_latency_p50_seconds")->AsDouble().value() > 0);
  CHECK(r.Find("shed_latency_p99_seconds")->AsDouble().value() >=
        r.Find("shed_latency_p50_seconds")->AsDouble().value());
  CHECK_THAT(run.output, Catch::Contains(absl::StrCat("shed (429)          ", shed)));
  // As many as the gateway says it shed.
  httplib::Client client("127.0.0.1", gateway->port());
  httplib::Result page = client.Get("/metrics");
  REQUIRE(page);
  uint64_t counted = 0;
  for (absl::string_view line : absl::StrSplit(page->body, '\n')) {
    if (!absl::StartsWith(line, "cacheroute_gateway_admission_shed_total{")) continue;
    uint64_t n = 0;
    REQUIRE(absl::SimpleAtoi(line.substr(line.rfind(' ') + 1), &n));
    counted += n;
  }
  CHECK(counted == shed);
}

TEST_CASE("through endpoint pickers: each request routed by the picker it was dealt, then served") {
  // Header values in raw_value (Envoy's default) or, as an Envoy with send_header_raw_value off,
  // in value: the filter then reads the endpoint from value alone, so a picker answering in
  // raw_value would route nothing.
  const bool header_value = GENERATE(false, true);
  CAPTURE(header_value);
  testing::TempDir dir("replay_test");
  const std::string workload = WriteWorkload(dir);
  std::vector<std::unique_ptr<engine_emu::EmuServer>> engines;
  epp::EppConfig config;
  config.listen = "127.0.0.1:0";
  config.metrics_listen = "127.0.0.1:0";
  for (int i = 0; i < 3; ++i) {
    engines.push_back(StartEmu(i));
    config.dataplane.upstreams.push_back({absl::StrCat("u", i), Url(*engines.back())});
  }
  std::vector<std::unique_ptr<epp::Epp>> pickers;
  std::vector<std::string> addresses;
  for (int i = 0; i < 2; ++i) {
    pickers.push_back(testing::RequireOk(epp::Epp::Start(config)));
    addresses.push_back(absl::StrCat("127.0.0.1:", pickers.back()->port()));
  }
  std::vector<std::string> args = {"--workload", workload, "--ext-proc",
                                   absl::StrJoin(addresses, ","), "--speedup", "4", "--prompt",
                                   "stub"};
  if (header_value) args.push_back("--ext-proc-header-value");
  Run run = Replay(args, dir.File("pickers.json"));
  const JsonValue& r = run.report;
  CHECK(U(r, "failed") == 0);
  const uint64_t requests = U(r, "requests");
  CHECK(U(r, "succeeded") == requests);
  CHECK(r.Find("policy")->text == "endpoint-picker");
  // Where each request went is what its picker said (the member name it added to the response);
  // the engines served exactly that.
  const JsonValue& destinations = *r.Find("destinations");
  REQUIRE(destinations.items.size() == 3);
  uint64_t hits = 0;
  for (int i = 0; i < 3; ++i) {
    const engine_emu::EngineMetrics m = engines[i]->runner().Metrics();
    CHECK(destinations.items[i].Find("name")->text == absl::StrCat("u", i));
    CHECK(U(destinations.items[i], "requests") == m.finished);
    CHECK(U(destinations.items[i], "cached_tokens") == m.prefix_hits);
    hits += m.prefix_hits;
  }
  CHECK(U(r, "cached_tokens") == hits);
  // Dealt in turn: each picker answered half the requests, every one 2xx (it followed each
  // response to its end).
  for (int i = 0; i < 2; ++i) {
    const uint64_t dealt = requests / 2 + (i == 0 ? requests % 2 : 0);
    CHECK(absl::StrContains(pickers[i]->RenderMetrics(),
                            absl::StrCat("requests_total{endpoint=\"completions\",code=\"2xx\"} ",
                                         dealt, "\n")));
  }
}

TEST_CASE("through an endpoint picker with no member up, requests fail with its 503") {
  testing::TempDir dir("replay_test");
  const std::string workload = WriteWorkload(dir);
  epp::EppConfig config;
  config.listen = "127.0.0.1:0";
  config.metrics_listen = "127.0.0.1:0";
  config.dataplane.upstreams.push_back({"down", "http://127.0.0.1:1"});
  config.dataplane.health_check_interval = absl::Milliseconds(20);
  config.dataplane.health_check_timeout = absl::Milliseconds(200);
  config.dataplane.failure_threshold = 1;
  std::unique_ptr<epp::Epp> picker = testing::RequireOk(epp::Epp::Start(config));
  REQUIRE(testing::Eventually([&] { return !picker->ready(); }));
  Run run = Replay({"--workload", workload, "--ext-proc",
                    absl::StrCat("127.0.0.1:", picker->port()), "--duration", "0.2", "--prompt",
                    "stub"},
                   dir.File("down.json"));
  CHECK(U(run.report, "succeeded") == 0);
  CHECK(U(run.report, "failed") == U(run.report, "requests"));
  CHECK(absl::StrContains(run.output, "http_error"));
}

}  // namespace
}  // namespace cacheroute::replay
