// HealthProber (tools/frontend/health/health_prober.h) against real HTTP servers on loopback: a
// down member's 200 brings it back, failed active checks take an up one out, and the thread
// stops with its StopSignal.
#include <catch2/catch.hpp>
#include <memory>
#include <vector>

#include "cacheroute/dataplane/random.h"
#include "cacheroute/dataplane/router.h"
#include "tests/support/engine_stub.h"
#include "tests/support/eventually.h"
#include "tests/support/free_port.h"
#include "tools/frontend/health/health_prober.h"

namespace cacheroute::frontend {
namespace {

using testing::EngineStub;

// Members e0, e1 (engines) and dead (a port nobody listens on), on a Router of three.
struct Fixture {
  Fixture() {
    config.connect_timeout = absl::Seconds(2);
    config.health_check_timeout = absl::Seconds(5);
    config.failure_threshold = 2;
    config.probe_interval = absl::Milliseconds(10);
    const std::string dead = absl::StrCat("http://127.0.0.1:", testing::FreeLoopbackPort());
    REQUIRE(membership.Apply({{"e0", engines[0].url()}, {"e1", engines[1].url()}, {"dead", dead}})
                .ok());
  }

  FrontendConfig config;
  EngineStub engines[2];
  dataplane::SeededRandom random{3};
  dataplane::Router router{{.destination_count = 0, .capacity = 3}, random};
  DestinationHealth health{3, 2, router};
  Membership membership{{.capacity = 3, .install = [this](const std::vector<std::string>& n) {
                           return router.Resize(n.size(), nullptr, {}).ok
                                      ? absl::OkStatus()
                                      : absl::InternalError("resize");
                         }}};
  StopSignal stop;
};

TEST_CASE("ProbeDown: a down member whose /health answers 200 is routed to again") {
  Fixture f;
  for (uint32_t d = 0; d < 3; ++d) (void)f.router.MarkDown(d);
  f.engines[1].set_health(503);
  HealthProber prober(f.config, f.membership, f.health, f.stop);
  prober.ProbeDown();
  CHECK(f.health.Up(0));
  CHECK_FALSE(f.health.Up(1));  // 503: still down
  CHECK_FALSE(f.health.Up(2));  // no answer
  f.engines[1].set_health(200);
  prober.ProbeDown();
  CHECK(f.health.Up(1));
}

TEST_CASE("ProbeDown asks only down members; CheckUp only up ones") {
  Fixture f;
  (void)f.router.MarkDown(1);
  HealthProber prober(f.config, f.membership, f.health, f.stop);
  prober.ProbeDown();
  CHECK(f.engines[0].health_requests() == 0);
  CHECK(f.engines[1].health_requests() == 1);
  f.engines[1].set_health(503);
  prober.CheckUp();  // e1 is up again: asked, fails once
  CHECK(f.engines[0].health_requests() == 1);
  CHECK(f.engines[1].health_requests() == 2);
}

TEST_CASE("CheckUp: failure_threshold failed checks in a row take an up member out") {
  Fixture f;
  f.engines[0].set_health(500);
  HealthProber prober(f.config, f.membership, f.health, f.stop);
  prober.CheckUp();
  CHECK(f.health.Up(0));
  CHECK(f.health.Up(2));
  prober.CheckUp();
  CHECK_FALSE(f.health.Up(0));  // HTTP 500 twice
  CHECK(f.health.Up(1));        // 200
  CHECK_FALSE(f.health.Up(2));  // no answer twice
}

TEST_CASE("the prober's thread brings members back until its StopSignal is triggered") {
  Fixture f;
  (void)f.router.MarkDown(0);
  HealthProber prober(f.config, f.membership, f.health, f.stop);
  prober.Start();
  CHECK(testing::Eventually([&] { return f.health.Up(0); }));
  f.stop.Trigger();
  prober.Join();
  const int asked = f.engines[0].health_requests() + f.engines[1].health_requests();
  (void)f.router.MarkDown(1);
  prober.ProbeDown();  // the thread is gone: only this round asks
  CHECK(f.engines[0].health_requests() + f.engines[1].health_requests() == asked + 1);
}

}  // namespace
}  // namespace cacheroute::frontend
