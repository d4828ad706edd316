// KeyId: the stable, documented 64-bit id of a routing key string (proto/cacheroute/v1/
// common.proto). Gateways hash keys with it before reporting; the planner plans on ids alone.
//   KeyId(s) = Mix(FNV-1a-64(bytes of s)), Mix = the splitmix64 finaliser.
// FNV-1a is trivial to reimplement in any gateway language; the finaliser spreads the high bits,
// which the planner's radix sort and hash tables rely on.
#pragma once

#include <cstdint>
#include <string_view>

namespace cacheroute {

constexpr uint64_t KeyId(std::string_view key) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : key) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  h ^= h >> 31;
  return h;
}

}  // namespace cacheroute
