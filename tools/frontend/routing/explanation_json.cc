// See explanation_json.h.
#include "tools/frontend/routing/explanation_json.h"

#include <nlohmann/json.hpp>
#include <string_view>

namespace cacheroute::frontend {
namespace {

using Json = nlohmann::ordered_json;

std::string Name(uint32_t d, std::span<const std::string> names) {
  if (d < names.size()) return names[d];
  return d == dataplane::kNoDestination ? "" : std::to_string(d);
}

Json Destination(uint32_t d) { return d == dataplane::kNoDestination ? Json(nullptr) : Json(d); }

Json Candidate(const dataplane::CandidateExplanation* c, dataplane::DispatchRule rule,
               std::span<const std::string> names) {
  if (c == nullptr) return nullptr;
  Json out = {{"destination", Name(c->destination, names)},
              {"index", c->destination},
              {"kind", std::string(dataplane::CandidateKindName(c->kind))},
              {"up", c->up},
              {"cost", c->cost}};
  if (rule == dataplane::DispatchRule::kTokenWork) {
    out["expected_cached_tokens"] = c->expected_cached_tokens;
    out["expected"] = std::string(dataplane::CacheExpectationName(c->expected));
    Json terms = Json::object();
    for (int t = 0; t < dataplane::kCostTermCount; ++t) {
      const auto term = static_cast<dataplane::CostTerm>(t);
      terms[std::string(dataplane::CostTermName(term))] = c->terms[term];
    }
    out["terms"] = std::move(terms);
  }
  return out;
}

}  // namespace

std::string ExplanationJson(const ExplainedRequest& request,
                            const dataplane::Explanation& explanation,
                            std::span<const std::string> names) {
  const dataplane::Decision& d = explanation.decision;
  const bool token_work = explanation.rule == dataplane::DispatchRule::kTokenWork;
  Json out = {
      {"policy", request.policy},
      {"rule", token_work ? "token_work" : "paper"},
      {"keyed", request.key_id.has_value()},
      {"key_id", request.key_id.has_value() ? Json(std::to_string(*request.key_id)) : Json()},
      {"prompt_tokens", request.prompt_tokens},
      {"decision",
       {{"destination", Name(d.destination, names)},
        {"index", Destination(d.destination)},
        {"reason", std::string(dataplane::ReasonName(d.reason))},
        {"planned", d.planned},
        {"spilled", d.spilled},
        {"expected_uncached_tokens", d.expected_uncached_tokens},
        {"expected", std::string(dataplane::CacheExpectationName(d.expected))}}}};
  if (token_work) {
    const dataplane::TokenWorkInputs& in = explanation.token_work;
    out["inputs"] = {{"prompt_tokens", in.prompt_tokens},
                     {"template_tokens", in.template_tokens},
                     {"key_cached_tokens", in.key_cached_tokens},
                     {"warm_yield", in.warm_yield},
                     {"remembered", Destination(in.remembered)},
                     {"prefix_destination", Destination(in.prefix_destination)},
                     {"prefix_cached_tokens", in.prefix_cached_tokens},
                     {"fleet_prefilling", in.fleet_prefilling},
                     {"prefill_scale", in.factors.prefill_scale},
                     {"decode_stall", in.factors.decode_stall},
                     {"wait_tokens", in.factors.wait_tokens},
                     {"memory_short", in.factors.memory_short}};
  }
  out["chosen"] = Candidate(explanation.Chosen(), explanation.rule, names);
  out["runner_up"] = Candidate(explanation.RunnerUp(), explanation.rule, names);
  Json candidates = Json::array();
  for (const dataplane::CandidateExplanation& c : explanation.candidates) {
    candidates.push_back(Candidate(&c, explanation.rule, names));
  }
  out["candidates"] = std::move(candidates);
  return out.dump(2) + "\n";
}

}  // namespace cacheroute::frontend
