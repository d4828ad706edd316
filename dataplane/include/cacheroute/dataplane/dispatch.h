// The vocabulary shared by the Router and every routing policy: what a policy is asked to route
// (PickRequest), what it sees of the fleet (LoadView: a load per destination, and where the view
// has them the token-work signals and the engines' scraped metrics), what it answers (Decision),
// and the two load-based primitives all policies fall back on: power of two choices (Mitzenmacher,
// Richa, Sitaraman 2001; the paper's flat-LB, §3.1) and least-loaded.
//
// Invariants: a LoadView is read concurrently by many request threads, so its methods are const,
// thread-safe and lock-free; loads are non-negative numbers in one unit per view (in-flight
// requests for the Router); token work is in prompt tokens. Destinations outside [0, size()) or
// not Up() are never chosen. A Decision names kNoDestination only when no destination is up.
//
// Usage:
//   Decision d = PowerOfTwoChoices(router.loads(), random);
//   if (d.destination == kNoDestination) return Unavailable();
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <span>
#include <string_view>
#include <utility>

#include "cacheroute/dataplane/enum_names.h"
#include "cacheroute/dataplane/random.h"

namespace cacheroute::dataplane {

inline constexpr uint32_t kNoDestination = std::numeric_limits<uint32_t>::max();

// One request as a policy sees it. prompt_tokens 0 means unknown. block_hashes are the prompt's
// chained 16-token block hashes (vLLM's prefix-cache blocks, or a gateway's estimate of them from
// the text), for the policies that index prefixes; empty when the caller has none.
struct PickRequest {
  uint64_t key_id = 0;
  uint32_t prompt_tokens = 0;
  std::span<const uint64_t> block_hashes{};
};

// The work waiting at one destination, in the currency of prefill: what a gateway sees of its own
// requests there (docs/dispatch.md, "Signals"). Every field is ≥ 0 (the token-work rule relies on
// it to skip candidates that cannot win).
struct DestinationWork {
  // Σ of the expected uncached prompt tokens of requests sent whose first token has not arrived.
  double queued_prefill_tokens = 0;
  double prefilling = 0;     // requests sent whose first token has not arrived
  double decoding = 0;       // requests whose first token arrived, not yet finished
  double active_tokens = 0;  // prompt tokens of every request in flight there
};

// Field by field: the work of several ledgers at one destination (fleet sharing sums the other
// gateways' with this one's).
inline DestinationWork& operator+=(DestinationWork& a, const DestinationWork& b) {
  a.queued_prefill_tokens += b.queued_prefill_tokens;
  a.prefilling += b.prefilling;
  a.decoding += b.decoding;
  a.active_tokens += b.active_tokens;
  return a;
}

// What the engine itself reports (scraped metrics, e.g. vLLM's num_requests_waiting and
// kv_cache_usage_perc).
struct EngineMetrics {
  double waiting = 0;             // requests queued, not yet running
  double kv_usage = 0;            // share of the KV cache held by running requests, in [0, 1]
  double kv_capacity_tokens = 0;  // the engine's KV cache, configured or reported; 0: unknown
};

// What a policy may read about the fleet when it picks. Implementations: Router::loads() (local
// in-flight counts blended with reported load, and the Router's own token-work ledger), or the
// simulator's own view. A view without token-work signals (HasWork() false) returns zeros from
// Work; one without scraped metrics reports Load as the waiting queue and no KV usage.
class LoadView {
 public:
  virtual ~LoadView() = default;
  virtual uint32_t size() const = 0;
  virtual double Load(uint32_t destination) const = 0;
  virtual bool Up(uint32_t destination) const = 0;
  virtual bool HasWork() const { return false; }
  virtual DestinationWork Work(uint32_t /*destination*/) const { return {}; }
  // Work summed over the destinations (only `prefilling` is required of a view).
  virtual DestinationWork FleetWork() const {
    DestinationWork total;
    for (uint32_t d = 0; d < size(); ++d) {
      const DestinationWork w = Work(d);
      total.queued_prefill_tokens += w.queued_prefill_tokens;
      total.prefilling += w.prefilling;
      total.decoding += w.decoding;
      total.active_tokens += w.active_tokens;
    }
    return total;
  }
  virtual EngineMetrics Scraped(uint32_t destination) const { return {Load(destination), 0}; }
};

// Why a request went where it went. Every reason but kPlanned is the fallback of the CacheRoute
// policy; the other policies always answer kPolicy.
enum class Reason : uint8_t {
  kPlanned,      // an admitted key, sent to the least-loaded up member of T(b)
  kNoTable,      // no table installed yet
  kStale,        // the table was not refreshed within its TTL
  kSetDown,      // an admitted key whose whole destination set is down
  kNotAdmitted,  // the key is not in the table
  kPolicy,       // decided by a non-table policy (flat-LB, sticky, CHWBL, DualMap, Preble)
  kControlArm,   // the key is on the rollout's control arm (RoutingTable::table_fraction)
};
inline constexpr int kReasonCount = 7;

inline constexpr EnumName<Reason> kReasonNames[] = {
    {Reason::kPlanned, "planned"},
    {Reason::kNoTable, "no_table"},
    {Reason::kStale, "stale"},
    {Reason::kSetDown, "set_down"},
    {Reason::kNotAdmitted, "not_admitted"},
    {Reason::kPolicy, "policy"},
    {Reason::kControlArm, "control_arm"},
};
static_assert(IsEnumTable(kReasonNames, kReasonCount));

inline std::string_view ReasonName(Reason r) { return NameOf(kReasonNames, r); }

// What a policy expected to find cached where it sent a request: only the template every
// destination holds, the key's previous prompt (the per-key memory, or the planned set), or a
// prefix it remembers sending there.
enum class CacheExpectation : uint8_t { kTemplate, kKey, kPrefix };

struct Decision {
  uint32_t destination = kNoDestination;
  bool planned = false;
  Reason reason = Reason::kPolicy;
  bool spilled = false;  // planned, but sent outside its set (its spill, or a random destination)
  // The prompt tokens the policy expects to prefill there (its prompt minus what it expects
  // cached); what the destination's queued prefill work counts until the first token. 0: the policy
  // made no estimate (the caller counts the whole prompt).
  uint32_t expected_uncached_tokens = 0;
  CacheExpectation expected = CacheExpectation::kTemplate;
  // The policy's id of this request, for the policies that count their own requests in flight
  // (Policy::Ticket); 0: none.
  uint64_t policy_request = 0;
};

// A key's two hashed candidates: distinct destinations in [0, n) from the key id alone (the same
// for every gateway), the first uniform, the second uniform over the other n - 1. {0, 0} for n < 2.
inline std::pair<uint32_t, uint32_t> HashedPair(uint64_t key_id, uint32_t n) {
  if (n < 2) return {0, 0};
  const auto reduce = [](uint64_t h, uint32_t m) {
    return static_cast<uint32_t>((static_cast<unsigned __int128>(h) * m) >> 64);
  };
  const uint32_t first = reduce(Mix64(key_id ^ 0x243f6a8885a308d3ULL), n);
  const uint32_t offset = 1 + reduce(Mix64(key_id ^ 0x13198a2e03707344ULL), n - 1);
  return {first, (first + offset) % n};
}

// Where keys were last sent: a bounded, direct-mapped map of atomics (one 64-bit word per entry:
// the key's high 32 bits as a tag, destination + 1 in the low 32 bits, 0 meaning empty). A newer
// key that maps to the same entry evicts the older, which bounds memory like Preble's LRU does
// without a lock. Two keys that share both the entry and the tag alias (probability 2^-32 per
// collision); the cost is one misrouted-but-valid request.
class KeyHistory {
 public:
  explicit KeyHistory(size_t capacity_log2)
      : mask_((size_t{1} << capacity_log2) - 1), entries_(new std::atomic<uint64_t>[mask_ + 1]) {
    for (size_t i = 0; i <= mask_; ++i) entries_[i].store(0, std::memory_order_relaxed);
  }

