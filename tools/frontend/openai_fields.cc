// See openai_fields.h.
#include "tools/frontend/openai_fields.h"

#include <simdjson.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <nlohmann/json.hpp>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "cacheroute/dataplane/key_id.h"

namespace cacheroute::frontend {
namespace {

using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::object;

std::string Hashed(absl::string_view kind, absl::string_view text) {
  return absl::StrFormat("%s:%016x", kind,
                         dataplane::KeyId(std::string_view(text.data(), text.size())));
}

// One parser per thread: it keeps its buffers between documents, so a parse allocates nothing
// once the thread has seen a document as large. Its element views live until the next parse.
simdjson::dom::parser& Parser() {
  thread_local simdjson::dom::parser parser;
  return parser;
}

// The whole text as one JSON object (the document is validated in full), or none.
std::optional<object> ParseObject(absl::string_view text) {
  object out;
  if (Parser().parse(text.data(), text.size()).get_object().get(out) != simdjson::SUCCESS) {
    return std::nullopt;
  }
  return out;
}

// The value of `key` in `o` when it is there with the asked-for type.
template <typename T>
std::optional<T> Member(const object& o, std::string_view key) {
  T out;
  if (o.at_key(key).get(out) != simdjson::SUCCESS) return std::nullopt;
  return out;
}

// A message's content as text: a string, or the `text` of its parts.
std::string ContentText(const element& content) {
  std::string_view text;
  if (content.get_string().get(text) == simdjson::SUCCESS) return std::string(text);
  std::string out;
  array parts;
  if (content.get_array().get(parts) == simdjson::SUCCESS) {
    for (const element part : parts) {
      object o;
      if (part.get_object().get(o) != simdjson::SUCCESS) continue;
      if (const auto t = Member<std::string_view>(o, "text")) out.append(t->data(), t->size());
    }
  }
  return out;
}

// A token id as a signed 64-bit integer (one above INT64_MAX wraps round).
std::optional<int64_t> Integer(const element& e) {
  int64_t i;
  if (e.get_int64().get(i) == simdjson::SUCCESS) return i;
  uint64_t u;
  if (e.get_uint64().get(u) == simdjson::SUCCESS) return static_cast<int64_t>(u);
  return std::nullopt;
}

std::optional<std::string> SystemKey(const object& body, size_t prefix_bytes) {
  if (const auto messages = Member<array>(body, "messages")) {
    std::string system;
    bool any = false;
    for (const element m : *messages) {
      object message;
      if (m.get_object().get(message) != simdjson::SUCCESS) continue;
      const auto role = Member<std::string_view>(message, "role");
      if (!role.has_value() || *role != "system") continue;
      const auto content = Member<element>(message, "content");
      if (!content.has_value()) continue;
      if (any) system += '\n';
      system += ContentText(*content);
      any = true;
    }
    if (!any) return std::nullopt;
    return Hashed("system", system);
  }
  auto text = Member<element>(body, "prompt");
  if (!text.has_value()) return std::nullopt;
  array list;
  if (text->get_array().get(list) == simdjson::SUCCESS && list.size() > 0 &&
      list.at(0).is_string()) {
    text = list.at(0).value_unsafe();
  }
  std::string_view s;
  if (text->get_string().get(s) == simdjson::SUCCESS) {
    if (s.empty()) return std::nullopt;
    return Hashed("prompt", absl::string_view(s.data(), s.size()).substr(0, prefix_bytes));
  }
  array ids;
  if (text->get_array().get(ids) == simdjson::SUCCESS && ids.size() > 0) {  // token ids
    std::string joined;
    const size_t n = std::max<size_t>(1, prefix_bytes / 4);
    size_t i = 0;
    for (const element id : ids) {
      if (i++ >= n) break;
      const std::optional<int64_t> value = Integer(id);
      if (!value.has_value()) return std::nullopt;
      absl::StrAppendFormat(&joined, "%d,", *value);
    }
    return Hashed("prompt", joined);
  }
  return std::nullopt;
}

// Chained hashes of the fixed blocks of a byte stream (a trailing partial block has none): each
// block's hash starts from its parent's, so equal hashes name equal prefixes. xxHash64's rounds
// over the block's words, then the splitmix64 finaliser.
class BlockHasher {
 public:
  static constexpr size_t kMaxBlock = 128;
  BlockHasher(size_t block_bytes, std::vector<uint64_t>& out)
      : block_bytes_(block_bytes), out_(out) {}

