// cacheroute-ha-bench: planner replicas on etcd (docs/ha.md), measured on loopback with real
// processes: a single-member etcd (/usr/bin/etcd, free ports, a temporary data directory) and
// cacheroute-planner processes, so that kill -9 is real.
//
//   1. Failover: --failovers times, 3 fresh replicas (a key prefix of their own on the one etcd);
//      once a leader has published, kill -9 it and time from the kill until etcd's `version` key
//      holds a greater version published by another replica (the new leader's first publish).
//      Prints the median and range, and each as a ratio to the lease TTL granted.
//   2. Fan-out: --streams TableService streams (table::TableClientState, ACKing as gateways do)
//      spread round-robin over 3 replicas (two of them followers, which serve what they watch in
//      etcd), and, in the same run, the same streams on one planner without etcd (today's
//      deployment, the baseline). --versions times: report new hot keys to the leader, Replan,
//      and time from the Replan call until every stream has applied the new version. Prints the
//      median and p99 per version of each, side by side, and their ratio; --runs repeats both
//      (alternating) and the summary is the median of the runs' medians.
//
// It checks the outcome (a new leader published a greater version every time; every stream
// applied every version) and exits 1 when it did not hold; 77 when etcd is missing.
//
//   cacheroute-ha-bench [--failovers 5] [--streams 200] [--versions 20] [--runs 3]
//       [--lease-ttl 2] [--quick] [--json]
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "cacheroute/v1/admin.grpc.pb.h"
#include "cacheroute/v1/rates.grpc.pb.h"
#include "cacheroute/v1/table.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "planner/coord/etcd_client.h"
#include "planner/key_id.h"
#include "tools/eval/bench/table_stream.h"
#include "tools/eval/child_process.h"
#include "tools/eval/main_helpers.h"
#include "tools/eval/planner_replica_client.h"

#ifndef CACHEROUTE_PLANNER_PATH
#define CACHEROUTE_PLANNER_PATH "cacheroute-planner"
#endif

namespace {

using Clock = std::chrono::steady_clock;
namespace v1 = cacheroute::v1;
namespace fs = std::filesystem;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Thrown, not exit(): unwinding runs the destructors that kill the child processes.
struct BenchError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
[[noreturn]] void Die(const std::string& message) { throw BenchError(message); }

int FreePort() {
  const int port = cacheroute::eval::FreeLoopbackPort();
  if (port == 0) Die("no free port");
  return port;
}

// A child process with stdout and stderr in `log`, tracked for
// cacheroute::eval::KillTrackedChildrenAndExit; killed (SIGKILL) by the destructor.
class Process {
 public:
  Process(std::vector<std::string> args, std::string log) : log_(std::move(log)) {
    absl::StatusOr<std::unique_ptr<cacheroute::eval::ChildProcess>> child =
        cacheroute::eval::ChildProcess::Spawn(std::move(args),
                                              {.stdout_path = log_, .stderr_path = log_});
    if (!child.ok()) Die(std::string(child.status().message()));
    child_ = *std::move(child);
    cacheroute::eval::TrackChild(child_->pid(), 0);
  }
  ~Process() { Kill(); }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  void Kill() {
    const pid_t pid = child_->pid();
    child_->Kill();
    if (pid > 0) cacheroute::eval::TrackChild(0, pid);
  }
  bool Exited() {
    const pid_t pid = child_->pid();
    if (!child_->Exited()) return false;
    if (pid > 0) cacheroute::eval::TrackChild(0, pid);
    return true;
  }
  // AwaitLogLine on this process's log.
  absl::StatusOr<std::string> AwaitLine(std::string_view marker,
                                        std::chrono::milliseconds timeout) {
    const pid_t pid = child_->pid();
    absl::StatusOr<std::string> line =
        cacheroute::eval::AwaitLogLine(*child_, log_, marker, timeout);
    if (pid > 0 && child_->pid() == 0)
      cacheroute::eval::TrackChild(0, pid);  // it exited and was reaped
    return line;
  }
  const std::string& log() const { return log_; }

