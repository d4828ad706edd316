// Protocol Buffers wire format by hand, for tests that check a message definition against a
// published field list without that definition's generated code: WireWriter builds bytes field by
// field (varint, 64-bit, length-delimited, 32-bit), ReadWire splits bytes into their fields.
//
// Usage:
//   std::string bytes = WireWriter().Varint(3, 1).Bytes(1, "x").Message(2, WireWriter()...).str();
//   std::vector<WireField> fields = ReadWire(bytes);   // REQUIREs well-formed input
//   const WireField& f = OnlyField(fields, 2);         // the one field numbered 2
#pragma once

#include <catch2/catch.hpp>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace cacheroute::testing {

class WireWriter {
 public:
  WireWriter& Varint(uint32_t field, uint64_t value) {
    Tag(field, 0);
    Raw(value);
    return *this;
  }
  WireWriter& Fixed64(uint32_t field, uint64_t value) {
    Tag(field, 1);
    for (int i = 0; i < 8; ++i) bytes_.push_back(static_cast<char>(value >> (8 * i)));
    return *this;
  }
  WireWriter& Bytes(uint32_t field, absl::string_view value) {
    Tag(field, 2);
    Raw(value.size());
    bytes_.append(value.data(), value.size());
    return *this;
  }
  WireWriter& Message(uint32_t field, const WireWriter& message) {
    return Bytes(field, message.str());
  }
  WireWriter& Fixed32(uint32_t field, uint32_t value) {
    Tag(field, 5);
    for (int i = 0; i < 4; ++i) bytes_.push_back(static_cast<char>(value >> (8 * i)));
    return *this;
  }
  const std::string& str() const { return bytes_; }

 private:
  void Tag(uint32_t field, uint32_t wire_type) { Raw((uint64_t{field} << 3) | wire_type); }
  void Raw(uint64_t value) {
    while (value >= 0x80) {
      bytes_.push_back(static_cast<char>((value & 0x7f) | 0x80));
      value >>= 7;
    }
    bytes_.push_back(static_cast<char>(value));
  }
  std::string bytes_;
};

struct WireField {
  uint32_t number = 0;
  uint32_t wire_type = 0;  // 0 varint, 1 fixed64, 2 length-delimited, 5 fixed32
  uint64_t value = 0;      // varint and fixed
  std::string bytes;       // length-delimited
};

inline std::vector<WireField> ReadWire(absl::string_view in) {
  std::vector<WireField> fields;
  size_t at = 0;
  const auto raw = [&]() {
    uint64_t value = 0;
    for (int shift = 0;; shift += 7) {
      REQUIRE(at < in.size());
      REQUIRE(shift < 64);
      const uint8_t byte = static_cast<uint8_t>(in[at++]);
      value |= uint64_t{byte & 0x7fu} << shift;
      if ((byte & 0x80) == 0) return value;
    }
  };
  const auto fixed = [&](int n) {
    REQUIRE(at + n <= in.size());
    uint64_t value = 0;
    for (int i = 0; i < n; ++i) value |= uint64_t{static_cast<uint8_t>(in[at + i])} << (8 * i);
    at += n;
    return value;
  };
  while (at < in.size()) {
    WireField f;
    const uint64_t tag = raw();
    f.number = static_cast<uint32_t>(tag >> 3);
    f.wire_type = static_cast<uint32_t>(tag & 7);
    switch (f.wire_type) {
      case 0:
        f.value = raw();
        break;
      case 1:
        f.value = fixed(8);
        break;
      case 5:
        f.value = fixed(4);
        break;
      case 2: {
        const uint64_t n = raw();
        REQUIRE(at + n <= in.size());
        f.bytes = std::string(in.substr(at, n));
        at += n;
        break;
      }
      default:
        FAIL("wire type " << f.wire_type << " of field " << f.number);
    }
    fields.push_back(std::move(f));
  }
  return fields;
}

// The fields numbered `number`, in order.
inline std::vector<WireField> FieldsNumbered(const std::vector<WireField>& fields,
                                             uint32_t number) {
  std::vector<WireField> out;
  for (const WireField& f : fields) {
    if (f.number == number) out.push_back(f);
  }
  return out;
}

// The one field numbered `number` (REQUIREs exactly one).
inline WireField OnlyField(const std::vector<WireField>& fields, uint32_t number) {
  const std::vector<WireField> found = FieldsNumbered(fields, number);
  INFO("field " << number);
  REQUIRE(found.size() == 1);
  return found[0];
}

}  // namespace cacheroute::testing
