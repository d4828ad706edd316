// Gate: the self-gating rollout of routing tables (issue 13; docs/gate.md). Gateways split keys
// into a table arm (routed by the table) and a control arm (routed without it: CacheRoute's
// dispatch with no table, or power of two choices under the paper's rule) with
// dataplane::ArmOf(key_id, table_fraction) and report per-arm Evidence; once per control interval
// the planner feeds the merged Evidence to Observe, which decides the rollout state and the
// fraction of keys on the table arm: shadow → canary → enabled, rolled_back from canary or
// enabled, and a retry from rolled_back to canary (fractions per state: TableFraction).
//
// Compare decides once both arms have min_samples TTFT samples in the current batch: worse when
// the table arm's share of samples above control's q-quantile bucket, or of failures, is
// significantly higher (a pooled two-proportion z test with margins); better when the reverse
// holds or the table's served KV hit beats control's by kv_hit_margin; else not worse. The rule,
// the envelope and the envelope rule are derived in docs/gate.md ("The decision rule").
//
// Invariants: every state change clears the evidence window and the streaks (old evidence belongs
// to the old split); a forced state never changes in Observe; the results depend only on the
// options, the initial or restored state and the sequence of calls. Pure: no clock, no I/O, no
// randomness. Not thread-safe: the planner calls it under its lock.
//
// Usage:
//   Gate gate(options);                                      // options pass Validate()
//   Gate::Decision d = gate.Observe(merged_interval_evidence);  // once per control interval
//   if (d.changed) Log(d.why);
//   table.set_table_fraction(d.table_fraction);
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "cacheroute/dataplane/arm_evidence.h"

