// Hand-written single-pass parser for the rates file (see rates_csv.h). The whole file is in
// memory and fields are views into it; a key is copied once, when its record is accepted.
#include "client/rates_csv.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"
#include "client/text_format.h"

namespace cacheroute::client {
namespace {

constexpr absl::string_view kBom = "\xEF\xBB\xBF";
// The headers: rates alone, or with each key's sizes for byte-aware planning.
constexpr absl::string_view kHeaders[] = {"key,rate", "key,rate,reusable_tokens",
                                          "key,rate,reusable_tokens,prompt_tokens"};
constexpr const char* kFieldNames[] = {"key", "rate", "reusable_tokens", "prompt_tokens"};
constexpr size_t kMaxFields = 4;

// Word-at-a-time multiply-xorshift hash. Not collision-resistant against crafted input, which
// costs only time in an offline tool.
uint64_t HashKey(absl::string_view key) {
  const auto mix = [](uint64_t x) {
    x *= 0xBF58476D1CE4E5B9u;
    return x ^ (x >> 31);
  };
  uint64_t h = 0x9E3779B97F4A7C15u ^ key.size();
  size_t i = 0;
  for (; i + 8 <= key.size(); i += 8) {
    uint64_t word;
    std::memcpy(&word, key.data() + i, 8);
    h = mix(h ^ word) * 0x94D049BB133111EBu;
  }
  uint64_t tail = 0;
  if (key.size() >= 8) {
    std::memcpy(&tail, key.data() + key.size() - 8, 8);  // overlaps the last whole word
  } else {
    for (; i < key.size(); ++i) tail = (tail << 8) | static_cast<unsigned char>(key[i]);
  }
  return mix(mix(h ^ tail) ^ (h >> 29));
}

// Finds duplicate keys in one pass: an open-addressing table of record indices, sized for the
// largest possible record count so it never grows. Slots are 4 bytes so the table stays in cache
// while the input streams past; the 32 high hash bits of every record are kept alongside, so a
// probe rarely has to read key bytes.
class KeyIndex {
 public:
  explicit KeyIndex(size_t max_keys) {
    size_t capacity = 16;
    while (capacity < 2 * max_keys) capacity *= 2;
    slots_.assign(capacity, kEmpty);
    mask_ = capacity - 1;
    tags_.reserve(max_keys);
  }

  // Starts loading the slot a key with this hash probes first, so the cache miss overlaps the
  // rest of the record's work.
  void Prefetch(uint64_t hash) const { __builtin_prefetch(&slots_[hash & mask_]); }

  // Records keys[index], which must be the next index and hash to `hash`, and returns -1, or
  // returns the index of an earlier equal key.
  int64_t Insert(const std::vector<std::string>& keys, uint32_t index, uint64_t hash) {
    const auto tag = static_cast<uint32_t>(hash >> 32);
    for (size_t slot = hash & mask_;; slot = (slot + 1) & mask_) {
      const uint32_t other = slots_[slot];
      if (other == kEmpty) {
        slots_[slot] = index;
        tags_.push_back(tag);
        return -1;
      }
      if (tags_[other] == tag && keys[other] == keys[index]) return other;
    }
  }

 private:
  static constexpr uint32_t kEmpty = UINT32_MAX;
  std::vector<uint32_t> slots_;
  std::vector<uint32_t> tags_;  // tags_[i]: high hash bits of keys[i]
  size_t mask_ = 0;
};

size_t CountLines(absl::string_view text) {
  size_t lines = 1;
  const char* p = text.data();
  const char* const end = text.data() + text.size();
  while ((p = static_cast<const char*>(std::memchr(p, '\n', end - p))) != nullptr) {
    ++lines;
    ++p;
  }
  return lines;
}

class Parser {
 public:
  explicit Parser(absl::string_view text) : text_(text) {
    if (text_.substr(0, kBom.size()) == kBom) text_.remove_prefix(kBom.size());
  }

