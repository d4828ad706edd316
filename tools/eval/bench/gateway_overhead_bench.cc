// cacheroute-gateway-bench: the latency a gateway adds, on loopback, next to HAProxy's. One
// vLLM-like upstream (an httplib server answering a fixed completion at once), one in-process
// Gateway in front of it and, when the haproxy binary exists, an HAProxy (`balance leastconn`,
// HTTP mode, keep-alive both sides) in front of the same upstream. An open-loop load generator
// sends --rate requests/s on each path, interleaved in one run so that every path sees the same
// machine load. The gateway runs as a process of its own, like HAProxy (the cacheroute-gateway
// binary beside this one; --gateway-binary ""  runs it in this process instead). Prints the percentiles of each path, the p50 each proxy adds over direct, and the
// gateway's added p50 minus HAProxy's; with --repeat N, the median of N runs of those figures.
//
//   cacheroute-gateway-bench --rate 1000 --seconds 10 --repeat 3
#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/eval/bench/loopback_service.h"
#include "tools/eval/child_process.h"
#include "tools/gateway/gateway.h"

namespace {

using Clock = std::chrono::steady_clock;
using ::cacheroute::eval::Median;
using ::cacheroute::eval::Percentile;

// A free loopback port (bound, read, released: racy in principle, fine on a quiet machine).
int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  ::close(fd);
  return ntohs(a.sin_port);
}

