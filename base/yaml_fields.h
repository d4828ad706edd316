// YAML configuration support shared by cacheroute-planner (config.h) and cacheroute-gateway
// (tools/gateway/gateway_config.h): per-value checks and parsers whose errors name the key and
// the value, and a table of fields that applies a YAML mapping to a configuration struct.
//
// Usage:
//   const std::vector<yaml::Field<MyConfig>> fields = {
//       yaml::StringField<MyConfig>("listen", &MyConfig::listen, CheckListen),
//       yaml::DurationField<MyConfig>("interval", &MyConfig::interval)};
//   absl::StatusOr<std::set<std::string>> seen = yaml::ApplyMapping("", root, fields, config);
//   return yaml::CatchingYaml([&] { return Parse(text); });   // around anything that throws
//
// Contract: every error is InvalidArgument "<key>: <problem>" quoting the value (C-escaped);
// unknown keys suggest the closest known one ("did you mean …?") or list them all; a key given
// twice is an error; typed keys (numbers, integers, booleans) reject quoted scalars. Nothing here
// throws except inside CatchingYaml's argument, whose yaml-cpp exceptions become InvalidArgument
// with the line and column (other exceptions: Internal).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "yaml-cpp/yaml.h"

namespace cacheroute::base::yaml {

// `"text"`, C-escaped.
std::string Quote(absl::string_view text);
// InvalidArgument "name: problem".
absl::Status Invalid(absl::string_view name, absl::string_view problem);

// ---- Checks and text parsers (YAML scalars and flags alike). ----
absl::Status CheckPositiveFinite(absl::string_view name, double value);
absl::Status CheckNonNegativeFinite(absl::string_view name, double value);
absl::Status CheckPositiveDuration(absl::string_view name, absl::Duration value);
// A finite duration >= 0 (0 turns a feature off).
absl::Status CheckOffOrPositiveDuration(absl::string_view name, absl::Duration value);
absl::Status CheckIntegerRange(absl::string_view name, uint64_t value, uint64_t min, uint64_t max);
// A number; YAML's .inf, -.inf and .nan are read as such (for the range checks to name them).
absl::StatusOr<double> ParseNumber(absl::string_view name, absl::string_view text);
absl::StatusOr<uint64_t> ParseInteger(absl::string_view name, absl::string_view text,
                                      uint64_t min, uint64_t max);
// "10s", "500ms", "2m": positive, or with zero_is_off also 0.
absl::StatusOr<absl::Duration> ParseDurationText(absl::string_view name, absl::string_view text,
                                                 bool zero_is_off = false);
// HOST:PORT, the port 0 … 65535; an IPv6 host goes in brackets (the error shows `ipv6_example`,
// e.g. "[::]:50051"). The host comes back without its brackets.
struct HostPort {
  std::string host;
  int port = 0;
};
absl::StatusOr<HostPort> SplitHostPort(absl::string_view name, absl::string_view value,
                                       absl::string_view ipv6_example);
// SplitHostPort's checks alone; "" passes only with allow_empty (an optional address).
absl::Status CheckHostPort(absl::string_view name, absl::string_view value, bool allow_empty,
                           absl::string_view ipv6_example);

// ---- YAML values. ----
// "null", "a sequence", "a mapping", the quoted scalar, or "nothing".
std::string DescribeNode(const YAML::Node& node);
// Any scalar, quoted or not.
absl::StatusOr<std::string> YamlString(absl::string_view name, const YAML::Node& node);
// An unquoted scalar (`expected` says what, e.g. "a number", for the message).
absl::StatusOr<std::string> YamlPlainScalar(absl::string_view name, const YAML::Node& node,
                                            absl::string_view expected);
absl::StatusOr<double> YamlPositiveNumber(absl::string_view name, const YAML::Node& node);
absl::StatusOr<double> YamlNonNegativeNumber(absl::string_view name, const YAML::Node& node);
absl::StatusOr<uint64_t> YamlInteger(absl::string_view name, const YAML::Node& node, uint64_t min,
                                     uint64_t max);
absl::StatusOr<bool> YamlBool(absl::string_view name, const YAML::Node& node);
absl::StatusOr<absl::Duration> YamlDuration(absl::string_view name, const YAML::Node& node,
                                            bool zero_is_off = false);

// ---- Fields of a mapping. `name` is the full key for messages ("tls.key_file"). ----
template <typename Config>
struct Field {
  absl::string_view key;
  std::function<absl::Status(absl::string_view name, const YAML::Node& value, Config&)> apply;
};

// The error for an unknown `key` under `prefix` ("" or "tls."), given the known keys.
absl::Status UnknownKey(absl::string_view prefix, absl::string_view key,
                        const std::vector<absl::string_view>& known);

// Applies every key of the mapping `node`; returns the keys seen, for checks across keys.
template <typename Config>
absl::StatusOr<std::set<std::string>> ApplyMapping(absl::string_view prefix, const YAML::Node& node,
                                                   const std::vector<Field<Config>>& fields,
                                                   Config& config) {
  std::set<std::string> seen;
  for (const auto& entry : node) {
    if (!entry.first.IsScalar()) {
      return absl::InvalidArgumentError(
          absl::StrCat(prefix.empty() ? "the document" : prefix.substr(0, prefix.size() - 1),
                       ": keys must be strings, got ", DescribeNode(entry.first), " as a key"));
    }
    const std::string& key = entry.first.Scalar();
    const auto field = std::find_if(fields.begin(), fields.end(),
                                    [&](const Field<Config>& f) { return f.key == key; });
    if (field == fields.end()) {
      std::vector<absl::string_view> known;
      for (const Field<Config>& f : fields) known.push_back(f.key);
      return UnknownKey(prefix, key, known);
    }
    const std::string name = absl::StrCat(prefix, key);
    if (!seen.insert(key).second) return Invalid(name, "given more than once");
    if (absl::Status status = field->apply(name, entry.second, config); !status.ok()) {
      return status;
    }
  }
  return seen;
}

// A field holding a value parsed by `parse(name, node)` into `member`.
template <typename Config, typename T, typename Parse>
Field<Config> ParsedField(absl::string_view key, T Config::*member, Parse parse) {
  return {key, [member, parse](absl::string_view name, const YAML::Node& node,
                               Config& config) -> absl::Status {
            auto value = parse(name, node);
            if (!value.ok()) return value.status();
            config.*member = static_cast<T>(*std::move(value));
            return absl::OkStatus();
          }};
}

// A string, checked by `check(name, value)` (may be null).
template <typename Config>
Field<Config> StringField(
    absl::string_view key, std::string Config::*member,
    std::function<absl::Status(absl::string_view, absl::string_view)> check) {
  return ParsedField(key, member,
                     [check](absl::string_view name,
                             const YAML::Node& node) -> absl::StatusOr<std::string> {
                       absl::StatusOr<std::string> value = YamlString(name, node);
                       if (!value.ok() || !check) return value;
                       if (absl::Status s = check(name, *value); !s.ok()) return s;
                       return value;
                     });
}

template <typename Config>
Field<Config> DurationField(absl::string_view key, absl::Duration Config::*member,
                            bool zero_is_off = false) {
  return ParsedField(key, member, [zero_is_off](absl::string_view name, const YAML::Node& node) {
    return YamlDuration(name, node, zero_is_off);
  });
}

template <typename Config, typename Int>
Field<Config> IntegerField(absl::string_view key, Int Config::*member, uint64_t min,
                           uint64_t max) {
  return ParsedField(key, member, [min, max](absl::string_view name, const YAML::Node& node) {
    return YamlInteger(name, node, min, max);
  });
}

template <typename Config>
Field<Config> PositiveNumberField(absl::string_view key, double Config::*member) {
  return ParsedField(key, member, YamlPositiveNumber);
}

template <typename Config>
Field<Config> NonNegativeNumberField(absl::string_view key, double Config::*member) {
  return ParsedField(key, member, YamlNonNegativeNumber);
}

// ---- Documents. ----
// What YAML::LoadAll tells a loader that takes one document: how many documents the text holds
// and the first of them (a null node when there is none). Unlike LoadAll it always returns:
// yaml-cpp 0.7 (Debian 12's) hands out an empty document forever, without consuming anything,
// on some malformed text such as a lone "," (jbeder/yaml-cpp#1040), and LoadAll collects them
// until memory runs out. A document that starts where the previous one did ends the count here,
// so "," is one empty document. Throws yaml-cpp's exceptions, as LoadAll does.
struct YamlDocuments {
  size_t count = 0;
  YAML::Node first;
};
YamlDocuments LoadDocuments(const std::string& text);

// Runs `parse` (which may throw yaml-cpp's exceptions) and returns its result, or the exception
// as InvalidArgument ("line L, column C: …") or Internal.
absl::Status YamlExceptionStatus(const std::exception& e);
template <typename Parse>
auto CatchingYaml(Parse parse) -> decltype(parse()) {
  try {
    return parse();
  } catch (const std::exception& e) {
    return YamlExceptionStatus(e);
  }
}

// Applies a whole configuration document to `config`: one YAML mapping of `fields` (an empty or
// null document changes nothing). Returns the keys seen. `example` ("q_cap: 8") shows the shape
// in the error for a document that is not a mapping. Throws yaml-cpp's exceptions (CatchingYaml).
template <typename Config>
absl::StatusOr<std::set<std::string>> ApplyDocument(absl::string_view text,
                                                    const std::vector<Field<Config>>& fields,
                                                    Config& config, absl::string_view example) {
  const YamlDocuments documents = LoadDocuments(std::string(text));
  if (documents.count > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("expected one YAML document, got ", documents.count, " (separated by ---)"));
  }
  if (documents.count == 0 || documents.first.IsNull()) return std::set<std::string>();
  if (!documents.first.IsMap()) {
    return absl::InvalidArgumentError(absl::StrCat("the document must be a mapping of keys (e.g. \"",
                                                   example, "\"), got ",
                                                   DescribeNode(documents.first)));
  }
  return ApplyMapping("", documents.first, fields, config);
}

}  // namespace cacheroute::base::yaml
