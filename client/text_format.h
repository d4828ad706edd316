// Small text helpers shared by the rates parser and the plan formatters: JSON and CSV escaping,
// shortest round-trip numbers, UTF-8 checks, and safe rendering of arbitrary keys in error
// messages and terminal tables.
#pragma once

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace cacheroute::client {

// True if `s` is well-formed UTF-8 (no overlong forms, surrogates or code points > U+10FFFF).
bool IsValidUtf8(absl::string_view s);

// `s` in double quotes for an error message: `"` and `\` backslash-escaped, control bytes and
// ill-formed UTF-8 as \n, \t, \r or \xNN, cut to about 60 bytes (on a UTF-8 boundary) with "..."
// appended.
std::string QuoteForMessage(absl::string_view s);

// `s` cut like QuoteForMessage does, without quoting. For text already known to be printable.
std::string ShortenForMessage(absl::string_view s);

// Appends `s` as a JSON string literal (with the quotes). Escapes `"`, `\` and every control
// character; ill-formed UTF-8 bytes become U+FFFD so the output is always valid JSON.
void AppendJsonString(std::string* out, absl::string_view s);

// Appends the shortest decimal text that parses back to exactly `v` (std::to_chars). `v` must be
// finite; the result is a valid JSON number.
void AppendShortestDouble(std::string* out, double v);
std::string ShortestDouble(double v);

// `s` as one RFC 4180 field: unchanged unless it contains a comma, a quote, CR or LF, in which
// case it is quoted with inner quotes doubled.
std::string CsvField(absl::string_view s);

// `s` for one terminal cell: control bytes and ill-formed UTF-8 shown as \xNN (or \n, \t, \r), at
// most `max_columns` code points, ending in "…" when cut. `*columns` (optional) receives the
// number of code points in the result, for alignment.
std::string DisplayText(absl::string_view s, size_t max_columns, size_t* columns = nullptr);

}  // namespace cacheroute::client
