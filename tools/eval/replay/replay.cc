// See replay.h.
#include "tools/eval/replay/replay.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"
#include "cacheroute/dataplane/enum_names.h"
#include "cacheroute/dataplane/key_id.h"
#include "cacheroute/dataplane/routing_table.h"
#include "planner/algorithm.h"
#include "planner/plan_builder.h"
#include "planner/plan_snapshot.h"
#include "tools/eval/sim/fleet.h"
#include "tools/eval/workload/json_line.h"
#include "tools/eval/workload/mooncake.h"

namespace cacheroute::replay {

absl::StatusOr<workload::Workload> LoadReplayWorkload(const std::string& path,
                                                      const LoadOptions& options) {
  if (!(options.speedup > 0) || !std::isfinite(options.speedup)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--speedup must be a finite number > 0, got %g", options.speedup));
  }
  if (!(options.qps >= 0) || !std::isfinite(options.qps)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--qps must be a finite number >= 0, got %g", options.qps));
  }
  if (!(options.duration_s >= 0) || !std::isfinite(options.duration_s)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--duration must be a finite number >= 0, got %g", options.duration_s));
  }
  workload::TraceReadOptions read;
  read.key_blocks = options.key_blocks;
  CACHEROUTE_ASSIGN_OR_RETURN(workload::Workload w, workload::ReadMooncakeTraceFile(path, read));
  if (w.requests.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": the workload has no requests"));
  }
  const double first = w.requests.front().arrival_s;
  for (workload::Request& r : w.requests) r.arrival_s -= first;
  if (options.speedup != 1.0) {
    if (absl::Status s = workload::ScaleArrivalTimes(w, 1.0 / options.speedup); !s.ok()) return s;
  }
  if (options.qps > 0) {
    if (absl::Status s = workload::RescaleToQps(w, options.qps); !s.ok()) return s;
  }
  if (options.duration_s > 0) {
    auto end =
        std::lower_bound(w.requests.begin(), w.requests.end(), options.duration_s,
                         [](const workload::Request& r, double t) { return r.arrival_s < t; });
    w.requests.erase(end, w.requests.end());
  }
  return w;
}

Dispatcher::Dispatcher(const RoutingOptions& options)
    : random_(options.seed), view_(options.destinations) {}

absl::StatusOr<std::unique_ptr<Dispatcher>> Dispatcher::Create(const RoutingOptions& options,
                                                               const workload::Workload& workload) {
  const uint32_t n = options.destinations;
  if (n == 0) return absl::InvalidArgumentError("no destinations (--engines)");
  const dataplane::PolicyRegistry& policies = dataplane::BuiltinPolicies();
  const dataplane::PolicyInfo* info = policies.Find(options.policy);
  if (info == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--policy: ", policies.Check(options.policy).message));
  }
  std::unique_ptr<Dispatcher> d(new Dispatcher(options));
  if (info->uses_table) {
    absl::StatusOr<PlanSummary> plan = d->InstallOfflinePlan(options, *info, workload);
    if (!plan.ok()) return plan.status();
    d->plan_ = *plan;
  }
  dataplane::Result<std::unique_ptr<dataplane::Policy>> policy = info->make(
      {.destinations = n, .random = &d->random_, .router = d->router_.get(), .clock = &d->clock_});
  if (!policy.ok()) return absl::InternalError(policy.status().message);
  d->policy_ = *std::move(policy);
  return d;
}

