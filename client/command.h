// Command: one cacheroutectl subcommand, and the small helpers subcommands share (flag parsing,
// reading the rates file, writing stdout, exit codes).
//
// A Command declares its flags on a CLI11 subcommand in its constructor and runs after parsing.
// Errors are absl::Status values; Main (cacheroutectl.cc) turns them into an exit code with
// ExitCode and one line on stderr. Output goes to stdout only once it is complete (per line for
// streaming commands such as `watch`).
//
// Usage:
//   class FooCommand final : public Command {
//    public:
//     explicit FooCommand(CLI::App& app) { command_ = app.add_subcommand("foo", "..."); }
//     bool Selected() const override { return command_->parsed(); }
//     absl::Status Run() override { return WriteStdout("done\n"); }
//    private:
//     CLI::App* command_ = nullptr;
//   };
#pragma once

#include <charconv>
#include <limits>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace cacheroute::client {

inline constexpr int kExitOk = 0;
inline constexpr int kExitInternal = 1;
// Usage, flag values, unreadable or malformed files, and inputs the planner rejects.
inline constexpr int kExitBadInput = 2;
// The planner cannot be reached or did not answer in time.
inline constexpr int kExitUnavailable = 3;
// The planner refused the call: missing or wrong token.
inline constexpr int kExitUnauthenticated = 4;

// The exit code for a command's status, by the status code's meaning.
int ExitCode(const absl::Status& status);

class Command {
 public:
  virtual ~Command() = default;
  // True if this command's subcommand was selected on the command line.
  virtual bool Selected() const = 0;
  virtual absl::Status Run() = 0;
};

// InvalidArgument "FLAG: expected EXPECTED, got "VALUE"".
absl::Status FlagError(absl::string_view flag, absl::string_view expected, absl::string_view value);

// `value` as an integer in [min, max of Int], or a FlagError.
template <typename Int>
absl::StatusOr<Int> ParseIntFlag(absl::string_view flag, absl::string_view value, Int min) {
  Int parsed = 0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), parsed);
  if (ec != std::errc() || end != value.data() + value.size() || parsed < min) {
    return FlagError(
        flag, absl::StrCat("an integer in [", min, ", ", std::numeric_limits<Int>::max(), "]"),
        value);
  }
  return parsed;
}

// `value` as a finite number > 0 (≥ 0), or a FlagError.
absl::StatusOr<double> ParsePositiveFlag(absl::string_view flag, absl::string_view value);
absl::StatusOr<double> ParseNonNegativeFlag(absl::string_view flag, absl::string_view value);

// The whole content of a rates file; `path` "-" is standard input. Errors name --rates.
absl::StatusOr<std::string> ReadRatesFile(const std::string& path);

// Writes and flushes; Internal if standard output is gone.
absl::Status WriteStdout(absl::string_view text);

}  // namespace cacheroute::client
