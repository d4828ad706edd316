// cacheroute-planner-load-bench: drives a planner over loopback gRPC the way a fleet of gateways
// does, and prints what it sustained.
//
//   1. Ingestion: N gateways (one channel and one thread each) send ReportRates as fast as the
//      planner answers, each report carrying K per-key counts drawn from a lognormal key space
//      with the paper's skew, for D seconds. Prints reports/s and key-counts/s accepted.
//   2. Fan-out: M subscribers hold StreamTable streams (the callback API, all in this process),
//      apply full tables and deltas with table::TableClientState and ACK them. Each round changes
//      the rates so the routing changes, calls AdminService.Replan, and measures the time from
//      the Replan call until the last of the M subscribers has acknowledged the new version.
//
// Without --planner it starts an embedded planner (the shipped PlannerServer) on 127.0.0.1:0.
//
//   cacheroute-planner-load-bench --gateways 4 --keys-per-report 10000 --seconds 5
//       --subscribers 200 --rounds 5 [--json]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <iostream>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "cacheroute/v1/admin.grpc.pb.h"
#include "cacheroute/v1/rates.grpc.pb.h"
#include "cacheroute/v1/table.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "planner/key_id.h"
#include "planner/service/planner_server.h"
#include "tools/eval/bench/table_stream.h"
#include "tools/eval/main_helpers.h"
#include "tools/eval/workload/lognormal_rates.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace v1 = cacheroute::v1;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Counts, per version number, how many subscribers have applied it.
class AckTracker {
 public:
  void Applied(uint64_t version) {
    std::lock_guard<std::mutex> lock(mu_);
    if (version >= applied_.size()) applied_.resize(version + 1, 0);
    ++applied_[version];
    cv_.notify_all();
  }
  // Waits until `count` subscribers applied `version` (or a later one).
  bool Await(uint64_t version, int count, std::chrono::seconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] {
      int done = 0;
      for (size_t v = version; v < applied_.size(); ++v) done += applied_[v];
      return done >= count;
    });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int> applied_;
};

