// Arm evidence: what a gateway records, per rollout arm, for the planner's rollout gate
// (planner/gate.h, docs/gate.md). While a table rolls out, each key is on one of two arms:
// kTable (routed by the table) or kControl (plain load balancing). ArmOf(key_id, f) is the split;
// requests on each arm add to its ArmEvidence; gateways report an Evidence per interval and the
// planner merges them and feeds the merged Evidence to the gate.
//
// ArmOf is a pure function of (key_id, fraction): u = Mix64(key_id ^ kArmSalt) / 2^64 in [0, 1),
// kTable iff u < fraction (clamped to [0, 1]; NaN counts as 0). The salt makes the split
// independent of the key-id bits the table and the policies hash. A key keeps its arm while the
// fraction only grows, and every gateway splits the same way.
//
// TtftHistogram counts time-to-first-token samples in fixed buckets: bucket i holds the samples
// s with bounds()[i−1] < s ≤ bounds()[i]; the last bound is +inf (the overflow bucket); negative
// and NaN samples go to bucket 0. Merge of histograms, ArmEvidence and Evidence is an exact
// elementwise sum, so it is associative and commutative and the order of reports never matters.
// No clock, no I/O, no randomness, no allocation; not thread-safe (one recorder per thread, or a
// lock, then Merge).
//
// Usage:
//   Evidence evidence;                                        // this interval's, on one gateway
//   const Arm arm = ArmOf(key_id, table.table_fraction());    // on every request
//   ArmEvidence& e = evidence.of(arm);
//   ++e.requests; e.failures += failed; if (first_token) e.ttft.Observe(ttft_seconds);
//   Send(evidence.table.ttft.counts());  // the planner: TtftHistogram::FromCounts(received)
#pragma once

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>

#include "cacheroute/dataplane/key_id.h"

namespace cacheroute::dataplane {

enum class Arm : uint8_t { kTable = 0, kControl = 1 };

// XORed into the key id before mixing, so that u is unrelated to Mix64(key_id) and to the
// table's and policies' own salted hashes (the third 64-bit word of π's fraction; dispatch.h
// uses the first two). Part of the protocol: changing it re-splits every key.
inline constexpr uint64_t kArmSalt = 0xa4093822299f31d0ULL;

// The key's position in [0, 1) for the arm split: the top 53 bits of the salted mix.
inline double ArmPosition(uint64_t key_id) {
  return static_cast<double>(Mix64(key_id ^ kArmSalt) >> 11) * 0x1.0p-53;
}

// kTable iff ArmPosition(key_id) < table_fraction; 0 (or less, or NaN) → always kControl,
// 1 (or more) → always kTable.
inline Arm ArmOf(uint64_t key_id, double table_fraction) {
  if (!(table_fraction > 0)) return Arm::kControl;
  if (table_fraction >= 1) return Arm::kTable;
  return ArmPosition(key_id) < table_fraction ? Arm::kTable : Arm::kControl;
}

class TtftHistogram {
 public:
  static constexpr size_t kBuckets = 22;
  using Counts = std::array<uint64_t, kBuckets>;
  // Upper bounds in seconds, bucket by bucket; the last one, +inf, is the overflow bucket.
  // clang-format off
  static constexpr std::array<double, kBuckets> kBounds = {
      0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 7.5, 10, 15, 20,
      30, 60, std::numeric_limits<double>::infinity()};
  // clang-format on

  static const std::array<double, kBuckets>& bounds() { return kBounds; }

  // The bucket a sample goes to: the first i with seconds ≤ bounds()[i]; 0 for negative or NaN.
  static size_t BucketOf(double seconds) {
    if (!(seconds > kBounds[0])) return 0;
    return static_cast<size_t>(std::lower_bound(kBounds.begin(), kBounds.end(), seconds) -
                               kBounds.begin());
  }

  // A histogram with these bucket counts (a wire message's repeated field, in bucket order), or
  // nullopt unless there are exactly kBuckets of them and their sum fits 64 bits.
  static std::optional<TtftHistogram> FromCounts(std::span<const uint64_t> counts) {
    if (counts.size() != kBuckets) return std::nullopt;
    TtftHistogram h;
    uint64_t total = 0;
    for (size_t i = 0; i < kBuckets; ++i) {
      if (counts[i] > std::numeric_limits<uint64_t>::max() - total) return std::nullopt;
      total += counts[i];
      h.counts_[i] = counts[i];
    }
    return h;
  }

  void Observe(double seconds) { ++counts_[BucketOf(seconds)]; }

  void Merge(const TtftHistogram& other) {
    for (size_t i = 0; i < kBuckets; ++i) counts_[i] += other.counts_[i];
  }

  const Counts& counts() const { return counts_; }

  uint64_t count() const {
    uint64_t total = 0;
    for (uint64_t c : counts_) total += c;
    return total;
  }

  // Samples in the buckets strictly after `bucket` (0 when bucket ≥ kBuckets − 1).
  uint64_t CountAbove(size_t bucket) const {
    uint64_t total = 0;
    for (size_t i = bucket + 1; i < kBuckets; ++i) total += counts_[i];
    return total;
  }

  // The bucket holding the q-quantile sample: the sample of rank r = max(1, ⌈q·n⌉) in ascending
  // order (the nearest-rank definition), q clamped to [0, 1] (NaN as 0). 0 when empty.
  size_t QuantileBucket(double q) const {
    const uint64_t n = count();
    if (n == 0) return 0;
    if (!(q > 0)) q = 0;
    if (q > 1) q = 1;
    const uint64_t rank = std::clamp<uint64_t>(
        static_cast<uint64_t>(std::ceil(q * static_cast<double>(n))), 1, n);  // ⌈q·n⌉
    uint64_t seen = 0;
    for (size_t i = 0; i < kBuckets; ++i) {
      seen += counts_[i];
      if (seen >= rank) return i;
    }
    return kBuckets - 1;
  }

  // The upper bound of QuantileBucket(q), in seconds (+inf for the overflow bucket); 0 when empty.
  double Quantile(double q) const { return count() == 0 ? 0.0 : kBounds[QuantileBucket(q)]; }

  bool operator==(const TtftHistogram&) const = default;

 private:
  Counts counts_{};
};

// One arm's evidence over some window (an interval on one gateway, or merged).
struct ArmEvidence {
  uint64_t requests = 0;       // requests that ended on this arm, failed or not
  uint64_t failures = 0;       // of those, the ones that failed (error, timeout, no first token)
  uint64_t prompt_tokens = 0;  // Σ prompt tokens of those requests
  uint64_t cached_tokens = 0;  // Σ of the prompt tokens the engine served from its prefix cache
  TtftHistogram ttft;          // one sample per request that produced a first token

  void Merge(const ArmEvidence& other) {
    requests += other.requests;
    failures += other.failures;
    prompt_tokens += other.prompt_tokens;
    cached_tokens += other.cached_tokens;
    ttft.Merge(other.ttft);
  }

  bool operator==(const ArmEvidence&) const = default;
};

struct Evidence {
  ArmEvidence table;
  ArmEvidence control;

  void Merge(const Evidence& other) {
    table.Merge(other.table);
    control.Merge(other.control);
  }
  ArmEvidence& of(Arm arm) { return arm == Arm::kTable ? table : control; }
  const ArmEvidence& of(Arm arm) const { return arm == Arm::kTable ? table : control; }

  bool operator==(const Evidence&) const = default;
};

}  // namespace cacheroute::dataplane
