// The fleet simulator's gateway side (internal to RunFleet, fleet.h):
//
//   SimClock    the simulated time, as the dataplane (Router, CacheRoutePolicy) reads it and,
//   through
//               planner_clock(), as the planner (PlannerCore) reads it: Unix time from the epoch
//   SimGateway  one gateway: its view of the fleet (GatewayView: its own requests in flight and
//               their token work, the engines' scraped metrics), its policy from the dataplane's
//               registry, and for CacheRoute a Router, a RateRecorder and the rollout evidence it
//               reports to the planner
//
// A request's life at a gateway: Route (pick, count in flight and in the token-work ledger, count
// the key's rate; with byte-aware planning MeasurePrefix: the tokens it shares with its key's
// previous request), then OnFirstToken (its prefill leaves the queued work; the served usage and
// the destination's cache turnover for the Router; the rollout evidence) and End (out of flight; a
// failure is evidence too). Reports drain the recorders as a RateReporter would, with where each
// key was last sent. New signals a policy may read belong in GatewayView (what the gateway
// knows), fed here.
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
#include "tools/eval/sim/engine.h"
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

// What a gateway knows of the fleet: its own requests in flight per destination, with their token
// work (the ledger a gateway keeps from its requests' first tokens and ends), and the engines'
// metrics as a scrape would show them (read at the moment of the pick: fresher than any scrape);
// all up.
class GatewayView final : public dataplane::LoadView {
 public:
  GatewayView(uint32_t destinations, const std::vector<Engine>& engines)
      : in_flight(destinations, 0), work(destinations), engines_(engines) {}
  uint32_t size() const override { return static_cast<uint32_t>(in_flight.size()); }
  double Load(uint32_t d) const override { return static_cast<double>(in_flight[d]); }
  bool Up(uint32_t) const override { return true; }
  bool HasWork() const override { return true; }
  dataplane::DestinationWork Work(uint32_t d) const override { return work[d]; }
  dataplane::DestinationWork FleetWork() const override { return {.prefilling = prefilling}; }
  dataplane::EngineMetrics Scraped(uint32_t d) const override {
    return {static_cast<double>(engines_[d].waiting()), engines_[d].cache().usage()};
  }

  std::vector<int64_t> in_flight;
  std::vector<dataplane::DestinationWork> work;
  double prefilling = 0;  // Σ work[d].prefilling

 private:
  const std::vector<Engine>& engines_;
};

// A routed request's rollout arm, while its evidence is pending.
struct ArmTag {
  dataplane::Arm arm = dataplane::Arm::kTable;
  double table_fraction = 1;  // the split it was routed under
};

class SimGateway {
 public:
  // Gateway `index` of `config`: its seed, its policy (config.policy from the registry, with
  // config.parameters) and, for a table policy, a Router with
  // config.dispatch and a RateRecorder. `engines` (scraped) must outlive the gateway.
  static absl::StatusOr<std::unique_ptr<SimGateway>> Create(const FleetConfig& config,
                                                            uint32_t index, const SimClock& clock,
                                                            const std::vector<Engine>& engines);

  // Routes `request` and counts it in flight and in the ledger. With a rollout in force, *arm says
  // on which arm (for its evidence); otherwise it is reset.
  dataplane::Decision Route(const dataplane::PickRequest& request, std::optional<ArmTag>* arm);
  // Byte-aware planning: the request of `key_id` whose prompt is `hashes` (its 16-token block
  // chain) shares its leading equal blocks with the key's previous request here, up to
  // `prompt_tokens`; the window's sums go with the key's count in the next report.
  void MeasurePrefix(uint64_t key_id, std::span<const uint64_t> hashes, uint32_t prompt_tokens);
  // The request's first token: its prefill leaves the ledger's queue; its TTFT as rollout
  // evidence (when tagged); its usage for the Router's estimates, and the new KV it brought its
  // destination (uncached prompt and output tokens) for that destination's cache turnover.
  void OnFirstToken(const dataplane::Decision& decision, std::optional<ArmTag>& arm, double ttft_s,
                    uint32_t prompt_tokens, uint32_t cached_tokens, uint32_t output_tokens);
  // The request (routed as `decision`, `prompt_tokens` long) left its destination, after its
  // first token or not; `failed` (evidence when tagged).
  void End(const dataplane::Decision& decision, uint32_t prompt_tokens, bool had_first_token,
           std::optional<ArmTag>& arm, bool failed);

  // One report to the planner for [start_ms, end_ms): the rollout evidence, and with
  // `with_counts` the rate counts drained from the recorder, each with the destination (by name)
  // the key was last sent to when config.plan_follows_cache.
  planner::RateReport Report(uint64_t sequence, int64_t start_ms, int64_t end_ms, bool with_counts);

  dataplane::Router* router() { return router_.get(); }
  const std::string& id() const { return id_; }

 private:
  SimGateway(const FleetConfig& config, uint32_t index, const std::vector<Engine>& engines);

  // The rate at which a destination takes in new KV (uncached prompt + output tokens) as this
  // gateway sees it: an exponentially decayed sum over about kTurnoverWindowS.
  struct Intake {
    double tokens_per_s = 0;
    double last_s = 0;
  };

  const FleetConfig& config_;
  const SimClock* clock_ = nullptr;
  std::string id_;
  dataplane::SeededRandom random_;
  GatewayView view_;
  std::vector<Intake> intake_;
  std::vector<std::string> names_;  // the destinations' names, as the planner's table has them
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
