// cacheroute-faults: the faults of issue 34 as one repeatable program, so that a regression shows
// as a number. It starts real processes on loopback — a cacheroute-planner (table_ttl_seconds 5,
// a state directory), three cacheroute-engine-emu engines (real time) and a cacheroute-gateway
// (policy cacheroute, table_ttl 5 s, active health checks every second, an API key) — and runs,
// one after the other on that fleet:
//
//   engine-kill     kill -9 of an engine under streaming load, then the engine restarted
//   engine-hang     SIGSTOP of an engine under streaming load (health checks on), then SIGCONT
//   planner-outage  kill -9 of the planner for --outage seconds (beyond the table TTL; 40, 45
//                   and 50 by default, one run each), then the planner restarted on its port and
//                   state: when the gateway's table stream is back, and picks by reason before,
//                   during and after
//   slow-clients    (from the start, beside the others) a client sending one header line every
//                   5 s, and one sending its body a byte every 5 s: when each is cut
//   refusals        401, 400, 431 and 405 provoked with no load running: is each counted in
//                   /metrics, and does 405 carry Allow
//   drain           SIGTERM to the gateway with streams open: none may be cut
//
// It prints what was lost (failed and cut requests, fallback picks, times to detect and recover)
// as a table, or with --json as JSON, and exits 1 when a figure misses its bound:
//   stream_back_s ≤ 6 (after each outage), slow-clients.header_cut_s ≤ 70,
//   drain.streams_cut = 0, and the checks gateway_stream_log (the gateway logs the stream's loss
//   and recovery once each), refusals_counted and allow_header.
// --allow-fail NAME[,NAME] reports a check but keeps it out of the exit status (for a run against
// older binaries; the table says "allowed"). --quick scales the durations down (about 65 s
// in all, the slow clients setting the pace; one 15 s outage) for CI; the full form takes about
// 4 minutes. Exit 2: bad arguments; 1: a bound missed or the fleet did not start. Logs of every
// process are in --dir (a fresh temporary directory by default, removed after a passing run
// unless --keep). Results and how to read them: docs/faults.md.
//
//   cacheroute-faults [--quick] [--json] [--outage 40,45,50] [--only SCENARIO,…] [--dir DIR]
//       [--keep] [--allow-fail CHECK,…]
//       [--planner-binary P] [--gateway-binary G] [--engine-binary E]
#include <httplib.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "tools/eval/child_process.h"
#include "tools/eval/main_helpers.h"

#ifndef CACHEROUTE_PLANNER_PATH
#define CACHEROUTE_PLANNER_PATH "cacheroute-planner"
#endif
#ifndef CACHEROUTE_GATEWAY_PATH
#define CACHEROUTE_GATEWAY_PATH "cacheroute-gateway"
#endif
#ifndef CACHEROUTE_ENGINE_EMU_PATH
#define CACHEROUTE_ENGINE_EMU_PATH "cacheroute-engine-emu"
#endif

namespace cacheroute::eval::faults {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using std::chrono::seconds;
namespace fs = std::filesystem;

constexpr Program kProgram{"cacheroute-faults"};
constexpr int kEngines = 3;
constexpr const char* kApiKey = "faults-key";

double Since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}
double Between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Thrown, not exit(): unwinding runs the destructors that kill the child processes.
struct FaultsError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
[[noreturn]] void Die(const std::string& message) { throw FaultsError(message); }

// One child process, output in `log` (appended to across restarts), tracked for SIGINT.
class Process {
 public:
  Process(std::vector<std::string> args, std::string log) : log_(std::move(log)) {
    absl::StatusOr<std::unique_ptr<ChildProcess>> child =
        ChildProcess::Spawn(std::move(args), {.stdout_path = log_, .stderr_path = log_});
    if (!child.ok()) Die(std::string(child.status().message()));
    child_ = *std::move(child);
    TrackChild(child_->pid(), 0);
  }
  ~Process() { Kill(); }
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  void Kill() { Stop(SIGKILL, milliseconds(0)); }
  bool Signal(int signal) { return child_->Signal(signal); }
  // `signal` (0: none), then up to `grace` for the exit (then SIGKILL): the waitpid status.
  int Stop(int signal, milliseconds grace) {
    const pid_t pid = child_->pid();
    const int status = signal == SIGKILL ? (child_->Kill(), 0) : child_->Stop(signal, grace);
    if (pid > 0) TrackChild(0, pid);
    return status;
  }
  // The port of its "started" line (the first such line after `skip` bytes of the log).
  int AwaitPort(size_t skip = 0) {
    const auto give_up = Clock::now() + seconds(60);
    for (;;) {
      const std::string log = ReadTextFile(log_);
      for (size_t begin = std::min(skip, log.size()), end;
           (end = log.find('\n', begin)) != std::string::npos; begin = end + 1) {
        const std::string_view line(log.data() + begin, end - begin);
        if (line.find("started") == std::string_view::npos) continue;
        if (std::optional<int> port = LogNumber(line, "port"); port && *port > 0) return *port;
      }
      if (child_->Exited() || Clock::now() > give_up) {
        Die(absl::StrCat(log_, ": the process did not start; log:\n", log));
      }
      std::this_thread::sleep_for(milliseconds(20));
    }
  }
  const std::string& log() const { return log_; }

