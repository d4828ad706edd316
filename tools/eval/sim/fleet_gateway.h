// The fleet simulator's gateway side (internal to RunFleet, fleet.h):
//
//   SimClock    the simulated time, as the dataplane and the front-end core read it and, through
//               planner_clock(), as the planner (PlannerCore) reads it: Unix time from the epoch
//   SimGateway  one gateway: the product's routing core (tools/frontend/routing/routing_core.h:
//               the Router with its in-flight ledger, rates, served hit, key sizes, cache
//               turnover) and its policy from the dataplane's registry, on simulated time
//
// A request's life at a gateway is the product's RequestLifecycle: Route (the engines' metrics
// first, as a scrape at that moment would show them; then the pick, counted in flight and in the
// ledger, and the key's rate), FirstToken (its prefill leaves the queued work), the answer's
// usage, and its end. Reports drain the recorders as a RateReporter would, with where each key
// was last sent.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/kv_event_index.h"
#include "cacheroute/dataplane/policies.h"
#include "cacheroute/dataplane/random.h"
#include "cacheroute/dataplane/rate_recorder.h"
#include "cacheroute/dataplane/router.h"
#include "cacheroute/v1/share.pb.h"
#include "planner/rate_aggregator.h"
#include "tools/eval/sim/engine.h"
#include "tools/eval/sim/fleet.h"
#include "tools/frontend/routing/admission.h"
#include "tools/frontend/routing/request_lifecycle.h"
#include "tools/frontend/routing/routing_core.h"

namespace cacheroute::sim {

// 2^64 / golden ratio: spreads small integers (gateway indices, block offsets) before Mix64.
inline constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

class SimClock final : public dataplane::Clock {
 public:
  SimClock() = default;
  SimClock(const SimClock&) = delete;
  SimClock& operator=(const SimClock&) = delete;

  dataplane::Time Now() const override { return At(now_s); }
  static dataplane::Time At(double seconds);
  // The planner's time: the Unix epoch plus the simulated seconds.
  static absl::Time Unix(double seconds) { return absl::UnixEpoch() + absl::Seconds(seconds); }
  base::Clock& planner_clock() { return planner_clock_; }

  double now_s = 0;

 private:
  class PlannerClock final : public base::Clock {
   public:
    explicit PlannerClock(const SimClock& sim) : sim_(sim) {}
    absl::Time Now() override { return Unix(sim_.now_s); }

   private:
    const SimClock& sim_;
  };
  PlannerClock planner_clock_{*this};
};

class SimGateway {
 public:
  // Gateway `index` of `config`: its seed, its routing core (the Router with config.dispatch for
  // a table policy, the registry's defaults for the others, a RateRecorder) and its policy
  // (config.policy from the registry, with config.parameters). `engines` (scraped) and `clock`
  // must outlive the gateway. `synced_blocks`: the Dynamo policies' blocks in flight, shared with
  // the other gateways' (FleetConfig::replica_sync); null: the policy's own.
  static absl::StatusOr<std::unique_ptr<SimGateway>> Create(
      const FleetConfig& config, uint32_t index, const SimClock& clock,
      const std::vector<Engine>& engines,
      std::shared_ptr<dataplane::DynamoActiveBlocks> synced_blocks = nullptr);

  // Routes `request` (its key id, its prompt's exact tokens and block hashes) through the routing
  // core; the lifecycle counts it in flight and in the ledger until it ends.
  frontend::RequestLifecycle Route(const dataplane::PickRequest& request);
  // The request's first token: its prefill leaves the ledger's queue; its time to first token.
  void OnFirstToken(frontend::RequestLifecycle& request);
  // The request left its destination, after its first token or not, and was answered with
  // `status` (a failure: 5xx, which is rollout evidence too). A completed answer's `usage`
  // (prompt, cached and output tokens) reaches the lifecycle here, at its end, where a gateway
  // reads it from the answer's last chunk.
  void End(frontend::RequestLifecycle& request, int status,
           const std::optional<frontend::Usage>& usage);

  // One report to the planner for [start_ms, end_ms), as the gateway's RateReporter builds it
  // (dataplane::MakeRateReport) and the planner service reads it (service::ToRateReport): the
  // rollout evidence, and with `with_counts` the rate counts drained from the recorder, each key
  // annotated with its sizes and where it was last sent (dataplane::AnnotateKeyCount).
  planner::RateReport Report(uint64_t sequence, int64_t start_ms, int64_t end_ms, bool with_counts);

  // Fleet sharing (fleet_share.h), as a gateway's planner link does it: what the gateway's picks
  // made known since the last call and, with `with_work`, its ledger's work per destination, as
  // the batch it sends; and a batch another gateway sent, applied (placements learned, its work
  // added to the others').
  v1::ShareBatch ShareOut(bool with_work);
  void ShareIn(const v1::ShareBatch& batch);
  // One batch of engine `destination`'s KV events, for the policies that read them (their index,
  // PolicyInfo::reads_kv_events); ignored by the others.
  void ApplyKvEvents(uint32_t destination, std::span<const dataplane::KvEvent> events);

  dataplane::Router* router() { return &routing_.router(); }
  // The gateway's admission queue (FleetConfig::shed); null without shedding.
  frontend::AdmissionQueue* admission() { return admission_.get(); }
  // The room its Router's ledger (and the shared work) leaves below saturation (FleetRoom).
  double AdmissionRoom() const {
    return frontend::FleetRoom(routing_.router(), config_.admission.saturation_tokens,
                               config_.admission.saturation_kv_usage);
  }
  const std::string& id() const { return id_; }

 private:
  SimGateway(const FleetConfig& config, uint32_t index, const SimClock& clock,
             const std::vector<Engine>& engines);
  // What a scrape of every engine would show now (waiting requests, KV usage), in the Router.
  void Scrape();

  const FleetConfig& config_;
  const std::vector<Engine>& engines_;
  std::string id_;
  std::vector<std::string> names_;  // the destinations' names, as the planner's table has them
  frontend::RoutingCore routing_;
  // The precise policies' index of every engine's blocks; declared before policy_, which reads it.
  std::unique_ptr<dataplane::KvEventIndex> kv_events_;
  std::unique_ptr<dataplane::Policy> policy_;  // null: the table policies (Router::Pick)
  std::unordered_map<std::string, uint32_t> index_by_name_;
  // Each other gateway's last shared work per destination, and their sum (what the Router has).
  std::map<std::string, std::vector<dataplane::DestinationWork>> remote_work_;
  std::unique_ptr<frontend::AdmissionQueue> admission_;
};

}  // namespace cacheroute::sim
