// PromptEstimate: a request's prompt tokens, estimated from what the gateway sees of its body
// (PromptSize: bytes of prompt text, token ids) before any engine has tokenized it, and calibrated
// by what the engines then report (`usage.prompt_tokens`):
//
//   tokens = token ids + text bytes / bytes_per_token,
//   bytes_per_token = Σ text bytes / Σ text tokens over an exponential window of about the last
//                     kWindow answers (text tokens: usage.prompt_tokens − the request's ids),
//                     kPriorBytesPerToken before the first, clamped to [kMinBytesPerToken,
//                     kMaxBytesPerToken].
//
// The ratio absorbs the chat template's tokens on average; a request of no text and no ids
// estimates 0 (unknown: the Router counts it as its measured mean prompt).
//
// Usage:
//   PromptEstimate estimate;
//   uint32_t tokens = estimate.Tokens(fields.prompt);        // at the pick
//   estimate.Observe(fields.prompt, usage.prompt_tokens);    // when the answer's usage arrives
//
// Thread-safety: any thread, never locks or allocates (relaxed atomics: two answers observed at
// the same moment may lose one of their updates, which only drops a sample from the window).
#pragma once

#include <atomic>
#include <cstdint>

#include "tools/frontend/openai_fields.h"

namespace cacheroute::frontend {

class PromptEstimate {
 public:
  static constexpr double kPriorBytesPerToken = 4.0;  // English text in BPE tokenizers
  static constexpr double kMinBytesPerToken = 0.5;
  static constexpr double kMaxBytesPerToken = 32.0;
  static constexpr double kWindow = 256;  // answers

  // The estimated prompt tokens of a request of `size` (0 when nothing is known), at most
  // UINT32_MAX.
  uint32_t Tokens(const PromptSize& size) const;
  // An answer's usage.prompt_tokens for a request of `size`: calibrates the bytes per token. An
  // answer with no text, or fewer tokens than its ids, is not a sample.
  void Observe(const PromptSize& size, uint64_t prompt_tokens);
  double bytes_per_token() const { return bytes_per_token_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> bytes_{0};   // the window's mean text bytes per answer
  std::atomic<double> tokens_{0};  // and text tokens
  std::atomic<double> bytes_per_token_{kPriorBytesPerToken};
};

}  // namespace cacheroute::frontend
