// End-to-end tests of cacheroutectl's online commands: a real PlannerServer in this process on a
// loopback port chosen by the kernel (time is a ManualClock, so rates and versions are exact), and
// the real cacheroutectl binary run against it as a subprocess, with exit code, stdout and stderr
// checked. Nothing waits on a fixed sleep: `watch` is synchronised by polling GetStatus until the
// planner lists its stream, with a bounded number of polls.
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/clock.h"
#include "cacheroute/v1/admin.grpc.pb.h"
#include "cacheroute/v1/rates.grpc.pb.h"
#include "cacheroute/v1/table.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "planner/key_id.h"
#include "planner/service/planner_server.h"
#include "tests/support/free_port.h"
#include "tests/support/json_reader.h"
#include "tests/support/planner_config.h"
#include "tests/support/require_ok.h"
#include "tests/support/temp_dir.h"
#include "tools/eval/child_process.h"

#ifndef CACHEROUTECTL_PATH
#error "CACHEROUTECTL_PATH must name the cacheroutectl binary"
#endif

extern char** environ;

namespace cacheroute::client {
namespace {

using cacheroute::testing::TempDir;
using service::PlannerConfig;
using service::PlannerServer;
using testing::JsonValue;
using testing::ParseJson;

struct Result {
  int exit_code = -1;
  std::string out;
  std::string err;
};

// A cacheroutectl process; its stdout and stderr go to files.
class Process {
 public:
  // `env` is added to this process's environment, from which CACHEROUTE_* and proxy settings are
  // removed so the developer's shell cannot change what is tested.
  Process(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
    std::vector<std::string> argv_storage = {CACHEROUTECTL_PATH};
    argv_storage.insert(argv_storage.end(), args.begin(), args.end());
    std::vector<std::string> env_storage;
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry = *e;
      const std::string name = absl::AsciiStrToLower(entry.substr(0, entry.find('=')));
      if (absl::StartsWith(name, "cacheroute_") || absl::EndsWith(name, "proxy")) continue;
      env_storage.push_back(entry);
    }
    env_storage.insert(env_storage.end(), env.begin(), env.end());
    absl::StatusOr<std::unique_ptr<eval::ChildProcess>> child =
        eval::ChildProcess::Spawn(std::move(argv_storage), {.stdout_path = io_.File("stdout"),
                                                            .stderr_path = io_.File("stderr"),
                                                            .truncate = true,
                                                            .env = std::move(env_storage)});
    INFO(child.status().ToString());
    REQUIRE(child.ok());
    child_ = *std::move(child);
  }
  ~Process() = default;  // kills the command if a failed REQUIRE left it running

  // Waits for the exit. A process still running after `limit` is killed (and the REQUIRE on a
  // normal exit fails), so a hung command fails the test instead of hanging it.
  Result Wait(std::chrono::seconds limit = std::chrono::seconds(60)) {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    const pid_t pid = child_->pid();
    std::thread watchdog([&] {
      std::unique_lock<std::mutex> lock(mu);
      if (!cv.wait_for(lock, limit, [&] { return done; })) kill(pid, SIGKILL);
    });
    const int status = child_->Wait();
    {
      std::lock_guard<std::mutex> lock(mu);
      done = true;
    }
    cv.notify_one();
    watchdog.join();
    REQUIRE(status != -1);
    INFO("stderr: " << io_.Read("stderr"));
    REQUIRE(WIFEXITED(status));
    return {WEXITSTATUS(status), io_.Read("stdout"), io_.Read("stderr")};
  }