std::vector<double> Sorted(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace

int main(int argc, char** argv) {
  std::string planner;
  int gateways = 4;
  int keys_per_report = 10000;
  uint64_t key_space = 128824;
  double seconds = 5;
  int subscribers = 200;
  int rounds = 5;
  uint32_t destinations = 30;
  bool json = false;

  CLI::App app{"Load-test a CacheRoute planner over loopback gRPC."};
  app.add_option("--planner", planner, "HOST:PORT of a running planner (default: embedded)");
  app.add_option("--gateways", gateways, "reporting gateways")->check(CLI::Range(1, 1000));
  app.add_option("--keys-per-report", keys_per_report, "per-key counts in each report")
      ->check(CLI::Range(1, 100000));
  app.add_option("--key-space", key_space, "distinct keys")->check(CLI::Range(1ULL, 1ULL << 26));
  app.add_option("--seconds", seconds, "ingestion duration")->check(CLI::Range(0.1, 3600.0));
  app.add_option("--subscribers", subscribers, "table streams")->check(CLI::Range(0, 10000));
  app.add_option("--rounds", rounds, "replan rounds timed")->check(CLI::Range(1, 1000));
  app.add_option("--destinations", destinations, "embedded planner's R")
      ->check(CLI::Range(1u, 1u << 20));
  app.add_flag("--json", json, "print one JSON object");
  if (std::optional<int> code = cacheroute::eval::ParseCommandLine(app, argc, argv)) return *code;

  cacheroute::base::RealClock clock;
  std::unique_ptr<cacheroute::service::PlannerServer> embedded;
  if (planner.empty()) {
    cacheroute::service::PlannerConfig config;
    config.gate_enabled = false;  // the planner's load, not the rollout, is measured
    config.listen = "127.0.0.1:0";
    config.metrics_listen = "";
    for (uint32_t d = 0; d < destinations; ++d) config.destinations.push_back(std::to_string(d));
    config.q_cap = 1e9;
    config.slots_per_destination = 64;
    config.rate_smoothing = absl::Milliseconds(1);  // each replan follows the last interval
    config.max_keys_per_report = 100000;
    auto server = cacheroute::service::PlannerServer::Start(config, &clock, /*run_ticker=*/false);
    if (!server.ok()) {
      std::cerr << "cacheroute-planner-load-bench: error: " << server.status().message() << "\n";
      return 1;
    }
    embedded = *std::move(server);
    planner = absl::StrFormat("127.0.0.1:%d", embedded->port());
  }

  // Keys weighted like the paper's: a report samples keys in proportion to their rate.
  const std::vector<double> weights = cacheroute::workload::GenerateLognormalRates(
      {.keys = key_space, .sigma = 1.65, .total_rate = 1.0, .seed = 7});
  std::vector<double> cumulative(weights.size());
  double acc = 0;
  for (size_t i = 0; i < weights.size(); ++i) cumulative[i] = (acc += weights[i]);
  std::vector<uint64_t> key_ids(key_space);
  for (uint64_t i = 0; i < key_space; ++i)
    key_ids[i] = cacheroute::KeyId("key-" + std::to_string(i));

  // --- 1. Ingestion
  std::atomic<uint64_t> reports{0}, key_counts{0}, failures{0};
  std::atomic<bool> stop{false};
  const auto ingest_start = Clock::now();
  std::vector<std::thread> threads;
  for (int g = 0; g < gateways; ++g) {
    threads.emplace_back([&, g] {
      grpc::ChannelArguments args;
      args.SetInt("cacheroute.gateway", g);  // a distinct channel (connection) per gateway
      auto channel = grpc::CreateCustomChannel(planner, grpc::InsecureChannelCredentials(), args);
      auto stub = v1::RateService::NewStub(channel);
      cacheroute::workload::Rng rng(1000 + g);
      uint64_t sequence = 1;
      while (!stop.load(std::memory_order_relaxed)) {
        v1::ReportRatesRequest request;
        request.set_gateway_id(absl::StrFormat("bench-gw-%d", g));
        request.set_sequence(sequence++);
        const int64_t now_ms = absl::ToUnixMillis(absl::Now());
        request.set_window_start_unix_ms(now_ms - 1000);
        request.set_window_end_unix_ms(now_ms);
        // Distinct keys per report: a random start in the weighted order, then consecutive ids.
        const double u = rng.NextOpenUnit();
        const size_t first =
            std::lower_bound(cumulative.begin(), cumulative.end(), u) - cumulative.begin();
        request.mutable_counts()->Reserve(keys_per_report);
        for (int k = 0; k < keys_per_report && k < static_cast<int>(key_space); ++k) {
          v1::KeyCount* kc = request.add_counts();
          kc->set_key_id(key_ids[(first + k) % key_space]);
          kc->set_count(1 + static_cast<double>(rng.Next() % 16));
        }
        grpc::ClientContext context;
        v1::ReportRatesResponse response;
        const grpc::Status status = stub->ReportRates(&context, request, &response);
        if (!status.ok()) {
          failures.fetch_add(1);
          continue;
        }
        reports.fetch_add(1, std::memory_order_relaxed);
        key_counts.fetch_add(response.accepted_keys(), std::memory_order_relaxed);
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& t : threads) t.join();
  const double ingest_seconds = SecondsSince(ingest_start);

  // --- 2. Fan-out
  auto channel = grpc::CreateChannel(planner, grpc::InsecureChannelCredentials());
  auto admin = v1::AdminService::NewStub(channel);
  auto rates = v1::RateService::NewStub(channel);
  auto replan = [&]() -> std::optional<v1::ReplanResponse> {
    grpc::ClientContext context;
    v1::ReplanResponse response;
    if (!admin->Replan(&context, {}, &response).ok()) return std::nullopt;
    return response;
  };
  if (!replan()) {
    std::cerr << "cacheroute-planner-load-bench: error: Replan failed\n";
    return 1;
  }
  AckTracker tracker;
  // Subscribers use a few channels, as gateways on a few hosts would.
  std::vector<std::unique_ptr<v1::TableService::Stub>> table_stubs;
  for (int c = 0; c < 4; ++c) {
    grpc::ChannelArguments args;
    args.SetInt("cacheroute.subscriber_channel", c);
    table_stubs.push_back(v1::TableService::NewStub(
        grpc::CreateCustomChannel(planner, grpc::InsecureChannelCredentials(), args)));
  }
  std::vector<std::unique_ptr<cacheroute::bench::TableStream>> streams;
  for (int s = 0; s < subscribers; ++s) {
    streams.push_back(std::make_unique<cacheroute::bench::TableStream>(table_stubs[s % table_stubs.size()].get(),
                                                   absl::StrFormat("bench-sub-%d", s),
                                                   [&tracker](uint64_t v) { tracker.Applied(v); }));
  }
  std::vector<double> fanout;
  uint64_t sequence = 1;
  bool timed_out = false;
  for (int round = 0; round < rounds && !timed_out; ++round) {
    // New hot keys each round, so the routing (and so the version) changes.
    v1::ReportRatesRequest request;
    request.set_gateway_id("bench-shifter");
    request.set_sequence(sequence++);
    const int64_t now_ms = absl::ToUnixMillis(absl::Now());
    request.set_window_start_unix_ms(now_ms - 1000);
    request.set_window_end_unix_ms(now_ms);
    for (int k = 0; k < 64; ++k) {
      v1::KeyCount* kc = request.add_counts();
      kc->set_key_id(cacheroute::KeyId(absl::StrFormat("shift-%d-%d", round, k)));
      kc->set_count(1e9);
    }
    grpc::ClientContext context;
    v1::ReportRatesResponse response;
    rates->ReportRates(&context, request, &response);
    const auto start = Clock::now();
    std::optional<v1::ReplanResponse> result = replan();
    if (!result || !result->changed()) {
      std::cerr << "cacheroute-planner-load-bench: error: the replan published no new version\n";
      return 1;
    }
    if (!tracker.Await(result->version().number(), subscribers, std::chrono::seconds(30))) {
      timed_out = true;
      break;
    }
    fanout.push_back(SecondsSince(start));
  }
  for (auto& s : streams) s->Cancel();
  for (auto& s : streams) s->AwaitDone();

  const double reports_per_second = reports / ingest_seconds;
  const double key_counts_per_second = key_counts / ingest_seconds;
  const std::vector<double> f = Sorted(fanout);
  const double median = f.empty() ? 0 : f[f.size() / 2];
  const double max = f.empty() ? 0 : f.back();
  if (json) {
    std::cout << absl::StrFormat(
        "{\"gateways\": %d, \"keys_per_report\": %d, \"ingest_seconds\": %.3f, "
        "\"reports\": %d, \"reports_per_second\": %.1f, \"key_counts_per_second\": %.1f, "
        "\"failed_reports\": %d, \"subscribers\": %d, \"rounds\": %d, "
        "\"fanout_median_seconds\": %.6f, \"fanout_max_seconds\": %.6f, \"timed_out\": %s}\n",
        gateways, keys_per_report, ingest_seconds, reports.load(), reports_per_second,
        key_counts_per_second, failures.load(), subscribers, f.size(), median, max,
        timed_out ? "true" : "false");
  } else {
    std::cout << absl::StrFormat(
        "ingestion: %d gateways x %d keys/report for %.1f s: %d reports (%d failed)\n"
        "  %.0f reports/s, %.3g key-counts/s accepted\n"
        "fan-out: %d subscribed streams, %d rounds: Replan -> last ACK median %.1f ms, "
        "max %.1f ms%s\n",
        gateways, keys_per_report, ingest_seconds, reports.load(), failures.load(),
        reports_per_second, key_counts_per_second, subscribers, f.size(), median * 1e3, max * 1e3,
        timed_out ? " (TIMED OUT waiting for ACKs)" : "");
  }
  if (embedded) embedded->Shutdown();
  return timed_out ? 1 : 0;
}
