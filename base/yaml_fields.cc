// See yaml_fields.h. The planner's configuration loader was the first user; the gateway's shares
// these so that both read and report a value the same way.
#include "base/yaml_fields.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"
#include "yaml-cpp/eventhandler.h"

namespace cacheroute::base::yaml {

std::string Quote(absl::string_view text) {
  return absl::StrCat("\"", absl::CHexEscape(text), "\"");
}

absl::Status Invalid(absl::string_view name, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(name, ": ", problem));
}

absl::StatusOr<HostPort> SplitHostPort(absl::string_view name, absl::string_view value,
                                       absl::string_view ipv6_example) {
  const size_t colon = value.rfind(':');
  if (colon == absl::string_view::npos) {
    return Invalid(name, absl::StrCat("must be HOST:PORT, got ", Quote(value)));
  }
  absl::string_view host = value.substr(0, colon);
  const absl::string_view port = value.substr(colon + 1);
  if (host.empty() || (host.front() == '[') != (host.back() == ']') ||
      (host.front() == '[' && host.size() < 3)) {
    return Invalid(name,
                   absl::StrCat("must be HOST:PORT with a non-empty host, got ", Quote(value)));
  }
  if (host.front() != '[' && absl::StrContains(host, ':')) {
    return Invalid(name, absl::StrCat("an IPv6 host goes in brackets, e.g. ", ipv6_example,
                                      ", got ", Quote(value)));
  }
  if (host.front() == '[') host = host.substr(1, host.size() - 2);
  int number = 0;
  if (port.empty() || !std::all_of(port.begin(), port.end(), absl::ascii_isdigit) ||
      !absl::SimpleAtoi(port, &number) || number > 65535) {
    return Invalid(name,
                   absl::StrCat("port must be an integer between 0 and 65535, got ", Quote(value)));
  }
  return HostPort{std::string(host), number};
}

absl::Status CheckHostPort(absl::string_view name, absl::string_view value, bool allow_empty,
                           absl::string_view ipv6_example) {
  if (value.empty() && allow_empty) return absl::OkStatus();
  return SplitHostPort(name, value, ipv6_example).status();
}

absl::Status CheckPositiveFinite(absl::string_view name, double value) {
  if (std::isfinite(value) && value > 0) return absl::OkStatus();
  return Invalid(name, absl::StrCat("must be a finite number > 0, got ", value));
}

absl::Status CheckNonNegativeFinite(absl::string_view name, double value) {
  if (std::isfinite(value) && value >= 0) return absl::OkStatus();
  return Invalid(name, absl::StrCat("must be a finite number >= 0, got ", value));
}

absl::Status CheckPositiveDuration(absl::string_view name, absl::Duration value) {
  if (value > absl::ZeroDuration() && value != absl::InfiniteDuration()) return absl::OkStatus();
  return Invalid(name,
                 absl::StrCat("must be a finite duration > 0, got ", absl::FormatDuration(value)));
}

absl::Status CheckOffOrPositiveDuration(absl::string_view name, absl::Duration value) {
  if (value >= absl::ZeroDuration() && value != absl::InfiniteDuration()) return absl::OkStatus();
  return Invalid(name, absl::StrCat("must be 0 (off) or a finite duration > 0, got ",
                                    absl::FormatDuration(value)));
}

absl::Status CheckIntegerRange(absl::string_view name, uint64_t value, uint64_t min, uint64_t max) {
  if (value >= min && value <= max) return absl::OkStatus();
  if (max == std::numeric_limits<uint64_t>::max()) {
    return Invalid(name, absl::StrCat("must be an integer >= ", min, ", got ", value));
  }
  return Invalid(name,
                 absl::StrCat("must be an integer between ", min, " and ", max, ", got ", value));
}

absl::StatusOr<double> ParseNumber(absl::string_view name, absl::string_view text) {
  double value = 0;
  // YAML spells infinity and NaN its own way; map them so the range check can name them.
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == ".inf" || lower == "+.inf") return std::numeric_limits<double>::infinity();
  if (lower == "-.inf") return -std::numeric_limits<double>::infinity();
  if (lower == ".nan") return std::numeric_limits<double>::quiet_NaN();
  if (!absl::SimpleAtod(text, &value)) {
    return Invalid(name, absl::StrCat("expected a number, got ", Quote(text)));
  }
  return value;
}

