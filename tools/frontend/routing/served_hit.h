// ServedHit: the served KV hit, measured from the answers' `usage`. Each answer that reports
// cached tokens adds its prompt and cached tokens to per-destination counters (split planned /
// not planned: routed by the table or not) and to an exponential window of about the last 1,000
// such answers, whose cached / prompt ratio is given to Router::SetMeasuredHit (which records it;
// the dispatch learns from each answer through RequestLifecycle::Usage instead, docs/dispatch.md).
// Answers without cached tokens, or with no prompt tokens, are not counted; before the first,
// measured() is none.
//
// Usage:
//   ServedHit hit(capacity, router);
//   hit.Record(d, /*planned=*/true, usage);   // an answer's usage (any thread)
//   hit.measured();                           // the ratio the Router was last given
//
// Thread-safety: any thread. The counters are relaxed atomics; the window takes a mutex for two
// multiply-adds (one answer in a thousand-odd requests' worth of work, off the hot loop).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>

#include "base/exposition.h"
#include "cacheroute/dataplane/router.h"
#include "tools/frontend/openai_fields.h"

namespace cacheroute::frontend {

class ServedHit {
 public:
  // The window's memory: each answer weighs kKeep times the one after it (the fleet simulator's,
  // tools/eval/sim/fleet.cc).
  static constexpr double kKeep = 1 - 1.0 / 1000;

  ServedHit(uint32_t capacity, dataplane::Router& router);

  void Record(uint32_t d, bool planned, const Usage& usage);
  std::optional<double> measured() const;
  // Zeroes d's counters (a new member at that index); the window is the fleet's and stays.
  void Reset(uint32_t d);

  // prompt_tokens_total, cached_tokens_total for [0, labels.size()), and measured_kv_hit_ratio.
  void Render(base::Exposition& page, std::span<const std::string> labels) const;

 private:
  struct Tokens {  // by [planned]
    std::array<std::atomic<uint64_t>, 2> prompt{};
    std::array<std::atomic<uint64_t>, 2> cached{};
  };

  dataplane::Router& router_;
  std::unique_ptr<Tokens[]> tokens_;
  mutable std::mutex mu_;
  double seen_cached_ = 0;  // guarded by mu_
  double seen_prompt_ = 0;  // guarded by mu_
};

}  // namespace cacheroute::frontend