  absl::StatusOr<RatesCsv> Parse() {
    if (absl::Status s = ParseHeader(); !s.ok()) return s;
    RatesCsv out;
    const size_t max_records = CountLines(text_);
    out.keys.reserve(max_records);
    out.rates.reserve(max_records);
    if (fields_ > 2) out.tokens.reserve(max_records);
    std::vector<uint64_t> record_lines;
    record_lines.reserve(max_records);
    KeyIndex seen(max_records);

    while (SkipBlankLines()) {
      const uint64_t line = line_;
      absl::string_view fields[kMaxFields];
      size_t count = 0;
      if (absl::Status s = ParseRecord(fields, &count); !s.ok()) return s;
      if (count != fields_) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "line %d: expected %d fields (%s), got %d", line, fields_, header_, count));
      }
      if (fields[0].empty()) {
        return absl::InvalidArgumentError(absl::StrFormat("line %d: field 'key': empty key", line));
      }
      const uint64_t key_hash = HashKey(fields[0]);
      seen.Prefetch(key_hash);
      if (!IsValidUtf8(fields[0])) {
        return absl::InvalidArgumentError(absl::StrFormat(
            "line %d: field 'key': %s is not valid UTF-8", line, QuoteForMessage(fields[0])));
      }
      double rate = 0.0;
      if (absl::Status s = ParseRate(fields[1], line, "rate", &rate); !s.ok()) return s;
      planner::KeyTokens tokens;
      for (size_t f = 2; f < fields_; ++f) {
        if (IsBlank(fields[f])) continue;  // not measured
        double& value = f == 2 ? tokens.reusable : tokens.prompt;
        if (absl::Status s = ParseRate(fields[f], line, kFieldNames[f], &value); !s.ok()) {
          return s;
        }
      }
      if (tokens.prompt >= 0 && tokens.reusable > tokens.prompt) {
        return absl::InvalidArgumentError(
            absl::StrFormat("line %d: field 'reusable_tokens': %g is more than prompt_tokens (%g)",
                            line, tokens.reusable, tokens.prompt));
      }
      if (tokens.prompt >= 0 && tokens.reusable < 0) {
        return absl::InvalidArgumentError(
            absl::StrFormat("line %d: field 'prompt_tokens': given without reusable_tokens", line));
      }

