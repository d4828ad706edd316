// The HTTP side of cacheroute-replay: sends a workload open-loop to OpenAI-compatible endpoints
// (vLLM, cacheroute-engine-emu, or a gateway in front of them) and records what came back.
//
// Open loop. Each request is sent at its arrival time whatever happened to earlier ones, so a slow
// fleet shows up as queueing in TTFT and latency, not as a lower offered rate. At most
// `concurrency` requests are open at once; a request arriving when that many are open is not sent
// and counts as failed (kind "rejected"): delaying it instead would turn the replay into a closed
// loop and hide exactly the overload it is meant to reveal.
//
// Requests. POST /v1/completions with max_tokens = the request's output length, "ignore_eos": true
// (vLLM's switch for exact output lengths), stream + stream_options.include_usage when streaming,
// the header X-CacheRoute-Key: <key>, and the engine-emulator extension fields
// (cacheroute_hash_ids, cacheroute_block_size, cacheroute_input_length) so an emulator reproduces
// the workload's prefix sharing exactly. The prompt text (PromptText) reproduces it for a real
// engine too: every hash id becomes block_size words chosen from that id, so requests with equal
// leading ids have equal leading text. A real tokenizer will not make each word exactly one token,
// so prompt lengths there are approximate.
//
// Measurement. TTFT is the time to the first byte of the response body (the first SSE data
// chunk) when streaming, else the whole latency. Token counts come from the response's usage
// (prompt_tokens, completion_tokens, prompt_tokens_details.cached_tokens; vLLM fills the last
// only with --enable-prompt-tokens-details, else it counts as 0).
//
// Usage:
//   HttpReplayOptions options{.targets = {"http://127.0.0.1:8001", "http://127.0.0.1:8002"}};
//   HttpReplayResult result = RunHttpReplay(workload, dispatcher.get(), options);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/replay/replay.h"
#include "tools/workload/workload.h"

namespace cacheroute::replay {

enum class PromptMode { kWords, kStub };

struct HttpReplayOptions {
  std::vector<std::string> targets;  // base URLs; one gateway, or the engines
  std::string model;                 // the "model" field; empty: omitted
  bool stream = true;
  double timeout_s = 60;       // per request: connect, and no byte for this long
  uint32_t concurrency = 512;  // open requests at most
  PromptMode prompt = PromptMode::kWords;
};

struct HttpReplayResult {
  std::vector<Outcome> outcomes;  // one per request, in workload order
  double wall_s = 0;              // from the first arrival to the last response
};

// `dispatcher` null: every request goes to targets[0] (a gateway routes it).
HttpReplayResult RunHttpReplay(const workload::Workload& workload, Dispatcher* dispatcher,
                               const HttpReplayOptions& options);

// "http://" prepended when `url` has no scheme; a trailing '/' dropped.
std::string NormalizeUrl(const std::string& url);

// The prompt text for a request (see the header comment); `index` makes the words of blocks
// without a hash id unique to the request.
std::string PromptText(const workload::Request& request, uint32_t block_size, uint64_t index);

// The JSON body sent for a request.
std::string RequestBody(const workload::Request& request, uint32_t block_size, uint64_t index,
                        const HttpReplayOptions& options);

// The served model's name from GET /v1/models on `url` (the first entry), or empty.
std::string DiscoverModel(const std::string& url, double timeout_s);

}  // namespace cacheroute::replay
