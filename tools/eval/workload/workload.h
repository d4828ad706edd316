// The semi-synthetic request stream of the paper's primary workload (the CacheRoute paper,
// §2.1, §4 and Table 6): a key universe with lognormal rates, a top-K active set, per-key arrival
// processes, multi-turn threads and prompts made of a global template, a per-key context, a
// retrieved few-shot block, the thread's history and the current turn. Each prompt is described by
// chained block hashes, as vLLM's prefix cache sees it, so a simulator can replay cache behaviour
// without any text. Deterministic for a seed; about 100k requests take well under a second.
//
// Invariant of every Request: hash_ids[i] == other.hash_ids[i] implies the two prompts agree on
// every token of blocks 0..i (ids chain their parent's id with the block's content), so reuse is
// exact-prefix only, as in vLLM's automatic prefix caching.
//
// Usage:
//   WorkloadProfile profile = PaperPrimaryProfile();
//   profile.top_k = 128;
//   profile.qps = 120;
//   absl::StatusOr<GeneratedWorkload> g = GenerateWorkload(profile);
//   for (const Request& r : g->workload.requests) Simulate(r);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/eval/workload/arrivals.h"
#include "tools/eval/workload/lognormal_rates.h"

namespace cacheroute::workload {

struct Request {
  double arrival_s = 0;        // seconds from the start of the workload
  std::string key;             // the routing key (an opaque business key)
  uint32_t input_length = 0;   // prompt tokens
  uint32_t output_length = 0;  // generated tokens
  // One id per block of Workload::block_size prompt tokens (the last block may be partial). Ids
  // chain: equal ids at position i mean identical prompts up to and including block i.
  std::vector<uint64_t> hash_ids;
  uint64_t thread_id = 0;  // requests of one conversation share it
  uint32_t turn = 1;       // 1-based position in the thread
  // Tokens of the current turn at the end of the prompt (what is new in this request); 0 when
  // unknown, as for traces.
  uint32_t current_turn_length = 0;
};

struct Workload {
  uint32_t block_size = 16;       // tokens per hash id
  std::vector<Request> requests;  // sorted by arrival_s
};

// Every knob of the generator. The defaults are the paper's primary workload; see
// docs/workload.md for the source of each number (paper, or our assumption where it is silent).
struct WorkloadProfile {
  // Key universe (Table 6): lognormal rates, σ = 1.65 gives Gini 0.756 and top-4% ≈ 47% at
  // 128,824 keys, and no key above 0.3%.
  uint64_t keys = 128824;
  double rate_sigma = 1.65;
  double max_key_share = 0.003;
  // Active set: requests come only from the top_k highest-rate keys, in proportion to their rates
  // (0 = all keys). The paper's headline runs use top-K 128.
  uint64_t top_k = 0;
  double qps = 120;         // total offered load of the active set
  double duration_s = 300;  // requests arrive in [0, duration_s)
  // Arrivals, thread and few-shot state are simulated from -warmup_s, but only requests at t >= 0
  // are emitted: a workload then starts mid-conversation, as a window of live traffic does.
  double warmup_s = 0;
  uint64_t seed = 1;
  ArrivalOptions arrivals;  // per key; default Gamma with CV 1.93 (Table 6)

  // Threads (Table 6): 80.8% of requests belong to multi-turn threads, 2.64 requests per thread.
  double multi_turn_share = 0.808;
  double mean_requests_per_thread = 2.64;
  // At an arrival of a key with open threads, the chance it is the next turn of one of them (the
  // least recently served) rather than a new thread. Ours; > 0.62 keeps few threads open per key.
  double follow_up_probability = 0.85;

  // Prompt layout, in token order (§2.1, Table 6; sizes marked "ours" are assumptions).
  uint32_t block_size = 16;           // vLLM's prefix-cache block
  uint32_t template_tokens = 192;     // global template, same for all keys (ours)
  uint32_t context_tokens = 180;      // per-key context (paper: ≈ 180 tokens, 15%)
  // Per-key context sizes (ours): with context_sigma > 0 each key's context is lognormal with
  // median context_tokens and this σ of log(size), clipped to [context_min_tokens,
  // context_max_tokens] (0: no upper clip). Drawn from the key's index alone, so independent of
  // its rate and the same at every load and top_k. 0: every key has context_tokens.
  double context_sigma = 0;
  uint32_t context_min_tokens = 0;
  uint32_t context_max_tokens = 0;
  uint32_t few_shot_tokens = 240;     // retrieved few-shot block (ours)
  uint32_t few_shot_pool = 16;        // distinct few-shot blocks per key (ours)
  double few_shot_break_rate = 0.67;  // consecutive pairs of a key with a different block (paper)
  double mean_turn_tokens = 120;      // current user turn (ours: ≈ 10% of 1.2K, Table 6)
  double mean_output_tokens = 110;    // generated tokens, carried into the thread's history (ours)
  double length_sigma = 0.5;          // σ of log(length) for turns and outputs (ours)
};

// The paper's primary semi-synthetic workload (the defaults above).
WorkloadProfile PaperPrimaryProfile();

// InvalidArgument naming the field and the value for a profile that cannot be generated.
absl::Status ValidateProfile(const WorkloadProfile& profile);

struct KeyRate {
  std::string key;
  double rate = 0;              // requests per second
  uint32_t context_tokens = 0;  // the key's per-key context
};

struct GeneratedWorkload {
  Workload workload;
  std::vector<KeyRate> active_keys;      // the active set, hottest first, rates summing to qps
  RateDistributionStats universe_rates;  // the whole key universe's rate distribution
  RateDistributionStats active_rates;    // the active set's
  // Tokens before the few-shot block (template + context): a consecutive pair of a key's requests
  // whose common prefix ends before the block after this offset broke at the retrieved block. 0
  // when keys' contexts differ in size (context_sigma > 0).
  uint32_t stable_prefix_tokens = 0;
};

// Key i of the universe is named "key-" followed by i zero-padded to the width of keys - 1, as
// cacheroute-synth-rates names them, so the same seed gives the same keys in both.
absl::StatusOr<GeneratedWorkload> GenerateWorkload(const WorkloadProfile& profile);

}  // namespace cacheroute::workload
