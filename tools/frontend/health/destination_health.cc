// See destination_health.h.
#include "tools/frontend/health/destination_health.h"

#include "absl/strings/str_cat.h"
#include "base/logging.h"

namespace cacheroute::frontend {
namespace {

constexpr absl::string_view kErrorKindNames[] = {"connect", "reset", "header_timeout",
                                                 "idle_timeout", "protocol"};

template <typename T>
double Relaxed(const std::atomic<T>& value) {
  return static_cast<double>(value.load(std::memory_order_relaxed));
}

}  // namespace

DestinationHealth::DestinationHealth(uint32_t capacity, uint32_t failure_threshold,
                                     dataplane::Router& router)
    : failure_threshold_(failure_threshold), router_(router), state_(new State[capacity]) {}

void DestinationHealth::RecordError(uint32_t d, const Member& member, ErrorKind kind,
                                    absl::string_view error, bool may_mark_down) {
  State& state = state_[d];
  state.errors.fetch_add(1, std::memory_order_relaxed);
  state.error_kinds[static_cast<int>(kind)].fetch_add(1, std::memory_order_relaxed);
  if (!may_mark_down || (kind != ErrorKind::kConnect && kind != ErrorKind::kReset)) return;
  const uint32_t failures = state.consecutive_failures.fetch_add(1, std::memory_order_relaxed) + 1;
  // Exactly one request crosses the threshold: one mark and one log line per outage.
  if (failures == failure_threshold_) {
    MarkDown(d, member, "consecutive_failures", failures, error);
  }
}

void DestinationHealth::ProbeAnswered(uint32_t d, const Member& member) {
  state_[d].consecutive_failures.store(0, std::memory_order_relaxed);
  state_[d].health_failures.store(0, std::memory_order_relaxed);
  (void)router_.MarkUp(d);
  base::LogEvent("info", "destination_up",
                 {{"destination", member.name}, {"url", member.url}, {"health_status", "200"}});
}

void DestinationHealth::HealthCheckFailed(uint32_t d, const Member& member, int status) {
  State& state = state_[d];
  state.health_check_failures.fetch_add(1, std::memory_order_relaxed);
  const uint32_t failures = state.health_failures.fetch_add(1, std::memory_order_relaxed) + 1;
  if (failures == failure_threshold_) {
    MarkDown(d, member, "failed_health_checks", failures,
             status == 0 ? "none" : absl::StrCat("HTTP ", status));
  }
}

void DestinationHealth::MarkDown(uint32_t d, const Member& member, absl::string_view count_name,
                                 uint32_t count, absl::string_view error) {
  (void)router_.MarkDown(d);
  state_[d].marked_down.fetch_add(1, std::memory_order_relaxed);
  base::LogEvent("warning", "destination_down",
                 {{"destination", member.name},
                  {"url", member.url},
                  {std::string(count_name), absl::StrCat(count)},
                  {"error", std::string(error)}});
}

void DestinationHealth::Reset(uint32_t d, bool up) {
  State& state = state_[d];
  const auto zero = [](auto& atomic) { atomic.store(0, std::memory_order_relaxed); };
  zero(state.consecutive_failures);
  zero(state.health_failures);
  zero(state.errors);
  zero(state.marked_down);
  zero(state.health_check_failures);
  for (auto& kind : state.error_kinds) zero(kind);
  (void)(up ? router_.MarkUp(d) : router_.MarkDown(d));
}

void DestinationHealth::RenderCounters(base::Exposition& page,
                                       std::span<const std::string> labels) const {
  const auto per_destination = [&](absl::string_view name, absl::string_view help,
                                   const auto& value_of) {
    page.Family(name, "counter", help);
    for (uint32_t d = 0; d < labels.size(); ++d) page.Sample(name, value_of(state_[d]), labels[d]);
  };
  per_destination("upstream_errors_total",
                  "Upstream errors of every kind towards each destination "
                  "(upstream_error_kinds_total splits them).",
                  [](const State& s) { return Relaxed(s.errors); });
  per_destination("destination_marked_down_total",
                  "Times each destination was marked down after failure_threshold connect "
                  "failures or resets.",
                  [](const State& s) { return Relaxed(s.marked_down); });
  per_destination("health_check_failures_total",
                  "Active health checks (health_check_interval) of an up destination that failed.",
                  [](const State& s) { return Relaxed(s.health_check_failures); });
}

void DestinationHealth::RenderErrorKinds(base::Exposition& page,
                                         std::span<const std::string> labels) const {
  page.Family("upstream_error_kinds_total", "counter",
              "Upstream errors by kind: connect, reset (before the headers: both count towards "
              "marking down; after them: counted only), header_timeout, idle_timeout, protocol.");
  for (uint32_t d = 0; d < labels.size(); ++d) {
    for (int k = 0; k < kErrorKinds; ++k) {
      page.Sample("upstream_error_kinds_total", Relaxed(state_[d].error_kinds[k]),
                  absl::StrCat(labels[d], ",kind=\"", kErrorKindNames[k], "\""));
    }
  }
}

}  // namespace cacheroute::frontend