 private:
  std::string log_;
  std::unique_ptr<ChildProcess> child_;
};

size_t FileSize(const std::string& path) {
  std::error_code ec;
  const auto size = fs::file_size(path, ec);
  return ec ? 0 : static_cast<size_t>(size);
}

// ---- /metrics

// The samples of a Prometheus text page: "name{labels}" → value.
struct Metrics {
  std::map<std::string, double> samples;
  std::set<std::string> counters;  // names declared `# TYPE … counter`

  // Σ of the samples of `name` whose labels contain every `label="value"` given.
  double Sum(const std::string& name, const std::vector<std::string>& labels = {}) const {
    double sum = 0;
    for (auto it = samples.lower_bound(name); it != samples.end(); ++it) {
      const std::string& key = it->first;
      if (key.compare(0, name.size(), name) != 0) break;
      if (key.size() > name.size() && key[name.size()] != '{') continue;
      bool all = true;
      for (const std::string& l : labels) all = all && key.find(l) != std::string::npos;
      if (all) sum += it->second;
    }
    return sum;
  }
  // reason → count of picks_total.
  std::map<std::string, double> Picks() const {
    std::map<std::string, double> out;
    static const std::regex reason("reason=\"([a-z_]+)\"");
    const std::string name = "cacheroute_gateway_picks_total{";
    for (auto it = samples.lower_bound(name); it != samples.end(); ++it) {
      if (it->first.compare(0, name.size(), name) != 0) break;
      std::smatch m;
      if (std::regex_search(it->first, m, reason)) out[m[1]] += it->second;
    }
    return out;
  }
};

std::optional<Metrics> ReadMetrics(int port) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(1, 0);
  client.set_read_timeout(2, 0);
  httplib::Result r = client.Get("/metrics");
  if (!r || r->status != 200) return std::nullopt;
  Metrics m;
  std::istringstream in(r->body);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("# TYPE ", 0) == 0) {
      std::vector<std::string> parts = absl::StrSplit(line, ' ');
      if (parts.size() == 4 && parts[3] == "counter") m.counters.insert(parts[2]);
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    m.samples[line.substr(0, space)] = std::strtod(line.c_str() + space + 1, nullptr);
  }
  return m;
}

std::string FormatPicks(const std::map<std::string, double>& after,
                        const std::map<std::string, double>& before) {
  std::vector<std::string> parts;
  for (const auto& [reason, n] : after) {
    const auto b = before.find(reason);
    const double d = n - (b == before.end() ? 0 : b->second);
    if (d > 0) parts.push_back(absl::StrCat(reason, "=", static_cast<int64_t>(d)));
  }
  return parts.empty() ? "none" : absl::StrJoin(parts, " ");
}

// ---- the report

struct Figure {
  std::string scenario;
  std::string name;
  std::string value;             // as printed
  double number = std::nan("");  // for --json (NaN: none)
  std::string bound;             // "" when it has none
  bool pass = true;
  bool allowed = false;  // a missed bound --allow-fail keeps out of the exit status
};

class Report {
 public:
  explicit Report(std::set<std::string> allow_fail) : allow_fail_(std::move(allow_fail)) {}
  void Value(const std::string& scenario, const std::string& name, double v, int decimals = 2) {
    figures_.push_back({scenario, name, absl::StrFormat("%.*f", decimals, v), v, "", true, false});
  }
  void Text(const std::string& scenario, const std::string& name, const std::string& text) {
    figures_.push_back({scenario, name, text, std::nan(""), "", true, false});
  }
  // A figure with a bound: `pass` says whether it is met.
  void Bound(const std::string& scenario, const std::string& name, double v, bool pass,
             const std::string& bound, int decimals = 2) {
    figures_.push_back({scenario, name,
                        std::isnan(v) ? "none" : absl::StrFormat("%.*f", decimals, v), v, bound,
                        pass, !pass && allow_fail_.count(name) > 0});
  }
  // A yes/no check (its name is what --allow-fail takes).
  void Check(const std::string& scenario, const std::string& name, bool pass,
             const std::string& detail) {
    figures_.push_back({scenario, name, detail, pass ? 1.0 : 0.0, "yes", pass,
                        !pass && allow_fail_.count(name) > 0});
  }
  bool Passed() const {
    for (const Figure& f : figures_) {
      if (!f.pass && !f.allowed) return false;
    }
    return true;
  }
  void PrintTable(std::ostream& out) const {
    out << absl::StrFormat("%-15s %-28s %-44s %-9s %s\n", "scenario", "figure", "value", "bound",
                           "");
    for (const Figure& f : figures_) {
      const std::string verdict = f.bound.empty() ? ""
                                  : f.pass        ? "ok"
                                  : f.allowed     ? "MISSED (allowed)"
                                                  : "MISSED";
      out << absl::StrFormat("%-15s %-28s %-44s %-9s %s\n", f.scenario, f.name, f.value, f.bound,
                             verdict);
    }
    out << (Passed() ? "all bounds met\n" : "a bound was missed\n");
  }
  void PrintJson(std::ostream& out) const {
    const auto quote = [](const std::string& s) {
      std::string q = "\"";
      for (char c : s) {
        if (c == '"' || c == '\\') q += '\\';
        if (c == '\n') {
          q += "\\n";
          continue;
        }
        q += c;
      }
      return q + "\"";
    };
    out << "{\"passed\":" << (Passed() ? "true" : "false") << ",\"figures\":[";
    for (size_t i = 0; i < figures_.size(); ++i) {
      const Figure& f = figures_[i];
      out << (i ? "," : "") << "{\"scenario\":" << quote(f.scenario)
          << ",\"name\":" << quote(f.name) << ",\"value\":"
          << (std::isnan(f.number) ? quote(f.value) : absl::StrFormat("%.6g", f.number))
          << ",\"bound\":" << (f.bound.empty() ? "null" : quote(f.bound))
          << ",\"pass\":" << (f.pass ? "true" : "false")
          << ",\"allowed\":" << (f.allowed ? "true" : "false") << "}";
    }
    out << "]}\n";
  }

