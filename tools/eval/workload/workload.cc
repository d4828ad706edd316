// See workload.h. The prompt of every request is a list of segments (template, context, few-shot
// block, earlier turns and their outputs, current turn), each named by a 64-bit content id; a
// block's hash chains its parent's hash with the (segment id, offset, length) pieces it covers.
#include "tools/eval/workload/workload.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <numeric>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_format.h"
#include "base/status_macros.h"

namespace cacheroute::workload {
namespace {

uint64_t Fmix(uint64_t z) {
  z ^= z >> 30;
  z *= 0xbf58476d1ce4e5b9ULL;
  z ^= z >> 27;
  z *= 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t Combine(uint64_t h, uint64_t v) {
  return Fmix(h ^ Fmix(v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2)));
}

// Content ids of the segment kinds. Distinct tags keep, say, key 3's context and thread 3's turn
// apart.
enum SegmentTag : uint64_t {
  kTemplateTag = 1,
  kContextTag,
  kFewShotTag,
  kTurnTag,
  kOutputTag,
};

uint64_t SegmentId(SegmentTag tag, uint64_t a, uint64_t b = 0) {
  return Combine(Combine(Combine(0x5eed5eed5eed5eedULL, tag), a), b);
}

struct Segment {
  uint64_t id;
  uint32_t tokens;
};

constexpr uint64_t kRootHash = 0x243f6a8885a308d3ULL;

// Chained block hashes of the prompt made of `segments`, `block_size` tokens per block; the last
// block may be partial.
void HashPrompt(const std::vector<Segment>& segments, uint32_t block_size,
                std::vector<uint64_t>* out) {
  out->clear();
  uint64_t parent = kRootHash;
  uint64_t h = Combine(parent, block_size);
  uint32_t filled = 0;
  for (const Segment& s : segments) {
    uint32_t offset = 0;
    while (offset < s.tokens) {
      const uint32_t piece = std::min(s.tokens - offset, block_size - filled);
      h = Combine(Combine(h, s.id), (uint64_t{offset} << 32) | piece);
      offset += piece;
      filled += piece;
      if (filled == block_size) {
        out->push_back(h);
        parent = h;
        h = Combine(parent, block_size);
        filled = 0;
      }
    }
  }
  if (filled > 0) out->push_back(Combine(h, filled));  // a partial block differs from a full one
}

// A lognormal length with the given mean, at least 1 token.
uint32_t DrawLength(double mean, double sigma, Rng& rng) {
  const double mu = std::log(mean) - 0.5 * sigma * sigma;
  const double v = std::exp(mu + sigma * rng.NextNormal());
  return static_cast<uint32_t>(std::clamp(std::llround(v), 1LL, 1LL << 20));
}

// Key `key_index`'s context size (WorkloadProfile::context_sigma), from a stream of its own.
uint32_t ContextTokens(const WorkloadProfile& p, uint64_t key_index) {
  if (p.context_sigma <= 0) return p.context_tokens;
  Rng rng(Combine(Combine(p.seed, key_index), 0xc0417e47ULL));
  const double v = p.context_tokens * std::exp(p.context_sigma * rng.NextNormal());
  const double hi = p.context_max_tokens > 0 ? p.context_max_tokens : 1e9;
  return static_cast<uint32_t>(std::llround(std::clamp(v, static_cast<double>(p.context_min_tokens), hi)));
}

// Thread lengths: 1 with probability single_share, else 2 + Geometric(p), chosen so that the
// request-weighted multi-turn share and the mean length match the profile.
struct ThreadLengths {
  double single_share = 1;
  double geometric_p = 1;  // success probability of the extra turns beyond 2

