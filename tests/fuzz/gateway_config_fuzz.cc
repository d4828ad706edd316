// Fuzz target: the gateway's YAML (ParseGatewayConfigYaml, deploy/gateway.yaml's format, then
// ValidateGatewayConfig) and an upstream list file (ParseUpstreamListYaml, membership/sources.h's
// upstreams_file), both fed the same bytes.
// Invariants: no exception leaves them; every error is InvalidArgument with a message; an accepted
// upstream list is non-empty, its names non-empty and distinct, each URL one ParseUpstreamUrl
// takes; parsing over its own result gives the same upstreams and policy.
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <string_view>

#include "absl/strings/string_view.h"
#include "tests/fuzz/fuzz_check.h"
#include "tools/gateway/gateway_config.h"

namespace {

void CheckUpstreams(const std::vector<cacheroute::frontend::Upstream>& upstreams) {
  std::set<std::string> names;
  for (const cacheroute::frontend::Upstream& u : upstreams) {
    FUZZ_CHECK(!u.name.empty());
    FUZZ_CHECK(names.insert(u.name).second, "a repeated upstream name was accepted");
    absl::StatusOr<cacheroute::frontend::UpstreamAddress> address =
        cacheroute::frontend::ParseUpstreamUrl(u.name, u.url);
    FUZZ_CHECK(address.ok(), address.status().ToString());
    FUZZ_CHECK(address->port >= 1 && address->port <= 65535);
    FUZZ_CHECK(!address->host.empty());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cacheroute::gateway;
  const absl::string_view yaml(reinterpret_cast<const char*>(data), size);

  absl::StatusOr<std::vector<cacheroute::frontend::Upstream>> list =
      cacheroute::frontend::ParseUpstreamListYaml(yaml);
  if (list.ok()) {
    FUZZ_CHECK(!list->empty(), "an empty upstream list was accepted");
    CheckUpstreams(*list);
  } else {
    FUZZ_CHECK_INVALID_ARGUMENT(list.status());
  }

  absl::StatusOr<GatewayConfig> config = ParseGatewayConfigYaml(yaml);
  if (!config.ok()) {
    FUZZ_CHECK_INVALID_ARGUMENT(config.status());
    return 0;
  }
  const absl::Status valid = ValidateGatewayConfig(*config);
  FUZZ_CHECK(valid.ok() || valid.code() == absl::StatusCode::kInvalidArgument, valid.ToString());
  if (valid.ok()) CheckUpstreams(config->upstreams);

  absl::StatusOr<GatewayConfig> again = ParseGatewayConfigYaml(yaml, *config);
  FUZZ_CHECK(again.ok(), again.status().ToString());
  FUZZ_CHECK(again->upstreams.size() == config->upstreams.size());
  for (size_t i = 0; i < config->upstreams.size(); ++i) {
    FUZZ_CHECK(again->upstreams[i].name == config->upstreams[i].name);
    FUZZ_CHECK(again->upstreams[i].url == config->upstreams[i].url);
  }
  FUZZ_CHECK(again->policy == config->policy && again->listen == config->listen &&
             again->key_from == config->key_from && again->planner == config->planner);
  return 0;
}
