// What the loopback benchmarks share: percentiles of latency samples, a vLLM-like upstream that
// answers a fixed completion at once, and one of the project's services (cacheroute-gateway,
// cacheroute-epp) run as a process of its own from a YAML configuration, waited for until it
// logs the port it serves on.
//
// Usage:
//   CompletionUpstream upstream(answer, /*threads=*/64);       // serving from here on
//   LoopbackService gateway(binary, "gateway", "listen: 127.0.0.1:0\n…");
//   if (gateway.port == 0) Fail(gateway.error);
//   … gateway.port …;   // the destructor stops it (SIGTERM) and removes its files
//   double p99 = Percentile(samples, 0.99);
#pragma once

#include <httplib.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/http_listen.h"
#include "tools/eval/child_process.h"

namespace cacheroute::eval {

// The q-quantile (0 … 1) of `values`, by rank; 0 for none.
inline double Percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t index = std::min(values.size() - 1, static_cast<size_t>(q * values.size()));
  return values[index];
}

inline double Median(std::vector<double> values) { return Percentile(std::move(values), 0.5); }

// POST /v1/completions answered with `answer` (JSON) at once, GET /health with 200, on a loopback
// port, keep-alive, `threads` worker threads (one per client connection it holds).
class CompletionUpstream {
 public:
  CompletionUpstream(std::string answer, int threads) : answer_(std::move(answer)) {
    server_.set_tcp_nodelay(true);
    server_.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    server_.set_keep_alive_max_count(1u << 30);
    server_.Post("/v1/completions", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(answer_, "application/json");
    });
    server_.Get("/health", [](const httplib::Request&, httplib::Response& res) {
      res.set_content("", "text/plain");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = base::ListenInBackground(server_);
  }
  ~CompletionUpstream() {
    server_.stop();
    thread_.join();
  }
  CompletionUpstream(const CompletionUpstream&) = delete;
  CompletionUpstream& operator=(const CompletionUpstream&) = delete;
  int port() const { return port_; }

 private:
  const std::string answer_;
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
};

// `binary --config <yaml written to a temporary file>` as a child process, logging to a temporary
// file; `port` is what its "started <what> port=N" line says, 0 when it did not start (`error`
// says why). Other numbers of that line are read with Logged.
struct LoopbackService {
  std::unique_ptr<ChildProcess> child;
  int port = 0;
  std::string error;
  std::string started_line;
  std::filesystem::path config;
  std::filesystem::path log;

  LoopbackService(const std::string& binary, const std::string& what, const std::string& yaml) {
    const std::string name = absl::StrCat("cacheroute-bench-", what, "-", ::getpid());
    config = std::filesystem::temp_directory_path() / (name + ".yaml");
    log = std::filesystem::temp_directory_path() / (name + ".log");
    std::ofstream(config) << yaml;
    auto spawned = ChildProcess::Spawn({binary, "--config", config.string()},
                                       {.stderr_path = log.string(), .truncate = true});
    if (!spawned.ok()) {
      error = spawned.status().ToString();
      return;
    }
    child = *std::move(spawned);
    const absl::StatusOr<std::string> started = AwaitLogLine(
        *child, log.string(), absl::StrCat("started ", what, " port="), std::chrono::seconds(60));
    if (!started.ok()) {
      error = started.status().ToString();
      return;
    }
    started_line = *started;
    port = LogNumber(*started, "port").value_or(0);
    if (port == 0) error = "no port in: " + *started;
  }
  ~LoopbackService() {
    if (child != nullptr) child->Stop(SIGTERM, std::chrono::seconds(10));
    std::error_code ignored;
    std::filesystem::remove(config, ignored);
    std::filesystem::remove(log, ignored);
  }
  LoopbackService(const LoopbackService&) = delete;
  LoopbackService& operator=(const LoopbackService&) = delete;

  // A number of the started line ("metrics_port"), 0 when missing.
  int Logged(std::string_view field) const { return LogNumber(started_line, field).value_or(0); }
};

}  // namespace cacheroute::eval
