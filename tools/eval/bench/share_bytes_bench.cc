// cacheroute-share-bytes-bench: the bytes fleet sharing costs (docs/gateway.md, "Several
// gateways"). G gateways' routing cores (the token-work rule over D destinations) each route
// fleet_rps / G keyed requests per second of simulated time; every share interval each drains its
// outbox and shares its ledger as the ShareLink does (ToShareBatch), and every other gateway
// learns the batch (FromShareBatch, Router::Learn) as if the planner had forwarded it at once. It
// prints, per gateway, the serialized bytes per second it sends (its ShareRequests) and receives
// (the other gateways' ShareBatches, as the planner forwards them), and the placements per second.
//
//   cacheroute-share-bytes-bench --gateways 4 --fleet-rps 10000
//   cacheroute-share-bytes-bench --gateways 8 --fleet-rps 10000 --keys 100000 --zipf 0.8
//
// Keys follow a Zipf law over --keys; a key's prompt is its own prefix (--prefix-tokens) followed
// by a unique suffix (--suffix-tokens), hashed in 16-token blocks; a request is in flight for
// --ttft-ms, then decodes for --decode-ms. Simulated time: the figures are exact for the inputs,
// and the wall time of the run does not enter them.
#include <cmath>
#include <deque>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_format.h"
#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/grpc/share_conversion.h"
#include "cacheroute/dataplane/grpc/table_conversion.h"
#include "cacheroute/dataplane/policy_registry.h"
#include "cacheroute/dataplane/random.h"
#include "cacheroute/v1/share.pb.h"
#include "tools/eval/main_helpers.h"
#include "tools/frontend/routing/routing_core.h"

namespace {

using cacheroute::dataplane::Duration;
using cacheroute::dataplane::Time;

struct Options {
  uint32_t gateways = 4;
  uint32_t destinations = 16;
  double fleet_rps = 10000;
  uint32_t keys = 20000;
  double zipf = 1.0;
  uint32_t prefix_tokens = 1024;
  uint32_t suffix_tokens = 256;
  double interval_ms = 25;
  double ttft_ms = 300;
  double decode_ms = 3000;
  double seconds = 60;
  double warmup_seconds = 10;
  uint64_t seed = 1;
};

// Inverse-CDF sampling of a Zipf law over [0, n).
class Zipf {
 public:
  Zipf(uint32_t n, double s) : cdf_(n) {
    double sum = 0;
    for (uint32_t i = 0; i < n; ++i) cdf_[i] = sum += 1.0 / std::pow(i + 1.0, s);
    for (double& c : cdf_) c /= sum;
  }
  uint32_t Sample(cacheroute::dataplane::Random& random) const {
    const double u = static_cast<double>(random.Next() >> 11) * 0x1.0p-53;
    return static_cast<uint32_t>(std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin());
  }

