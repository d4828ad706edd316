// FUZZ_CHECK: an invariant of a decoder that a fuzz target asserts. A failure prints the condition
// and a message and aborts, so libFuzzer reports a crash and keeps the input (crash-<sha1>).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"

#define FUZZ_CHECK(cond, ...)                                                               \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed: %s\n", __FILE__, __LINE__, #cond, \
                   ::cacheroute::fuzz::Message(__VA_ARGS__).c_str());                       \
      std::abort();                                                                         \
    }                                                                                       \
  } while (0)

// FUZZ_CHECK_INVALID_ARGUMENT(status): a decoder's error is InvalidArgument, with a message.
#define FUZZ_CHECK_INVALID_ARGUMENT(status)                                          \
  do {                                                                               \
    const ::absl::Status& fuzz_status_ = (status);                                   \
    FUZZ_CHECK(fuzz_status_.code() == ::absl::StatusCode::kInvalidArgument,          \
               fuzz_status_.ToString());                                             \
    FUZZ_CHECK(!fuzz_status_.message().empty());                                     \
  } while (0)

namespace cacheroute::fuzz {

inline std::string Message() { return ""; }
inline std::string Message(std::string_view text) { return std::string(text); }

// The input split at every `separator` (an input with none is one part).
inline std::vector<std::string_view> Split(std::string_view input, std::string_view separator) {
  std::vector<std::string_view> parts;
  for (;;) {
    const size_t at = input.find(separator);
    if (at == std::string_view::npos) break;
    parts.push_back(input.substr(0, at));
    input.remove_prefix(at + separator.size());
  }
  parts.push_back(input);
  return parts;
}

}  // namespace cacheroute::fuzz