 private:
  std::string log_;
  std::unique_ptr<cacheroute::eval::ChildProcess> child_;
};

// A single-member etcd, as tests/support/etcd_process.h starts it.
class Etcd {
 public:
  Etcd(const std::string& binary, const std::string& dir) : port_(FreePort()) {
    int peer = FreePort();
    while (peer == port_) peer = FreePort();
    const std::string client_url = absl::StrCat("http://127.0.0.1:", port_);
    const std::string peer_url = absl::StrCat("http://127.0.0.1:", peer);
    process_ = std::make_unique<Process>(
        std::vector<std::string>{binary, "--name=bench", "--data-dir=" + dir + "/etcd-data",
                                 "--listen-client-urls=" + client_url,
                                 "--advertise-client-urls=" + client_url,
                                 "--listen-peer-urls=" + peer_url,
                                 "--initial-advertise-peer-urls=" + peer_url,
                                 "--initial-cluster=bench=" + peer_url,
                                 "--initial-cluster-state=new", "--heartbeat-interval=25",
                                 "--election-timeout=250", "--log-level=warn", "--logger=zap",
                                 "--log-outputs=stderr"},
        dir + "/etcd.log");
    // A fresh client (so a fresh connection) per attempt: a connection etcd accepted while it
    // was still starting can stay stuck in its HTTP/2 handshake well past this loop's patience.
    const auto give_up = Clock::now() + std::chrono::seconds(30);
    absl::Status probe;
    while (true) {
      auto client = cacheroute::coord::EtcdClient::Create(
          {.endpoints = {endpoint()}, .call_timeout = absl::Milliseconds(500)});
      if (!client.ok()) Die(std::string(client.status().message()));
      if ((probe = (*client)->Get("probe").status()).ok()) break;
      if (process_->Exited() || Clock::now() > give_up) {
        Die(absl::StrCat("etcd did not start (", probe.ToString(), "):\n",
                         cacheroute::eval::ReadTextFile(process_->log())));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    auto client = cacheroute::coord::EtcdClient::Create({.endpoints = {endpoint()}});
    if (!client.ok()) Die(std::string(client.status().message()));
    client_ = *std::move(client);
  }
  std::string endpoint() const { return absl::StrCat("127.0.0.1:", port_); }
  cacheroute::coord::EtcdClient& client() { return *client_; }

 private:
  int port_;
  std::unique_ptr<Process> process_;
  std::unique_ptr<cacheroute::coord::EtcdClient> client_;
};

// The routing configuration shared by every planner of the bench: 30 destinations, no gate, no
// capacity bound, rates that follow the last report (so each Replan changes the routing), and a
// control interval long enough that only Replan and takeovers publish.
std::string PlannerYaml() {
  std::string yaml = "destinations: 30\nlisten: 127.0.0.1:0\nmetrics_listen: \"\"\n";
  absl::StrAppend(&yaml, "control_interval: 1h\nrate_smoothing: 1ms\nq_cap: 1000000000\n",
                  "slots_per_destination: 64\ngate:\n  enabled: false\n");
  return yaml;
}

bool WaitFor(const std::function<bool()>& condition, std::chrono::seconds timeout) {
  const auto give_up = Clock::now() + timeout;
  while (!condition()) {
    if (Clock::now() > give_up) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// One cacheroute-planner process; its port comes from its "started" log line.
class Planner : public cacheroute::eval::PlannerReplicaClient {
 public:
  // `etcd_endpoint` empty: a planner alone, without etcd.
  Planner(const std::string& binary, const std::string& dir, const std::string& id,
          const std::string& etcd_endpoint, const std::string& prefix, int lease_ttl)
      : id_(id) {
    const std::string config = absl::StrCat(dir, "/", id, ".yaml");
    std::string yaml = PlannerYaml();
    if (!etcd_endpoint.empty()) {
      absl::StrAppend(&yaml, "etcd:\n  endpoints: [", etcd_endpoint, "]\n  key_prefix: ", prefix,
                      "\n  lease_ttl_seconds: ", lease_ttl, "\n  replica_id: ", id, "\n");
    }
    std::ofstream(config) << yaml;
    process_ = std::make_unique<Process>(std::vector<std::string>{binary, "--config", config},
                                         absl::StrCat(dir, "/", id, ".log"));
  }
  // Waits for the "started" line.
  void AwaitStarted() {
    const absl::StatusOr<std::string> started =
        process_->AwaitLine(" started ", std::chrono::seconds(60));
    if (started.ok()) port_ = cacheroute::eval::LogNumber(*started, "port").value_or(0);
    if (port_ == 0) {
      Die(absl::StrCat("planner ", id_, " did not start: ",
                       started.ok() ? absl::StrCat("no port in: ", *started)
                                    : std::string(started.status().message())));
    }
    Connect(absl::StrCat("127.0.0.1:", port_));
  }
  void Kill() { process_->Kill(); }

  const std::string& id() const { return id_; }

  // Replan, or nullopt with the gRPC error in *error.
  std::optional<v1::ReplanResponse> TryReplan(std::string* error = nullptr) const {
    v1::ReplanResponse response;
    const grpc::Status status = Replan(&response);
    if (!status.ok()) {
      if (error != nullptr) *error = absl::StrCat(status.error_code(), " ", status.error_message());
      return std::nullopt;
    }
    return response;
  }
  // The first table: a Replan, retried for a while (a replica that has just been elected may
  // refuse one while it takes over).
  void FirstTable() const {
    std::string error;
    bool noted = false;
    const bool done = WaitFor(
        [&] {
          if (Version() > 0) return true;
          if (!TryReplan(&error) && !noted) {
            std::cerr << "cacheroute-ha-bench: note: " << id_ << " refused the first Replan ("
                      << error << "); retrying\n";
            noted = true;
          }
          return Version() > 0;
        },
        std::chrono::seconds(20));
    if (!done) Die(absl::StrCat("planner ", id_, ": no first table (Replan: ", error, ")"));
  }

 private:
  std::string id_;
  std::unique_ptr<Process> process_;
  int port_ = 0;
};

// Three replicas under one key prefix; waits until one leads, has published, and the others
// serve its version.
struct Replicas {
  Replicas(const std::string& binary, const std::string& dir, Etcd& etcd,
           const std::string& prefix, int lease_ttl, const std::string& tag) {
    for (int i = 0; i < 3; ++i) {
      all.push_back(std::make_unique<Planner>(binary, dir, absl::StrCat(tag, "-r", i),
                                              etcd.endpoint(), prefix, lease_ttl));
    }
    for (auto& p : all) p->AwaitStarted();
    if (!WaitFor([&] { return (leader = Leader()) != nullptr; }, std::chrono::seconds(30))) {
      Die("no replica led within 30 s");
    }
    // The control interval is long: the first table comes from a Replan.
    leader->FirstTable();
    const bool served = WaitFor(
        [&] {
          const uint64_t v = leader->Version();
          if (v == 0) return false;
          for (auto& p : all) {
            if (p->Version() != v) return false;
          }
          return true;
        },
        std::chrono::seconds(30));
    if (!served) Die("the replicas did not all serve the leader's version within 30 s");
  }
  Planner* Leader() const {
    Planner* found = nullptr;
    int leaders = 0;
    for (auto& p : all) {
      if (p.get() != dead && p->IsLeader()) {
        found = p.get();
        ++leaders;
      }
    }
    return leaders == 1 ? found : nullptr;
  }
  std::vector<std::unique_ptr<Planner>> all;
  Planner* leader = nullptr;
  Planner* dead = nullptr;
};

struct Published {
  uint64_t epoch = 0;
  uint64_t number = 0;
  std::string by;
};
std::optional<Published> ReadPublished(cacheroute::coord::EtcdClient& client,
                                        const std::string& prefix) {
  auto version = client.Get(prefix + "version");
  auto by = client.Get(prefix + "published_by");
  if (!version.ok() || !version->kv.has_value()) return std::nullopt;
  const std::string& v = version->kv->value;
  Published p;
  p.epoch = std::stoull(v.substr(0, v.find('.')));
  p.number = std::stoull(v.substr(v.find('.') + 1));
  if (by.ok() && by->kv.has_value()) p.by = by->kv->value;
  return p;
}

// The latest version each stream has applied; waits until all have one at or after a version.
class Applied {
 public:
  explicit Applied(int streams) : latest_(streams, 0) {}
  void Set(int stream, uint64_t version) {
    std::lock_guard<std::mutex> lock(mu_);
    latest_[stream] = std::max(latest_[stream], version);
    cv_.notify_all();
  }
  bool AwaitAll(uint64_t version, std::chrono::seconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] {
      for (uint64_t v : latest_) {
        if (v < version) return false;
      }
      return true;
    });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<uint64_t> latest_;
};

double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5));
  return v[i];
}
double Median(const std::vector<double>& v) { return Quantile(v, 0.5); }

struct FanoutRun {
  std::vector<double> seconds;  // per version: Replan -> every stream applied it
  std::vector<double> replan;   // per version: the Replan call alone (with etcd: its fenced txn)
  bool complete = false;        // every stream applied every version
};

// `streams` streams spread over `servers` (a few channels each), `versions` Replans through
// `leader` after reporting new hot keys to it.
FanoutRun MeasureFanout(const std::vector<Planner*>& servers, const Planner& leader, int streams,
                        int versions, const std::string& tag, uint64_t* sequence) {
  FanoutRun run;
  Applied applied(streams);
  std::vector<std::unique_ptr<v1::TableService::Stub>> stubs;
  for (size_t s = 0; s < servers.size(); ++s) {
    for (int c = 0; c < 2; ++c) {  // two connections per server, as gateways on a few hosts
      grpc::ChannelArguments args;
      args.SetInt("cacheroute.bench_channel", c);
      stubs.push_back(v1::TableService::NewStub(grpc::CreateCustomChannel(
          servers[s]->address(), grpc::InsecureChannelCredentials(), args)));
    }
  }
  std::vector<std::unique_ptr<cacheroute::bench::TableStream>> open;
  struct CloseAll {  // also when Die() throws: a reactor must be done before it is destroyed
    std::vector<std::unique_ptr<cacheroute::bench::TableStream>>& streams;
    ~CloseAll() {
      for (auto& s : streams) s->Cancel();
      for (auto& s : streams) s->AwaitDone();
    }
  } close_all{open};
  for (int s = 0; s < streams; ++s) {
    // Round-robin over servers first, then over each server's channels.
    const size_t server = s % servers.size();
    const size_t channel = (s / servers.size()) % 2;
    open.push_back(std::make_unique<cacheroute::bench::TableStream>(stubs[server * 2 + channel].get(),
                                            absl::StrFormat("%s-stream-%d", tag, s),
                                            [&applied, s](uint64_t v) { applied.Set(s, v); }));
  }
  run.complete = applied.AwaitAll(leader.Version(), std::chrono::seconds(30));
  for (int round = 0; round < versions && run.complete; ++round) {
    v1::ReportRatesRequest request;
    request.set_gateway_id(tag + "-shifter");
    request.set_sequence((*sequence)++);
    const int64_t now_ms = absl::ToUnixMillis(absl::Now());
    request.set_window_start_unix_ms(now_ms - 1000);
    request.set_window_end_unix_ms(now_ms);
    for (int k = 0; k < 64; ++k) {
      v1::KeyCount* kc = request.add_counts();
      kc->set_key_id(cacheroute::KeyId(absl::StrFormat("%s-shift-%d-%d", tag, round, k)));
      kc->set_count(1e9);
    }
    if (!leader.Report(request).ok()) Die("ReportRates to the leader failed");
    const auto start = Clock::now();
    std::optional<v1::ReplanResponse> result = leader.TryReplan();
    run.replan.push_back(SecondsSince(start));
    if (!result || !result->changed()) Die("a Replan published no new version");
    if (!applied.AwaitAll(result->version().number(), std::chrono::seconds(30))) {
      run.complete = false;
      break;
    }
    run.seconds.push_back(SecondsSince(start));
  }
  return run;
}

}  // namespace