absl::StatusOr<uint64_t> ParseInteger(absl::string_view name, absl::string_view text, uint64_t min,
                                      uint64_t max) {
  int64_t negative = 0;
  if (absl::StartsWith(absl::StripLeadingAsciiWhitespace(text), "-") &&
      absl::SimpleAtoi(text, &negative)) {
    if (max == std::numeric_limits<uint64_t>::max()) {
      return Invalid(name, absl::StrCat("must be an integer >= ", min, ", got ", negative));
    }
    return Invalid(
        name, absl::StrCat("must be an integer between ", min, " and ", max, ", got ", negative));
  }
  uint64_t value = 0;
  if (!absl::SimpleAtoi(text, &value)) {
    return Invalid(name, absl::StrCat("expected an integer, got ", Quote(text)));
  }
  if (absl::Status status = CheckIntegerRange(name, value, min, max); !status.ok()) return status;
  return value;
}

absl::StatusOr<absl::Duration> ParseDurationText(absl::string_view name, absl::string_view text,
                                                 bool zero_is_off) {
  absl::Duration value;
  if (!absl::ParseDuration(absl::StripAsciiWhitespace(text), &value)) {
    return Invalid(
        name,
        absl::StrCat(Quote(text), " is not a duration (write e.g. \"10s\", \"500ms\", \"2m\")"));
  }
  if (absl::Status status = zero_is_off ? CheckOffOrPositiveDuration(name, value)
                                        : CheckPositiveDuration(name, value);
      !status.ok()) {
    return status;
  }
  return value;
}

std::string DescribeNode(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
      return "null";
    case YAML::NodeType::Sequence:
      return "a sequence";
    case YAML::NodeType::Map:
      return "a mapping";
    case YAML::NodeType::Scalar:
      return Quote(node.Scalar());
    case YAML::NodeType::Undefined:
      break;
  }
  return "nothing";
}

// Any scalar, quoted or not (a name like `0` or a port-like `50051` is still a string).
absl::StatusOr<std::string> YamlString(absl::string_view name, const YAML::Node& node) {
  if (!node.IsScalar()) {
    return Invalid(name, absl::StrCat("expected a string, got ", DescribeNode(node),
                                      node.IsNull() ? " (write \"\" for an empty string)" : ""));
  }
  return node.Scalar();
}

// A plain (unquoted) scalar: `q_cap: "8"` is a string in YAML, and a number where a string is
// meant usually is a mistake, so typed keys reject quoted values.
absl::StatusOr<std::string> YamlPlainScalar(absl::string_view name, const YAML::Node& node,
                                            absl::string_view expected) {
  if (!node.IsScalar()) {
    return Invalid(name, absl::StrCat("expected ", expected, ", got ", DescribeNode(node)));
  }
  if (node.Tag() == "!") {
    return Invalid(name, absl::StrCat("expected ", expected, ", got the quoted string ",
                                      Quote(node.Scalar())));
  }
  return node.Scalar();
}

namespace {

// An unquoted number that passes `check`.
absl::StatusOr<double> YamlCheckedNumber(absl::string_view name, const YAML::Node& node,
                                         absl::Status (*check)(absl::string_view, double)) {
  CACHEROUTE_ASSIGN_OR_RETURN(std::string text, YamlPlainScalar(name, node, "a number"));
  CACHEROUTE_ASSIGN_OR_RETURN(double value, ParseNumber(name, text));
  if (absl::Status status = check(name, value); !status.ok()) return status;
  return value;
}

}  // namespace

absl::StatusOr<double> YamlPositiveNumber(absl::string_view name, const YAML::Node& node) {
  return YamlCheckedNumber(name, node, CheckPositiveFinite);
}

absl::StatusOr<double> YamlNonNegativeNumber(absl::string_view name, const YAML::Node& node) {
  return YamlCheckedNumber(name, node, CheckNonNegativeFinite);
}

