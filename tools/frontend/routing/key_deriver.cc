// See key_deriver.h.
#include "tools/frontend/routing/key_deriver.h"

#include <utility>

#include "tools/frontend/openai_fields.h"

namespace cacheroute::frontend {

std::optional<std::string> KeyDeriver::KeyOf(const std::optional<std::string>& header,
                                             absl::string_view body) const {
  return RoutingKey(key_from_, header, ScanRequestFields(body, prefix_bytes_));
}

RoutingInput KeyDeriver::Derive(const std::optional<std::string>& header,
                                absl::string_view body) const {
  RequestFields fields = ScanRequestFields(body, prefix_bytes_);
  return {.key = RoutingKey(key_from_, header, fields),
          .prompt = fields.prompt,
          .block_hashes = std::move(fields.block_hashes)};
}

bool KeyDeriver::NeedsBody(const std::optional<std::string>& header) const {
  for (const std::string& source : key_from_) {
    if (source != "header") return true;  // "user" or "system": in the body
    if (header.has_value() && !header->empty()) return false;
  }
  return false;
}

}  // namespace cacheroute::frontend
