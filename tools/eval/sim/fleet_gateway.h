// The fleet simulator's gateway side (internal to RunFleet, fleet.h):
//
//   SimClock    the simulated time, as the dataplane (Router, CacheRoutePolicy) reads it and,
//   through
//               planner_clock(), as the planner (PlannerCore) reads it: Unix time from the epoch
//   SimGateway  one gateway: its view of the fleet (GatewayView: its own requests in flight), its
//               policy from the dataplane's registry, and for CacheRoute a Router, a RateRecorder
//               and the rollout evidence it reports to the planner
//
// A request's life at a gateway: Route (pick, count in flight, count the key's rate; with
// byte-aware planning MeasurePrefix: the tokens it shares with its key's previous request), then
// OnFirstToken (the served KV hit the Router's margins scale by; the rollout evidence) and End
// (out of flight; a failure is evidence too). Reports drain the recorders as a RateReporter would.
// New signals a policy may read belong in GatewayView (what the gateway knows), fed here.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/evidence_recorder.h"
#include "cacheroute/dataplane/policies.h"
#include "cacheroute/dataplane/random.h"
#include "cacheroute/dataplane/rate_recorder.h"
#include "cacheroute/dataplane/router.h"
#include "planner/rate_aggregator.h"
#include "tools/eval/sim/fleet.h"

namespace cacheroute::sim {

// 2^64 / golden ratio: spreads small integers (gateway indices, block offsets) before Mix64.
inline constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

class SimClock final : public dataplane::Clock {
 public:
  SimClock() = default;
  SimClock(const SimClock&) = delete;
  SimClock& operator=(const SimClock&) = delete;

  dataplane::Time Now() const override { return At(now_s); }
  static dataplane::Time At(double seconds);
  // The planner's time: the Unix epoch plus the simulated seconds.
  static absl::Time Unix(double seconds) { return absl::UnixEpoch() + absl::Seconds(seconds); }
  base::Clock& planner_clock() { return planner_clock_; }

  double now_s = 0;

 private:
  class PlannerClock final : public base::Clock {
   public:
    explicit PlannerClock(const SimClock& sim) : sim_(sim) {}
    absl::Time Now() override { return Unix(sim_.now_s); }

   private:
    const SimClock& sim_;
  };
  PlannerClock planner_clock_{*this};
};

// What a gateway knows of the fleet: its own requests in flight per destination; all up.
class GatewayView final : public dataplane::LoadView {
 public:
  explicit GatewayView(uint32_t destinations) : in_flight(destinations, 0) {}
  uint32_t size() const override { return static_cast<uint32_t>(in_flight.size()); }
  double Load(uint32_t d) const override { return static_cast<double>(in_flight[d]); }
  bool Up(uint32_t) const override { return true; }

  std::vector<int64_t> in_flight;
};

// A routed request's rollout arm, while its evidence is pending.
struct ArmTag {
  dataplane::Arm arm = dataplane::Arm::kTable;
  double table_fraction = 1;  // the split it was routed under
};

class SimGateway {
 public:
  // Gateway `index` of `config`: its seed, its policy (PolicyName(config.policy) from the
  // registry, with config's baseline parameters) and, for CacheRoute, a Router with
  // config.dispatch and a RateRecorder.
  static absl::StatusOr<std::unique_ptr<SimGateway>> Create(const FleetConfig& config,
                                                            uint32_t index, const SimClock& clock);

  // Routes a request of `key_id` and counts it in flight. With a rollout in force, *arm says on
  // which arm (for its evidence); otherwise it is reset.
  dataplane::Decision Route(uint64_t key_id, std::optional<ArmTag>* arm);
  // Byte-aware planning: the request of `key_id` whose prompt is `hashes` (its 16-token block
  // chain) shares its leading equal blocks with the key's previous request here, up to
  // `prompt_tokens`; the window's sums go with the key's count in the next report.
  void MeasurePrefix(uint64_t key_id, std::span<const uint64_t> hashes, uint32_t prompt_tokens);
  // The request's first token: its TTFT as rollout evidence (when tagged), and its served KV hit.
  void OnFirstToken(std::optional<ArmTag>& arm, double ttft_s, uint32_t prompt_tokens,
                    uint32_t cached_tokens);
  // The request left `destination`; `failed` before its first token (evidence when tagged).
  void End(uint32_t destination, std::optional<ArmTag>& arm, bool failed);

  // One report to the planner for [start_ms, end_ms): the rollout evidence, and with
  // `with_counts` the rate counts drained from the recorder.
  planner::RateReport Report(uint64_t sequence, int64_t start_ms, int64_t end_ms, bool with_counts);

  dataplane::Router* router() { return router_.get(); }
  const std::string& id() const { return id_; }

 private:
  SimGateway(const FleetConfig& config, uint32_t index);

  std::string id_;
  dataplane::SeededRandom random_;
  GatewayView view_;
  std::unique_ptr<dataplane::Router> router_;
  std::unique_ptr<dataplane::RateRecorder> recorder_;
  std::unique_ptr<dataplane::Policy> policy_;
  dataplane::EvidenceRecorder evidence_;
  // The served KV hit this gateway has seen (cached / prompt tokens at each first token), decayed
  // over about the last kHitMemory requests, for Router::SetMeasuredHit.
  double seen_cached_ = 0, seen_prompt_ = 0;
  // MeasurePrefix's memory: per key, its previous request's blocks and this window's sums.
  struct KeyPrefix {
    std::vector<uint64_t> last;
    double reusable = 0, prompt = 0, measured = 0;
  };
  absl::flat_hash_map<uint64_t, KeyPrefix> prefixes_;
};

}  // namespace cacheroute::sim
