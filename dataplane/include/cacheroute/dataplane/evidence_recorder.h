// EvidenceRecorder: a gateway's rollout evidence (arm_evidence.h) for the current report window.
// The gateway records every finished keyed request while its table has a rollout; the
// RateReporter drains it into each rate report, so the evidence reaches the planner once, with the
// report's (gateway, sequence) (docs/gate.md).
//
// The evidence of one window belongs to one split: a Record at another table_fraction than the
// window's drops what the old split gathered and starts over at the new one (a gate decides on
// evidence of its current split only). Thread-safe: one mutex, held for a few additions.
//
// Usage:
//   EvidenceRecorder evidence;
//   evidence.Record(table->table_fraction(), arm, ttft_seconds, failed, prompt, cached);
//   if (std::optional<WindowEvidence> w = evidence.Drain()) Send(w->table_fraction, w->evidence);
#pragma once

#include <cstdint>
#include <mutex>
#include <optional>

#include "cacheroute/dataplane/arm_evidence.h"

namespace cacheroute::dataplane {

struct WindowEvidence {
  double table_fraction = 1.0;
  Evidence evidence;
};

class EvidenceRecorder {
 public:
  // One finished request on `arm`: its time to first token (none when nothing came back), whether
  // it failed (5xx or broken off), and its answer's prompt and cached tokens (0 when unknown).
  void Record(double table_fraction, Arm arm, std::optional<double> ttft_seconds, bool failed,
              uint64_t prompt_tokens, uint64_t cached_tokens) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!window_.has_value() || window_->table_fraction != table_fraction) {
      window_.emplace(WindowEvidence{.table_fraction = table_fraction, .evidence = {}});
    }
    ArmEvidence& e = window_->evidence.of(arm);
    ++e.requests;
    if (failed) ++e.failures;
    if (ttft_seconds.has_value()) e.ttft.Observe(*ttft_seconds);
    if (cached_tokens <= prompt_tokens) {
      e.prompt_tokens += prompt_tokens;
      e.cached_tokens += cached_tokens;
    }
  }

  // The window's evidence, or none when nothing was recorded since the last Drain; starts a new
  // window.
  std::optional<WindowEvidence> Drain() {
    std::lock_guard<std::mutex> lock(mu_);
    std::optional<WindowEvidence> out = std::move(window_);
    window_.reset();
    return out;
  }

 private:
  std::mutex mu_;
  std::optional<WindowEvidence> window_;
};

}  // namespace cacheroute::dataplane
