// See openai_api.h.
#include "tools/eval/engine_emu/openai_api.h"

#include <algorithm>
#include <span>

#include "absl/strings/str_cat.h"
#include "cacheroute/dataplane/enum_names.h"
#include "cacheroute/dataplane/key_id.h"
#include "tools/eval/engine_emu/tokenizer.h"
#include "tools/eval/workload/json_line.h"

namespace cacheroute::engine_emu {
namespace {

using workload::JsonQuote;
using workload::JsonValue;
using Type = JsonValue::Type;

// Explicit token ids live in their own id space, apart from hashed words.
constexpr uint64_t kTokenIdSalt = 0x7e57ab1e70c3e1d5ULL;

ApiError BadRequest(std::string param, std::string message) {
  return ApiError{.code = 400,
                  .type = "BadRequestError",
                  .message = std::move(message),
                  .param = std::move(param)};
}

constexpr dataplane::EnumName<Type> kTypeNames[] = {
    {Type::kNull, "null"},
    {Type::kBool, "a boolean"},
    {Type::kNumber, "a number"},
    {Type::kString, "a string"},
    {Type::kArray, "an array"},
    {Type::kObject, "an object"},
};
static_assert(dataplane::IsEnumTable(kTypeNames, Type::kObject));

const char* TypeName(Type t) { return dataplane::NameOf(kTypeNames, t); }

ApiError WrongType(absl::string_view field, absl::string_view expected, const JsonValue& v) {
  return BadRequest(std::string(field), absl::StrCat("field \"", field, "\" must be ", expected,
                                                     ", got ", TypeName(v.type)));
}

// A positive integer that fits 32 bits, or an error naming `field`.
std::optional<ApiError> PositiveU32(absl::string_view field, const JsonValue& v, uint32_t& out) {
  const std::optional<uint64_t> n = v.AsUint64();
  if (v.type != Type::kNumber || !n) return WrongType(field, "a non-negative integer", v);
  if (*n < 1 || *n > UINT32_MAX) {
    return BadRequest(
        std::string(field),
        absl::StrCat("field \"", field, "\" must be between 1 and ", UINT32_MAX, ", got ", v.text));
  }
  out = static_cast<uint32_t>(*n);
  return std::nullopt;
}

std::optional<ApiError> ReadBool(absl::string_view field, const JsonValue& v, bool& out) {
  if (v.type == Type::kNull) return std::nullopt;
  if (v.type != Type::kBool) return WrongType(field, "a boolean", v);
  out = v.boolean;
  return std::nullopt;
}

std::optional<ApiError> ReadPrompt(const JsonValue& prompt, std::vector<uint64_t>& tokens) {
  if (prompt.type == Type::kString) {
    AppendTokens(prompt.text, tokens);
    return std::nullopt;
  }
  if (prompt.type != Type::kArray) {
    return WrongType("prompt", "a string, a list of token ids or a list of one string", prompt);
  }
  if (prompt.items.size() == 1 && prompt.items[0].type == Type::kString) {
    AppendTokens(prompt.items[0].text, tokens);
    return std::nullopt;
  }
  for (size_t i = 0; i < prompt.items.size(); ++i) {
    const JsonValue& item = prompt.items[i];
    const std::optional<uint64_t> id = item.AsUint64();
    if (item.type == Type::kString) {
      return BadRequest("prompt", "field \"prompt\": batched prompts (a list of " +
                                      std::to_string(prompt.items.size()) +
                                      " strings) are not supported by the emulator");
    }
    if (!id) {
      return BadRequest("prompt", absl::StrCat("field \"prompt\" item ", i,
                                               " must be a non-negative integer token id, got ",
                                               TypeName(item.type)));
    }
    tokens.push_back(dataplane::Mix64(*id ^ kTokenIdSalt));
  }
  return std::nullopt;
}

std::optional<ApiError> ReadMessages(const JsonValue& messages, std::vector<ChatMessage>& out) {
  if (messages.type != Type::kArray) return WrongType("messages", "an array", messages);
  if (messages.items.empty()) return BadRequest("messages", "field \"messages\" must not be empty");
  for (size_t i = 0; i < messages.items.size(); ++i) {
    const JsonValue& m = messages.items[i];
    const std::string where = absl::StrCat("messages[", i, "]");
    if (m.type != Type::kObject) return WrongType(where, "an object", m);
    const JsonValue* role = m.Find("role");
    if (role == nullptr) {
      return BadRequest(where + ".role", absl::StrCat("field \"", where, ".role\" is required"));
    }
    if (role->type != Type::kString) return WrongType(where + ".role", "a string", *role);
    ChatMessage message{.role = role->text, .content = {}};
    const JsonValue* content = m.Find("content");
    if (content == nullptr || content->type == Type::kNull) {
      // An assistant turn with tool calls has no content; it still takes its template tokens.
    } else if (content->type == Type::kString) {
      message.content = content->text;
    } else if (content->type == Type::kArray) {
      for (size_t j = 0; j < content->items.size(); ++j) {
        const JsonValue& part = content->items[j];
        const std::string part_where = absl::StrCat(where, ".content[", j, "]");
        const JsonValue* type = part.type == Type::kObject ? part.Find("type") : nullptr;
        const JsonValue* text = part.type == Type::kObject ? part.Find("text") : nullptr;
        if (type == nullptr || type->type != Type::kString || type->text != "text" ||
            text == nullptr || text->type != Type::kString) {
          return BadRequest(part_where, absl::StrCat("field \"", part_where,
                                                     "\" must be {\"type\": \"text\", \"text\": "
                                                     "string} (the emulator models text only)"));
        }
        if (!message.content.empty()) message.content += '\n';
        message.content += text->text;
      }
    } else {
      return WrongType(where + ".content", "a string or an array of parts", *content);
    }
    out.push_back(std::move(message));
  }
  return std::nullopt;
}

std::optional<ApiError> ReadExtension(const JsonValue& body, const JsonValue& ids,
                                      ParsedRequest& out) {
  if (ids.type != Type::kArray) return WrongType("cacheroute_hash_ids", "an array", ids);
  std::vector<uint64_t> hash_ids;
  hash_ids.reserve(ids.items.size());
  for (size_t i = 0; i < ids.items.size(); ++i) {
    const std::optional<uint64_t> id = ids.items[i].AsUint64();
    if (!id) {
      return BadRequest(
          "cacheroute_hash_ids",
          absl::StrCat("field \"cacheroute_hash_ids\" item ", i,
                       " must be a non-negative integer, got ", TypeName(ids.items[i].type)));
    }
    hash_ids.push_back(*id);
  }
  uint32_t block_size = 16;
  if (const JsonValue* b = body.Find("cacheroute_block_size"); b != nullptr) {
    if (auto e = PositiveU32("cacheroute_block_size", *b, block_size)) return e;
  }
  const JsonValue* length = body.Find("cacheroute_input_length");
  if (length == nullptr) {
    return BadRequest("cacheroute_input_length",
                      "field \"cacheroute_input_length\" is required with \"cacheroute_hash_ids\"");
  }
  if (auto e = PositiveU32("cacheroute_input_length", *length, out.prompt_tokens)) return e;
  out.block_hashes = BlockHashesFromHashIds(hash_ids, block_size, out.prompt_tokens);
  out.extension = true;
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> ParseRequest(Endpoint endpoint, std::string_view body,
                                     const RequestLimits& limits, ParsedRequest& out) {
  out = ParsedRequest();
  out.endpoint = endpoint;
  absl::StatusOr<JsonValue> parsed = workload::ParseJson(body);
  if (!parsed.ok()) {
    return BadRequest("", absl::StrCat("JSON decode error: ", parsed.status().message()));
  }
  const JsonValue& v = *parsed;
  if (v.type != Type::kObject) {
    return BadRequest(
        "", absl::StrCat("the request body must be a JSON object, got ", TypeName(v.type)));
  }
  if (const JsonValue* model = v.Find("model"); model != nullptr && model->type != Type::kNull) {
    if (model->type != Type::kString) return WrongType("model", "a string", *model);
    if (model->text != limits.model) {
      return ApiError{.code = 404,
                      .type = "NotFoundError",
                      .message = absl::StrCat("The model `", model->text, "` does not exist."),
                      .param = "model"};
    }
  }
  if (const JsonValue* s = v.Find("stream"); s != nullptr) {
    if (auto e = ReadBool("stream", *s, out.stream)) return e;
  }
  if (const JsonValue* so = v.Find("stream_options"); so != nullptr && so->type != Type::kNull) {
    if (so->type != Type::kObject) return WrongType("stream_options", "an object", *so);
    if (const JsonValue* iu = so->Find("include_usage"); iu != nullptr) {
      if (auto e = ReadBool("stream_options.include_usage", *iu, out.include_usage)) return e;
    }
  }
  for (absl::string_view field : {"max_tokens", "max_completion_tokens"}) {
    if (field == "max_completion_tokens" && endpoint != Endpoint::kChat) continue;
    const JsonValue* m = v.Find(std::string_view(field.data(), field.size()));
    if (m == nullptr || m->type == Type::kNull) continue;
    if (auto e = PositiveU32(field, *m, out.max_tokens)) return e;
  }

  // The prompt's tokens, from the text unless the extension describes its blocks.
  std::vector<uint64_t> tokens;
  const absl::string_view prompt_field = endpoint == Endpoint::kChat ? "messages" : "prompt";
  const JsonValue* prompt = v.Find(std::string_view(prompt_field.data(), prompt_field.size()));
  if (prompt == nullptr) {
    return BadRequest(std::string(prompt_field),
                      absl::StrCat("field \"", prompt_field, "\" is required"));
  }
  if (endpoint == Endpoint::kChat) {
    std::vector<ChatMessage> messages;
    if (auto e = ReadMessages(*prompt, messages)) return e;
    AppendTokens(RenderChat(messages), tokens);
  } else if (auto e = ReadPrompt(*prompt, tokens)) {
    return e;
  }
  if (const JsonValue* ids = v.Find("cacheroute_hash_ids"); ids != nullptr) {
    if (auto e = ReadExtension(v, *ids, out)) return e;
  } else {
    if (tokens.empty()) {
      return BadRequest(std::string(prompt_field),
                        absl::StrCat("field \"", prompt_field, "\" holds no tokens"));
    }
    if (tokens.size() > UINT32_MAX) {
      return BadRequest(std::string(prompt_field), "the prompt has too many tokens");
    }
    out.prompt_tokens = static_cast<uint32_t>(tokens.size());
    out.block_hashes = BlockHashesFromTokens(tokens);
  }
  if (uint64_t{out.prompt_tokens} + out.max_tokens > limits.max_model_len) {
    return BadRequest(
        "", absl::StrCat("This model's maximum context length is ", limits.max_model_len,
                         " tokens. However, you requested ",
                         uint64_t{out.prompt_tokens} + out.max_tokens, " tokens (",
                         out.prompt_tokens, " in the ", prompt_field, ", ", out.max_tokens,
                         " in the completion). Please reduce the length of the ", prompt_field,
                         " or completion."));
  }
  return std::nullopt;
}

std::string ErrorJson(const ApiError& error) {
  return absl::StrCat("{\"error\":{\"message\":", JsonQuote(error.message),
                      ",\"type\":", JsonQuote(error.type),
                      ",\"param\":", error.param.empty() ? "null" : JsonQuote(error.param),
                      ",\"code\":", error.code, "}}");
}

std::string GeneratedText(uint32_t begin, uint32_t end) {
  std::string out;
  for (uint32_t i = begin; i < end; ++i) {
    out += FillerWord(i);
    out += ' ';
  }
  return out;
}

namespace {

std::string UsageJson(const Usage& u) {
  return absl::StrCat("{\"prompt_tokens\":", u.prompt_tokens,
                      ",\"total_tokens\":", uint64_t{u.prompt_tokens} + u.completion_tokens,
                      ",\"completion_tokens\":", u.completion_tokens,
                      ",\"prompt_tokens_details\":{\"cached_tokens\":", u.cached_tokens, "}}");
}

std::string HeaderJson(const ResponseHeader& h, absl::string_view object) {
  return absl::StrCat("{\"id\":", JsonQuote(h.id), ",\"object\":\"", object,
                      "\",\"created\":", h.created, ",\"model\":", JsonQuote(h.model));
}

}  // namespace

std::string ResponseJson(const ResponseHeader& header, const Usage& usage) {
  const std::string text = JsonQuote(GeneratedText(0, usage.completion_tokens));
  if (header.endpoint == Endpoint::kChat) {
    return absl::StrCat(HeaderJson(header, "chat.completion"),
                        ",\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\","
                        "\"content\":",
                        text,
                        ",\"tool_calls\":[]},\"logprobs\":null,\"finish_reason\":\"length\","
                        "\"stop_reason\":null}],\"usage\":",
                        UsageJson(usage), "}");
  }
  return absl::StrCat(HeaderJson(header, "text_completion"),
                      ",\"choices\":[{\"index\":0,\"text\":", text,
                      ",\"logprobs\":null,\"finish_reason\":\"length\",\"stop_reason\":null}],"
                      "\"usage\":",
                      UsageJson(usage), "}");
}

std::string ChunkJson(const ResponseHeader& header, std::string_view text, bool first, bool last) {
  const std::string finish = last ? "\"length\"" : "null";
  if (header.endpoint == Endpoint::kChat) {
    return absl::StrCat(HeaderJson(header, "chat.completion.chunk"),
                        ",\"choices\":[{\"index\":0,\"delta\":{",
                        first ? "\"role\":\"assistant\"," : "", "\"content\":", JsonQuote(text),
                        "},\"logprobs\":null,\"finish_reason\":", finish, "}]}");
  }
  return absl::StrCat(HeaderJson(header, "text_completion"),
                      ",\"choices\":[{\"index\":0,\"text\":", JsonQuote(text),
                      ",\"logprobs\":null,\"finish_reason\":", finish, "}]}");
}

std::string UsageChunkJson(const ResponseHeader& header, const Usage& usage) {
  return absl::StrCat(
      HeaderJson(header,
                 header.endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion"),
      ",\"choices\":[],\"usage\":", UsageJson(usage), "}");
}

std::string ModelsJson(std::string_view model, int64_t created, uint32_t max_model_len) {
  return absl::StrCat("{\"object\":\"list\",\"data\":[{\"id\":", JsonQuote(model),
                      ",\"object\":\"model\",\"created\":", created,
                      ",\"owned_by\":\"vllm\",\"root\":", JsonQuote(model),
                      ",\"parent\":null,\"max_model_len\":", max_model_len, "}]}");
}

}  // namespace cacheroute::engine_emu
