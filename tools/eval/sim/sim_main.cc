// cacheroute-sim: the fleet simulator's command line (issue 5). Runs the paper's studies over
// their policies × gateway counts × load ladder × seeds and writes the report
// (tools/eval/sim/study/report.h), or one run and prints its metrics. docs/simulator.md, "Studies",
// has the commands and what they show.
//
//   cacheroute-sim --study NAME[,…] [--trace FILE] [--seeds 2,3,4] [--gateways 1,4] [--duration S]
//                  [--loads 30,60,…] [--out DIR] [--jobs N] [--config FILE]
//   cacheroute-sim run --policy P --qps Q [--study NAME | --config FILE] [--trace FILE] [--seed S]
//                      [--gateways G] [--duration S]
//   cacheroute-sim calibrate [--profile NAME] [--isl N] [--osl N[,N…]]
//   cacheroute-sim bound [--study NAME | --config FILE] [--trace FILE] [--qps Q] [--seed S]
//                        [--hit H[,H…]]
//
// --help lists the built-in studies (builtin_studies.h) and the policy labels (policy_labels.h).
// Exit codes: 0 ok, 1 a run or the report failed, 2 bad flags or a bad study file.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "tools/eval/main_helpers.h"
#include "tools/eval/sim/calibration.h"
#include "tools/eval/sim/engine_profile.h"
#include "tools/eval/sim/study/analyses.h"
#include "tools/eval/sim/study/builtin_studies.h"
#include "tools/eval/sim/study/flag_lists.h"
#include "tools/eval/sim/study/fleet_runner.h"
#include "tools/eval/sim/study/policy_labels.h"
#include "tools/eval/sim/study/report.h"
#include "tools/eval/sim/study/study_file.h"
#include "tools/eval/sim/study/sweep.h"
#include "tools/eval/sim/study/validation.h"
#include "tools/eval/sim/study/workloads.h"

namespace {

namespace study = cacheroute::sim::study;

constexpr cacheroute::eval::Program kProgram{"cacheroute-sim"};

// The study named by --study (or --config), with the command-line overrides applied.
struct Overrides {
  std::string seeds, loads, gateways;
  double duration_s = 0;  // 0: the study's
  std::string trace;      // the trace of a trace-driven study; empty: the study's
};

absl::StatusOr<study::StudyConfig> Configure(const std::string& name, const std::string& config,
                                             const Overrides& o) {
  CACHEROUTE_ASSIGN_OR_RETURN(
      study::StudyConfig c, config.empty() ? study::FindStudy(name) : study::LoadStudyFile(config));
  if (!o.seeds.empty()) {
    CACHEROUTE_ASSIGN_OR_RETURN(c.seeds, study::ParseSeedList(o.seeds, "--seeds"));
  }
  if (!o.loads.empty()) {
    CACHEROUTE_ASSIGN_OR_RETURN(c.loads, study::ParseNumberList(o.loads, "--loads"));
  }
  if (!o.gateways.empty()) {
    CACHEROUTE_ASSIGN_OR_RETURN(c.gateway_counts, study::ParseCountList(o.gateways, "--gateways"));
  }
  if (o.duration_s > 0) c.duration_s = o.duration_s;
  if (!o.trace.empty() && c.trace.enabled) c.trace.path = o.trace;
  if (absl::Status s = study::ValidateStudy(c); !s.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(!o.seeds.empty() || !o.loads.empty() || !o.gateways.empty()
                         ? "after the command-line overrides: "
                         : "",
                     s.message()));
  }
  // A missing or malformed trace is a bad argument: report it before any run starts.
  if (c.trace.enabled) {
    if (absl::StatusOr<cacheroute::workload::Workload> t = study::ReadStudyTrace(c); !t.ok()) {
      return t.status();
    }
  }
  return c;
}

