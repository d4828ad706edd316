// See request_lifecycle.h.
#include "tools/frontend/routing/request_lifecycle.h"

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "tools/frontend/routing/routing_core.h"

namespace cacheroute::frontend {

void RequestLifecycle::FirstToken(bool streamed) {
  if (ttft_seconds_.has_value()) return;
  in_flight_.FirstToken();
  const auto ttft = core_->clock_.Now() - start_;
  if (streamed) core_->latency_[destination()].ttft.Observe(ttft);
  ttft_seconds_ = std::chrono::duration<double>(ttft).count();
}

void RequestLifecycle::Usage(const frontend::Usage& usage) {
  core_->served_hit_.Record(destination(), planned(), usage);
  core_->prompt_estimate_.Observe(prompt_size_, usage.prompt_tokens);
  if (key_id_.has_value() && usage.prompt_tokens > 0) {
    core_->key_sizes_.Add(*key_id_, usage.prompt_tokens, usage.cached_tokens);
  }
  if (usage.cached_tokens.has_value()) {
    core_->router_.ObserveServed(
        in_flight_.decision(),
        static_cast<uint32_t>(std::min<uint64_t>(usage.prompt_tokens, UINT32_MAX)),
        static_cast<uint32_t>(std::min<uint64_t>(*usage.cached_tokens, UINT32_MAX)));
    if (ok()) {
      core_->ObserveIntake(
          destination(), static_cast<double>(usage.prompt_tokens -
                                             std::min(usage.prompt_tokens, *usage.cached_tokens)) +
                             static_cast<double>(usage.completion_tokens));
    }
  }
  usage_ = usage;
}

void RequestLifecycle::UpstreamDone() {
  if (upstream_done_) return;
  upstream_done_ = true;
  in_flight_.Release();
  ticket_.End();
  core_->latency_[destination()].duration.Observe(core_->clock_.Now() - start_);
}

void RequestLifecycle::Finish(int status) {
  if (finished_ || !keyed()) return;
  finished_ = true;
  const double table_fraction = core_->router_.table_fraction();
  if (table_fraction >= 1) return;  // no rollout: no evidence to gather
  const dataplane::Arm arm = reason() == dataplane::Reason::kControlArm ? dataplane::Arm::kControl
                                                                        : dataplane::Arm::kTable;
  uint64_t prompt = 0, cached = 0;
  if (usage_.has_value() && usage_->cached_tokens.has_value()) {
    prompt = usage_->prompt_tokens;
    cached = *usage_->cached_tokens;
  }
  core_->evidence_.Record(table_fraction, arm, ttft_seconds_, status >= 500, prompt, cached);
}

}  // namespace cacheroute::frontend
