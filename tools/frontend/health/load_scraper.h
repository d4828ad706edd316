// LoadScraper: engine-reported load. Every EffectiveLoadScrapeInterval (load_scrape_interval, or
// one second for a policy that reads the engines' metrics, llm-d; 0: never) a thread GETs each up
// member's /metrics, sums `load_metric` over its label sets (vllm:num_requests_waiting by
// default; prometheus_text.h) and gives it to Router::SetLoad, so every policy compares
// in_flight + external_load_weight · queue. A failed scrape, a non-200 answer or a page without a
// finite sample of the metric sets the load to 0 (a stale queue would keep traffic away from an
// engine that may have drained) and is counted; the first failure of a member is logged.
// The same page gives the token-work rule's memory term (router.h, DispatchOptions::memory_short)
// its signals: the KV in use (vllm:kv_cache_usage_perc, or vllm:gpu_cache_usage_perc of older
// vLLM) to Router::SetKvUsage, and the KV capacity in tokens (the num_gpu_blocks and block_size
// labels of vllm:cache_config_info) to Router::SetKvCapacity. A page without them, or a failed
// scrape, sets both to 0: no memory term for that destination.
//
// Usage:
//   LoadScraper scraper(config, capacity, membership, router, stop);
//   scraper.Start();   // a thread only when the effective interval > 0
//   … stop.Trigger(); scraper.Join();
//   scraper.ScrapeOnce();   // one round on the calling thread (tests)
//   scraper.Reset(d);       // a new member at index d: load 0, counters zeroed
//
// Reads load_scrape_interval, load_metric and connect_timeout (also the read timeout) of the
// FrontendConfig. Reset and Render may be called from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <thread>

#include "base/exposition.h"
#include "cacheroute/dataplane/router.h"
#include "tools/frontend/frontend_config.h"
#include "tools/frontend/membership/members.h"
#include "tools/frontend/stop_signal.h"

namespace cacheroute::frontend {

class LoadScraper {
 public:
  LoadScraper(const FrontendConfig& config, uint32_t capacity, const Membership& membership,
              dataplane::Router& router, StopSignal& stop);
  ~LoadScraper() { Join(); }
  LoadScraper(const LoadScraper&) = delete;
  LoadScraper& operator=(const LoadScraper&) = delete;

  void Start();
  void Join();
  void ScrapeOnce();
  void Reset(uint32_t d);

  // reported_load, reported_kv_usage, reported_kv_capacity_tokens, load_scrape_failures_total for
  // [0, labels.size()).
  void Render(base::Exposition& page, std::span<const std::string> labels) const;

 private:
  struct State {
    std::atomic<double> reported_load{0};  // the last scraped value (0 when it failed)
    std::atomic<uint64_t> failures{0};
  };
  // The memory term's signals, kept by the Router (Render reads them back from it).
  void SetKv(uint32_t d, double usage, double capacity_tokens);

  const FrontendConfig& config_;
  const Membership& membership_;
  dataplane::Router& router_;
  StopSignal& stop_;
  std::unique_ptr<State[]> state_;
  std::thread thread_;
};

}  // namespace cacheroute::frontend