// --trace given but no study to use it: say so rather than ignore it.
absl::Status CheckTraceUsed(const std::vector<study::StudyConfig>& configs, const Overrides& o) {
  if (o.trace.empty() || std::any_of(configs.begin(), configs.end(),
                                     [](const study::StudyConfig& c) { return c.trace.enabled; })) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "--trace: no study here replays a trace (",
      absl::StrJoin(configs, ", ",
                    [](std::string* out, const study::StudyConfig& c) { out->append(c.name); }),
      "); use --study trace or a study file with trace:"));
}

int RunOne(const std::string& study_name, const std::string& config, const std::string& policy,
           double qps, uint64_t seed, const Overrides& overrides) {
  absl::StatusOr<study::StudyConfig> c = Configure(study_name, config, overrides);
  if (!c.ok()) return kProgram.Fail(2, c.status().message());
  if (absl::Status s = CheckTraceUsed({*c}, overrides); !s.ok()) {
    return kProgram.Fail(2, s.message());
  }
  if (c->gateway_counts.size() > 1 && !overrides.gateways.empty()) {
    return kProgram.Fail(
        2, absl::StrCat("--gateways: one count for a run, got \"", overrides.gateways, "\""));
  }
  c->policies = {policy};
  c->gateway_counts = {c->gateway_counts.front()};  // the study's first unless --gateways says
  c->loads = {qps};
  c->seeds = {seed};
  if (absl::Status s = study::ValidateStudy(*c); !s.ok()) {
    return kProgram.Fail(2, absl::StrCat("--policy/--qps: ", s.message()));
  }
  absl::StatusOr<study::StudyResult> r =
      study::RunStudy(*c, study::MakeFleetRunner(), {.jobs = 1, .progress = nullptr});
  if (!r.ok()) return kProgram.Fail(1, r.status().message());
  const study::RunRecord& x = r->runs.front();
  std::cout << absl::StrFormat(
      "study           %s (profile %s, R = %d, top-K %d)\n"
      "policy          %s\ngateways        %d\noffered_qps     %g\nseed            %d\n"
      "ttft_p50_s      %.4f\nttft_p90_s      %.4f\nttft_p99_s      %.4f\n"
      "e2e_p50_s       %.4f\ne2e_p99_s       %.4f\nkv_hit          %.4f\nprecision       %.4f\n"
      "imbalance       %.4f\n"
      "requests        %d\ncompleted       %d\nfailed          %d\nfailure_rate    %.4f\n"
      "throughput_rps  %.3f\nshed            %d\nshed_fraction   %.4f\n"
      "within_slo      %d\ngoodput_qps     %.3f\n"
      "simulated_s     %.1f\nwall_s          %.2f\nsim_requests/s  %.0f\n",
      c->name, c->profile, c->destinations, c->workload.top_k, x.policy, x.gateways, x.offered_qps,
      x.seed, x.ttft_p50_s, x.ttft_p90_s, x.ttft_p99_s, x.e2e_p50_s, x.e2e_p99_s, x.kv_hit,
      x.routing_precision, x.imbalance, x.requests, x.completed, x.failed, x.failure_rate,
      x.throughput_rps, x.shed, x.requests > 0 ? static_cast<double>(x.shed) / x.requests : 0.0,
      x.within_slo, x.goodput_qps, x.simulated_s, x.wall_s,
      x.wall_s > 0 ? x.simulated_requests / x.wall_s : 0.0);
  if (x.kv_event_subscriptions > 0) {
    std::cout << absl::StrFormat("kv_event_subscriptions %d\nkv_event_bytes_per_s   %.0f\n",
                                 x.kv_event_subscriptions, x.kv_event_bytes_per_s);
  }
  if (!x.gate_state.empty()) {
    std::cout << absl::StrFormat("gate_state      %s\ngate_changes    %d\ntable_arm_share %.3f\n",
                                 x.gate_state, x.gate_changes, x.table_arm_share);
    std::cout << "gate_history    " << study::GateHistoryText(x.gate_history) << "\n";
  }
  return 0;
}

