// MembershipWatcher: keeps a Membership in step with its dynamic source (upstreams_file,
// upstreams_dns or upstreams_inference_pool) and the planner in step with the Membership. For a
// file or a DNS name, every membership_interval its thread re-reads the source and applies a
// changed list; an InferencePool is watched (InferencePoolSource, inference_pool_source.h) and
// each change applied as soon as its watch event arrives. With a PlannerLink, it reports the
// current names to the planner (SetDestinations) after each change and every
// membership_interval until the planner has taken them.
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
// Reads upstreams, upstreams_file, upstreams_dns, dns_server, upstreams_inference_pool,
// inference_pool_namespace, the kube_* keys, max_upstreams and membership_interval of the
// FrontendConfig. PollOnce is the thread's; call it yourself only while it is not running.
// ReportOnce and Apply may be called from any thread.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "tools/frontend/frontend_config.h"
#include "tools/frontend/membership/inference_pool_source.h"
#include "tools/frontend/membership/kube_client.h"
#include "tools/frontend/membership/members.h"
#include "tools/frontend/planner_link/planner_link.h"
#include "tools/frontend/stop_signal.h"

namespace cacheroute::frontend {

// The dynamic source of `config` read once (sources.h, inference_pool_source.h).
absl::StatusOr<std::vector<Upstream>> ReadMembershipSource(const FrontendConfig& config);

// The membership to start with: the static list, or the dynamic source read once. A file that
// cannot be read is an error (a bad configuration), as is a pool source configured wrongly (no
// namespace, no API server, a CA that does not load: InvalidArgument naming the key); a DNS name
// without addresses yet (a Service whose engines are not ready) or a pool that cannot be read
// yet (not created, API server unreachable) is not: none, logged, and the watcher finds them
// later.
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
  // Applies `upstreams` when they differ from the current members (a failure is logged).
  void Apply(const std::vector<Upstream>& upstreams);
  // Sends the current names to the planner unless it has them already (or there are none: the
  // planner keeps its list rather than none).
  void ReportOnce();

  // The InferencePool watch's relists (410 Gone) and restarts (failures); 0 for other sources.
  uint64_t watch_relists() const;
  uint64_t watch_restarts() const;

 private:
  const FrontendConfig& config_;
  Membership& membership_;
  PlannerLink* const planner_;
  StopSignal& stop_;
  std::string last_error_;             // of the last failed read
  std::mutex report_mu_;               // serialises ReportOnce
  std::vector<std::string> reported_;  // the names the planner took last; under report_mu_
  std::unique_ptr<KubeClient> kube_;   // the pool source's
  std::unique_ptr<InferencePoolSource> pool_;
  std::thread thread_;
};

}  // namespace cacheroute::frontend