  uint32_t Draw(Rng& rng) const {
    if (rng.NextOpenUnit() < single_share) return 1;
    if (geometric_p >= 1) return 2;
    const double g = std::floor(std::log(rng.NextOpenUnit()) / std::log1p(-geometric_p));
    return 2 + static_cast<uint32_t>(std::min(g, 1e6));
  }
};

ThreadLengths DeriveThreadLengths(double multi_share, double mean_per_thread) {
  // Threads of one turn are a fraction a of all threads; multi-turn ones have mean length M.
  // Requests per thread: a + (1 - a)·M = m; multi-turn request share: (1 - a)·M / m = s.
  ThreadLengths t;
  t.single_share = mean_per_thread * (1 - multi_share);
  if (multi_share <= 0) return t;
  const double multi_mean = multi_share * mean_per_thread / (1 - t.single_share);
  t.geometric_p = 1.0 / (multi_mean - 1.0);  // mean of the extra turns: (1 - p) / p = M - 2
  return t;
}

struct Thread {
  uint64_t raw_id = 0;
  uint32_t length = 1;
  std::vector<uint32_t> turn_tokens;    // of the turns served so far
  std::vector<uint32_t> output_tokens;  // likewise
};

absl::Status Invalid(const char* field, double value, const char* requirement) {
  return absl::InvalidArgumentError(
      absl::StrFormat("%s must be %s, got %g", field, requirement, value));
}

}  // namespace

WorkloadProfile PaperPrimaryProfile() { return WorkloadProfile{}; }

absl::Status ValidateProfile(const WorkloadProfile& p) {
  if (p.keys < 1 || p.keys > (uint64_t{1} << 32)) {
    return Invalid("keys", static_cast<double>(p.keys), "in [1, 2^32]");
  }
  if (!(p.rate_sigma >= 0 && p.rate_sigma <= 10))
    return Invalid("rate_sigma", p.rate_sigma, "in [0, 10]");
  if (!(p.max_key_share > 0 && p.max_key_share <= 1)) {
    return Invalid("max_key_share", p.max_key_share, "in (0, 1]");
  }
  if (p.top_k > p.keys) {
    return absl::InvalidArgumentError(
        absl::StrFormat("top_k must be at most keys (%d), got %d", p.keys, p.top_k));
  }
  if (!(p.qps > 0 && std::isfinite(p.qps))) return Invalid("qps", p.qps, "a finite number > 0");
  if (!(p.duration_s > 0 && std::isfinite(p.duration_s))) {
    return Invalid("duration_s", p.duration_s, "a finite number > 0");
  }
  if (!(p.warmup_s >= 0 && std::isfinite(p.warmup_s))) {
    return Invalid("warmup_s", p.warmup_s, "a finite number >= 0");
  }
  if (!(p.multi_turn_share >= 0 && p.multi_turn_share <= 1)) {
    return Invalid("multi_turn_share", p.multi_turn_share, "in [0, 1]");
  }
  const double m = p.mean_requests_per_thread, s = p.multi_turn_share;
  if (!(m >= 1 && std::isfinite(m))) return Invalid("mean_requests_per_thread", m, ">= 1");
  if (m * (1 - s) > 1 + 1e-12) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "mean_requests_per_thread must be at most 1 / (1 - multi_turn_share) = %g, got %g",
        1 / (1 - s), m));
  }
  if (s > 0 && m * (2 - s) < 2 - 1e-12) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "mean_requests_per_thread must be at least 2 / (2 - multi_turn_share) = %g, got %g",
        2 / (2 - s), m));
  }
  if (!(p.follow_up_probability > 0 && p.follow_up_probability <= 1)) {
    return Invalid("follow_up_probability", p.follow_up_probability, "in (0, 1]");
  }
  if (!(p.context_sigma >= 0 && p.context_sigma <= 5)) {
    return Invalid("context_sigma", p.context_sigma, "in [0, 5]");
  }
  if (p.context_max_tokens > 0 && p.context_max_tokens < p.context_min_tokens) {
    return absl::InvalidArgumentError(
        absl::StrFormat("context_max_tokens must be 0 or at least context_min_tokens (%d), got %d",
                        p.context_min_tokens, p.context_max_tokens));
  }
  if (p.block_size < 1) return Invalid("block_size", 0, ">= 1");
  if (p.few_shot_pool < 1) return Invalid("few_shot_pool", 0, ">= 1");
  if (!(p.few_shot_break_rate >= 0 && p.few_shot_break_rate <= 1)) {
    return Invalid("few_shot_break_rate", p.few_shot_break_rate, "in [0, 1]");
  }
  if (p.few_shot_pool == 1 && p.few_shot_break_rate > 0) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "few_shot_break_rate must be 0 when few_shot_pool is 1, got %g", p.few_shot_break_rate));
  }
  if (!(p.mean_turn_tokens >= 1 && p.mean_turn_tokens <= 1e5)) {
    return Invalid("mean_turn_tokens", p.mean_turn_tokens, "in [1, 1e5]");
  }
  if (!(p.mean_output_tokens >= 1 && p.mean_output_tokens <= 1e5)) {
    return Invalid("mean_output_tokens", p.mean_output_tokens, "in [1, 1e5]");
  }
  if (!(p.length_sigma >= 0 && p.length_sigma <= 3)) {
    return Invalid("length_sigma", p.length_sigma, "in [0, 3]");
  }
  return ArrivalSampler::Create(p.arrivals).status();
}

