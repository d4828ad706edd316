// LoadScraper (tools/frontend/health/load_scraper.h) against real HTTP servers on loopback: the
// load_metric summed over label sets reaches the Router; a failed scrape is 0, counted, and
// logged once.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "cacheroute/dataplane/random.h"
#include "tests/support/engine_stub.h"
#include "tests/support/eventually.h"
#include "tools/frontend/health/load_scraper.h"

namespace cacheroute::frontend {
namespace {

using testing::EngineStub;

struct Fixture {
  Fixture() {
    config.connect_timeout = absl::Seconds(2);
    config.load_metric = "vllm:num_requests_waiting";
    REQUIRE(membership.Apply({{"e0", engines[0].url()}, {"e1", engines[1].url()}}).ok());
  }
  std::string Page(LoadScraper& scraper) {
    base::Exposition page("g_");
    scraper.Render(page, labels);
    return page.Take();
  }

  FrontendConfig config;
  EngineStub engines[2];
  dataplane::SeededRandom random{5};
  dataplane::Router router{{.destination_count = 0, .capacity = 2}, random};
  Membership membership{{.capacity = 2, .install = [this](const std::vector<std::string>& n) {
                           (void)router.Resize(n.size(), nullptr, {});
                           return absl::OkStatus();
                         }}};
  std::vector<std::string> labels = {"destination=\"e0\"", "destination=\"e1\""};
  StopSignal stop;
};

TEST_CASE("ScrapeOnce: each up member's load_metric, summed over its label sets, is its load") {
  Fixture f;
  f.engines[0].set_metrics(
      "# HELP vllm:num_requests_waiting Waiting.\n"
      "vllm:num_requests_waiting{model_name=\"a\"} 3\n"
      "vllm:num_requests_waiting{model_name=\"b\"} 4\n");
  f.engines[1].set_metrics("vllm:num_requests_waiting 0\n");
  LoadScraper scraper(f.config, 2, f.membership, f.router, f.stop);
  scraper.ScrapeOnce();
  CHECK(f.router.loads().Load(0) == 7);
  CHECK(f.router.loads().Load(1) == 0);
  const std::string page = f.Page(scraper);
  CHECK(absl::StrContains(page, "g_reported_load{destination=\"e0\"} 7\n"));
  CHECK(absl::StrContains(page, "g_load_scrape_failures_total{destination=\"e0\"} 0\n"));
}

TEST_CASE("a page without the metric, or no page, is load 0 and a counted failure") {
  Fixture f;
  f.engines[0].set_metrics("vllm:num_requests_waiting 9\n");
  LoadScraper scraper(f.config, 2, f.membership, f.router, f.stop);
  scraper.ScrapeOnce();
  REQUIRE(f.router.loads().Load(0) == 9);
  f.engines[0].set_metrics("other_metric 1\n");  // no sample of it: a stale 9 would mislead
  scraper.ScrapeOnce();
  scraper.ScrapeOnce();
  CHECK(f.router.loads().Load(0) == 0);
  const std::string page = f.Page(scraper);
  CHECK(absl::StrContains(page, "g_reported_load{destination=\"e0\"} 0\n"));
  CHECK(absl::StrContains(page, "g_load_scrape_failures_total{destination=\"e0\"} 2\n"));
  CHECK(absl::StrContains(page, "g_load_scrape_failures_total{destination=\"e1\"} 3\n"));  // 404
}

TEST_CASE(
    "ScrapeOnce: the KV usage and vLLM's cache configuration give the memory term's signals") {
  Fixture f;
  f.engines[0].set_metrics(
      "vllm:num_requests_waiting 1\n"
      "vllm:kv_cache_usage_perc{model_name=\"a\"} 0.25\n"
      "vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"4000\"} 1\n");
  // An older vLLM's name for the usage, and no cache configuration: no capacity, so no term.
  f.engines[1].set_metrics("vllm:num_requests_waiting 0\nvllm:gpu_cache_usage_perc 0.5\n");
  LoadScraper scraper(f.config, 2, f.membership, f.router, f.stop);
  scraper.ScrapeOnce();
  CHECK(f.router.kv_capacity(0) == 64000);
  CHECK(f.router.loads().Scraped(0).kv_usage == 0.25);
  CHECK(f.router.kv_capacity(1) == 0);
  CHECK(f.router.loads().Scraped(1).kv_usage == 0.5);
  const std::string page = f.Page(scraper);
  CHECK(absl::StrContains(page, "g_reported_kv_usage{destination=\"e0\"} 0.25\n"));
  CHECK(absl::StrContains(page, "g_reported_kv_capacity_tokens{destination=\"e0\"} 64000\n"));
  CHECK(absl::StrContains(page, "g_reported_kv_capacity_tokens{destination=\"e1\"} 0\n"));
  // A later page without them sets both to 0 rather than keep stale ones.
  f.engines[0].set_metrics("vllm:num_requests_waiting 1\n");
  scraper.ScrapeOnce();
  CHECK(f.router.kv_capacity(0) == 0);
  CHECK(f.router.loads().Scraped(0).kv_usage == 0);
}

TEST_CASE("a down member is not scraped; Reset clears a new member's load and counters") {
  Fixture f;
  f.engines[0].set_metrics("vllm:num_requests_waiting 2\n");
  LoadScraper scraper(f.config, 2, f.membership, f.router, f.stop);
  (void)f.router.MarkDown(1);
  scraper.ScrapeOnce();
  CHECK(f.engines[1].metrics_requests() == 0);
  REQUIRE(f.router.loads().Load(0) == 2);
  scraper.Reset(0);
  CHECK(f.router.loads().Load(0) == 0);
  CHECK(absl::StrContains(f.Page(scraper), "g_reported_load{destination=\"e0\"} 0\n"));
}

TEST_CASE("without load_scrape_interval no thread scrapes; with it, one does until stopped") {
  Fixture f;
  f.engines[0].set_metrics("vllm:num_requests_waiting 5\n");
  {
    LoadScraper idle(f.config, 2, f.membership, f.router, f.stop);
    idle.Start();
    idle.Join();
    CHECK(f.engines[0].metrics_requests() == 0);
  }
  f.config.load_scrape_interval = absl::Milliseconds(10);
  LoadScraper scraper(f.config, 2, f.membership, f.router, f.stop);
  scraper.Start();
  CHECK(testing::Eventually([&] { return f.engines[0].metrics_requests() >= 2; }));
  f.stop.Trigger();
  scraper.Join();
  CHECK(f.router.loads().Load(0) == 5);
}

}  // namespace
}  // namespace cacheroute::frontend