// Offline plan (paper §3.1): per-key rates over the workload's span, planned with the policy's
// algorithm and installed in a Router with its dispatch rule.
absl::StatusOr<PlanSummary> Dispatcher::InstallOfflinePlan(const RoutingOptions& options,
                                                           const dataplane::PolicyInfo& policy,
                                                           const workload::Workload& workload) {
  if (!(options.q_cap >= 0) || !std::isfinite(options.q_cap)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("--q-cap must be a finite number >= 0, got %g", options.q_cap));
  }
  CACHEROUTE_ASSIGN_OR_RETURN(planner::Algorithm algorithm, planner::ParseAlgorithm(policy.name));
  const uint32_t n = options.destinations;
  absl::flat_hash_map<uint64_t, uint64_t> counts;
  for (const workload::Request& r : workload.requests) ++counts[dataplane::KeyId(r.key)];
  const double span = workload.requests.empty()
                          ? 0
                          : workload.requests.back().arrival_s - workload.requests.front().arrival_s;
  const double seconds = span > 0 ? span : 1.0;
  std::vector<planner::KeyRate> rates;
  rates.reserve(counts.size());
  double total = 0;
  for (const auto& [key, count] : counts) {
    rates.push_back({key, static_cast<double>(count) / seconds});
    total += rates.back().rate;
  }
  planner::PlanConfig config = planner::PlanConfigFor(
      algorithm, {.destinations = n,
                  .q_cap = options.q_cap > 0 ? options.q_cap : total / n,
                  .slots_per_destination = options.slots_per_destination});
  if (!(config.q_cap > 0)) config.q_cap = 1;
  CACHEROUTE_ASSIGN_OR_RETURN(planner::Plan plan, planner::BuildPlan(rates, config));
  dataplane::Result<dataplane::RoutingTable> table =
      planner::RoutingTableFromPlan(plan, {.epoch = 1, .number = 1});
  if (!table.ok()) return absl::InternalError(table.status().message);
  router_ = std::make_unique<dataplane::Router>(
      dataplane::RouterOptions{.destination_count = n,
                               .dispatch = policy.dispatch,
                               .table_ttl = dataplane::Duration::zero(),
                               .external_load_weight = 1.0},
      random_);
  const dataplane::Status installed = router_->Install(
      std::make_shared<const dataplane::RoutingTable>(*std::move(table)), clock_.Now());
  if (!installed.ok) return absl::InternalError(installed.message);
  const planner::PlanStats& stats = plan.stats();
  return PlanSummary{
      .keys = counts.size(),
      .admitted_keys = plan.size(),
      .q_cap = config.q_cap,
      .admitted_rate_share = stats.total_rate > 0 ? stats.admitted_rate / stats.total_rate : 0,
      .imbalance = stats.imbalance};
}

Dispatcher::Ticket Dispatcher::Pick(const workload::Request& request, uint32_t block_size) {
  std::vector<uint64_t> hashes;
  sim::AppendPromptBlockHashes(request.hash_ids, block_size, request.input_length, hashes);
  Ticket t;
  t.prompt_tokens = request.input_length;
  t.decision = policy_->Route({.key_id = dataplane::KeyId(request.key),
                               .prompt_tokens = request.input_length,
                               .block_hashes = hashes},
                              view_);
  t.destination = t.decision.destination;
  if (t.destination == dataplane::kNoDestination) {
    t.done = true;
    return t;
  }
  constexpr auto kRelaxed = std::memory_order_relaxed;
  view_.in_flight_[t.destination].fetch_add(1, kRelaxed);
  view_.queued_[t.destination].fetch_add(QueuedTokens(t), kRelaxed);
  view_.prefilling_[t.destination].fetch_add(1, kRelaxed);
  view_.active_[t.destination].fetch_add(t.prompt_tokens, kRelaxed);
  return t;
}

void Dispatcher::FirstToken(Ticket& t) {
  if (t.done || t.first_token) return;
  t.first_token = true;
  constexpr auto kRelaxed = std::memory_order_relaxed;
  view_.queued_[t.destination].fetch_sub(QueuedTokens(t), kRelaxed);
  view_.prefilling_[t.destination].fetch_sub(1, kRelaxed);
  view_.decoding_[t.destination].fetch_add(1, kRelaxed);
}