int main(int argc, char** argv) {
  std::string planner_binary = CACHEROUTE_PLANNER_PATH;
  std::string etcd_binary = "/usr/bin/etcd";
  int failovers = 5;
  int streams = 200;
  int versions = 20;
  int runs = 3;
  int lease_ttl = 2;
  bool quick = false;
  bool json = false;
  CLI::App app{"Failover time and table fan-out of planner replicas on etcd."};
  app.add_option("--planner-binary", planner_binary, "cacheroute-planner to run");
  app.add_option("--etcd-binary", etcd_binary, "etcd to run");
  app.add_option("--failovers", failovers, "kill -9 repeats")->check(CLI::Range(0, 100));
  app.add_option("--streams", streams, "subscribed table streams")->check(CLI::Range(1, 5000));
  app.add_option("--versions", versions, "versions published per fan-out run")
      ->check(CLI::Range(1, 1000));
  app.add_option("--runs", runs, "fan-out runs (each: replicas, then the single planner)")
      ->check(CLI::Range(1, 100));
  app.add_option("--lease-ttl", lease_ttl, "lease_ttl_seconds of the replicas")
      ->check(CLI::Range(1, 60));
  app.add_flag("--quick", quick, "smoke run: 1 failover, 20 streams, 3 versions, 1 run");
  app.add_flag("--json", json, "print one JSON object");
  if (std::optional<int> code = cacheroute::eval::ParseCommandLine(app, argc, argv)) return *code;
  if (quick) {
    failovers = 1;
    streams = 20;
    versions = 3;
    runs = 1;
  }
  if (access(etcd_binary.c_str(), X_OK) != 0) {
    std::cerr << "cacheroute-ha-bench: " << etcd_binary
              << " is missing (Debian package etcd-server): skipped\n";
    return 77;
  }
  if (access(planner_binary.c_str(), X_OK) != 0) {
    std::cerr << "cacheroute-ha-bench: error: " << planner_binary << " is not executable\n";
    return 1;
  }
  std::signal(SIGPIPE, SIG_IGN);
  std::signal(SIGINT, cacheroute::eval::KillTrackedChildrenAndExit);
  std::signal(SIGTERM, cacheroute::eval::KillTrackedChildrenAndExit);

  char dir_template[] = "/tmp/cacheroute-ha-bench-XXXXXX";
  if (mkdtemp(dir_template) == nullptr) {
    std::cerr << "cacheroute-ha-bench: error: mkdtemp failed\n";
    return 1;
  }
  const std::string dir = dir_template;
  int status = 0;
  try {
    Etcd etcd(etcd_binary, dir);
    bool ok = true;

    // --- 1. Failover
    std::vector<double> failover;
    for (int i = 0; i < failovers; ++i) {
      const std::string prefix = absl::StrFormat("/cacheroute/bench/failover-%d/", i);
      Replicas replicas(planner_binary, dir, etcd, prefix, lease_ttl, absl::StrCat("f", i));
      const std::optional<Published> before = ReadPublished(etcd.client(), prefix);
      if (!before) Die("etcd holds no version after the first publish");
      Planner* leader = replicas.leader;
      leader->Kill();
      const auto killed = Clock::now();
      replicas.dead = leader;
      std::optional<Published> after;
      const bool took_over = WaitFor(
          [&] {
            after = ReadPublished(etcd.client(), prefix);
            return after && after->number > before->number && after->by != leader->id();
          },
          std::chrono::seconds(30 + 3 * lease_ttl));
      const double seconds = SecondsSince(killed);
      const bool greater = took_over && after->epoch == before->epoch;
      if (!json) {
        std::cout << absl::StrFormat(
            "failover %d: leader %s killed at version %d.%d; %s published %d.%d %.3f s later%s\n",
            i + 1, leader->id(), before->epoch, before->number,
            took_over ? after->by : std::string("nobody"), after ? after->epoch : 0,
            after ? after->number : 0, seconds, greater ? "" : "  (FAILED)");
      }
      if (!greater) {
        ok = false;
        continue;
      }
      failover.push_back(seconds);
    }

    // --- 2. Fan-out
    // The failover runs' replicas were killed with their leases alive: let etcd expire them (and
    // their leader keys) first, which otherwise slowed the first fan-out run about twofold.
    if (failovers > 0) std::this_thread::sleep_for(std::chrono::seconds(2 * lease_ttl + 1));
    std::vector<double> ha_medians, single_medians, ha_p99s, single_p99s, ratios, p99_ratios;
    std::vector<double> ha_replan, single_replan;  // medians of the Replan call, per run
    uint64_t sequence = 1;
    for (int r = 0; r < runs; ++r) {
      {
        const std::string prefix = absl::StrFormat("/cacheroute/bench/fanout-%d/", r);
        Replicas replicas(planner_binary, dir, etcd, prefix, lease_ttl, absl::StrCat("h", r));
        std::vector<Planner*> servers;
        for (auto& p : replicas.all) servers.push_back(p.get());
        FanoutRun ha = MeasureFanout(servers, *replicas.leader, streams, versions,
                                     absl::StrCat("ha", r), &sequence);
        if (!ha.complete) {
          std::cerr << "cacheroute-ha-bench: replicas: not every stream applied every version\n";
          ok = false;
        }
        ha_medians.push_back(Median(ha.seconds));
        ha_replan.push_back(Median(ha.replan));
        ha_p99s.push_back(Quantile(ha.seconds, 0.99));
      }
      {
        Planner single(planner_binary, dir, absl::StrCat("s", r), "", "", lease_ttl);
        single.AwaitStarted();
        single.FirstTable();
        FanoutRun one =
            MeasureFanout({&single}, single, streams, versions, absl::StrCat("one", r), &sequence);
        if (!one.complete) {
          std::cerr << "cacheroute-ha-bench: single planner: not every stream applied every "
                       "version\n";
          ok = false;
        }
        single_medians.push_back(Median(one.seconds));
        single_replan.push_back(Median(one.replan));
        single_p99s.push_back(Quantile(one.seconds, 0.99));
      }
      ratios.push_back(single_medians.back() > 0 ? ha_medians.back() / single_medians.back() : 0);
      p99_ratios.push_back(single_p99s.back() > 0 ? ha_p99s.back() / single_p99s.back() : 0);
      if (!json) {
        std::cout << absl::StrFormat(
            "fan-out run %d: %d streams, %d versions: 3 replicas median %.1f ms p99 %.1f ms "
            "(Replan call %.1f ms); single planner median %.1f ms p99 %.1f ms (Replan call "
            "%.1f ms); ratio %.2f\n",
            r + 1, streams, versions, ha_medians.back() * 1e3, ha_p99s.back() * 1e3,
            ha_replan.back() * 1e3, single_medians.back() * 1e3, single_p99s.back() * 1e3,
            single_replan.back() * 1e3, ratios.back());
      }
    }

    const double f_median = Median(failover);
    const double f_min = failover.empty() ? 0 : *std::min_element(failover.begin(), failover.end());
    const double f_max = failover.empty() ? 0 : *std::max_element(failover.begin(), failover.end());
    const double ha_m = Median(ha_medians), one_m = Median(single_medians);
    const double ha_p = Median(ha_p99s), one_p = Median(single_p99s);
    // The ratio of each run (both sides measured in it), then the median over runs.
    const double ratio = Median(ratios);
    const double ratio_p99 = Median(p99_ratios);
    if (json) {
      std::cout << absl::StrFormat(
          "{\"lease_ttl_seconds\": %d, \"failovers\": %d, \"failovers_ok\": %d, "
          "\"failover_median_seconds\": %.4f, \"failover_min_seconds\": %.4f, "
          "\"failover_max_seconds\": %.4f, \"failover_median_over_ttl\": %.3f, "
          "\"streams\": %d, \"versions\": %d, \"runs\": %d, "
          "\"fanout_replicas_median_seconds\": %.6f, \"fanout_replicas_p99_seconds\": %.6f, "
          "\"fanout_single_median_seconds\": %.6f, \"fanout_single_p99_seconds\": %.6f, "
          "\"replan_replicas_median_seconds\": %.6f, \"replan_single_median_seconds\": %.6f, "
          "\"fanout_median_ratio\": %.3f, \"fanout_p99_ratio\": %.3f, \"ok\": %s}\n",
          lease_ttl, failovers, failover.size(), f_median, f_min, f_max,
          f_median / lease_ttl, streams, versions, runs, ha_m, ha_p, one_m, one_p,
          Median(ha_replan), Median(single_replan), ratio, ratio_p99, ok ? "true" : "false");
    } else {
      std::cout << absl::StrFormat(
          "\nfailover (lease TTL %d s, %d of %d took over): kill -9 -> new leader's first "
          "version median %.3f s (%.2f x TTL), range %.3f-%.3f s (%.2f-%.2f x TTL)\n"
          "fan-out (%d streams, %d versions x %d runs; per version Replan -> every stream applied "
          "it; medians of the runs):\n"
          "  3 replicas (2/3 of streams on followers)  median %.1f ms  p99 %.1f ms  (Replan call "
          "%.1f ms)\n"
          "  1 planner, no etcd (baseline)             median %.1f ms  p99 %.1f ms  (Replan call "
          "%.1f ms)\n"
          "  ratio replicas / baseline (median of the runs' ratios)  median %.2f  p99 %.2f\n",
          lease_ttl, failover.size(), failovers, f_median, f_median / lease_ttl, f_min, f_max,
          f_min / lease_ttl, f_max / lease_ttl, streams, versions, runs, ha_m * 1e3, ha_p * 1e3,
          Median(ha_replan) * 1e3, one_m * 1e3, one_p * 1e3, Median(single_replan) * 1e3, ratio,
          ratio_p99);
      std::cout << (ok ? "outcome: ok (every failover published a greater version; every stream "
                         "applied every version)\n"
                       : "outcome: FAILED\n");
    }
    status = ok ? 0 : 1;
  } catch (const BenchError& e) {
    std::cerr << "cacheroute-ha-bench: error: " << e.what() << "\n";
    status = 1;
  }
  std::error_code ignored;
  fs::remove_all(dir, ignored);
  return status;
}
