// Command-line lists; see flag_lists.h.
#include "tools/eval/sim/study/flag_lists.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace cacheroute::sim::study {

absl::StatusOr<std::vector<double>> ParseNumberList(absl::string_view text,
                                                    absl::string_view flag) {
  std::vector<double> out;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    item = absl::StripAsciiWhitespace(item);
    double v = 0;
    if (item.empty() || !absl::SimpleAtod(item, &v) || !std::isfinite(v)) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": bad number \"", item, "\" in \"", text, "\""));
    }
    out.push_back(v);
  }
  return out;
}

namespace {

// Unsigned integers of type Int; `noun` names an item in the error ("bad seed …").
template <typename Int>
absl::StatusOr<std::vector<Int>> ParseIntegerList(absl::string_view text, absl::string_view flag,
                                                  absl::string_view noun) {
  std::vector<Int> out;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    item = absl::StripAsciiWhitespace(item);
    Int v = 0;
    if (item.empty() || !absl::SimpleAtoi(item, &v)) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, ": bad ", noun, " \"", item, "\" in \"", text, "\""));
    }
    out.push_back(v);
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<uint64_t>> ParseSeedList(absl::string_view text,
                                                    absl::string_view flag) {
  return ParseIntegerList<uint64_t>(text, flag, "seed");
}

absl::StatusOr<std::vector<uint32_t>> ParseCountList(absl::string_view text,
                                                     absl::string_view flag) {
  return ParseIntegerList<uint32_t>(text, flag, "count");
}

}  // namespace cacheroute::sim::study
