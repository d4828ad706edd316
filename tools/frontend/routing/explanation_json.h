// ExplanationJson: a Router's Explanation (cacheroute/dataplane/explanation.h) as the JSON a
// front end's debug endpoint answers: why a request would go where it would. Destinations are
// named by the front end's members (`names`, by index; an index without a name as its number).
//
//   {"policy": "cacheroute", "rule": "token_work", "keyed": true, "key_id": "…",
//    "prompt_tokens": 1200,
//    "decision": {"destination": "engine-2", "index": 2, "reason": "planned", "planned": true,
//                 "spilled": false, "expected_uncached_tokens": 240, "expected": "key"},
//    "inputs": {"prompt_tokens": …, "template_tokens": …, "key_cached_tokens": …, …},
//    "chosen": {candidate}, "runner_up": {candidate or null},
//    "candidates": [{"destination": "engine-2", "index": 2, "kind": "planned", "up": true,
//                    "cost": 512.0, "expected_cached_tokens": 960, "expected": "key",
//                    "terms": {"queued_work": …, "queue_wait": …, "uncached_prefill": …,
//                              "memory_short": …}}, …]}
//
// Under the paper's rule a candidate's cost is its load and it has no terms. Key ids are strings
// (JSON numbers lose 64-bit precision). Pure; any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "cacheroute/dataplane/explanation.h"

namespace cacheroute::frontend {

struct ExplainedRequest {
  std::string policy;
  std::optional<uint64_t> key_id;  // none: a request without a key
  uint32_t prompt_tokens = 0;      // as estimated for the pick (0: unknown)
};

std::string ExplanationJson(const ExplainedRequest& request,
                            const dataplane::Explanation& explanation,
                            std::span<const std::string> names);

}  // namespace cacheroute::frontend
