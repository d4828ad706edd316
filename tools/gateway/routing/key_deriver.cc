// See key_deriver.h.
#include "tools/gateway/routing/key_deriver.h"

#include "tools/gateway/openai_fields.h"

namespace cacheroute::gateway {

std::optional<std::string> KeyDeriver::KeyOf(const std::optional<std::string>& header,
                                             absl::string_view body) const {
  return RoutingKey(key_from_, header, ScanRequestFields(body, prefix_bytes_));
}

bool KeyDeriver::NeedsBody(const std::optional<std::string>& header) const {
  for (const std::string& source : key_from_) {
    if (source != "header") return true;  // "user" or "system": in the body
    if (header.has_value() && !header->empty()) return false;
  }
  return false;
}

}  // namespace cacheroute::gateway
