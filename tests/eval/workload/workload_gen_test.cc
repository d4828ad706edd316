// Tests for tools/eval/workload: the semi-synthetic generator reproduces the paper's Table 6
// figures (measured on the requests it emits), is deterministic per seed, keeps hash ids chained,
// and its arrival processes have the burstiness they are asked for.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "tools/eval/workload/arrivals.h"
#include "tools/eval/workload/workload.h"
#include "tools/eval/workload/workload_stats.h"

namespace cacheroute::workload {
namespace {

WorkloadProfile TopK128() {
  WorkloadProfile p = PaperPrimaryProfile();
  p.top_k = 128;
  p.qps = 120;
  p.duration_s = 300;
  return p;
}

WorkloadStats Measure(const GeneratedWorkload& g, const WorkloadProfile& p) {
  return MeasureWorkload(
      g.workload, {.duration_s = p.duration_s, .stable_prefix_tokens = g.stable_prefix_tokens});
}

TEST_CASE("The key universe has the paper's skew (Table 6)") {
  const absl::StatusOr<GeneratedWorkload> g = GenerateWorkload(TopK128());
  REQUIRE(g.ok());
  CHECK(g->universe_rates.keys == 128824);
  CHECK(g->universe_rates.gini == Approx(0.756).margin(0.01));
  CHECK(g->universe_rates.top4_share == Approx(0.47).margin(0.02));
  CHECK(g->universe_rates.max_share <= 0.003 + 1e-12);
  REQUIRE(g->active_keys.size() == 128);
  double sum = 0;
  for (size_t i = 0; i < g->active_keys.size(); ++i) {
    sum += g->active_keys[i].rate;
    if (i > 0) CHECK(g->active_keys[i - 1].rate >= g->active_keys[i].rate);
  }
  CHECK(sum == Approx(120.0));
}

TEST_CASE("Top-K 128 at 120 QPS meets the request-level targets") {
  const WorkloadProfile p = TopK128();
  const absl::StatusOr<GeneratedWorkload> g = GenerateWorkload(p);
  REQUIRE(g.ok());
  const WorkloadStats s = Measure(*g, p);
  CHECK(s.qps == Approx(120).epsilon(0.03));
  CHECK(s.keys_with_requests == 128);
  CHECK(s.median_key_cv == Approx(1.93).margin(0.15));  // small samples read heavy tails low
  CHECK(s.multi_turn_share == Approx(0.808).margin(0.02));
  CHECK(s.mean_requests_per_thread == Approx(2.64).margin(0.08));
  CHECK(s.few_shot_break_rate == Approx(0.67).margin(0.015));
  CHECK(s.mean_input_tokens == Approx(1200).margin(60));
  CHECK(s.share_before_current_turn == Approx(0.90).margin(0.01));
  CHECK(p.context_tokens / s.mean_input_tokens == Approx(0.15).margin(0.01));
  // Counts follow the active set's rates.
  CHECK(s.gini == Approx(g->active_rates.gini).margin(0.03));
  CHECK(s.top4_share == Approx(g->active_rates.top4_share).margin(0.02));
}

TEST_CASE("Requests per key follow the key rates (Gini, top-4%, max share)") {
  WorkloadProfile p = PaperPrimaryProfile();
  p.keys = 4000;
  p.max_key_share = 0.01;
  p.qps = 1000;
  p.duration_s = 200;
  p.arrivals.process = ArrivalProcess::kPoisson;
  // Short prompts in big blocks keep this fast; the counts do not depend on them.
  p.block_size = 256;
  const absl::StatusOr<GeneratedWorkload> g = GenerateWorkload(p);
  REQUIRE(g.ok());
  const WorkloadStats s = MeasureWorkload(g->workload, {.duration_s = p.duration_s});
  REQUIRE(s.keys_with_requests > 3500);  // the coldest keys see no request in 200 s
  CHECK(s.gini == Approx(g->active_rates.gini).margin(0.02));
  CHECK(s.top4_share == Approx(g->active_rates.top4_share).margin(0.02));
  CHECK(s.max_key_share == Approx(g->active_rates.max_share).epsilon(0.1));
  CHECK(g->active_rates.gini == Approx(0.756).margin(0.03));
}

TEST_CASE("Generation is deterministic for a seed") {
  WorkloadProfile p = TopK128();
  p.duration_s = 30;
  const absl::StatusOr<GeneratedWorkload> a = GenerateWorkload(p);
  const absl::StatusOr<GeneratedWorkload> b = GenerateWorkload(p);
  p.seed = 2;
  const absl::StatusOr<GeneratedWorkload> c = GenerateWorkload(p);
  REQUIRE(a.ok());
  REQUIRE(b.ok());
  REQUIRE(c.ok());
  REQUIRE(a->workload.requests.size() == b->workload.requests.size());
  REQUIRE(!a->workload.requests.empty());
  for (size_t i = 0; i < a->workload.requests.size(); ++i) {
    const Request& x = a->workload.requests[i];
    const Request& y = b->workload.requests[i];
    REQUIRE(x.arrival_s == y.arrival_s);
    REQUIRE(x.key == y.key);
    REQUIRE(x.input_length == y.input_length);
    REQUIRE(x.output_length == y.output_length);
    REQUIRE(x.hash_ids == y.hash_ids);
    REQUIRE(x.thread_id == y.thread_id);
    REQUIRE(x.turn == y.turn);
  }
  const bool same = a->workload.requests.size() == c->workload.requests.size() &&
                    a->workload.requests[0].arrival_s == c->workload.requests[0].arrival_s;
  CHECK_FALSE(same);
}

TEST_CASE("Hash ids chain: an equal id implies equal earlier ids") {
  WorkloadProfile p = TopK128();
  p.duration_s = 60;
  const absl::StatusOr<GeneratedWorkload> g = GenerateWorkload(p);
  REQUIRE(g.ok());
  const uint32_t block = g->workload.block_size;
  // id -> (position, parent id); every occurrence must agree.
  absl::flat_hash_map<uint64_t, std::pair<size_t, uint64_t>> seen;
  uint64_t shared = 0;
  for (const Request& r : g->workload.requests) {
    REQUIRE(r.hash_ids.size() == (r.input_length + block - 1) / block);
    for (size_t i = 0; i < r.hash_ids.size(); ++i) {
      const std::pair<size_t, uint64_t> where{i, i == 0 ? 0 : r.hash_ids[i - 1]};
      const auto [it, added] = seen.try_emplace(r.hash_ids[i], where);
      if (!added) {
        REQUIRE(it->second == where);
        ++shared;
      }
    }
  }
  CHECK(shared > 0);
  // The global template is the same first blocks everywhere.
  const size_t template_blocks = p.template_tokens / block;
  for (const Request& r : g->workload.requests) {
    for (size_t i = 0; i < template_blocks; ++i) {
      REQUIRE(r.hash_ids[i] == g->workload.requests[0].hash_ids[i]);
    }
  }
}

TEST_CASE("A thread's next turn carries the previous prompt and output") {
  WorkloadProfile p = TopK128();
  p.duration_s = 60;
  const absl::StatusOr<GeneratedWorkload> g = GenerateWorkload(p);
  REQUIRE(g.ok());
  std::map<uint64_t, const Request*> last_turn;
  std::map<std::string, const Request*> last_of_key;
  uint64_t follow_ups = 0, adjacent = 0, same_prefix = 0;
  for (const Request& r : g->workload.requests) {
    const auto it = last_turn.find(r.thread_id);
    if (it != last_turn.end()) {
      const Request& prev = *it->second;
      REQUIRE(r.key == prev.key);
      REQUIRE(r.turn == prev.turn + 1);
      REQUIRE(r.arrival_s >= prev.arrival_s);
      REQUIRE(r.input_length == prev.input_length + prev.output_length + r.current_turn_length);
      ++follow_ups;
      // When the previous turn is also the key's previous request, the few-shot block stays
      // with probability 0.33, and then every full block of the previous prompt is reused.
      if (last_of_key[r.key] == &prev) {
        ++adjacent;
        const size_t full = prev.input_length / g->workload.block_size;
        if (std::equal(prev.hash_ids.begin(), prev.hash_ids.begin() + full, r.hash_ids.begin())) {
          ++same_prefix;
        }
      }
    } else {
      REQUIRE(r.turn == 1);  // no warm-up: every thread starts inside the window
    }
    last_turn[r.thread_id] = &r;
    last_of_key[r.key] = &r;
  }
  REQUIRE(follow_ups > 100);
  REQUIRE(adjacent > 100);
  const double kept = static_cast<double>(same_prefix) / static_cast<double>(adjacent);
  CHECK(kept == Approx(0.33).margin(0.05));
}

TEST_CASE("Warm-up starts the window mid-conversation") {
  WorkloadProfile p = TopK128();
  p.duration_s = 30;
  p.warmup_s = 120;
  const absl::StatusOr<GeneratedWorkload> g = GenerateWorkload(p);
  REQUIRE(g.ok());
  REQUIRE(!g->workload.requests.empty());
  CHECK(g->workload.requests.front().arrival_s >= 0);
  std::set<uint64_t> seen;
  bool late_start = false;
  for (const Request& r : g->workload.requests) {
    if (seen.insert(r.thread_id).second && r.turn > 1) late_start = true;
  }
  CHECK(late_start);
  const WorkloadStats s = Measure(*g, p);
  CHECK(s.qps == Approx(120).epsilon(0.05));
}

TEST_CASE("Per-key context sizes are lognormal, clipped and independent of the rate") {
  WorkloadProfile p = PaperPrimaryProfile();
  p.top_k = 2000;
  p.qps = 50;
  p.duration_s = 20;
  p.context_tokens = 3162;
  p.context_sigma = 1.1;
  p.context_min_tokens = 200;
  p.context_max_tokens = 50000;
  const GeneratedWorkload g = *GenerateWorkload(p);
  CHECK(g.stable_prefix_tokens == 0);
  std::vector<double> log_sizes;
  size_t clipped_low = 0, clipped_high = 0;
  for (const KeyRate& k : g.active_keys) {
    CHECK(k.context_tokens >= 200);
    CHECK(k.context_tokens <= 50000);
    clipped_low += k.context_tokens == 200;
    clipped_high += k.context_tokens == 50000;
    log_sizes.push_back(std::log(k.context_tokens));
  }
  std::sort(log_sizes.begin(), log_sizes.end());
  CHECK(std::exp(log_sizes[log_sizes.size() / 2]) == Approx(3162).epsilon(0.1));
  CHECK(clipped_low > 0);
  CHECK(clipped_high > 0);
  // Rank in rate and size are unrelated: the hottest tenth is no larger than the rest.
  double hot = 0, all = 0;
  for (size_t i = 0; i < g.active_keys.size(); ++i) {
    all += std::log(g.active_keys[i].context_tokens);
    if (i < g.active_keys.size() / 10) hot += std::log(g.active_keys[i].context_tokens);
  }
  CHECK(hot / (g.active_keys.size() / 10) == Approx(all / g.active_keys.size()).margin(0.25));
  // A key's size does not depend on the active set it is drawn in.
  WorkloadProfile narrow = p;
  narrow.top_k = 100;
  const GeneratedWorkload n = *GenerateWorkload(narrow);
  for (size_t i = 0; i < n.active_keys.size(); ++i) {
    CHECK(n.active_keys[i].key == g.active_keys[i].key);
    CHECK(n.active_keys[i].context_tokens == g.active_keys[i].context_tokens);
  }
  // Prompts carry the key's context: no prompt is shorter than template + context.
  std::map<std::string, uint32_t> context;
  for (const KeyRate& k : g.active_keys) context[k.key] = k.context_tokens;
  for (const Request& r : g.workload.requests) {
    CHECK(r.input_length > p.template_tokens + context[r.key]);
  }
  p.context_max_tokens = 100;
  CHECK_THAT(std::string(ValidateProfile(p).message()), Catch::Contains("context_max_tokens"));
  p.context_max_tokens = 0;
  p.context_sigma = -1;
  CHECK_THAT(std::string(ValidateProfile(p).message()), Catch::Contains("context_sigma"));
}

TEST_CASE("Invalid profiles name the field and the value") {
  WorkloadProfile p = PaperPrimaryProfile();
  p.top_k = 200000;
  absl::Status s = ValidateProfile(p);
  CHECK(s.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(s.message()), Catch::Contains("top_k") && Catch::Contains("200000"));
  p = PaperPrimaryProfile();
  p.qps = -3;
  s = GenerateWorkload(p).status();
  CHECK_THAT(std::string(s.message()), Catch::Contains("qps") && Catch::Contains("-3"));
  p = PaperPrimaryProfile();
  p.mean_requests_per_thread = 9;  // impossible with 19.2% single-turn requests
  CHECK_THAT(std::string(ValidateProfile(p).message()),
             Catch::Contains("mean_requests_per_thread"));
  p = PaperPrimaryProfile();
  p.few_shot_pool = 1;
  CHECK_THAT(std::string(ValidateProfile(p).message()), Catch::Contains("few_shot_break_rate"));
  p = PaperPrimaryProfile();
  p.arrivals.process = ArrivalProcess::kBootstrap;
  CHECK_THAT(std::string(ValidateProfile(p).message()), Catch::Contains("bootstrap"));
}

ArrivalOptions Renewal(ArrivalProcess process, double cv = 1) {
  ArrivalOptions options;
  options.process = process;
  options.cv = cv;
  return options;
}

std::vector<double> Arrivals(const ArrivalOptions& options, double rate, double end,
                             uint64_t seed) {
  absl::StatusOr<ArrivalSampler> sampler = ArrivalSampler::Create(options);
  REQUIRE(sampler.ok());
  Rng rng(seed);
  std::vector<double> times;
  sampler->Generate(rate, 0, end, rng, &times);
  return times;
}

TEST_CASE("Poisson and Gamma arrivals have the requested rate and CV") {
  const std::vector<double> poisson = Arrivals(Renewal(ArrivalProcess::kPoisson), 2.0, 100000, 1);
  CHECK(static_cast<double>(poisson.size()) == Approx(200000).epsilon(0.01));
  CHECK(InterArrivalCv(poisson) == Approx(1.0).margin(0.02));
  for (const double cv : {0.5, 1.93, 3.0}) {
    const std::vector<double> gamma = Arrivals(Renewal(ArrivalProcess::kGamma, cv), 2.0, 200000, 7);
    CHECK(static_cast<double>(gamma.size()) == Approx(400000).epsilon(0.03));
    CHECK(InterArrivalCv(gamma) == Approx(cv).epsilon(0.05));
    CHECK(std::is_sorted(gamma.begin(), gamma.end()));
  }
}

TEST_CASE("Arrivals start in equilibrium: no excess or shortfall at the window's start") {
  // 20,000 keys at 0.05 req/s for 10 s expect 0.5 requests each, however bursty.
  for (const double cv : {1.0, 1.93}) {
    absl::StatusOr<ArrivalSampler> s = ArrivalSampler::Create(Renewal(ArrivalProcess::kGamma, cv));
    REQUIRE(s.ok());
    Rng rng(11);
    std::vector<double> times;
    for (int k = 0; k < 20000; ++k) s->Generate(0.05, 0, 10, rng, &times);
    CHECK(static_cast<double>(times.size()) / 20000 == Approx(0.5).margin(0.03));
  }
}

TEST_CASE("Moving-block bootstrap keeps the gaps' CV and rescales to the key's rate") {
  // Measured-like gaps: Gamma with CV 2.7, in arbitrary units (mean 40).
  Rng rng(5);
  std::vector<double> gaps(22639);
  for (double& g : gaps) g = SampleGamma(1 / (2.7 * 2.7), rng) * 40 * 2.7 * 2.7;
  std::vector<double> cumulative{0};
  for (double g : gaps) cumulative.push_back(cumulative.back() + g);
  const double source_cv = InterArrivalCv(cumulative);
  const std::vector<double> times =
      Arrivals({.process = ArrivalProcess::kBootstrap, .bootstrap_gaps = gaps, .block_length = 50},
               0.5, 400000, 3);
  CHECK(static_cast<double>(times.size()) == Approx(200000).epsilon(0.05));
  CHECK(InterArrivalCv(times) == Approx(source_cv).epsilon(0.08));
  CHECK(std::is_sorted(times.begin(), times.end()));

  CHECK_FALSE(
      ArrivalSampler::Create({.process = ArrivalProcess::kBootstrap, .bootstrap_gaps = {1.0, -2.0}})
          .ok());
  CHECK_FALSE(
      ArrivalSampler::Create({.process = ArrivalProcess::kBootstrap, .bootstrap_gaps = {0, 0}})
          .ok());
}

TEST_CASE("The generator's knobs move the measured figures") {
  WorkloadProfile p = TopK128();
  p.duration_s = 120;
  p.arrivals.process = ArrivalProcess::kPoisson;
  p.few_shot_break_rate = 0.2;
  p.multi_turn_share = 0.5;
  p.mean_requests_per_thread = 1.8;
  const absl::StatusOr<GeneratedWorkload> g = GenerateWorkload(p);
  REQUIRE(g.ok());
  const WorkloadStats s = Measure(*g, p);
  CHECK(s.median_key_cv == Approx(1.0).margin(0.1));
  CHECK(s.few_shot_break_rate == Approx(0.2).margin(0.02));
  CHECK(s.multi_turn_share == Approx(0.5).margin(0.03));
  CHECK(s.mean_requests_per_thread == Approx(1.8).margin(0.08));
}

}  // namespace
}  // namespace cacheroute::workload
