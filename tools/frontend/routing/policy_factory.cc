// See policy_factory.h.
#include "tools/frontend/routing/policy_factory.h"

#include <string_view>
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

bool PolicyPerCount(const std::string& policy) {
  const std::string_view name = dataplane::BuiltinPolicies().Canonical(policy);
  // The prefix indexes of dynamo-kv and llm-d are sized by the count too.
  return name == "sticky" || name == "chwbl" || name == "dualmap" || name == "dynamo-kv" ||
         name == "llm-d";
}

bool RoutesByTable(const std::string& policy) {
  const dataplane::PolicyInfo* info = dataplane::BuiltinPolicies().Find(policy);
  return info != nullptr && info->uses_table;
}

}  // namespace cacheroute::frontend