  uint32_t Get(uint64_t key_id) const {
    const uint64_t e = entries_[key_id & mask_].load(std::memory_order_relaxed);
    if ((e & 0xFFFFFFFFULL) == 0 || (e >> 32) != (key_id >> 32)) return kNoDestination;
    return static_cast<uint32_t>(e & 0xFFFFFFFFULL) - 1;
  }
  void Put(uint64_t key_id, uint32_t destination) {
    entries_[key_id & mask_].store((key_id >> 32) << 32 | (uint64_t{destination} + 1),
                                   std::memory_order_relaxed);
  }

 private:
  const size_t mask_;
  std::unique_ptr<std::atomic<uint64_t>[]> entries_;
};

// The helpers below take any LoadView; called with a final class (Router's own view), the
// compiler calls its Load and Up directly instead of through the vtable.
template <typename View = LoadView>
bool Usable(const View& loads, uint32_t d) {
  return d < loads.size() && loads.Up(d);
}

namespace dispatch_internal {
// RandomUpDestination after its first draw missed: seven more draws, then a scan from a random
// start so a mostly-down fleet still terminates.
template <typename View>
uint32_t RandomUpAfterMiss(const View& loads, Random& random, uint32_t exclude) {
  const uint32_t n = loads.size();
  for (int attempt = 1; attempt < 8; ++attempt) {
    uint32_t d = UniformIndex(random, n);
    if (d != exclude && loads.Up(d)) return d;
  }
  const uint32_t start = UniformIndex(random, n);
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t d = (start + i) % n;
    if (d != exclude && loads.Up(d)) return d;
  }
  return kNoDestination;
}
}  // namespace dispatch_internal