// HAProxy in HTTP mode in front of one upstream, as a reference proxy; stopped by the destructor.
struct HaProxy {
  std::unique_ptr<cacheroute::eval::ChildProcess> child;
  int port = 0;
  std::filesystem::path config;
  HaProxy(const std::string& binary, int upstream_port, unsigned threads) {
    port = FreePort();
    config = std::filesystem::temp_directory_path() /
             absl::StrCat("cacheroute-bench-haproxy-", ::getpid(), ".cfg");
    std::ofstream(config) << absl::StrFormat(
        "global\n  maxconn 9000\n  nbthread %u\n"
        "defaults\n  mode http\n  timeout connect 2s\n  timeout client 600s\n"
        "  timeout server 600s\n  option http-keep-alive\n"
        "frontend fe\n  bind 127.0.0.1:%d\n  default_backend be\n"
        "backend be\n  balance leastconn\n  server s0 127.0.0.1:%d\n",
        threads, port, upstream_port);
    auto spawned =
        cacheroute::eval::ChildProcess::Spawn({binary, "-f", config.string(), "-db", "-q"});
    const int listen_port = port;
    port = 0;
    if (!spawned.ok()) return;
    child = *std::move(spawned);
    const auto deadline = Clock::now() + std::chrono::seconds(10);
    while (Clock::now() < deadline && !child->Exited()) {
      httplib::Client probe("127.0.0.1", listen_port);
      if (probe.Get("/")) {  // any answer: it listens
        port = listen_port;
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }
  ~HaProxy() {
    if (child != nullptr) child->Stop(SIGTERM, std::chrono::seconds(10));
    std::error_code ignored;
    std::filesystem::remove(config, ignored);
  }
};

}  // namespace

int main(int argc, char** argv) {
  double rate = 1000;
  double seconds = 10;
  int threads = 16;
  int repeat = 1;
  std::string policy = "cacheroute";
  std::string haproxy = "/usr/sbin/haproxy";
  uint32_t io_threads = 0;
  std::string gateway_binary =
      (std::filesystem::path(argv[0]).parent_path() / "cacheroute-gateway").string();
  CLI::App app{"Gateway overhead: p50 latency through the gateway and HAProxy vs direct, on loopback."};
  app.add_option("--rate", rate, "Requests/s on each path (direct, gateway, haproxy)");
  app.add_option("--seconds", seconds, "Duration of one measurement");
  app.add_option("--threads", threads, "Load generator threads");
  app.add_option("--repeat", repeat, "Runs; figures are their medians")->check(CLI::Range(1, 99));
  app.add_option("--policy", policy, "Gateway routing policy");
  app.add_option("--io-threads", io_threads, "Gateway I/O threads (0: one per core)");
  app.add_option("--gateway-binary", gateway_binary,
                 "cacheroute-gateway to run as a process of its own, as HAProxy runs (\"\" or "
                 "missing: the gateway runs inside this process)");
  app.add_option("--haproxy", haproxy, "HAProxy binary (\"\" or missing: no HAProxy path)");
  CLI11_PARSE(app, argc, argv);

  const std::string answer =
      R"({"id":"cmpl-1","object":"text_completion","model":"m","choices":[{"index":0,)"
      R"("text":"hello","finish_reason":"stop"}],"usage":{"prompt_tokens":12,)"
      R"("completion_tokens":1,"total_tokens":13,"prompt_tokens_details":{"cached_tokens":0}}})";
  auto upstream = std::make_unique<cacheroute::eval::CompletionUpstream>(answer, 3 * threads + 8);
  const int upstream_port = upstream->port();

  cacheroute::gateway::GatewayConfig config;
  config.listen = "127.0.0.1:0";
  config.policy = policy;
  config.io_threads = io_threads;
  config.upstreams = {{"engine-0", absl::StrCat("http://127.0.0.1:", upstream_port)}};
  std::unique_ptr<cacheroute::gateway::Gateway> in_process;
  std::unique_ptr<cacheroute::eval::LoopbackService> child;
  int gateway_port = 0;
  if (!gateway_binary.empty() && std::filesystem::exists(gateway_binary)) {
    child = std::make_unique<cacheroute::eval::LoopbackService>(
        gateway_binary, "gateway",
        absl::StrFormat("listen: 127.0.0.1:0\npolicy: %s\nio_threads: %d\n"
                        "upstreams:\n  - {name: engine-0, url: \"http://127.0.0.1:%d\"}\n",
                        policy, io_threads, upstream_port));
    gateway_port = child->port;
    if (gateway_port == 0) {
      std::fprintf(stderr, "gateway: %s did not start: %s\n", gateway_binary.c_str(),
                   child->error.c_str());
      return 1;
    }
  } else {
    auto gateway = cacheroute::gateway::Gateway::Start(config);
    if (!gateway.ok()) {
      std::fprintf(stderr, "gateway: %s\n", std::string(gateway.status().message()).c_str());
      return 1;
    }
    in_process = *std::move(gateway);
    gateway_port = in_process->port();
  }
  std::unique_ptr<HaProxy> proxy;
  if (!haproxy.empty() && std::filesystem::exists(haproxy)) {
    // As many threads as the gateway's I/O threads, so both proxies run alike.
    const unsigned proxy_threads =
        io_threads > 0 ? io_threads : std::max(1u, std::thread::hardware_concurrency());
    proxy = std::make_unique<HaProxy>(haproxy, upstream_port, proxy_threads);
    if (proxy->port == 0) {
      std::fprintf(stderr, "haproxy did not start; measuring without it\n");
      proxy.reset();
    }
  }
  struct Path {
    const char* name;
    int port;
  };
  std::vector<Path> paths = {{"direct", upstream_port}, {"gateway", gateway_port}};
  if (proxy) paths.push_back({"haproxy", proxy->port});
  const size_t n_paths = paths.size();

  std::printf(
      "gateway overhead on loopback: %.0f req/s per path for %.1f s, %d client threads, gateway "
      "I/O threads %u (haproxy nbthread the same), policy %s, %d run(s), gateway %s\n",
      rate, seconds, threads, io_threads, policy.c_str(), repeat,
      child ? "in its own process" : "in this process");
  std::printf("%-4s %-8s %8s %10s %10s %10s %10s\n", "run", "path", "requests", "p50_us", "p90_us",
              "p99_us", "max_us");
  std::vector<double> gateway_added, haproxy_added, gateway_vs_haproxy;
  uint64_t failures_total = 0;
  for (int run = 0; run < repeat; ++run) {
    // Request i is due at start + i / (n_paths · rate) and goes on path i % n_paths.
    const auto total = static_cast<uint64_t>(n_paths * rate * seconds);
    const auto spacing = std::chrono::duration<double>(1.0 / (n_paths * rate));
    const std::string body = R"({"model":"m","prompt":"Say hello","max_tokens":1,"user":"tenant-)";
    std::atomic<uint64_t> next{0};
    std::atomic<uint64_t> failures{0};
    std::atomic<uint64_t> late{0};
    std::vector<std::vector<std::vector<double>>> results(
        n_paths, std::vector<std::vector<double>>(threads));
    const Clock::time_point start = Clock::now() + std::chrono::milliseconds(100);
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        std::vector<std::unique_ptr<httplib::Client>> clients;
        for (const Path& p : paths) {
          clients.push_back(std::make_unique<httplib::Client>("127.0.0.1", p.port));
          clients.back()->set_keep_alive(true);
          clients.back()->set_tcp_nodelay(true);
        }
        for (uint64_t i = next.fetch_add(1); i < total; i = next.fetch_add(1)) {
          const auto due = start + std::chrono::duration_cast<Clock::duration>(spacing * i);
          if (Clock::now() > due + std::chrono::milliseconds(1)) late.fetch_add(1);
          std::this_thread::sleep_until(due);
          const size_t path = i % n_paths;
          const std::string request = absl::StrCat(body, i % 64, "\"}");
          const Clock::time_point sent = Clock::now();
          httplib::Result result =
              clients[path]->Post("/v1/completions", request, "application/json");
          const double micros =
              std::chrono::duration<double, std::micro>(Clock::now() - sent).count();
          if (!result || result->status != 200) {
            failures.fetch_add(1);
            continue;
          }
          results[path][t].push_back(micros);
        }
      });
    }
    for (std::thread& w : workers) w.join();
    std::vector<double> p50(n_paths);
    for (size_t p = 0; p < n_paths; ++p) {
      std::vector<double> all;
      for (const auto& v : results[p]) all.insert(all.end(), v.begin(), v.end());
      p50[p] = Percentile(all, 0.5);
      std::printf("%-4d %-8s %8zu %10.1f %10.1f %10.1f %10.1f\n", run + 1, paths[p].name,
                  all.size(), p50[p], Percentile(all, 0.9), Percentile(all, 0.99),
                  Percentile(all, 1.0));
    }
    gateway_added.push_back(p50[1] - p50[0]);
    if (n_paths > 2) {
      haproxy_added.push_back(p50[2] - p50[0]);
      gateway_vs_haproxy.push_back(p50[1] - p50[2]);
    }
    std::printf("     failures: %llu, requests sent more than 1 ms late: %llu of %llu\n",
                static_cast<unsigned long long>(failures.load()),
                static_cast<unsigned long long>(late.load()),
                static_cast<unsigned long long>(total));
    failures_total += failures.load();
  }
  if (in_process) in_process->Stop();
  child.reset();
  proxy.reset();
  upstream.reset();

  std::printf("added p50 latency over direct (median of %d): gateway %.1f us", repeat,
              Median(gateway_added));
  if (!haproxy_added.empty()) {
    const double diff = Median(gateway_vs_haproxy);
    std::printf(", haproxy %.1f us; gateway - haproxy %.1f us (target <= 25 us): %s\n",
                Median(haproxy_added), diff, diff <= 25 ? "met" : "NOT met");
  } else {
    std::printf(" (no haproxy at the given path)\n");
  }
  return failures_total == 0 ? 0 : 1;
}