 private:
  std::set<std::string> allow_fail_;
  std::vector<Figure> figures_;
};

// ---- the fleet

struct Binaries {
  std::string planner = CACHEROUTE_PLANNER_PATH;
  std::string gateway = CACHEROUTE_GATEWAY_PATH;
  std::string engine = CACHEROUTE_ENGINE_EMU_PATH;
};

class Fleet {
 public:
  Fleet(Binaries binaries, std::string dir) : bin_(std::move(binaries)), dir_(std::move(dir)) {
    // Fixed ports, so that a restarted planner or engine is where the gateway expects it.
    planner_port_ = FreeLoopbackPort();
    for (int i = 0; i < kEngines; ++i) engine_ports_.push_back(FreeLoopbackPort());
    if (planner_port_ == 0 || std::count(engine_ports_.begin(), engine_ports_.end(), 0) > 0) {
      Die("no free port");
    }
    engines_.resize(kEngines);
    std::vector<std::string> names;
    for (int i = 0; i < kEngines; ++i) names.push_back(absl::StrCat("engine-", i));
    std::ofstream(dir_ + "/planner.yaml")
        << "destinations: [" << absl::StrJoin(names, ", ")
        << "]\nlisten: 127.0.0.1:" << planner_port_ << "\nmetrics_listen: \"\"\nstate_dir: " << dir_
        << "/planner-state\ncontrol_interval: 1s\ntable_ttl_seconds: 5\nq_cap: 6\n"
        << "slots_per_destination: 64\ngate:\n  enabled: false\n";
    std::ofstream(dir_ + "/api-keys") << kApiKey << "\n";
  }

  void StartPlanner() {
    const size_t skip = FileSize(dir_ + "/planner.log");
    planner_ = std::make_unique<Process>(
        std::vector<std::string>{bin_.planner, "--config", dir_ + "/planner.yaml"},
        dir_ + "/planner.log");
    planner_->AwaitPort(skip);
  }
  void KillPlanner() { planner_->Kill(); }

  void StartEngine(int i) {
    const std::string log = absl::StrCat(dir_, "/engine-", i, ".log");
    const size_t skip = FileSize(log);
    engines_[i] = std::make_unique<Process>(
        std::vector<std::string>{bin_.engine, "--port", absl::StrCat(engine_ports_[i]), "--profile",
                                 "llama-70b-fp8-tp2-h100", "--kv-blocks", "3000", "--engine-label",
                                 absl::StrCat(i), "--io-threads", "1"},
        log);
    engines_[i]->AwaitPort(skip);
  }
  Process& engine(int i) { return *engines_[i]; }

  void StartGateway() {
    std::ostringstream yaml;
    yaml << "listen: 127.0.0.1:0\npolicy: cacheroute\nplanner: 127.0.0.1:" << planner_port_
         << "\ngateway_id: faults\nreport_interval: 1s\ntable_ttl: 5s\n"
         << "health_check_interval: 1s\nhealth_check_timeout: 1s\nfailure_threshold: 2\n"
         << "probe_interval: 1s\nheader_timeout: 10s\nread_timeout: 10s\ndrain_timeout: 30s\n"
         << "io_threads: 1\napi_key_file: " << dir_ << "/api-keys\nupstreams:\n";
    for (int i = 0; i < kEngines; ++i) {
      yaml << "  - {name: engine-" << i << ", url: \"http://127.0.0.1:" << engine_ports_[i]
           << "\"}\n";
    }
    std::ofstream(dir_ + "/gateway.yaml") << yaml.str();
    gateway_ = std::make_unique<Process>(
        std::vector<std::string>{bin_.gateway, "--config", dir_ + "/gateway.yaml"},
        dir_ + "/gateway.log");
    gateway_port_ = gateway_->AwaitPort();
  }
  Process& gateway() { return *gateway_; }
  int gateway_port() const { return gateway_port_; }

