// The HTTP side of cacheroute-replay: sends a workload open-loop to OpenAI-compatible endpoints
// (vLLM, cacheroute-engine-emu, or a gateway in front of them) and records what came back.
//
// Open loop: each request is sent at its arrival time whatever happened to earlier ones. At most
// `concurrency` requests are open at once; a request arriving when that many are open is not sent
// and counts as failed (kind "rejected").
//
// Requests: POST /v1/completions with max_tokens = the request's output length, "ignore_eos":
// true, streaming with usage when streaming, the header X-CacheRoute-Key: <key>, and the
// engine-emulator extension fields (cacheroute_hash_ids, cacheroute_block_size,
// cacheroute_input_length); the prompt text (PromptText) gives equal leading text to requests with
// equal leading hash ids. TTFT is the time to the first SSE data chunk when streaming, else the
// whole latency; token counts come from the response's usage (prompt_tokens, completion_tokens,
// prompt_tokens_details.cached_tokens, which counts as 0 when absent).
// A 429 (a front end shed the request) is an outcome of its own, kShed, its latency the time to
// the 429. Why open loop, the prompt text and the usage fields: docs/replay.md, "The HTTP side".
//
// Usage:
//   HttpReplayOptions options{.targets = {"http://127.0.0.1:8001", "http://127.0.0.1:8002"}};
//   HttpReplayResult result = RunHttpReplay(workload, dispatcher.get(), options);
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tools/eval/replay/replay.h"
#include "tools/eval/workload/workload.h"

namespace cacheroute::replay {

enum class PromptMode { kWords, kStub };

struct HttpReplayOptions {
  std::vector<std::string> targets;  // base URLs: gateways (dealt requests in turn), or engines
  // Endpoint pickers' gRPC addresses (HOST:PORT), instead of targets: requests are dealt to them
  // in turn, and each goes through its picker's ext_proc stream as Envoy's filter sends it
  // (EnvoyFilter), then to the endpoint the picker named.
  std::vector<std::string> pickers;
  // The pickers' streams carry header values in HeaderValue.value, as an Envoy with
  // send_header_raw_value off (EnvoyFilter, HeaderField::kValue); else in raw_value.
  bool picker_header_value = false;
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

// `dispatcher` null: the targets are gateways, request i goes to targets[i % targets.size()] (or
// through pickers[i % pickers.size()] when pickers are given).
HttpReplayResult RunHttpReplay(const workload::Workload& workload, Dispatcher* dispatcher,
                               const HttpReplayOptions& options);

// "http://" prepended when `url` has no scheme; a trailing '/' dropped.
std::string NormalizeUrl(const std::string& url);

// The prompt text for a request (docs/replay.md, "The HTTP side"); `index` makes the words of
// blocks without a hash id unique to the request.
std::string PromptText(const workload::Request& request, uint32_t block_size, uint64_t index);

// The JSON body sent for a request.
std::string RequestBody(const workload::Request& request, uint32_t block_size, uint64_t index,
                        const HttpReplayOptions& options);

// The served model's name from GET /v1/models on `url` (the first entry), or empty.
std::string DiscoverModel(const std::string& url, double timeout_s);

}  // namespace cacheroute::replay
