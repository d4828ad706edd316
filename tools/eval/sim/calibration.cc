// Closed-loop benchmark simulation and the decode-line fit; see calibration.h.
#include "tools/eval/sim/calibration.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <queue>
#include <set>
#include <utility>

#include "absl/strings/str_format.h"
#include "tools/eval/sim/engine.h"

namespace cacheroute::sim {
namespace {

absl::Status Invalid(std::string_view field, std::string_view requirement, double value) {
  return absl::InvalidArgumentError(
      absl::StrFormat("closed-loop benchmark %s must be %s, got %g", field, requirement, value));
}

absl::Status ValidateBenchmark(const ClosedLoopBenchmark& b) {
  if (b.concurrency == 0) return Invalid("concurrency", ">= 1", 0);
  if (b.input_tokens == 0) return Invalid("input_tokens", ">= 1", 0);
  if (b.output_tokens < 2) return Invalid("output_tokens", ">= 2", b.output_tokens);
  if (b.measured_requests == 0) return Invalid("measured_requests", ">= 1", 0);
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ClosedLoopResult> RunClosedLoopBenchmark(const EngineProfile& profile,
                                                        const ClosedLoopBenchmark& benchmark) {
  if (absl::Status s = ValidateEngineProfile(profile); !s.ok()) return s;
  if (absl::Status s = ValidateBenchmark(benchmark); !s.ok()) return s;
  const uint32_t c = benchmark.concurrency;
  const uint32_t first_measured = benchmark.warmup_requests;
  const uint32_t end_measured = benchmark.warmup_requests + benchmark.measured_requests;

  struct Sent {
    uint32_t client;
    uint32_t index;  // the client's request number, from 0
    double send;
    double first_token = -1;
  };
  std::vector<Sent> sent;  // by request id
  std::vector<uint32_t> next_index(c, 0);
  uint64_t unfinished_measured = uint64_t{c} * benchmark.measured_requests;

  Engine engine(profile, {.max_waiting = 0, .timeout_s = kForever});
  // Sends due: (time, client). A client sends again the moment its previous request finishes, and
  // keeps doing so until every measured request has finished, so measured requests always run
  // against c − 1 busy neighbours (no ramp-down inside the measurement).
  using Due = std::pair<double, uint32_t>;
  std::priority_queue<Due, std::vector<Due>, std::greater<>> due;
  double spacing = 0;
  if (benchmark.start == ClientStart::kSpread) {
    const double alone = profile.IterationSeconds(benchmark.input_tokens, 0, 0) +
                         (benchmark.output_tokens - 1) * profile.IterationSeconds(0, 1, 0);
    spacing = alone / c;
  }
  for (uint32_t i = 0; i < c; ++i) due.push({i * spacing, i});

  ClosedLoopResult result;
  double itl_sum = 0, ttft_sum = 0, e2e_sum = 0;
  double first_send = std::numeric_limits<double>::infinity(), last_finish = 0;
  std::vector<EngineEvent> events;
  while (unfinished_measured > 0) {
    const double t_engine = engine.NextEventTime();
    if (!due.empty() && due.top().first <= t_engine) {
      const auto [t, client] = due.top();
      due.pop();
      const uint64_t id = sent.size();
      sent.push_back({.client = client, .index = next_index[client]++, .send = t});
      const SubmitResult r = engine.Submit({.id = id,
                                            .prompt_tokens = benchmark.input_tokens,
                                            .output_tokens = benchmark.output_tokens,
                                            .block_hashes = {}},
                                           t);
      if (r != SubmitResult::kQueued) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "closed-loop benchmark: a request of %u + %u tokens does not fit profile %s's %u KV "
            "blocks",
            benchmark.input_tokens, benchmark.output_tokens, profile.name, profile.kv_blocks));
      }
      continue;
    }
    if (t_engine == kForever) break;  // unreachable: a measured request is always in flight
    const std::span<const EngineEvent> step = engine.Step(t_engine);
    events.assign(step.begin(), step.end());  // Submit below invalidates the span
    for (const EngineEvent& e : events) {
      Sent& s = sent[e.request_id];
      if (e.kind == EngineEventKind::kFirstToken) {
        s.first_token = e.time;
        continue;
      }
      if (e.kind != EngineEventKind::kFinished) continue;
      if (s.index >= first_measured && s.index < end_measured) {
        const double ttft = s.first_token - s.send;
        const double e2e = e.time - s.send;
        ttft_sum += ttft;
        e2e_sum += e2e;
        itl_sum += (e2e - ttft) / (benchmark.output_tokens - 1);
        first_send = std::min(first_send, s.send);
        last_finish = std::max(last_finish, e.time);
        ++result.measured;
        --unfinished_measured;
      }
      due.push({e.time, s.client});
    }
  }
  const double n = static_cast<double>(result.measured);
  result.mean_itl_s = itl_sum / n;
  result.mean_ttft_s = ttft_sum / n;
  result.mean_e2e_s = e2e_sum / n;
  result.output_tokens_per_s =
      last_finish > first_send ? n * benchmark.output_tokens / (last_finish - first_send) : 0;
  return result;
}

