// See health_prober.h.
#include "tools/frontend/health/health_prober.h"

#include <chrono>

#include "tools/frontend/health/upstream_get.h"

namespace cacheroute::frontend {

int GetHealth(const UpstreamAddress& address, absl::Duration connect_timeout,
              absl::Duration timeout) {
  httplib::Result result = UpstreamGet(address, "/health", connect_timeout, timeout);
  return result ? result->status : 0;
}

HealthProber::HealthProber(const FrontendConfig& config, const Membership& membership,
                           DestinationHealth& health, StopSignal& stop)
    : config_(config), membership_(membership), health_(health), stop_(stop) {}

void HealthProber::Start() {
  thread_ = std::thread([this] { Run(); });
}

void HealthProber::Join() {
  if (thread_.joinable()) thread_.join();
}

void HealthProber::ProbeDown() {
  const std::shared_ptr<const Members> members = membership_.Current();
  for (uint32_t d = 0; d < members->count; ++d) {
    if (health_.Up(d)) continue;
    const Member& member = *members->by_index[d];
    if (GetHealth(member.address, config_.connect_timeout, config_.connect_timeout) == 200) {
      health_.ProbeAnswered(d, member);
    }
  }
}

void HealthProber::CheckUp() {
  const std::shared_ptr<const Members> members = membership_.Current();
  for (uint32_t d = 0; d < members->count; ++d) {
    if (!health_.Up(d)) continue;
    const Member& member = *members->by_index[d];
    const int status =
        GetHealth(member.address, config_.connect_timeout, config_.health_check_timeout);
    if (status == 200) {
      health_.HealthCheckPassed(d);
    } else {
      health_.HealthCheckFailed(d, member, status);
    }
  }
}

void HealthProber::Run() {
  const bool active = config_.health_check_interval > absl::ZeroDuration();
  const auto interval = absl::ToChronoMicroseconds(config_.health_check_interval);
  auto next_check = std::chrono::steady_clock::now() + interval;
  while (!stop_.WaitFor(config_.probe_interval)) {
    ProbeDown();
    if (!active || std::chrono::steady_clock::now() < next_check) continue;
    next_check = std::chrono::steady_clock::now() + interval;
    CheckUp();
  }
}

}  // namespace cacheroute::frontend