  void Add(std::string_view bytes) {
    while (!bytes.empty()) {
      const size_t take = std::min(block_bytes_ - fill_, bytes.size());
      std::memcpy(buffer_.data() + fill_, bytes.data(), take);
      fill_ += take;
      bytes.remove_prefix(take);
      if (fill_ == block_bytes_) Flush();
    }
  }
  void AddId(int64_t id) {
    char bytes[sizeof id];
    std::memcpy(bytes, &id, sizeof id);
    Add(std::string_view(bytes, sizeof bytes));
  }

 private:
  void Flush() {
    constexpr uint64_t kPrime1 = 0x9E3779B185EBCA87ULL, kPrime2 = 0xC2B2AE3D27D4EB4FULL,
                       kPrime5 = 0x27D4EB2F165667C5ULL;
    uint64_t h = parent_ + kPrime5;
    for (size_t i = 0; i < block_bytes_; i += sizeof(uint64_t)) {
      uint64_t word;
      std::memcpy(&word, buffer_.data() + i, sizeof word);
      h = std::rotl(h + word * kPrime2, 31) * kPrime1;
    }
    parent_ = dataplane::Mix64(h);
    out_.push_back(parent_);
    fill_ = 0;
  }

  const size_t block_bytes_;  // a multiple of 8, at most kMaxBlock
  std::vector<uint64_t>& out_;
  std::array<char, kMaxBlock> buffer_;
  size_t fill_ = 0;
  uint64_t parent_ = 0;
};

// Calls `text` with each text piece of a message's content: a string, or its parts' `text`.
template <typename Text>
void ForEachText(const element& content, Text&& text) {
  std::string_view s;
  if (content.get_string().get(s) == simdjson::SUCCESS) {
    text(s);
    return;
  }
  array parts;
  if (content.get_array().get(parts) != simdjson::SUCCESS) return;
  for (const element part : parts) {
    object o;
    if (part.get_object().get(o) != simdjson::SUCCESS) continue;
    if (const auto t = Member<std::string_view>(o, "text")) text(*t);
  }
}

// The prompt's size and block hashes (openai_fields.h).
void ScanPrompt(const object& body, RequestFields& fields) {
  PromptSize& size = fields.prompt;
  BlockHasher text_blocks(kPromptBlockBytes, fields.block_hashes);
  const auto text = [&](std::string_view s, bool hashed) {
    size.text_bytes += s.size();
    if (hashed) text_blocks.Add(s);
  };
  if (const auto messages = Member<array>(body, "messages")) {
    for (const element m : *messages) {
      object message;
      if (m.get_object().get(message) != simdjson::SUCCESS) continue;
      if (const auto role = Member<std::string_view>(message, "role")) text(*role, true);
      if (const auto content = Member<element>(message, "content")) {
        ForEachText(*content, [&](std::string_view s) { text(s, true); });
      }
      text(std::string_view("\0", 1), true);
    }
    return;
  }
  const auto prompt = Member<element>(body, "prompt");
  if (!prompt.has_value()) return;
  std::string_view s;
  if (prompt->get_string().get(s) == simdjson::SUCCESS) {
    text(s, true);
    return;
  }
  array list;
  if (prompt->get_array().get(list) != simdjson::SUCCESS) return;
  // Token ids (one prompt), strings (a batch) or lists of token ids (a batch).
  BlockHasher id_blocks(kPromptBlockIds * sizeof(int64_t), fields.block_hashes);
  bool first = true;
  for (const element e : list) {
    array ids;
    if (e.get_string().get(s) == simdjson::SUCCESS) {
      text(s, first);
      first = false;
    } else if (e.get_array().get(ids) == simdjson::SUCCESS) {
      size.token_ids += ids.size();
      if (first) {
        for (const element id : ids) {
          if (const std::optional<int64_t> value = Integer(id)) id_blocks.AddId(*value);
        }
      }
      first = false;
    } else if (const std::optional<int64_t> value = Integer(e)) {
      ++size.token_ids;
      id_blocks.AddId(*value);
    }
  }
}

}  // namespace

RequestFields ScanRequestFields(absl::string_view body, size_t prefix_bytes) {
  RequestFields fields;
  const std::optional<object> json = ParseObject(body);
  if (!json.has_value()) return fields;
  if (const auto user = Member<std::string_view>(*json, "user")) fields.user.emplace(*user);
  fields.stream = Member<bool>(*json, "stream").value_or(false);
  fields.system = SystemKey(*json, prefix_bytes);
  ScanPrompt(*json, fields);
  return fields;
}

std::optional<std::string> RoutingKey(const std::vector<std::string>& key_from,
                                      const std::optional<std::string>& header,
                                      const RequestFields& fields) {
  for (const std::string& source : key_from) {
    if (source == "header" && header.has_value() && !header->empty()) return header;
    if (source == "user" && fields.user.has_value()) return fields.user;
    if (source == "system" && fields.system.has_value()) return fields.system;
  }
  return std::nullopt;
}

std::optional<Usage> ReadUsage(absl::string_view text) {
  const std::optional<object> json = ParseObject(text);
  if (!json.has_value()) return std::nullopt;
  const auto usage = Member<object>(*json, "usage");
  if (!usage.has_value()) return std::nullopt;
  const auto prompt = Member<uint64_t>(*usage, "prompt_tokens");
  if (!prompt.has_value()) return std::nullopt;
  Usage out{.prompt_tokens = *prompt, .cached_tokens = std::nullopt};
  if (const auto completion = Member<uint64_t>(*usage, "completion_tokens")) {
    out.completion_tokens = *completion;
  }
  if (const auto details = Member<object>(*usage, "prompt_tokens_details")) {
    const auto cached = Member<uint64_t>(*details, "cached_tokens");
    if (cached.has_value() && *cached <= out.prompt_tokens) out.cached_tokens = *cached;
  }
  return out;
}

void UsageScanner::Line(absl::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (!absl::ConsumePrefix(&line, "data:")) return;
  if (!line.empty() && line.front() == ' ') line.remove_prefix(1);
  // Only an event that carries usage is worth parsing; most chunks are token deltas.
  if (line.find("\"usage\"") == absl::string_view::npos) return;
  if (std::optional<Usage> u = ReadUsage(line); u.has_value()) usage_ = u;
}

void UsageScanner::Feed(absl::string_view bytes) {
  while (!bytes.empty()) {
    const size_t nl = bytes.find('\n');
    if (nl == absl::string_view::npos) {
      if (skipping_) return;
      if (partial_.size() + bytes.size() > kMaxLine) {
        partial_.clear();
        skipping_ = true;
        return;
      }
      partial_.append(bytes.data(), bytes.size());
      return;
    }
    if (skipping_) {
      skipping_ = false;
    } else if (partial_.empty()) {
      Line(bytes.substr(0, nl));
    } else {
      partial_.append(bytes.data(), nl);
      Line(partial_);
      partial_.clear();
    }
    bytes.remove_prefix(nl + 1);
  }
}

std::optional<std::string> ModelIdOfPath(absl::string_view path) {
  if (!absl::ConsumePrefix(&path, "/v1/models/") || path.empty()) return std::nullopt;
  std::string id;
  id.reserve(path.size());
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i] != '%') {
      id.push_back(path[i]);
      continue;
    }
    int value = 0;
    if (i + 2 >= path.size() || !absl::ascii_isxdigit(path[i + 1]) ||
        !absl::ascii_isxdigit(path[i + 2])) {
      return std::nullopt;
    }
    for (const char c : path.substr(i + 1, 2)) {
      value = value * 16 + (absl::ascii_isdigit(c) ? c - '0' : absl::ascii_tolower(c) - 'a' + 10);
    }
    id.push_back(static_cast<char>(value));
    i += 2;
  }
  return id;
}

absl::StatusOr<std::optional<std::string>> FindModel(absl::string_view list, absl::string_view id) {
  const nlohmann::ordered_json json = nlohmann::ordered_json::parse(list, nullptr, false);
  if (!json.is_object() || !json.contains("data") || !json["data"].is_array()) {
    return absl::InvalidArgumentError("the /v1/models answer is not a model list (no data array)");
  }
  for (const nlohmann::ordered_json& model : json["data"]) {
    const auto it = model.is_object() ? model.find("id") : model.end();
    if (it != model.end() && it->is_string() && it->get_ref<const std::string&>() == id) {
      return model.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
  }
  return std::nullopt;
}

std::string ErrorBody(absl::string_view message, absl::string_view type, absl::string_view code) {
  nlohmann::json body = {
      {"error",
       {{"message", std::string(message)},
        {"type", std::string(type)},
        {"param", nullptr},
        {"code", code.empty() ? nlohmann::json(nullptr) : nlohmann::json(std::string(code))}}}};
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace cacheroute::frontend
