// The routing policy of a front end, by its configuration name (`policy`): a name or alias of the
// dataplane's policy registry (cacheroute/dataplane/policy_registry.h, BuiltinPolicies). Policy
// creation for every front end lives here, on top of the registry.
//
//   cacheroute, cacheroute-paper  table policies: Router::Pick against the planner's table (no
//                                 Policy object), the Router built with the entry's dispatch
//   flat-lb, sticky, chwbl, dualmap, preble, dynamo-kv, llm-d
//                                 a Policy object, routed by its Route (the key, the prompt's
//                                 tokens and block hashes) and counted through Router::Track
//
// What a policy needs of its front end is on its registry entry (PolicyInfo): uses_table,
// dispatch, rebuild_when_count_changes (its Policy is made again when the member count changes),
// reads_active_tokens (the Router keeps active tokens in its ledger: RoutingCoreOptions).
//
// Usage:
//   RoutingCoreOptions o{.dispatch = dataplane::DispatchFor(config.policy), …};
//   std::unique_ptr<dataplane::Policy> p = MakePolicy(config.policy, members, random, clock);
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/policies.h"
#include "cacheroute/dataplane/policy_registry.h"
#include "cacheroute/dataplane/random.h"

namespace cacheroute::frontend {

// The Policy for `n` members; null for the table policies (Router::Pick) and for a name the
// registry does not know (ValidateFrontendConfig refuses those). `random` and `clock` (the time of
// the policies whose prefix index expires) must outlive it.
std::unique_ptr<dataplane::Policy> MakePolicy(const std::string& policy, uint32_t n,
                                              dataplane::Random& random,
                                              const dataplane::Clock& clock);

}  // namespace cacheroute::frontend
