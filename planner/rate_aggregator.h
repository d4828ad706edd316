// RateAggregator: the planner's per-key request-rate estimator. Gateways report how many requests
// each key received (cacheroute.v1.ReportRatesRequest, which the service converts to RateReport);
// the aggregator sums them across gateways and smooths them over time into the per-key rates λ_b
// that PlanBuilder plans from (the CacheRoute paper, §6).
//
// Time is the caller's `now` at every Apply and CloseInterval; counts belong to the interval in
// which they are applied. CloseInterval(t_i) updates every known key b, with Δt = t_i − t_{i−1}
// and τ = options.smoothing: λ_b ← α·C_b/Δt + (1 − α)·λ_b, α = 1 − exp(−Δt/τ) (C_b: b's counts in
// the interval), and λ_other likewise from other_count. New keys start from 0 (63% of their rate
// after τ, 95% after 3τ); keys not reported within key_ttl are forgotten. Apply validates the
// whole report first (InvalidArgument naming the field and the value); a report whose sequence is
// at or below its gateway's last applied one is a duplicate, acknowledged and not applied again.
//
// Entries that carry reusable_tokens (with prompt_tokens) also give the key's mean reusable and
// prompt tokens per request, smoothed per interval with the same α (Tokens()), for byte-aware
// planning; a key never reported with them has none.
//
// Invariants: every rate and pending count is finite and ≥ 0 (counts above kMaxCount are
// rejected); a rejected or duplicate report changes nothing; results depend only on the options,
// the start time and the calls, bit for bit; Rates() is in ascending key id order. No I/O, no
// threads, no clock. Not thread-safe; the service serialises calls.
// Derivation, choices and costs: docs/planner.md, "Rate estimation".
//
// Usage:
//   RateAggregator aggregator(RateAggregatorOptions{}, clock->Now());
//   absl::StatusOr<ReportResult> result = aggregator.Apply(report, clock->Now());
//   if (!result.ok()) return result.status();  // InvalidArgument naming the field and value
//   aggregator.CloseInterval(clock->Now());    // once per control interval
//   std::vector<KeyRate> rates = aggregator.Rates();
//   absl::StatusOr<Plan> plan = builder.Build(rates, config);
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "cacheroute/dataplane/arm_evidence.h"
#include "planner/plan.h"

namespace cacheroute::planner {

// Requests for one key in a report's window (cacheroute.v1.KeyCount).
struct KeyCountReport {
  uint64_t key_id = 0;
  double count = 0;                     // finite, 0 ≤ count ≤ RateAggregator::kMaxCount
  std::optional<double> prompt_tokens;  // Σ prompt tokens of those requests; finite, ≥ 0 when set
  std::string key;                      // optional readable key, ≤ 256 bytes
  // Σ over those requests of the tokens each shares with the key's previous request (its
  // reusable prefix); finite, ≥ 0, ≤ prompt_tokens, which must be set with it. Together they
  // give the key's mean sizes for byte-aware planning.
  std::optional<double> reusable_tokens{};
  // Optional: the destination (by name) the gateway last sent the key to, ≤ 256 bytes; where the
  // key's prefix is warm (PlannerConfig::follow_served).
  std::string served_at;
};

// One gateway's report (cacheroute.v1.ReportRatesRequest).
// One rollout arm's evidence in a report (dataplane/arm_evidence.h, docs/gate.md): failures ≤
// requests, cached_tokens ≤ prompt_tokens, and ttft_bucket_counts either empty or one count per
// TtftHistogram bucket, their sum ≤ requests. Every number ≤ kMaxEvidenceCount.
struct ArmReport {
  uint64_t requests = 0;
  uint64_t failures = 0;
  uint64_t prompt_tokens = 0;
  uint64_t cached_tokens = 0;
  std::vector<uint64_t> ttft_bucket_counts;
};
// The window's evidence for the rollout split at table_fraction (in [0, 1]).
struct EvidenceReport {
  double table_fraction = 1.0;
  ArmReport table;
  ArmReport control;

