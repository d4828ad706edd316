// planner/key_id.h re-exports the dataplane's KeyId: both names must give the same ids, bit for
// bit, since gateways report and route by these ids and the planner plans on them.
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "cacheroute/dataplane/key_id.h"
#include "planner/key_id.h"

TEST_CASE("dataplane KeyId agrees with planner KeyId", "[key_id]") {
  for (const std::string& key :
       std::vector<std::string>{"", "a", "tenant-42", "tenant-42/system-prompt", "ünïcödé",
                                std::string(300, 'x'), std::string("nul\0inside", 10)}) {
    INFO("key = " << key);
    CHECK(cacheroute::dataplane::KeyId(key) == cacheroute::KeyId(key));
  }
  static_assert(cacheroute::dataplane::KeyId("abc") == cacheroute::KeyId("abc"));
}

TEST_CASE("KeyId is FNV-1a-64 followed by the splitmix64 finaliser", "[key_id]") {
  // FNV-1a-64("") is the offset basis; "a" is the published test vector 0xaf63dc4c8601ec8c.
  CHECK(cacheroute::dataplane::KeyId("") == cacheroute::dataplane::Mix64(0xcbf29ce484222325ULL));
  CHECK(cacheroute::dataplane::KeyId("a") == cacheroute::dataplane::Mix64(0xaf63dc4c8601ec8cULL));
}
