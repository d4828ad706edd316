// InferencePoolSource: the members of a Gateway API Inference Extension InferencePool
// (inference.networking.k8s.io/v1), kept current through the Kubernetes API as GIE's endpoint
// pickers keep theirs: the pool is listed and watched (fieldSelector=metadata.name=POOL), its
// spec.selector.matchLabels and spec.targetPorts[].number read; the pods that selector matches
// are listed and watched from the list's resourceVersion (allowWatchBookmarks=true,
// timeoutSeconds). The members are one Upstream per ready pod (condition Ready=True, a
// status.podIP, no metadata.deletionTimestamp) and target port, named and addressed "IP:PORT"
// ("[IP]:PORT" for IPv6), sorted by name, at most max_members (the first by name).
//
// Following the watch ("Kubernetes API Concepts": "Efficient detection of changes", "Watch
// bookmarks", "410 Gone responses"):
//  - every event is applied at once and on_members called when the members changed;
//  - a BOOKMARK only advances the resourceVersion resumed from;
//  - 410 Gone (the HTTP status, or an ERROR event with code 410): list again (a relist);
//  - any other failure (an HTTP error, a dropped stream, an undecodable line, an ERROR event):
//    logged, then after a jittered exponential backoff (backoff, capped) the watch resumes from
//    the last resourceVersion (a watch restart); a failed list is retried the same way;
//  - a watch the server ends (its timeoutSeconds) resumes at once;
//  - a changed pool selector or port list restarts the pods' list and watch. A pool that does
//    not exist is logged and waited for (no members until it does); a pool deleted, or edited
//    into a spec that cannot be used, is logged and the last usable selection stays in force.
//
// Usage:
//   InferencePoolSource source(client, {.pool = "vllm-pool", .pool_namespace = "serving",
//                                       .on_members = [&](std::vector<Upstream> m) {…}}, stop);
//   source.Start();  … stop.Trigger(); source.Join();
//   absl::StatusOr<std::vector<Upstream>> now = ReadInferencePool(client, options, never);
//
// Logs (base::LogEvent): membership_read_failed (a list or watch failed; once per distinct
// error in a row), membership_watch_restarted, membership_relisted, inference_pool_not_found,
// inference_pool_invalid, membership_capped.
// Thread-safety: Start runs two threads (the pool's watch, the pods'); on_members is called from
// the pods' thread only. The counters may be read from any thread. Options are fixed at
// construction; the KubeClient must outlive the source.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cacheroute/dataplane/grpc/table_subscriber.h"
#include "tools/frontend/frontend_config.h"
#include "tools/frontend/membership/kube_client.h"
#include "tools/frontend/stop_signal.h"

namespace cacheroute::frontend {

struct InferencePoolOptions {
  std::string pool;            // the InferencePool's name
  std::string pool_namespace;  // its namespace, and its pods'
  size_t max_members = 256;
  // Before retrying a failed list or resuming a failed watch: 0.5 s doubling to 30 s, each
  // delay scaled by a uniform factor in [0.8, 1.2] (then capped) drawn from `seed`.
  dataplane::Backoff backoff{.initial = std::chrono::milliseconds(500),
                             .multiplier = 2.0,
                             .jitter = 0.2,
                             .max = std::chrono::seconds(30)};
  uint64_t seed = 1;
  // Each watch request's timeoutSeconds; the server ends the stream then and it is resumed.
  absl::Duration watch_timeout = absl::Minutes(5);
  // Called with the new members whenever they change (the first time after the first list).
  std::function<void(std::vector<Upstream>)> on_members = nullptr;
};

// The pool's members read once (a GET of the pool, a list of its pods): NotFound naming the pool
// when it does not exist, FailedPrecondition naming the field of a pool whose spec cannot be used,
// Unavailable when the API server cannot be read or answers an error (its message included).
absl::StatusOr<std::vector<Upstream>> ReadInferencePool(KubeClient& client,
                                                        const InferencePoolOptions& options,
                                                        const CancelCheck& cancelled);

class InferencePoolSource {
 public:
  InferencePoolSource(KubeClient& client, InferencePoolOptions options, StopSignal& stop);
  ~InferencePoolSource() { Join(); }
  InferencePoolSource(const InferencePoolSource&) = delete;
  InferencePoolSource& operator=(const InferencePoolSource&) = delete;

  void Start();
  void Join();  // after stop.Trigger(): returns within about 20 ms plus a request's close

  uint64_t relists() const { return relists_.load(std::memory_order_relaxed); }
  uint64_t watch_restarts() const { return watch_restarts_.load(std::memory_order_relaxed); }
  uint64_t pool_changes() const { return pool_generation_.load(std::memory_order_relaxed); }

  // What the pool's spec selects, as read from it.
  struct Selection {
    std::map<std::string, std::string> match_labels;
    std::vector<int> ports;
    bool operator==(const Selection&) const = default;
  };

 private:
  struct Objects;
  using OnChange = std::function<void(const Objects&)>;
  // Lists `collection` with `selector`, then watches it, until `cancelled`.
  void ListWatch(const std::string& collection, const std::string& selector,
                 const CancelCheck& cancelled, const OnChange& on_change);
  void RunPool();
  void RunPods();
  // Waits `delay` or until `cancelled` (checked every 20 ms); false when cancelled.
  bool Sleep(dataplane::Duration delay, const CancelCheck& cancelled);

  KubeClient& client_;
  const InferencePoolOptions options_;
  StopSignal& stop_;
  dataplane::SeededRandom random_;  // the backoffs' jitter (thread-safe)

  std::mutex mu_;
  std::condition_variable changed_;
  std::optional<Selection> selection_;  // guarded by mu_; none: no usable pool
  std::atomic<uint64_t> pool_generation_{0};  // bumped (under mu_) when selection_ changes

  std::atomic<uint64_t> relists_{0};
  std::atomic<uint64_t> watch_restarts_{0};
  std::thread pool_thread_;
  std::thread pods_thread_;
};

}  // namespace cacheroute::frontend
