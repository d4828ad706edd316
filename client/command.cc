// See command.h.
#include "client/command.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <system_error>

#include "client/text_format.h"

namespace cacheroute::client {
namespace {

absl::StatusOr<std::string> ReadAll(std::FILE* file, absl::string_view name) {
  std::string text;
  char buffer[1 << 16];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof(buffer), file)) > 0) text.append(buffer, n);
  if (std::ferror(file)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rates: cannot read ", name, ": ",
                     std::error_code(errno, std::generic_category()).message()));
  }
  return text;
}

}  // namespace

int ExitCode(const absl::Status& status) {
  switch (status.code()) {
    case absl::StatusCode::kOk:
      return kExitOk;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kOutOfRange:
    case absl::StatusCode::kNotFound:
    case absl::StatusCode::kFailedPrecondition:
      return kExitBadInput;
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
      return kExitUnavailable;
    case absl::StatusCode::kUnauthenticated:
    case absl::StatusCode::kPermissionDenied:
      return kExitUnauthenticated;
    default:
      return kExitInternal;
  }
}

absl::Status FlagError(absl::string_view flag, absl::string_view expected,
                       absl::string_view value) {
  return absl::InvalidArgumentError(
      absl::StrCat(flag, ": expected ", expected, ", got ", QuoteForMessage(value)));
}

namespace {

// `value` as a finite number, > 0 or ≥ 0.
absl::StatusOr<double> ParseNumberFlag(absl::string_view flag, absl::string_view value,
                                       bool allow_zero) {
  double parsed = 0.0;
  const auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), parsed);
  if (ec != std::errc() || end != value.data() + value.size() || !std::isfinite(parsed) ||
      parsed < 0 || (parsed == 0 && !allow_zero)) {
    return FlagError(flag, allow_zero ? "a finite number >= 0" : "a finite number > 0", value);
  }
  return parsed == 0 ? 0.0 : parsed;
}

}  // namespace

absl::StatusOr<double> ParsePositiveFlag(absl::string_view flag, absl::string_view value) {
  return ParseNumberFlag(flag, value, /*allow_zero=*/false);
}

absl::StatusOr<double> ParseNonNegativeFlag(absl::string_view flag, absl::string_view value) {
  return ParseNumberFlag(flag, value, /*allow_zero=*/true);
}

absl::StatusOr<std::string> ReadRatesFile(const std::string& path) {
  if (path == "-") return ReadAll(stdin, "standard input");
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--rates: cannot open ", QuoteForMessage(path), ": ",
                     std::error_code(errno, std::generic_category()).message()));
  }
  absl::StatusOr<std::string> text = ReadAll(file, QuoteForMessage(path));
  std::fclose(file);
  return text;
}

absl::Status WriteStdout(absl::string_view text) {
  if (std::fwrite(text.data(), 1, text.size(), stdout) != text.size() || std::fflush(stdout) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot write to standard output: ",
                     std::error_code(errno, std::generic_category()).message()));
  }
  return absl::OkStatus();
}

}  // namespace cacheroute::client
