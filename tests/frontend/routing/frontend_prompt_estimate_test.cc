// PromptEstimate (tools/frontend/routing/prompt_estimate.h): prompt tokens from the body's size,
// calibrated by the engines' usage.prompt_tokens, within bounds.
#include <catch2/catch.hpp>
#include <cstdint>
#include <limits>

#include "tools/frontend/routing/prompt_estimate.h"

namespace cacheroute::frontend {
namespace {

TEST_CASE("before any answer: the prior bytes per token; token ids count one each") {
  const PromptEstimate estimate;
  CHECK(estimate.bytes_per_token() == PromptEstimate::kPriorBytesPerToken);
  CHECK(estimate.Tokens({.text_bytes = 400}) == 100);
  CHECK(estimate.Tokens({.text_bytes = 401}) == 101);  // rounded up
  CHECK(estimate.Tokens({.token_ids = 37}) == 37);
  CHECK(estimate.Tokens({}) == 0);  // unknown
  CHECK(estimate.Tokens({.text_bytes = uint64_t{1} << 40}) == std::numeric_limits<uint32_t>::max());
}

TEST_CASE("the engines' usage calibrates the ratio") {
  PromptEstimate estimate;
  estimate.Observe({.text_bytes = 600}, 100);  // 6 bytes a token
  CHECK(estimate.bytes_per_token() == Approx(6.0));
  CHECK(estimate.Tokens({.text_bytes = 1200}) == 200);
  // A window of answers: the ratio of its sums moves toward the new answers.
  for (int i = 0; i < 2000; ++i) estimate.Observe({.text_bytes = 300}, 100);
  CHECK(estimate.bytes_per_token() == Approx(3.0).epsilon(0.01));
  CHECK(estimate.Tokens({.text_bytes = 3000}) == Approx(1000).epsilon(0.01));
}

TEST_CASE("answers that say nothing of text are not samples; the ratio is bounded") {
  PromptEstimate estimate;
  estimate.Observe({.token_ids = 50}, 50);   // ids only
  estimate.Observe({.text_bytes = 100}, 0);  // no tokens
  estimate.Observe({}, 100);                 // no body seen
  CHECK(estimate.bytes_per_token() == PromptEstimate::kPriorBytesPerToken);
  estimate.Observe({.text_bytes = 1}, 1000);  // a stub prompt the engine was told is long
  CHECK(estimate.bytes_per_token() == PromptEstimate::kMinBytesPerToken);
  PromptEstimate other;
  other.Observe({.text_bytes = 100000}, 1);
  CHECK(other.bytes_per_token() == PromptEstimate::kMaxBytesPerToken);
  // Ids and text in one answer: the ids are taken out of the tokens first.
  PromptEstimate mixed;
  mixed.Observe({.text_bytes = 80, .token_ids = 10}, 30);
  CHECK(mixed.bytes_per_token() == Approx(4.0));
}

}  // namespace
}  // namespace cacheroute::frontend