      out.keys.emplace_back(fields[0]);
      const int64_t first =
          seen.Insert(out.keys, static_cast<uint32_t>(out.keys.size() - 1), key_hash);
      if (first >= 0) {
        return absl::InvalidArgumentError(
            absl::StrFormat("line %d: field 'key': duplicate key %s (first on line %d)", line,
                            QuoteForMessage(fields[0]), record_lines[first]));
      }
      record_lines.push_back(line);
      out.rates.push_back(rate);
      if (fields_ > 2) out.tokens.push_back(tokens);
    }
    return out;
  }

 private:
  bool AtEnd() const { return pos_ >= text_.size(); }

  // Length of the line ending at pos_ ("\n" or "\r\n"), 0 if pos_ is not at a line end. A lone
  // "\r" counts only at the very end of the input.
  size_t LineEndLength() const {
    if (AtEnd()) return 0;
    if (text_[pos_] == '\n') return 1;
    if (text_[pos_] == '\r') {
      if (pos_ + 1 == text_.size()) return 1;
      if (text_[pos_ + 1] == '\n') return 2;
    }
    return 0;
  }

  // Skips empty lines; returns false at the end of the input.
  bool SkipBlankLines() {
    while (!AtEnd()) {
      const size_t eol = LineEndLength();
      if (eol == 0) return true;
      pos_ += eol;
      ++line_;
    }
    return false;
  }

  static bool IsBlank(absl::string_view field) {
    return std::all_of(field.begin(), field.end(), [](char c) { return c == ' ' || c == '\t'; });
  }

  absl::Status ParseHeader() {
    absl::string_view expected = "expected header 'key,rate'";
    if (!SkipBlankLines()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("line %d: %s, got end of input", line_, expected));
    }
    size_t end = text_.find('\n', pos_);
    if (end == absl::string_view::npos) end = text_.size();
    absl::string_view header = text_.substr(pos_, end - pos_);
    if (!header.empty() && header.back() == '\r') header.remove_suffix(1);
    const auto known = std::find(std::begin(kHeaders), std::end(kHeaders), header);
    if (known == std::end(kHeaders)) {
      // A header with more columns was meant to carry sizes: say which ones.
      if (absl::StartsWith(header, "key,rate,reusable")) {
        expected =
            "expected header 'key,rate', 'key,rate,reusable_tokens' or "
            "'key,rate,reusable_tokens,prompt_tokens'";
      }
      return absl::InvalidArgumentError(
          absl::StrFormat("line %d: %s, got %s", line_, expected, QuoteForMessage(header)));
    }
    fields_ = 2 + static_cast<size_t>(known - std::begin(kHeaders));
    header_ = *known;
    pos_ = end == text_.size() ? end : end + 1;
    ++line_;
    return absl::OkStatus();
  }

  // Parses one record starting at pos_ and consumes its line end. Keeps the first kMaxFields
  // fields and counts them all.
  absl::Status ParseRecord(absl::string_view (&fields)[kMaxFields], size_t* count) {
    const uint64_t record_line = line_;
    *count = 0;
    while (true) {
      const size_t index = *count;
      const char* name = index < fields_ ? kFieldNames[index] : "extra";
      absl::string_view value;
      if (!AtEnd() && text_[pos_] == '"') {
        std::string* unescaped = index < kMaxFields ? &unescaped_[index] : &unescaped_extra_;
        if (absl::Status s = ParseQuoted(record_line, name, &value, unescaped); !s.ok()) return s;
      } else {
        const size_t start = pos_;
        const char* p = text_.data() + pos_;
        const char* const end = text_.data() + text_.size();
        while (p < end && *p != ',' && *p != '\n' && *p != '"') ++p;
        pos_ = p - text_.data();
        if (p < end && *p == '"') {
          return absl::InvalidArgumentError(absl::StrFormat(
              "line %d: field '%s': quote inside an unquoted field; quote the whole field and "
              "double the quote (\"\")",
              record_line, name));
        }
        value = text_.substr(start, pos_ - start);
        if (!value.empty() && value.back() == '\r' && (AtEnd() || text_[pos_] == '\n')) {
          value.remove_suffix(1);
        }
      }
      if (index < kMaxFields) fields[index] = value;
      ++*count;
      if (!AtEnd() && text_[pos_] == ',') {
        ++pos_;
        continue;
      }
      if (!AtEnd()) {
        pos_ += LineEndLength();  // non-zero: both field parsers stop only at ',' or a line end
        ++line_;
      }
      return absl::OkStatus();
    }
  }

  // pos_ is at the opening quote. On return pos_ is at the ',' or line end after the closing one.
  absl::Status ParseQuoted(uint64_t record_line, const char* name, absl::string_view* value,
                           std::string* unescaped) {
    ++pos_;
    const size_t start = pos_;
    bool has_escapes = false;
    while (true) {
      const size_t quote = text_.find('"', pos_);
      if (quote == absl::string_view::npos) {
        return absl::InvalidArgumentError(
            absl::StrFormat("line %d: field '%s': unterminated quoted field", record_line, name));
      }
      line_ += std::count(text_.begin() + pos_, text_.begin() + quote, '\n');
      pos_ = quote + 1;
      if (!AtEnd() && text_[pos_] == '"') {
        has_escapes = true;
        ++pos_;
        continue;
      }
      *value = text_.substr(start, quote - start);
      break;
    }
    if (!AtEnd() && text_[pos_] != ',' && LineEndLength() == 0) {
      return absl::InvalidArgumentError(
          absl::StrFormat("line %d: field '%s': unexpected %s after the closing quote", line_, name,
                          QuoteForMessage(text_.substr(pos_, 1))));
    }
    if (has_escapes) {
      unescaped->clear();
      for (size_t i = 0; i < value->size(); ++i) {
        unescaped->push_back((*value)[i]);
        if ((*value)[i] == '"') ++i;
      }
      *value = *unescaped;
    }
    return absl::OkStatus();
  }

  // A finite number ≥ 0 in field `name` (the rate or a size).
  static absl::Status ParseRate(absl::string_view field, uint64_t line, const char* name,
                                double* rate) {
    const auto is_space = [](char c) { return c == ' ' || c == '\t'; };
    size_t first = 0;
    size_t last = field.size();
    while (first < last && is_space(field[first])) ++first;
    while (last > first && is_space(field[last - 1])) --last;
    if (first == last) {
      return absl::InvalidArgumentError(
          absl::StrFormat("line %d: field '%s': empty %s", line, name,
                          absl::string_view(name) == "rate" ? "rate" : "value"));
    }
    const absl::string_view text = field.substr(first, last - first);
    double value = 0.0;
    const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    auto error = [&](absl::string_view what) {
      return absl::InvalidArgumentError(
          absl::StrCat("line ", line, ": field '", name, "': ", what));
    };
    if (ec == std::errc::invalid_argument || end != text.data() + text.size()) {
      return error(absl::StrCat(QuoteForMessage(text), " is not a number"));
    }
    if (ec == std::errc() && std::isfinite(value) && value >= 0) {
      *rate = value == 0 ? 0.0 : value;  // no -0
      return absl::OkStatus();
    }
    const std::string shown = ShortenForMessage(text);
    if (ec == std::errc::result_out_of_range) {
      return error(absl::StrCat(shown, " is out of range for a double"));
    }
    if (std::isnan(value)) return error(absl::StrCat(shown, " is NaN"));
    if (std::isinf(value)) return error(absl::StrCat(shown, " is infinite"));
    return error(absl::StrCat(shown, " is negative"));
  }

  absl::string_view text_;
  size_t pos_ = 0;
  uint64_t line_ = 1;
  size_t fields_ = 2;  // per record, from the header
  absl::string_view header_;
  // Backing store for quoted fields with `""` escapes, reused from record to record.
  std::string unescaped_[kMaxFields];
  std::string unescaped_extra_;
};

}  // namespace

absl::StatusOr<RatesCsv> ParseRatesCsv(absl::string_view text) { return Parser(text).Parse(); }

RankedRates RankKeys(RatesCsv csv) {
  const size_t n = csv.keys.size();
  std::vector<std::pair<absl::string_view, uint32_t>> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = {csv.keys[i], static_cast<uint32_t>(i)};
  std::sort(order.begin(), order.end());
  RankedRates out;
  out.key_names.resize(n);
  out.rates.resize(n);
  out.tokens = std::move(csv.tokens);
  for (size_t rank = 0; rank < n; ++rank) {
    const uint32_t i = order[rank].second;
    out.key_names[rank] = std::move(csv.keys[i]);
    out.rates[i] = {.key = rank, .rate = csv.rates[i]};
  }
  return out;
}

}  // namespace cacheroute::client
