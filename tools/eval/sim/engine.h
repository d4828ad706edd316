// Engine: one continuous-batching model server, modelled on vLLM's scheduler with chunked prefill
// and automatic prefix caching (docs/references.md, "Engines"), driven by events so that
// a fleet simulator can run many engines under one event queue, and the HTTP engine emulator can
// run one from wall-clock time. Time is seconds passed in by the caller; it must never go back.
// Requests wait in one FCFS queue; Step(NextEventTime()) completes the running iteration and
// returns its events (first tokens, finishes, timeouts). KV is reserved for the whole output at
// admission (no preemption); generated tokens are never published to the prefix cache.
//
// Failures. With options.max_waiting > 0, Submit rejects a request when that many already wait.
// A request needing more KV blocks than the engine has is rejected as too large. With a finite
// options.timeout_s, a request not finished that long after Submit is aborted at the next iteration
// boundary (like a client that gives up) and reported as kTimedOut; its blocks are freed.
//
// Not thread-safe. The scheduling model, its simplifications and cost: docs/simulator.md,
// "Engine internals".
//
// Usage:
//   Engine engine(*FindEngineProfile("llama-70b-fp8-tp2-h100"), {.timeout_s = 60});
//   engine.Submit({.id = 7, .prompt_tokens = 1200, .output_tokens = 150, .block_hashes = hashes},
//                 now);
//   while (engine.NextEventTime() < kForever) {
//     double t = engine.NextEventTime();
//     for (const EngineEvent& e : engine.Step(t)) Handle(e);   // first tokens, finishes, timeouts
//   }
#pragma once

#include <cstdint>
#include <deque>
#include <limits>
#include <queue>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "tools/eval/sim/engine_profile.h"
#include "tools/eval/sim/prefix_cache.h"

namespace cacheroute::sim {

inline constexpr double kForever = std::numeric_limits<double>::infinity();

struct EngineOptions {
  uint32_t max_waiting = 0;     // 0: the waiting queue is unbounded
  double timeout_s = kForever;  // > 0; kForever: requests never time out
};

// InvalidArgument naming the field and value for a bad timeout (not > 0, or NaN).
absl::Status ValidateEngineOptions(const EngineOptions& options);

struct EngineRequest {
  uint64_t id = 0;             // the caller's; reported back in events
  uint32_t prompt_tokens = 0;  // ≥ 1
  uint32_t output_tokens = 0;  // ≥ 1 (the first token counts)
  // Chained hashes of the prompt's full 16-token blocks (ChainBlockHashes); may be shorter (the
  // rest is never cached). Must stay valid until the request's last event.
  std::span<const uint64_t> block_hashes;
};

enum class SubmitResult : uint8_t {
  kQueued,
  kRejectedQueueFull,  // options.max_waiting requests were already waiting
  kRejectedTooLarge,   // prompt + output needs more KV blocks than the engine has
  kRejectedInvalid,    // prompt_tokens or output_tokens is 0
};

enum class EngineEventKind : uint8_t {
  kFirstToken,  // prefill done, first output token sampled (TTFT)
  kFinished,    // last output token produced; the request's blocks are freed
  kTimedOut,    // aborted by options.timeout_s, waiting or running
};

struct EngineEvent {
  EngineEventKind kind = EngineEventKind::kFinished;
  uint64_t request_id = 0;
  double time = 0;
  uint32_t prompt_tokens = 0;
  uint32_t cached_tokens = 0;  // prompt tokens found in the prefix cache (0 if never admitted)
};

struct EngineStats {
  uint64_t submitted = 0;
  uint64_t rejected = 0;
  uint64_t admitted = 0;
  uint64_t first_tokens = 0;
  uint64_t finished = 0;
  uint64_t timed_out = 0;
  uint64_t prefill_tokens = 0;  // prompt tokens computed (not cached)
  uint64_t decode_tokens = 0;   // output tokens after the first
  uint64_t iterations = 0;
  double busy_s = 0;  // total iteration time
};

class Engine {
 public:
  // `profile` must pass ValidateEngineProfile and `options` ValidateEngineOptions (checked by
  // assert; callers validate configuration first).
  Engine(EngineProfile profile, EngineOptions options);
  Engine(Engine&&) = default;
  Engine& operator=(Engine&&) = default;