 private:
  std::vector<double> cdf_;
};

struct InFlight {
  cacheroute::frontend::RequestLifecycle request;
  Time first_token;
  Time done;
  bool decoding = false;
};

struct Gateway {
  Gateway(const Options& o, uint32_t index, const cacheroute::dataplane::Clock& clock)
      : id(absl::StrFormat("gw-%u", index)),
        routing({.capacity = o.destinations,
                 .dispatch = cacheroute::dataplane::DispatchFor("cacheroute"),
                 .seed = o.seed * 1000 + index,
                 .share_placements = true},
                clock) {}
  std::string id;
  cacheroute::frontend::RoutingCore routing;
  std::deque<InFlight> in_flight;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t placements_sent = 0;
};

int Run(const Options& o) {
  cacheroute::dataplane::ManualClock clock(Time(std::chrono::hours(1)));
  cacheroute::dataplane::SeededRandom random(o.seed);
  const Zipf zipf(o.keys, o.zipf);
  std::vector<std::string> names;
  for (uint32_t d = 0; d < o.destinations; ++d) names.push_back(absl::StrFormat("engine-%u", d));
  const auto index = cacheroute::dataplane::DestinationIndexOf(names);
  std::vector<std::unique_ptr<Gateway>> gateways;
  for (uint32_t g = 0; g < o.gateways; ++g) {
    gateways.push_back(std::make_unique<Gateway>(o, g, clock));
    if (!gateways.back()->routing.router().Resize(o.destinations, nullptr, clock.Now()).ok) {
      std::cerr << "cannot size the router\n";
      return 1;
    }
  }
  const auto ms = [](double v) {
    return std::chrono::duration_cast<Duration>(std::chrono::duration<double, std::milli>(v));
  };
  const double per_interval = o.fleet_rps * o.interval_ms / 1000.0;
  const uint32_t prefix_blocks = o.prefix_tokens / 16;
  const uint32_t suffix_blocks = o.suffix_tokens / 16;
  const uint64_t intervals =
      static_cast<uint64_t>((o.warmup_seconds + o.seconds) * 1000 / o.interval_ms);
  const uint64_t warmup = static_cast<uint64_t>(o.warmup_seconds * 1000 / o.interval_ms);
  double carry = 0;
  uint64_t next_gateway = 0;
  for (uint64_t step = 0; step < intervals; ++step) {
    if (step == warmup) {
      for (auto& g : gateways) g->bytes_sent = g->bytes_received = g->placements_sent = 0;
    }
    // This interval's requests, spread evenly over it and over the gateways.
    carry += per_interval;
    const auto count = static_cast<uint64_t>(carry);
    carry -= static_cast<double>(count);
    for (uint64_t r = 0; r < count; ++r) {
      clock.Advance(ms(o.interval_ms / static_cast<double>(count + 1)) - Duration(0));
      Gateway& g = *gateways[next_gateway++ % gateways.size()];
      const uint32_t key = zipf.Sample(random);
      cacheroute::frontend::RoutingInput input;
      input.key = absl::StrFormat("tenant-%u", key);
      input.prompt = {.text_bytes = 4ull * (o.prefix_tokens + o.suffix_tokens), .token_ids = 0};
      uint64_t h = cacheroute::dataplane::Mix64(key + 1);
      for (uint32_t b = 0; b < prefix_blocks; ++b)
        input.block_hashes.push_back(h = cacheroute::dataplane::Mix64(h + b));
      for (uint32_t b = 0; b < suffix_blocks; ++b)
        input.block_hashes.push_back(h = cacheroute::dataplane::Mix64(h ^ random.Next()));
      cacheroute::frontend::RequestLifecycle request = g.routing.Route(input, nullptr, clock.Now());
      g.in_flight.push_back({std::move(request), clock.Now() + ms(o.ttft_ms),
                             clock.Now() + ms(o.ttft_ms + o.decode_ms)});
    }
    const Time now = clock.Now();
    for (auto& g : gateways) {
      for (InFlight& f : g->in_flight) {
        if (!f.decoding && f.first_token <= now) {
          f.request.FirstToken(true);
          f.decoding = true;
        }
      }
      while (!g->in_flight.empty() && g->in_flight.front().done <= now) {
        g->in_flight.front().request.UpstreamDone();
        g->in_flight.front().request.Finish(200);
        g->in_flight.pop_front();
      }
    }
    // Every gateway shares, as ShareLink does; the others learn it.
    for (auto& g : gateways) {
      std::vector<cacheroute::dataplane::DestinationWork> work;
      for (uint32_t d = 0; d < o.destinations; ++d)
        work.push_back(g->routing.router().LedgerWork(d));
      cacheroute::v1::ShareRequest request;
      *request.mutable_batch() = cacheroute::dataplane::ToShareBatch(
          g->id, names, g->routing.placement_outbox()->Drain(), &work, now);
      request.set_sequence(step + 1);
      g->bytes_sent += request.ByteSizeLong();
      g->placements_sent += static_cast<uint64_t>(request.batch().placements_size());
      for (auto& other : gateways) {
        if (other == g) continue;
        other->bytes_received += request.batch().ByteSizeLong();
        const cacheroute::dataplane::ReceivedShare in =
            cacheroute::dataplane::FromShareBatch(request.batch(), index, o.destinations, now);
        other->routing.router().Learn(in.placements);
      }
    }
  }
  absl::PrintF(
      "gateways %u, destinations %u, fleet %.0f req/s (%.0f per gateway), keys %u (zipf %.2f), "
      "prompt %u+%u tokens, share every %.0f ms; %.0f s measured after %.0f s\n",
      o.gateways, o.destinations, o.fleet_rps, o.fleet_rps / o.gateways, o.keys, o.zipf,
      o.prefix_tokens, o.suffix_tokens, o.interval_ms, o.seconds, o.warmup_seconds);
  absl::PrintF("%-8s %14s %14s %16s %16s\n", "gateway", "sent B/s", "received B/s", "placements/s",
               "sent B/request");
  for (auto& g : gateways) {
    const double per_gateway_rps = o.fleet_rps / o.gateways;
    absl::PrintF("%-8s %14.0f %14.0f %16.1f %16.1f\n", g->id, g->bytes_sent / o.seconds,
                 g->bytes_received / o.seconds, g->placements_sent / o.seconds,
                 g->bytes_sent / o.seconds / per_gateway_rps);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app("The bytes per second fleet sharing sends and receives per gateway.");
  app.add_option("--gateways", o.gateways)->check(CLI::Range(2u, 256u));
  app.add_option("--destinations", o.destinations)->check(CLI::Range(1u, 4096u));
  app.add_option("--fleet-rps", o.fleet_rps)->check(CLI::PositiveNumber);
  app.add_option("--keys", o.keys)->check(CLI::Range(1u, 10'000'000u));
  app.add_option("--zipf", o.zipf)->check(CLI::NonNegativeNumber);
  app.add_option("--prefix-tokens", o.prefix_tokens);
  app.add_option("--suffix-tokens", o.suffix_tokens);
  app.add_option("--interval-ms", o.interval_ms)->check(CLI::PositiveNumber);
  app.add_option("--ttft-ms", o.ttft_ms)->check(CLI::NonNegativeNumber);
  app.add_option("--decode-ms", o.decode_ms)->check(CLI::NonNegativeNumber);
  app.add_option("--seconds", o.seconds)->check(CLI::PositiveNumber);
  app.add_option("--warmup-seconds", o.warmup_seconds)->check(CLI::NonNegativeNumber);
  app.add_option("--seed", o.seed);
  if (std::optional<int> exit = cacheroute::eval::ParseCommandLine(app, argc, argv)) return *exit;
  return Run(o);
}
