// The OpenAI-compatible request and response bodies of a vLLM server, as the engine emulator reads
// and writes them: no I/O and no engine, so the HTTP layer (server.h) stays thin and tests can
// check the JSON directly.
//
// Requests: POST /v1/completions ("prompt": a string, a list of token ids, or a list holding one
// string) and POST /v1/chat/completions ("messages": role + content, content a string or a list of
// {"type": "text", "text": ...} parts). Optional: "model" (must name the served model),
// "max_tokens" (chat also "max_completion_tokens"; default kDefaultMaxTokens), "stream",
// "stream_options":
// {"include_usage": bool}, and the emulator extension "cacheroute_hash_ids" /
// "cacheroute_block_size" (default 16) / "cacheroute_input_length" (tokenizer.h). Other fields are
// ignored, as vLLM ignores sampling parameters the emulator does not model.
//
// Errors take the shape of vLLM's OpenAI server (its ErrorResponse): OpenAI's error object,
// {"error": {"message", "type", "param", "code"}}, with vLLM's type names ("BadRequestError",
// "NotFoundError", …) and the HTTP status as a number in `code`; the message and param name the
// offending field. A stream that fails after its first token carries the same object as an event.
//
// Usage:
//   ParsedRequest request;
//   if (std::optional<ApiError> e = ParseRequest(Endpoint::kChat, body, limits, request)) {
//     Reply(e->code, ErrorJson(*e));
//   }
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cacheroute::engine_emu {

// vLLM's default for /v1/completions; the emulator uses it for chat too (vLLM's chat default, the
// rest of the context window, would make every reply as long as the model allows).
inline constexpr uint32_t kDefaultMaxTokens = 16;

enum class Endpoint { kCompletions, kChat };

struct ApiError {
  int code = 400;
  std::string type = "BadRequestError";
  std::string message;
  std::string param;  // empty: null
};

struct RequestLimits {
  std::string model;                // the served model name
  uint32_t max_model_len = 131072;  // prompt + max_tokens must fit
};

struct ParsedRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  bool stream = false;
  bool include_usage = false;  // stream_options.include_usage
  uint32_t max_tokens = kDefaultMaxTokens;
  uint32_t prompt_tokens = 0;
  std::vector<uint64_t> block_hashes;  // full 16-token blocks, chained
  bool extension = false;              // blocks came from cacheroute_hash_ids
};

// Fills `out` from a request body, or returns the error to send.
std::optional<ApiError> ParseRequest(Endpoint endpoint, std::string_view body,
                                     const RequestLimits& limits, ParsedRequest& out);

std::string ErrorJson(const ApiError& error);

struct Usage {
  uint32_t prompt_tokens = 0;
  uint32_t completion_tokens = 0;
  uint32_t cached_tokens = 0;
};

// What identifies one response in every body and chunk.
struct ResponseHeader {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string id;  // "cmpl-…" or "chatcmpl-…"
  int64_t created = 0;
  std::string model;
};

// Generated text for output tokens [begin, end): filler words, each followed by a space.
std::string GeneratedText(uint32_t begin, uint32_t end);

// The non-streaming response.
std::string ResponseJson(const ResponseHeader& header, const Usage& usage);
// One streaming chunk carrying `text` (chat: the first also carries the assistant role), with
// finish_reason "length" when `last`.
std::string ChunkJson(const ResponseHeader& header, std::string_view text, bool first, bool last);
// The final streaming chunk with usage and no choices (stream_options.include_usage).
std::string UsageChunkJson(const ResponseHeader& header, const Usage& usage);

// GET /v1/models.
std::string ModelsJson(std::string_view model, int64_t created, uint32_t max_model_len);

}  // namespace cacheroute::engine_emu