  std::optional<Metrics> GatewayMetrics() const { return ReadMetrics(gateway_port_); }
  double GatewayValue(const std::string& name, const std::vector<std::string>& labels = {}) const {
    std::optional<Metrics> m = GatewayMetrics();
    return m ? m->Sum("cacheroute_gateway_" + name, labels) : std::nan("");
  }

 private:
  Binaries bin_;
  std::string dir_;
  int planner_port_ = 0;
  std::vector<int> engine_ports_;
  int gateway_port_ = 0;
  std::unique_ptr<Process> planner_;
  std::vector<std::unique_ptr<Process>> engines_;
  std::unique_ptr<Process> gateway_;
};

// ---- client load

enum class Outcome { kOk, kHttpError, kErrorEvent, kCut, kConnect, kTimeout };

const char* OutcomeName(Outcome o) {
  switch (o) {
    case Outcome::kOk:
      return "ok";
    case Outcome::kHttpError:
      return "http_error";
    case Outcome::kErrorEvent:
      return "error_event";
    case Outcome::kCut:
      return "cut";
    case Outcome::kConnect:
      return "connect";
    case Outcome::kTimeout:
      return "timeout";
  }
  return "?";
}

struct Done {
  Clock::time_point start, end;
  Outcome outcome = Outcome::kOk;
  int status = 0;
  std::string destination;
};

// One streamed chat completion through the gateway: a system prompt per key (the gateway's
// `system` key), `max_tokens` tokens.
Done StreamOnce(int port, int key, int max_tokens, int timeout_s) {
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(2, 0);
  client.set_read_timeout(timeout_s, 0);
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/chat/completions";
  req.headers = {{"Content-Type", "application/json"},
                 {"Authorization", absl::StrCat("Bearer ", kApiKey)}};
  req.body = absl::StrCat(
      R"({"model":"cacheroute-emu","stream":true,"max_tokens":)", max_tokens,
      R"(,"messages":[{"role":"system","content":"You are the assistant of tenant )", key,
      R"(. Answer briefly and politely."},{"role":"user","content":"Hello again."}]})");
  std::string body;
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    body.append(data, n);
    return true;
  };
  Done d;
  d.start = Clock::now();
  d.outcome = Outcome::kOk;
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  const bool sent = client.send(req, res, error);
  d.end = Clock::now();
  if (!sent) {
    d.outcome = error == httplib::Error::Connection           ? Outcome::kConnect
                : Between(d.start, d.end) >= timeout_s * 0.99 ? Outcome::kTimeout
                                                              : Outcome::kCut;
    return d;
  }
  d.status = res.status;
  d.destination = res.get_header_value("X-CacheRoute-Destination");
  if (res.status != 200) {
    d.outcome = Outcome::kHttpError;
  } else if (body.find("\"error\"") != std::string::npos) {
    d.outcome = Outcome::kErrorEvent;
  } else if (body.size() < 14 || body.compare(body.size() - 14, 14, "data: [DONE]\n\n") != 0) {
    d.outcome = Outcome::kCut;
  }
  return d;
}

// Closed-loop streaming load: `clients` threads, each sending one stream after another over 12
// keys until Stop.
class Load {
 public:
  Load(int port, int clients, int max_tokens) {
    for (int c = 0; c < clients; ++c) {
      threads_.emplace_back([this, port, c, max_tokens] {
        for (int i = 0; !stop_.load(); ++i) {
          Done d = StreamOnce(port, (c * 7 + i) % 12, max_tokens, 15);
          std::lock_guard<std::mutex> lock(mu_);
          done_.push_back(std::move(d));
        }
      });
    }
  }
  ~Load() { Stop(); }
  void Stop() {
    stop_ = true;
    for (std::thread& t : threads_) {
      if (t.joinable()) t.join();
    }
  }
  std::vector<Done> done() const {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }

 private:
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::vector<Done> done_;
  std::vector<std::thread> threads_;
};

// What a load lost: requests that ended after `from`, by outcome.
struct Losses {
  int total = 0, failed = 0;
  std::map<std::string, int> by_outcome;
  double last_failure_s = std::nan("");  // after `from`
};
Losses Count(const std::vector<Done>& done, Clock::time_point from) {
  Losses l;
  for (const Done& d : done) {
    if (d.end < from) continue;
    ++l.total;
    if (d.outcome == Outcome::kOk) continue;
    ++l.failed;
    ++l.by_outcome[OutcomeName(d.outcome)];
    const double at = Between(from, d.end);
    if (std::isnan(l.last_failure_s) || at > l.last_failure_s) l.last_failure_s = at;
  }
  return l;
}
std::string Describe(const Losses& l) {
  std::vector<std::string> kinds;
  for (const auto& [k, n] : l.by_outcome) kinds.push_back(absl::StrCat(k, "=", n));
  return absl::StrCat(l.failed, " of ", l.total,
                      kinds.empty() ? "" : absl::StrCat(" (", absl::StrJoin(kinds, " "), ")"));
}

