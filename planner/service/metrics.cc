// See metrics.h.
#include "planner/service/metrics.h"

#include <httplib.h>

#include <optional>
#include <string>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/exposition.h"
#include "base/http_listen.h"
#include "planner/gate.h"

namespace cacheroute::service {

std::string RenderMetrics(const v1::GetStatusResponse& status,
                          const PlannerCore::Counters& counters, absl::Time now,
                          const planner::ShareExchangeStats* share) {
  base::Exposition w("cacheroute_planner_");
  w.Family("table_version", "gauge", "Number of the latest published table version.");
  w.Sample("table_version", static_cast<double>(status.version().number()),
           absl::StrCat("epoch=\"", status.version().epoch(), "\""));
  const double age = status.plan_unix_ms() > 0
                         ? absl::ToDoubleSeconds(now - absl::FromUnixMillis(status.plan_unix_ms()))
                         : 0;
  w.Gauge("table_age_seconds", "Seconds since the last planning step.", age);
  w.Gauge("plan_build_seconds", "Duration of the last planning step.", status.build_seconds());
  w.Gauge("plan_admitted_keys", "Keys admitted by the last plan.", status.keys_admitted());
  w.Gauge("plan_slots_used", "Warm slots used by the last plan.", status.slots_used());
  w.Gauge("plan_slot_capacity", "Warm slots available (R x W).", status.slot_capacity());
  w.Gauge("plan_imbalance_ratio", "Max over mean expected destination load.", status.imbalance());
  w.Gauge("plan_total_rate", "Total request rate planned (req/s).", status.total_rate());
  w.Gauge("plan_cold_tail_rate", "Rate not admitted (req/s).", status.cold_tail_rate());
  w.Gauge("keys_known", "Keys with a rate estimate.", status.keys_known());
  if (status.has_byte_aware()) {
    const v1::ByteAwareStatus& b = status.byte_aware();
    w.Gauge("plan_kv_budget_tokens", "KV tokens reserved for planned prefixes (byte-aware).",
            b.kv_budget_tokens());
    w.Gauge("plan_kv_used_tokens", "Reusable tokens x k_b of the admitted keys (byte-aware).",
            b.kv_used_tokens());
    w.Gauge("plan_saved_work", "Prefill tokens/s the admitted keys' affinity saves (byte-aware).",
            b.saved_work());
    w.Gauge("plan_work_imbalance", "Max over mean expected work per destination (byte-aware).",
            b.work_imbalance());
    w.Gauge("keys_measured", "Keys with reported prefix sizes (byte-aware).", b.measured_keys());
  }
  w.Family("destination_expected_load", "gauge", "Expected load per destination (req/s).");
  for (int i = 0; i < status.destinations_size() && i < status.expected_loads_size(); ++i) {
    w.Sample("destination_expected_load", status.expected_loads(i),
             base::Exposition::Label("destination", status.destinations(i)));
  }
  w.Counter("plans_total", "Planning steps run.", counters.plans);
  w.Counter("versions_published_total", "Table versions published.", counters.versions_published);
  w.Counter("persist_errors_total", "Failed writes of the state file.", counters.persist_errors);
  w.Counter("reports_accepted_total", "Rate reports applied.", counters.reports_accepted);
  w.Counter("reports_duplicate_total", "Rate reports recognised as retries.",
            counters.reports_duplicate);
  w.Counter("key_counts_accepted_total", "Per-key counts applied.", counters.key_counts_accepted);
  w.Family("reports_rejected_total", "counter", "Rate reports rejected, by the field at fault.");
  for (const auto& [reason, count] : counters.reports_rejected) {
    w.Sample("reports_rejected_total", count, base::Exposition::Label("reason", reason));
  }
  int subscribers = 0;
  for (const auto& g : status.gateways()) subscribers += g.subscribed() ? 1 : 0;
  w.Gauge("subscribers", "Gateways with an open table stream.", subscribers);
  w.Family("gateway_acked_version", "gauge", "Version number each gateway last acknowledged.");
  for (const auto& g : status.gateways()) {
    if (g.acked_version().number() == 0 && !g.subscribed()) continue;
    w.Sample("gateway_acked_version", static_cast<double>(g.acked_version().number()),
             base::Exposition::Label("gateway", g.gateway_id()));
  }
  if (status.has_ha()) {
    w.Gauge("leader", "1 while this replica leads the etcd-coordinated planners.",
            status.ha().role() == "leader" ? 1 : 0);
    w.Gauge("ready", "1 while GET /readyz answers 200.",
            status.ha().ready_reason().empty() ? 1 : 0);
  }
  if (share != nullptr) {
    const auto count = [](uint64_t n) { return static_cast<double>(n); };
    w.Counter("share_batches_published_total", "Share batches gateways published.",
              count(share->batches_published));
    w.Counter("share_placements_published_total", "Placements in the published share batches.",
              count(share->placements_published));
    w.Counter("share_bytes_published_total", "Serialized bytes of the published share batches.",
              count(share->bytes_published));
    w.Counter("share_batches_delivered_total", "Share batches written to other gateways.",
              count(share->batches_delivered));
    w.Counter("share_bytes_delivered_total", "Serialized bytes of the delivered share batches.",
              count(share->bytes_delivered));
    w.Counter("share_batches_dropped_total",
              "Share batches dropped from a slow gateway's queue (the oldest first).",
              count(share->batches_dropped));
    w.Gauge("share_subscribers", "Gateways with an open Share stream.", count(share->subscribers));
  }
  if (status.has_gate()) {
    const v1::GateStatus& gate = status.gate();
    w.Family("gate_state", "gauge", "The rollout gate's state: 1 for the current one.");
    for (planner::GateState s : planner::kGateStates) {
      const absl::string_view state = planner::GateStateName(s);
      w.Sample("gate_state", gate.state() == state ? 1 : 0,
               base::Exposition::Label("state", state));
    }
    w.Gauge("gate_table_fraction_ratio", "Share of keys the rollout gate puts on the table.",
            gate.table_fraction());
    w.Gauge("gate_forced", "1 while an operator holds the gate in a state.",
            gate.forced_state().empty() ? 0 : 1);
    w.Family("gate_arm_ttft_quantile_seconds", "gauge",
             "TTFT quantile of each arm in the gate's last decision window.");
    w.Sample("gate_arm_ttft_quantile_seconds", gate.table_quantile_seconds(),
             base::Exposition::Label("arm", "table"));
    w.Sample("gate_arm_ttft_quantile_seconds", gate.control_quantile_seconds(),
             base::Exposition::Label("arm", "control"));
    w.Family("gate_arm_failure_ratio", "gauge",
             "Failure rate of each arm in the gate's last decision window.");
    w.Sample("gate_arm_failure_ratio", gate.table_failure_rate(),
             base::Exposition::Label("arm", "table"));
    w.Sample("gate_arm_failure_ratio", gate.control_failure_rate(),
             base::Exposition::Label("arm", "control"));
    w.Family("gate_arm_kv_hit_ratio", "gauge",
             "Served KV hit (cached / prompt tokens) of each arm in the gate's last decision.");
    w.Sample("gate_arm_kv_hit_ratio", gate.table_kv_hit(), base::Exposition::Label("arm", "table"));
    w.Sample("gate_arm_kv_hit_ratio", gate.control_kv_hit(),
             base::Exposition::Label("arm", "control"));
  }
  return w.Take();
}

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(
    const std::string& listen, PlannerCore* core, base::Clock* clock,
    std::function<v1::HaStatus()> ha, std::function<planner::ShareExchangeStats()> share) {
  const size_t colon = listen.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(listen.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics_listen: expected HOST:PORT, got \"", listen, "\""));
  }
  std::string host = listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  server->server_ = std::make_unique<httplib::Server>();
  server->server_->Get(
      "/metrics", [core, clock, ha, share](const httplib::Request&, httplib::Response& res) {
        v1::GetStatusResponse status = core->Status();
        if (ha) *status.mutable_ha() = ha();
        const std::optional<planner::ShareExchangeStats> shared =
            share ? std::optional(share()) : std::nullopt;
        res.set_content(
            RenderMetrics(status, core->counters(), clock->Now(), shared ? &*shared : nullptr),
            "text/plain; version=0.0.4");
      });
  server->server_->Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  server->server_->Get("/readyz", [core, ha](const httplib::Request&, httplib::Response& res) {
    const std::string reason =
        ha ? ha().ready_reason() : (core->Latest() != nullptr ? "" : "no table yet");
    if (reason.empty()) {
      res.set_content("ready\n", "text/plain");
    } else {
      res.status = 503;
      res.set_content(reason + "\n", "text/plain");
    }
  });
  server->port_ = port == 0 ? server->server_->bind_to_any_port(host)
                            : (server->server_->bind_to_port(host, port) ? port : -1);
  if (server->port_ <= 0) {
    return absl::UnavailableError(absl::StrCat("metrics_listen: cannot bind \"", listen, "\""));
  }
  httplib::Server* raw = server->server_.get();
  server->thread_ = base::ListenInBackground(*raw);
  return server;
}

MetricsServer::~MetricsServer() {
  if (server_ != nullptr) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace cacheroute::service