// The fleet's analytic throughput ceiling (docs/simulator.md, "What limits capacity"): R times one
// destination's SaturationQps at the workload's mean lengths, for each KV hit in `hits` and for
// the reuse ceiling, the hit one engine with an unbounded cache would have (a prompt block is a
// hit when any earlier request published the same chained block). No router can sustain more than
// the ceiling at the hit it reaches; queueing puts every SLO knee below it.
int Bound(const std::string& study_name, const std::string& config, double qps, uint64_t seed,
          const std::string& hit_list, const Overrides& overrides) {
  namespace sim = cacheroute::sim;
  absl::StatusOr<study::StudyConfig> c = Configure(study_name, config, overrides);
  if (!c.ok()) return kProgram.Fail(2, c.status().message());
  std::vector<double> hits;
  if (!hit_list.empty()) {
    absl::StatusOr<std::vector<double>> h = study::ParseNumberList(hit_list, "--hit");
    if (!h.ok()) return kProgram.Fail(2, h.status().message());
    for (double x : *h) {
      if (!(x >= 0 && x < 1)) {
        return kProgram.Fail(2, absl::StrFormat("--hit: must be in [0, 1), got %g", x));
      }
    }
    hits = *h;
  }
  absl::StatusOr<sim::EngineProfile> profile = sim::FindEngineProfile(c->profile);
  if (!profile.ok()) return kProgram.Fail(2, profile.status().message());
  absl::StatusOr<cacheroute::workload::Workload> w = study::BuildRunWorkload(*c, qps, seed);
  if (!w.ok()) return kProgram.Fail(2, w.status().message());
  const study::WorkloadReuse r = study::MeasureReuse(*w);
  const double reuse = r.reuse;
  hits.insert(hits.begin(), 0.0);
  std::cout << absl::StrFormat(
      "study           %s (profile %s, R = %d)\nrequests        %d\nmean_prompt     %.0f\n"
      "mean_output     %.0f\nreuse_ceiling   %.4f (KV hit of one engine with an unbounded cache)\n"
      "%-8s %-16s %s\n",
      c->name, c->profile, c->destinations, w->requests.size(), r.mean_prompt_tokens,
      r.mean_output_tokens, reuse, "kv_hit", "ceiling_qps",
      "(R × one destination's saturation rate)");
  const uint32_t kv_blocks = c->fleet.kv_blocks > 0 ? c->fleet.kv_blocks : profile->kv_blocks;
  const double fleet_kv = static_cast<double>(kv_blocks) * sim::kBlockTokens * c->destinations;
  const study::BudgetCeiling whole = study::MeasureBudgetCeiling(*w, fleet_kv);
  const study::BudgetCeiling reserved =
      study::MeasureBudgetCeiling(*w, fleet_kv * study::kKvBudgetShare);
  // Each hit once, with what it is (several ceilings coincide when every prefix fits).
  std::vector<std::pair<double, std::string>> rows;
  for (double h : hits) rows.emplace_back(h, "");
  rows.emplace_back(reuse, "reuse ceiling");
  rows.emplace_back(whole.reuse, "budget ceiling (the whole KV)");
  rows.emplace_back(reserved.reuse,
                    absl::StrFormat("budget ceiling (%g of the KV)", study::kKvBudgetShare));
  std::sort(rows.begin(), rows.end());
  for (size_t i = 0; i < rows.size();) {
    const double h = rows[i].first;
    std::vector<std::string> what;
    for (; i < rows.size() && rows[i].first == h; ++i) {
      if (!rows[i].second.empty()) what.push_back(rows[i].second);
    }
    const double q = sim::SaturationQps(*profile, r.mean_prompt_tokens,
                                        (1 - h) * r.mean_prompt_tokens, r.mean_output_tokens);
    std::cout << absl::StrFormat("%-8.4f %-16.1f %s\n", h, c->destinations * q,
                                 absl::StrJoin(what, ", "));
  }
  std::cout << absl::StrFormat(
      "prefixes        %d keys, %.0f reusable tokens in all; fleet KV %.0f tokens (%d blocks x %d "
      "destinations); keys whose prefix fits whole: %d (the whole KV), %d (%g of it)\n",
      whole.keys, whole.prefix_tokens, fleet_kv, kv_blocks, c->destinations, whole.keys_in,
      reserved.keys_in, study::kKvBudgetShare);
  return 0;
}