  // Queues a request at `now` (≥ every earlier time given to this engine). If the engine is idle
  // it wakes at `now`: call Step(now) after submitting everything that arrives at `now`.
  SubmitResult Submit(const EngineRequest& request, double now);

  // When Step must next be called: the end of the running iteration, `now` of a Submit that woke
  // an idle engine, or kForever when there is nothing to do.
  double NextEventTime() const;

  // Advances to `now` == NextEventTime(): completes the running iteration, aborts timed-out
  // requests and schedules the next iteration. The events are valid until the next call to Step or
  // Submit; they are ordered finishes, then first tokens, then timeouts, each in a fixed order.
  std::span<const EngineEvent> Step(double now);

  uint32_t waiting() const { return waiting_count_; }
  uint32_t running() const { return running_; }  // admitted: prefilling or decoding
  uint32_t decoding() const { return decoding_; }
  const PrefixCache& cache() const { return cache_; }
  // Its prefix cache's KV events go to `log` (PrefixCache::set_event_log), which must outlive it.
  void set_kv_event_log(std::vector<dataplane::KvEvent>* log) { cache_.set_event_log(log); }
  const EngineStats& stats() const { return stats_; }
  const EngineProfile& profile() const { return profile_; }

 private:
  enum class State : uint8_t { kFree, kWaiting, kPrefill, kDecode };

  struct Slot {
    uint64_t id = 0;
    uint32_t prompt = 0;
    uint32_t output = 0;
    std::span<const uint64_t> hashes;
    double deadline = kForever;
    uint32_t generation = 0;
    State state = State::kFree;
    uint32_t prefilled = 0;         // prompt tokens computed or cached, as of the last iteration
    uint64_t decode_start = 0;      // first iteration in which it decodes
    PrefixCache::Allocation alloc;  // kept between uses so its vector's capacity is reused
  };
  // A slot as it was when referenced; stale once the slot is released (its generation moves on).
  struct Ref {
    uint32_t slot = 0;
    uint32_t generation = 0;
  };
  struct DecodeEnd {
    uint64_t iteration;  // the iteration at whose end the sequence finishes
    uint32_t slot;
    uint32_t generation;
    bool operator>(const DecodeEnd& o) const {
      return iteration != o.iteration ? iteration > o.iteration : slot > o.slot;
    }
  };
  struct Chunk {
    Ref ref;
    uint32_t tokens;
  };

  bool Alive(Ref ref) const {
    const Slot& s = slots_[ref.slot];
    return s.generation == ref.generation && s.state != State::kFree;
  }
  // This sequence's share of decode_context_ (context tokens of its next decode step).
  uint64_t DecodeContext(const Slot& s) const {
    return s.prompt + 1 + (iteration_ + 1 - s.decode_start);
  }
  void FinishIteration(double now);
  void ExpireDeadlines(double now);
  void StartIteration(double now);
  void Release(uint32_t slot);
  void Emit(EngineEventKind kind, const Slot& s, double now);

  EngineProfile profile_;
  EngineOptions options_;
  PrefixCache cache_;

  std::vector<Slot> slots_;
  std::vector<uint32_t> free_slots_;
  std::deque<Ref> waiting_;      // FCFS; stale entries (timed out) are skipped
  std::deque<Ref> deadlines_;    // submit order, which is deadline order
  std::vector<Ref> prefilling_;  // admitted, prompt not yet done; admission order
  std::priority_queue<DecodeEnd, std::vector<DecodeEnd>, std::greater<>> decode_ends_;

  uint32_t waiting_count_ = 0;
  uint32_t running_ = 0;
  uint32_t decoding_ = 0;
  uint64_t decode_context_ = 0;  // Σ context tokens of decoding sequences for their next step

  uint64_t iteration_ = 0;  // number of the running (or last) iteration; the first is 1
  bool in_iteration_ = false;
  double iteration_start_ = 0;
  double iteration_end_ = 0;
  uint32_t iteration_decodes_ = 0;
  std::vector<Chunk> iteration_chunks_;
  bool wake_pending_ = false;
  double wake_time_ = 0;

  std::vector<EngineEvent> events_;
  EngineStats stats_;
};

}  // namespace cacheroute::sim