void Dispatcher::Done(Ticket& t, const Outcome* served) {
  if (t.done) return;
  t.done = true;
  constexpr auto kRelaxed = std::memory_order_relaxed;
  if (t.first_token) {
    view_.decoding_[t.destination].fetch_sub(1, kRelaxed);
  } else {
    view_.queued_[t.destination].fetch_sub(QueuedTokens(t), kRelaxed);
    view_.prefilling_[t.destination].fetch_sub(1, kRelaxed);
  }
  view_.active_[t.destination].fetch_sub(t.prompt_tokens, kRelaxed);
  view_.in_flight_[t.destination].fetch_sub(1, kRelaxed);
  policy_->Ticket(t.decision).End();  // the policies that count their own requests (dynamo-kv)
  if (router_ != nullptr && served != nullptr && served->kind == OutcomeKind::kOk) {
    router_->ObserveServed(t.decision, static_cast<uint32_t>(served->prompt_tokens),
                           static_cast<uint32_t>(served->cached_tokens));
  }
}

constexpr dataplane::EnumName<OutcomeKind> kOutcomeKindNames[] = {
    {OutcomeKind::kOk, "ok"},
    {OutcomeKind::kHttpError, "http_error"},
    {OutcomeKind::kConnectError, "connect_error"},
    {OutcomeKind::kTimeout, "timeout"},
    {OutcomeKind::kTransportError, "transport_error"},
    {OutcomeKind::kRejected, "rejected"},
    {OutcomeKind::kShed, "shed"},
};
static_assert(dataplane::IsEnumTable(kOutcomeKindNames, kOutcomeKinds));

const char* OutcomeName(OutcomeKind kind) { return dataplane::NameOf(kOutcomeKindNames, kind); }

double Percentile(std::vector<double>& values, double p) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double rank = std::ceil(p / 100.0 * static_cast<double>(values.size()));
  const size_t index = static_cast<size_t>(std::clamp(rank, 1.0, double(values.size()))) - 1;
  return values[index];
}

namespace {

double MaxOverMean(const std::vector<double>& v) {
  if (v.empty()) return 0;
  const double sum = std::accumulate(v.begin(), v.end(), 0.0);
  if (sum <= 0) return 0;
  return *std::max_element(v.begin(), v.end()) / (sum / static_cast<double>(v.size()));
}

}  // namespace

ReplayReport BuildReport(const std::vector<Outcome>& outcomes,
                         const std::vector<std::string>& destinations, double wall_s,
                         double slo_s) {
  ReplayReport report;
  report.wall_s = wall_s;
  report.slo_s = slo_s > 0 ? slo_s : 0;
  // Through a gateway the destinations are the names it reported.
  std::vector<std::string> names = destinations;
  std::map<std::string, size_t> index_by_via;
  if (names.empty()) {
    for (const Outcome& o : outcomes) {
      if (!o.via.empty()) index_by_via.emplace(o.via, 0);
    }
    for (auto& [name, index] : index_by_via) {
      index = names.size();
      names.push_back(name);
    }
  }
  report.destinations.resize(names.size());
  for (size_t d = 0; d < names.size(); ++d) report.destinations[d].name = names[d];
  std::vector<double> ttft, latency, shed_latency;
  for (const Outcome& o : outcomes) {
    ++report.requests;
    ++report.by_kind[static_cast<int>(o.kind)];
    size_t d = o.destination;
    if (destinations.empty()) {
      auto it = o.via.empty() ? index_by_via.end() : index_by_via.find(o.via);
      d = it == index_by_via.end() ? report.destinations.size() : it->second;
    }
    DestinationReport* dest = d < report.destinations.size() ? &report.destinations[d] : nullptr;
    if (dest != nullptr) ++dest->requests;
    if (o.kind == OutcomeKind::kShed) {
      ++report.shed;
      shed_latency.push_back(o.latency_s);
      continue;
    }
    if (o.kind != OutcomeKind::kOk) {
      ++report.failed;
      continue;
    }
    ++report.succeeded;
    if (report.slo_s > 0 && o.ttft_s <= report.slo_s) ++report.within_slo;
    if (o.planned) ++report.planned;
    ttft.push_back(o.ttft_s);
    latency.push_back(o.latency_s);
    report.prompt_tokens += o.prompt_tokens;
    report.cached_tokens += o.cached_tokens;
    if (dest != nullptr) {
      ++dest->succeeded;
      dest->prompt_tokens += o.prompt_tokens;
      dest->cached_tokens += o.cached_tokens;
      dest->prefill_tokens += o.prompt_tokens - std::min(o.prompt_tokens, o.cached_tokens);
    }
  }
  report.ttft_p50_s = Percentile(ttft, 50);
  report.ttft_p99_s = Percentile(ttft, 99);
  report.latency_p50_s = Percentile(latency, 50);
  report.latency_p99_s = Percentile(latency, 99);
  report.shed_latency_p50_s = Percentile(shed_latency, 50);
  report.shed_latency_p99_s = Percentile(shed_latency, 99);
  report.goodput = wall_s > 0 ? static_cast<double>(report.within_slo) / wall_s : 0;
  report.kv_hit = report.prompt_tokens > 0 ? static_cast<double>(report.cached_tokens) /
                                                 static_cast<double>(report.prompt_tokens)
                                           : 0;
  std::vector<double> requests, prefill;
  for (const DestinationReport& d : report.destinations) {
    requests.push_back(static_cast<double>(d.requests));
    prefill.push_back(static_cast<double>(d.prefill_tokens));
  }
  report.request_imbalance = MaxOverMean(requests);
  report.prefill_imbalance = MaxOverMean(prefill);
  return report;
}

