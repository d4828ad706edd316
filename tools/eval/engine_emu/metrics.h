// The engine emulator's /metrics page: vLLM's Prometheus metric names (docs/references.md,
// "What a vLLM server exposes"), every sample labelled model_name and engine, so dashboards and
// scrapers written for vLLM read the emulator unchanged. Accepted by `promtool check metrics`
// (tests/eval/engine_emu/engine_emu_test.cc runs it when promtool is installed).
//
//   vllm:prefix_cache_queries_total   counter  prompt tokens looked up in the prefix cache
//   vllm:prefix_cache_hits_total      counter  of which found cached
//   vllm:prompt_tokens_total          counter  prompt tokens of requests that began decoding
//   vllm:generation_tokens_total      counter  output tokens produced
//   vllm:request_success_total        counter  finished requests (finished_reason="length")
//   vllm:num_requests_running         gauge    admitted requests (prefilling or decoding)
//   vllm:num_requests_waiting         gauge    queued requests
//   vllm:kv_cache_usage_perc          gauge    fraction of KV blocks held by requests, 0..1
//   vllm:time_to_first_token_seconds  histogram  modelled TTFT (engine_runner.h)
#pragma once

#include <string>
#include <string_view>

#include "tools/eval/engine_emu/engine_runner.h"

namespace cacheroute::engine_emu {

std::string RenderMetrics(const EngineMetrics& metrics, std::string_view model_name,
                          std::string_view engine);

}  // namespace cacheroute::engine_emu