absl::StatusOr<DecodeFit> FitDecodeLine(const EngineProfile& profile,
                                        std::span<const ItlPoint> points,
                                        const ClosedLoopBenchmark& shape) {
  std::set<uint32_t> concurrencies;
  double max_itl = 0;
  uint32_t max_c = 0;
  for (const ItlPoint& p : points) {
    if (p.concurrency == 0) return Invalid("point concurrency", ">= 1", 0);
    if (!(p.itl_s > 0) || std::isinf(p.itl_s)) return Invalid("point itl_s", "finite > 0", p.itl_s);
    concurrencies.insert(p.concurrency);
    max_itl = std::max(max_itl, p.itl_s);
    max_c = std::max(max_c, p.concurrency);
  }
  if (concurrencies.size() < 2) {
    return absl::InvalidArgumentError(
        "decode fit needs ITL points at two or more distinct concurrencies");
  }

  // Sum of squared ITL errors for one candidate line.
  absl::Status error;
  auto evaluate = [&](double base, double slope, DecodeFit* out) -> double {
    EngineProfile p = profile;
    p.decode_base_s = base;
    p.decode_per_seq_s = slope;
    double sse = 0;
    for (const ItlPoint& point : points) {
      ClosedLoopBenchmark b = shape;
      b.concurrency = point.concurrency;
      absl::StatusOr<ClosedLoopResult> r = RunClosedLoopBenchmark(p, b);
      if (!r.ok()) {
        error = r.status();
        return std::numeric_limits<double>::infinity();
      }
      sse += (r->mean_itl_s - point.itl_s) * (r->mean_itl_s - point.itl_s);
      if (out != nullptr) {
        out->itl_s.push_back(r->mean_itl_s);
        out->ttft_s.push_back(r->mean_ttft_s);
      }
    }
    return sse;
  };

  // Coarse grid: base in [0, max ITL], slope in [0, max ITL / max c] (a line through the origin
  // and the highest point bounds any slope the data could ask for).
  constexpr int kGrid = 16;
  const double base_span = max_itl;
  const double slope_span = max_itl / max_c;
  double best_base = 0, best_slope = 0, best = std::numeric_limits<double>::infinity();
  // Keeps the candidate if it beats the best so far; true when it does.
  auto improves = [&](double base, double slope) {
    const double sse = evaluate(base, slope, nullptr);
    if (!error.ok() || !(sse < best)) return false;
    best = sse;
    best_base = base;
    best_slope = slope;
    return true;
  };
  for (int i = 0; i <= kGrid; ++i) {
    for (int j = 0; j <= kGrid; ++j) {
      improves(base_span * i / kGrid, slope_span * j / kGrid);
      if (!error.ok()) return error;
    }
  }
  // Compass search from the best grid cell, halving the steps when no move improves.
  double step_base = base_span / kGrid, step_slope = slope_span / kGrid;
  constexpr double kMinStep = 1e-6;  // 1 µs on the base; the slope's floor scales with it
  while (step_base > kMinStep || step_slope > kMinStep / max_c) {
    bool moved = false;
    for (auto [db, ds] : {std::pair{1, 0}, {-1, 0}, {0, 1}, {0, -1}}) {
      const double base = std::max(0.0, best_base + db * step_base);
      const double slope = std::max(0.0, best_slope + ds * step_slope);
      if (base == best_base && slope == best_slope) continue;
      if (improves(base, slope)) moved = true;
      if (!error.ok()) return error;
    }
    if (!moved) {
      step_base /= 2;
      step_slope /= 2;
    }
  }

  DecodeFit fit;
  fit.decode_base_s = best_base;
  fit.decode_per_seq_s = best_slope;
  fit.rms_error_s = std::sqrt(evaluate(best_base, best_slope, &fit) / points.size());
  if (!error.ok()) return error;
  fit.per_seq_at_zero = best_slope == 0;
  return fit;
}

}  // namespace cacheroute::sim
