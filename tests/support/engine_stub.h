// Test-only: EngineStub, an HTTP server on a loopback port that answers what a gateway's
// background threads ask a model server: GET /health (a settable status) and GET /metrics (a
// settable Prometheus page; "" answers 404), counting both. For the prober's and the load
// scraper's tests; the proxy's end-to-end tests have a fuller vLLM look-alike.
//
// Usage:
//   EngineStub engine;                         // serving from here on
//   engine.set_health(503);
//   engine.set_metrics("vllm:num_requests_waiting 3\n");
//   engine.url();                              // "http://127.0.0.1:PORT"
#pragma once

#include <httplib.h>

#include <catch2/catch.hpp>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "tests/support/eventually.h"

namespace cacheroute::testing {

class EngineStub {
 public:
  EngineStub() {
    server_.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      ++health_requests_;
      res.status = health_;
      res.set_content("", "text/plain");
    });
    server_.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      std::lock_guard<std::mutex> lock(mu_);
      ++metrics_requests_;
      if (metrics_.empty()) {
        res.status = 404;
        return;
      }
      res.set_content(metrics_, "text/plain; version=0.0.4");
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    REQUIRE(port_ > 0);
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    REQUIRE(Eventually([&] { return server_.is_running(); }));
  }
  ~EngineStub() {
    server_.stop();
    thread_.join();
  }
  EngineStub(const EngineStub&) = delete;
  EngineStub& operator=(const EngineStub&) = delete;

  std::string url() const { return absl::StrCat("http://127.0.0.1:", port_); }
  void set_health(int status) {
    std::lock_guard<std::mutex> lock(mu_);
    health_ = status;
  }
  void set_metrics(std::string text) {
    std::lock_guard<std::mutex> lock(mu_);
    metrics_ = std::move(text);
  }
  int health_requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return health_requests_;
  }
  int metrics_requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return metrics_requests_;
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  std::mutex mu_;
  int health_ = 200;          // guarded by mu_
  std::string metrics_;       // guarded by mu_
  int health_requests_ = 0;   // guarded by mu_
  int metrics_requests_ = 0;  // guarded by mu_
};

}  // namespace cacheroute::testing
