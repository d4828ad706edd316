// Test-only: a table of inputs and the whole text each must give back (an error message, an
// escaped string), checked by one loop; a failure names its input, C-escaped.
//
// Usage:
//   CheckEach(ParseError, {{"q_cap: 0", "q_cap: must be a finite number > 0, got 0"},
//                          {"q_cap: x", "q_cap: expected a number, got \"x\""}});
//   CheckEachArgs(LoadError, {{{"--q-cap", "0"}, "--q-cap: must be ..."}});
#pragma once

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_join.h"

namespace cacheroute::testing {

struct TextCase {
  std::string input;
  std::string expected;
};

// CHECKs f(input) == expected for every case.
template <typename F>
void CheckEach(F f, const std::vector<TextCase>& cases) {
  for (const TextCase& c : cases) {
    INFO("input: \"" << absl::CHexEscape(c.input) << '"');
    CHECK(f(c.input) == c.expected);
  }
}

// The same with command-line arguments as the input.
struct ArgsCase {
  std::vector<std::string> args;
  std::string expected;
};

template <typename F>
void CheckEachArgs(F f, const std::vector<ArgsCase>& cases) {
  for (const ArgsCase& c : cases) {
    INFO("args: " << absl::StrJoin(c.args, " "));
    CHECK(f(c.args) == c.expected);
  }
}

}  // namespace cacheroute::testing