// Polls the gateway's /metrics every 100 ms until `condition` holds on a page: seconds from
// `from`, NaN after `timeout`.
double TimeUntil(const Fleet& fleet, Clock::time_point from, seconds timeout,
                 const std::function<bool(const Metrics&)>& condition) {
  const auto give_up = Clock::now() + timeout;
  while (Clock::now() < give_up) {
    std::optional<Metrics> m = fleet.GatewayMetrics();
    if (m && condition(*m)) return Since(from);
    std::this_thread::sleep_for(milliseconds(100));
  }
  return std::nan("");
}

// ---- slow clients

// A raw connection to the gateway that sends `head` at once, then one `drip` every `interval`
// until the gateway closes the connection (or answers) or `cap` passes (or `stop`): seconds until
// then, NaN when never.
double Drip(int port, const std::string& head, const std::function<std::string(int)>& drip,
            milliseconds interval, seconds cap, std::stop_token stop) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const auto start = Clock::now();
  double cut = std::nan("");
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0 &&
      send(fd, head.data(), head.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(head.size())) {
    for (int i = 0; Clock::now() - start < cap && !stop.stop_requested(); ++i) {
      pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
      if (poll(&p, 1, static_cast<int>(interval.count())) > 0) {  // closed, or an answer
        cut = Since(start);
        break;
      }
      const std::string bytes = drip(i);
      if (send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL) < 0) {
        cut = Since(start);
        break;
      }
    }
  }
  close(fd);
  return cut;
}

// ---- scenarios

constexpr const char* kScenarios[] = {"engine-kill",  "engine-hang", "planner-outage",
                                      "slow-clients", "refusals",    "drain"};

struct Settings {
  bool quick = false;
  std::vector<double> outages = {40, 45, 50};  // planner-outage, once per entry (seconds)
  std::string dir;
  Binaries binaries;
  std::set<std::string> only;  // empty: every scenario
  bool Runs(const std::string& scenario) const { return only.empty() || only.count(scenario) > 0; }
};

// An engine fault under streaming load (6 clients): `inject` once the load runs, `recover` some
// seconds later. What was lost from the fault on, when the gateway marked the engine down, and
// how soon after the recovery it was up again.
void EngineFault(Fleet& fleet, Report& report, const Settings& s, const std::string& name,
                 int engine, const std::function<void()>& inject,
                 const std::function<void()>& recover) {
  const std::string label = absl::StrCat("destination=\"engine-", engine, "\"");
  const auto up_is = [&](double value) {
    return [label, value](const Metrics& m) {
      return m.Sum("cacheroute_gateway_destination_up", {label}) == value;
    };
  };
  Load load(fleet.gateway_port(), 6, 120);
  std::this_thread::sleep_for(seconds(s.quick ? 2 : 4));
  const auto fault = Clock::now();
  inject();
  const double down = TimeUntil(fleet, fault, seconds(20), up_is(0));
  std::this_thread::sleep_for(seconds(s.quick ? 5 : 10));
  const auto recovered = Clock::now();
  recover();
  const double up = TimeUntil(fleet, recovered, seconds(30), up_is(1));
  std::this_thread::sleep_for(seconds(2));
  load.Stop();
  const Losses lost = Count(load.done(), fault);
  report.Text(name, "requests_failed", Describe(lost));
  report.Value(name, "last_failure_after_fault_s", lost.last_failure_s);
  report.Value(name, "marked_down_after_fault_s", down);
  report.Value(name, "up_after_recovery_s", up);
}

void EngineKill(Fleet& fleet, Report& report, const Settings& s) {
  EngineFault(
      fleet, report, s, "engine-kill", 0, [&] { fleet.engine(0).Kill(); },
      [&] { fleet.StartEngine(0); });
}

void EngineHang(Fleet& fleet, Report& report, const Settings& s) {
  EngineFault(
      fleet, report, s, "engine-hang", 1, [&] { fleet.engine(1).Signal(SIGSTOP); },
      [&] { fleet.engine(1).Signal(SIGCONT); });
}

// Lines of `log` after byte `skip` that match `pattern` (case-insensitive).
int CountLines(const std::string& log, size_t skip, const std::string& pattern) {
  const std::string text = ReadTextFile(log);
  const std::regex re(pattern, std::regex::icase);
  int n = 0;
  std::istringstream in(text.substr(std::min(skip, text.size())));
  for (std::string line; std::getline(in, line);) n += std::regex_search(line, re) ? 1 : 0;
  return n;
}

