// Reading one metric out of a Prometheus text exposition (format 0.0.4), as model servers answer
// GET /metrics: the gateway's load scraper uses it for vLLM's `vllm:num_requests_waiting`.
//
// SumSamples(text, "vllm:num_requests_waiting") adds the values of every sample of that metric,
// whatever its labels (vLLM labels by model_name; a server with two models reports both), and
// returns nullopt when the text has no sample of it. Comment lines (# HELP, # TYPE) are skipped;
// label values may hold escaped quotes and braces; an optional timestamp after the value is
// ignored. A sample whose value is not a finite number (NaN, +Inf, garbage) makes the result
// nullopt too: a load signal must be a number. Pure; no allocation beyond the result.
//
// LabelNumber(text, "vllm:cache_config_info", "num_gpu_blocks") reads a number from the first
// sample's labels (vLLM publishes its cache configuration as label values of an info metric);
// nullopt when there is no such sample or label, or its value is not a finite number.
#pragma once

#include <optional>

#include "absl/strings/string_view.h"

namespace cacheroute::frontend {

std::optional<double> SumSamples(absl::string_view text, absl::string_view metric);
std::optional<double> LabelNumber(absl::string_view text, absl::string_view metric,
                                  absl::string_view label);

}  // namespace cacheroute::frontend
