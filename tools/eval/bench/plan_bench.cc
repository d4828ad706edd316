// cacheroute-plan-bench: times the planning step (BuildPlan) on a synthetic key-rate distribution
// with the paper's skew, and reports the process's peak memory per key.
//
//   cacheroute-plan-bench --keys 128824 --destinations 30 --slots-per-destination 64
//   cacheroute-plan-bench --keys 128824 --destinations 30 --admit-all
//   cacheroute-plan-bench --keys 10000000 --destinations 1000 --admit-all --repeat 3 --json
//   cacheroute-plan-bench --keys 128824 --destinations 30 --slots-per-destination 64
//       --kv-budget-tokens 320000 --kv-capacity-tokens 641136   (one line)
//
// With --kv-budget-tokens each key also gets a reusable prefix, lognormal with median 3,162 tokens
// and σ 1.1 clipped to [200, 50,000] independent of its rate (the heterogeneous-prefix study's
// distribution), and a prompt 600 tokens longer; the byte-aware build and the slot-model build
// are then timed alternately in the same process and both medians are printed with their ratio.
//
// Each configuration runs in its own process so the peak-RSS figure belongs to it alone. Keys are
// random 64-bit ids (as gateways send hashed keys) unless --sequential-ids.
#include <sys/resource.h>

#include <algorithm>
#include <cmath>
#include <iostream>
#include <optional>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "planner/plan_builder.h"
#include "tools/eval/main_helpers.h"
#include "tools/eval/workload/lognormal_rates.h"

namespace {

uint64_t PeakRssBytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<uint64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
}

}  // namespace

