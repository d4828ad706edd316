// See key_deriver.h.
#include "tools/gateway/routing/key_deriver.h"

#include "tools/gateway/openai_fields.h"

namespace cacheroute::gateway {

std::optional<std::string> KeyDeriver::KeyOf(const std::optional<std::string>& header,
                                             absl::string_view body) const {
  return RoutingKey(key_from_, header, ScanRequestFields(body, prefix_bytes_));
}

}  // namespace cacheroute::gateway
