// DispatchOptions: which rule the Router routes by beyond the table itself, and that rule's
// parameters (docs/dispatch.md). The defaults are CacheRoute's token-work rule, chosen once on the
// primary study (docs/dispatch.md, "How the parameters were chosen"); DispatchOptions::Paper() is
// the paper's Algorithm 1 ("CacheRoute: Planned Prefix-Affinity Routing for Large-Scale LLM
// Serving", §3.1). Each cost term of the token-work rule (token_work_terms.h) reads its weight
// here.
//
// kDispatchWeights names every cost weight as configuration files spell it, and
// CheckDispatchWeights is their one check: a reader or validator iterates them, so a new weight
// is one field and one row here.
//
// Usage:
//   Router router({.destination_count = 30, .dispatch = DispatchOptions::Paper()}, random);
//   if (Status s = CheckDispatchWeights(options, "fleet"); !s.ok) return s;  // names the weight
#pragma once

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/status.h"

namespace cacheroute::dataplane {

// Which rule routes requests beyond the table itself (docs/dispatch.md).
enum class DispatchRule : uint8_t {
  // The paper's Algorithm 1: an admitted key to the least-loaded up member of T(b), everything else
  // by power of two choices over in-flight requests (paper_rule.h).
  kPaper,
  // CacheRoute's: one cost per candidate in prefill tokens, cost(d) = queued prefill tokens at d
  // + (1 + decode_stall · decoding requests at d + queue_stall · the fleet's mean requests waiting
  // for a first token) · the request's expected uncached tokens at d + queue_wait · the mean
  // prompt · requests waiting for a first token at d + memory_short · the tokens d's KV cache is
  // short of holding the request (where its capacity is known); the lowest wins. Expected cached
  // tokens: the key's previous prompt (at most this one) where d is the key's planned member or its
  // remembered destination while that is warm, the shared template elsewhere. Candidates: the
  // planned set and spill, the remembered destination, the key's hashed pair, one random
  // destination (every destination when R ≤ all_candidates_up_to). token_work_rule.h.
  kTokenWork,
};

// The dispatch rule's parameters. The defaults are CacheRoute's, chosen once on the primary study
// (docs/dispatch.md, "How the parameters were chosen"); Paper() is the published Algorithm 1.
struct DispatchOptions {
  DispatchRule rule = DispatchRule::kTokenWork;
  // γ: how much one uncached prompt token costs each request decoding at the destination, against
  // the request's own wait (a chunk of prefill stalls every decoding sequence of that engine).
  double decode_stall = 0.02;
  // β: how much one uncached prompt token costs each request waiting for its first token, per
  // destination across the fleet (work added anywhere takes capacity the fleet's queue needs).
  double queue_stall = 4.0;
  // κ: what each request waiting for its first token at the destination adds to its cost, in the
  // fleet's mean prompt tokens, however much of that request is cached: it needs a scheduling slot
  // and KV memory before this one (llm-d's queue scorer, in the rule's currency; docs/dispatch.md,
  // "A queue term per destination").
  double queue_wait = 0.05;
  // μ: what each token the destination's KV cache is short of holding the request adds to its
  // cost: the KV its running requests hold (SetKvUsage × SetKvCapacity) + the queued prefill ahead
  // of it + its own uncached tokens, beyond the capacity. Such a request waits at the head of the
  // engine's queue until running requests free blocks, and everything behind it waits too (vLLM
  // admits first come, first served). Nothing where no capacity was set (docs/dispatch.md, "A
  // memory term per destination").
  double memory_short = 1.0;
  // The per-key memory: 2^key_memory_log2 entries of 16 bytes (KeyMemory).
  uint32_t key_memory_log2 = 18;
  // The prefix memory (PrefixMemory, used when a request comes with its block hashes):
  // 2^prefix_memory_log2 entries of 16 bytes; 0: none.
  uint32_t prefix_memory_log2 = 20;
  // With at most this many destinations every one is a candidate (instead of one random one).
  uint32_t all_candidates_up_to = 16;
  // How long a remembered destination stays warm before SetTurnover measured it.
  Duration default_turnover = std::chrono::seconds(60);

  static constexpr DispatchOptions Paper() { return {.rule = DispatchRule::kPaper}; }
};

// The token-work rule's cost weights by the name configuration files give them.
struct DispatchWeight {
  std::string_view name;
  double DispatchOptions::*member;
};
inline constexpr DispatchWeight kDispatchWeights[] = {
    {"decode_stall", &DispatchOptions::decode_stall},
    {"queue_stall", &DispatchOptions::queue_stall},
    {"queue_wait", &DispatchOptions::queue_wait},
    {"memory_short", &DispatchOptions::memory_short},
};

// Every weight finite and ≥ 0 (the rule skips candidates that cannot win only under that); the
// error names `prefix`.<weight> and the value.
inline Status CheckDispatchWeights(const DispatchOptions& options, std::string_view prefix) {
  for (const DispatchWeight& w : kDispatchWeights) {
    const double value = options.*(w.member);
    if (!(value >= 0 && std::isfinite(value))) {
      char shown[32];
      std::snprintf(shown, sizeof shown, "%g", value);
      return Status::Error(std::string(prefix) + "." + std::string(w.name) +
                           ": must be finite and >= 0, got " + shown);
    }
  }
  return Status::Ok();
}

}  // namespace cacheroute::dataplane
