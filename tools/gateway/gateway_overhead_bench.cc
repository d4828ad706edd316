// cacheroute-gateway-bench: the latency a gateway adds, on loopback. One vLLM-like upstream (an
// httplib server answering a fixed completion at once) and one in-process Gateway in front of it;
// an open-loop load generator sends --rate requests/s through the gateway and, interleaved in the
// same run, --rate requests/s directly to the upstream, so both see the same machine load. Prints
// the latency percentiles of both paths and the p50 difference (the gateway's overhead).
//
//   cacheroute-gateway-bench --rate 1000 --seconds 10
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "planner/service/http_listen.h"
#include "tools/gateway/gateway.h"

namespace {

using Clock = std::chrono::steady_clock;

double Percentile(std::vector<double> values, double q) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t index = std::min(values.size() - 1, static_cast<size_t>(q * values.size()));
  return values[index];
}

}  // namespace

int main(int argc, char** argv) {
  double rate = 1000;
  double seconds = 10;
  int threads = 16;
  std::string policy = "cacheroute";
  CLI::App app{"Gateway overhead: p50 latency through the gateway vs direct, on loopback."};
  app.add_option("--rate", rate, "Requests/s on each path (gateway and direct)");
  app.add_option("--seconds", seconds, "Duration of the measurement");
  app.add_option("--threads", threads, "Load generator threads");
  app.add_option("--policy", policy, "Gateway routing policy");
  CLI11_PARSE(app, argc, argv);

  const std::string answer =
      R"({"id":"cmpl-1","object":"text_completion","model":"m","choices":[{"index":0,)"
      R"("text":"hello","finish_reason":"stop"}],"usage":{"prompt_tokens":12,)"
      R"("completion_tokens":1,"total_tokens":13,"prompt_tokens_details":{"cached_tokens":0}}})";
  httplib::Server upstream;
  upstream.set_tcp_nodelay(true);
  upstream.new_task_queue = [threads] { return new httplib::ThreadPool(threads + 4); };
  upstream.Post("/v1/completions", [&](const httplib::Request&, httplib::Response& res) {
    res.set_content(answer, "application/json");
  });
  const int upstream_port = upstream.bind_to_any_port("127.0.0.1");
  std::thread upstream_thread = cacheroute::service::ListenInBackground(upstream);

  cacheroute::gateway::GatewayConfig config;
  config.listen = "127.0.0.1:0";
  config.policy = policy;
  config.upstreams = {{"engine-0", absl::StrCat("http://127.0.0.1:", upstream_port)}};
  auto gateway = cacheroute::gateway::Gateway::Start(config);
  if (!gateway.ok()) {
    std::fprintf(stderr, "gateway: %s\n", std::string(gateway.status().message()).c_str());
    return 1;
  }
  const int gateway_port = (*gateway)->port();

  // Request i is due at start + i / (2 · rate); even ones go through the gateway, odd ones direct.
  const auto total = static_cast<uint64_t>(2 * rate * seconds);
  const auto spacing = std::chrono::duration<double>(1.0 / (2 * rate));
  const std::string body = R"({"model":"m","prompt":"Say hello","max_tokens":1,"user":"tenant-)";
  std::atomic<uint64_t> next{0};
  std::atomic<uint64_t> failures{0};
  std::atomic<uint64_t> late{0};
  std::vector<std::vector<double>> via(threads), direct(threads);
  const Clock::time_point start = Clock::now() + std::chrono::milliseconds(100);
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      httplib::Client to_gateway("127.0.0.1", gateway_port);
      httplib::Client to_upstream("127.0.0.1", upstream_port);
      to_gateway.set_keep_alive(true);
      to_upstream.set_keep_alive(true);
      to_gateway.set_tcp_nodelay(true);
      to_upstream.set_tcp_nodelay(true);
      for (uint64_t i = next.fetch_add(1); i < total; i = next.fetch_add(1)) {
        const auto due = start + std::chrono::duration_cast<Clock::duration>(spacing * i);
        if (Clock::now() > due + std::chrono::milliseconds(1)) late.fetch_add(1);
        std::this_thread::sleep_until(due);
        const bool through_gateway = i % 2 == 0;
        const std::string request = absl::StrCat(body, i % 64, "\"}");
        const Clock::time_point sent = Clock::now();
        httplib::Result result = (through_gateway ? to_gateway : to_upstream)
                                     .Post("/v1/completions", request, "application/json");
        const double micros =
            std::chrono::duration<double, std::micro>(Clock::now() - sent).count();
        if (!result || result->status != 200) {
          failures.fetch_add(1);
          continue;
        }
        (through_gateway ? via : direct)[t].push_back(micros);
      }
    });
  }
  for (std::thread& w : workers) w.join();
  (*gateway)->Stop();
  upstream.stop();
  upstream_thread.join();

  std::vector<double> all_via, all_direct;
  for (int t = 0; t < threads; ++t) {
    all_via.insert(all_via.end(), via[t].begin(), via[t].end());
    all_direct.insert(all_direct.end(), direct[t].begin(), direct[t].end());
  }
  std::printf(
      "gateway overhead on loopback: %.0f req/s per path for %.1f s, %d threads, policy %s\n", rate,
      seconds, threads, policy.c_str());
  std::printf("%-8s %8s %10s %10s %10s %10s\n", "path", "requests", "p50_us", "p90_us", "p99_us",
              "max_us");
  for (const auto& [name, values] :
       {std::pair<const char*, const std::vector<double>*>{"direct", &all_direct},
        {"gateway", &all_via}}) {
    std::printf("%-8s %8zu %10.1f %10.1f %10.1f %10.1f\n", name, values->size(),
                Percentile(*values, 0.5), Percentile(*values, 0.9), Percentile(*values, 0.99),
                Percentile(*values, 1.0));
  }
  const double added = Percentile(all_via, 0.5) - Percentile(all_direct, 0.5);
  std::printf("added p50 latency: %.1f us (target <= 200 us): %s\n", added,
              added <= 200 ? "met" : "NOT met");
  std::printf("failures: %llu, requests sent more than 1 ms late: %llu of %llu\n",
              static_cast<unsigned long long>(failures.load()),
              static_cast<unsigned long long>(late.load()), static_cast<unsigned long long>(total));
  return failures.load() == 0 ? 0 : 1;
}