namespace cacheroute::planner {

enum class GateState : uint8_t { kShadow, kCanary, kEnabled, kRolledBack };
inline constexpr GateState kGateStates[] = {GateState::kShadow, GateState::kCanary,
                                            GateState::kEnabled, GateState::kRolledBack};

// "shadow", "canary", "enabled", "rolled_back".
absl::string_view GateStateName(GateState state);
// The inverse of GateStateName (exact, lower case); nullopt for any other string.
std::optional<GateState> ParseGateState(absl::string_view name);

struct GateOptions {
  // Per arm per decision: TTFT samples (requests that produced a first token) over the window.
  // ≥ 1. Fewer on either arm: the verdict is kTooFewSamples and nothing is decided.
  uint64_t min_samples = 200;
  // A decision's batch: the intervals since the last decision (and since the last state change),
  // at most the last N; in [1, kMaxWindowIntervals]. Only a batch with min_samples on both arms
  // is decided on; it then starts anew, so consecutive decisions are independent.
  uint32_t window_intervals = 30;
  // Intervals spent in shadow (table fraction 0) before the canary starts; ≥ 1. To skip shadow,
  // construct the Gate in kCanary.
  uint32_t shadow_intervals = 1;
  // Share of keys on the table arm during the canary; in (0, 1].
  double canary_fraction = 0.2;
  // Share of keys kept on the control arm while enabled (table fraction 1 − control_fraction);
  // in [0, 1). 0 leaves no control arm: every verdict is then kTooFewSamples and an enabled gate
  // is never rolled back.
  double control_fraction = 0.05;
  // Consecutive kNotWorse or kBetter canary decisions → enabled; ≥ 1.
  uint32_t promote_after = 3;
  // Consecutive kBetter canary decisions → enabled (a canary significantly better than control
  // is promoted sooner); in [1, promote_after].
  uint32_t promote_better_after = 1;
  // Consecutive kWorse canary decisions → rolled_back; ≥ 1.
  uint32_t canary_rollback_after = 1;
  // Consecutive kWorse decisions while enabled → rolled_back; ≥ 1.
  uint32_t rollback_after = 2;
  // Intervals in rolled_back before a new canary; 0 = never retry.
  uint32_t retry_after = 30;
  // Share of keys on the table arm while rolled back; in [0, 1). Its verdicts are reported but
  // decide nothing: only retry_after leaves rolled_back.
  double rolled_back_probe_fraction = 0.0;
  // The TTFT quantile compared; in (0, 1).
  double quantile = 0.99;
  // One-sided critical value of both z-tests (2.33: ~1% per test under the normal
  // approximation); finite, > 0.
  double z = 2.33;
  // Absolute margin on the share above the quantile bucket (0.01 tolerates one percentage point
  // more of the table's samples above it); in [0, 1).
  double ttft_margin = 0.0;
  // Absolute margin on the failure rate; in [0, 1).
  double failure_margin = 0.005;
  // The latency envelope (the deployment's TTFT SLO, seconds): the table arm's TTFT tail counts
  // as worse only while its quantile is above it, so a table that meets the SLO is never rolled
  // back for a tail that is merely longer than control's. 0: no envelope (always compared);
  // finite, >= 0. Failures are compared either way.
  double ttft_envelope_seconds = 0;
  // The envelope rule (with ttft_envelope_seconds > 0, while enabled): the table arm's evidence
  // is checked in chunks of at least envelope_min_samples TTFT samples (an interval, or several
  // at low traffic); a chunk whose q-quantile bucket lies wholly above the envelope is a breach.
  // When N = envelope_rollback_after of the last 2·N − 1 chunks are breaches (a majority; the
  // last one among them), the table is rolled back if, over those chunks, the control arm's
  // q-quantile is inside the envelope (control meets the SLO the table misses), or Compare with
  // envelope_min_samples per arm says worse (both miss it, the table by significantly more). A
  // tail that leaves the envelope in every other chunk is caught; a lone breach is not. An overloaded fleet, where both arms miss it alike, is not the
  // table's fault. It acts on a small control arm long before the batches of Compare can.
  // envelope_rollback_after 0 turns the rule off; envelope_min_samples ≥ 1.
  uint32_t envelope_rollback_after = 3;
  uint64_t envelope_min_samples = 100;
  // A table arm whose TTFT and failures are not worse and whose served KV hit (Σ cached / Σ
  // prompt tokens) is at least this much above control's (absolute; 0.1 = ten points) is better:
  // the table does what it is for, and a shared fleet's queues hide the latency gain from the
  // arm split. In [0, 1]; 0: the KV hit is never compared.
  double kv_hit_margin = 0.1;
  // Whether the planner runs the gate at all when its configuration does not say; false keeps
  // the behaviour before issue 13 (every key on the table, fraction 1). The Gate itself does not
  // read it.
  bool enabled_by_default = true;

  static constexpr uint32_t kMaxWindowIntervals = 1000;

  // InvalidArgument naming the field and value, e.g. "gate.canary_fraction must be in (0, 1],
  // got 1.5", for the first option out of its range.
  absl::Status Validate() const;
};

struct Verdict {
  enum Kind { kTooFewSamples, kWorse, kNotWorse, kBetter } kind = kTooFewSamples;
  std::string why;                                          // one sentence with the numbers
  double table_quantile = 0, control_quantile = 0;          // TtftHistogram::Quantile(q), seconds
  double table_failure_rate = 0, control_failure_rate = 0;  // failures / requests (0 when none)
  double table_kv_hit = 0, control_kv_hit = 0;  // cached / prompt tokens (0 when none)
  uint64_t table_samples = 0, control_samples = 0;          // TTFT samples
  // The statistics (0 when too few samples): TTFT worse-direction, failures, TTFT
  // better-direction. A test fires when its statistic exceeds options.z.
  double ttft_z = 0, failure_z = 0, better_z = 0;
};

// "too_few_samples", "worse", "not_worse", "better".
absl::string_view VerdictKindName(Verdict::Kind kind);

// The decision rule stated at the top of this file; `options` must pass Validate().
Verdict Compare(const dataplane::ArmEvidence& table, const dataplane::ArmEvidence& control,
                const GateOptions& options);

// The table arm's share of keys in `state` under `options`: shadow 0, canary canary_fraction,
// enabled 1 − control_fraction, rolled_back rolled_back_probe_fraction.
double TableFraction(GateState state, const GateOptions& options);

class Gate {
 public:
  struct Decision {
    GateState state = GateState::kShadow;  // after this interval
    double table_fraction = 0;             // TableFraction(state)
    bool changed = false;                  // state differs from the one before this interval
    std::string why;
    Verdict verdict;        // of the window including this interval (computed even when forced)
    uint64_t interval = 0;  // Observe calls so far, this one included (kept across Restore)
  };

