// Calibration by simulating the benchmark: the engine model (engine.h) run the way a published
// serving benchmark drives a server, so that a profile's parameters can be fitted to the
// benchmark's numbers under the benchmark's own conditions rather than read off them directly.
//
// RunClosedLoopBenchmark runs c clients closed-loop (each sends its next request the moment the
// last finishes, no think time), every request with the same input and output lengths and unique
// content, and reports genai-perf's per-request means: TTFT = first token − send, ITL =
// (end-to-end − TTFT) / (OSL − 1). FitDecodeLine searches (decode_base_s, decode_per_seq_s) so
// that the simulated ITLs match measured ones at several concurrencies, keeping every other field
// of the profile. Clients start evenly over one request cycle by default; kTogether starts them
// all at once.
//
// Deterministic: no randomness. Why the benchmark is simulated and why the clients are spread:
// docs/simulator.md, "Calibration internals".
//
// Usage:
//   EngineProfile p = *FindEngineProfile("llama-70b-fp8-tp2-h100");
//   absl::StatusOr<ClosedLoopResult> r =
//       RunClosedLoopBenchmark(p, {.concurrency = 25, .input_tokens = 5000, .output_tokens = 500});
//   // r->mean_itl_s, r->mean_ttft_s
//   absl::StatusOr<DecodeFit> fit = FitDecodeLine(p, {{1, 0.0186}, {25, 0.0388}, {50, 0.0597}},
//                                                 {.input_tokens = 5000, .output_tokens = 500});
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/eval/sim/engine_profile.h"

namespace cacheroute::sim {

enum class ClientStart : uint8_t {
  kSpread,    // client i first sends at (i/c)·(TTFT + (OSL − 1)·ITL of a lone request)
  kTogether,  // every client first sends at 0 (genai-perf's start, without its jitter)
};

struct ClosedLoopBenchmark {
  uint32_t concurrency = 1;         // c ≥ 1 clients
  uint32_t input_tokens = 0;        // ISL ≥ 1, unique content (no prefix-cache hits)
  uint32_t output_tokens = 0;       // OSL ≥ 2 (ITL needs two tokens)
  uint32_t warmup_requests = 3;     // per client, left out of the means (the start-up transient)
  uint32_t measured_requests = 10;  // per client, averaged
  ClientStart start = ClientStart::kSpread;
};

struct ClosedLoopResult {
  double mean_itl_s = 0;   // mean over measured requests of (e2e − TTFT)/(OSL − 1)
  double mean_ttft_s = 0;  // mean over measured requests
  double mean_e2e_s = 0;
  double output_tokens_per_s = 0;  // measured requests' output tokens / the span they cover
  uint64_t measured = 0;           // requests averaged
};

// InvalidArgument naming the field and value for a bad benchmark or profile.
absl::StatusOr<ClosedLoopResult> RunClosedLoopBenchmark(const EngineProfile& profile,
                                                        const ClosedLoopBenchmark& benchmark);

// One published measurement: mean ITL (seconds) at a concurrency.
struct ItlPoint {
  uint32_t concurrency = 1;
  double itl_s = 0;
};

struct DecodeFit {
  double decode_base_s = 0;
  double decode_per_seq_s = 0;
  double rms_error_s = 0;        // over the points, simulated − measured ITL
  std::vector<double> itl_s;     // simulated ITL at each point, in the points' order
  std::vector<double> ttft_s;    // simulated mean TTFT at each point
  bool per_seq_at_zero = false;  // the best fit wants a negative slope: clamped at 0
};

// Least squares over (decode_base_s ≥ 0, decode_per_seq_s ≥ 0): a coarse grid, then a compass
// search with shrinking steps down to 1 µs. `shape` gives ISL, OSL and the measurement window; its
// concurrency is replaced by each point's. At least two points with distinct concurrencies.
absl::StatusOr<DecodeFit> FitDecodeLine(const EngineProfile& profile,
                                        std::span<const ItlPoint> points,
                                        const ClosedLoopBenchmark& shape);

}  // namespace cacheroute::sim
