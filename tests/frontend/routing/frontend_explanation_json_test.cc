// ExplanationJson: a Router's Explanation as the debug endpoints answer it: the decision and every
// candidate by member name, each cost term, the cost their sum, and the chosen and runner-up
// candidates the explanation names; the paper's rule with loads and no terms.
#include <catch2/catch.hpp>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/key_id.h"
#include "cacheroute/dataplane/random.h"
#include "cacheroute/dataplane/router.h"
#include "cacheroute/dataplane/routing_table.h"
#include "tools/frontend/routing/explanation_json.h"

namespace cacheroute::frontend {
namespace {

const std::vector<std::string> kNames = {"e0", "e1", "e2", "e3"};

// A Router over four destinations with `key` planned on destination 2, and one request in flight
// on destination 2 so that the costs differ.
struct Fixture {
  explicit Fixture(dataplane::DispatchOptions dispatch)
      : router({.destination_count = 4, .dispatch = dispatch}, random) {
    const std::vector<dataplane::TableEntry> entries = {
        {.key_id = dataplane::KeyId("k"), .destinations = {2}}};
    auto table = dataplane::RoutingTable::Build({1, 1}, 4, {1, 1, 1, 1}, entries);
    REQUIRE(table.ok());
    REQUIRE(router
                .Install(std::make_shared<const dataplane::RoutingTable>(*std::move(table)),
                         clock.Now())
                .ok);
    busy = router.Pick({.key_id = dataplane::KeyId("other"), .prompt_tokens = 800}, clock.Now());
  }
  dataplane::ManualClock clock;
  dataplane::SeededRandom random{5};
  dataplane::Router router;
  dataplane::InFlight busy;
};

TEST_CASE("the token-work rule: decision, terms by name summing to the cost, chosen, runner-up") {
  Fixture f({});
  const dataplane::Explanation e =
      f.router.Explain({.key_id = dataplane::KeyId("k"), .prompt_tokens = 1000}, f.clock.Now());
  const nlohmann::json j = nlohmann::json::parse(ExplanationJson(
      {.policy = "cacheroute", .key_id = dataplane::KeyId("k"), .prompt_tokens = 1000}, e, kNames));
  CHECK(j["policy"] == "cacheroute");
  CHECK(j["rule"] == "token_work");
  CHECK(j["key_id"] == std::to_string(dataplane::KeyId("k")));
  CHECK(j["prompt_tokens"] == 1000);
  REQUIRE(e.Chosen() != nullptr);
  CHECK(j["decision"]["index"] == e.decision.destination);
  CHECK(j["decision"]["destination"] == kNames[e.decision.destination]);
  CHECK(j["decision"]["reason"] == std::string(dataplane::ReasonName(e.decision.reason)));
  CHECK(j["chosen"]["destination"] == j["decision"]["destination"]);
  CHECK(j["inputs"]["prompt_tokens"] == 1000.0);
  REQUIRE(j["candidates"].size() == e.candidates.size());
  REQUIRE(j["candidates"].size() >= 2);  // a small fleet: every destination is a candidate
  for (const nlohmann::json& c : j["candidates"]) {
    INFO(c.dump());
    if (!c["up"].get<bool>()) continue;
    double sum = 0;
    for (const char* term : {"queued_work", "queue_wait", "uncached_prefill", "memory_short"}) {
      REQUIRE(c["terms"].contains(term));
      sum += c["terms"][term].get<double>();
    }
    CHECK(c["cost"].get<double>() == Approx(sum));
  }
  REQUIRE(e.RunnerUp() != nullptr);
  CHECK(j["runner_up"]["index"] == e.RunnerUp()->destination);
  CHECK(j["runner_up"]["cost"].get<double>() >= j["chosen"]["cost"].get<double>());
}

TEST_CASE("the paper's rule: the loads compared, no terms; a destination without a name") {
  Fixture f(dataplane::DispatchOptions::Paper());
  const dataplane::Explanation e =
      f.router.Explain({.key_id = dataplane::KeyId("k")}, f.clock.Now());
  const std::vector<std::string> two = {"e0", "e1"};  // names for only the first two indices
  const nlohmann::json j =
      nlohmann::json::parse(ExplanationJson({.policy = "cacheroute-paper"}, e, two));
  CHECK(j["rule"] == "paper");
  CHECK(j["keyed"] == false);
  CHECK(j["key_id"].is_null());
  CHECK(!j.contains("inputs"));
  CHECK(j["decision"]["index"] == 2);
  CHECK(j["decision"]["destination"] == "2");  // unnamed index: its number
  CHECK(j["decision"]["planned"] == true);
  for (const nlohmann::json& c : j["candidates"]) CHECK(!c.contains("terms"));
}

}  // namespace
}  // namespace cacheroute::frontend
