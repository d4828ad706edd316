// JsonWriter: builds one compact JSON document (a single line) for the online commands'
// `--format json` output. Strings go through AppendJsonString (always valid UTF-8 JSON), doubles
// through AppendShortestDouble (shortest round-trip text); a non-finite double, which a
// well-behaved planner never sends, is written as null rather than as invalid JSON. Integers are
// exact in the text, also above 2^53.
//
// The writer does not check nesting; callers pair Begin/End calls. Values inside an object must
// each follow a Key.
//
// Usage:
//   JsonWriter json;
//   json.BeginObject().Key("version").Version(v).Key("keys").Uint(12).EndObject();
//   WriteStdout(json.Line());   // the document plus "\n"
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "cacheroute/v1/common.pb.h"
#include "client/text_format.h"

namespace cacheroute::client {

class JsonWriter {
 public:
  JsonWriter& BeginObject() { return Open('{'); }
  JsonWriter& EndObject() { return Close('}'); }
  JsonWriter& BeginArray() { return Open('['); }
  JsonWriter& EndArray() { return Close(']'); }

  JsonWriter& Key(absl::string_view name) {
    Separate();
    AppendJsonString(&out_, name);
    out_.append(": ");
    after_key_ = true;
    return *this;
  }

  JsonWriter& String(absl::string_view value) {
    Separate();
    AppendJsonString(&out_, value);
    return *this;
  }
  JsonWriter& Number(double value) {
    Separate();
    if (std::isfinite(value)) {
      AppendShortestDouble(&out_, value);
    } else {
      out_.append("null");
    }
    return *this;
  }
  JsonWriter& Uint(uint64_t value) {
    Separate();
    absl::StrAppend(&out_, value);
    return *this;
  }
  JsonWriter& Int(int64_t value) {
    Separate();
    absl::StrAppend(&out_, value);
    return *this;
  }
  JsonWriter& Bool(bool value) {
    Separate();
    out_.append(value ? "true" : "false");
    return *this;
  }
  JsonWriter& Null() {
    Separate();
    out_.append("null");
    return *this;
  }
  // {"epoch": E, "number": N}
  JsonWriter& Version(const v1::Version& version) {
    return BeginObject()
        .Key("epoch")
        .Uint(version.epoch())
        .Key("number")
        .Uint(version.number())
        .EndObject();
  }

  // The document followed by a newline.
  std::string Line() const { return out_ + "\n"; }

 private:
  // Writes ", " before every value or key that is not the first in its container.
  void Separate() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (!first_.empty()) {
      if (!first_.back()) out_.append(", ");
      first_.back() = false;
    }
  }
  JsonWriter& Open(char c) {
    Separate();
    out_.push_back(c);
    first_.push_back(true);
    return *this;
  }
  JsonWriter& Close(char c) {
    out_.push_back(c);
    first_.pop_back();
    return *this;
  }

  std::string out_;
  std::vector<bool> first_;  // per open container: nothing written in it yet
  bool after_key_ = false;
};

}  // namespace cacheroute::client
