// ShareLink: a front end's side of fleet sharing (proto/cacheroute/v1/share.proto;
// docs/gateway.md, "Several gateways"). Several gateways or endpoint pickers in front of one fleet
// each see only their own requests; through the planner's ShareService they tell each other where
// their picks placed keys and prompt prefixes, and how much work each has in flight at each
// destination, so that they route as one while staying active-active.
//
// Every `interval` the link sends one ShareRequest on its Share stream: the placements the
// Router's token-work rule offered since the last one (PlacementOutbox::Drain) and this Router's
// own ledger per destination (Router::LedgerWork), over the destinations' names. A reader applies
// each batch the other gateways sent: Router::Learn of their placements (over this link's names),
// and Router::SetRemoteWork(d, Σ over the other gateways of their last work at d).
//
// Without the planner a front end is exactly a front end on its own: when the stream ends, every
// destination's remote work is set to zero and the others' work forgotten (placements already
// learned stay; they age out as their own do). A gateway whose batches stop arriving for
// `remote_work_ttl` is forgotten the same way; one that stops cleanly says so with a last batch of
// no work. The stream reconnects with backoff on the planner link's channels (failing over between
// replicas as the table stream does).
//
// Usage:
//   ShareLink link(channels, router, *routing.placement_outbox(), routing.clock(), names,
//                  {.gateway_id = "gw-1"});
//   link.Start();
//   link.SetDestinations(names);   // a membership change (by index, as the Router's)
//   link.Stop();                   // also the destructor
//
// Thread safety: SetDestinations and Stats from any thread; Start and Stop from one. The Router,
// outbox, clock and channels outlive the link.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/time/time.h"
#include "base/exposition.h"
#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/grpc/planner_channels.h"
#include "cacheroute/dataplane/grpc/table_subscriber.h"
#include "cacheroute/dataplane/placement_outbox.h"
#include "cacheroute/dataplane/random.h"
#include "cacheroute/dataplane/router.h"
#include "cacheroute/v1/share.grpc.pb.h"

namespace cacheroute::frontend {

struct ShareLinkOptions {
  std::string gateway_id;
  // Sent as "authorization: Bearer <token>" when non-empty.
  std::string bearer_token;
  absl::Duration interval = absl::Milliseconds(5);
  // Another gateway's work stands until its next batch, or this long without one.
  absl::Duration remote_work_ttl = absl::Seconds(2);
  dataplane::Backoff backoff{.initial = std::chrono::milliseconds(250),
                             .max = std::chrono::seconds(30)};
};

struct ShareLinkStats {
  bool connected = false;  // a Share stream is open
  uint64_t connects = 0;   // streams opened
  uint64_t losses = 0;     // open streams that ended (not by Stop)
  uint64_t batches_sent = 0;
  uint64_t bytes_sent = 0;  // serialized ShareRequests
  uint64_t placements_sent = 0;
  uint64_t batches_received = 0;
  uint64_t bytes_received = 0;  // serialized ShareBatches
  uint64_t placements_learned = 0;
  uint64_t unknown_destinations = 0;  // received placements and work at names this link lacks
  uint64_t remote_gateways = 0;       // other gateways whose work is applied now
};

class ShareLink {
 public:
  ShareLink(std::shared_ptr<dataplane::PlannerChannels> channels, dataplane::Router& router,
            dataplane::PlacementOutbox& outbox, const dataplane::Clock& clock,
            std::vector<std::string> destinations, ShareLinkOptions options);
  ~ShareLink() { Stop(); }
  ShareLink(const ShareLink&) = delete;
  ShareLink& operator=(const ShareLink&) = delete;

  void Start();
  // Sends a last batch saying this gateway has no work, ends the stream, and zeroes the remote
  // work it set. Idempotent.
  void Stop();
  // The Router's destinations are now `names` (by index).
  void SetDestinations(const std::vector<std::string>& names);
  ShareLinkStats Stats() const;

 private:
  using Stream = grpc::ClientReaderWriter<v1::ShareRequest, v1::ShareUpdate>;
  struct Remote {
    std::unordered_map<std::string, dataplane::DestinationWork> work;  // by destination name
    dataplane::Time last{};                                            // its last batch
  };

  void Run();
  // Sends every interval until Stop or the reader ends; whether the stream was opened.
  bool Serve(Stream& stream, grpc::ClientContext& context);
  void Read(Stream& stream);
  v1::ShareRequest NextRequest(bool farewell);
  void Apply(const v1::ShareBatch& batch);
  void ForgetRemoteWork();
  void ExpireRemoteWork();
  void ApplyRemoteWorkLocked();  // mu_ held

  const std::shared_ptr<dataplane::PlannerChannels> channels_;
  dataplane::Router& router_;
  dataplane::PlacementOutbox& outbox_;
  const dataplane::Clock& clock_;
  const ShareLinkOptions options_;
  dataplane::SeededRandom random_;
  uint64_t sequence_ = 0;  // the stream thread's

  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;                            // guarded by mu_
  bool reader_done_ = false;                         // guarded by mu_
  grpc::ClientContext* context_ = nullptr;           // guarded by mu_
  std::vector<std::string> names_;                   // guarded by mu_
  std::unordered_map<std::string, uint32_t> index_;  // guarded by mu_
  std::map<std::string, Remote> remote_;             // guarded by mu_
  uint32_t applied_count_ = 0;                       // guarded by mu_: indices given remote work
  ShareLinkStats stats_;                             // guarded by mu_
  std::thread thread_;
};

// share_connected, share_batches_sent_total, share_bytes_sent_total, share_placements_sent_total,
// share_batches_received_total, share_bytes_received_total, share_placements_learned_total,
// share_remote_gateways and share_outbox_dropped_total (zeros without a link).
void RenderShareLink(base::Exposition& page, const ShareLink* link,
                     const dataplane::PlacementOutbox* outbox);

}  // namespace cacheroute::frontend