absl::StatusOr<uint64_t> YamlInteger(absl::string_view name, const YAML::Node& node, uint64_t min,
                                     uint64_t max) {
  CACHEROUTE_ASSIGN_OR_RETURN(std::string text, YamlPlainScalar(name, node, "an integer"));
  return ParseInteger(name, text, min, max);
}

absl::StatusOr<bool> YamlBool(absl::string_view name, const YAML::Node& node) {
  CACHEROUTE_ASSIGN_OR_RETURN(std::string text, YamlPlainScalar(name, node, "true or false"));
  const std::string lower = absl::AsciiStrToLower(text);
  if (lower == "true") return true;
  if (lower == "false") return false;
  return Invalid(name, absl::StrCat("expected true or false, got ", Quote(text)));
}

absl::StatusOr<absl::Duration> YamlDuration(absl::string_view name, const YAML::Node& node,
                                            bool zero_is_off) {
  if (!node.IsScalar()) {
    return Invalid(name,
                   absl::StrCat("expected a duration such as \"10s\", got ", DescribeNode(node)));
  }
  return ParseDurationText(name, node.Scalar(), zero_is_off);
}

namespace {

// Edit distance, for "did you mean" on unknown keys; keys are short.
size_t EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1] ? 1 : 0)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

absl::Status UnknownKey(absl::string_view prefix, absl::string_view key,
                        const std::vector<absl::string_view>& known) {
  const std::string name = absl::StrCat(prefix, absl::CHexEscape(key));
  absl::string_view closest;
  size_t best = std::numeric_limits<size_t>::max();
  for (const absl::string_view field : known) {
    // A truncated key ("cert" for "cert_file") is as good a guess as a typo.
    const bool truncated = key.size() >= 3 && absl::StartsWith(field, key);
    const size_t distance = truncated ? 0 : EditDistance(key, field);
    if (distance < best) {
      best = distance;
      closest = field;
    }
  }
  if (best <= 2 || best * 3 <= key.size()) {
    return Invalid(name, absl::StrCat("unknown key (did you mean ", prefix, closest, "?)"));
  }
  return Invalid(name, absl::StrCat("unknown key; known keys: ", absl::StrJoin(known, ", ")));
}

namespace {

// Remembers where the current document's first event is; ignores everything else.
class FirstMark final : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark&) override { mark_.reset(); }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override { Saw(mark); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { Saw(mark); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                const std::string&) override {
    Saw(mark);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                       YAML::EmitterStyle::value) override {
    Saw(mark);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t,
                  YAML::EmitterStyle::value) override {
    Saw(mark);
  }
  void OnMapEnd() override {}
  std::optional<int> pos() const { return mark_; }

 private:
  void Saw(const YAML::Mark& mark) {
    if (!mark_.has_value()) mark_ = mark.pos;
  }
  std::optional<int> mark_;
};

}  // namespace

YamlDocuments LoadDocuments(const std::string& text) {
  YamlDocuments documents;
  std::istringstream in(text);
  YAML::Parser parser(in);
  FirstMark mark;
  std::optional<int> previous;
  while (parser.HandleNextDocument(mark)) {
    if (documents.count > 0 && mark.pos() == previous) break;  // nothing consumed: stalled
    previous = mark.pos();
    ++documents.count;
  }
  // The first document on its own: YAML::Load reads just one, so it cannot stall.
  if (documents.count > 0) documents.first = YAML::Load(text);
  return documents;
}

absl::Status YamlExceptionStatus(const std::exception& e) {
  if (const auto* yaml = dynamic_cast<const YAML::Exception*>(&e)) {
    if (yaml->mark.is_null()) return absl::InvalidArgumentError(absl::StrCat("YAML: ", yaml->msg));
    return absl::InvalidArgumentError(absl::StrCat("line ", yaml->mark.line + 1, ", column ",
                                                   yaml->mark.column + 1, ": ", yaml->msg));
  }
  return absl::InternalError(absl::StrCat("parsing the YAML configuration: ", e.what()));
}

}  // namespace cacheroute::base::yaml
