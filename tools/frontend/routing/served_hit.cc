// See served_hit.h.
#include "tools/frontend/routing/served_hit.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace cacheroute::frontend {

ServedHit::ServedHit(uint32_t capacity, dataplane::Router& router)
    : router_(router), tokens_(new Tokens[capacity]) {}

void ServedHit::Record(uint32_t d, bool planned, const Usage& usage) {
  if (!usage.cached_tokens.has_value() || usage.prompt_tokens == 0) return;
  Tokens& tokens = tokens_[d];
  tokens.prompt[planned].fetch_add(usage.prompt_tokens, std::memory_order_relaxed);
  tokens.cached[planned].fetch_add(*usage.cached_tokens, std::memory_order_relaxed);
  double hit;
  {
    std::lock_guard<std::mutex> lock(mu_);
    seen_cached_ = seen_cached_ * kKeep + static_cast<double>(*usage.cached_tokens);
    seen_prompt_ = seen_prompt_ * kKeep + static_cast<double>(usage.prompt_tokens);
    hit = seen_cached_ / seen_prompt_;
  }
  (void)router_.SetMeasuredHit(std::clamp(hit, 0.0, 1.0));
}

std::optional<double> ServedHit::measured() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (seen_prompt_ <= 0) return std::nullopt;
  return seen_cached_ / seen_prompt_;
}

void ServedHit::Reset(uint32_t d) {
  for (auto& a : tokens_[d].prompt) a.store(0, std::memory_order_relaxed);
  for (auto& a : tokens_[d].cached) a.store(0, std::memory_order_relaxed);
}

void ServedHit::Render(base::Exposition& page, std::span<const std::string> labels) const {
  page.Family("prompt_tokens_total", "counter",
              "Prompt tokens of answers whose usage reported cached tokens, per destination, "
              "planned (routed by the table) or not.");
  page.Family("cached_tokens_total", "counter",
              "Of those, tokens served from the prefix cache (usage.prompt_tokens_details."
              "cached_tokens): the served KV hit is cached / prompt.");
  for (const bool prompt : {true, false}) {
    const char* name = prompt ? "prompt_tokens_total" : "cached_tokens_total";
    for (uint32_t d = 0; d < labels.size(); ++d) {
      for (int planned = 0; planned < 2; ++planned) {
        const auto& counter = prompt ? tokens_[d].prompt[planned] : tokens_[d].cached[planned];
        page.Sample(name, static_cast<double>(counter.load(std::memory_order_relaxed)),
                    absl::StrCat(labels[d], ",planned=\"", planned, "\""));
      }
    }
  }
  page.Gauge("measured_kv_hit_ratio",
             "The served KV hit given to the router (cached / prompt tokens over ~1,000 answers).",
             measured().value_or(0));
}

}  // namespace cacheroute::frontend