 private:
  TempDir io_{"cacheroutectl_online"};
  std::unique_ptr<eval::ChildProcess> child_;
};

Result Run(const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
  return Process(args, env).Wait();
}

// One slot on each of two destinations: C = 2, the two hottest keys are admitted, k = 1 each.
PlannerConfig TestConfig() {
  PlannerConfig config = cacheroute::testing::LoopbackPlannerConfig({"d0", "d1"});
  // Algorithm 1 exactly: these tests pin its tables (the default adds spills and splits keys).
  config.algorithm = "cacheroute-paper";
  // Far shorter than the 10 s the tests advance between plans: each plan takes exactly the last
  // interval's counts, so a rate pushed as `key,rate` comes back unchanged.
  config.rate_smoothing = absl::Milliseconds(1);
  return config;
}

// A planner on a loopback port with a manual clock, and stubs for checking its state directly.
class Planner {
 public:
  explicit Planner(PlannerConfig config = TestConfig())
      : clock_(absl::FromUnixSeconds(1'800'000'000)) {
    server_ =
        cacheroute::testing::RequireOk(PlannerServer::Start(config, &clock_, /*run_ticker=*/false));
    address_ = absl::StrCat("127.0.0.1:", server_->port());
    channel_ = grpc::CreateChannel(address_, grpc::InsecureChannelCredentials());
    admin_ = v1::AdminService::NewStub(channel_);
    tables_ = v1::TableService::NewStub(channel_);
    token_ = config.token;
  }

  // cacheroutectl with --planner pointing here, then `args`.
  Result Ctl(std::vector<std::string> args, const std::vector<std::string>& env = {}) const {
    args.insert(args.begin(), {"--planner", address_});
    return Run(args, env);
  }
  std::unique_ptr<Process> StartCtl(std::vector<std::string> args) const {
    args.insert(args.begin(), {"--planner", address_});
    return std::make_unique<Process>(args);
  }

  // The planner's intervals follow its clock; the window of a pushed file is 10 s.
  void Advance() { clock_.Advance(absl::Seconds(10)); }

  v1::GetStatusResponse Status() const {
    grpc::ClientContext context;
    v1::GetStatusResponse status;
    REQUIRE(admin_->GetStatus(&context, {}, &status).ok());
    return status;
  }
  v1::RoutingTable Latest() const {
    grpc::ClientContext context;
    v1::RoutingTable table;
    REQUIRE(tables_->GetTable(&context, {}, &table).ok());
    return table;
  }
  void Replan() {
    Advance();
    grpc::ClientContext context;
    if (!token_.empty()) context.AddMetadata("authorization", "Bearer " + token_);
    v1::ReplanResponse response;
    REQUIRE(admin_->Replan(&context, {}, &response).ok());
  }

  const std::string& address() const { return address_; }

 private:
  base::ManualClock clock_;
  std::unique_ptr<PlannerServer> server_;
  std::string address_;
  std::string token_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::AdminService::Stub> admin_;
  std::unique_ptr<v1::TableService::Stub> tables_;
};

std::string VersionOf(const v1::Version& v) { return absl::StrCat(v.epoch(), ".", v.number()); }

constexpr char kRates[] =
    "key,rate\n"
    "alpha,30\n"
    "beta,20\n"
    "gamma,5\n";

// Pushes kRates as gw-1 (sequence `sequence`) and plans: alpha and beta admitted, gamma not.
void PushAndPlan(Planner& planner, const TempDir& dir, const std::string& rates = kRates,
                 uint64_t sequence = 1) {
  const Result push =
      planner.Ctl({"push-rates", "--gateway", "gw-1", "--rates", dir.Write("rates.csv", rates),
                   "--sequence", absl::StrCat(sequence)});
  INFO(push.err);
  REQUIRE(push.exit_code == 0);
  planner.Advance();
  const Result replan = planner.Ctl({"replan"});
  INFO(replan.err);
  REQUIRE(replan.exit_code == 0);
}

// A planner that has planned kRates once (PushAndPlan), and the directory of its rates file.
struct PlannedRates {
  PlannedRates() { PushAndPlan(planner, dir); }
  Planner planner;
  TempDir dir{"cacheroutectl_online"};
};

// One line on stderr with the prefix and every one of `mentions`, nothing on stdout.
void CheckError(const Result& result, int exit_code, const std::vector<std::string>& mentions) {
  INFO("stderr: " << result.err);
  CHECK(result.exit_code == exit_code);
  CHECK(result.out.empty());
  CHECK(absl::StartsWith(result.err, "cacheroutectl: error: "));
  CHECK(result.err.find('\n') == result.err.size() - 1);
  for (const std::string& mention : mentions) CHECK(absl::StrContains(result.err, mention));
}

std::map<std::string, const JsonValue*> AssignmentsByKey(const JsonValue& doc) {
  std::map<std::string, const JsonValue*> out;
  for (const JsonValue& a : doc.Find("assignments")->array) out[a.Find("key")->string] = &a;
  return out;
}

TEST_CASE("push-rates, replan, then show --format json gives the plan schema with a version") {
  Planner planner;
  TempDir dir("cacheroutectl_online");
  const Result push = planner.Ctl({"push-rates", "--gateway", "gw-1", "--rates",
                                   dir.Write("rates.csv", kRates), "--sequence", "7"});
  INFO(push.err);
  REQUIRE(push.exit_code == 0);
  CHECK(absl::StrContains(push.out, "Pushed 3 keys (550 requests in a 10 s window)"));
  CHECK(absl::StrContains(push.out, "accepted keys   3"));
  CHECK(planner.Status().keys_known() == 3);

  planner.Advance();
  const Result replan = planner.Ctl({"replan"});
  REQUIRE(replan.exit_code == 0);
  const v1::GetStatusResponse status = planner.Status();
  CHECK(replan.out ==
        absl::StrCat("version ", VersionOf(status.version()), ": new table published\n"));

  const Result show = planner.Ctl({"show", "--format", "json"});
  INFO(show.err);
  REQUIRE(show.exit_code == 0);
  const std::optional<JsonValue> doc = ParseJson(show.out);
  REQUIRE(doc.has_value());
  const JsonValue* version = doc->Find("version");
  REQUIRE(version != nullptr);
  CHECK(version->Find("epoch")->number_text == absl::StrCat(status.version().epoch()));
  CHECK(version->Find("number")->number == 1);
  const auto assignments = AssignmentsByKey(*doc);
  REQUIRE(assignments.size() == 2);  // C = 2: alpha and beta; gamma is the cold tail
  CHECK(assignments.at("alpha")->Find("rate")->number == 30);
  CHECK(assignments.at("beta")->Find("rate")->number == 20);
  CHECK(assignments.at("alpha")->Find("key_id")->number_text == absl::StrCat(KeyId("alpha")));
  CHECK(assignments.at("alpha")->Find("destinations")->array.size() == 1);
  const JsonValue* loads = doc->Find("loads");
  REQUIRE(loads->array.size() == 2);  // R entries
  CHECK(loads->array[0].number + loads->array[1].number == Approx(55));
  const JsonValue* stats = doc->Find("stats");
  CHECK(stats->Find("admitted_keys")->number == 2);
  CHECK(stats->Find("slots_used")->number == 2);
  CHECK(stats->Find("cold_tail_rate")->number == Approx(5));
  CHECK(stats->Find("total_rate")->number == Approx(55));
  CHECK(stats->Find("imbalance")->number == Approx(32.5 / 27.5));
  CHECK(stats->Find("destinations")->number == 2);

  // The same version asked for by number, as a table.
  const Result table = planner.Ctl({"show", "--version", VersionOf(status.version())});
  REQUIRE(table.exit_code == 0);
  CHECK(absl::StrContains(table.out, absl::StrCat("Routing table ", VersionOf(status.version()))));
  CHECK(absl::StrContains(table.out, "Hottest 2 of 2 admitted keys"));
  CHECK(absl::StrContains(table.out, "alpha"));
  CHECK(absl::StrContains(table.out, "◀ max"));
  // An unknown version is the planner's NOT_FOUND: bad input.
  CheckError(planner.Ctl({"show", "--version", "1.999"}), 2, {"1.999", "not kept"});
}

TEST_CASE("byte-aware: push-rates sends sizes; show, explain and status print them") {
  PlannerConfig config = TestConfig();
  config.algorithm = "cacheroute";  // byte-aware planning is its
  // 1M KV tokens per destination, 1% planned: 20,000 in all.
  config.kv_tokens_per_destination = 1e6;
  config.planned_prefix_share = 0.01;
  Planner planner(config);
  TempDir dir("cacheroutectl_online");
  // Sizes per request: agent saves 3 × 15,000 (15,000 of the budget), rag 1 × 30,000 (does not
  // fit), chat 30 × 200 (split over both destinations for its work: 400).
  const Result push = planner.Ctl({"push-rates", "--gateway", "gw-1", "--rates",
                                   dir.Write("sizes.csv",
                                             "key,rate,reusable_tokens,prompt_tokens\n"
                                             "agent,3,15000,16000\n"
                                             "rag,1,30000,31000\n"
                                             "chat,30,200,900\n")});
  INFO(push.err);
  REQUIRE(push.exit_code == 0);
  planner.Advance();
  REQUIRE(planner.Ctl({"replan"}).exit_code == 0);

  const Result show = planner.Ctl({"show", "--format", "json"});
  REQUIRE(show.exit_code == 0);
  const std::optional<JsonValue> doc = ParseJson(show.out);
  REQUIRE(doc.has_value());
  const auto assignments = AssignmentsByKey(*doc);
  REQUIRE(assignments.size() == 2);
  CHECK(assignments.at("agent")->Find("reusable_tokens")->number == Approx(15000));
  // Saved work is rate × reusable tokens, discounted (a little: the caches are large) by the
  // chance the prefix survives between visits.
  const double chat_saved = assignments.at("chat")->Find("saved_work")->number;
  CHECK(chat_saved > 0.9 * 30 * 200);
  CHECK(chat_saved < 30 * 200);
  const Result table = planner.Ctl({"show"});
  CHECK(absl::StrContains(table.out, "reusable"));
  CHECK(absl::StrContains(table.out, "saved/s"));

  const Result explain = planner.Ctl({"explain", "rag"});
  INFO(explain.err);
  REQUIRE(explain.exit_code == 0);
  CHECK(absl::StrContains(explain.out, "reusable prefix"));
  CHECK(absl::StrContains(explain.out, "30000 of 31000 prompt tokens  (measured)"));
  CHECK(absl::StrContains(explain.out, "KV budget"));
  const Result explain_json = planner.Ctl({"explain", "agent", "--format", "json"});
  const std::optional<JsonValue> e = ParseJson(explain_json.out);
  REQUIRE(e.has_value());
  CHECK(e->Find("reusable_tokens")->number == Approx(15000));
  CHECK(e->Find("saved_work")->number > 0);
  CHECK(e->Find("saved_work")->number < 3 * 15000);

  const Result status = planner.Ctl({"status"});
  CHECK(absl::StrContains(status.out, "byte-aware KV"));
  CHECK(absl::StrContains(status.out, "15400 / 20000 planned-prefix tokens"));
}

TEST_CASE("push-rates sends key,count files as they are, in consecutive reports") {
  Planner planner;
  TempDir dir("cacheroutectl_online");
  const std::string counts = dir.Write("counts.csv",
                                       "key,count\n"
                                       "alpha,300\n"
                                       "beta,200\n"
                                       "gamma,50\n");
  CheckError(planner.Ctl({"push-rates", "--gateway", "gw-2", "--rates", counts}), 2,
             {"--window", "key,count"});
  const Result push =
      planner.Ctl({"--format", "json", "push-rates", "--gateway", "gw-2", "--rates", counts,
                   "--window", "10", "--sequence", "100", "--batch-size", "2"});
  INFO(push.err);
  REQUIRE(push.exit_code == 0);
  const std::optional<JsonValue> doc = ParseJson(push.out);
  REQUIRE(doc.has_value());
  CHECK(doc->Find("total_count")->number == 550);
  CHECK(doc->Find("accepted_keys")->number == 3);
  const JsonValue* reports = doc->Find("reports");
  REQUIRE(reports->array.size() == 2);
  CHECK(reports->array[0].Find("sequence")->number == 100);
  CHECK(reports->array[0].Find("keys")->number == 2);
  CHECK(reports->array[1].Find("sequence")->number == 101);
  CHECK(reports->array[1].Find("keys")->number == 1);
  const v1::GetStatusResponse status = planner.Status();
  REQUIRE(status.gateways_size() == 1);
  CHECK(status.gateways(0).last_sequence() == 101);

  planner.Replan();  // 10 s: the counts become 30, 20 and 5 req/s
  const v1::RoutingTable table = planner.Latest();
  REQUIRE(table.assignments_size() == 2);
  CHECK(table.assignments(0).key() == "alpha");
  CHECK(table.assignments(0).rate() == 30);
  CHECK(table.assignments(0).key_id() == KeyId("alpha"));

  // The same sequence again is a duplicate: acknowledged, nothing applied.
  const Result again = planner.Ctl({"push-rates", "--gateway", "gw-2", "--rates", counts,
                                    "--window", "10", "--sequence", "101"});
  REQUIRE(again.exit_code == 0);
  CHECK(absl::StrContains(again.out, "duplicate"));
}

TEST_CASE_METHOD(PlannedRates, "status shows the version, the loads and the gateways") {
  const std::string version = VersionOf(planner.Status().version());

  const Result table = planner.Ctl({"status"});
  INFO(table.err);
  REQUIRE(table.exit_code == 0);
  CHECK(absl::StartsWith(table.out, absl::StrCat("Planner ", planner.address(), "\n")));
  CHECK(absl::StrContains(table.out, absl::StrCat("version                ", version)));
  CHECK(absl::StrContains(table.out, "keys known             3"));
  CHECK(absl::StrContains(table.out, "slots used             2 / 2  (100.0%)"));
  CHECK(absl::StrContains(table.out, "Expected load per destination"));
  CHECK(absl::StrContains(table.out, "◀ max"));
  CHECK(absl::StrContains(table.out, "gw-1"));

  const Result json = planner.Ctl({"status", "--format", "json"});  // global option after it
  REQUIRE(json.exit_code == 0);
  const std::optional<JsonValue> doc = ParseJson(json.out);
  REQUIRE(doc.has_value());
  CHECK(doc->Find("keys_admitted")->number == 2);
  const JsonValue* destinations = doc->Find("destinations");
  REQUIRE(destinations->array.size() == 2);
  CHECK(destinations->array[1].Find("name")->string == "d1");
  CHECK(destinations->array[1].Find("drained")->boolean == false);
  const JsonValue* gateways = doc->Find("gateways");
  REQUIRE(gateways->array.size() == 1);
  CHECK(gateways->array[0].Find("gateway_id")->string == "gw-1");
  CHECK(gateways->array[0].Find("last_sequence")->number == 1);
  CHECK(doc->Find("reports_accepted")->number == 1);
  CHECK(doc->Find("reports_duplicate")->number == 0);
  CHECK(doc->Find("replica")->type == JsonValue::Type::kNull);  // a planner alone
  CHECK(absl::StrContains(table.out, "reports                1 accepted, 0 duplicate"));
  CHECK_FALSE(absl::StrContains(table.out, "replica"));
}

TEST_CASE_METHOD(PlannedRates,
                 "explain says where an admitted key goes and why another is not admitted") {
  const Result admitted = planner.Ctl({"explain", "alpha"});
  INFO(admitted.err);
  REQUIRE(admitted.exit_code == 0);
  CHECK(absl::StrContains(admitted.out, "Key \"alpha\""));
  CHECK(absl::StrContains(admitted.out, "rate                   30 req/s"));
  CHECK(absl::StrContains(admitted.out, "rank                   1"));
  CHECK(absl::StrContains(admitted.out, "admitted               yes"));

  const Result json =
      planner.Ctl({"--format", "json", "explain", "--key-id", absl::StrCat(KeyId("alpha"))});
  REQUIRE(json.exit_code == 0);
  const std::optional<JsonValue> doc = ParseJson(json.out);
  REQUIRE(doc.has_value());
  CHECK(doc->Find("key")->string == "alpha");
  CHECK(doc->Find("admitted")->boolean);
  CHECK(doc->Find("k")->number == 1);
  const JsonValue* destinations = doc->Find("destinations");
  REQUIRE(destinations->array.size() == 1);
  CHECK(destinations->array[0].Find("expected_load")->number == Approx(32.5));
  CHECK(absl::StrContains(destinations->array[0].Find("name")->string, "d"));

  const Result cold = planner.Ctl({"explain", "gamma"});
  REQUIRE(cold.exit_code == 0);
  CHECK(absl::StrContains(cold.out, "rank                   3"));
  CHECK(absl::StrContains(cold.out, "admitted               no: slots exhausted"));
  const Result cold_json = planner.Ctl({"--format", "json", "explain", "gamma"});
  const std::optional<JsonValue> cold_doc = ParseJson(cold_json.out);
  REQUIRE(cold_doc.has_value());
  CHECK_FALSE(cold_doc->Find("admitted")->boolean);
  CHECK(cold_doc->Find("destinations")->array.empty());

  CheckError(planner.Ctl({"explain"}), 2, {"KEY", "--key-id"});
}

TEST_CASE_METHOD(PlannedRates,
                 "diff lists the keys that moved, came and went between two versions") {
  const std::string first = VersionOf(planner.Status().version());
  // gamma overtakes beta.
  PushAndPlan(planner, dir, "key,rate\nalpha,30\nbeta,1\ngamma,25\n", 2);
  const std::string second = VersionOf(planner.Status().version());
  REQUIRE(first != second);

  const Result json = planner.Ctl({"--format", "json", "diff", first, second});
  INFO(json.err);
  REQUIRE(json.exit_code == 0);
  const std::optional<JsonValue> doc = ParseJson(json.out);
  REQUIRE(doc.has_value());
  REQUIRE(doc->Find("added")->array.size() == 1);
  CHECK(doc->Find("added")->array[0].Find("key")->string == "gamma");
  REQUIRE(doc->Find("removed")->array.size() == 1);
  CHECK(doc->Find("removed")->array[0].Find("key")->string == "beta");
  const double churn = doc->Find("churn")->number;
  CHECK(churn > 0);
  CHECK(churn <= 1);

  const Result table = planner.Ctl({"diff", first});  // to the latest
  REQUIRE(table.exit_code == 0);
  CHECK(absl::StrContains(table.out, absl::StrCat("Diff ", first, " → ", second)));
  CHECK(absl::StrContains(table.out, "Added (1)"));
  CHECK(absl::StrContains(table.out, "Removed (1)"));
  CHECK(absl::StrContains(table.out, "gamma"));
  CheckError(planner.Ctl({"diff", "latest"}), 2, {"V1", "\"latest\""});
}

TEST_CASE_METHOD(PlannedRates,
                 "watch applies the full table and then a delta, one line per version") {
  const v1::Version first = planner.Status().version();

  std::unique_ptr<Process> watch =
      planner.StartCtl({"--format", "json", "watch", "--gateway-id", "watcher", "--count", "2"});
  // The stream is registered (and the full table sent) before the planner lists it.
  bool subscribed = false;
  for (int poll = 0; poll < 2000 && !subscribed; ++poll) {
    const v1::GetStatusResponse status = planner.Status();
    for (const v1::GatewayStatus& g : status.gateways()) {
      if (g.gateway_id() == "watcher" && g.subscribed()) subscribed = true;
    }
    if (!subscribed) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE(subscribed);
  PushAndPlan(planner, dir, "key,rate\nalpha,30\nbeta,1\ngamma,25\n", 2);
  const v1::Version second = planner.Status().version();
  REQUIRE(second.number() == first.number() + 1);

  const Result result = watch->Wait();
  INFO(result.err);
  REQUIRE(result.exit_code == 0);
  const std::vector<std::string> lines = absl::StrSplit(result.out, '\n', absl::SkipEmpty());
  REQUIRE(lines.size() == 2);
  const std::optional<JsonValue> full = ParseJson(lines[0]);
  REQUIRE(full.has_value());
  CHECK(full->Find("kind")->string == "full");
  CHECK(full->Find("version")->Find("number")->number == first.number());
  CHECK(full->Find("keys")->number == 2);
  const std::optional<JsonValue> delta = ParseJson(lines[1]);
  REQUIRE(delta.has_value());
  CHECK(delta->Find("kind")->string == "delta");
  CHECK(delta->Find("base")->Find("number")->number == first.number());
  CHECK(delta->Find("version")->Find("number")->number == second.number());
  CHECK(delta->Find("keys")->number == 2);
  CHECK(delta->Find("upserts")->number == 1);   // gamma
  CHECK(delta->Find("removals")->number == 1);  // beta
}

TEST_CASE_METHOD(PlannedRates, "drain, undrain and destinations set change the membership") {
  const Result drain = planner.Ctl({"drain", "d1"});
  INFO(drain.err);
  REQUIRE(drain.exit_code == 0);
  CHECK(absl::StartsWith(drain.out, "drained \"d1\"; the table is now version "));
  v1::GetStatusResponse status = planner.Status();
  REQUIRE(status.drained_size() == 2);
  CHECK(status.drained(1));
  const v1::RoutingTable drained_table = planner.Latest();
  for (const v1::Assignment& a : drained_table.assignments()) {
    for (const uint32_t d : a.destinations()) CHECK(d == 0);
  }
  const Result listed = planner.Ctl({"destinations", "list"});
  REQUIRE(listed.exit_code == 0);
  CHECK(absl::StrContains(listed.out, "drained"));

  REQUIRE(planner.Ctl({"undrain", "d1"}).exit_code == 0);
  CHECK_FALSE(planner.Status().drained(1));
  CheckError(planner.Ctl({"drain", "nope"}), 2, {"Drain", "\"nope\""});

  const Result set = planner.Ctl({"--format", "json", "destinations", "set", "d0", "d1", "d2"});
  INFO(set.err);
  REQUIRE(set.exit_code == 0);
  const std::optional<JsonValue> doc = ParseJson(set.out);
  REQUIRE(doc.has_value());
  CHECK(doc->Find("destinations")->array.size() == 3);
  status = planner.Status();
  CHECK(status.destinations_size() == 3);
  CHECK(doc->Find("version")->Find("number")->number == status.version().number());
  CheckError(planner.Ctl({"destinations", "set", "x", "x"}), 2, {"duplicate"});
}

TEST_CASE("gate shows the rollout gate; --force holds a state across a planner restart") {
  TempDir dir("cacheroutectl_online");
  PlannerConfig config = TestConfig();
  config.gate_enabled = true;
  config.state_dir = (dir.path() / "state").string();
  {
    Planner planner(config);
    PushAndPlan(planner, dir);  // the first interval ends shadow: a canary
    const Result shown = planner.Ctl({"gate"});
    INFO(shown.err);
    REQUIRE(shown.exit_code == 0);
    CHECK(absl::StartsWith(shown.out, "gate: canary, 20% of keys on the table\n"));
    CHECK(absl::StrContains(shown.out, "too_few_samples"));

    const Result forced = planner.Ctl({"--format", "json", "gate", "--force", "enabled", "--why",
                                       "load test"});
    INFO(forced.err);
    REQUIRE(forced.exit_code == 0);
    const std::optional<JsonValue> doc = ParseJson(forced.out);
    REQUIRE(doc.has_value());
    CHECK(doc->Find("state")->string == "enabled");
    CHECK(doc->Find("forced_state")->string == "enabled");
    CHECK(doc->Find("forced_why")->string == "load test");
    // The forced split is published at once.
    const v1::RoutingTable table = planner.Latest();
    REQUIRE(table.has_rollout());
    CHECK(table.rollout().state() == "enabled");
    CHECK(table.rollout().table_fraction() == Approx(0.95));
    CheckError(planner.Ctl({"gate", "--force", "bogus"}), 2, {"\"bogus\""});
  }
  Planner restarted(config);
  const Result after = restarted.Ctl({"gate"});
  INFO(after.err);
  REQUIRE(after.exit_code == 0);
  CHECK(absl::StartsWith(after.out, "gate: enabled, 95% of keys on the table (forced: enabled, "
                                    "load test)\n"));
  restarted.Replan();  // a decision while forced changes nothing
  CHECK(restarted.Status().gate().state() == "enabled");
  REQUIRE(restarted.Ctl({"gate", "--release"}).exit_code == 0);
  CHECK(restarted.Status().gate().forced_state().empty());

  Planner plain;  // no gate configured
  CheckError(plain.Ctl({"gate"}), 2, {"gate.enabled"});
  CheckError(plain.Ctl({"gate", "--force", "enabled"}), 2, {"gate.enabled"});
}

TEST_CASE("bad input exits 2 with one line naming the file, line or flag") {
  Planner planner;
  TempDir dir("cacheroutectl_online");
  CheckError(planner.Ctl({"push-rates", "--gateway", "gw", "--rates",
                          dir.Write("bad.csv", "key,rate\nalpha,abc\n")}),
             2, {"bad.csv", "line 2", "\"abc\" is not a number"});
  CheckError(planner.Ctl({"push-rates", "--gateway", "gw", "--rates",
                          dir.Write("header.csv", "name,qps\nalpha,1\n")}),
             2, {"header.csv", "'key,rate' or 'key,count'"});
  CheckError(planner.Ctl({"push-rates", "--gateway", "gw", "--rates", dir.File("missing.csv")}), 2,
             {"--rates", "missing.csv"});
  CheckError(planner.Ctl({"push-rates", "--gateway", "gw", "--rates", dir.Write("ok.csv", kRates),
                          "--window", "7200"}),
             2, {"--window", "7200"});
  CheckError(planner.Ctl({"show", "--version", "bogus"}), 2, {"--version", "\"bogus\""});
  CheckError(planner.Ctl({"--format", "xml", "status"}), 2, {"--format", "\"xml\""});
  CheckError(planner.Ctl({"no-such-command"}), 2, {});
  CHECK(planner.Status().keys_known() == 0);
}

TEST_CASE("an address nobody listens on exits 3 and names the address") {
  const std::string address = absl::StrCat("127.0.0.1:", cacheroute::testing::FreeLoopbackPort());

  CheckError(Run({"--planner", address, "status"}), 3, {address, "unavailable"});
  CheckError(Run({"--planner", address, "watch", "--count", "1"}), 3, {address});
  // The address may come from the environment too.
  CheckError(Run({"replan"}, {absl::StrCat("CACHEROUTE_PLANNER=", address)}), 3, {address});
}

TEST_CASE("several addresses: each call goes to the first that answers") {
  Planner planner;
  TempDir dir("cacheroutectl_online");
  const std::string dead = absl::StrCat("127.0.0.1:", cacheroute::testing::FreeLoopbackPort());
  const std::string both = absl::StrCat(dead, ",", planner.address());

  // Reads and writes (push-rates, replan) both reach the live replica behind the dead one.
  const Result push = Run({"--planner", both, "push-rates", "--gateway", "gw-1", "--rates",
                           dir.Write("rates.csv", kRates), "--sequence", "1"});
  INFO(push.err);
  CHECK(push.exit_code == 0);
  CHECK(planner.Status().keys_known() == 3);
  planner.Advance();
  const Result replan = Run({"--planner", both, "replan"});
  INFO(replan.err);
  CHECK(replan.exit_code == 0);
  // status names the replica that answered.
  const Result status = Run({"--planner", both, "status"});
  INFO(status.err);
  CHECK(status.exit_code == 0);
  CHECK(absl::StartsWith(status.out, absl::StrCat("Planner ", planner.address(), "\n")));
  // From the environment too, with blanks around the commas.
  const Result env =
      Run({"show"}, {absl::StrCat("CACHEROUTE_PLANNER=", dead, " , ", planner.address())});
  INFO(env.err);
  CHECK(env.exit_code == 0);
  // watch finds the live replica before opening its stream.
  const Result watch = Run({"--planner", both, "watch", "--count", "1"});
  INFO(watch.err);
  CHECK(watch.exit_code == 0);
  // A bad answer from the live replica is its error (exit 2), not a reason to try the next one.
  CheckError(Run({"--planner", both, "show", "--version", "1.999"}), 2, {"1.999", "not kept"});
}

TEST_CASE("several addresses nobody listens on: exit 3, naming every address") {
  const std::string a = absl::StrCat("127.0.0.1:", cacheroute::testing::FreeLoopbackPort());
  const std::string b = absl::StrCat("127.0.0.1:", cacheroute::testing::FreeLoopbackPort());
  CheckError(Run({"--planner", absl::StrCat(a, ",", b), "status"}), 3, {a, b, "unavailable"});
  CheckError(Run({"--planner", absl::StrCat(a, ",", b), "watch", "--count", "1"}), 3, {a, b});
  CheckError(Run({"--planner", absl::StrCat(a, ",,", b), "status"}), 2,
             {"--planner", absl::StrCat("\"", a, ",,", b, "\"")});
}

TEST_CASE("with a token configured, calls without it exit 4") {
  PlannerConfig config = TestConfig();
  config.token = "s3cret";
  Planner planner(config);
  TempDir dir("cacheroutectl_online");
  const std::string rates = dir.Write("rates.csv", kRates);
  CheckError(planner.Ctl({"replan"}), 4, {"refused Replan", "--token"});
  CheckError(planner.Ctl({"push-rates", "--gateway", "gw", "--rates", rates}), 4,
             {"refused ReportRates"});
  CheckError(planner.Ctl({"--token", "wrong", "replan"}), 4, {"check --token"});
  CHECK(planner.Ctl({"--token", "s3cret", "push-rates", "--gateway", "gw", "--rates", rates})
            .exit_code == 0);
  CHECK(planner.Ctl({"replan"}, {"CACHEROUTE_TOKEN=s3cret"}).exit_code == 0);
  // Reads stay open unless the planner requires the token for them.
  CHECK(planner.Ctl({"status"}).exit_code == 0);
}

}  // namespace
}  // namespace cacheroute::client
