// BearerToken: the credentials of an HTTP `Authorization: Bearer <token>` value (RFC 6750), read
// the same way wherever a CacheRoute server checks a bearer token (the gateway's API keys, the
// planner's token). The scheme is matched without regard to case (RFC 9110, section 11.1:
// `bearer` and `BEARER` name the same scheme), a space separates it from the credentials, and
// whitespace around the credentials is removed.
//
// Usage:
//   const std::optional<absl::string_view> token = base::BearerToken(header_value);
//   if (!token.has_value() || !Known(*token)) … refuse …
#pragma once

#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"

namespace cacheroute::base {

// None when `authorization` is of another scheme (or has nothing after the scheme's name).
inline std::optional<absl::string_view> BearerToken(absl::string_view authorization) {
  constexpr absl::string_view kScheme = "bearer";
  if (authorization.size() <= kScheme.size() || authorization[kScheme.size()] != ' ' ||
      !absl::EqualsIgnoreCase(authorization.substr(0, kScheme.size()), kScheme)) {
    return std::nullopt;
  }
  return absl::StripAsciiWhitespace(authorization.substr(kScheme.size()));
}

}  // namespace cacheroute::base
