// The token-work rule's arithmetic (token_work_terms.h), term by term on hand-computed figures:
// each cost term, the factors the terms share, the expected-cached estimate (template, key memory,
// prefix memory), the sum's order, and the cold floor every term keeps.
#include <catch2/catch.hpp>
#include <chrono>
#include <cmath>
#include <limits>
#include <random>

#include "cacheroute/dataplane/dispatch.h"
#include "cacheroute/dataplane/key_memory.h"
#include "cacheroute/dataplane/token_work_terms.h"

namespace cacheroute::dataplane {
namespace {

// A destination with 3,000 tokens queued in 2 requests waiting for their first token and 10
// decoding, its KV capacity 20,000 tokens of which 60% held.
CandidateSignals Busy() {
  return {.queued_tokens = 3000,
          .queued_prefill_tokens = 3000,
          .prefilling = 2,
          .decoding = 10,
          .kv_capacity = 20000,
          .kv_usage = 0.6};
}

// β·P̄ = 0.5, γ = 0.02, κ·p̄ = 50, μ = 1.
constexpr CostFactors kFactors{
    .prefill_scale = 1.5, .decode_stall = 0.02, .wait_tokens = 50, .memory_short = 1};

TEST_CASE("queued work: the tokens ahead of the request", "[token_work_terms]") {
  CHECK(QueuedWorkTerm(Busy()) == 3000);
  // A view without the ledger: its load × the mean prompt stands for the queue.
  CHECK(QueuedWorkTerm({.queued_tokens = 2400}) == 2400);
  CHECK(QueuedWorkTerm({}) == 0);
}

TEST_CASE("queue wait: each request waiting for its first token costs κ mean prompts",
          "[token_work_terms]") {
  CHECK(QueueWaitTerm(kFactors, Busy()) == 100);  // 50 · 2
  CHECK(QueueWaitTerm(kFactors, {.queued_tokens = 3000}) == 0);
  CHECK(WaitTokens(0.05, 1000) == Approx(50));
  CHECK(WaitTokens(0.05, 0) == Approx(0.05));  // p̄ is at least one token
  CHECK(RequestTokens(0) == 1);
}

TEST_CASE("uncached prefill: the request's own tokens, dearer for a waiting fleet and decoders",
          "[token_work_terms]") {
  // (1.5 + 0.02 · 10) · 800
  CHECK(UncachedPrefillTerm(kFactors, Busy(), 800) == Approx(1360));
  CHECK(UncachedPrefillTerm({.prefill_scale = 1}, {}, 800) == 800);
  // 1 + β · (fleet prefilling / destinations): 1 + 4 · 6 / 8.
  CHECK(PrefillScale(4, 6, 8) == Approx(4));
  CHECK(PrefillScale(4, 6, 0) == Approx(25));  // no destination: divided by one
  CHECK(PrefillScale(0, 100, 8) == 1);
}

TEST_CASE("memory short: μ per token the KV cache cannot hold behind the queue",
          "[token_work_terms]") {
  // 0.6 · 20,000 + 3,000 queued + 800 uncached = 15,800 fit in 20,000.
  CHECK(MemoryShortTerm(kFactors, Busy(), 800) == 0);
  // + 6,000 uncached: 12,000 + 3,000 + 6,000 − 20,000 = 1,000 short.
  CHECK(MemoryShortTerm(kFactors, Busy(), 6000) == Approx(1000));
  CHECK(MemoryShortTerm({.memory_short = 0.5}, Busy(), 6000) == Approx(500));
  CandidateSignals over = Busy();
  over.kv_usage = 1.7;  // a scraped usage past 1 counts as full
  CHECK(MemoryShortTerm(kFactors, over, 0) == Approx(3000));
  CandidateSignals unknown = Busy();
  unknown.kv_capacity = 0;  // no capacity: no term, however full
  unknown.kv_usage = 1;
  CHECK(MemoryShortTerm(kFactors, unknown, 1e9) == 0);
}

TEST_CASE("CostOf: every term in CostTerm order, Total their sum in that order",
          "[token_work_terms]") {
  const CostTerms terms = CostOf(kFactors, Busy(), 6000);
  CHECK(terms[CostTerm::kQueuedWork] == 3000);
  CHECK(terms[CostTerm::kQueueWait] == 100);
  CHECK(terms[CostTerm::kUncachedPrefill] == Approx(10200));  // 1.7 · 6,000
  CHECK(terms[CostTerm::kMemoryShort] == Approx(1000));
  CHECK(terms.Total() == ((terms[CostTerm::kQueuedWork] + terms[CostTerm::kQueueWait]) +
                          terms[CostTerm::kUncachedPrefill]) +
                             terms[CostTerm::kMemoryShort]);
  CHECK(CostTermName(CostTerm::kQueueWait) == "queue_wait");
  CHECK(CostTermName(CostTerm::kMemoryShort) == "memory_short");
}

TEST_CASE("the expected-cached estimate: template, key memory, prefix memory",
          "[token_work_terms]") {
  CHECK(PromptTokens(1200, 900) == 1200);
  CHECK(PromptTokens(0, 900) == 900);  // unknown length: the mean prompt
  CHECK(PromptTokens(0, 0) == 1);
  CHECK(TemplateTokens(1000, 300) == 300);
  CHECK(TemplateTokens(200, 300) == 200);

  // The key's previous prompt of 800 tokens: beyond the 300 of the template, half of it (yield).
  const KeyRecall recall{.destination = 4, .prompt_tokens = 800};
  CHECK(KeyCachedTokens(1000, 300, 0.5, recall) == Approx(550));
  CHECK(KeyCachedTokens(600, 300, 1.0, recall) == Approx(600));  // at most this prompt
  CHECK(KeyCachedTokens(1000, 300, 1.0, KeyRecall{}) == 300);    // not remembered
  CHECK(PrefixCachedTokens(1000, {.destination = 2, .tokens = 640}) == 640);
  CHECK(PrefixCachedTokens(1000, {.destination = 2, .tokens = 1024}) == 999);  // one to compute

  const CacheEstimate cold = ExpectedCached(300, false, 550, false, 640);
  CHECK(cold.tokens == 300);
  CHECK(cold.source == CacheExpectation::kTemplate);
  const CacheEstimate warm = ExpectedCached(300, true, 550, false, 640);
  CHECK(warm.tokens == 550);
  CHECK(warm.source == CacheExpectation::kKey);
  const CacheEstimate prefix = ExpectedCached(300, true, 550, true, 640);
  CHECK(prefix.tokens == 640);
  CHECK(prefix.source == CacheExpectation::kPrefix);
  // A tie keeps the earlier: the key's promise over an equal prefix, the template over both.
  CHECK(ExpectedCached(300, true, 640, true, 640).source == CacheExpectation::kKey);
  CHECK(ExpectedCached(300, true, 300, true, 300).source == CacheExpectation::kTemplate);
}

TEST_CASE("the factors of a decision, from DispatchOptions and the fleet", "[token_work_terms]") {
  const DispatchOptions options{
      .decode_stall = 0.02, .queue_stall = 4, .queue_wait = 0.05, .memory_short = 1};
  // 6 requests waiting over 8 destinations, a mean prompt of 1,000 tokens.
  const CostFactors f = CostFactorsFor(options, 6, 8, 1000);
  CHECK(f.prefill_scale == Approx(4));
  CHECK(f.decode_stall == 0.02);
  CHECK(f.wait_tokens == Approx(50));
  CHECK(f.memory_short == 1);
  CHECK(KeepsColdFloor(f));
  for (double CostFactors::*weight :
       {&CostFactors::decode_stall, &CostFactors::wait_tokens, &CostFactors::memory_short}) {
    CostFactors negative = f;
    negative.*weight = -0.01;
    CHECK_FALSE(KeepsColdFloor(negative));
  }
}

TEST_CASE("the cold floor: signals ≥ 0 and γ, κ, μ ≥ 0 never cost a cold candidate less",
          "[token_work_terms]") {
  // What the rule's skip relies on (token_work_rule.h): a candidate expecting only the template
  // costs at least prefill_scale · (p − template), exactly, in floating point.
  std::mt19937_64 rng(3);
  auto uniform = [&](double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng);
  };
  for (int trial = 0; trial < 10000; ++trial) {
    const CostFactors f{.prefill_scale = 1 + uniform(0, 40),
                        .decode_stall = uniform(0, 0.1),
                        .wait_tokens = uniform(0, 500),
                        .memory_short = uniform(0, 2)};
    REQUIRE(KeepsColdFloor(f));
    const double queued = std::floor(uniform(0, 1e5));
    const CandidateSignals s{.queued_tokens = queued,
                             .queued_prefill_tokens = queued,
                             .prefilling = std::floor(uniform(0, 30)),
                             .decoding = std::floor(uniform(0, 200)),
                             .kv_capacity = uniform(0, 1) < 0.3 ? 0 : uniform(1e3, 1e6),
                             .kv_usage = uniform(0, 1)};
    const double uncached = std::floor(uniform(1, 50000));
    INFO("trial " << trial);
    CHECK(CostOf(f, s, uncached).Total() >= f.prefill_scale * uncached);
  }
}

}  // namespace
}  // namespace cacheroute::dataplane
