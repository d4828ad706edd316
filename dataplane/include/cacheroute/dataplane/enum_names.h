// Enum ↔ name tables: one constexpr array of {value, name} pairs per enum, the single list from
// which the enum's name lookup, its parse and the list of its names (for error messages) follow.
//
// Contract: names are string literals, distinct and matched exactly (case-sensitive). NameOf
// answers "unknown" for a value the table does not list, ParseName nullopt for a name it does not
// list; JoinNames joins the names in table order. Assert IsEnumTable(table, count) next to each
// table, with the enum's count (or IsEnumTable(table, last) with its last enumerator), so that a
// table cannot miss or repeat an enumerator: it holds when the table has `count` entries, entry i
// has the value i, and every name is non-empty and distinct.
//
// Usage:
//   enum class Color : uint8_t { kRed, kBlue };
//   constexpr EnumName<Color> kColorNames[] = {{Color::kRed, "red"}, {Color::kBlue, "blue"}};
//   static_assert(IsEnumTable(kColorNames, Color::kBlue));
//   NameOf(kColorNames, Color::kBlue);  // "blue";  ParseName(kColorNames, "red") == Color::kRed
//   JoinNames(kColorNames);             // "red, blue"
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace cacheroute::dataplane {

template <typename E>
struct EnumName {
  E value;
  const char* name;
};

template <typename E, size_t N>
constexpr const char* NameOf(const EnumName<E> (&table)[N], E value) {
  for (const EnumName<E>& entry : table) {
    if (entry.value == value) return entry.name;
  }
  return "unknown";
}

template <typename E, size_t N>
constexpr std::optional<E> ParseName(const EnumName<E> (&table)[N], std::string_view name) {
  for (const EnumName<E>& entry : table) {
    if (name == entry.name) return entry.value;
  }
  return std::nullopt;
}

template <typename E, size_t N>
std::string JoinNames(const EnumName<E> (&table)[N], std::string_view separator = ", ") {
  std::string joined;
  for (size_t i = 0; i < N; ++i) {
    if (i > 0) joined += separator;
    joined += table[i].name;
  }
  return joined;
}

template <typename E, size_t N>
constexpr bool IsEnumTable(const EnumName<E> (&table)[N], size_t count) {
  if (N != count) return false;
  for (size_t i = 0; i < N; ++i) {
    const std::string_view name = table[i].name;
    if (table[i].value != static_cast<E>(i) || name.empty()) return false;
    for (size_t j = 0; j < i; ++j) {
      if (name == table[j].name) return false;
    }
  }
  return true;
}

template <typename E, size_t N>
constexpr bool IsEnumTable(const EnumName<E> (&table)[N], E last) {
  return IsEnumTable(table, static_cast<size_t>(last) + 1);
}

}  // namespace cacheroute::dataplane
