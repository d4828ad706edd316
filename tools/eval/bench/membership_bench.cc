// cacheroute-membership-bench: how long a pod's readiness change takes to reach a front end's
// membership with the InferencePool source (tools/frontend/membership/inference_pool_source.h).
// A Kubernetes API-server double on loopback (tools/eval/kube_api/kube_api_server.h: the same list
// and chunked watch wire format as the real one) holds a pool of two ready pods; the front end's
// MembershipWatcher, configured with upstreams_inference_pool against it, watches. The benchmark
// flips one pod's readiness --flips times (unready, ready, ...) and times each from the change
// at the double (just before its watch event is written) to the Membership's new snapshot
// (polled every 20 µs). Prints the median and p90, and for comparison the DNS source's wait,
// which is computed, not measured: a change is seen at the next membership_interval poll, so
// up to one interval (plus the resolution) and half of one on average.
//
//   cacheroute-membership-bench --flips 50
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "tools/eval/kube_api/kube_api_server.h"
#include "tools/eval/bench/loopback_service.h"
#include "tools/frontend/membership/membership_watcher.h"

namespace {

using Clock = std::chrono::steady_clock;
using cacheroute::frontend::FrontendConfig;
using cacheroute::frontend::Membership;
using cacheroute::frontend::MembershipWatcher;
using cacheroute::frontend::StopSignal;

// Waits (polling) until the membership's generation passes `after`; false after 10 s.
bool WaitForChange(const Membership& membership, uint64_t after) {
  const Clock::time_point give_up = Clock::now() + std::chrono::seconds(10);
  while (membership.generation() <= after) {
    if (Clock::now() > give_up) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Pod readiness change to front-end membership change, InferencePool source");
  int flips = 50;
  double dns_interval_s = 5.0;
  app.add_option("--flips", flips, "Readiness changes to time")->check(CLI::Range(2, 100000));
  app.add_option("--dns-interval", dns_interval_s,
                 "membership_interval of the DNS source to compare with, seconds");
  CLI11_PARSE(app, argc, argv);

  cacheroute::eval::KubeApiServer api;
  if (!api.ok()) {
    std::fprintf(stderr, "the API-server double did not start\n");
    return 1;
  }
  const cacheroute::eval::KubeApiServer::Labels labels = {{"app", "vllm"}};
  api.SetPool("serving", "vllm-pool", labels, {8000});
  api.SetPod("serving", "vllm-0", labels, "127.0.0.2", true);
  api.SetPod("serving", "vllm-1", labels, "127.0.0.3", true);

  FrontendConfig config;
  config.upstreams_inference_pool = "vllm-pool";
  config.inference_pool_namespace = "serving";
  config.kube_api_server = api.url();
  absl::StatusOr<std::vector<cacheroute::frontend::Upstream>> initial =
      cacheroute::frontend::InitialMembers(config);
  Membership membership({.capacity = config.max_upstreams, .dynamic = true});
  if (!initial.ok() || initial->size() != 2 || !membership.Apply(*initial).ok()) {
    std::fprintf(stderr, "the first read failed: %s\n",
                 std::string(initial.status().message()).c_str());
    return 1;
  }
  StopSignal stop;
  MembershipWatcher watcher(config, membership, nullptr, stop);
  watcher.Start();
  // The pods' watch is open once the double has served it.
  const Clock::time_point give_up = Clock::now() + std::chrono::seconds(10);
  while (api.open_watches() < 2 && Clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  std::vector<double> ms;
  for (int i = 0; i < flips; ++i) {
    const uint64_t before = membership.generation();
    const Clock::time_point start = Clock::now();
    api.SetPod("serving", "vllm-1", labels, "127.0.0.3", /*ready=*/i % 2 == 1);
    if (!WaitForChange(membership, before)) {
      std::fprintf(stderr, "flip %d: the membership did not change within 10 s\n", i);
      stop.Trigger();
      return 1;
    }
    ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    std::this_thread::sleep_for(std::chrono::milliseconds(5));  // apart, as changes are
  }
  stop.Trigger();
  watcher.Join();

  std::printf("InferencePool watch (loopback API-server double), %d readiness flips:\n", flips);
  std::printf("  event to membership change: median %.3f ms, p90 %.3f ms, max %.3f ms\n",
              cacheroute::eval::Median(ms), cacheroute::eval::Percentile(ms, 0.9),
              *std::max_element(ms.begin(), ms.end()));
  std::printf("upstreams_dns (computed, not measured): membership_interval %.1f s: up to %.1f s "
              "plus the resolution, %.1f s on average\n",
              dns_interval_s, dns_interval_s, dns_interval_s / 2);
  return 0;
}