// A uniformly random up destination other than `exclude`, or kNoDestination. Rejection sampling
// first (eight draws; cheap when most of the fleet is up), then a scan from a random start so a
// mostly-down fleet still terminates. The first draw is inline: it is the request path's case.
template <typename View = LoadView>
inline uint32_t RandomUpDestination(const View& loads, Random& random,
                                    uint32_t exclude = kNoDestination) {
  const uint32_t n = loads.size();
  if (n == 0) return kNoDestination;
  const uint32_t d = UniformIndex(random, n);
  if (d != exclude && loads.Up(d)) return d;
  return dispatch_internal::RandomUpAfterMiss(loads, random, exclude);
}

// Power of two choices: two distinct random up destinations, the lighter one wins (the first on a
// tie: it is random already). With one up destination, that one.
struct TwoChoices {
  uint32_t first = kNoDestination;   // kNoDestination: none up
  uint32_t second = kNoDestination;  // kNoDestination: only `first` up
  uint32_t chosen = kNoDestination;
};
template <typename View = LoadView>
TwoChoices DrawTwoChoices(const View& loads, Random& random) {
  const uint32_t a = RandomUpDestination(loads, random);
  if (a == kNoDestination) return {};
  const uint32_t b = RandomUpDestination(loads, random, a);
  if (b == kNoDestination) return {a, kNoDestination, a};
  return {a, b, loads.Load(b) < loads.Load(a) ? b : a};
}
template <typename View = LoadView>
uint32_t PowerOfTwoChoices(const View& loads, Random& random) {
  return DrawTwoChoices(loads, random).chosen;
}

// The least-loaded up destination; ties broken by a random starting point so that an idle fleet
// does not send everything to destination 0.
inline uint32_t LeastLoaded(const LoadView& loads, Random& random) {
  const uint32_t n = loads.size();
  if (n == 0) return kNoDestination;
  const uint32_t start = UniformIndex(random, n);
  uint32_t best = kNoDestination;
  double best_load = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t d = (start + i) % n;
    if (!loads.Up(d)) continue;
    const double load = loads.Load(d);
    if (best == kNoDestination || load < best_load) {
      best = d;
      best_load = load;
    }
  }
  return best;
}

// The summed load of the up destinations, and how many are up.
struct UpLoad {
  double total = 0;
  uint32_t up = 0;
};
inline UpLoad SumUpLoad(const LoadView& loads) {
  UpLoad sum;
  for (uint32_t d = 0; d < loads.size(); ++d) {
    if (!loads.Up(d)) continue;
    sum.total += loads.Load(d);
    ++sum.up;
  }
  return sum;
}

// Mean load over up destinations (0 when none is up).
inline double MeanUpLoad(const LoadView& loads) {
  const UpLoad sum = SumUpLoad(loads);
  return sum.up == 0 ? 0.0 : sum.total / sum.up;
}

}  // namespace cacheroute::dataplane
