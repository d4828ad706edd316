// See frontend_core.h.
#include "tools/frontend/frontend_core.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "cacheroute/dataplane/key_id.h"
#include "cacheroute/dataplane/policy_registry.h"
#include "tools/frontend/routing/explanation_json.h"
#include "tools/frontend/routing/policy_factory.h"

namespace cacheroute::frontend {
namespace {

// Tells cores apart in the per-thread snapshot cache (an address may be reused).
std::atomic<uint64_t> next_instance{1};

// The registry's entry of the configured policy (an entry with no traits for a name it does not
// know, which ValidateFrontendConfig refuses).
const dataplane::PolicyInfo& PolicyOf(const FrontendConfig& config) {
  static const dataplane::PolicyInfo kUnknown;
  const dataplane::PolicyInfo* info = dataplane::BuiltinPolicies().Find(config.policy);
  return info != nullptr ? *info : kUnknown;
}

}  // namespace

FrontendCore::FrontendCore(const FrontendConfig& config, StopSignal& stop)
    : config_(config),
      stop_(stop),
      capacity_(DynamicMembership(config) ? config.max_upstreams
                                : static_cast<uint32_t>(config.upstreams.size())),
      instance_(next_instance.fetch_add(1, std::memory_order_relaxed)),
      key_header_(absl::AsciiStrToLower(config.key_header)),
      reads_prompt_(dataplane::DispatchFor(config.policy).rule ==
                    dataplane::DispatchRule::kTokenWork),
      routing_({.capacity = capacity_,
                .dispatch = dataplane::DispatchFor(config.policy),
                .active_tokens = PolicyOf(config).reads_active_tokens,
                .table_ttl = std::chrono::duration_cast<dataplane::Duration>(
                    absl::ToChronoNanoseconds(config.table_ttl)),
                .external_load_weight = config.external_load_weight,
                .seed = static_cast<uint64_t>(
                    std::chrono::steady_clock::now().time_since_epoch().count()),
                // Only the token-work rule has placements and work to share.
                .share_placements = config.share && !config.planner.empty() &&
                                    dataplane::DispatchFor(config.policy).rule ==
                                        dataplane::DispatchRule::kTokenWork},
               clock_),
      keys_(config_),
      membership_(
          {.capacity = capacity_,
           .dynamic = DynamicMembership(config),
           .make_policy =
               [this](uint32_t n) {
                 return MakePolicy(config_.policy, n, routing_.random(), routing_.clock());
               },
           .policy_per_count = PolicyOf(config).rebuild_when_count_changes,
           .new_occupant = [this](uint32_t d, uint32_t from) { NewOccupant(d, from); },
           .install = [this](const std::vector<std::string>& names) { return Install(names); }}),
      health_(capacity_, config.failure_threshold, routing_.router()),
      scraper_(config_, capacity_, membership_, routing_.router(), stop),
      prober_(config_, membership_, health_, stop),
      admission_(config.shed ? std::make_unique<AdmissionQueue>(AdmissionOptionsOf(config))
                             : nullptr) {}

AdmissionOptions AdmissionOptionsOf(const FrontendConfig& config) {
  return {.saturation_tokens = config.shed_saturation_tokens,
          .saturation_kv_usage = config.shed_saturation_kv_usage,
          .queue_capacity = config.shed_queue_capacity,
          .queue_timeout = std::chrono::duration_cast<dataplane::Duration>(
              absl::ToChronoNanoseconds(config.shed_queue_timeout)),
          .retry_after = std::chrono::duration_cast<dataplane::Duration>(
              absl::ToChronoNanoseconds(config.shed_retry_after))};
}

int FrontendCore::Priority(HeaderLookup headers) const {
  const std::optional<absl::string_view> objective = headers(kObjectiveHeader);
  return objective.has_value()
             ? PriorityOf(config_, std::string_view(objective->data(), objective->size()))
             : 0;
}

double FrontendCore::AdmissionTokens(absl::string_view body) const {
  return std::max<double>(1, routing_.prompt_estimate().Tokens({.text_bytes = body.size()}));
}

AdmissionResult FrontendCore::OfferAdmission(HeaderLookup headers, absl::string_view body,
                                             AdmissionQueue::Wake wake) {
  return admission_->Offer(Priority(headers), AdmissionTokens(body), AdmissionRoom(),
                           routing_.clock().Now(), std::move(wake));
}

double FrontendCore::AdmissionRoom() const {
  return FleetRoom(routing_.router(), config_.shed_saturation_tokens,
                   config_.shed_saturation_kv_usage);
}

void FrontendCore::PumpAdmission() {
  if (admission_ != nullptr && admission_->queued() > 0) {
    admission_->Pump(AdmissionRoom(), routing_.clock().Now());
  }
}

FrontendCore::~FrontendCore() { Stop(); }

void FrontendCore::NewOccupant(uint32_t d, uint32_t from) {
  const bool up = from == dataplane::kNoDestination || routing_.router().loads().Up(from);
  routing_.ResetDestination(d);
  scraper_.Reset(d);
  health_.Reset(d, up);
}

absl::Status FrontendCore::Install(const std::vector<std::string>& names) {
  if (planner_ != nullptr) return planner_->Remap(names);
  const dataplane::Status s =
      routing_.router().Resize(static_cast<uint32_t>(names.size()), nullptr, clock_.Now());
  return s.ok ? absl::OkStatus() : absl::InternalError(s.message);
}

absl::Status FrontendCore::Start() {
  CACHEROUTE_ASSIGN_OR_RETURN(std::vector<Upstream> initial, InitialMembers(config_));
  if (absl::Status s = membership_.Apply(initial); !s.ok()) return s;
  if (!config_.planner.empty()) {
    CACHEROUTE_ASSIGN_OR_RETURN(
        planner_,
        PlannerLink::Start(config_, routing_.router(), routing_.recorder(), routing_.evidence(),
                           membership_.Names(), membership_.dynamic(), &routing_.key_sizes(),
                           {.outbox = routing_.placement_outbox(), .clock = &routing_.clock()}));
  } else if (PolicyOf(config_).uses_table) {
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

void FrontendCore::Stop() {
  stop_.Trigger();
  if (watcher_ != nullptr) watcher_->Join();
  prober_.Join();
  scraper_.Join();
  if (planner_ != nullptr) planner_->Stop();
}

bool FrontendCore::NeedsBody(HeaderLookup headers) const {
  if (reads_prompt_) return true;
  const std::optional<absl::string_view> key = headers(key_header_);
  return keys_.NeedsBody(key.has_value() ? std::optional<std::string>(*key) : std::nullopt);
}

RoutedRequest FrontendCore::Route(HeaderLookup headers, absl::string_view body,
                                  dataplane::Time start) {
  std::shared_ptr<const Members> members = ThreadMembers();
  const std::optional<absl::string_view> key = headers(key_header_);
  RequestLifecycle lifecycle = routing_.Route(
      keys_.Derive(key.has_value() ? std::optional<std::string>(*key) : std::nullopt, body),
      members->policy.get(), start);
  // Routed to an index this thread's snapshot does not have yet: the membership just changed.
  if (lifecycle.ok() && members->At(lifecycle.destination()) == nullptr) {
    members = ThreadMembers(/*fresh=*/true);
  }
  return {std::move(lifecycle), std::move(members)};
}

absl::StatusOr<std::string> FrontendCore::Explain(HeaderLookup headers, absl::string_view body) {
  if (!PolicyOf(config_).uses_table) {
    return absl::FailedPreconditionError(
        absl::StrCat("policy ", config_.policy,
                     " has no explanation: only the table policies (cacheroute, "
                     "cacheroute-paper) explain their picks"));
  }
  const std::optional<absl::string_view> key = headers(key_header_);
  const RoutingInput input =
      keys_.Derive(key.has_value() ? std::optional<std::string>(*key) : std::nullopt, body);
  if (!input.key.has_value()) {
    return absl::InvalidArgumentError(
        "the request has no routing key (key_from found none in its header or body): it goes "
        "by power of two choices");
  }
  ExplainedRequest request{.policy = config_.policy, .key_id = dataplane::KeyId(*input.key)};
  const dataplane::Explanation explanation =
      routing_.Explain(*request.key_id, input.prompt, input.block_hashes, &request.prompt_tokens);
  return ExplanationJson(request, explanation, ThreadMembers()->Names());
}

RoutedRequest FrontendCore::RouteAny(dataplane::Time start) {
  std::shared_ptr<const Members> members = ThreadMembers();
  RequestLifecycle lifecycle = routing_.RouteAny(start);
  if (lifecycle.ok() && members->At(lifecycle.destination()) == nullptr) {
    members = ThreadMembers(/*fresh=*/true);
  }
  return {std::move(lifecycle), std::move(members)};
}

RoutedRequest FrontendCore::Redirect(RoutedRequest routed, uint32_t d) {
  return {routing_.Redirect(std::move(routed.lifecycle), d), std::move(routed.members)};
}

std::shared_ptr<const Members> FrontendCore::ThreadMembers(bool fresh) const {
  struct Cached {
    uint64_t instance = 0;
    std::shared_ptr<const Members> members;
  };
  thread_local Cached cached;
  if (fresh || cached.instance != instance_ || cached.members == nullptr ||
      cached.members->generation != membership_.generation()) {
    // A copy of its own, so that holding it costs this thread an uncontended reference count.
    cached = {instance_, std::make_shared<const Members>(*membership_.Current())};
  }
  return cached.members;
}

void FrontendCore::RenderMembership(base::Exposition& page) const {
  membership_.Render(page);
  if (watcher_ == nullptr || config_.upstreams_inference_pool.empty()) return;
  page.Counter("membership_watch_relists_total",
               "InferencePool source: lists made again because a watch's resourceVersion was too "
               "old (410 Gone).",
               static_cast<double>(watcher_->watch_relists()));
  page.Counter("membership_watch_restarts_total",
               "InferencePool source: watches resumed after an error or a dropped stream.",
               static_cast<double>(watcher_->watch_restarts()));
}

std::optional<dataplane::TableSubscriberStats> FrontendCore::SubscriberStats() const {
  if (planner_ == nullptr) return std::nullopt;
  return planner_->SubscriberStats();
}

std::optional<dataplane::RateReporterStats> FrontendCore::ReporterStats() const {
  if (planner_ == nullptr) return std::nullopt;
  return planner_->ReporterStats();
}

std::vector<std::string> FrontendCore::DestinationLabels(const Members& members,
                                                         const dataplane::RouterStats& stats) {
  const uint32_t count = std::min<uint32_t>(members.count, stats.in_flight.size());
  std::vector<std::string> labels;
  labels.reserve(count);
  for (uint32_t d = 0; d < count; ++d) {
    labels.push_back(base::Exposition::Label("destination", members.by_index[d]->name));
  }
  return labels;
}

}  // namespace cacheroute::frontend
