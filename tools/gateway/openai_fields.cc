// See openai_fields.h.
#include "tools/gateway/openai_fields.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "cacheroute/dataplane/key_id.h"

namespace cacheroute::gateway {
namespace {

using Json = nlohmann::json;

std::string Hashed(absl::string_view kind, absl::string_view text) {
  return absl::StrFormat("%s:%016x", kind, dataplane::KeyId(std::string_view(text.data(), text.size())));
}

// A message's content as text: a string, or the `text` of its parts.
std::string ContentText(const Json& content) {
  if (content.is_string()) return content.get<std::string>();
  std::string out;
  if (content.is_array()) {
    for (const Json& part : content) {
      if (part.is_object()) {
        const auto text = part.find("text");
        if (text != part.end() && text->is_string()) out += text->get_ref<const std::string&>();
      }
    }
  }
  return out;
}

std::optional<std::string> SystemKey(const Json& body, size_t prefix_bytes) {
  const auto messages = body.find("messages");
  if (messages != body.end() && messages->is_array()) {
    std::string system;
    bool any = false;
    for (const Json& m : *messages) {
      if (!m.is_object()) continue;
      const auto role = m.find("role");
      if (role == m.end() || !role->is_string() || role->get_ref<const std::string&>() != "system") {
        continue;
      }
      const auto content = m.find("content");
      if (content == m.end()) continue;
      if (any) system += '\n';
      system += ContentText(*content);
      any = true;
    }
    if (!any) return std::nullopt;
    return Hashed("system", system);
  }
  const auto prompt = body.find("prompt");
  if (prompt == body.end()) return std::nullopt;
  const Json* text = &*prompt;
  if (prompt->is_array() && !prompt->empty() && (*prompt)[0].is_string()) text = &(*prompt)[0];
  if (text->is_string()) {
    const std::string& s = text->get_ref<const std::string&>();
    if (s.empty()) return std::nullopt;
    return Hashed("prompt", absl::string_view(s).substr(0, prefix_bytes));
  }
  if (text->is_array() && !text->empty()) {  // token ids
    std::string ids;
    const size_t n = std::max<size_t>(1, prefix_bytes / 4);
    for (size_t i = 0; i < text->size() && i < n; ++i) {
      const Json& id = (*text)[i];
      if (!id.is_number_integer()) return std::nullopt;
      absl::StrAppendFormat(&ids, "%d,", id.get<int64_t>());
    }
    return Hashed("prompt", ids);
  }
  return std::nullopt;
}

}  // namespace

RequestFields ScanRequestFields(absl::string_view body, size_t prefix_bytes) {
  RequestFields fields;
  const Json json = Json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) return fields;
  const auto user = json.find("user");
  if (user != json.end() && user->is_string()) fields.user = user->get<std::string>();
  const auto stream = json.find("stream");
  fields.stream = stream != json.end() && stream->is_boolean() && stream->get<bool>();
  fields.system = SystemKey(json, prefix_bytes);
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
  const Json json = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (!json.is_object()) return std::nullopt;
  const auto usage = json.find("usage");
  if (usage == json.end() || !usage->is_object()) return std::nullopt;
  const auto prompt = usage->find("prompt_tokens");
  if (prompt == usage->end() || !prompt->is_number_unsigned()) return std::nullopt;
  Usage out{.prompt_tokens = prompt->get<uint64_t>(), .cached_tokens = std::nullopt};
  const auto details = usage->find("prompt_tokens_details");
  if (details != usage->end() && details->is_object()) {
    const auto cached = details->find("cached_tokens");
    if (cached != details->end() && cached->is_number_unsigned() &&
        cached->get<uint64_t>() <= out.prompt_tokens) {
      out.cached_tokens = cached->get<uint64_t>();
    }
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

}  // namespace cacheroute::gateway
