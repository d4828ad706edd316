// PolicyRegistry: routing policies by name. Gateways, the replay tool and the fleet simulator
// create every policy through it, so a name means one policy everywhere and a new policy is added
// by one Register call (in BuiltinPolicies() for a shipped one).
//
// Each entry has one canonical name (the policy's own name() spelling), a one-line description
// for --help, whether it routes by the planner's table, its traits (rebuilt when the member count
// changes; reads the ledger's active tokens; reads the engines' KV events; reads scraped metrics),
// and a factory. A factory takes a PolicyContext: the destination count, the caller's Random, the
// Router (and its Clock) for the table policies, and the baselines' parameters. A table policy's
// Router must be built with the entry's `dispatch` (DispatchFor gives it); a caller that counts
// in-flight requests itself (the gateway) may call Router::Pick instead of the Policy.
//
// Contract: names and aliases are unique across the registry; Find resolves both; Create returns
// an error naming the value for an unknown name and naming the missing context field for a
// context the factory cannot use. Registries are filled at start-up and then only read: reads are
// thread-safe, Register is not.
//
// Usage:
//   const PolicyRegistry& policies = BuiltinPolicies();
//   Result<std::unique_ptr<Policy>> policy =
//       policies.Create("chwbl", {.destinations = 30, .random = &random});
//   if (!policy.ok()) return Fail("policy: " + policy.status().message);   // names the value
//   std::cout << policies.Listing();   // "  flat-lb  power of two choices …" per policy
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/dispatch.h"
#include "cacheroute/dataplane/kv_event_index.h"
#include "cacheroute/dataplane/policies.h"
#include "cacheroute/dataplane/policies_precise.h"
#include "cacheroute/dataplane/random.h"
#include "cacheroute/dataplane/router.h"
#include "cacheroute/dataplane/status.h"

namespace cacheroute::dataplane {

// The baselines' parameters; the defaults are the published ones (the CacheRoute paper, §4
// "Policies").
struct PolicyParameters {
  double chwbl_epsilon = 0.25;          // CHWBL's load bound (1 + ε) × mean; finite, ≥ 0
  double dualmap_queue_bound = 4.0;     // DualMap leaves its warm candidate above this load
  double preble_overload_factor = 1.5;  // Preble re-routes above this × the mean load; > 0
  DynamoKvOptions dynamo{};             // the Dynamo-style KV router's published defaults
  LlmdOptions llmd{};                   // the llm-d-style scorer's published defaults
};

// What factories may use. Pointers are not owned and must outlive the policy; a factory that
// needs one that is null fails.
struct PolicyContext {
  uint32_t destinations = 0;     // R, for the policies that hash over a fixed count (0: none)
  Random* random = nullptr;      // for the randomised policies
  Router* router = nullptr;      // the table policies: built with PolicyInfo::dispatch
  const Clock* clock = nullptr;  // the table policies: the Router's time
  // The precise policies (PolicyInfo::reads_kv_events): the index the caller feeds with every
  // destination's KV events, sized by their KV blocks (kv_event_index.h).
  KvEventIndex* kv_events = nullptr;
  PolicyParameters parameters{};
  // dynamo-kv and dynamo-kv-exact: the blocks in flight, shared by several replicas' policies
  // (Dynamo's router_replica_sync); null: each policy its own.
  std::shared_ptr<DynamoActiveBlocks> dynamo_active;
};

using PolicyFactory = std::function<Result<std::unique_ptr<Policy>>(const PolicyContext&)>;

struct PolicyInfo {
  std::string name;         // canonical; the policy's name() where it has its own
  std::string description;  // one line, for --help
  // Routes by the planner's table through context.router, which must use `dispatch`.
  bool uses_table = false;
  // Traits: what a caller that builds the policy must do around it.
  // Built for a fixed destination count (a hash ring over [0, n), or a prefix index sized by n):
  // rebuild it when the member count changes, where the others keep their memory.
  bool rebuild_when_count_changes = false;
  // Reads DestinationWork::active_tokens: the Router whose loads() it routes over must keep them
  // (RouterOptions::active_tokens).
  bool reads_active_tokens = false;
  // Reads the engines' KV events: the caller must give context.kv_events and feed it every
  // destination's events (KvEventIndex::Apply).
  bool reads_kv_events = false;
  // Reads the engines' scraped metrics (LoadView::Scraped: waiting, KV usage and capacity): a
  // gateway must scrape them, or the policy sees every engine idle and empty.
  bool reads_scraped_metrics = false;
  DispatchOptions dispatch{};
  PolicyFactory make{};
};

class PolicyRegistry {
 public:
  // Errors (nothing registered): an empty name or description, no factory, or a name taken by
  // another entry or alias.
  Status Register(PolicyInfo info) {
    if (info.name.empty()) return Status::Error("policy registration: empty name");
    if (info.description.empty()) {
      return Status::Error("policy registration \"" + info.name + "\": empty description");
    }
    if (!info.make) return Status::Error("policy registration \"" + info.name + "\": no factory");
    if (Taken(info.name)) {
      return Status::Error("policy registration: \"" + info.name + "\" is already registered");
    }
    entries_.push_back(std::move(info));
    return Status::Ok();
  }

