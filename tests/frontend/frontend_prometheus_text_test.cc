// SumSamples and LabelNumber: one metric, or one label of an info metric, out of a Prometheus text
// exposition, as the gateway's load scraper reads vLLM's /metrics.
#include <catch2/catch.hpp>
#include <optional>
#include <string>

#include "tools/frontend/prometheus_text.h"

namespace cacheroute::frontend {
namespace {

constexpr const char* kVllm =
    "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n"
    "# TYPE vllm:num_requests_waiting gauge\n"
    "vllm:num_requests_waiting{model_name=\"llama\"} 7.0\n"
    "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
    "# TYPE vllm:num_requests_running gauge\n"
    "vllm:num_requests_running{model_name=\"llama\"} 12.0\n"
    "vllm:num_requests_waiting_total 99\n";

TEST_CASE("SumSamples reads a gauge whatever its labels") {
  CHECK(SumSamples(kVllm, "vllm:num_requests_waiting") == std::optional<double>(7.0));
  CHECK(SumSamples(kVllm, "vllm:num_requests_running") == std::optional<double>(12.0));
  // A longer name that starts with the metric's is another metric.
  CHECK(SumSamples(kVllm, "vllm:num_requests_waiting_total") == std::optional<double>(99.0));
}

TEST_CASE("SumSamples adds every label set, skips comments, ignores timestamps") {
  const std::string text =
      "q{model_name=\"a\"} 2\n"
      "# q{model_name=\"c\"} 100\n"
      "q{model_name=\"b\",engine=\"1\"} 3.5 1700000000000\n"
      "q 1e1\r\n"
      "  q{} 0.5  \n";
  CHECK(SumSamples(text, "q") == std::optional<double>(16.0));
}

TEST_CASE("SumSamples: label values with escaped quotes and braces") {
  const std::string text = "q{path=\"/a}\\\"b{\",x=\"y\"} 4\n";
  CHECK(SumSamples(text, "q") == std::optional<double>(4.0));
}

TEST_CASE("SumSamples: nullopt when the metric is absent or a value is not a finite number") {
  CHECK_FALSE(SumSamples(kVllm, "vllm:gpu_cache_usage_perc").has_value());
  CHECK_FALSE(SumSamples("", "q").has_value());
  CHECK_FALSE(SumSamples("q NaN\n", "q").has_value());
  CHECK_FALSE(SumSamples("q +Inf\n", "q").has_value());
  CHECK_FALSE(SumSamples("q{a=\"1\"} seven\n", "q").has_value());
  CHECK_FALSE(SumSamples("q{a=\"unterminated} 3\n", "q").has_value());
  CHECK_FALSE(SumSamples("q 1\n", "").has_value());
}

TEST_CASE("LabelNumber reads a number from the first sample's labels") {
  const std::string text =
      "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
      "vllm:cache_config_info_extra{num_gpu_blocks=\"1\"} 1\n"
      "vllm:cache_config_info{block_size=\"16\", cache_dtype=\"fp8\",note=\"a\\\"b\","
      "num_gpu_blocks=\"40071\"} 1.0\n"
      "vllm:cache_config_info{block_size=\"32\",num_gpu_blocks=\"5\"} 1.0\n";
  CHECK(LabelNumber(text, "vllm:cache_config_info", "num_gpu_blocks") ==
        std::optional<double>(40071));
  CHECK(LabelNumber(text, "vllm:cache_config_info", "block_size") == std::optional<double>(16));
  CHECK_FALSE(LabelNumber(text, "vllm:cache_config_info", "cache_dtype").has_value());  // "fp8"
  CHECK_FALSE(LabelNumber(text, "vllm:cache_config_info", "swap_space").has_value());
  CHECK_FALSE(LabelNumber(text, "vllm:model_config_info", "num_gpu_blocks").has_value());
  CHECK_FALSE(LabelNumber("q 1\n", "q", "a").has_value());
  CHECK_FALSE(LabelNumber("q{a=\"1\" 1\n", "q", "a").has_value());
  CHECK_FALSE(LabelNumber(text, "vllm:cache_config_info", "").has_value());
}

}  // namespace
}  // namespace cacheroute::frontend