void PlannerOutage(Fleet& fleet, Report& report, const Settings& s, double outage_s) {
  const std::string name = absl::StrCat("outage ", outage_s, "s");
  Load load(fleet.gateway_port(), 4, 40);
  const auto connected = [](const Metrics& m) {
    return m.Sum("cacheroute_gateway_planner_connected") == 1;
  };
  if (std::isnan(TimeUntil(fleet, Clock::now(), seconds(30), [&](const Metrics& m) {
        return connected(m) && m.Picks()["planned"] > 0;
      }))) {
    Die("planner-outage: the gateway never routed by a table");
  }
  const std::optional<Metrics> start = fleet.GatewayMetrics();
  std::this_thread::sleep_for(seconds(3));
  const std::optional<Metrics> before = fleet.GatewayMetrics();
  const size_t log_mark = FileSize(fleet.gateway().log());
  const auto killed = Clock::now();
  fleet.KillPlanner();
  const double lost =
      TimeUntil(fleet, killed, seconds(20), [&](const Metrics& m) { return !connected(m); });
  std::this_thread::sleep_for(
      std::chrono::duration_cast<milliseconds>(std::chrono::duration<double>(outage_s)) -
      std::chrono::duration_cast<milliseconds>(Clock::now() - killed));
  const std::optional<Metrics> during = fleet.GatewayMetrics();
  const double reports_before = during ? during->Sum("cacheroute_gateway_rate_reports_total") : 0;
  fleet.StartPlanner();  // same port and state directory
  const auto restarted = Clock::now();
  double reports_back = std::nan("");
  const double back =
      TimeUntil(fleet, restarted, seconds(s.quick ? 60 : 150), [&](const Metrics& m) {
        if (std::isnan(reports_back) &&
            m.Sum("cacheroute_gateway_rate_reports_total") > reports_before) {
          reports_back = Since(restarted);
        }
        return connected(m);
      });
  if (std::isnan(reports_back)) {
    reports_back = TimeUntil(fleet, restarted, seconds(20), [&](const Metrics& m) {
      return m.Sum("cacheroute_gateway_rate_reports_total") > reports_before;
    });
  }
  std::this_thread::sleep_for(seconds(3));
  const std::optional<Metrics> after = fleet.GatewayMetrics();
  load.Stop();
  // Log lines about the stream after the kill: one for the loss, one for the recovery.
  std::this_thread::sleep_for(milliseconds(200));
  const int lost_lines =
      CountLines(fleet.gateway().log(), log_mark, "table.?stream.*(lost|down|ended|broken)");
  const int back_lines = CountLines(fleet.gateway().log(), log_mark,
                                    "table.?stream.*(back|recovered|restored|reopened)");

  report.Value(name, "outage_s", Between(killed, restarted), 1);
  report.Value(name, "stream_lost_after_kill_s", lost);
  report.Bound(name, "stream_back_s", back, !std::isnan(back) && back <= 6, "<= 6");
  report.Value(name, "reports_back_s", reports_back);
  report.Text(name, "picks_before",
              before && start ? FormatPicks(before->Picks(), start->Picks()) : "?");
  report.Text(name, "picks_during",
              during && before ? FormatPicks(during->Picks(), before->Picks()) : "?");
  report.Text(name, "picks_after",
              after && during ? FormatPicks(after->Picks(), during->Picks()) : "?");
  report.Text(name, "requests_failed", Describe(Count(load.done(), killed)));
  report.Check(name, "gateway_stream_log", lost_lines == 1 && back_lines == 1,
               absl::StrCat(lost_lines, " loss line(s), ", back_lines, " recovery line(s)"));
}