  // Another spelling of a registered name, accepted by Find and Create and shown in Listing.
  Status AddAlias(std::string alias, std::string_view name) {
    if (alias.empty()) return Status::Error("policy alias: empty");
    if (Taken(alias)) return Status::Error("policy alias \"" + alias + "\" is already registered");
    const PolicyInfo* target = Find(name);
    if (target == nullptr) {
      return Status::Error("policy alias \"" + alias + "\": unknown policy \"" + std::string(name) +
                           "\"");
    }
    aliases_.push_back({std::move(alias), target->name});
    return Status::Ok();
  }

  // The entry for a name or alias; null when unknown.
  const PolicyInfo* Find(std::string_view name) const {
    for (const Alias& a : aliases_) {
      if (a.alias == name) {
        name = a.name;
        break;
      }
    }
    for (const PolicyInfo& info : entries_) {
      if (info.name == name) return &info;
    }
    return nullptr;
  }

  // The canonical name for a name or alias; "" when unknown.
  std::string_view Canonical(std::string_view name) const {
    const PolicyInfo* info = Find(name);
    return info == nullptr ? std::string_view() : std::string_view(info->name);
  }

  // "unknown policy \"x\" (one of flat-lb, …; alias flatlb for flat-lb)" for an unknown name.
  Result<std::unique_ptr<Policy>> Create(std::string_view name,
                                         const PolicyContext& context) const {
    const PolicyInfo* info = Find(name);
    if (info == nullptr) return Check(name);
    return info->make(context);
  }

  // The error Create gives for `name` when it is unknown, OK otherwise (for config validation).
  Status Check(std::string_view name) const {
    if (Find(name) != nullptr) return Status::Ok();
    return Status::Error("unknown policy \"" + std::string(name) + "\" (one of " + Known() + ")");
  }

  const std::vector<PolicyInfo>& entries() const { return entries_; }

  // Canonical names in registration order.
  std::vector<std::string> Names() const {
    std::vector<std::string> names;
    for (const PolicyInfo& info : entries_) names.push_back(info.name);
    return names;
  }

  // "flat-lb, sticky, …; alias flatlb for flat-lb": what an error or a flag's help lists.
  std::string Known() const {
    std::string out;
    for (const PolicyInfo& info : entries_) {
      if (!out.empty()) out += ", ";
      out += info.name;
    }
    for (size_t i = 0; i < aliases_.size(); ++i) {
      out += i == 0 ? "; alias " : ", ";
      out += aliases_[i].alias + " for " + aliases_[i].name;
    }
    return out;
  }

  // One line per policy, "  <name padded>  <description>", then one per alias; for --help.
  std::string Listing() const {
    size_t width = 0;
    for (const PolicyInfo& info : entries_) width = std::max(width, info.name.size());
    for (const Alias& a : aliases_) width = std::max(width, a.alias.size());
    std::string out;
    auto line = [&](const std::string& name, const std::string& text) {
      out += "  " + name + std::string(width - name.size() + 2, ' ') + text + "\n";
    };
    for (const PolicyInfo& info : entries_) line(info.name, info.description);
    for (const Alias& a : aliases_) line(a.alias, "the same as " + a.name);
    return out;
  }

 private:
  struct Alias {
    std::string alias;
    std::string name;
  };

  bool Taken(std::string_view name) const {
    for (const PolicyInfo& info : entries_) {
      if (info.name == name) return true;
    }
    for (const Alias& a : aliases_) {
      if (a.alias == name) return true;
    }
    return false;
  }

