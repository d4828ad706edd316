// See embedded_dataplane.h.
#include "tools/gateway/embedded_dataplane.h"

#include <algorithm>
#include <chrono>

#include "base/logging.h"
#include "base/status_macros.h"
#include "cacheroute/dataplane/policy_registry.h"
#include "tools/gateway/routing/policy_factory.h"

namespace cacheroute::gateway {
namespace {

bool Dynamic(const GatewayConfig& config) {
  return !config.upstreams_file.empty() || !config.upstreams_dns.empty();
}

}  // namespace

EmbeddedDataplane::EmbeddedDataplane(const GatewayConfig& config, StopSignal& stop)
    : config_(config),
      stop_(stop),
      capacity_(Dynamic(config) ? config.max_upstreams
                                : static_cast<uint32_t>(config.upstreams.size())),
      core_({.capacity = capacity_,
             .dispatch = dataplane::DispatchFor(config.policy),
             .table_ttl = std::chrono::duration_cast<dataplane::Duration>(
                 absl::ToChronoNanoseconds(config.table_ttl)),
             .external_load_weight = config.external_load_weight,
             .seed = static_cast<uint64_t>(
                 std::chrono::steady_clock::now().time_since_epoch().count())},
            clock_),
      keys_(config_),
      membership_(
          {.capacity = capacity_,
           .dynamic = Dynamic(config),
           .make_policy =
               [this](uint32_t n) {
                 return MakePolicy(config_.policy, n, core_.random(), core_.clock());
               },
           .policy_per_count = PolicyPerCount(config.policy),
           .new_occupant = [this](uint32_t d, uint32_t from) { NewOccupant(d, from); },
           .install = [this](const std::vector<std::string>& names) { return Install(names); }}),
      health_(capacity_, config.failure_threshold, core_.router()),
      scraper_(config_, capacity_, membership_, core_.router(), stop),
      prober_(config_, membership_, health_, stop) {}

EmbeddedDataplane::~EmbeddedDataplane() { Stop(); }

void EmbeddedDataplane::NewOccupant(uint32_t d, uint32_t from) {
  const bool up = from == dataplane::kNoDestination || core_.router().loads().Up(from);
  core_.ResetDestination(d);
  scraper_.Reset(d);
  health_.Reset(d, up);
}

absl::Status EmbeddedDataplane::Install(const std::vector<std::string>& names) {
  if (planner_ != nullptr) return planner_->Remap(names);
  const dataplane::Status s =
      core_.router().Resize(static_cast<uint32_t>(names.size()), nullptr, clock_.Now());
  return s.ok ? absl::OkStatus() : absl::InternalError(s.message);
}

absl::Status EmbeddedDataplane::Start() {
  CACHEROUTE_ASSIGN_OR_RETURN(std::vector<Upstream> initial, InitialMembers(config_));
  if (absl::Status s = membership_.Apply(initial); !s.ok()) return s;
  if (!config_.planner.empty()) {
    CACHEROUTE_ASSIGN_OR_RETURN(
        planner_,
        PlannerLink::Start(config_, core_.router(), core_.recorder(), core_.evidence(),
                           membership_.Names(), membership_.dynamic(), &core_.key_sizes()));
  } else if (RoutesByTable(config_.policy)) {
    base::LogEvent("warning", "no_planner",
                   {{"detail",
                     "policy cacheroute without a planner: no table, every request is routed by "
                     "the fallback (the key's hashed pair, or power of two choices) and no rates "
                     "are reported"}});
  }
  prober_.Start();
  if (membership_.dynamic()) {
    watcher_ = std::make_unique<MembershipWatcher>(config_, membership_, planner_.get(), stop_);
    watcher_->Start();
  }
  scraper_.Start();
  return absl::OkStatus();
}

void EmbeddedDataplane::Stop() {
  stop_.Trigger();
  if (watcher_ != nullptr) watcher_->Join();
  prober_.Join();
  scraper_.Join();
  if (planner_ != nullptr) planner_->Stop();
}

std::optional<dataplane::TableSubscriberStats> EmbeddedDataplane::SubscriberStats() const {
  if (planner_ == nullptr) return std::nullopt;
  return planner_->SubscriberStats();
}

std::optional<dataplane::RateReporterStats> EmbeddedDataplane::ReporterStats() const {
  if (planner_ == nullptr) return std::nullopt;
  return planner_->ReporterStats();
}

std::vector<std::string> EmbeddedDataplane::DestinationLabels(const Members& members,
                                                              const dataplane::RouterStats& stats) {
  const uint32_t count = std::min<uint32_t>(members.count, stats.in_flight.size());
  std::vector<std::string> labels;
  labels.reserve(count);
  for (uint32_t d = 0; d < count; ++d) {
    labels.push_back(base::Exposition::Label("destination", members.by_index[d]->name));
  }
  return labels;
}

}  // namespace cacheroute::gateway