  // A gateway's recorded evidence as a report (what the wire carries, without the wire).
  static EvidenceReport From(double table_fraction, const dataplane::Evidence& evidence);
};

struct RateReport {
  std::string gateway_id;  // non-empty, ≤ 128 bytes
  uint64_t sequence = 0;   // increases by one per report from this gateway
  int64_t window_start_unix_ms = 0;
  int64_t window_end_unix_ms = 0;      // > start; the window is at most 1 hour
  std::vector<KeyCountReport> counts;  // each key_id at most once; ≤ max_keys_per_report entries
  double other_count = 0;  // requests for keys not listed one by one; like KeyCountReport::count
  std::optional<EvidenceReport> evidence;  // the rollout gate's, when the gateway sends it
};

struct ReportResult {
  bool duplicate = false;      // the (gateway_id, sequence) was applied before; nothing changed
  uint64_t accepted_keys = 0;  // entries applied from this report
};

struct RateAggregatorOptions {
  absl::Duration smoothing = absl::Seconds(60);  // τ, the EWMA time constant; finite, > 0
  absl::Duration key_ttl = absl::Minutes(10);    // keys (and gateways) silent this long are
                                                 // forgotten; finite, > 0
  size_t max_keys_per_report = 100000;           // in [1, 2^32 − 1]
};

struct GatewayInfo {
  std::string gateway_id;
  uint64_t last_sequence = 0;  // of the last report applied
  absl::Time last_report;      // `now` of the last report applied
  uint64_t reports = 0;        // reports applied (duplicates not included)

  bool operator==(const GatewayInfo&) const = default;
};

class RateAggregator {
 public:
  // Largest count (or other_count) one report may carry for one key: far above any real window
  // (it is 2.8·10^11 requests per second for an hour), and small enough that no sum of counts can
  // reach infinity.
  static constexpr double kMaxCount = 1e15;
  static constexpr size_t kMaxKeyBytes = 256;
  static constexpr size_t kMaxGatewayIdBytes = 128;
  static constexpr int64_t kMaxWindowMs = 3600 * 1000;
  // Largest request or token count of one arm in one report (sums stay far from overflow).
  static constexpr uint64_t kMaxEvidenceCount = uint64_t{1} << 50;

  // Everything needed to continue exactly where Export was called: a plain value the service
  // serialises. Restore accepts the keys and gateways in any order.
  struct State {
    struct Key {
      uint64_t key_id = 0;
      double rate = 0;         // λ_b, requests per second
      double pending = 0;      // counts applied since last_close
      absl::Time last_report;  // `now` of the last Apply that listed the key
      std::string name;        // the readable key; "" when none was ever sent
      // The smoothed mean sizes (kUnmeasured: none yet) and the sizes applied since last_close.
      double reusable = kUnmeasured;
      double prompt = kUnmeasured;
      double pending_reusable = 0;  // Σ reusable_tokens
      double pending_prompt = 0;    // Σ prompt_tokens of the same entries
      double pending_measured = 0;  // Σ count of the same entries

      bool operator==(const Key&) const = default;
    };
    absl::Time last_close;
    double unkeyed_rate = 0;
    double unkeyed_pending = 0;
    std::vector<Key> keys;              // ascending key_id
    std::vector<GatewayInfo> gateways;  // ascending gateway_id

    bool operator==(const State&) const = default;
  };

  // `options` must pass ValidateOptions and `start` (the beginning of the first interval) must be
  // finite; both are checked only by assert.
  explicit RateAggregator(RateAggregatorOptions options, absl::Time start);

  // Movable, not copyable: Export and Restore make a copy.
  RateAggregator(RateAggregator&&) = default;
  RateAggregator& operator=(RateAggregator&&) = default;

  // InvalidArgument naming the field and value unless smoothing and key_ttl are finite and > 0
  // and max_keys_per_report is in [1, 2^32 − 1].
  static absl::Status ValidateOptions(const RateAggregatorOptions& options);

  // Validates the whole report, then applies it: its counts join the current interval, and its
  // keys' and gateway's last report time becomes `now`. On an error (InvalidArgument naming the
  // field and value, e.g. "counts[3].count: must be a finite number >= 0, got nan") nothing is
  // applied. A report whose sequence is at or below the last one applied for its gateway returns
  // {.duplicate = true} and applies nothing.
  absl::StatusOr<ReportResult> Apply(const RateReport& report, absl::Time now);
  // Apply's validation alone (InvalidArgument naming the field), changing nothing: for a replica
  // that checks a report before replicating it (docs/ha.md).
  absl::Status ValidateReport(const RateReport& report);