// The refusals the gateway makes itself, each provoked once with no load running: a counter on
// /metrics must move for each (a sample whose code/status label is the status or its class, or a
// counter named for refusals).
void Refusals(Fleet& fleet, Report& report) {
  const std::string name = "refusals";
  const int port = fleet.gateway_port();
  struct Case {
    int status;
    std::string request;
  };
  const std::vector<Case> cases = {
      {401,
       "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
       "Content-Length: 2\r\nConnection: close\r\n\r\n{}"},
      {400, "GARBAGE\r\n\r\n"},
      {431, absl::StrCat("GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: ", std::string(70000, 'x'),
                         "\r\n\r\n")},
      {405, absl::StrCat("DELETE /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: "
                         "Bearer ",
                         kApiKey, "\r\nConnection: close\r\n\r\n")},
  };
  std::vector<std::string> missing;
  bool allow = false;
  for (const Case& c : cases) {
    const std::optional<Metrics> before = fleet.GatewayMetrics();
    std::string answer;
    {
      const int fd = socket(AF_INET, SOCK_STREAM, 0);
      sockaddr_in addr{};
      addr.sin_family = AF_INET;
      addr.sin_port = htons(static_cast<uint16_t>(port));
      addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      timeval give_up{.tv_sec = 10, .tv_usec = 0};
      setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &give_up, sizeof give_up);
      if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
        send(fd, c.request.data(), c.request.size(), MSG_NOSIGNAL);
        char buffer[4096];
        for (ssize_t n; (n = recv(fd, buffer, sizeof buffer, 0)) > 0;) answer.append(buffer, n);
      }
      close(fd);
    }
    const bool answered = answer.rfind(absl::StrCat("HTTP/1.1 ", c.status), 0) == 0;
    if (c.status == 405) {
      allow = answered && answer.find("\r\nAllow: ") != std::string::npos;
    }
    const std::optional<Metrics> after = fleet.GatewayMetrics();
    bool counted = false;
    if (before && after) {
      const std::string code = absl::StrCat(c.status);
      const std::string klass = absl::StrCat(c.status / 100, "xx");
      for (const auto& [key, value] : after->samples) {
        const std::string family = key.substr(0, key.find('{'));
        if (after->counters.count(family) == 0) continue;
        const auto b = before->samples.find(key);
        if (value <= (b == before->samples.end() ? 0 : b->second)) continue;
        const bool labelled = key.find("=\"" + code + "\"") != std::string::npos ||
                              key.find("=\"" + klass + "\"") != std::string::npos;
        const bool named = family.find("unauthorized") != std::string::npos ||
                           family.find("refus") != std::string::npos ||
                           family.find("reject") != std::string::npos;
        if (labelled || named) counted = true;
      }
    }
    if (!answered) missing.push_back(absl::StrCat(c.status, " not answered"));
    if (!counted) missing.push_back(absl::StrCat(c.status, " not counted"));
  }
  report.Check(name, "refusals_counted", missing.empty(),
               missing.empty() ? "401 400 431 405 counted" : absl::StrJoin(missing, ", "));
  report.Check(name, "allow_header", allow, allow ? "405 has Allow" : "405 without Allow");
}

void Drain(Fleet& fleet, Report& report) {
  const std::string name = "drain";
  constexpr int kStreams = 8;
  std::vector<Done> done(kStreams);
  std::vector<std::thread> threads;
  for (int i = 0; i < kStreams; ++i) {
    threads.emplace_back([&, i] { done[i] = StreamOnce(fleet.gateway_port(), i, 250, 30); });
  }
  const bool open = !std::isnan(TimeUntil(fleet, Clock::now(), seconds(10), [](const Metrics& m) {
    return m.Sum("cacheroute_gateway_open_streams") >= kStreams;
  }));
  const auto term = Clock::now();
  fleet.gateway().Signal(SIGTERM);
  // A new request after SIGTERM: refused (the listener closes).
  std::this_thread::sleep_for(milliseconds(500));
  const Done late = StreamOnce(fleet.gateway_port(), 99, 5, 5);
  for (std::thread& t : threads) t.join();
  const int status = fleet.gateway().Stop(0, seconds(40));  // SIGTERM was sent: wait for the exit
  const double exited = Since(term);
  int cut = 0;
  for (const Done& d : done) cut += d.outcome == Outcome::kOk ? 0 : 1;
  report.Value(name, "streams_open_at_sigterm", open ? kStreams : 0, 0);
  report.Bound(name, "streams_cut", cut, open && cut == 0, "0", 0);
  report.Text(name, "new_request_after_sigterm", OutcomeName(late.outcome));
  report.Value(name, "gateway_exit_after_sigterm_s", exited);
  report.Text(name, "gateway_exit_status",
              WIFEXITED(status) ? absl::StrCat("exit ", WEXITSTATUS(status)) : "killed");
}

int Run(const Settings& s, const std::set<std::string>& allow_fail, bool json) {
  Report report(allow_fail);
  Fleet fleet(s.binaries, s.dir);
  fleet.StartPlanner();
  for (int i = 0; i < kEngines; ++i) fleet.StartEngine(i);
  fleet.StartGateway();
  std::cerr << "cacheroute-faults: fleet up (gateway 127.0.0.1:" << fleet.gateway_port()
            << "), logs in " << s.dir << "\n";

  // The slow clients run beside everything else, from the start (std::jthread: joined, and
  // told to stop, also when a scenario fails).
  const auto interval = seconds(5);
  double header_cut = std::nan(""), body_cut = std::nan("");
  std::vector<std::jthread> slow;
  if (s.Runs("slow-clients")) {
    slow.emplace_back([&](std::stop_token stop) {
      header_cut = Drip(
          fleet.gateway_port(), "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n",
          [](int i) { return absl::StrCat("X-Slow-", i, ": ", i, "\r\n"); }, interval, seconds(400),
          stop);
    });
    slow.emplace_back([&](std::stop_token stop) {
      body_cut = Drip(
          fleet.gateway_port(),
          absl::StrCat("POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ",
                       kApiKey,
                       "\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n"),
          [](int) { return std::string(" "); }, interval, seconds(400), stop);
    });
  }
  const std::vector<std::pair<std::string, std::function<void()>>> scenarios = {
      {"engine-kill", [&] { EngineKill(fleet, report, s); }},
      {"engine-hang", [&] { EngineHang(fleet, report, s); }},
      {"planner-outage",
       [&] {
         for (double outage : s.outages) PlannerOutage(fleet, report, s, outage);
       }},
      {"slow-clients",
       [&] {
         for (std::jthread& t : slow) t.join();
         report.Bound("slow-clients", "header_cut_s", header_cut,
                      !std::isnan(header_cut) && header_cut <= 70, "<= 70", 1);
         report.Value("slow-clients", "body_cut_s", body_cut, 1);
       }},
      {"refusals", [&] { Refusals(fleet, report); }},
      {"drain", [&] { Drain(fleet, report); }},
  };
  for (const auto& [name, run] : scenarios) {
    if (!s.Runs(name)) continue;
    std::cerr << "cacheroute-faults: " << name << "\n";
    run();
  }

  if (json) {
    report.PrintJson(std::cout);
  } else {
    report.PrintTable(std::cout);
  }
  return report.Passed() ? 0 : 1;
}

}  // namespace
}  // namespace cacheroute::eval::faults

