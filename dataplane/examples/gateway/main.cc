// The smallest embedding of the CacheRoute dataplane in a gateway: install a routing table (in a
// real gateway it comes from the planner's table stream) and route requests by key.
#include <cstdio>
#include <memory>
#include <vector>

#include "cacheroute/dataplane/key_id.h"
#include "cacheroute/dataplane/router.h"

namespace dp = cacheroute::dataplane;

int main() {
  dp::ThreadLocalRandom random(/*seed=*/1);  // per request thread: no shared cache line
  dp::SteadyClock clock;
  dp::Router router({.destination_count = 4, .table_ttl = std::chrono::seconds(60)}, random);

  // "tenant-7" is planned on destinations 1 and 3; every other key uses power of two choices.
  const std::vector<dp::TableEntry> entries = {{dp::KeyId("tenant-7"), {1, 3}}};
  dp::Result<dp::RoutingTable> table =
      dp::RoutingTable::Build({/*epoch=*/1, /*number=*/1}, 4, {1, 1, 1, 1}, entries);
  if (!table.ok()) return std::fprintf(stderr, "%s\n", table.status().message.c_str()), 1;
  if (dp::Status s =
          router.Install(std::make_shared<const dp::RoutingTable>(*std::move(table)), clock.Now());
      !s.ok) {
    return std::fprintf(stderr, "%s\n", s.message.c_str()), 1;
  }

  for (const char* key : {"tenant-7", "tenant-7", "tenant-9"}) {
    // Keep the token until the response ends: it counts the request as in flight.
    dp::InFlight request = router.Pick(dp::KeyId(key), clock.Now());
    std::printf("%-9s -> destination %u (%s)\n", key, request.destination(),
                request.planned() ? "planned" : "power of two");
  }
  return 0;
}
