// See policy_factory.h.
#include "tools/frontend/routing/policy_factory.h"

#include <utility>

#include "cacheroute/dataplane/policy_registry.h"

namespace cacheroute::frontend {

std::unique_ptr<dataplane::Policy> MakePolicy(const std::string& policy, uint32_t n,
                                              dataplane::Random& random,
                                              const dataplane::Clock& clock) {
  const dataplane::PolicyInfo* info = dataplane::BuiltinPolicies().Find(policy);
  if (info == nullptr || info->uses_table) return nullptr;  // cacheroute*: Router::Pick
  dataplane::Result<std::unique_ptr<dataplane::Policy>> made =
      info->make({.destinations = n, .random = &random, .clock = &clock});
  return made.ok() ? *std::move(made) : nullptr;
}

}  // namespace cacheroute::frontend
