// Tests for planner/service/metrics: the exposition text, exactly, and promtool's check of it.
#include "planner/service/metrics.h"

#include <catch2/catch.hpp>

#include "tests/support/run_command.h"

namespace cacheroute::service {
namespace {

TEST_CASE("RenderMetrics writes every family in the Prometheus text format") {
  v1::GetStatusResponse status;
  status.mutable_version()->set_epoch(1800000000);
  status.mutable_version()->set_number(12);
  status.set_plan_unix_ms(1'800'000'000'000);
  status.set_build_seconds(0.002);
  status.set_keys_admitted(3);
  status.set_slots_used(4);
  status.set_slot_capacity(4);
  status.set_imbalance(1.25);
  status.add_destinations("vllm-\"0\"");
  status.add_expected_loads(2.5);
  v1::GatewayStatus* gw = status.add_gateways();
  gw->set_gateway_id("gw-1");
  gw->set_subscribed(true);
  gw->mutable_acked_version()->set_number(11);
  v1::GateStatus* gate = status.mutable_gate();
  gate->set_state("canary");
  gate->set_table_fraction(0.25);
  gate->set_table_quantile_seconds(1.5);
  gate->set_control_failure_rate(0.125);
  PlannerCore::Counters counters;
  counters.plans = 5;
  counters.reports_accepted = 9;
  counters.reports_rejected["count"] = 2;

  const std::string text = RenderMetrics(status, counters, absl::FromUnixMillis(1'800'000'004'500));
  for (const std::string line : {
           "# TYPE cacheroute_planner_table_version gauge",
           "cacheroute_planner_table_version{epoch=\"1800000000\"} 12",
           "cacheroute_planner_table_age_seconds 4.5",
           "cacheroute_planner_plan_build_seconds 0.002",
           "cacheroute_planner_plan_admitted_keys 3",
           "cacheroute_planner_plan_imbalance_ratio 1.25",
           "cacheroute_planner_destination_expected_load{destination=\"vllm-\\\"0\\\"\"} 2.5",
           "# TYPE cacheroute_planner_plans_total counter",
           "cacheroute_planner_plans_total 5",
           "cacheroute_planner_reports_accepted_total 9",
           "cacheroute_planner_reports_rejected_total{reason=\"count\"} 2",
           "cacheroute_planner_subscribers 1",
           "cacheroute_planner_gateway_acked_version{gateway=\"gw-1\"} 11",
           "cacheroute_planner_gate_state{state=\"canary\"} 1",
           "cacheroute_planner_gate_state{state=\"enabled\"} 0",
           "cacheroute_planner_gate_table_fraction_ratio 0.25",
           "cacheroute_planner_gate_forced 0",
           "cacheroute_planner_gate_arm_ttft_quantile_seconds{arm=\"table\"} 1.5",
           "cacheroute_planner_gate_arm_failure_ratio{arm=\"control\"} 0.125",
       }) {
    INFO(line);
    CHECK(text.find(line + "\n") != std::string::npos);
  }
  // Replica gauges only with etcd (GetStatusResponse.ha).
  CHECK(text.find("cacheroute_planner_leader") == std::string::npos);
  status.mutable_ha()->set_role("leader");
  const std::string replica =
      RenderMetrics(status, counters, absl::FromUnixMillis(1'800'000'004'500));
  CHECK(replica.find("cacheroute_planner_leader 1\n") != std::string::npos);
  CHECK(replica.find("cacheroute_planner_ready 1\n") != std::string::npos);
  status.mutable_ha()->set_role("follower");
  status.mutable_ha()->set_ready_reason("no table yet");
  const std::string follower =
      RenderMetrics(status, counters, absl::FromUnixMillis(1'800'000'004'500));
  CHECK(follower.find("cacheroute_planner_leader 0\n") != std::string::npos);
  CHECK(follower.find("cacheroute_planner_ready 0\n") != std::string::npos);
  status.clear_ha();
  // Fleet sharing's families only with the share service's counters.
  CHECK(text.find("share_") == std::string::npos);
  const planner::ShareExchangeStats share{.batches_published = 7,
                                          .placements_published = 40,
                                          .bytes_published = 900,
                                          .batches_delivered = 14,
                                          .bytes_delivered = 1800,
                                          .batches_dropped = 2,
                                          .subscribers = 3};
  const std::string shared =
      RenderMetrics(status, counters, absl::FromUnixMillis(1'800'000'004'500), &share);
  for (const char* line : {"cacheroute_planner_share_batches_published_total 7",
                           "cacheroute_planner_share_placements_published_total 40",
                           "cacheroute_planner_share_bytes_published_total 900",
                           "cacheroute_planner_share_batches_delivered_total 14",
                           "cacheroute_planner_share_bytes_delivered_total 1800",
                           "cacheroute_planner_share_batches_dropped_total 2",
                           "cacheroute_planner_share_subscribers 3"}) {
    INFO(line);
    CHECK(shared.find(std::string(line) + "\n") != std::string::npos);
  }
  // Without a gate, no gate families.
  status.clear_gate();
  CHECK(RenderMetrics(status, counters, absl::FromUnixMillis(1'800'000'004'500)).find("gate_") ==
        std::string::npos);
  // Every sample line belongs to a family declared before it.
  std::string family;
  size_t start = 0;
  while (start < text.size()) {
    const size_t end = text.find('\n', start);
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    if (line.rfind("# TYPE ", 0) == 0) {
      family = line.substr(7, line.find(' ', 7) - 7);
    } else if (line[0] != '#') {
      INFO(line);
      CHECK(line.rfind(family, 0) == 0);
    }
  }
  // Prometheus' own linter: names, units (ratios end in _ratio), types, HELP.
  if (system("command -v promtool > /dev/null 2>&1") != 0) {
    WARN("promtool is not on PATH (Debian package prometheus): skipping its check");
    return;
  }
  status.mutable_ha()->set_role("leader");
  status.mutable_gate()->set_state("canary");
  const testing::CommandResult promtool =
      testing::RunCommand("promtool", {"check", "metrics"},
                          RenderMetrics(status, counters, absl::FromUnixMillis(1'800'000'004'500)));
  INFO(promtool.out << promtool.err);
  CHECK(promtool.exit_code == 0);
  CHECK(promtool.out + promtool.err == "");
}

}  // namespace
}  // namespace cacheroute::service