// The NIM benchmark the 70B profile's decode line is fitted to (docs/references.md, "Engines"):
// mean inter-token latency at concurrency 1, 25 and 50 with 5,000-token prompts.
constexpr cacheroute::sim::ItlPoint kNimItl[] = {{1, 0.0186}, {25, 0.0388}, {50, 0.0597}};
constexpr double kNimTtftC1At5000 = 0.4068;

// Simulates NIM's closed-loop benchmark with `profile_name`, then refits its decode line to NIM's
// ITLs for each OSL (docs/simulator.md, "Engine profiles").
int Calibrate(const std::string& profile_name, uint32_t isl, const std::string& osl_list,
              const cacheroute::sim::ClosedLoopBenchmark& window) {
  namespace sim = cacheroute::sim;
  absl::StatusOr<sim::EngineProfile> profile = sim::FindEngineProfile(profile_name);
  if (!profile.ok()) {
    return kProgram.Fail(2, absl::StrCat("--profile: ", profile.status().message()));
  }
  absl::StatusOr<std::vector<double>> osls = study::ParseNumberList(osl_list, "--osl");
  if (!osls.ok()) return kProgram.Fail(2, osls.status().message());
  for (double osl : *osls) {
    if (!(osl >= 2 && osl <= 100000 && osl == std::floor(osl))) {
      return kProgram.Fail(
          2, absl::StrFormat("--osl: must be whole numbers in [2, 100000], got %g", osl));
    }
  }
  std::cout << absl::StrFormat(
      "profile %s: decode %.3f ms + %.4f ms/seq, prefill %.3f ms + %.4f ms/token\n"
      "NIM closed-loop benchmark, ISL %d, unique prompts; measured ITL 18.6 / 38.8 / 59.7 ms at "
      "c = 1 / 25 / 50, TTFT %.1f ms at c = 1\n\n",
      profile->name, 1e3 * profile->decode_base_s, 1e3 * profile->decode_per_seq_s,
      1e3 * profile->prefill_base_s, 1e3 * profile->prefill_per_token_s, isl,
      1e3 * kNimTtftC1At5000);
  for (double osl : *osls) {
    sim::ClosedLoopBenchmark shape = window;
    shape.input_tokens = isl;
    shape.output_tokens = static_cast<uint32_t>(osl);
    std::cout << absl::StrFormat("OSL %g\n  this profile:", osl);
    for (const sim::ItlPoint& p : kNimItl) {
      sim::ClosedLoopBenchmark b = shape;
      b.concurrency = p.concurrency;
      absl::StatusOr<sim::ClosedLoopResult> r = sim::RunClosedLoopBenchmark(*profile, b);
      if (!r.ok()) return kProgram.Fail(2, r.status().message());
      std::cout << absl::StrFormat("  c=%d ITL %.1f ms TTFT %.0f ms", p.concurrency,
                                   1e3 * r->mean_itl_s, 1e3 * r->mean_ttft_s);
    }
    absl::StatusOr<sim::DecodeFit> fit = sim::FitDecodeLine(*profile, kNimItl, shape);
    if (!fit.ok()) return kProgram.Fail(1, fit.status().message());
    std::cout << absl::StrFormat("\n  fit: decode %.3f ms + %.4f ms/seq%s, RMS error %.2f ms;",
                                 1e3 * fit->decode_base_s, 1e3 * fit->decode_per_seq_s,
                                 fit->per_seq_at_zero ? " (clamped at 0)" : "",
                                 1e3 * fit->rms_error_s);
    for (size_t i = 0; i < fit->itl_s.size(); ++i) {
      std::cout << absl::StrFormat("  c=%d ITL %.1f ms TTFT %.0f ms", kNimItl[i].concurrency,
                                   1e3 * fit->itl_s[i], 1e3 * fit->ttft_s[i]);
    }
    std::cout << "\n";
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "cacheroute-sim: a deterministic fleet simulator comparing routing policies the way the "
      "CacheRoute paper does (SLO capacity over a load ladder and seeds)."};
  std::string studies;
  std::string config;
  std::string out = "cacheroute-sim-out";
  Overrides overrides;
  unsigned jobs = std::max(1u, std::thread::hardware_concurrency());
  app.add_option(
      "--study", studies,
      "study or comma-separated studies: " + absl::StrJoin(study::StudyNames(), ", ") + " (below)");
  app.footer(absl::StrCat("Studies:\n", study::StudyListing(),
                          "\nPolicy labels (a study's policies:, run --policy):\n",
                          study::PolicyLabelListing()));
  app.add_option("--trace", overrides.trace,
                 "Mooncake-format trace (JSON lines) for a trace-driven study such as `trace`");
  app.add_option("--config", config, "a YAML study file (instead of --study)");
  app.add_option("--seeds", overrides.seeds, "comma-separated seeds, e.g. 2,3,4");
  app.add_option("--gateways", overrides.gateways,
                 "comma-separated gateway counts G, ascending, e.g. 1,4 (default: the study's)");
  CLI::Option* duration = app.add_option("--duration", overrides.duration_s,
                                         "measured simulated seconds per run (after the warm-up)");
  app.add_option("--loads", overrides.loads, "comma-separated offered loads (QPS), ascending");
  app.add_option("--out", out, "output directory for runs.csv, report.md, summary.json, SVGs");
  app.add_option("--jobs", jobs, "runs in parallel (default: hardware concurrency)")
      ->check(CLI::Range(1u, 256u));

  CLI::App* run = app.add_subcommand("run", "one run: print its metrics");
  std::string policy;
  double qps = 0;
  uint64_t seed = 2;
  std::string run_study = "primary";
  run->add_option("--policy", policy, "a policy label (cacheroute-sim --help lists them)")
      ->required();
  run->add_option("--qps", qps, "offered load")->required();
  run->add_option("--seed", seed, "seed");
  run->add_option("--study", run_study, "the study whose setup to use (default primary)");
  run->add_option("--config", config, "a YAML study file whose setup to use");
  run->add_option("--trace", overrides.trace, "the trace of a trace-driven study");
  run->add_option("--gateways", overrides.gateways, "gateways G (default: the study's first)");
  CLI::Option* run_duration =
      run->add_option("--duration", overrides.duration_s, "measured simulated seconds");

  CLI::App* calibrate = app.add_subcommand(
      "calibrate",
      "simulate NIM's closed-loop benchmark with a profile and refit its decode line to NIM's "
      "inter-token latencies");
  std::string calibrate_profile = "llama-70b-fp8-tp2-h100";
  uint32_t isl = 5000;
  std::string osl = "200,500,1000";
  calibrate->add_option("--profile", calibrate_profile, "engine profile");
  calibrate->add_option("--isl", isl, "input tokens per request")->check(CLI::Range(1u, 100000u));
  calibrate->add_option("--osl", osl, "output tokens per request; comma-separated for several");
  cacheroute::sim::ClosedLoopBenchmark window;
  calibrate->add_option("--warmup-requests", window.warmup_requests,
                        "requests per client left out of the means");
  calibrate
      ->add_option("--measured-requests", window.measured_requests, "requests per client averaged")
      ->check(CLI::Range(1u, 100000u));
  bool together = false;
  calibrate->add_flag("--start-together", together,
                      "start every client at 0 (default: spread over one request cycle)");
  CLI::App* bound = app.add_subcommand(
      "bound", "the fleet's analytic throughput ceiling at given KV hits and at the reuse ceiling");
  std::string bound_study = "primary";
  std::string bound_hits;
  double bound_qps = 300;
  uint64_t bound_seed = 2;
  bound->add_option("--study", bound_study, "the study whose setup to use (default primary)");
  bound->add_option("--config", config, "a YAML study file whose setup to use");
  bound->add_option("--trace", overrides.trace, "the trace of a trace-driven study");
  bound->add_option("--qps", bound_qps, "offered load of the generated sample (default 300)");
  bound->add_option("--seed", bound_seed, "seed");
  bound->add_option("--hit", bound_hits, "comma-separated KV hits in [0, 1), e.g. 0.568,0.61");
  if (std::optional<int> code = cacheroute::eval::ParseCommandLine(app, argc, argv)) return *code;

  // Positive numbers, checked here so the message names the flag and the value plainly.
  for (CLI::Option* o : {duration, run_duration}) {
    if (o->count() > 0 && !(overrides.duration_s > 0 && std::isfinite(overrides.duration_s))) {
      return kProgram.Fail(
          2, absl::StrFormat("--duration: must be a number > 0, got %g", overrides.duration_s));
    }
  }
  if (run->parsed() && !(qps > 0 && std::isfinite(qps))) {
    return kProgram.Fail(2, absl::StrFormat("--qps: must be a number > 0, got %g", qps));
  }
  if (together) window.start = cacheroute::sim::ClientStart::kTogether;
  if (calibrate->parsed()) return Calibrate(calibrate_profile, isl, osl, window);
  if (bound->parsed()) {
    if (!(bound_qps > 0 && std::isfinite(bound_qps))) {
      return kProgram.Fail(2, absl::StrFormat("--qps: must be a number > 0, got %g", bound_qps));
    }
    return Bound(bound_study, config, bound_qps, bound_seed, bound_hits, overrides);
  }
  if (run->parsed()) return RunOne(run_study, config, policy, qps, seed, overrides);

  if (studies.empty() == config.empty()) {
    return kProgram.Fail(2, studies.empty() ? "give --study NAME or --config FILE"
                                            : "--study and --config: give one, not both");
  }
  std::vector<std::string> names;
  if (config.empty()) {
    names = absl::StrSplit(studies, ',');
  } else {
    names = {""};
  }
  std::vector<study::StudyConfig> configs;
  for (const std::string& name : names) {
    absl::StatusOr<study::StudyConfig> c = Configure(name, config, overrides);
    if (!c.ok()) return kProgram.Fail(2, c.status().message());
    configs.push_back(*std::move(c));
  }
  if (absl::Status s = CheckTraceUsed(configs, overrides); !s.ok()) {
    return kProgram.Fail(2, s.message());
  }
  const study::RunFunction runner = study::MakeFleetRunner();
  std::vector<study::StudyResult> results;
  for (const study::StudyConfig& c : configs) {
    std::cerr << absl::StrFormat(
        "study %s: %d policies × G {%s} × %d loads × %d seeds, %g simulated seconds each (+%g "
        "warm-up), %d jobs\n",
        c.name, c.policies.size(), absl::StrJoin(c.gateway_counts, ","), c.loads.size(),
        c.seeds.size(), c.duration_s, c.fleet.warmup_s, jobs);
    absl::StatusOr<study::StudyResult> r =
        study::RunStudy(c, runner, {.jobs = jobs, .progress = &std::cerr});
    if (!r.ok()) return kProgram.Fail(1, r.status().message());
    results.push_back(*std::move(r));
  }
  if (absl::Status s = study::WriteReport(results, out); !s.ok()) {
    return kProgram.Fail(1, s.message());
  }
  std::cerr << "report written to " << out << "/ (report.md, summary.json, runs.csv, *.svg)\n";
  return 0;
}
