// See proto_convert.h. Times travel as Unix nanoseconds, so a restore continues exactly.
#include "planner/service/proto_convert.h"

#include <utility>

#include "absl/time/time.h"

namespace cacheroute::service {

planner::RateReport ToRateReport(const v1::ReportRatesRequest& request) {
  planner::RateReport report;
  report.gateway_id = request.gateway_id();
  report.sequence = request.sequence();
  report.window_start_unix_ms = request.window_start_unix_ms();
  report.window_end_unix_ms = request.window_end_unix_ms();
  report.other_count = request.other_count();
  report.counts.resize(request.counts_size());
  for (int i = 0; i < request.counts_size(); ++i) {
    const v1::KeyCount& in = request.counts(i);
    planner::KeyCountReport& out = report.counts[i];
    out.key_id = in.key_id();
    out.count = in.count();
    if (in.has_prompt_tokens()) out.prompt_tokens = in.prompt_tokens();
    if (in.has_reusable_tokens()) out.reusable_tokens = in.reusable_tokens();
    out.key = in.key();
    out.served_at = in.served_at();
  }
  if (request.has_evidence()) {
    const v1::GateEvidence& in = request.evidence();
    planner::EvidenceReport& out = report.evidence.emplace();
    out.table_fraction = in.table_fraction();
    for (auto [from, to] : {std::pair{&in.table(), &out.table}, {&in.control(), &out.control}}) {
      to->requests = from->requests();
      to->failures = from->failures();
      to->prompt_tokens = from->prompt_tokens();
      to->cached_tokens = from->cached_tokens();
      to->ttft_bucket_counts.assign(from->ttft_bucket_counts().begin(),
                                    from->ttft_bucket_counts().end());
    }
  }
  return report;
}

v1::RateState RateAggregatorToProto(const planner::RateAggregator& rates) {
  const planner::RateAggregator::State state = rates.Export();
  v1::RateState out;
  out.set_last_close_unix_ns(absl::ToUnixNanos(state.last_close));
  out.set_unkeyed_rate(state.unkeyed_rate);
  out.set_unkeyed_pending(state.unkeyed_pending);
  out.mutable_keys()->Reserve(static_cast<int>(state.keys.size()));
  for (const auto& key : state.keys) {
    v1::KeyRateState* k = out.add_keys();
    k->set_key_id(key.key_id);
    k->set_rate(key.rate);
    k->set_pending(key.pending);
    k->set_last_report_unix_ns(absl::ToUnixNanos(key.last_report));
    k->set_key(key.name);
    if (key.reusable >= 0) k->set_reusable(key.reusable);
    if (key.prompt >= 0) k->set_prompt(key.prompt);
    k->set_pending_reusable(key.pending_reusable);
    k->set_pending_prompt(key.pending_prompt);
    k->set_pending_measured(key.pending_measured);
  }
  for (const planner::GatewayInfo& g : state.gateways) {
    v1::GatewayState* gw = out.add_gateways();
    gw->set_gateway_id(g.gateway_id);
    gw->set_last_sequence(g.last_sequence);
    gw->set_last_report_unix_ns(absl::ToUnixNanos(g.last_report));
    gw->set_reports(g.reports);
  }
  return out;
}

absl::StatusOr<planner::RateAggregator> RateAggregatorFromProto(
    const v1::RateState& in, const planner::RateAggregatorOptions& options) {
  planner::RateAggregator::State state;
  state.last_close = absl::FromUnixNanos(in.last_close_unix_ns());
  state.unkeyed_rate = in.unkeyed_rate();
  state.unkeyed_pending = in.unkeyed_pending();
  state.keys.reserve(in.keys_size());
  for (const v1::KeyRateState& k : in.keys()) {
    state.keys.push_back({.key_id = k.key_id(),
                          .rate = k.rate(),
                          .pending = k.pending(),
                          .last_report = absl::FromUnixNanos(k.last_report_unix_ns()),
                          .name = k.key(),
                          .reusable = k.has_reusable() ? k.reusable() : planner::kUnmeasured,
                          .prompt = k.has_prompt() ? k.prompt() : planner::kUnmeasured,
                          .pending_reusable = k.pending_reusable(),
                          .pending_prompt = k.pending_prompt(),
                          .pending_measured = k.pending_measured()});
  }
  for (const v1::GatewayState& g : in.gateways()) {
    planner::GatewayInfo info;
    info.gateway_id = g.gateway_id();
    info.last_sequence = g.last_sequence();
    info.last_report = absl::FromUnixNanos(g.last_report_unix_ns());
    info.reports = g.reports();
    state.gateways.push_back(std::move(info));
  }
  return planner::RateAggregator::Restore(state, options);
}

}  // namespace cacheroute::service
