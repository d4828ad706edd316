// See load_scraper.h.
#include "tools/frontend/health/load_scraper.h"

#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "tools/frontend/health/upstream_get.h"
#include "tools/frontend/prometheus_text.h"

namespace cacheroute::frontend {

LoadScraper::LoadScraper(const FrontendConfig& config, uint32_t capacity,
                         const Membership& membership, dataplane::Router& router, StopSignal& stop)
    : config_(config),
      membership_(membership),
      router_(router),
      stop_(stop),
      state_(new State[capacity]) {}

void LoadScraper::Start() {
  const absl::Duration interval = EffectiveLoadScrapeInterval(config_);
  if (interval <= absl::ZeroDuration()) return;
  thread_ = std::thread([this, interval] {
    do {
      ScrapeOnce();
    } while (!stop_.WaitFor(interval));
  });
}

void LoadScraper::Join() {
  if (thread_.joinable()) thread_.join();
}

void LoadScraper::ScrapeOnce() {
  const std::shared_ptr<const Members> members = membership_.Current();
  for (uint32_t d = 0; d < members->count; ++d) {
    if (!router_.loads().Up(d)) continue;
    const Member& member = *members->by_index[d];
    httplib::Result result =
        UpstreamGet(member.address, "/metrics", config_.connect_timeout, config_.connect_timeout);
    std::optional<double> value;
    if (result && result->status == 200) value = SumSamples(result->body, config_.load_metric);
    if (!value.has_value() || *value < 0) {
      if (state_[d].failures.fetch_add(1, std::memory_order_relaxed) == 0) {
        // The first one is worth a line; the counter tells the rest.
        base::LogEvent("warning", "load_scrape_failed",
                       {{"destination", member.name},
                        {"url", member.url},
                        {"metric", config_.load_metric},
                        {"detail", result ? absl::StrCat("HTTP ", result->status,
                                                         ", or no finite sample of the metric")
                                          : httplib::to_string(result.error())}});
      }
      value = 0;
    }
    state_[d].reported_load.store(*value, std::memory_order_relaxed);
    (void)router_.SetLoad(d, *value);
    // The memory term's signals; absent (or a failed scrape) means no term, not a stale one.
    std::optional<double> usage, blocks, block_size;
    if (result && result->status == 200) {
      usage = SumSamples(result->body, "vllm:kv_cache_usage_perc");
      if (!usage.has_value()) usage = SumSamples(result->body, "vllm:gpu_cache_usage_perc");
      blocks = LabelNumber(result->body, "vllm:cache_config_info", "num_gpu_blocks");
      block_size = LabelNumber(result->body, "vllm:cache_config_info", "block_size");
    }
    const double kv_usage = usage.has_value() ? std::clamp(*usage, 0.0, 1.0) : 0.0;
    const double kv_capacity = blocks.has_value() && block_size.has_value() && *blocks > 0 &&
                                       *block_size > 0 && usage.has_value()
                                   ? *blocks * *block_size
                                   : 0.0;
    SetKv(d, kv_usage, kv_capacity);
  }
}

void LoadScraper::SetKv(uint32_t d, double usage, double capacity_tokens) {
  (void)router_.SetKvUsage(d, usage);
  (void)router_.SetKvCapacity(d, capacity_tokens);
}

void LoadScraper::Reset(uint32_t d) {
  state_[d].reported_load.store(0, std::memory_order_relaxed);
  state_[d].failures.store(0, std::memory_order_relaxed);
  (void)router_.SetLoad(d, 0);
  SetKv(d, 0, 0);
}

void LoadScraper::Render(base::Exposition& page, std::span<const std::string> labels) const {
  page.Family("reported_load", "gauge",
              "The load_metric each destination last reported (load_scrape_interval; 0 when "
              "off or the scrape failed).");
  for (uint32_t d = 0; d < labels.size(); ++d) {
    page.Sample("reported_load", state_[d].reported_load.load(std::memory_order_relaxed),
                labels[d]);
  }
  page.Family("reported_kv_usage", "gauge",
              "The KV-cache usage each destination last reported (0 when absent or failed).");
  for (uint32_t d = 0; d < labels.size(); ++d) {
    page.Sample("reported_kv_usage", router_.loads().Scraped(d).kv_usage, labels[d]);
  }
  page.Family("reported_kv_capacity_tokens", "gauge",
              "The KV capacity each destination last reported, num_gpu_blocks x block_size of "
              "vllm:cache_config_info (0 when absent or failed: no memory term).");
  for (uint32_t d = 0; d < labels.size(); ++d) {
    page.Sample("reported_kv_capacity_tokens", router_.kv_capacity(d), labels[d]);
  }
  page.Family("load_scrape_failures_total", "counter",
              "Scrapes of a destination's /metrics that failed or lacked load_metric.");
  for (uint32_t d = 0; d < labels.size(); ++d) {
    page.Sample("load_scrape_failures_total",
                static_cast<double>(state_[d].failures.load(std::memory_order_relaxed)), labels[d]);
  }
}

}  // namespace cacheroute::frontend