  // What a restart needs. The window and the streaks are not kept: after Restore a decision
  // waits for new evidence.
  struct Persisted {
    GateState state = GateState::kShadow;
    std::optional<GateState> forced;
    std::string forced_why;
    uint64_t intervals_in_state = 0;
    uint64_t interval = 0;
  };

  // `options` must pass Validate() (checked only by assert).
  explicit Gate(GateOptions options, GateState initial = GateState::kShadow);

  // Adds one control interval's merged evidence to the batch (dropping the oldest beyond
  // window_intervals), computes the verdict of the batch and applies the rules
  // (docs/gate.md, "States"); a verdict other than kTooFewSamples empties the batch. shadow →
  // canary after shadow_intervals; canary → rolled_back after canary_rollback_after worse
  // decisions in a row, → enabled after promote_after not-worse (or better) ones in a row or
  // promote_better_after better ones in a row; enabled → rolled_back after rollback_after worse ones in a row,
  // or by the envelope rule (GateOptions::envelope_rollback_after);
  // rolled_back → canary after retry_after intervals. kTooFewSamples leaves the streaks as they
  // are. While a state is forced nothing changes but the window.
  Decision Observe(const dataplane::Evidence& interval_evidence);

  // An operator's forced state, which holds until Force(nullopt). Forcing another state than the
  // current one is a state change (window cleared). Both forcing and releasing restart the
  // streaks and the intervals counted in the state.
  void Force(std::optional<GateState> state, std::string why);
  std::optional<GateState> forced() const { return forced_; }
  const std::string& forced_why() const { return forced_why_; }

  GateState state() const { return state_; }
  double table_fraction() const { return TableFraction(state_, options_); }
  uint64_t intervals_in_state() const { return intervals_in_state_; }
  const GateOptions& options() const { return options_; }

  Persisted Save() const;
  // A gate in the saved state (the forced one if any, still forced), with an empty window and no
  // streaks. `options` must pass Validate().
  static Gate Restore(GateOptions options, const Persisted& persisted);

 private:
  void Enter(GateState state);  // a state change: clears the window, then ResetCounters
  // Clears the streaks, the state clock and the envelope rule's run.
  void ResetCounters();
  // The envelope rule on one more interval (enabled only): the reason to roll back, if it says so.
  std::optional<std::string> EnvelopeBreached(const dataplane::Evidence& interval_evidence);

  GateOptions options_;
  GateState state_;
  std::optional<GateState> forced_;
  std::string forced_why_;
  uint64_t intervals_in_state_ = 0;
  uint64_t interval_ = 0;
  uint32_t worse_streak_ = 0;
  uint32_t good_streak_ = 0;    // kNotWorse or kBetter, in canary
  uint32_t better_streak_ = 0;  // kBetter, in canary
  std::deque<dataplane::Evidence> window_;
  // The envelope rule (enabled only): the check being filled and the last 2·N − 1 checks.
  struct EnvelopeCheck {
    dataplane::Evidence evidence;
    bool breach = false;
  };
  dataplane::Evidence envelope_chunk_;
  std::deque<EnvelopeCheck> envelope_checks_;
};

}  // namespace cacheroute::planner