  std::vector<PolicyInfo> entries_;
  std::vector<Alias> aliases_;
};

namespace policy_registry_internal {

inline Status Missing(const char* policy, const char* field) {
  return Status::Error(std::string("policy ") + policy + " needs context." + field);
}

inline Status Parameter(const char* field, double value, const char* requirement) {
  return Status::Error(std::string("policy parameter ") + field + " must be " + requirement +
                       ", got " + std::to_string(value));
}

// The table policies: CacheRoutePolicy over the caller's Router, which must use `dispatch`.
inline PolicyInfo TablePolicy(std::string name, std::string description, DispatchOptions dispatch) {
  return {.name = std::move(name),
          .description = std::move(description),
          .uses_table = true,
          .dispatch = dispatch,
          .make = [](const PolicyContext& c) -> Result<std::unique_ptr<Policy>> {
            if (c.router == nullptr) return Missing("cacheroute", "router");
            if (c.clock == nullptr) return Missing("cacheroute", "clock");
            return std::unique_ptr<Policy>(std::make_unique<CacheRoutePolicy>(*c.router, *c.clock));
          }};
}

inline PolicyRegistry MakeBuiltinPolicies() {
  using Made = Result<std::unique_ptr<Policy>>;
  PolicyRegistry r;
  auto must = [](const Status& s) {
    if (!s.ok) std::abort();  // the built-in list is fixed: a clash is a programming error
  };
  must(r.Register({.name = "flat-lb",
                   .description = "power of two choices over all destinations; no affinity",
                   .make = [](const PolicyContext& c) -> Made {
                     if (c.random == nullptr) return Missing("flat-lb", "random");
                     return std::unique_ptr<Policy>(std::make_unique<FlatLbPolicy>(*c.random));
                   }}));
  must(r.Register({.name = "sticky",
                   .description = "consistent hashing on the key, blind to load (pure affinity)",
                   .rebuild_when_count_changes = true,
                   .make = [](const PolicyContext& c) -> Made {
                     return std::unique_ptr<Policy>(std::make_unique<StickyPolicy>(c.destinations));
                   }}));
  must(r.Register({.name = "chwbl",
                   .description = "consistent hashing with bounded loads, (1 + epsilon) x the mean",
                   .rebuild_when_count_changes = true,
                   .make = [](const PolicyContext& c) -> Made {
                     if (c.random == nullptr) return Missing("chwbl", "random");
                     const double epsilon = c.parameters.chwbl_epsilon;
                     if (!(epsilon >= 0) || std::isinf(epsilon)) {
                       return Parameter("chwbl_epsilon", epsilon, "finite and >= 0");
                     }
                     return std::unique_ptr<Policy>(
                         std::make_unique<ChwblPolicy>(c.destinations, *c.random, epsilon));
                   }}));
  must(r.Register({.name = "dualmap",
                   .description = "two hashed candidates, the warm one unless its queue is long",
                   .rebuild_when_count_changes = true,
                   .make = [](const PolicyContext& c) -> Made {
                     if (c.random == nullptr) return Missing("dualmap", "random");
                     const double bound = c.parameters.dualmap_queue_bound;
                     if (!(bound >= 0) || std::isinf(bound)) {
                       return Parameter("dualmap_queue_bound", bound, "finite and >= 0");
                     }
                     return std::unique_ptr<Policy>(
                         std::make_unique<DualMapPolicy>(c.destinations, *c.random, bound));
                   }}));
  must(r.Register(
      {.name = "preble",
       .description = "the key's last destination unless overloaded, else the least loaded",
       .make = [](const PolicyContext& c) -> Made {
         if (c.random == nullptr) return Missing("preble", "random");
         const double factor = c.parameters.preble_overload_factor;
         if (!(factor > 0) || std::isinf(factor)) {
           return Parameter("preble_overload_factor", factor, "finite and > 0");
         }
         return std::unique_ptr<Policy>(std::make_unique<PreblePolicy>(*c.random, factor));
       }}));
  must(r.Register({.name = "dynamo-kv",
                   .description = "NVIDIA Dynamo's KV router, approximate mode: least prefill + "
                                  "distinct active blocks, its own sends as the overlap",
                   .rebuild_when_count_changes = true,
                   .make = [](const PolicyContext& c) -> Made {
                     if (c.random == nullptr) return Missing("dynamo-kv", "random");
                     if (c.clock == nullptr) return Missing("dynamo-kv", "clock");
                     const DynamoKvOptions& o = c.parameters.dynamo;
                     if (!(o.overlap_score_weight >= 0) || std::isinf(o.overlap_score_weight)) {
                       return Parameter("dynamo overlap_score_weight", o.overlap_score_weight,
                                        "finite and >= 0");
                     }
                     if (!(o.temperature >= 0) || std::isinf(o.temperature)) {
                       return Parameter("dynamo temperature", o.temperature, "finite and >= 0");
                     }
                     return std::unique_ptr<Policy>(std::make_unique<DynamoKvPolicy>(
                         c.destinations, *c.random, *c.clock, o, nullptr, c.dynamo_active));
                   }}));
  must(r.Register({.name = "llm-d",
                   .description = "llm-d's default scorers: prefix 3, queue 2, KV utilisation 2",
                   .rebuild_when_count_changes = true,
                   .reads_scraped_metrics = true,
                   .make = [](const PolicyContext& c) -> Made {
                     if (c.random == nullptr) return Missing("llm-d", "random");
                     if (c.clock == nullptr) return Missing("llm-d", "clock");
                     return std::unique_ptr<Policy>(std::make_unique<LlmdPolicy>(
                         c.destinations, *c.random, *c.clock, c.parameters.llmd));
                   }}));
  must(r.Register(TablePolicy("cacheroute",
                              "the planner's table with CacheRoute's dispatch (one cost per "
                              "candidate in prefill tokens, per-key and prefix memory)",
                              DispatchOptions{})));
  must(r.Register(TablePolicy("cacheroute-paper",
                              "the planner's table with the paper's dispatch (least-loaded "
                              "member, power of two choices for the rest)",
                              DispatchOptions::Paper())));
  // The multi-replica modes of the routers teams run (policies_precise.h).
  must(r.Register({.name = "prefix-hash",
                   .description = "consistent hashing with bounded loads on the prompt's first "
                                  "256 tokens (SGLang's prefix_hash, KubeAI's PrefixHash)",
                   .rebuild_when_count_changes = true,
                   .make = [](const PolicyContext& c) -> Made {
                     if (c.random == nullptr) return Missing("prefix-hash", "random");
                     return std::unique_ptr<Policy>(
                         std::make_unique<PrefixHashPolicy>(c.destinations, *c.random));
                   }}));
  must(r.Register({.name = "llm-d-precise",
                   .description = "llm-d's precise prefix-cache scorer: the llm-d profile with the "
                                  "prefix from the engines' KV events",
                   .rebuild_when_count_changes = true,
                   .reads_kv_events = true,
                   .reads_scraped_metrics = true,
                   .make = [](const PolicyContext& c) -> Made {
                     if (c.random == nullptr) return Missing("llm-d-precise", "random");
                     if (c.clock == nullptr) return Missing("llm-d-precise", "clock");
                     if (c.kv_events == nullptr) return Missing("llm-d-precise", "kv_events");
                     return std::unique_ptr<Policy>(std::make_unique<LlmdPrecisePolicy>(
                         c.destinations, *c.random, *c.clock, *c.kv_events, c.parameters.llmd));
                   }}));
  must(r.Register({.name = "dynamo-kv-exact",
                   .description = "NVIDIA Dynamo's KV router, exact mode: dynamo-kv's cost with "
                                  "the overlap from the engines' KV events",
                   .rebuild_when_count_changes = true,
                   .reads_kv_events = true,
                   .make = [](const PolicyContext& c) -> Made {
                     if (c.random == nullptr) return Missing("dynamo-kv-exact", "random");
                     if (c.clock == nullptr) return Missing("dynamo-kv-exact", "clock");
                     if (c.kv_events == nullptr) return Missing("dynamo-kv-exact", "kv_events");
                     return std::unique_ptr<Policy>(std::make_unique<DynamoKvPolicy>(
                         c.destinations, *c.random, *c.clock, c.parameters.dynamo, c.kv_events,
                         c.dynamo_active));
                   }}));
  // Accepted for flat-lb: the spelling existing gateway configs and replay command lines use.
  must(r.AddAlias("flatlb", "flat-lb"));
  return r;
}

}  // namespace policy_registry_internal

// The shipped policies: flat-lb, sticky, chwbl, dualmap, preble, dynamo-kv, llm-d, cacheroute,
// cacheroute-paper, prefix-hash, llm-d-precise, dynamo-kv-exact, and the alias flatlb for flat-lb.
inline const PolicyRegistry& BuiltinPolicies() {
  static const PolicyRegistry registry = policy_registry_internal::MakeBuiltinPolicies();
  return registry;
}

// The Router's dispatch rule for a table policy's name (or alias): PolicyInfo::dispatch, the
// defaults for any other name.
inline DispatchOptions DispatchFor(std::string_view policy,
                                   const PolicyRegistry& registry = BuiltinPolicies()) {
  const PolicyInfo* info = registry.Find(policy);
  return info != nullptr && info->uses_table ? info->dispatch : DispatchOptions{};
}

}  // namespace cacheroute::dataplane
