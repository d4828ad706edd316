// What the gateway reads from OpenAI-compatible bodies, parsed with simdjson's DOM parser (which
// validates the whole document; one parser per thread): the routing key's sources in a request,
// and the served KV hit (`usage`) in a response or an SSE stream.
//
// Request (POST /v1/completions or /v1/chat/completions): the top-level `user` string, `stream`,
// and a hash of the prefix every request of one application shares: for chat, the system
// message(s) (`messages[i].role == "system"`, content a string or text parts, joined with "\n");
// for completions, the first `prefix_bytes` bytes of `prompt` (a string, the first of a list of
// strings, or the first prefix_bytes/4 ids of a token list). A body that is not a JSON object
// yields nothing (the request is forwarded all the same; the upstream answers it); so does one
// with an integer beyond 64 bits, which simdjson does not parse. Of a duplicated key, the first.
//
// Models: GET /v1/models/{id} (the SDKs' models.retrieve) is answered from the GET /v1/models
// list, which every OpenAI-compatible engine serves (vLLM serves no /v1/models/{id}):
// ModelIdOfPath reads the id, FindModel its entry in the list.
//
// The prompt, for the token-work signals (docs/dispatch.md, "What the gateway measures"): its size
// (bytes of text, or token ids) and the chained hashes of its fixed blocks. The prompt text is what
// the gateway can see of what the engine tokenizes: for chat, each message's role and its text
// content (a string or text parts), each followed by a NUL; for completions, the prompt strings, or
// the token ids of a prompt given as ids. Blocks: kPromptBlockBytes bytes of that text, or
// kPromptBlockIds ids (a trailing partial block has no hash), each hash naming its whole prefix.
// A batch of prompts counts every prompt's size, and only the first one's blocks.
//
// Response: `usage.prompt_tokens` and `usage.prompt_tokens_details.cached_tokens` (vLLM reports
// the latter with --enable-prompt-tokens-details; in a stream only with
// stream_options.include_usage). UsageScanner finds them in an SSE byte stream fed as it arrives,
// keeping at most one partial event line.
//
// Usage:
//   RequestFields f = ScanRequestFields(body, 1024);   // f.prompt, f.block_hashes: its prompt
//   std::optional<std::string> key = RoutingKey({"header", "user", "system"}, header, f);
//   UsageScanner u; u.Feed(chunk); … if (u.usage()) Count(u.usage()->cached_tokens);
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace cacheroute::frontend {

// What a request's prompt measures: bytes of text and token ids (both 0: unknown).
struct PromptSize {
  uint64_t text_bytes = 0;
  uint64_t token_ids = 0;
};

// 64 bytes of text, about 16 tokens of English at 4 bytes a token (the 16-token blocks of vLLM and
// of the Router's prefix memory); 16 ids.
inline constexpr size_t kPromptBlockBytes = 64;
inline constexpr size_t kPromptBlockIds = 16;

struct RequestFields {
  std::optional<std::string> user;  // a top-level string "user"
  bool stream = false;              // a top-level "stream": true
  // "system:<16 hex digits>" (chat) or "prompt:<16 hex digits>" (completions); none when the
  // request has no system message or no prompt.
  std::optional<std::string> system;
  PromptSize prompt;
  std::vector<uint64_t> block_hashes;  // the prompt's chained block hashes
};
RequestFields ScanRequestFields(absl::string_view body, size_t prefix_bytes = 1024);

// The names key_from accepts, in the default order.
inline constexpr absl::string_view kKeySources[] = {"header", "user", "system"};

// The first source in `key_from` that the request has: "header" the key header's value (when
// given and non-empty), "user" fields.user, "system" fields.system.
std::optional<std::string> RoutingKey(const std::vector<std::string>& key_from,
                                      const std::optional<std::string>& header,
                                      const RequestFields& fields);

struct Usage {
  uint64_t prompt_tokens = 0;
  std::optional<uint64_t> cached_tokens;  // absent when the engine does not report it
  uint64_t completion_tokens = 0;         // 0 when absent
};
// `usage` of one JSON response body (or one SSE event's data); none without a usage object.
std::optional<Usage> ReadUsage(absl::string_view json);

// The model id of a path "/v1/models/{id}", percent-decoded (the SDKs send "org/name" as
// "org%2Fname"; a raw '/' stays part of the id); none for any other path, an empty id, or a bad
// percent-escape.
std::optional<std::string> ModelIdOfPath(absl::string_view path);
// The entry of model `id` in a GET /v1/models answer ({"object":"list","data":[{"id":"…",…},…]}),
// as JSON with its fields in the list's order; none when the list has no such id.
// InvalidArgument when `list` is not such a list.
absl::StatusOr<std::optional<std::string>> FindModel(absl::string_view list, absl::string_view id);

// An error answer in the shape the OpenAI API uses, so that clients' error handling works
// unchanged: {"error":{"message":"…","type":"…","param":null,"code":"…"}}. `code` is a string,
// as OpenAI's are ("invalid_api_key", "model_not_found"; the official SDKs expose it as a string
// or null), "" giving null. Invalid UTF-8 in `message` becomes U+FFFD. (proxy/error_body.h sends
// it; tools/epp answers it over ext_proc.)
std::string ErrorBody(absl::string_view message, absl::string_view type, absl::string_view code);

class UsageScanner {
 public:
  // Longest partial line kept between chunks; a longer event is skipped.
  static constexpr size_t kMaxLine = 1u << 20;
  void Feed(absl::string_view bytes);
  const std::optional<Usage>& usage() const { return usage_; }

 private:
  void Line(absl::string_view line);
  std::string partial_;
  bool skipping_ = false;  // inside a line longer than kMaxLine
  std::optional<Usage> usage_;
};

}  // namespace cacheroute::frontend
