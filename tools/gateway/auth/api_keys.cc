// See api_keys.h.
#include "tools/gateway/auth/api_keys.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "base/authorization.h"
#include "base/status_macros.h"
#include "tools/gateway/gateway_config.h"

namespace cacheroute::gateway {

absl::StatusOr<ApiKeys> ApiKeys::Load(const std::string& path) {
  ApiKeys keys;
  if (path.empty()) return keys;
  CACHEROUTE_ASSIGN_OR_RETURN(std::string text, frontend::ReadNonEmptyFile("api_key_file", path));
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line.front() == '#') continue;
    keys.keys_.emplace_back(line);
  }
  if (keys.keys_.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("api_key_file: \"", path, "\" holds no key (one per line)"));
  }
  std::sort(keys.keys_.begin(), keys.keys_.end());
  return keys;
}

bool ApiKeys::Authorized(std::optional<absl::string_view> authorization) const {
  if (keys_.empty()) return true;
  if (!authorization.has_value()) return false;
  const std::optional<absl::string_view> token = base::BearerToken(*authorization);
  return token.has_value() && std::binary_search(keys_.begin(), keys_.end(), *token);
}

}  // namespace cacheroute::gateway
