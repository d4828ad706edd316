// MembershipWatcher: keeps a Membership in step with its dynamic source (upstreams_file or
// upstreams_dns) and the planner in step with the Membership. Every membership_interval its
// thread re-reads the source and applies a changed list, and, with a PlannerLink, reports the
// current names to the planner (SetDestinations) until it has taken them, again after each change.
// A read that fails keeps the current members and is logged once per distinct error
// (membership_read_failed).
//
// Usage:
//   CACHEROUTE_ASSIGN_OR_RETURN(std::vector<Upstream> initial, InitialMembers(config));
//   membership.Apply(initial);
//   MembershipWatcher watcher(config, membership, planner_link_or_null, stop);
//   watcher.Start();  … stop.Trigger(); watcher.Join();
//   watcher.PollOnce(); watcher.ReportOnce();   // one round each, on the calling thread (tests)
//
// Reads upstreams, upstreams_file, upstreams_dns, dns_server and membership_interval of the
// FrontendConfig. The rounds are the thread's; call them yourself only while it is not running.
#pragma once

#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/frontend/frontend_config.h"
#include "tools/frontend/membership/members.h"
#include "tools/frontend/planner_link/planner_link.h"
#include "tools/frontend/stop_signal.h"

namespace cacheroute::frontend {

// The dynamic source of `config` read once (sources.h).
absl::StatusOr<std::vector<Upstream>> ReadMembershipSource(const FrontendConfig& config);

// The membership to start with: the static list, or the dynamic source read once. A file that
// cannot be read is an error (a bad configuration); a DNS name without addresses yet (a Service
// whose engines are not ready) is not: none, logged, and the watcher finds them later.
absl::StatusOr<std::vector<Upstream>> InitialMembers(const FrontendConfig& config);

class MembershipWatcher {
 public:
  MembershipWatcher(const FrontendConfig& config, Membership& membership, PlannerLink* planner,
                    StopSignal& stop);
  ~MembershipWatcher() { Join(); }
  MembershipWatcher(const MembershipWatcher&) = delete;
  MembershipWatcher& operator=(const MembershipWatcher&) = delete;

  void Start();
  void Join();

  // Reads the source once; applies it when it changed.
  void PollOnce();
  // Sends the current names to the planner unless it has them already (or there are none: the
  // planner keeps its list rather than none).
  void ReportOnce();

 private:
  const FrontendConfig& config_;
  Membership& membership_;
  PlannerLink* const planner_;
  StopSignal& stop_;
  std::string last_error_;             // of the last failed read
  std::vector<std::string> reported_;  // the names the planner took last
  std::thread thread_;
};

}  // namespace cacheroute::frontend