int main(int argc, char** argv) {
  using namespace cacheroute::eval::faults;
  Settings s;
  bool json = false, keep = false;
  std::string allow;
  CLI::App app{
      "cacheroute-faults: engine kill and hang, planner outage, slow clients, refusals "
      "and drain against real processes on loopback; prints what was lost"};
  app.add_flag("--quick", s.quick, "Scaled-down durations (CI)");
  app.add_flag("--json", json, "Print the figures as JSON");
  std::string outages;
  app.add_option("--outage", outages,
                 "Seconds the planner stays down, comma-separated for several runs of "
                 "planner-outage (default 40,45,50; 15 with --quick)");
  app.add_option("--dir", s.dir, "Directory for configs, state and logs (default: a new temp dir)");
  app.add_flag("--keep", keep, "Keep the directory after a passing run");
  std::string only;
  app.add_option("--only", only,
                 absl::StrCat("Scenarios to run, comma-separated (default: all of ",
                              absl::StrJoin(kScenarios, ","), ")"));
  app.add_option("--allow-fail", allow,
                 "Checks reported but kept out of the exit status, comma-separated");
  app.add_option("--planner-binary", s.binaries.planner, "cacheroute-planner")
      ->capture_default_str();
  app.add_option("--gateway-binary", s.binaries.gateway, "cacheroute-gateway")
      ->capture_default_str();
  app.add_option("--engine-binary", s.binaries.engine, "cacheroute-engine-emu")
      ->capture_default_str();
  if (std::optional<int> code = cacheroute::eval::ParseCommandLine(app, argc, argv)) return *code;
  if (!outages.empty()) {
    s.outages.clear();
    for (absl::string_view text : absl::StrSplit(outages, ',')) {
      double outage = 0;
      if (!absl::SimpleAtod(text, &outage) || !(outage >= 6 && outage <= 600)) {
        return kProgram.Fail(2, absl::StrCat("--outage: each must be a number of seconds in [6, "
                                             "600] (beyond the 5 s table TTL), got '",
                                             text, "'"));
      }
      s.outages.push_back(outage);
    }
  } else if (s.quick) {
    s.outages = {15};
  }
  for (absl::string_view name : absl::StrSplit(only, ',', absl::SkipEmpty())) {
    if (std::find(std::begin(kScenarios), std::end(kScenarios), name) == std::end(kScenarios)) {
      return kProgram.Fail(2, absl::StrCat("--only: unknown scenario '", name,
                                           "' (known: ", absl::StrJoin(kScenarios, ","), ")"));
    }
    s.only.emplace(name);
  }
  std::set<std::string> allow_fail;
  for (absl::string_view name : absl::StrSplit(allow, ',', absl::SkipEmpty())) {
    allow_fail.emplace(name);
  }
  const bool own_dir = s.dir.empty();
  if (own_dir) {
    char pattern[] = "/tmp/cacheroute-faults.XXXXXX";
    if (mkdtemp(pattern) == nullptr) return kProgram.Fail(1, "cannot create a temporary directory");
    s.dir = pattern;
  } else {
    std::error_code ec;
    fs::create_directories(s.dir, ec);
    if (ec) return kProgram.Fail(2, absl::StrCat("--dir: cannot create '", s.dir, "'"));
  }
  signal(SIGINT, cacheroute::eval::KillTrackedChildrenAndExit);
  signal(SIGTERM, cacheroute::eval::KillTrackedChildrenAndExit);
  signal(SIGPIPE, SIG_IGN);
  int code;
  try {
    code = Run(s, allow_fail, json);
  } catch (const FaultsError& e) {
    return kProgram.Fail(1, absl::StrCat(e.what(), " (logs in ", s.dir, ")"));
  }
  if (code == 0 && own_dir && !keep) {
    std::error_code ec;
    fs::remove_all(s.dir, ec);
  } else {
    std::cerr << "cacheroute-faults: logs in " << s.dir << "\n";
  }
  return code;
}
