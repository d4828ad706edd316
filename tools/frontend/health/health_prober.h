// HealthProber: the thread that asks upstreams' GET /health and feeds DestinationHealth. Every
// probe_interval it asks each down member (a 200 within connect_timeout brings it back); with
// health_check_interval > 0, every health_check_interval it also checks each up member (no 200
// within health_check_timeout counts as a failed check; failure_threshold in a row mark it down).
// vLLM answers /health at once whatever its queue, so a busy engine passes.
//
// Usage:
//   HealthProber prober(config, membership, health, stop);
//   prober.Start();  … stop.Trigger(); prober.Join();
//   prober.ProbeDown(); prober.CheckUp();   // one round each, on the calling thread (tests)
//
// Reads probe_interval, health_check_interval, health_check_timeout and connect_timeout of the
// FrontendConfig. Start and Join from one thread; the rounds block on the network for at most a
// timeout per member.
#pragma once

#include <thread>

#include "tools/frontend/frontend_config.h"
#include "tools/frontend/health/destination_health.h"
#include "tools/frontend/membership/members.h"
#include "tools/frontend/stop_signal.h"

namespace cacheroute::frontend {

class HealthProber {
 public:
  HealthProber(const FrontendConfig& config, const Membership& membership,
               DestinationHealth& health, StopSignal& stop);
  ~HealthProber() { Join(); }
  HealthProber(const HealthProber&) = delete;
  HealthProber& operator=(const HealthProber&) = delete;

  void Start();
  // Waits for the thread, which ends once `stop` is triggered.
  void Join();

  // One round over the down members, and one active check of the up ones.
  void ProbeDown();
  void CheckUp();

 private:
  void Run();

  const FrontendConfig& config_;
  const Membership& membership_;
  DestinationHealth& health_;
  StopSignal& stop_;
  std::thread thread_;
};

// The status of `address`'s GET /health, or 0 when there was no answer within the timeouts.
int GetHealth(const UpstreamAddress& address, absl::Duration connect_timeout,
              absl::Duration timeout);

}  // namespace cacheroute::frontend
