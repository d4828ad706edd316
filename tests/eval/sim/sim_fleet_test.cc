// Tests for tools/eval/sim/fleet: determinism, each policy's routing as seen in the dispatch
// records (Sticky pins keys; CacheRoute routes admitted keys into their planned sets once a plan
// exists), metric accounting against the engines' own counters, failures, ablations and config
// errors.
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "cacheroute/dataplane/key_id.h"
#include "cacheroute/dataplane/key_memory.h"
#include "tests/support/require_ok.h"
#include "tools/eval/sim/fleet.h"

namespace cacheroute::sim {
namespace {

struct WorkloadShape {
  uint32_t keys = 200;
  double qps = 40;
  double duration_s = 60;
  uint64_t seed = 11;
  uint32_t hot_keys = 0;  // this many keys get half of all traffic
  uint32_t max_output = 100;
};

// Poisson arrivals over Zipf-like key popularity. A prompt is 8 template blocks shared by all
// keys, 40 blocks of per-key context and 16 blocks unique to the request, plus 5 tokens.
std::vector<SimRequest> MakeRequests(const WorkloadShape& shape) {
  std::mt19937_64 rng(shape.seed);
  std::vector<double> weights(shape.keys);
  for (uint32_t k = 0; k < shape.keys; ++k) weights[k] = 1.0 / (k + 1);
  std::discrete_distribution<uint32_t> key_of(weights.begin(), weights.end());
  std::uniform_int_distribution<uint32_t> hot_of(0, std::max<uint32_t>(1, shape.hot_keys) - 1);
  std::exponential_distribution<double> gap(shape.qps);
  std::vector<SimRequest> requests;
  for (double t = gap(rng); t < shape.duration_s; t += gap(rng)) {
    const uint32_t key = shape.hot_keys > 0 && rng() % 2 == 0 ? hot_of(rng) : key_of(rng);
    SimRequest r{.arrival_s = t,
                 .key_id = dataplane::KeyId("key-" + std::to_string(key)),
                 .input_length = 64 * 16 + 5,
                 .output_length = 20 + static_cast<uint32_t>(rng() % (shape.max_output - 19)),
                 .block_size = 16,
                 .hash_ids = {}};
    for (uint64_t i = 0; i < 8; ++i) r.hash_ids.push_back(1 + i);
    for (uint64_t i = 0; i < 40; ++i) r.hash_ids.push_back((key + 1) * 1000 + i);
    for (uint64_t i = 0; i < 16; ++i) r.hash_ids.push_back(rng());
    requests.push_back(std::move(r));
  }
  return requests;
}

// The fleet the tests run by default: 8 engines of the 8B profile behind 2 gateways, planning
// every 5 s with W = 8.
struct FleetShape {
  uint32_t engines = 8;
  uint32_t gateways = 2;
  const char* profile = "llama-8b-h100";
  double control_interval_s = 5;
  uint64_t slots_per_destination = 8;
};

FleetConfig Config(const std::string& policy, const FleetShape& shape = {}) {
  FleetConfig config;
  config.policy = policy;
  config.engines = shape.engines;
  config.gateways = shape.gateways;
  config.profile = *FindEngineProfile(shape.profile);
  config.seed = 3;
  config.control_interval_s = shape.control_interval_s;
  config.slots_per_destination = shape.slots_per_destination;
  return config;
}

RunResult MustRun(const FleetConfig& config, const std::vector<SimRequest>& requests) {
  return cacheroute::testing::RequireOk(RunFleet(config, requests));
}

TEST_CASE("the same config and requests give the same result, for every policy") {
  const std::vector<SimRequest> requests = MakeRequests({});
  for (const std::string& policy : dataplane::BuiltinPolicies().Names()) {
    INFO(policy);
    FleetConfig config = Config(policy);
    config.gateway_assignment = GatewayAssignment::kRandom;
    config.record_dispatches = true;
    const RunResult a = MustRun(config, requests);
    const RunResult b = MustRun(config, requests);
    CHECK(a.policy == policy);
    CHECK(a.requests == requests.size());
    CHECK(a.completed == b.completed);
    CHECK(a.ttft_p50_s == b.ttft_p50_s);
    CHECK(a.ttft_p99_s == b.ttft_p99_s);
    CHECK(a.e2e_p99_s == b.e2e_p99_s);
    CHECK(a.kv_hit == b.kv_hit);
    CHECK(a.imbalance == b.imbalance);
    CHECK(a.simulated_s == b.simulated_s);
    CHECK(a.plans == b.plans);
    REQUIRE(a.dispatches.size() == b.dispatches.size());
    for (size_t i = 0; i < a.dispatches.size(); ++i) {
      REQUIRE(a.dispatches[i].destination == b.dispatches[i].destination);
    }
    for (uint32_t d = 0; d < config.engines; ++d) {
      CHECK(a.engines[d].stats.iterations == b.engines[d].stats.iterations);
    }
    // A different seed changes the randomised policies' choices.
    if (policy == "flat-lb") {
      config.seed = 4;
      const RunResult c = MustRun(config, requests);
      size_t moved = 0;
      for (size_t i = 0; i < a.dispatches.size(); ++i) {
        moved += a.dispatches[i].destination != c.dispatches[i].destination;
      }
      CHECK(moved > 0);
    }
  }
}

TEST_CASE("shedding: an overloaded fleet sheds what it cannot serve and serves the rest in time") {
  const std::vector<SimRequest> requests = MakeRequests({.qps = 400, .duration_s = 30});
  FleetConfig config = Config("cacheroute", {.engines = 2, .gateways = 1});
  config.goodput_slo_s = 1;
  const RunResult off = MustRun(config, requests);
  config.shed = true;
  config.admission = {.saturation_tokens = 2000,
                      .queue_capacity = 16,
                      .queue_timeout = std::chrono::milliseconds(500),
                      .retry_after = std::chrono::seconds(1)};
  const RunResult on = MustRun(config, requests);
  INFO("off: p99 " << off.ttft_p99_s << " goodput " << off.goodput_qps << " failed " << off.failed
                   << "; on: p99 " << on.ttft_p99_s << " goodput " << on.goodput_qps << " shed "
                   << on.shed << " failed " << on.failed);
  CHECK(off.shed == 0);
  CHECK(on.shed > 0);
  CHECK(on.completed + on.failed + on.shed == on.requests);
  CHECK(off.completed + off.failed == off.requests);
  CHECK(on.within_slo <= on.completed);
  CHECK(on.goodput_qps > off.goodput_qps);
  CHECK(on.ttft_p99_s < off.ttft_p99_s);
  // Deterministic on simulated time.
  const RunResult again = MustRun(config, requests);
  CHECK(again.shed == on.shed);
  CHECK(again.within_slo == on.within_slo);
}

TEST_CASE("the precise policies: every gateway subscribes to every engine's KV events") {
  const std::vector<SimRequest> requests = MakeRequests({});
  for (const std::string policy : {"llm-d-precise", "dynamo-kv-exact"}) {
    INFO(policy);
    FleetConfig config = Config(policy);
    config.gateways = 3;
    const RunResult fed = MustRun(config, requests);
    CHECK(fed.kv_event_subscriptions == 3 * 8);
    CHECK(fed.kv_events > 0);
    CHECK(fed.kv_event_bytes_per_s > 0);
    // Events that arrive after the run: the exact index stays empty, so dynamo-kv-exact sees no
    // overlap (llm-d-precise only its speculative entries), and hits less.
    config.kv_event_delay_s = 1e6;
    const RunResult late = MustRun(config, requests);
    CHECK(late.kv_hit < fed.kv_hit);
  }
  const RunResult other = MustRun(Config("llm-d"), requests);
  CHECK(other.kv_event_subscriptions == 0);
  CHECK(other.kv_events == 0);
  FleetConfig bad = Config("llm-d-precise");
  bad.kv_event_delay_s = -1;
  CHECK(RunFleet(bad, requests).status().message() ==
        "fleet config kv_event_delay_s: must be finite and >= 0, got -1");
}

TEST_CASE("Sticky sends every request of a key to one engine") {
  const std::vector<SimRequest> requests = MakeRequests({});
  FleetConfig config = Config("sticky");
  config.record_dispatches = true;
  const RunResult result = MustRun(config, requests);
  std::map<uint64_t, std::set<uint32_t>> destinations;
  for (size_t i = 0; i < requests.size(); ++i) {
    destinations[requests[i].key_id].insert(result.dispatches[i].destination);
  }
  for (const auto& [key, set] : destinations) CHECK(set.size() == 1);
  CHECK(destinations.size() > 20);
}

TEST_CASE("CacheRoute falls back to P2C until the first plan, then follows the table") {
  const std::vector<SimRequest> requests = MakeRequests({});
  FleetConfig config = Config("cacheroute");
  // The paper's Algorithm 1 and dispatch ("cacheroute-paper"): sets of k_b = 1, no spill.
  UseAlgorithm(config, planner::Algorithm::kCacheRoutePaper);
  CHECK(config.policy == "cacheroute-paper");
  CHECK(config.dispatch.rule == dataplane::DispatchRule::kPaper);
  config.record_dispatches = true;
  const RunResult result = MustRun(config, requests);
  REQUIRE(result.plans >= 10);  // every 5 s over 60 s of arrivals
  REQUIRE(result.plan_records.size() == result.plans);
  CHECK(result.plan_records[0].time == 5.0);

  size_t planned = 0, checked_plan = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const DispatchRecord& d = result.dispatches[i];
    // The plan in force: the last one made at or before the arrival.
    const PlanRecord* plan = nullptr;
    for (const PlanRecord& p : result.plan_records) {
      if (p.time <= d.time) plan = &p;
    }
    if (plan == nullptr) {
      CHECK(d.reason == dataplane::Reason::kNoTable);
      continue;
    }
    const dataplane::TableEntry* entry = nullptr;
    for (const dataplane::TableEntry& e : plan->entries) {
      if (e.key_id == requests[i].key_id) entry = &e;
    }
    if (entry == nullptr) {
      CHECK(d.reason == dataplane::Reason::kNotAdmitted);
      continue;
    }
    ++checked_plan;
    CHECK(d.reason == dataplane::Reason::kPlanned);
    CHECK(std::count(entry->destinations.begin(), entry->destinations.end(), d.destination) == 1);
    planned += d.reason == dataplane::Reason::kPlanned;
  }
  CHECK(checked_plan > requests.size() / 2);
  CHECK(result.planned == planned);
  // Slot capacity R·W = 64 keys of k_b = 1.
  CHECK(result.plan_records.back().entries.size() == 64);
}

TEST_CASE("byte-aware planning: gateways measure each key's prefix, the plan fits the budget") {
  // Every request of a key shares its 48 leading blocks (768 tokens) with the key's previous one;
  // the gateways' KeySizes compare prompts at PrefixMemory's grid positions, so they measure the
  // deepest grid block below 48: block 40, 656 tokens.
  const std::vector<SimRequest> requests = MakeRequests({});
  const uint32_t grid = dataplane::PrefixMemory::GridCount(48);
  const double reusable = (dataplane::PrefixMemory::GridBlock(grid - 1) + 1) * 16.0;
  REQUIRE(reusable == 656);
  FleetConfig config = Config("cacheroute");
  config.record_dispatches = true;
  // 1% of the 8B profile's 28,000 blocks per destination: 4,480 tokens, 35,840 over 8 engines.
  config.plan_kv_budget_share = 0.01;
  const RunResult result = MustRun(config, requests);
  REQUIRE(result.plans >= 10);
  const double budget = 0.01 * 28000 * 16 * 8;
  for (const PlanRecord& plan : result.plan_records) {
    double used = 0;
    for (const dataplane::TableEntry& e : plan.entries) used += reusable * e.destinations.size();
    CHECK(used <= budget);
    if (plan.time > 20) CHECK(used > budget - reusable * 8);  // nearly full once keys are measured
  }
  // The slot model fills its R·W = 64 slots instead.
  config.plan_kv_budget_share = 0;
  const RunResult by_slots = MustRun(config, requests);
  size_t slots = 0;
  for (const auto& e : by_slots.plan_records.back().entries) slots += e.destinations.size();
  CHECK(slots == 64);
  config.plan_kv_budget_share = 1.5;
  CHECK_THAT(std::string(RunFleet(config, requests).status().message()),
             Catch::Contains("plan_kv_budget_share"));
}

TEST_CASE("the served KV hit equals the engines' own prefix-cache counters") {
  const std::vector<SimRequest> requests = MakeRequests({});
  for (const std::string policy : {"flat-lb", "cacheroute"}) {
    INFO(policy);
    FleetConfig config = Config(policy);
    config.engine.timeout_s = kForever;
    const RunResult result = MustRun(config, requests);
    REQUIRE(result.completed == requests.size());
    uint64_t hits = 0, queries = 0, admitted = 0, work = 0, prefill = 0;
    for (const EngineResult& e : result.engines) {
      hits += e.cache.hit_tokens;
      queries += e.cache.query_tokens;
      admitted += e.stats.admitted;
      work += e.prefill_work_tokens;
      prefill += e.stats.prefill_tokens;
    }
    CHECK(admitted == requests.size());
    CHECK(queries == requests.size() * (64 * 16 + 5));
    CHECK(result.kv_hit == Approx(static_cast<double>(hits) / queries).epsilon(1e-12));
    CHECK(work == queries - hits);  // prefill work: the uncached prompt tokens
    CHECK(prefill == work);
    CHECK(result.kv_hit > 0.1);  // the shared template alone is 8 of 64 blocks
    CHECK(result.failed == 0);
    CHECK(result.imbalance >= 1.0);
  }
}

TEST_CASE("affinity raises the KV hit over flat load balancing") {
  const std::vector<SimRequest> requests = MakeRequests({.keys = 400, .qps = 60});
  FleetConfig flat = Config("flat-lb"), planned = Config("cacheroute");
  flat.warmup_s = planned.warmup_s = 20;
  // A small cache (2,000 blocks; 400 keys × 40 context blocks = 16,000) so spreading keys hurts.
  flat.profile.kv_blocks = planned.profile.kv_blocks = 2000;
  const RunResult a = MustRun(flat, requests);
  const RunResult b = MustRun(planned, requests);
  CHECK(b.kv_hit > a.kv_hit);
  CHECK(b.requests == a.requests);
  CHECK(b.requests < requests.size());  // the warm-up is excluded
}

TEST_CASE("overload shows up as failures: rejections at the queue cap and timeouts") {
  const std::vector<SimRequest> requests = MakeRequests({.qps = 400, .duration_s = 20});
  FleetConfig config = Config("flat-lb");
  config.engines = 2;
  config.engine = {.max_waiting = 50, .timeout_s = 5};
  const RunResult result = MustRun(config, requests);
  CHECK(result.rejected > 0);
  CHECK(result.timed_out > 0);
  CHECK(result.failed == result.rejected + result.timed_out);
  CHECK(result.completed + result.failed == result.requests);
  CHECK(result.failure_rate == Approx(static_cast<double>(result.failed) / result.requests));
  CHECK(result.e2e_p99_s <= 5.0 + 0.5);  // nobody completes long after the timeout
}

TEST_CASE("ablations: affinity-only plans one destination per key, replication more for hot keys") {
  const std::vector<SimRequest> requests = MakeRequests({.hot_keys = 2});
  FleetConfig config = Config("cacheroute");
  config.record_dispatches = true;
  config.q_cap = 4;  // each hot key carries ≈ 10 QPS
  config.rate_smoothing_s = 0.001;

  config.ablation = PlanAblation::kAffinityOnly;
  const RunResult affinity = MustRun(config, requests);
  CHECK(affinity.policy == "cacheroute+affinity");
  for (const dataplane::TableEntry& e : affinity.plan_records.back().entries) {
    CHECK(e.destinations.size() == 1);
  }

  config.ablation = PlanAblation::kReplication;
  const RunResult replication = MustRun(config, requests);
  CHECK(replication.policy == "cacheroute+replication");
  CHECK(replication.plan_records.back().entries[0].destinations.size() >= 2);

  config.ablation = PlanAblation::kFull;
  const RunResult full = MustRun(config, requests);
  CHECK(full.policy == "cacheroute");
  CHECK(full.plan_records.back().entries[0].destinations.size() >= 2);
  CHECK(full.q_cap == 4);

  config.ablation = PlanAblation::kNone;
  const RunResult none = MustRun(config, requests);
  CHECK(none.policy == "cacheroute+none");
  CHECK(none.plans == 0);
  CHECK(none.plan_records.empty());
  CHECK(none.completed == full.completed);  // the dispatch alone still serves every request
  CHECK(none.kv_hit > 0);                   // and finds warm destinations without a plan
}

TEST_CASE("q_cap is calibrated from the profile when not given") {
  const std::vector<SimRequest> requests = MakeRequests({});
  FleetConfig config = Config("cacheroute");
  const RunResult result = MustRun(config, requests);
  double prompt = 0, output = 0;
  for (const SimRequest& r : requests) {
    prompt += r.input_length;
    output += r.output_length;
  }
  const double n = static_cast<double>(requests.size());
  CHECK(result.q_cap == Approx(CalibrateQCap(config.profile, prompt / n, prompt / n, output / n)));
}

TEST_CASE("hash ids of larger blocks become 16-token blocks; partial blocks are not cached") {
  const SimRequest a{
      .input_length = 150, .output_length = 1, .block_size = 64, .hash_ids = {7, 8, 9}};
  std::vector<uint64_t> ha, hb;
  AppendSimRequestBlockHashes(a, ha);
  CHECK(ha.size() == 9);  // 150 / 16 = 9 full blocks: ids 7 (4 blocks), 8 (4), 9 (1 of 4)
  const SimRequest b{.input_length = 500, .output_length = 1, .block_size = 64, .hash_ids = {7, 5}};
  AppendSimRequestBlockHashes(b, hb);
  CHECK(hb.size() == 8);                                      // the hash ids cover 128 tokens
  CHECK(std::equal(ha.begin(), ha.begin() + 4, hb.begin()));  // same first id: same 4 blocks
  CHECK(ha[4] != hb[4]);
  CHECK(ha[0] != ha[1]);  // blocks within one id differ
}

TEST_CASE("routing precision: 1 when sent to the engine holding the prefix, 0 elsewhere") {
  // Two engines; request 0 (key "first") caches its prompt where Sticky sends it and finishes long
  // before request 1, with the same prompt under another key. Only request 1 counts: no engine
  // holds any of request 0's prompt when it arrives. Which engine a key lands on is Sticky's hash,
  // so the keys are tried until both outcomes are seen.
  FleetConfig config = Config("sticky", {.engines = 2, .gateways = 1});
  config.record_dispatches = true;
  auto request = [](double t, const std::string& key) {
    return SimRequest{.arrival_s = t,
                      .key_id = dataplane::KeyId(key),
                      .input_length = 32 * 16,
                      .output_length = 4,
                      .block_size = 16,
                      .hash_ids = std::vector<uint64_t>{11, 12, 13, 14, 15, 16, 17, 18}};
  };
  std::set<double> seen;
  for (int k = 0; k < 16 && seen.size() < 2; ++k) {
    const std::vector<SimRequest> requests = {request(0, "first"),
                                              request(100, "second-" + std::to_string(k))};
    const RunResult r = MustRun(config, requests);
    CHECK(r.precision_requests == 1);
    const bool same = r.dispatches[0].destination == r.dispatches[1].destination;
    CHECK(r.routing_precision == (same ? 1.0 : 0.0));
    CHECK((r.kv_hit > 0) == same);
    seen.insert(r.routing_precision);
  }
  CHECK(seen == std::set<double>{0.0, 1.0});

  // No engine holds any prefix of a lone request: no request qualifies.
  const RunResult alone = MustRun(config, {request(0, "first")});
  CHECK(alone.precision_requests == 0);
  CHECK(std::isnan(alone.routing_precision));
}

TEST_CASE("bad configs and requests are rejected with the field and the value named") {
  const std::vector<SimRequest> requests = MakeRequests({.duration_s = 2});
  auto message = [&](const FleetConfig& config, const std::vector<SimRequest>& rs) {
    absl::StatusOr<RunResult> r = RunFleet(config, rs);
    REQUIRE_FALSE(r.ok());
    CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
    return std::string(r.status().message());
  };
  FleetConfig config = Config("flat-lb");
  config.engines = 0;
  CHECK(message(config, requests) == "fleet config engines: must be >= 1, got 0");
  config = Config("cacheroute");
  config.control_interval_s = 0;
  CHECK(message(config, requests).find("control_interval_s") != std::string::npos);
  config = Config("flat-lb");
  config.profile.kv_blocks = 0;
  CHECK(message(config, requests).find("kv_blocks") != std::string::npos);
  config = Config("flat-lb");
  config.engine.timeout_s = -1;
  CHECK(message(config, requests).find("timeout_s") != std::string::npos);

  std::vector<SimRequest> bad = requests;
  bad[3].block_size = 20;
  CHECK(message(Config("flat-lb"), bad) ==
        "requests[3].block_size must be a positive multiple of 16, got 20");
  bad = requests;
  bad[2].arrival_s = -1;
  CHECK(message(Config("flat-lb"), bad).find("requests[2].arrival_s") != std::string::npos);
  bad = requests;
  bad[1].output_length = 0;
  CHECK(message(Config("flat-lb"), bad).find("requests[1].output_length") != std::string::npos);
  // Policies by the registry's canonical names only.
  config = Config("round-robin");
  CHECK(message(config, requests) ==
        "fleet config policy: must be one of flat-lb, sticky, chwbl, dualmap, preble, dynamo-kv, "
        "llm-d, cacheroute, cacheroute-paper, prefix-hash, llm-d-precise, dynamo-kv-exact, got "
        "\"round-robin\"");
  config = Config("flatlb");
  CHECK(message(config, requests).find("got \"flatlb\"") != std::string::npos);
  config = Config("cacheroute");
  config.dispatch.queue_wait = -1;
  CHECK(message(config, requests) ==
        "fleet config dispatch.queue_wait: must be finite and >= 0, got -1");
  // The baselines' parameters are the registry factories' to check.
  config = Config("chwbl");
  config.parameters.chwbl_epsilon = -1;
  CHECK(message(config, requests).find("chwbl_epsilon") != std::string::npos);
}

// Not a test: prints the simulator's speed at the primary study's scale (30 engines of the 70B
// profile, 120 QPS for 300 s). Run with: sim_fleet_test "[.benchmark]"
TEST_CASE("simulated requests per second at the study's scale", "[.benchmark]") {
  const std::vector<SimRequest> requests =
      MakeRequests({.keys = 128824, .qps = 120, .duration_s = 300, .max_output = 280});
  for (const std::string& policy : dataplane::BuiltinPolicies().Names()) {
    FleetConfig config = Config(policy, {.engines = 30,
                                         .gateways = 4,
                                         .profile = "llama-70b-fp8-tp2-h100",
                                         .control_interval_s = 10,
                                         .slots_per_destination = 64});
    config.warmup_s = 60;
    const RunResult r = MustRun(config, requests);
    std::printf(
        "%-11s %6zu requests  wall %.2f s  %8.0f simulated requests/s  simulated %.0f s  "
        "ttft p50 %.3f p99 %.3f s  kv hit %.3f  imbalance %.2f  failed %.4f  planned %.3f\n",
        r.policy.c_str(), requests.size(), r.wall_s, r.sim_requests_per_s, r.simulated_s,
        r.ttft_p50_s, r.ttft_p99_s, r.kv_hit, r.imbalance, r.failure_rate,
        static_cast<double>(r.planned) / r.requests);
  }
}

TEST_CASE("max_plans holds the last plan; stickiness cuts the churn between plans") {
  const std::vector<SimRequest> requests = MakeRequests({.duration_s = 60});
  FleetConfig config = Config("cacheroute");
  config.record_dispatches = true;
  const RunResult every = MustRun(config, requests);
  CHECK(every.plans >= 10);  // every 5 s for 60 s
  CHECK(every.plan_churn > 0);

  config.max_plans = 1;
  const RunResult held = MustRun(config, requests);
  CHECK(held.plans == 1);
  CHECK(held.plan_churn == 0);
  REQUIRE(held.plan_records.size() == 1);
  CHECK(held.plan_records[0].time == config.control_interval_s);
  // Every request of an admitted key after the plan is planned; it went into its key's planned
  // set unless marked spilled, and most did.
  std::map<uint64_t, std::set<uint32_t>> planned;
  for (const dataplane::TableEntry& e : held.plan_records[0].entries) {
    planned[e.key_id].insert(e.destinations.begin(), e.destinations.end());
  }
  int in_set = 0, spilled = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (requests[i].arrival_s < config.control_interval_s) continue;
    auto it = planned.find(requests[i].key_id);
    if (it == planned.end()) continue;
    CHECK(held.dispatches[i].reason == dataplane::Reason::kPlanned);
    CHECK(it->second.contains(held.dispatches[i].destination) != held.dispatches[i].spilled);
    ++(held.dispatches[i].spilled ? spilled : in_set);
  }
  CHECK(in_set > 4 * spilled);

  config.max_plans = 0;
  config.stickiness = 0.5;
  const RunResult sticky = MustRun(config, requests);
  CHECK(sticky.plans == every.plans);
  CHECK(sticky.plan_churn < every.plan_churn);

  config.stickiness = -1;
  absl::StatusOr<RunResult> bad = RunFleet(config, requests);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("stickiness") != std::string_view::npos);
}

}  // namespace
}  // namespace cacheroute::sim
