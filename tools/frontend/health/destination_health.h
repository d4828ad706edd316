// DestinationHealth: whether each destination is routed to, decided the way Envoy's outlier
// detection does, "slow is not dead": only a failed connect or a reset before the response
// headers (kConnect, kReset) counts towards marking a destination down; timeouts, protocol errors
// and breaks after the headers are counted but never mark it down. failure_threshold such
// failures in a row, or as many failed active health checks in a row, mark it down in the Router
// (Router::MarkDown: no policy picks it) once per outage, logged as destination_down; a 200 from
// its /health while down (the prober) marks it up again, logged as destination_up. Any answered
// request resets the count. docs/gateway.md, "Failures: slow is not dead".
//
// Usage:
//   DestinationHealth health(capacity, config.failure_threshold, router);
//   health.RecordError(d, member, ErrorKind::kConnect, "could not connect: …");  // request path
//   health.RecordSuccess(d);                                                     // headers came
//   health.ProbeAnswered(d, member);     // prober: a down destination answered 200
//   health.Reset(d, /*up=*/true);        // a new member at index d
//
// Thread-safety: every method may be called from any thread (relaxed atomics; exactly one of
// concurrent failures crosses the threshold, so an outage is marked and logged once).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/strings/string_view.h"
#include "base/exposition.h"
#include "cacheroute/dataplane/router.h"
#include "tools/frontend/membership/members.h"

namespace cacheroute::frontend {

// Upstream error kinds (metrics label `kind`); only kConnect and kReset may mark a destination
// down.
enum class ErrorKind : uint8_t { kConnect, kReset, kHeaderTimeout, kIdleTimeout, kProtocol };
inline constexpr int kErrorKinds = 5;

class DestinationHealth {
 public:
  DestinationHealth(uint32_t capacity, uint32_t failure_threshold, dataplane::Router& router);

  bool Up(uint32_t d) const { return router_.loads().Up(d); }

  // Request path: the upstream's response headers arrived.
  void RecordSuccess(uint32_t d) {
    state_[d].consecutive_failures.store(0, std::memory_order_relaxed);
  }
  // Request path: an upstream error towards `member` at `d`; `may_mark_down` false for errors
  // after the headers (the destination has answered).
  void RecordError(uint32_t d, const Member& member, ErrorKind kind, absl::string_view error,
                   bool may_mark_down = true);

  // Prober: `member`, down at `d`, answered its /health with 200: routed to again.
  void ProbeAnswered(uint32_t d, const Member& member);
  // Prober, active checks of an up destination: passed, or failed with `status` (0: no answer).
  void HealthCheckPassed(uint32_t d) {
    state_[d].health_failures.store(0, std::memory_order_relaxed);
  }
  void HealthCheckFailed(uint32_t d, const Member& member, int status);

  // A new member at `d`: counters zeroed, and up or down as given (a moved member keeps the
  // health it had).
  void Reset(uint32_t d, bool up);

  // upstream_errors_total, destination_marked_down_total, health_check_failures_total for the
  // destinations [0, labels.size()), labels[d] being d's `destination="…"`.
  void RenderCounters(base::Exposition& page, std::span<const std::string> labels) const;
  // upstream_error_kinds_total.
  void RenderErrorKinds(base::Exposition& page, std::span<const std::string> labels) const;

 private:
  struct State {
    std::atomic<uint32_t> consecutive_failures{0};  // connect failures and resets in a row
    std::atomic<uint32_t> health_failures{0};       // active health checks failed in a row
    std::atomic<uint64_t> errors{0};
    std::array<std::atomic<uint64_t>, kErrorKinds> error_kinds{};
    std::atomic<uint64_t> marked_down{0};
    std::atomic<uint64_t> health_check_failures{0};  // in all
  };
  // Marks `d` down (counted, logged with `count_name`=count and the error).
  void MarkDown(uint32_t d, const Member& member, absl::string_view count_name, uint32_t count,
                absl::string_view error);

  const uint32_t failure_threshold_;
  dataplane::Router& router_;
  std::unique_ptr<State[]> state_;
};

}  // namespace cacheroute::frontend
