// cacheroute-workload: generates the paper's semi-synthetic workload (the CacheRoute paper,
// §2.1, Table 6) as Mooncake-format JSONL, and reads or converts Mooncake traces. Each command
// prints the statistics it measured on the requests; `generate` prints them next to the targets.
// Exit codes: 0 ok, 1 I/O failure while writing, 2 bad flags or bad input.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <optional>
#include <string>
#include <utility>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "tools/eval/main_helpers.h"
#include "tools/eval/workload/arrivals.h"
#include "tools/eval/workload/mooncake.h"
#include "tools/eval/workload/workload.h"
#include "tools/eval/workload/workload_stats.h"

namespace cacheroute::workload {
namespace {

constexpr cacheroute::eval::Program kProgram{"cacheroute-workload"};

// Profile field names in library messages, as the flags that set them.
std::string AsFlags(std::string message) {
  static const std::pair<const char*, const char*> kFields[] = {
      {"mean_requests_per_thread", "--requests-per-thread"},
      {"few_shot_break_rate", "--few-shot-break"},
      {"top_k", "--top-k"},
      {"bootstrap", "--gaps-file"},
      {"cv", "--cv"},
      {"block_length", "--block-length"},
  };
  for (const auto& [field, flag] : kFields) {
    if (absl::StartsWith(message, field)) return std::string(flag) + ": " + message;
  }
  return message;
}

std::string Percent(double share, int digits = 1) {
  if (std::isnan(share)) return "n/a";
  return absl::StrFormat("%.*f%%", digits, 100 * share);
}

std::string Fixed(double v, int digits) {
  if (std::isnan(v)) return "n/a";
  return absl::StrFormat("%.*f", digits, v);
}

void Row(std::string& out, const std::string& name, const std::string& measured,
         const std::string& target = "", const std::string& source = "") {
  absl::StrAppendFormat(&out, "  %-36s %12s %12s   %s\n", name, measured, target, source);
}

// Opens `path` for writing, or stdout for "-".
struct Output {
  std::ofstream file;
  std::ostream* stream = nullptr;
  bool Open(const std::string& path) {
    if (path == "-") {
      stream = &std::cout;
      return true;
    }
    file.open(path, std::ios::binary);
    stream = &file;
    return static_cast<bool>(file);
  }
};

// Writes `w` as JSONL; hash ids are first remapped to dense ones unless `raw_ids`.
int WriteWorkload(Workload& w, const std::string& path, bool raw_ids) {
  if (!raw_ids) RemapHashIdsDense(w);
  Output out;
  if (!out.Open(path)) {
    return kProgram.Fail(1, absl::StrFormat("--out: cannot create \"%s\"", path));
  }
  if (!WriteMooncakeTrace(w, *out.stream).ok()) {
    return kProgram.Fail(1, absl::StrFormat("--out: writing \"%s\" failed", path));
  }
  return 0;
}

struct GenerateFlags {
  WorkloadProfile profile = PaperPrimaryProfile();
  std::string arrival = "gamma";
  std::string gaps_file;
  std::string out;
  std::string rates_out;
  bool raw_ids = false;
  uint32_t min_cv_requests = 20;
};

int RunGenerate(GenerateFlags& flags) {
  WorkloadProfile& p = flags.profile;
  p.arrivals.process = flags.arrival == "poisson"     ? ArrivalProcess::kPoisson
                       : flags.arrival == "bootstrap" ? ArrivalProcess::kBootstrap
                                                      : ArrivalProcess::kGamma;
  double target_cv = p.arrivals.cv;
  if (p.arrivals.process == ArrivalProcess::kBootstrap) {
    if (flags.gaps_file.empty()) return kProgram.Fail(2, "--arrival bootstrap needs --gaps-file");
    absl::StatusOr<std::vector<double>> gaps = ReadGapsFile(flags.gaps_file);
    if (!gaps.ok()) return kProgram.Fail(2, "--gaps-file: " + std::string(gaps.status().message()));
    p.arrivals.bootstrap_gaps = std::move(*gaps);
    std::vector<double> times{0};
    for (double g : p.arrivals.bootstrap_gaps) times.push_back(times.back() + g);
    target_cv = InterArrivalCv(times);
  } else if (!flags.gaps_file.empty()) {
    return kProgram.Fail(2, "--gaps-file is only for --arrival bootstrap");
  }
  if (p.arrivals.process == ArrivalProcess::kPoisson) target_cv = 1;

  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<GeneratedWorkload> g = GenerateWorkload(p);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (!g.ok()) return kProgram.Fail(2, AsFlags(std::string(g.status().message())));

  if (!flags.out.empty()) {
    if (int rc = WriteWorkload(g->workload, flags.out, flags.raw_ids); rc != 0) return rc;
  }
  if (!flags.rates_out.empty()) {
    Output out;
    if (!out.Open(flags.rates_out)) {
      return kProgram.Fail(1,
                           absl::StrFormat("--rates-out: cannot create \"%s\"", flags.rates_out));
    }
    std::string text = "key,rate\n";
    for (const KeyRate& k : g->active_keys)
      absl::StrAppendFormat(&text, "%s,%.17g\n", k.key, k.rate);
    *out.stream << text;
    out.stream->flush();
    if (!*out.stream) return kProgram.Fail(1, "--rates-out: writing failed");
  }

  const WorkloadStats s =
      MeasureWorkload(g->workload, {.duration_s = p.duration_s,
                                    .min_cv_requests = flags.min_cv_requests,
                                    .stable_prefix_tokens = g->stable_prefix_tokens});
  const RateDistributionStats& u = g->universe_rates;
  const RateDistributionStats& a = g->active_rates;
  std::string t;
  absl::StrAppendFormat(&t,
                        "Generated %d requests in %.2f s: seed %d, %s arrivals, top-K %s of %d "
                        "keys, %g QPS for %g s\n\n",
                        s.requests, seconds, p.seed, ArrivalProcessName(p.arrivals.process),
                        p.top_k == 0 ? std::string("0 (all)") : absl::StrCat(p.top_k), p.keys,
                        p.qps, p.duration_s);
  absl::StrAppendFormat(&t, "  %-36s %12s %12s   %s\n", "", "measured", "target", "source");
  absl::StrAppendFormat(&t, "key universe (lognormal rates, sigma %g)\n", p.rate_sigma);
  Row(t, "keys", absl::StrCat(u.keys), "128824", "paper Table 6");
  Row(t, "Gini", Fixed(u.gini, 3), "0.756", "paper Table 6");
  Row(t, "top-4% share", Percent(u.top4_share), "~47%", "paper Table 6");
  Row(t, "largest key share", Percent(u.max_share, 3), "<=0.3%", "paper Table 6");
  absl::StrAppendFormat(&t, "requests\n");
  Row(t, "requests", absl::StrCat(s.requests), Fixed(p.qps * p.duration_s, 0), "qps x duration");
  Row(t, "achieved QPS", Fixed(s.qps, 2), absl::StrFormat("%g", p.qps), "--qps");
  Row(t, "keys with >= 1 request", absl::StrCat(s.keys_with_requests),
      absl::StrCat(g->active_keys.size()), "active set");
  Row(t, "largest key requests", absl::StrCat(s.largest_key_requests),
      Fixed(g->active_keys.empty() ? 0 : g->active_keys[0].rate * p.duration_s, 0),
      "hottest rate x duration");
  Row(t, "Gini of requests per key", Fixed(s.gini, 3), Fixed(a.gini, 3), "active-set rates");
  Row(t, "top-4% share of requests", Percent(s.top4_share), Percent(a.top4_share),
      "active-set rates");
  Row(t, "largest key share of requests", Percent(s.max_key_share, 3), Percent(a.max_share, 3),
      "active-set rates");
  Row(t, absl::StrFormat("median inter-arrival CV (%d keys)", s.cv_keys),
      s.cv_keys ? Fixed(s.median_key_cv, 2) : "n/a", Fixed(target_cv, 2),
      p.arrivals.process == ArrivalProcess::kGamma ? "paper Table 6 (--cv)" : "arrival process");
  Row(t, "multi-turn request share", Percent(s.multi_turn_share), Percent(p.multi_turn_share),
      "paper Table 6");
  Row(t, "requests per thread", Fixed(s.mean_requests_per_thread, 2),
      Fixed(p.mean_requests_per_thread, 2), "paper Table 6");
  Row(t, "few-shot break rate (consecutive)", Percent(s.few_shot_break_rate),
      Percent(p.few_shot_break_rate, 0), "paper Table 6");
  Row(t, "mean prompt tokens", Fixed(s.mean_input_tokens, 0), "~1200", "paper Table 6");
  Row(t, "tokens before the current turn", Percent(s.share_before_current_turn), "~90%",
      "paper Table 6");
  Row(t, "per-key context share of prompt",
      Percent(s.mean_input_tokens > 0 ? p.context_tokens / s.mean_input_tokens : NAN), "~15%",
      "paper Table 6 (180 tokens)");
  Row(t, "mean output tokens", Fixed(s.mean_output_tokens, 0), Fixed(p.mean_output_tokens, 0),
      "ours");
  Row(t, "prefix reuse, unbounded cache", Percent(s.prefix_reuse), "", "token-weighted");
  (flags.out == "-" ? std::cerr : std::cout) << t;
  return 0;
}

struct TraceFlags {
  std::string input;
  uint32_t block_size = kMooncakeBlockSize;
  std::optional<uint32_t> key_blocks;
  std::optional<double> speedup;
  std::optional<double> target_qps;
  std::string out;
  bool raw_ids = false;
  uint32_t min_cv_requests = 20;
};

int RunTrace(const TraceFlags& flags) {
  absl::StatusOr<Workload> w = ReadMooncakeTraceFile(
      flags.input, {.block_size = flags.block_size, .key_blocks = flags.key_blocks});
  if (!w.ok()) return kProgram.Fail(2, std::string(w.status().message()));
  const WorkloadStats before = MeasureWorkload(*w);
  if (flags.speedup) {
    if (absl::Status s = ScaleArrivalTimes(*w, 1.0 / *flags.speedup); !s.ok()) {
      return kProgram.Fail(2, "--rescale: " + std::string(s.message()));
    }
  } else if (flags.target_qps) {
    if (absl::Status s = RescaleToQps(*w, *flags.target_qps); !s.ok()) {
      return kProgram.Fail(2, "--target-qps: " + std::string(s.message()));
    }
  }
  if (!flags.out.empty()) {
    if (int rc = WriteWorkload(*w, flags.out, flags.raw_ids); rc != 0) return rc;
  }
  const WorkloadStats s = MeasureWorkload(*w, {.min_cv_requests = flags.min_cv_requests});
  std::string t;
  absl::StrAppendFormat(&t, "Trace %s: %d requests, %d tokens per hash id\n", flags.input,
                        s.requests, w->block_size);
  const auto line = [&t](const std::string& name, const std::string& value) {
    absl::StrAppendFormat(&t, "  %-48s %s\n", name, value);
  };
  line("duration (first to last arrival)", absl::StrFormat("%.1f s", s.duration_s));
  if (flags.speedup || flags.target_qps) {
    line("rescaled from",
         absl::StrFormat("%.1f s, %.3f QPS (time factor %.6g)", before.duration_s, before.qps,
                         before.duration_s > 0 ? s.duration_s / before.duration_s : 1.0));
  }
  line("QPS", Fixed(s.qps, 3));
  line("mean input tokens", Fixed(s.mean_input_tokens, 0));
  line("mean output tokens", Fixed(s.mean_output_tokens, 0));
  line(flags.key_blocks ? absl::StrFormat("distinct keys (first %d hash ids)", *flags.key_blocks)
                        : std::string("distinct keys"),
       absl::StrCat(s.keys_with_requests));
  line("largest key",
       absl::StrFormat("%d requests (%s)", s.largest_key_requests, Percent(s.max_key_share, 2)));
  line("Gini of requests per key", Fixed(s.gini, 3));
  line("top-4% share of requests", Percent(s.top4_share));
  line(absl::StrFormat("median inter-arrival CV (keys >= %d requests)", flags.min_cv_requests),
       s.cv_keys ? absl::StrFormat("%.2f over %d keys", s.median_key_cv, s.cv_keys) : "n/a");
  line("prefix reuse, unbounded cache (token-weighted)", Percent(s.prefix_reuse));
  (flags.out == "-" ? std::cerr : std::cout) << t;
  return 0;
}

int Main(int argc, char** argv) {
  CLI::App app{
      "Generate the paper's semi-synthetic LLM request workload, or read a Mooncake "
      "trace, and print its statistics."};
  app.require_subcommand(1);

  GenerateFlags gen;
  WorkloadProfile& p = gen.profile;
  CLI::App* generate = app.add_subcommand(
      "generate", "generate a workload (defaults: the paper's primary workload, Table 6)");
  generate->add_option("--keys", p.keys, "keys in the universe")
      ->check(CLI::Range(uint64_t{1}, uint64_t{1} << 32))
      ->capture_default_str();
  generate->add_option("--sigma", p.rate_sigma, "sigma of log(key rate)")
      ->check(CLI::Range(0.0, 10.0))
      ->capture_default_str();
  generate->add_option("--max-key-share", p.max_key_share, "largest share one key may have")
      ->check(CLI::Range(1e-9, 1.0))
      ->capture_default_str();
  generate->add_option("--top-k", p.top_k, "active set: the K hottest keys (0 = all)")
      ->capture_default_str();
  generate->add_option("--qps", p.qps, "total offered load")
      ->check(CLI::Range(1e-6, 1e7))
      ->capture_default_str();
  generate->add_option("--duration", p.duration_s, "seconds of arrivals")
      ->check(CLI::Range(1e-3, 1e7))
      ->capture_default_str();
  generate
      ->add_option("--warmup", p.warmup_s,
                   "seconds of threads and few-shot state simulated before t = 0")
      ->check(CLI::Range(0.0, 1e7))
      ->capture_default_str();
  generate->add_option("--seed", p.seed, "random seed")->capture_default_str();
  generate->add_option("--arrival", gen.arrival, "per-key arrivals: poisson|gamma|bootstrap")
      ->check(CLI::IsMember({"poisson", "gamma", "bootstrap"}))
      ->capture_default_str();
  generate->add_option("--cv", p.arrivals.cv, "inter-arrival CV for gamma")
      ->check(CLI::Range(0.01, 100.0))
      ->capture_default_str();
  generate
      ->add_option("--gaps-file", gen.gaps_file, "bootstrap: measured gaps, one number per line")
      ->check(CLI::ExistingFile);
  generate->add_option("--block-length", p.arrivals.block_length, "bootstrap block length")
      ->check(CLI::Range(1u, 1000000u))
      ->capture_default_str();
  generate
      ->add_option("--multi-turn-share", p.multi_turn_share,
                   "share of requests in multi-turn threads")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  generate
      ->add_option("--requests-per-thread", p.mean_requests_per_thread, "mean requests per thread")
      ->check(CLI::Range(1.0, 1000.0))
      ->capture_default_str();
  generate
      ->add_option("--follow-up-probability", p.follow_up_probability,
                   "chance an arrival continues an open thread")
      ->check(CLI::Range(0.01, 1.0))
      ->capture_default_str();
  generate->add_option("--block-size", p.block_size, "tokens per hash id")
      ->check(CLI::Range(1u, 1u << 20))
      ->capture_default_str();
  generate->add_option("--template-tokens", p.template_tokens, "global template")
      ->check(CLI::Range(0u, 1u << 20))
      ->capture_default_str();
  generate->add_option("--context-tokens", p.context_tokens, "per-key context")
      ->check(CLI::Range(0u, 1u << 20))
      ->capture_default_str();
  generate->add_option("--few-shot-tokens", p.few_shot_tokens, "retrieved few-shot block")
      ->check(CLI::Range(0u, 1u << 20))
      ->capture_default_str();
  generate->add_option("--few-shot-pool", p.few_shot_pool, "distinct few-shot blocks per key")
      ->check(CLI::Range(1u, 1u << 30))
      ->capture_default_str();
  generate
      ->add_option("--few-shot-break", p.few_shot_break_rate,
                   "share of a key's consecutive requests with a different few-shot block")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  generate->add_option("--turn-tokens", p.mean_turn_tokens, "mean current-turn tokens")
      ->check(CLI::Range(1.0, 1e5))
      ->capture_default_str();
  generate->add_option("--output-tokens", p.mean_output_tokens, "mean output tokens")
      ->check(CLI::Range(1.0, 1e5))
      ->capture_default_str();
  generate->add_option("--length-sigma", p.length_sigma, "sigma of log(turn or output length)")
      ->check(CLI::Range(0.0, 3.0))
      ->capture_default_str();
  generate->add_option("--out,-o", gen.out, "write the requests as JSONL (- for stdout)");
  generate->add_flag("--raw-ids", gen.raw_ids,
                     "write the 64-bit block hashes instead of dense ids 0, 1, 2, ...");
  generate->add_option("--rates-out", gen.rates_out,
                       "write the active set's key,rate CSV (for cacheroutectl plan)");
  generate
      ->add_option("--min-cv-requests", gen.min_cv_requests,
                   "keys with fewer requests are left out of the median CV")
      ->check(CLI::Range(3u, 1u << 30))
      ->capture_default_str();

  TraceFlags read_flags, convert_flags;
  const auto add_trace_options = [](CLI::App* cmd, TraceFlags& f, bool out_required) {
    cmd->add_option("trace", f.input, "Mooncake-format JSONL trace")->required();
    cmd->add_option("--block-size", f.block_size, "tokens per hash id for lines without block_size")
        ->check(CLI::Range(1u, 1u << 20))
        ->capture_default_str();
    cmd->add_option("--key-blocks", f.key_blocks,
                    "routing key = the first N hash ids (default: the line's key, else 2)")
        ->check(CLI::Range(1u, 1u << 20));
    CLI::Option* speed =
        cmd->add_option("--rescale", f.speedup, "speed-up: divide arrival times by this")
            ->check(CLI::Range(1e-9, 1e9));
    cmd->add_option("--target-qps", f.target_qps, "scale arrival times to reach this QPS")
        ->check(CLI::Range(1e-9, 1e9))
        ->excludes(speed);
    CLI::Option* out = cmd->add_option("--out,-o", f.out, "write JSONL (- for stdout)");
    if (out_required) out->required();
    cmd->add_flag("--raw-ids", f.raw_ids, "keep the hash ids as read instead of dense ids");
    cmd->add_option("--min-cv-requests", f.min_cv_requests,
                    "keys with fewer requests are left out of the median CV")
        ->check(CLI::Range(3u, 1u << 30))
        ->capture_default_str();
  };
  CLI::App* read = app.add_subcommand("read", "read a Mooncake trace and print its statistics");
  add_trace_options(read, read_flags, false);
  CLI::App* convert =
      app.add_subcommand("convert", "read a Mooncake trace, rescale it, write it with keys");
  add_trace_options(convert, convert_flags, true);

  if (std::optional<int> code = cacheroute::eval::ParseCommandLine(app, argc, argv)) return *code;
  if (generate->parsed()) return RunGenerate(gen);
  if (read->parsed()) return RunTrace(read_flags);
  return RunTrace(convert_flags);
}

}  // namespace
}  // namespace cacheroute::workload

int main(int argc, char** argv) { return cacheroute::workload::Main(argc, argv); }