  // Closes the interval [last close, now) and updates the rates as described at the top of this
  // file, then forgets keys and gateways silent for longer than key_ttl. Nothing happens when
  // now ≤ last close.
  void CloseInterval(absl::Time now);

  // The smoothed rate of every known key, ascending by key id. Keys reported since the last
  // CloseInterval for the first time are included with rate 0.
  std::vector<KeyRate> Rates() const;
  // Rates() and, at the same index, each key's smoothed mean sizes (kUnmeasured when no report
  // carried them), for byte-aware planning.
  void Estimates(std::vector<KeyRate>& rates, std::vector<KeyTokens>& tokens) const;
  // The key's smoothed mean sizes; kUnmeasured fields when none, nullopt when not known.
  std::optional<KeyTokens> TokensOf(uint64_t key_id) const;
  // The smoothed rate of the traffic reported as other_count.
  double UnkeyedRate() const { return unkeyed_rate_; }
  size_t known_keys() const { return keys_.size(); }
  // The key's smoothed rate, or nullopt when the key is not known.
  std::optional<double> RateOf(uint64_t key_id) const;
  // The last readable key sent for the key; "" when none was or the key is not known. Valid until
  // the next non-const call.
  std::string_view KeyName(uint64_t key_id) const;
  // The destination a gateway last reported serving the key at (the latest report that said);
  // "" when none did. Soft state: not in Export, so a restored aggregator learns it again from the
  // next reports. Valid until the next non-const call.
  std::string_view ServedAt(uint64_t key_id) const;
  // Ascending by gateway_id.
  std::vector<GatewayInfo> Gateways() const;

  // The rollout evidence applied since the last TakeEvidence for the split at table_fraction,
  // merged exactly over reports (each applied once: duplicates add nothing), and forgets all of
  // it: evidence of any other split belongs to an old table and is dropped.
  dataplane::Evidence TakeEvidence(double table_fraction);

  State Export() const;
  // InvalidArgument naming the field and value for invalid options, a time that is not finite
  // (or outside the years 1678 to 2262), a rate or pending count that is negative or not finite,
  // an over-long name or gateway id, an empty gateway id, or a key id or gateway id listed twice.
  static absl::StatusOr<RateAggregator> Restore(const State& state, RateAggregatorOptions options);

 private:
  // A key's strings, only for keys that were ever sent with one.
  struct KeyText {
    std::string name;
    std::string served_at;
  };
  // One known key: 64 bytes with its id in the map's slot. Sizes are floats: estimates.
  struct KeyEntry {
    double rate = 0;
    double pending = 0;
    int64_t last_report_ns = 0;     // Unix nanoseconds
    std::unique_ptr<KeyText> text;  // null until a report names the key or where it was served
    float reusable = kUnmeasured;   // smoothed mean tokens per request
    float prompt = kUnmeasured;
    float pending_reusable = 0;  // Σ reusable_tokens since the last close
    float pending_prompt = 0;
    float pending_measured = 0;  // Σ count of the entries that carried them
  };
  struct GatewayEntry {
    uint64_t last_sequence = 0;
    absl::Time last_report;
    uint64_t reports = 0;
  };
  // A slot of the duplicate-key-id table used while validating one report. Slots are valid only
  // when they carry the current generation, so the table is reused without being cleared.
  struct SeenSlot {
    uint64_t key_id = 0;
    uint32_t generation = 0;
    uint32_t index = 0;  // where in report.counts the key id was first seen
  };

  RateAggregatorOptions options_;
  absl::Time last_close_;
  double unkeyed_rate_ = 0;
  double unkeyed_pending_ = 0;
  absl::flat_hash_map<uint64_t, KeyEntry> keys_;
  absl::flat_hash_map<std::string, GatewayEntry> gateways_;
  std::vector<SeenSlot> seen_;
  uint32_t seen_generation_ = 0;
  // Evidence since the last TakeEvidence, by the split it was measured at (few entries).
  std::vector<std::pair<double, dataplane::Evidence>> evidence_;
};

}  // namespace cacheroute::planner
