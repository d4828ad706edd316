// KeyId: the 64-bit id of a routing key string, as defined in proto/cacheroute/v1/common.proto:
//   KeyId(s) = Mix64(FNV-1a-64(bytes of s)), Mix64 = the splitmix64 finaliser.
//
// This is the only definition: planner/key_id.h re-exports it as cacheroute::KeyId. The ids are
// well mixed in every bit, which the routing table's hashing and the policies' hash rings rely on.
//
// Usage:
//   uint64_t id = cacheroute::dataplane::KeyId("tenant-42/system-prompt");
//   auto in_flight = router.Pick(id, clock.Now());
#pragma once

#include <cstdint>
#include <string_view>

namespace cacheroute::dataplane {

// The splitmix64 finaliser: a bijection on 64-bit values that spreads every input bit.
constexpr uint64_t Mix64(uint64_t h) {
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  h ^= h >> 31;
  return h;
}

constexpr uint64_t KeyId(std::string_view key) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : key) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return Mix64(h);
}

}  // namespace cacheroute::dataplane