std::string FormatReportTable(const ReplayReport& r) {
  std::string out;
  absl::StrAppendFormat(&out, "Replay%s\n",
                        r.policy.empty() ? std::string() : absl::StrCat(" with policy ", r.policy));
  absl::StrAppendFormat(&out, "  requests            %d in %.3f s (%.1f/s)\n", r.requests, r.wall_s,
                        r.wall_s > 0 ? static_cast<double>(r.requests) / r.wall_s : 0.0);
  absl::StrAppendFormat(&out, "  succeeded           %d\n", r.succeeded);
  std::string kinds;
  for (int k = 1; k < kOutcomeKinds; ++k) {
    if (r.by_kind[k] == 0 || k == static_cast<int>(OutcomeKind::kShed)) continue;
    absl::StrAppend(&kinds, kinds.empty() ? "" : ", ", OutcomeName(static_cast<OutcomeKind>(k)),
                    " ", r.by_kind[k]);
  }
  absl::StrAppendFormat(&out, "  failed              %d%s\n", r.failed,
                        kinds.empty() ? std::string() : absl::StrCat("  (", kinds, ")"));
  absl::StrAppendFormat(&out,
                        "  shed (429)          %d  (time to the 429 p50 / p99: %.4f s / %.4f s)\n",
                        r.shed, r.shed_latency_p50_s, r.shed_latency_p99_s);
  if (r.slo_s > 0) {
    absl::StrAppendFormat(&out, "  within SLO          %d with TTFT <= %.3g s: goodput %.2f/s\n",
                          r.within_slo, r.slo_s, r.goodput);
  }
  absl::StrAppendFormat(&out, "  TTFT p50 / p99      %.4f s / %.4f s\n", r.ttft_p50_s,
                        r.ttft_p99_s);
  absl::StrAppendFormat(&out, "  latency p50 / p99   %.4f s / %.4f s\n", r.latency_p50_s,
                        r.latency_p99_s);
  absl::StrAppendFormat(&out, "  served KV hit       %.2f%%  (%d cached of %d prompt tokens)\n",
                        100 * r.kv_hit, r.cached_tokens, r.prompt_tokens);
  if (r.policy == "gateway" || r.policy == "endpoint-picker") {
    absl::StrAppendFormat(
        &out, "  planned (front)     %.2f%% of successes routed by the table\n",
        r.succeeded > 0 ? 100.0 * static_cast<double>(r.planned) / static_cast<double>(r.succeeded)
                        : 0.0);
  }
  if (r.plan) {
    absl::StrAppendFormat(&out,
                          "  offline plan        %d of %d keys admitted (%.1f%% of the rate), "
                          "q_cap %.4g/s, planned imbalance %.3f\n",
                          r.plan->admitted_keys, r.plan->keys, 100 * r.plan->admitted_rate_share,
                          r.plan->q_cap, r.plan->imbalance);
  }
  if (!r.destinations.empty()) {
    absl::StrAppendFormat(&out, "\n  %-4s %-28s %9s %9s %14s %8s\n", "dest", "engine", "requests",
                          "ok", "prefill tok", "KV hit");
    for (size_t d = 0; d < r.destinations.size(); ++d) {
      const DestinationReport& x = r.destinations[d];
      absl::StrAppendFormat(&out, "  %-4d %-28s %9d %9d %14d %7.2f%%\n", d, x.name, x.requests,
                            x.succeeded, x.prefill_tokens,
                            x.prompt_tokens > 0 ? 100.0 * static_cast<double>(x.cached_tokens) /
                                                      static_cast<double>(x.prompt_tokens)
                                                : 0.0);
    }
    absl::StrAppendFormat(&out, "  imbalance (max/mean): requests %.3f, prefill work %.3f\n",
                          r.request_imbalance, r.prefill_imbalance);
  }
  return out;
}

