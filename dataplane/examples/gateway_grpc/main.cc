// A gateway's control-plane wiring: follow the planner's tables, report per-key rates, route.
// Usage: example_gateway_grpc [planner host:port[,host:port…]]   (default 127.0.0.1:50051)
// Several addresses are planner replicas; PlannerChannels fails over between them.
#include <cstdio>
#include <string>
#include <vector>

#include "cacheroute/dataplane/grpc/planner_channels.h"
#include "cacheroute/dataplane/grpc/rate_reporter.h"
#include "cacheroute/dataplane/grpc/table_subscriber.h"
#include "cacheroute/dataplane/key_id.h"

namespace dp = cacheroute::dataplane;

int main(int argc, char** argv) {
  const std::string list = argc > 1 ? argv[1] : "127.0.0.1:50051";
  std::vector<std::string> addresses;
  for (size_t start = 0, comma; start <= list.size(); start = comma + 1) {
    comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    addresses.push_back(list.substr(start, comma - start));
  }
  const std::vector<std::string> upstreams = {"engine-0", "engine-1", "engine-2"};
  dp::ThreadLocalRandom random(7);
  dp::SteadyClock clock;
  dp::RateRecorder recorder({.max_keys = 1024});  // Router::Pick counts every key in it
  dp::Router router(
      {.destination_count = 3, .table_ttl = std::chrono::seconds(60), .rate_recorder = &recorder},
      random);
  auto planner = dp::PlannerChannels::Create(addresses, grpc::InsecureChannelCredentials());
  dp::TableSubscriber subscriber(planner, router,
                                 {.gateway_id = "example", .destinations = upstreams});
  dp::RateReporter reporter(planner, recorder, {.gateway_id = "example"});
  if (dp::Status s = subscriber.Start(); !s.ok)
    return std::fprintf(stderr, "%s\n", s.message.c_str()), 1;
  if (dp::Status s = reporter.Start(); !s.ok)
    return std::fprintf(stderr, "%s\n", s.message.c_str()), 1;

  for (const char* key : {"tenant-7", "tenant-9"}) {  // the request path
    dp::InFlight request = router.Pick(dp::KeyId(key), clock.Now());
    std::printf("%s -> %s (%s)\n", key, upstreams[request.destination()].c_str(),
                std::string(dp::ReasonName(request.reason())).c_str());
  }
  subscriber.Stop();
  reporter.Stop();
  return 0;
}