int main(int argc, char** argv) {
  namespace planner = cacheroute::planner;
  cacheroute::workload::LognormalRatesOptions rates_options;
  rates_options.total_rate = 176.0;  // the paper's 70B capacity point, in QPS
  uint32_t destinations = 30;
  double q_cap = 0;
  uint64_t slots_per_destination = 64;
  bool admit_all = false;
  bool sequential_ids = false;
  int repeat = 30;
  bool json = false;
  bool fresh_builder = false;
  double kv_budget_tokens = 0;
  double kv_capacity_tokens = 0;

  CLI::App app{"Benchmark the CacheRoute planning step (Algorithm 1)."};
  app.add_option("--keys", rates_options.keys, "number of keys")->check(CLI::PositiveNumber);
  app.add_option("--sigma", rates_options.sigma, "σ of the lognormal key rates");
  app.add_option("--total-rate", rates_options.total_rate, "sum of the key rates (QPS)");
  app.add_option("--seed", rates_options.seed, "random seed");
  app.add_option("--destinations", destinations, "R")->check(CLI::Range(1u, 1u << 20));
  app.add_option("--q-cap", q_cap, "per-assignment load cap; default: mean destination load")
      ->check(CLI::NonNegativeNumber);
  auto* w = app.add_option("--slots-per-destination", slots_per_destination, "W")
                ->check(CLI::PositiveNumber);
  app.add_flag("--admit-all", admit_all, "set W = keys so the slot capacity admits every key")
      ->excludes(w);
  app.add_flag("--sequential-ids", sequential_ids, "key ids 0..n-1 instead of random 64-bit ids");
  app.add_option("--repeat", repeat, "timed builds")->check(CLI::Range(1, 100000));
  app.add_flag("--fresh-builder", fresh_builder,
               "a new PlanBuilder per build (cold buffers) instead of one reused, as the planner "
               "service does");
  app.add_option("--kv-budget-tokens", kv_budget_tokens,
                 "byte-aware planning with this KV budget per destination (tokens), timed against "
                 "the slot model")
      ->check(CLI::PositiveNumber);
  app.add_option("--kv-capacity-tokens", kv_capacity_tokens,
                 "byte-aware: the engines' KV capacity per destination (survival estimate)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--json", json, "print one JSON object instead of text");
  if (std::optional<int> code = cacheroute::eval::ParseCommandLine(app, argc, argv)) return *code;
  if (admit_all) slots_per_destination = rates_options.keys;
  if (q_cap == 0) q_cap = rates_options.total_rate / destinations;

  std::vector<planner::KeyRate> input(rates_options.keys);
  {
    std::vector<double> rates = cacheroute::workload::GenerateLognormalRates(rates_options);
    cacheroute::workload::Rng ids(rates_options.seed ^ 0x5eedULL);
    for (size_t i = 0; i < input.size(); ++i) {
      input[i] = {sequential_ids ? i : ids.Next(), rates[i]};
    }
  }

  const planner::PlanConfig config{
      .destinations = destinations, .q_cap = q_cap, .slots_per_destination = slots_per_destination};
  const bool byte_aware = kv_budget_tokens > 0;
  std::vector<planner::KeyTokens> tokens;
  planner::PlanConfig bytes_config = config;
  if (byte_aware) {
    bytes_config.kv_budget_tokens = kv_budget_tokens;
    bytes_config.kv_capacity_tokens = kv_capacity_tokens;
    bytes_config.request_overhead_tokens = 105;  // 110 output tokens of the 70B profile
    cacheroute::workload::Rng sizes(rates_options.seed ^ 0x512e5ULL);
    tokens.resize(input.size());
    for (planner::KeyTokens& t : tokens) {
      t.reusable =
          std::round(std::clamp(3162 * std::exp(1.1 * sizes.NextNormal()), 200.0, 50000.0));
      t.prompt = t.reusable + 600;
    }
  }
  cacheroute::base::RealClock clock;
  std::optional<planner::PlanBuilder> builder;
  std::vector<double> seconds, bytes_seconds;
  std::optional<planner::Plan> plan, bytes_plan;
  for (int i = 0; i < repeat; ++i) {
    plan.reset();  // so two plans never coexist and the peak-memory figure is one build's
    bytes_plan.reset();
    if (fresh_builder || !builder) builder.emplace(&clock);
    absl::StatusOr<planner::Plan> built = builder->Build(input, config);
    if (!built.ok()) {
      std::cerr << "cacheroute-plan-bench: error: " << built.status().message() << "\n";
      return 2;
    }
    seconds.push_back(built->stats().build_seconds);
    plan = *std::move(built);
    if (!byte_aware) continue;
    plan.reset();
    if (fresh_builder) builder.emplace(&clock);
    absl::StatusOr<planner::Plan> by_bytes = builder->Build(input, bytes_config, nullptr, {}, tokens);
    if (!by_bytes.ok()) {
      std::cerr << "cacheroute-plan-bench: error: " << by_bytes.status().message() << "\n";
      return 2;
    }
    bytes_seconds.push_back(by_bytes->stats().build_seconds);
    bytes_plan = *std::move(by_bytes);
    if (i + 1 == repeat) plan = builder->Build(input, config).value();  // for the figures below
  }
  std::vector<double> order = seconds;
  std::sort(order.begin(), order.end());
  const double median = order[order.size() / 2];
  const double max = order.back();
  const double keys = static_cast<double>(rates_options.keys);
  const uint64_t peak = PeakRssBytes();
  const planner::PlanStats& s = plan->stats();
  double bytes_median = 0;
  if (byte_aware) {
    std::vector<double> b = bytes_seconds;
    std::sort(b.begin(), b.end());
    bytes_median = b[b.size() / 2];
  }

  if (json) {
    std::cout << absl::StrFormat(
        "{\"keys\": %d, \"destinations\": %d, \"q_cap\": %.17g, \"slots_per_destination\": %d, "
        "\"repeat\": %d, \"fresh_builder\": %s, \"median_seconds\": %.9f, \"max_seconds\": %.9f, "
        "\"min_seconds\": %.9f, \"first_seconds\": %.9f, \"keys_per_second\": %.6g, "
        "\"admitted_keys\": %d, "
        "\"slots_used\": %d, \"slot_capacity\": %d, \"capped_keys\": %d, \"imbalance\": %.9f, "
        "\"peak_rss_bytes\": %d, \"peak_rss_bytes_per_key\": %.3f}\n",
        rates_options.keys, destinations, q_cap, slots_per_destination, repeat,
        fresh_builder ? "true" : "false", median, max, order.front(), seconds.front(),
        keys / median, s.admitted_keys, s.slots_used, s.slot_capacity, s.capped_keys, s.imbalance,
        peak, peak / keys);
    if (byte_aware) {
      const planner::PlanStats& b = bytes_plan->stats();
      std::cout << absl::StrFormat(
          "{\"byte_aware\": true, \"kv_budget_tokens\": %.17g, \"median_seconds\": %.9f, "
          "\"slot_model_median_seconds\": %.9f, \"ratio\": %.4f, \"admitted_keys\": %d, "
          "\"kv_used\": %.17g, \"work_imbalance\": %.9f}\n",
          kv_budget_tokens, bytes_median, median, bytes_median / median, b.admitted_keys, b.kv_used,
          b.work_imbalance);
    }
  } else {
    std::cout << absl::StrFormat(
        "plan build: %d keys (lognormal σ=%.2f), R=%d, q_cap=%.4g, W=%d (C=%d)\n"
        "  admitted %d keys, %d slots, %d capped, imbalance %.4f\n"
        "  %d builds (%s): median %.3f ms, max %.3f ms, min %.3f ms (first %.3f ms), "
        "%.3g keys/s at the median\n"
        "  peak RSS %.1f MiB = %.1f bytes/key (whole process, input included)\n",
        rates_options.keys, rates_options.sigma, destinations, q_cap, slots_per_destination,
        s.slot_capacity, s.admitted_keys, s.slots_used, s.capped_keys, s.imbalance, repeat,
        fresh_builder ? "a fresh PlanBuilder each" : "one PlanBuilder reused", median * 1e3,
        max * 1e3, order.front() * 1e3, seconds.front() * 1e3, keys / median, peak / 1048576.0,
        peak / keys);
    if (byte_aware) {
      const planner::PlanStats& b = bytes_plan->stats();
      std::cout << absl::StrFormat(
          "byte-aware build, %s KV tokens per destination: admitted %d keys, %.0f of %.0f tokens, "
          "work imbalance %.4f\n"
          "  median %.3f ms against the slot model's %.3f ms in the same run: %.2fx\n",
          absl::StrFormat("%g", kv_budget_tokens), b.admitted_keys, b.kv_used, b.kv_budget,
          b.work_imbalance, bytes_median * 1e3, median * 1e3, bytes_median / median);
    }
  }
  return 0;
}
