// See routing_core.h.
#include "tools/frontend/routing/routing_core.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cacheroute/dataplane/key_id.h"

namespace cacheroute::frontend {

RoutingCore::RoutingCore(const RoutingCoreOptions& options, const dataplane::Clock& clock)
    : clock_(clock),
      random_(options.seed),
      outbox_(options.share_placements
                  ? std::make_unique<dataplane::PlacementOutbox>(options.placement_outbox)
                  : nullptr),
      router_({.destination_count = 0,
               .capacity = options.capacity,
               .dispatch = options.dispatch,
               .table_ttl = options.table_ttl,
               .external_load_weight = options.external_load_weight,
               .placement_outbox = outbox_.get(),
               .active_tokens = options.active_tokens},
              random_),
      recorder_(options.recorder),
      served_hit_(options.capacity, router_),
      latency_(new DestinationLatency[options.capacity]),
      measure_turnover_(options.measure_turnover),
      intake_(new Intake[options.capacity]) {}

RequestLifecycle RoutingCore::Route(std::optional<uint64_t> key_id, const PromptSize& prompt,
                                    std::span<const uint64_t> block_hashes,
                                    dataplane::Policy* policy, dataplane::Time start) {
  const uint32_t prompt_tokens = prompt_estimate_.Tokens(prompt);
  if (!key_id.has_value()) {
    picks_[kNoKeyPick].fetch_add(1, std::memory_order_relaxed);
    return RequestLifecycle(*this,
                            router_.Track({dataplane::PowerOfTwoChoices(router_.loads(), random_),
                                           false, dataplane::Reason::kPolicy},
                                          prompt_tokens),
                            start, /*key_id=*/std::nullopt, prompt);
  }
  const dataplane::PickRequest pick{
      .key_id = *key_id, .prompt_tokens = prompt_tokens, .block_hashes = block_hashes};
  recorder_.Record(pick.key_id);
  key_sizes_.ObservePrompt(pick.key_id, block_hashes, prompt_tokens);
  if (policy == nullptr) {
    dataplane::InFlight in_flight = router_.Pick(pick, clock_.Now());
    picks_[static_cast<int>(in_flight.reason())].fetch_add(1, std::memory_order_relaxed);
    return RequestLifecycle(*this, std::move(in_flight), start, pick.key_id, prompt);
  }
  const dataplane::Decision decision = policy->Route(pick, router_.loads());
  picks_[static_cast<int>(decision.reason)].fetch_add(1, std::memory_order_relaxed);
  return RequestLifecycle(*this, router_.Track(decision, prompt_tokens), start, pick.key_id, prompt,
                          policy->Ticket(decision));
}

dataplane::Explanation RoutingCore::Explain(uint64_t key_id, const PromptSize& prompt,
                                            std::span<const uint64_t> block_hashes,
                                            uint32_t* prompt_tokens) {
  *prompt_tokens = prompt_estimate_.Tokens(prompt);
  return router_.Explain(
      {.key_id = key_id, .prompt_tokens = *prompt_tokens, .block_hashes = block_hashes},
      clock_.Now());
}

RequestLifecycle RoutingCore::RouteAny(dataplane::Time start) {
  return RequestLifecycle(*this,
                          router_.Track({dataplane::RandomUpDestination(router_.loads(), random_),
                                         false, dataplane::Reason::kPolicy}),
                          start, /*key_id=*/std::nullopt, {});
}

RequestLifecycle RoutingCore::Redirect(RequestLifecycle routed, uint32_t d) {
  const dataplane::Reason reason = routed.ok() ? routed.reason() : dataplane::Reason::kPolicy;
  return RequestLifecycle(*this,
                          router_.Track({d, false, reason}, routed.in_flight_.prompt_tokens()),
                          routed.start(), routed.key_id_, routed.prompt_size_);
}

bool RoutingCore::AnyUp() const {
  for (uint32_t d = 0; d < router_.destination_count(); ++d) {
    if (router_.loads().Up(d)) return true;
  }
  return false;
}

void RoutingCore::ResetDestination(uint32_t d) {
  latency_[d].ttft.Reset();
  latency_[d].duration.Reset();
  served_hit_.Reset(d);
  std::lock_guard<std::mutex> lock(intake_[d].mu);
  intake_[d].tokens_per_s = 0;
  intake_[d].last_s = 0;
  intake_[d].turnover.reset();
}

std::optional<dataplane::Duration> RoutingCore::measured_turnover(uint32_t d) const {
  std::lock_guard<std::mutex> lock(intake_[d].mu);
  return intake_[d].turnover;
}

void RoutingCore::ObserveIntake(uint32_t d, double tokens) {
  if (!measure_turnover_) return;
  const double now = std::chrono::duration<double>(clock_.Now().time_since_epoch()).count();
  Intake& intake = intake_[d];
  std::lock_guard<std::mutex> lock(intake.mu);
  intake.tokens_per_s =
      intake.tokens_per_s * std::exp(-(now - intake.last_s) / kTurnoverWindowSeconds) +
      tokens / kTurnoverWindowSeconds;
  intake.last_s = now;
  const double capacity = router_.kv_capacity(d);
  if (intake.tokens_per_s <= 0 || capacity <= 0) return;
  intake.turnover = std::chrono::duration_cast<dataplane::Duration>(
      std::chrono::duration<double>(std::min(capacity / intake.tokens_per_s, kMaxTurnoverSeconds)));
  (void)router_.SetTurnover(d, *intake.turnover);
}

void RoutingCore::RenderPicks(base::Exposition& page, const dataplane::RouterStats& stats) const {
  page.Family("picks_total", "counter",
              "Routing decisions by reason: planned, the CacheRoute fallbacks (no_table, stale, "
              "set_down, not_admitted), policy (other policies), control_arm (a rollout's control "
              "arm), no_key.");
  for (int r = 0; r <= dataplane::kReasonCount; ++r) {
    const std::string_view name = dataplane::ReasonName(static_cast<dataplane::Reason>(r));
    const absl::string_view reason =
        r == kNoKeyPick ? "no_key" : absl::string_view(name.data(), name.size());
    page.Sample("picks_total", static_cast<double>(picks_[r].load(std::memory_order_relaxed)),
                absl::StrCat("reason=\"", reason, "\""));
  }
  page.Family("table_version", "gauge", "Number of the installed table version (0: none).");
  page.Sample("table_version", static_cast<double>(stats.has_table ? stats.version.number : 0),
              absl::StrCat("epoch=\"", stats.has_table ? stats.version.epoch : 0, "\""));
  page.Gauge("table_age_seconds", "Seconds since the installed table was installed.",
             stats.has_table ? std::chrono::duration<double>(stats.table_age).count() : 0.0);
  page.Gauge("table_stale", "1 when the table is older than table_ttl (not routed by).",
             stats.stale ? 1 : 0);
}

void RoutingCore::RenderLoads(base::Exposition& page, const dataplane::RouterStats& stats,
                              std::span<const std::string> labels) const {
  page.Family("in_flight", "gauge", "Requests in flight per destination.");
  for (uint32_t d = 0; d < labels.size(); ++d) {
    page.Sample("in_flight", static_cast<double>(stats.in_flight[d]), labels[d]);
  }
  page.Family("destination_up", "gauge",
              "1 when the destination is routed to, 0 when marked down.");
  for (uint32_t d = 0; d < labels.size(); ++d) {
    page.Sample("destination_up", stats.up[d] ? 1 : 0, labels[d]);
  }
}

void RoutingCore::RenderLatency(base::Exposition& page, std::span<const std::string> labels) const {
  page.Family("destination_request_duration_seconds", "histogram",
              "Per destination: time from receiving a request to the end of its upstream answer.");
  for (uint32_t d = 0; d < labels.size(); ++d) {
    latency_[d].duration.Render(page, "destination_request_duration_seconds", labels[d]);
  }
  page.Family("time_to_first_token_seconds", "histogram",
              "Per destination, streamed answers: time from receiving a request to the first body "
              "chunk.");
  for (uint32_t d = 0; d < labels.size(); ++d) {
    latency_[d].ttft.Render(page, "time_to_first_token_seconds", labels[d]);
  }
}

}  // namespace cacheroute::frontend
