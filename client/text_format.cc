// Escaping and number formatting for the client's outputs; see text_format.h.
#include "client/text_format.h"

#include <array>
#include <charconv>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace cacheroute::client {
namespace {

constexpr size_t kMessageBytes = 60;

// Length of the well-formed UTF-8 sequence starting at s[i], or 0 if it is ill-formed.
size_t Utf8SequenceLength(absl::string_view s, size_t i) {
  const auto byte = [&](size_t j) { return static_cast<unsigned char>(s[j]); };
  const unsigned char b0 = byte(i);
  if (b0 < 0x80) return 1;
  size_t len = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3;
    if (b0 == 0xE0) lo = 0xA0;  // overlong
    if (b0 == 0xED) hi = 0x9F;  // UTF-16 surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4;
    if (b0 == 0xF0) lo = 0x90;  // overlong
    if (b0 == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    return 0;
  }
  if (i + len > s.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t j = 2; j < len; ++j) {
    if (byte(i + j) < 0x80 || byte(i + j) > 0xBF) return 0;
  }
  return len;
}

// Appends a backslash escape for control byte `c`, or returns false if `c` is printable.
bool AppendControlEscape(std::string* out, unsigned char c) {
  switch (c) {
    case '\n':
      out->append("\\n");
      return true;
    case '\r':
      out->append("\\r");
      return true;
    case '\t':
      out->append("\\t");
      return true;
    default:
      if (c < 0x20 || c == 0x7F) {
        absl::StrAppendFormat(out, "\\x%02x", c);
        return true;
      }
      return false;
  }
}

// The longest prefix of `s` of at most kMessageBytes bytes that does not split a UTF-8 sequence.
absl::string_view MessagePrefix(absl::string_view s, bool* cut) {
  *cut = s.size() > kMessageBytes;
  if (!*cut) return s;
  size_t end = kMessageBytes;
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;
  return s.substr(0, end);
}

}  // namespace

bool IsValidUtf8(absl::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (i + 8 <= s.size()) {
      uint64_t word;
      std::memcpy(&word, s.data() + i, 8);
      if ((word & 0x8080808080808080u) == 0) {
        i += 8;
        continue;
      }
    }
    const size_t len = Utf8SequenceLength(s, i);
    if (len == 0) return false;
    i += len;
  }
  return true;
}

std::string QuoteForMessage(absl::string_view s) {
  bool cut = false;
  const absl::string_view prefix = MessagePrefix(s, &cut);
  std::string out = "\"";
  for (size_t i = 0; i < prefix.size();) {
    const auto c = static_cast<unsigned char>(prefix[i]);
    const size_t len = Utf8SequenceLength(prefix, i);
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(prefix[i]);
    } else if (len == 0) {
      absl::StrAppendFormat(&out, "\\x%02x", c);
    } else if (len > 1 || !AppendControlEscape(&out, c)) {
      out.append(prefix.data() + i, len);
      i += len;
      continue;
    }
    ++i;
  }
  out.append(cut ? "...\"" : "\"");
  return out;
}

std::string ShortenForMessage(absl::string_view s) {
  bool cut = false;
  std::string out(MessagePrefix(s, &cut));
  if (cut) out.append("...");
  return out;
}

void AppendJsonString(std::string* out, absl::string_view s) {
  out->push_back('"');
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(static_cast<char>(c));
      ++i;
      continue;
    }
    if (c < 0x20) {
      // \b \t \n \f \r have two-character escapes; the other control characters \u00XX.
      constexpr char kShortEscape[0x20] = {0, 0, 0, 0, 0, 0, 0, 0, 'b', 't', 'n', 0, 'f', 'r'};
      if (kShortEscape[c] != 0) {
        out->push_back('\\');
        out->push_back(kShortEscape[c]);
      } else {
        absl::StrAppendFormat(out, "\\u%04x", c);
      }
      ++i;
      continue;
    }
    const size_t len = Utf8SequenceLength(s, i);
    if (len == 0) {
      out->append("\\ufffd");
      ++i;
      continue;
    }
    out->append(s.data() + i, len);
    i += len;
  }
  out->push_back('"');
}

void AppendShortestDouble(std::string* out, double v) {
  std::array<char, 32> buffer;
  const auto [end, ec] = std::to_chars(buffer.data(), buffer.data() + buffer.size(), v);
  out->append(buffer.data(), end);
}

std::string ShortestDouble(double v) {
  std::string out;
  AppendShortestDouble(&out, v);
  return out;
}

std::string CsvField(absl::string_view s) {
  if (s.find_first_of(",\"\r\n") == absl::string_view::npos) return std::string(s);
  std::string out = "\"";
  for (const char ch : s) {
    if (ch == '"') out.push_back('"');
    out.push_back(ch);
  }
  out.push_back('"');
  return out;
}

std::string DisplayText(absl::string_view s, size_t max_columns, size_t* columns) {
  std::string out;
  size_t used = 0;
  for (size_t i = 0; i < s.size();) {
    std::string piece;
    size_t width = 0;
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t len = Utf8SequenceLength(s, i);
    if (len == 0) {
      piece = absl::StrFormat("\\x%02x", c);
      i += 1;
    } else if (len == 1 && AppendControlEscape(&piece, c)) {
      i += 1;
    } else {
      piece.assign(s.data() + i, len);
      i += len;
    }
    width = len <= 1 ? piece.size() : 1;
    // Leave room for the "…" unless this piece ends the text.
    const size_t room = i < s.size() ? max_columns - (max_columns > 0 ? 1 : 0) : max_columns;
    if (used + width > room) {
      if (max_columns > 0) {
        out.append("…");
        ++used;
      }
      break;
    }
    out.append(piece);
    used += width;
  }
  if (columns != nullptr) *columns = used;
  return out;
}

}  // namespace cacheroute::client
