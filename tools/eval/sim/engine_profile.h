// EngineProfile: how long one continuous-batching iteration of a model server takes, how much KV
// cache it has and how its scheduler is limited, as named profiles calibrated from public
// measurements (docs/references.md, "Engines"; the arithmetic is in docs/simulator.md,
// "Engine profiles"). The engine model (engine.h) and the HTTP engine emulator read them.
//
// Iteration time. One iteration computes `prefill_tokens` new prompt tokens (chunks of one or more
// prompts) and one token for each of `decode_seqs` decoding sequences whose contexts hold
// `decode_context_tokens` tokens in all:
//   t = base + prefill_per_token·prefill_tokens + decode_per_seq·decode_seqs
//         + decode_per_context_token·decode_context_tokens
//   base = prefill_base when the iteration only prefills, decode_base when it has a decoding
//          sequence (the larger of the two when it has both: one pass over the weights), 0 when
//          it is empty.
// The two intercepts are separate because the 70B source measures them separately: TTFT at
// concurrency 1 gives prefill_base and prefill_per_token, inter-token latency against concurrency
// gives decode_base and decode_per_seq (fitted by simulating the benchmark, calibration.h). A lone
// request's TTFT is therefore exactly prefill_base + prefill_per_token·(uncached prompt tokens)
// when its prompt fits one iteration.
//
// Usage:
//   absl::StatusOr<EngineProfile> profile = FindEngineProfile("llama-70b-fp8-tp2-h100");
//   double t = profile->IterationSeconds(/*prefill_tokens=*/1200, /*decode_seqs=*/20, 0);
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace cacheroute::sim {

struct EngineProfile {
  std::string name;
  std::string description;  // one line: model, precision, parallelism, GPU, sources

  // Iteration time model (seconds), see the top of this file.
  double prefill_base_s = 0;
  double prefill_per_token_s = 0;
  double decode_base_s = 0;
  double decode_per_seq_s = 0;
  double decode_per_context_token_s = 0;

  // KV cache: blocks of 16 tokens (vLLM's default block size).
  uint32_t kv_blocks = 0;
  // vLLM scheduler limits: tokens computed per iteration (max_num_batched_tokens, with chunked
  // prefill) and running sequences (max_num_seqs).
  uint32_t token_budget = 8192;
  uint32_t max_running = 1024;

  double IterationSeconds(uint64_t prefill_tokens, uint64_t decode_seqs,
                          uint64_t decode_context_tokens) const;
};

// InvalidArgument naming the field and value unless every time is finite and ≥ 0, kv_blocks ≥ 1,
// max_running ≥ 1 and token_budget ≥ max_running (so every running decode fits an iteration, as
// vLLM requires of max_num_batched_tokens and max_num_seqs).
absl::Status ValidateEngineProfile(const EngineProfile& profile);

// The calibrated profiles, by name.
//   llama-70b-fp8-tp2-h100  Llama-3.3-70B fp8 on a tensor-parallel-2 pair of H100s (the paper's
//                           flagship destination)
//   llama-70b-fp8-tp2-h100-itl-as-decode
//                           the same with the previous decode line (benchmark inter-token
//                           latencies read as decode-step times), for sensitivity
//   llama-70b-fp8-tp2-h100-fit-osl1000
//                           the same with the decode line fitted assuming OSL 1,000, for
//                           sensitivity
//   llama-8b-h100           Llama-3.1-8B bf16 on one H100 (the paper's mechanism testbed)
absl::StatusOr<EngineProfile> FindEngineProfile(std::string_view name);
std::vector<std::string> EngineProfileNames();

// The request rate at which one destination saturates, analytically: in steady state at rate q an
// iteration lasts t = base / (1 − q·(prefill_per_token·uncached_prompt_tokens + output_tokens·
// (decode_per_seq + decode_per_context_token·(prompt_tokens + output_tokens/2)))), which diverges
// at q = 1/(the denominator's work per request). Mean lengths in tokens; +inf when a request
// costs nothing. Ignores queueing and the KV limit.
double SaturationQps(const EngineProfile& profile, double prompt_tokens,
                     double uncached_prompt_tokens, double output_tokens);

// q_cap (paper §3.1, "We calibrate q_cap from a single destination's latency/load knee"): the load
// one assignment may carry, taken as `utilization` (default 0.8, below the knee where queueing
// delay grows without bound) times SaturationQps for the workload's mean lengths.
double CalibrateQCap(const EngineProfile& profile, double prompt_tokens,
                     double uncached_prompt_tokens, double output_tokens, double utilization = 0.8);

}  // namespace cacheroute::sim