absl::StatusOr<GeneratedWorkload> GenerateWorkload(const WorkloadProfile& p) {
  if (absl::Status s = ValidateProfile(p); !s.ok()) return s;
  CACHEROUTE_ASSIGN_OR_RETURN(ArrivalSampler sampler, ArrivalSampler::Create(p.arrivals));

  GeneratedWorkload out;
  out.workload.block_size = p.block_size;
  out.stable_prefix_tokens = p.context_sigma > 0 ? 0 : p.template_tokens + p.context_tokens;

  // The key universe and the active set (the top_k hottest keys, ties by index).
  const std::vector<double> rates = GenerateLognormalRates({.keys = p.keys,
                                                            .sigma = p.rate_sigma,
                                                            .total_rate = 1.0,
                                                            .max_key_share = p.max_key_share,
                                                            .seed = p.seed});
  out.universe_rates = ComputeRateStats(rates);
  std::vector<uint32_t> order(rates.size());
  std::iota(order.begin(), order.end(), 0u);
  const size_t active = p.top_k == 0 ? rates.size() : static_cast<size_t>(p.top_k);
  std::partial_sort(
      order.begin(), order.begin() + active, order.end(),
      [&](uint32_t a, uint32_t b) { return rates[a] != rates[b] ? rates[a] > rates[b] : a < b; });
  order.resize(active);
  double active_sum = 0;
  for (uint32_t k : order) active_sum += rates[k];
  std::vector<double> active_rates;
  active_rates.reserve(active);
  const int width = static_cast<int>(std::to_string(p.keys - 1).size());
  out.active_keys.reserve(active);
  for (uint32_t k : order) {
    const double rate = rates[k] / active_sum * p.qps;
    active_rates.push_back(rate);
    out.active_keys.push_back({absl::StrFormat("key-%0*d", width, k), rate, ContextTokens(p, k)});
  }
  out.active_rates = ComputeRateStats(active_rates);

  const ThreadLengths lengths = DeriveThreadLengths(p.multi_turn_share, p.mean_requests_per_thread);
  const uint64_t template_id = SegmentId(kTemplateTag, 0);
  std::vector<Request>& requests = out.workload.requests;
  requests.reserve(static_cast<size_t>(p.qps * p.duration_s * 1.1) + 16);
  std::vector<double> times;
  std::vector<Segment> segments;
  std::deque<Thread> open;  // this key's unfinished threads, least recently served first

  for (size_t rank = 0; rank < order.size(); ++rank) {
    const uint64_t key_index = order[rank];
    // One stream per key: a key's requests do not change when top_k admits other keys.
    Rng rng(Combine(p.seed, key_index));
    times.clear();
    sampler.Generate(active_rates[rank], -p.warmup_s, p.duration_s, rng, &times);
    const uint64_t context_id = SegmentId(kContextTag, key_index);
    const std::string& key = out.active_keys[rank].key;
    const uint32_t context_tokens = out.active_keys[rank].context_tokens;
    open.clear();
    uint64_t threads_started = 0;
    uint32_t few_shot = static_cast<uint32_t>(rng.Next() % p.few_shot_pool);
    bool first = true;
    for (const double t : times) {
      // The retrieved few-shot block: a different one than the key's previous request with
      // probability few_shot_break_rate (Table 6: 67% of consecutive pairs break there).
      if (!first && rng.NextOpenUnit() < p.few_shot_break_rate) {
        uint32_t other = static_cast<uint32_t>(rng.Next() % (p.few_shot_pool - 1));
        few_shot = other >= few_shot ? other + 1 : other;
      }
      first = false;
      Thread thread;
      if (!open.empty() && rng.NextOpenUnit() < p.follow_up_probability) {
        thread = std::move(open.front());
        open.pop_front();
      } else {
        thread.raw_id = (key_index << 32) | threads_started++;
        thread.length = lengths.Draw(rng);
      }
      const uint32_t turn_tokens = DrawLength(p.mean_turn_tokens, p.length_sigma, rng);
      const uint32_t output_tokens = DrawLength(p.mean_output_tokens, p.length_sigma, rng);
      const uint32_t turn = static_cast<uint32_t>(thread.turn_tokens.size()) + 1;
      if (t >= 0) {
        segments.clear();
        segments.push_back({template_id, p.template_tokens});
        segments.push_back({context_id, context_tokens});
        segments.push_back({SegmentId(kFewShotTag, key_index, few_shot), p.few_shot_tokens});
        for (uint32_t j = 0; j + 1 < turn; ++j) {
          segments.push_back({SegmentId(kTurnTag, thread.raw_id, j), thread.turn_tokens[j]});
          segments.push_back({SegmentId(kOutputTag, thread.raw_id, j), thread.output_tokens[j]});
        }
        segments.push_back({SegmentId(kTurnTag, thread.raw_id, turn - 1), turn_tokens});
        Request& r = requests.emplace_back();
        r.arrival_s = t;
        r.key = key;
        uint64_t input = 0;
        for (const Segment& s : segments) input += s.tokens;
        r.input_length = static_cast<uint32_t>(std::min<uint64_t>(input, UINT32_MAX));
        r.output_length = output_tokens;
        HashPrompt(segments, p.block_size, &r.hash_ids);
        r.thread_id = thread.raw_id;
        r.turn = turn;
        r.current_turn_length = turn_tokens;
      }
      thread.turn_tokens.push_back(turn_tokens);
      thread.output_tokens.push_back(output_tokens);
      if (thread.turn_tokens.size() < thread.length) open.push_back(std::move(thread));
    }
  }

  std::stable_sort(requests.begin(), requests.end(),
                   [](const Request& a, const Request& b) { return a.arrival_s < b.arrival_s; });
  // Thread ids 0, 1, 2, … in order of each thread's first request.
  absl::flat_hash_map<uint64_t, uint64_t> thread_ids;
  for (Request& r : requests) {
    r.thread_id = thread_ids.try_emplace(r.thread_id, thread_ids.size()).first->second;
  }
  return out;
}

}  // namespace cacheroute::workload
