// See prompt_estimate.h.
#include "tools/frontend/routing/prompt_estimate.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace cacheroute::frontend {
namespace {

void Blend(std::atomic<double>& mean, double value) {
  constexpr double kKeep = 1 - 1 / PromptEstimate::kWindow;
  const double old = mean.load(std::memory_order_relaxed);
  mean.store(old == 0 ? value : old * kKeep + value * (1 - kKeep), std::memory_order_relaxed);
}

}  // namespace

uint32_t PromptEstimate::Tokens(const PromptSize& size) const {
  const double tokens = static_cast<double>(size.token_ids) +
                        std::ceil(static_cast<double>(size.text_bytes) / bytes_per_token());
  return static_cast<uint32_t>(std::min<double>(tokens, std::numeric_limits<uint32_t>::max()));
}

void PromptEstimate::Observe(const PromptSize& size, uint64_t prompt_tokens) {
  if (size.text_bytes == 0 || prompt_tokens <= size.token_ids) return;
  Blend(bytes_, static_cast<double>(size.text_bytes));
  Blend(tokens_, static_cast<double>(prompt_tokens - size.token_ids));
  const double tokens = tokens_.load(std::memory_order_relaxed);
  if (tokens <= 0) return;
  bytes_per_token_.store(std::clamp(bytes_.load(std::memory_order_relaxed) / tokens,
                                    kMinBytesPerToken, kMaxBytesPerToken),
                         std::memory_order_relaxed);
}

}  // namespace cacheroute::frontend
