#include "planner/gate.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <iterator>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "cacheroute/dataplane/enum_names.h"

namespace cacheroute::planner {
namespace {

using dataplane::ArmEvidence;
using dataplane::EnumName;
using dataplane::Evidence;
using dataplane::TtftHistogram;

constexpr EnumName<GateState> kGateStateNames[] = {
    {GateState::kShadow, "shadow"},
    {GateState::kCanary, "canary"},
    {GateState::kEnabled, "enabled"},
    {GateState::kRolledBack, "rolled_back"},
};
static_assert(dataplane::IsEnumTable(kGateStateNames, std::size(kGateStates)));

constexpr EnumName<Verdict::Kind> kVerdictKindNames[] = {
    {Verdict::kTooFewSamples, "too_few_samples"},
    {Verdict::kWorse, "worse"},
    {Verdict::kNotWorse, "not_worse"},
    {Verdict::kBetter, "better"},
};
static_assert(dataplane::IsEnumTable(kVerdictKindNames, Verdict::kBetter));

absl::Status OutOfRange(absl::string_view field, absl::string_view range, double value) {
  return absl::InvalidArgumentError(
      absl::StrCat("gate.", field, " must be ", range, ", got ", value));
}

// (x1/n1 − x2/n2 − margin) / se with the pooled standard error
// se = √(p(1 − p)(1/n1 + 1/n2)), p = (x1 + x2)/(n1 + n2). 0 when either n is 0 or se is 0 (then
// x1/n1 = x2/n2: no evidence of a difference).
double PooledZ(uint64_t x1, uint64_t n1, uint64_t x2, uint64_t n2, double margin) {
  if (n1 == 0 || n2 == 0) return 0;
  const double dn1 = static_cast<double>(n1);
  const double dn2 = static_cast<double>(n2);
  const double p1 = static_cast<double>(x1) / dn1;
  const double p2 = static_cast<double>(x2) / dn2;
  const double p = (static_cast<double>(x1) + static_cast<double>(x2)) / (dn1 + dn2);
  const double se = std::sqrt(p * (1 - p) * (1 / dn1 + 1 / dn2));
  if (!(se > 0)) return 0;
  return (p1 - p2 - margin) / se;
}

double Rate(uint64_t x, uint64_t n) {
  return n == 0 ? 0.0 : static_cast<double>(x) / static_cast<double>(n);
}

std::string Seconds(double s) {
  if (std::isinf(s))
    return absl::StrCat("> ", TtftHistogram::bounds()[TtftHistogram::kBuckets - 2], " s");
  return absl::StrCat(s, " s");
}

std::string Percent(double share) {
  if (share == 0) return "0%";
  return share >= 0.01 ? absl::StrFormat("%.1f%%", 100 * share)
                       : absl::StrFormat("%.2f%%", 100 * share);
}

std::string Test(double z, double critical) {
  return absl::StrFormat("z %.1f %s %g", z, z > critical ? ">" : "<=", critical);
}

}  // namespace

absl::string_view GateStateName(GateState state) {
  return dataplane::NameOf(kGateStateNames, state);
}

std::optional<GateState> ParseGateState(absl::string_view name) {
  return dataplane::ParseName(kGateStateNames, std::string_view(name.data(), name.size()));
}

absl::string_view VerdictKindName(Verdict::Kind kind) {
  return dataplane::NameOf(kVerdictKindNames, kind);
}

absl::Status GateOptions::Validate() const {
  auto in_unit = [](double v, bool open_low, bool open_high) {
    return (open_low ? v > 0 : v >= 0) && (open_high ? v < 1 : v <= 1);
  };
  if (min_samples < 1) return OutOfRange("min_samples", ">= 1", static_cast<double>(min_samples));
  if (window_intervals < 1 || window_intervals > kMaxWindowIntervals) {
    return OutOfRange("window_intervals", absl::StrCat("in [1, ", kMaxWindowIntervals, "]"),
                      window_intervals);
  }
  if (shadow_intervals < 1) return OutOfRange("shadow_intervals", ">= 1", shadow_intervals);
  if (!in_unit(canary_fraction, true, false)) {
    return OutOfRange("canary_fraction", "in (0, 1]", canary_fraction);
  }
  if (!in_unit(control_fraction, false, true)) {
    return OutOfRange("control_fraction", "in [0, 1)", control_fraction);
  }
  if (promote_after < 1) return OutOfRange("promote_after", ">= 1", promote_after);
  if (promote_better_after < 1 || promote_better_after > promote_after) {
    return OutOfRange("promote_better_after",
                      absl::StrCat("in [1, promote_after (", promote_after, ")]"),
                      promote_better_after);
  }
  if (canary_rollback_after < 1) {
    return OutOfRange("canary_rollback_after", ">= 1", canary_rollback_after);
  }
  if (rollback_after < 1) return OutOfRange("rollback_after", ">= 1", rollback_after);
  if (!in_unit(rolled_back_probe_fraction, false, true)) {
    return OutOfRange("rolled_back_probe_fraction", "in [0, 1)", rolled_back_probe_fraction);
  }
  if (!in_unit(quantile, true, true)) return OutOfRange("quantile", "in (0, 1)", quantile);
  if (!(std::isfinite(z) && z > 0)) return OutOfRange("z", "finite and > 0", z);
  if (!in_unit(ttft_margin, false, true)) {
    return OutOfRange("ttft_margin", "in [0, 1)", ttft_margin);
  }
  if (!in_unit(failure_margin, false, true)) {
    return OutOfRange("failure_margin", "in [0, 1)", failure_margin);
  }
  if (!in_unit(kv_hit_margin, false, false)) {
    return OutOfRange("kv_hit_margin", "in [0, 1]", kv_hit_margin);
  }
  if (!(std::isfinite(ttft_envelope_seconds) && ttft_envelope_seconds >= 0)) {
    return OutOfRange("ttft_envelope_seconds", "finite and >= 0", ttft_envelope_seconds);
  }
  if (envelope_min_samples < 1) {
    return OutOfRange("envelope_min_samples", ">= 1", envelope_min_samples);
  }
  return absl::OkStatus();
}

Verdict Compare(const ArmEvidence& table, const ArmEvidence& control, const GateOptions& options) {
  const double q = options.quantile;
  Verdict v;
  v.table_samples = table.ttft.count();
  v.control_samples = control.ttft.count();
  v.table_quantile = table.ttft.Quantile(q);
  v.control_quantile = control.ttft.Quantile(q);
  // Failures beyond requests would be a reporting error; count them as at most every request.
  const uint64_t table_failures = std::min(table.failures, table.requests);
  const uint64_t control_failures = std::min(control.failures, control.requests);
  v.table_failure_rate = Rate(table_failures, table.requests);
  v.control_failure_rate = Rate(control_failures, control.requests);
  v.table_kv_hit = Rate(std::min(table.cached_tokens, table.prompt_tokens), table.prompt_tokens);
  v.control_kv_hit =
      Rate(std::min(control.cached_tokens, control.prompt_tokens), control.prompt_tokens);
  const std::string pq = absl::StrFormat("p%g", 100 * q);

  if (v.table_samples < options.min_samples || v.control_samples < options.min_samples) {
    v.kind = Verdict::kTooFewSamples;
    v.why = absl::StrCat("too few TTFT samples to compare: table ", v.table_samples, ", control ",
                         v.control_samples, ", ", options.min_samples, " needed per arm");
    return v;
  }
  const uint64_t n_t = v.table_samples;
  const uint64_t n_c = v.control_samples;

  // TTFT, worse direction: the tail beyond control's q-quantile bucket.
  const size_t b = control.ttft.QuantileBucket(q);
  const uint64_t t_above = table.ttft.CountAbove(b);
  const uint64_t c_above = control.ttft.CountAbove(b);
  v.ttft_z = PooledZ(t_above, n_t, c_above, n_c, options.ttft_margin);
  // Failures.
  v.failure_z = PooledZ(table_failures, table.requests, control_failures, control.requests,
                        options.failure_margin);
  // TTFT, better direction: the tail beyond table's q-quantile bucket.
  const size_t b_table = table.ttft.QuantileBucket(q);
  const uint64_t c_above_t = control.ttft.CountAbove(b_table);
  const uint64_t t_above_t = table.ttft.CountAbove(b_table);
  v.better_z = PooledZ(c_above_t, n_c, t_above_t, n_t, options.ttft_margin);

  const bool inside_envelope =
      options.ttft_envelope_seconds > 0 && v.table_quantile <= options.ttft_envelope_seconds;
  const bool ttft_worse = v.ttft_z > options.z && !inside_envelope;
  const bool failures_worse = v.failure_z > options.z;
  const bool better = v.better_z > options.z;
  const bool better_hit = options.kv_hit_margin > 0 && table.prompt_tokens > 0 &&
                          control.prompt_tokens > 0 &&
                          v.table_kv_hit >= v.control_kv_hit + options.kv_hit_margin;

  const std::string ttft_clause = absl::StrCat(
      "table ", pq, " TTFT ", Seconds(v.table_quantile), " vs control ",
      Seconds(v.control_quantile), ": ", Percent(Rate(t_above, n_t)),
      " of table samples above control's ", pq, " bucket (", Seconds(TtftHistogram::bounds()[b]),
      ") against ", Percent(Rate(c_above, n_c)), " (", Test(v.ttft_z, options.z), ")");
  const std::string failure_clause = absl::StrCat(
      "failures ", Percent(v.table_failure_rate), " of ", table.requests, " table requests vs ",
      Percent(v.control_failure_rate), " of ", control.requests, " control (",
      Test(v.failure_z, options.z), ", margin ", Percent(options.failure_margin), ")");
  if (ttft_worse || failures_worse) {
    v.kind = Verdict::kWorse;
    if (ttft_worse && failures_worse) {
      v.why = absl::StrCat("worse: ", ttft_clause, "; ", failure_clause);
    } else {
      v.why = absl::StrCat("worse: ", ttft_worse ? ttft_clause : failure_clause);
    }
  } else if (better) {
    v.kind = Verdict::kBetter;
    v.why = absl::StrCat("better: table ", pq, " TTFT ", Seconds(v.table_quantile), " vs control ",
                         Seconds(v.control_quantile), ": ", Percent(Rate(c_above_t, n_c)),
                         " of control samples above table's ", pq, " bucket (",
                         Seconds(TtftHistogram::bounds()[b_table]), ") against ",
                         Percent(Rate(t_above_t, n_t)), " (", Test(v.better_z, options.z), "); ",
                         failure_clause);
  } else if (better_hit) {
    v.kind = Verdict::kBetter;
    v.why = absl::StrCat("better: table KV hit ", Percent(v.table_kv_hit), " vs control ",
                         Percent(v.control_kv_hit), " (margin ", Percent(options.kv_hit_margin),
                         ") and not worse: ", ttft_clause, "; ", failure_clause);
  } else {
    v.kind = Verdict::kNotWorse;
    v.why = absl::StrCat("not worse: ", ttft_clause,
                         inside_envelope && v.ttft_z > options.z
                             ? absl::StrCat(", inside the ", Seconds(options.ttft_envelope_seconds),
                                            " envelope")
                             : "",
                         "; ", failure_clause);
  }
  return v;
}

double TableFraction(GateState state, const GateOptions& options) {
  switch (state) {
    case GateState::kShadow:
      return 0.0;
    case GateState::kCanary:
      return options.canary_fraction;
    case GateState::kEnabled:
      return 1.0 - options.control_fraction;
    case GateState::kRolledBack:
      return options.rolled_back_probe_fraction;
  }
  return 0.0;
}

Gate::Gate(GateOptions options, GateState initial) : options_(std::move(options)), state_(initial) {
  assert(options_.Validate().ok());
}

void Gate::Enter(GateState state) {
  state_ = state;
  window_.clear();
  ResetCounters();
}

void Gate::ResetCounters() {
  worse_streak_ = 0;
  good_streak_ = 0;
  better_streak_ = 0;
  intervals_in_state_ = 0;
  envelope_chunk_ = {};
  envelope_checks_.clear();
}

std::optional<std::string> Gate::EnvelopeBreached(const Evidence& interval_evidence) {
  if (options_.ttft_envelope_seconds <= 0 || options_.envelope_rollback_after == 0) {
    return std::nullopt;
  }
  const double q = options_.quantile;
  const double envelope = options_.ttft_envelope_seconds;
  envelope_chunk_.Merge(interval_evidence);
  if (envelope_chunk_.table.ttft.count() < options_.envelope_min_samples) return std::nullopt;
  EnvelopeCheck check{.evidence = std::exchange(envelope_chunk_, Evidence{})};
  const double chunk_quantile = check.evidence.table.ttft.Quantile(q);
  // A breach only when the quantile's whole bucket is above the envelope (its lower bound at or
  // above it): a quantile in the bucket holding the envelope may be inside it.
  const size_t chunk_bucket = check.evidence.table.ttft.QuantileBucket(q);
  const double chunk_lower = chunk_bucket == 0 ? 0.0 : TtftHistogram::bounds()[chunk_bucket - 1];
  check.breach = chunk_lower >= envelope;
  const uint64_t chunk_samples = check.evidence.table.ttft.count();
  // The last 2·N − 1 checks; N breaches among them (a majority) decide.
  const uint32_t needed = options_.envelope_rollback_after;
  envelope_checks_.push_back(std::move(check));
  while (envelope_checks_.size() > 2 * size_t{needed} - 1) envelope_checks_.pop_front();
  if (!envelope_checks_.back().breach) return std::nullopt;
  uint32_t breaches = 0;
  Evidence run;
  for (const EnvelopeCheck& c : envelope_checks_) {
    breaches += c.breach ? 1 : 0;
    run.Merge(c.evidence);
  }
  if (breaches < needed) return std::nullopt;
  const std::string pq = absl::StrFormat("p%g", 100 * q);
  const std::string breach =
      absl::StrCat("table ", pq, " TTFT above the ", Seconds(envelope), " envelope in ", breaches,
                   " of the last ", envelope_checks_.size(), " checks (the last ",
                   Seconds(chunk_lower), "-", Seconds(chunk_quantile), " over ", chunk_samples,
                   " samples)");
  const ArmEvidence& control = run.control;
  const double control_quantile = control.ttft.Quantile(q);
  // Inside: the quantile's bucket (its upper bound) is at or below the envelope.
  if (control.ttft.count() > 0 && control_quantile <= envelope) {
    return absl::StrCat(breach, ", control ", pq, " ", Seconds(control_quantile), " over ",
                        control.ttft.count(), " samples in the same intervals, inside it");
  }
  // Control is out of the envelope too: roll back only if the table is significantly worse
  // over those checks (Compare with envelope_min_samples per arm).
  GateOptions run_options = options_;
  run_options.min_samples = options_.envelope_min_samples;
  const Verdict v = Compare(run.table, control, run_options);
  if (v.kind == Verdict::kWorse) return absl::StrCat(breach, ", and over those checks ", v.why);
  return std::nullopt;
}

Gate::Decision Gate::Observe(const Evidence& interval_evidence) {
  ++interval_;
  ++intervals_in_state_;
  window_.push_back(interval_evidence);
  while (window_.size() > options_.window_intervals) window_.pop_front();
  Evidence sum;
  for (const Evidence& e : window_) sum.Merge(e);

  Decision d;
  d.interval = interval_;
  d.verdict = Compare(sum.table, sum.control, options_);
  const Verdict& v = d.verdict;
  const GateState before = state_;
  const absl::string_view name = GateStateName(before);
  GateState next = before;

  // The envelope rule counts only while enabled (and not forced); other states keep it empty.
  const std::optional<std::string> envelope_why =
      before == GateState::kEnabled && !forced_.has_value() ? EnvelopeBreached(interval_evidence)
                                                            : std::nullopt;
  // A worse decision while canary or enabled: rolled back after `limit` of them in a row.
  const auto count_worse = [&](uint32_t limit) {
    ++worse_streak_;
    if (worse_streak_ >= limit) {
      next = GateState::kRolledBack;
      d.why = absl::StrCat(name, " -> rolled_back after ", worse_streak_,
                           " worse decision(s) in a row: ", v.why);
    } else {
      d.why = absl::StrCat(name, ": ", worse_streak_, " of ", limit, " worse decisions: ", v.why);
    }
  };
  if (forced_.has_value()) {
    d.why = absl::StrCat(name, " (forced: ", forced_why_, "); ", v.why);
  } else {
    switch (before) {
      case GateState::kShadow:
        if (intervals_in_state_ >= options_.shadow_intervals) {
          next = GateState::kCanary;
          d.why = absl::StrCat("shadow -> canary after ", intervals_in_state_,
                               " interval(s) in shadow");
        } else {
          d.why = absl::StrCat("shadow: interval ", intervals_in_state_, " of ",
                               options_.shadow_intervals);
        }
        break;
      case GateState::kCanary:
        if (v.kind == Verdict::kWorse) {
          good_streak_ = 0;
          better_streak_ = 0;
          count_worse(options_.canary_rollback_after);
        } else if (v.kind == Verdict::kNotWorse || v.kind == Verdict::kBetter) {
          worse_streak_ = 0;
          ++good_streak_;
          better_streak_ = v.kind == Verdict::kBetter ? better_streak_ + 1 : 0;
          if (better_streak_ >= options_.promote_better_after) {
            next = GateState::kEnabled;
            d.why = absl::StrCat("canary -> enabled after ", better_streak_,
                                 " better decision(s) in a row: ", v.why);
          } else if (good_streak_ >= options_.promote_after) {
            next = GateState::kEnabled;
            d.why = absl::StrCat("canary -> enabled after ", good_streak_,
                                 " not-worse decision(s) in a row: ", v.why);
          } else {
            d.why = absl::StrCat("canary: ", good_streak_, " of ", options_.promote_after,
                                 " not-worse decisions: ", v.why);
          }
        } else {
          d.why = absl::StrCat("canary: ", v.why);
        }
        break;
      case GateState::kEnabled:
        if (envelope_why.has_value()) {
          next = GateState::kRolledBack;
          d.why = absl::StrCat("enabled -> rolled_back by the envelope rule: ", *envelope_why,
                               "; ", v.why);
        } else if (v.kind == Verdict::kWorse) {
          count_worse(options_.rollback_after);
        } else {
          if (v.kind != Verdict::kTooFewSamples) worse_streak_ = 0;
          d.why = absl::StrCat("enabled: ", v.why);
        }
        break;
      case GateState::kRolledBack:
        if (options_.retry_after > 0 && intervals_in_state_ >= options_.retry_after) {
          next = GateState::kCanary;
          d.why = absl::StrCat("rolled_back -> canary: retrying after ", intervals_in_state_,
                               " interval(s) rolled back");
        } else if (options_.retry_after > 0) {
          d.why = absl::StrCat("rolled_back: interval ", intervals_in_state_, " of ",
                               options_.retry_after, " before a new canary; ", v.why);
        } else {
          d.why = absl::StrCat("rolled_back (retry_after 0: no new canary); ", v.why);
        }
        break;
    }
  }
  if (next != before) {
    Enter(next);
  } else if (v.kind != Verdict::kTooFewSamples) {
    window_.clear();  // the next decision takes new samples only
  }
  d.state = state_;
  d.table_fraction = table_fraction();
  d.changed = state_ != before;
  return d;
}

void Gate::Force(std::optional<GateState> state, std::string why) {
  if (state.has_value() && *state != state_) {
    Enter(*state);
  } else {
    ResetCounters();
  }
  forced_ = state;
  forced_why_ = state.has_value() ? std::move(why) : std::string();
}

Gate::Persisted Gate::Save() const {
  return {.state = state_,
          .forced = forced_,
          .forced_why = forced_why_,
          .intervals_in_state = intervals_in_state_,
          .interval = interval_};
}

Gate Gate::Restore(GateOptions options, const Persisted& persisted) {
  Gate gate(std::move(options), persisted.forced.value_or(persisted.state));
  gate.forced_ = persisted.forced;
  gate.forced_why_ = persisted.forced ? persisted.forced_why : std::string();
  gate.intervals_in_state_ = persisted.intervals_in_state;
  gate.interval_ = persisted.interval;
  return gate;
}

}  // namespace cacheroute::planner
