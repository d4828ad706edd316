// See fleet_gateway.h.
#include "tools/eval/sim/fleet_gateway.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_format.h"
#include "cacheroute/dataplane/grpc/rate_reporter.h"
#include "cacheroute/dataplane/grpc/share_conversion.h"
#include "cacheroute/dataplane/grpc/table_conversion.h"
#include "cacheroute/dataplane/policy_registry.h"
#include "planner/plan_snapshot.h"
#include "planner/service/proto_convert.h"

namespace cacheroute::sim {

dataplane::Time SimClock::At(double seconds) {
  return dataplane::Time(
      std::chrono::duration_cast<dataplane::Duration>(std::chrono::duration<double>(seconds)));
}

SimGateway::SimGateway(const FleetConfig& config, uint32_t index, const SimClock& clock,
                       const std::vector<Engine>& engines)
    : config_(config),
      engines_(engines),
      id_(absl::StrFormat("gateway-%u", index)),
      names_(planner::DestinationNames(config.engines)),
      routing_(
          {.capacity = config.engines,
           // The registry's rule for the policies that do not route by the table (its ledger
           // is their load view), the study's for those that do.
           .dispatch = FindFleetPolicy(config)->uses_table ? config.dispatch
                                                           : dataplane::DispatchFor(config.policy),
           .active_tokens = FindFleetPolicy(config)->reads_active_tokens,
           // The table stream is never down here: a table is good until the next one.
           .table_ttl = dataplane::Duration::zero(),
           // Load(d) is the gateway's own requests in flight; what the engines report reaches
           // the policies through Scraped (Scrape).
           .external_load_weight = 0,
           .seed = dataplane::Mix64(config.seed ^ (kGolden * (index + 1))),
           .recorder = {.shards = 1,
                        .max_keys = config.recorder_max_keys,
                        .max_report_keys = 100000},
           .measure_turnover = config.measure_turnover,
           .share_placements = SharesFleet(config)},
          clock),
      index_by_name_(dataplane::DestinationIndexOf(names_)),
      admission_(config.shed ? std::make_unique<frontend::AdmissionQueue>(config.admission)
                             : nullptr) {}

absl::StatusOr<std::unique_ptr<SimGateway>> SimGateway::Create(
    const FleetConfig& config, uint32_t index, const SimClock& clock,
    const std::vector<Engine>& engines,
    std::shared_ptr<dataplane::DynamoActiveBlocks> synced_blocks) {
  const dataplane::PolicyInfo* info = FindFleetPolicy(config);
  if (info == nullptr) {
    return absl::InternalError(absl::StrFormat("policy %s is not registered", config.policy));
  }
  std::unique_ptr<SimGateway> g(new SimGateway(config, index, clock, engines));
  dataplane::Router& router = g->routing_.router();
  if (dataplane::Status s = router.Resize(config.engines, nullptr, clock.Now()); !s.ok) {
    return absl::InternalError(s.message);
  }
  // Every engine's KV capacity, as a gateway configures it or scrapes it from vLLM's
  // cache_config_info; its usage Scrape reads at each pick.
  const double kv_tokens = static_cast<double>(config.profile.kv_blocks) * kBlockTokens;
  for (uint32_t d = 0; d < config.engines; ++d) (void)router.SetKvCapacity(d, kv_tokens);
  if (info->reads_kv_events) {
    // A replica of the engines' caches, as their events describe them: every block of every
    // engine.
    g->kv_events_ = std::make_unique<dataplane::KvEventIndex>(dataplane::KvEventIndexOptions{
        .destinations = config.engines, .blocks_per_destination = config.profile.kv_blocks});
  }
  if (!info->uses_table) {  // the table policies route by Router::Pick
    dataplane::Result<std::unique_ptr<dataplane::Policy>> policy =
        info->make({.destinations = config.engines,
                    .random = &g->routing_.random(),
                    .clock = &clock,
                    .kv_events = g->kv_events_.get(),
                    .parameters = config.parameters,
                    .dynamo_active = std::move(synced_blocks)});
    if (!policy.ok()) return absl::InvalidArgumentError(policy.status().message);
    g->policy_ = *std::move(policy);
  }
  return g;
}

void SimGateway::ApplyKvEvents(uint32_t destination, std::span<const dataplane::KvEvent> events) {
  if (kv_events_ != nullptr) kv_events_->Apply(destination, events);
}

void SimGateway::Scrape() {
  dataplane::Router& router = routing_.router();
  for (uint32_t d = 0; d < engines_.size(); ++d) {
    (void)router.SetLoad(d, engines_[d].waiting());
    (void)router.SetKvUsage(d, std::clamp(engines_[d].cache().usage(), 0.0, 1.0));
  }
}

frontend::RequestLifecycle SimGateway::Route(const dataplane::PickRequest& request) {
  Scrape();
  return routing_.Route(request.key_id, frontend::PromptSize{.token_ids = request.prompt_tokens},
                        request.block_hashes, policy_.get(), routing_.clock().Now());
}

void SimGateway::OnFirstToken(frontend::RequestLifecycle& request) {
  request.FirstToken(/*streamed=*/true);
}

void SimGateway::End(frontend::RequestLifecycle& request, int status,
                     const std::optional<frontend::Usage>& usage) {
  if (usage.has_value()) request.Usage(*usage);
  request.UpstreamDone();
  request.Finish(status);
}

v1::ShareBatch SimGateway::ShareOut(bool with_work) {
  dataplane::PlacementOutbox* outbox = routing_.placement_outbox();
  const dataplane::PlacementBatch placements =
      outbox != nullptr ? outbox->Drain() : dataplane::PlacementBatch{};
  std::vector<dataplane::DestinationWork> work;
  if (with_work) {
    for (uint32_t d = 0; d < config_.engines; ++d) work.push_back(routing_.router().LedgerWork(d));
  }
  return dataplane::ToShareBatch(id_, names_, placements, with_work ? &work : nullptr,
                                 routing_.clock().Now());
}

void SimGateway::ShareIn(const v1::ShareBatch& batch) {
  dataplane::Router& router = routing_.router();
  const dataplane::ReceivedShare in =
      dataplane::FromShareBatch(batch, index_by_name_, config_.engines, routing_.clock().Now());
  router.Learn(in.placements);
  if (!in.work.has_value()) return;
  remote_work_[batch.gateway_id()] = *in.work;
  for (uint32_t d = 0; d < config_.engines; ++d) {
    dataplane::DestinationWork sum;
    for (const auto& [gateway, work] : remote_work_) sum += work[d];
    (void)router.SetRemoteWork(d, sum);
  }
}

planner::RateReport SimGateway::Report(uint64_t sequence, int64_t start_ms, int64_t end_ms,
                                       bool with_counts) {
  // What the gateway's RateReporter sends (its PlannerLink annotates each key with its sizes and
  // where it was last sent), as the planner service reads it.
  const dataplane::RateSnapshot counts =
      with_counts && policy_ == nullptr ? routing_.recorder().Drain() : dataplane::RateSnapshot{};
  v1::ReportRatesRequest request = dataplane::MakeRateReport(
      id_, start_ms, end_ms, counts, routing_.evidence().Drain(), [this](v1::KeyCount& count) {
        dataplane::AnnotateKeyCount(count, &routing_.key_sizes(), &routing_.router(), names_);
      });
  request.set_sequence(sequence);
  return service::ToRateReport(request);
}

}  // namespace cacheroute::sim
