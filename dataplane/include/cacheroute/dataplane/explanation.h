// Explanation: why a Router's rule would send a request where it would (Router::Explain), for an
// operator's debug endpoint: the decision, every candidate the rule looked at in the order it did
// (why it was one, whether it was up), and for each the figures it compared: under the token-work
// rule the expected cached tokens with where that expectation came from and each cost term in
// prefill tokens; under the paper's rule the load. `chosen` and `runner_up` index the candidates.
// A plain struct: the caller renders it (JSON, text); nothing here allocates on the request path.
//
// The rules fill it through a trace (ExplainTrace) from the same code that decides a Pick, which
// passes NoTrace instead: with it every trace call compiles away, so a Pick keeps nothing.
//
// Invariants: `decision` is what Pick would return on the same state and the same random draws;
// each destination is listed once; for a costed candidate cost == terms.Total(); `chosen` is the
// candidate of decision.destination (-1 when no destination is up), `runner_up` the cheapest other
// up candidate (the first on a tie; -1 when none).
//
// Usage:
//   const Explanation e = router.Explain(request, now);
//   if (const CandidateExplanation* c = e.Chosen()) Print(c->destination, c->terms, c->cost);
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "cacheroute/dataplane/dispatch.h"
#include "cacheroute/dataplane/dispatch_options.h"
#include "cacheroute/dataplane/enum_names.h"
#include "cacheroute/dataplane/token_work_terms.h"

namespace cacheroute::dataplane {

// Why a destination was a candidate (the first reason, when it had several).
enum class CandidateKind : uint8_t {
  kPlanned,     // a member of the key's planned set T(b)
  kRemembered,  // where the key memory says the key last went, while fresh
  kPrefix,      // where the prefix memory says the longest known prefix of the prompt went
  kSpill,       // the key's planned spill destination
  kHashedPair,  // one of the key's two hashed destinations
  kRandom,      // the random up destination of a large fleet
  kEvery,       // every destination of a small fleet (DispatchOptions::all_candidates_up_to)
  kTwoChoices,  // one of power of two choices' random pair (the paper's rule, fallbacks)
};
inline constexpr int kCandidateKindCount = 8;

inline constexpr EnumName<CandidateKind> kCandidateKindNames[] = {
    {CandidateKind::kPlanned, "planned"},
    {CandidateKind::kRemembered, "remembered"},
    {CandidateKind::kPrefix, "prefix"},
    {CandidateKind::kSpill, "spill"},
    {CandidateKind::kHashedPair, "hashed_pair"},
    {CandidateKind::kRandom, "random"},
    {CandidateKind::kEvery, "every"},
    {CandidateKind::kTwoChoices, "two_choices"},
};
static_assert(IsEnumTable(kCandidateKindNames, kCandidateKindCount));

inline std::string_view CandidateKindName(CandidateKind k) {
  return NameOf(kCandidateKindNames, k);
}

inline constexpr EnumName<CacheExpectation> kCacheExpectationNames[] = {
    {CacheExpectation::kTemplate, "template"},
    {CacheExpectation::kKey, "key"},
    {CacheExpectation::kPrefix, "prefix"},
};
static_assert(IsEnumTable(kCacheExpectationNames, 3));

inline std::string_view CacheExpectationName(CacheExpectation e) {
  return NameOf(kCacheExpectationNames, e);
}

struct CandidateExplanation {
  uint32_t destination = kNoDestination;
  CandidateKind kind = CandidateKind::kPlanned;
  bool up = false;  // within the fleet and up: only such a candidate is compared
  // What the rule minimises: prefill tokens (the token-work rule, terms.Total()) or the load
  // (the paper's rule and power of two choices: in-flight requests + the weighted external load).
  double cost = 0;
  // The token-work rule: the tokens expected cached there, where that expectation came from, and
  // the cost term by term.
  double expected_cached_tokens = 0;
  CacheExpectation expected = CacheExpectation::kTemplate;
  CostTerms terms{};
};

// What one token-work decision's terms share (token_work_terms.h).
struct TokenWorkInputs {
  double prompt_tokens = 0;              // p (the mean prompt for a request of unknown length)
  double template_tokens = 0;            // expected cached everywhere
  double key_cached_tokens = 0;          // expected cached where the key is warm
  double warm_yield = 1;                 // the key memory's measured yield
  uint32_t remembered = kNoDestination;  // where the key last went, while fresh
  uint32_t prefix_destination = kNoDestination;
  double prefix_cached_tokens = 0;  // expected cached there by the prefix memory
  double fleet_prefilling = 0;      // requests waiting for a first token, fleet-wide
  CostFactors factors{};
};

struct Explanation {
  DispatchRule rule = DispatchRule::kTokenWork;
  Decision decision{};
  std::vector<CandidateExplanation> candidates;  // in the order the rule looked at them
  int chosen = -1;
  int runner_up = -1;
  TokenWorkInputs token_work{};  // the token-work rule only

  const CandidateExplanation* Chosen() const { return At(chosen); }
  const CandidateExplanation* RunnerUp() const { return At(runner_up); }

 private:
  const CandidateExplanation* At(int i) const { return i < 0 ? nullptr : &candidates[i]; }
};

// The trace a Pick passes: nothing is kept.
struct NoTrace {
  static constexpr bool kOn = false;
};

// The trace Router::Explain passes: fills `out` as the rule goes.
class ExplainTrace {
 public:
  static constexpr bool kOn = true;
  explicit ExplainTrace(Explanation& out) : out_(out) {}

  bool Listed(uint32_t d) const {
    for (const CandidateExplanation& c : out_.candidates) {
      if (c.destination == d) return true;
    }
    return false;
  }
  // A candidate compared by its load.
  void Loaded(CandidateKind kind, uint32_t d, bool up, double load) {
    if (Listed(d)) return;
    out_.candidates.push_back({.destination = d, .kind = kind, .up = up, .cost = up ? load : 0});
  }
  // A candidate of the token-work rule; a candidate not up has no cost.
  void Costed(CandidateKind kind, uint32_t d, bool up, const CacheEstimate& cached,
              const CostTerms& terms) {
    if (Listed(d)) return;
    out_.candidates.push_back({.destination = d,
                               .kind = kind,
                               .up = up,
                               .cost = up ? terms.Total() : 0,
                               .expected_cached_tokens = cached.tokens,
                               .expected = cached.source,
                               .terms = terms});
  }
  void Inputs(const TokenWorkInputs& inputs) { out_.token_work = inputs; }

  // The decision made: marks the chosen candidate and the runner-up.
  void Finish(const Decision& decision) {
    out_.decision = decision;
    const std::vector<CandidateExplanation>& c = out_.candidates;
    for (size_t i = 0; i < c.size(); ++i) {
      if (c[i].up && c[i].destination == decision.destination) out_.chosen = static_cast<int>(i);
    }
    for (size_t i = 0; i < c.size(); ++i) {
      if (!c[i].up || static_cast<int>(i) == out_.chosen) continue;
      if (out_.runner_up < 0 || c[i].cost < c[out_.runner_up].cost) {
        out_.runner_up = static_cast<int>(i);
      }
    }
  }

 private:
  Explanation& out_;
};

}  // namespace cacheroute::dataplane
