// See metrics.h.
#include "tools/eval/engine_emu/metrics.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/exposition.h"

namespace cacheroute::engine_emu {

using base::Exposition;

std::string RenderMetrics(const EngineMetrics& m, std::string_view model_name,
                          std::string_view engine) {
  Exposition page("", absl::StrCat(Exposition::Label("model_name", absl::string_view(model_name.data(), model_name.size())), ",",
                                   Exposition::Label("engine", absl::string_view(engine.data(), engine.size()))));
  auto counter = [&](absl::string_view name, absl::string_view help, double value) {
    page.Family(name, "counter", help);
    page.Sample(name, value);
  };
  auto gauge = [&](absl::string_view name, absl::string_view help, double value) {
    page.Family(name, "gauge", help);
    page.Sample(name, value);
  };
  counter("vllm:prefix_cache_queries_total",
          "Prefix cache queries, in terms of number of queried tokens.",
          static_cast<double>(m.prefix_queries));
  counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in terms of number of cached tokens.",
          static_cast<double>(m.prefix_hits));
  counter("vllm:prompt_tokens_total", "Number of prefill tokens processed.",
          static_cast<double>(m.prompt_tokens));
  counter("vllm:generation_tokens_total", "Number of generation tokens processed.",
          static_cast<double>(m.generation_tokens));
  page.Family("vllm:request_success_total", "counter", "Count of successfully processed requests.");
  page.Sample("vllm:request_success_total", static_cast<double>(m.finished),
              "finished_reason=\"length\"");
  gauge("vllm:num_requests_running", "Number of requests in model execution batches.", m.running);
  gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", m.waiting);
  gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", m.kv_usage);
  // vLLM's cache configuration, as label values of an info metric.
  page.Family("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig");
  page.Sample(
      "vllm:cache_config_info", 1,
      absl::StrFormat("block_size=\"%d\",num_gpu_blocks=\"%d\"", sim::kBlockTokens, m.kv_blocks));

  constexpr absl::string_view kTtft = "vllm:time_to_first_token_seconds";
  page.Family(kTtft, "histogram", "Histogram of time to first token in seconds.");
  const std::string bucket = absl::StrCat(kTtft, "_bucket");
  uint64_t cumulative = 0;
  for (size_t i = 0; i < kTtftBuckets.size(); ++i) {
    cumulative += m.ttft_buckets[i];
    page.Sample(bucket, static_cast<double>(cumulative),
                absl::StrFormat("le=\"%g\"", kTtftBuckets[i]));
  }
  cumulative += m.ttft_buckets.back();
  page.Sample(bucket, static_cast<double>(cumulative), "le=\"+Inf\"");
  page.Sample(absl::StrCat(kTtft, "_sum"), m.ttft_sum);
  page.Sample(absl::StrCat(kTtft, "_count"), static_cast<double>(m.ttft_count));
  return page.Take();
}

}  // namespace cacheroute::engine_emu
