// Fuzz target: the planner's YAML configuration (ParsePlannerConfigYaml, deploy/planner.yaml's
// format), then ValidatePlannerConfig on what it accepts.
// Invariants: no yaml-cpp exception leaves the parser; every error is InvalidArgument with a
// message; parsing is pure (the same text over the parsed result parses to the same validity and
// the same fields, since every key present is set again).
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/strings/string_view.h"

#include "planner/service/config.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

bool Same(const cacheroute::service::PlannerConfig& a, const cacheroute::service::PlannerConfig& b) {
  return a.listen == b.listen && a.metrics_listen == b.metrics_listen &&
         a.tls.cert_file == b.tls.cert_file && a.tls.key_file == b.tls.key_file &&
         a.tls.client_ca_file == b.tls.client_ca_file && a.token == b.token &&
         a.token_file == b.token_file && a.token_required_for_reads == b.token_required_for_reads &&
         a.state_dir == b.state_dir && a.destinations == b.destinations &&
         (a.q_cap == b.q_cap || (a.q_cap != a.q_cap && b.q_cap != b.q_cap)) &&
         a.slots_per_destination == b.slots_per_destination &&
         a.algorithm == b.algorithm && a.control_interval == b.control_interval &&
         a.history == b.history && a.rate_smoothing == b.rate_smoothing &&
         a.key_ttl == b.key_ttl && a.max_keys_per_report == b.max_keys_per_report &&
         a.max_message_bytes == b.max_message_bytes && a.log_format == b.log_format;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cacheroute::service;
  const absl::string_view yaml(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<PlannerConfig> config = ParsePlannerConfigYaml(yaml);
  if (!config.ok()) {
    FUZZ_CHECK_INVALID_ARGUMENT(config.status());
    return 0;
  }
  const absl::Status valid = ValidatePlannerConfig(*config);
  if (!valid.ok()) FUZZ_CHECK_INVALID_ARGUMENT(valid);

  absl::StatusOr<PlannerConfig> again = ParsePlannerConfigYaml(yaml, *config);
  FUZZ_CHECK(again.ok(), again.status().ToString());
  FUZZ_CHECK(Same(*config, *again), "parsing over its own result changed a field");
  return 0;
}
