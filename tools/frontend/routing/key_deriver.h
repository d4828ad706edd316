// KeyDeriver: a request's routing key, as every CacheRoute front end derives it: the first of
// `key_from` the request has, "header" (the key_header's value), "user" (the body's top-level
// user) or "system" (a hash of the chat request's system message(s), or of a completion prompt's
// first prefix_bytes bytes); none when it has none of them (openai_fields.h). The front end finds
// the header (header_name()) its own way and passes the raw body. Derive also gives the prompt's
// size and block hashes from the same parse of the body (RoutingInput, what RoutingCore::Route
// takes).
//
// Usage:
//   KeyDeriver keys(config);
//   RoutingInput input = keys.Derive(header_value_or_none, body);   // input.key, its prompt
//   std::optional<std::string> key = keys.KeyOf(header_value_or_none, body);  // the key alone
//   if (!keys.NeedsBody(header_value_or_none)) … route before the body has arrived …
//
// Immutable; thread-safe (the body parser is per thread).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "tools/frontend/frontend_config.h"
#include "tools/frontend/openai_fields.h"

namespace cacheroute::frontend {

// What a request is routed by: its key, and its prompt as the body shows it (openai_fields.h).
struct RoutingInput {
  std::optional<std::string> key;
  PromptSize prompt;
  std::vector<uint64_t> block_hashes;
};

class KeyDeriver {
 public:
  // Reads key_from, key_header and prefix_bytes.
  explicit KeyDeriver(const FrontendConfig& config)
      : key_from_(config.key_from),
        header_name_(config.key_header),
        prefix_bytes_(config.prefix_bytes) {}

  // The header that carries a key ("header" of key_from).
  const std::string& header_name() const { return header_name_; }
  // The key of a request whose key header is `header` (none: absent) and whose body is `body`.
  std::optional<std::string> KeyOf(const std::optional<std::string>& header,
                                   absl::string_view body) const;
  // The key and the prompt's size and block hashes (none of them for an empty or non-JSON body).
  RoutingInput Derive(const std::optional<std::string>& header, absl::string_view body) const;
  // Whether the key may come from the body: false when the key header decides it (present,
  // non-empty, and "header" comes before the body's sources in key_from) or when key_from names
  // no body source; then KeyOf(header, "") is the key whatever the body holds.
  bool NeedsBody(const std::optional<std::string>& header) const;

 private:
  const std::vector<std::string> key_from_;
  const std::string header_name_;
  const uint32_t prefix_bytes_;
};

}  // namespace cacheroute::frontend