std::string FormatReportJson(const ReplayReport& r) {
  using workload::JsonQuote;
  std::string failures;
  for (int k = 1; k < kOutcomeKinds; ++k) {
    if (k == static_cast<int>(OutcomeKind::kShed)) continue;
    absl::StrAppend(&failures, k == 1 ? "" : ",", "\"", OutcomeName(static_cast<OutcomeKind>(k)),
                    "\":", r.by_kind[k]);
  }
  std::string out = absl::StrFormat(
      "{\"policy\":%s,\"requests\":%d,\"succeeded\":%d,\"failed\":%d,\"failures\":{%s},"
      "\"wall_seconds\":%.6f,\"ttft_p50_seconds\":%.6f,\"ttft_p99_seconds\":%.6f,"
      "\"latency_p50_seconds\":%.6f,\"latency_p99_seconds\":%.6f,\"prompt_tokens\":%d,"
      "\"cached_tokens\":%d,\"kv_hit\":%.6f,\"planned\":%d",
      r.policy.empty() ? "null" : JsonQuote(r.policy), r.requests, r.succeeded, r.failed, failures,
      r.wall_s, r.ttft_p50_s, r.ttft_p99_s, r.latency_p50_s, r.latency_p99_s, r.prompt_tokens,
      r.cached_tokens, r.kv_hit, r.planned);
  absl::StrAppendFormat(&out,
                        ",\"shed\":%d,\"shed_latency_p50_seconds\":%.6f,"
                        "\"shed_latency_p99_seconds\":%.6f",
                        r.shed, r.shed_latency_p50_s, r.shed_latency_p99_s);
  if (r.slo_s > 0) {
    absl::StrAppendFormat(&out, ",\"slo_seconds\":%.6f,\"within_slo\":%d,\"goodput\":%.6f",
                          r.slo_s, r.within_slo, r.goodput);
  }
  if (r.plan) {
    absl::StrAppendFormat(&out,
                          ",\"plan\":{\"keys\":%d,\"admitted_keys\":%d,\"q_cap\":%.6g,"
                          "\"admitted_rate_share\":%.6f,\"imbalance\":%.6f}",
                          r.plan->keys, r.plan->admitted_keys, r.plan->q_cap,
                          r.plan->admitted_rate_share, r.plan->imbalance);
  }
  if (!r.destinations.empty()) {
    out += ",\"destinations\":[";
    for (size_t d = 0; d < r.destinations.size(); ++d) {
      const DestinationReport& x = r.destinations[d];
      absl::StrAppendFormat(&out,
                            "%s{\"name\":%s,\"requests\":%d,\"succeeded\":%d,\"prompt_tokens\":%d,"
                            "\"cached_tokens\":%d,\"prefill_tokens\":%d}",
                            d == 0 ? "" : ",", JsonQuote(x.name), x.requests, x.succeeded,
                            x.prompt_tokens, x.cached_tokens, x.prefill_tokens);
    }
    absl::StrAppendFormat(&out, "],\"request_imbalance\":%.6f,\"prefill_imbalance\":%.6f",
                          r.request_imbalance, r.prefill_imbalance);
  }
  out += "}\n";
  return out;
}

}  // namespace cacheroute::replay
