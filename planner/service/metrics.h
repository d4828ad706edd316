// The planner's Prometheus metrics (text exposition format 0.0.4) and the small HTTP server
// that serves them with /healthz and /readyz. RenderMetrics is pure, so tests check the text
// exactly.
//
// Metrics (all prefixed cacheroute_planner_):
//   table_version{epoch}            gauge  number of the latest published version
//   table_age_seconds               gauge  now − build time of the latest table
//   plan_build_seconds              gauge  duration of the last planning step
//   plan_admitted_keys, plan_slots_used, plan_slot_capacity, plan_imbalance_ratio,
//   plan_total_rate, plan_cold_tail_rate, keys_known            gauges of the last plan
//   destination_expected_load{destination}                      gauge per destination
//   plans_total, versions_published_total, persist_errors_total counters
//   reports_accepted_total, reports_duplicate_total, key_counts_accepted_total   counters
//   reports_rejected_total{reason}  counter per rejected field (count, gateway_id, …)
//   subscribers                     gauge  gateways with an open table stream
//   gateway_acked_version{gateway}  gauge  version number each gateway last acknowledged
//   leader, ready                   gauges 1/0, replicas on etcd only (GetStatusResponse.ha)
//   share_batches_published_total, share_bytes_published_total, share_placements_published_total,
//   share_batches_delivered_total, share_bytes_delivered_total, share_batches_dropped_total
//                                   counters of fleet sharing (ShareExchangeStats; bytes
//                                   serialized)
//   share_subscribers               gauge  gateways with an open Share stream
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cacheroute/v1/admin.pb.h"
#include "planner/service/planner_core.h"
#include "planner/share/share_exchange.h"

namespace httplib {
class Server;
}

namespace cacheroute::service {

// The share_* metrics only with `share` (the server's ShareService).
std::string RenderMetrics(const v1::GetStatusResponse& status,
                          const PlannerCore::Counters& counters, absl::Time now,
                          const planner::ShareExchangeStats* share = nullptr);

class MetricsServer {
 public:
  // Serves GET /metrics, GET /healthz and GET /readyz on `listen` (HOST:PORT; port 0 picks
  // one). `ha` (replicas on etcd; null without) gives the replica's status: /readyz is 200 when
  // its ready_reason is "" and 503 with that one-line reason otherwise; without `ha`, ready once
  // the core has a table. `share` gives the fleet-sharing counters (null: none rendered).
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(
      const std::string& listen, PlannerCore* core, base::Clock* clock,
      std::function<v1::HaStatus()> ha = nullptr,
      std::function<planner::ShareExchangeStats()> share = nullptr);
  ~MetricsServer();
  int port() const { return port_; }

 private:
  MetricsServer() = default;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace cacheroute::service
