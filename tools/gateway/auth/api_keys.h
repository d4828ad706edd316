// ApiKeys: client authentication of the gateway's /v1/ endpoints. With the keys of api_key_file
// loaded, a request passes only with `Authorization: Bearer <key>` naming one of them (the scheme
// in any case, base/authorization.h); without keys every request passes. What the proxy does with
// the header (it is not passed upstream) and how a refusal is answered (401) are the front end's.
//
// Usage:
//   absl::StatusOr<ApiKeys> keys = ApiKeys::Load(config.api_key_file);   // at start
//   if (!keys->Authorized(authorization_header_or_none)) … 401 …
//
// The file holds one key per line; surrounding whitespace, blank lines and `#` comment lines are
// ignored. Immutable once loaded, so Authorized is thread-safe; it is a binary search.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cacheroute::gateway {

class ApiKeys {
 public:
  ApiKeys() = default;  // no keys: every request passes
  // The keys of the file at `path`; "" gives no keys. InvalidArgument naming api_key_file and the
  // path when it cannot be read, is blank or holds no key.
  static absl::StatusOr<ApiKeys> Load(const std::string& path);

  bool enabled() const { return !keys_.empty(); }
  // Whether a request whose Authorization header is `authorization` (none: absent) may pass.
  bool Authorized(std::optional<absl::string_view> authorization) const;

 private:
  std::vector<std::string> keys_;  // sorted
};

}  // namespace cacheroute::gateway
