// EngineRunner: one sim::Engine (tools/eval/sim/engine.h, the same model the fleet simulator runs)
// driven from wall-clock time on a thread of its own, for the HTTP engine emulator.
//
// Time. With time_scale s > 0, modelled time t is wall time start + t·s (s = 1: real time; s =
// 0.1: ten times faster). With s = 0 it never waits: iterations run back to back and requests
// arrive at the engine's current modelled time. Either way modelled time never goes back.
//
// Requests. Submit() hands a request to the engine thread and returns a PendingRequest whose
// phase moves kWaiting → kFirstToken → kFinished, or ends in a rejection, a timeout or shutdown.
// A waiter either blocks (WaitFirstToken, WaitDone) or, without a thread of its own, registers
// OnAdvance and re-checks phase(): the callback runs after every later phase change, so
// "register, check, wait for the callback, check again" misses none. Counters for /metrics are
// updated before the request's waiter is woken or called, so a client that has its response sees
// its tokens counted.
//
// Thread safety: Submit and PendingRequest from any thread; the engine itself is touched only by
// its thread. OnAdvance callbacks run on the engine thread with no lock held; they must be quick
// and must not block (post to the waiter's executor and return).
// Time and locks in detail: docs/engine-emu.md, "The engine runner".
//
// Usage:
//   auto runner = EngineRunner::Start({.profile = *FindEngineProfile("llama-8b-h100"),
//                                      .time_scale = 0});
//   std::shared_ptr<PendingRequest> r = (*runner)->Submit(prompt_tokens, 16, std::move(hashes));
//   if (r->WaitDone() == Phase::kFinished) Reply(r->cached_tokens());
//   // or: r->OnAdvance([=] { asio::post(executor, wake); }); then check r->phase() when woken
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "tools/eval/sim/engine.h"
#include "tools/eval/sim/engine_profile.h"

namespace cacheroute::engine_emu {

enum class Phase : uint8_t {
  kWaiting,            // queued or prefilling
  kFirstToken,         // first output token produced
  kFinished,           // every output token produced
  kRejectedQueueFull,  // --max-waiting requests were already waiting
  kRejectedTooLarge,   // prompt + output needs more KV blocks than the engine has
  kTimedOut,           // aborted by the engine's timeout
  kShutdown,           // the runner stopped first
};

class PendingRequest {
 public:
  PendingRequest(uint64_t id, uint32_t prompt_tokens, uint32_t output_tokens,
                 std::vector<uint64_t> block_hashes)
      : id_(id),
        prompt_tokens_(prompt_tokens),
        output_tokens_(output_tokens),
        block_hashes_(std::move(block_hashes)) {}

  // Blocks until the phase is past kWaiting; returns it.
  Phase WaitFirstToken() const;
  // Blocks until the phase is past kFirstToken; returns it.
  Phase WaitDone() const;
  // The phase now, without waiting.
  Phase phase() const;
  // `callback` is called after each later phase change, on the engine thread, outside every
  // lock (see the lock discipline above). One callback at a time: a new one replaces the last
  // (which may still be running or about to run once), an empty one clears it. A request that
  // has already ended (past kFirstToken) drops the callback, as it does once it ends; the caller
  // therefore checks phase() after registering.
  void OnAdvance(std::function<void()> callback);
  // Prompt tokens found in the prefix cache; valid once the first token came.
  uint32_t cached_tokens() const;

  uint64_t id() const { return id_; }
  uint32_t prompt_tokens() const { return prompt_tokens_; }
  uint32_t output_tokens() const { return output_tokens_; }

 private:
  friend class EngineRunner;
  void Advance(Phase phase, uint32_t cached_tokens);

  const uint64_t id_;
  const uint32_t prompt_tokens_;
  const uint32_t output_tokens_;
  const std::vector<uint64_t> block_hashes_;  // the engine holds a span of it
  double submitted_at_ = 0;                   // modelled time; engine thread only

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  Phase phase_ ABSL_GUARDED_BY(mu_) = Phase::kWaiting;
  uint32_t cached_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  // Shared so Advance can call it outside mu_ while a new one is registered.
  std::shared_ptr<const std::function<void()>> on_advance_ ABSL_GUARDED_BY(mu_);
};

// vLLM's bucket bounds for vllm:time_to_first_token_seconds.
inline constexpr std::array<double, 22> kTtftBuckets = {
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
    1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};

// A consistent snapshot of what /metrics shows.
struct EngineMetrics {
  uint64_t prompt_tokens = 0;      // of requests that reached their first token
  uint64_t generation_tokens = 0;  // output tokens produced
  uint64_t prefix_queries = 0;     // tokens looked up in the prefix cache (= prompt_tokens)
  uint64_t prefix_hits = 0;        // of which cached
  uint64_t finished = 0;
  uint64_t rejected = 0;
  uint64_t timed_out = 0;
  uint32_t running = 0;
  uint32_t waiting = 0;
  double kv_usage = 0;  // 0..1
  uint32_t kv_blocks = 0;  // the cache's capacity, in blocks of sim::kBlockTokens
  // Modelled time to first token, in seconds: per-bucket (non-cumulative) counts, the last one
  // for +Inf, their sum and count.
  std::array<uint64_t, kTtftBuckets.size() + 1> ttft_buckets{};
  double ttft_sum = 0;
  uint64_t ttft_count = 0;
};

struct RunnerOptions {
  sim::EngineProfile profile;
  sim::EngineOptions engine;
  double time_scale = 1.0;  // ≥ 0, finite
};

class EngineRunner {
 public:
  // InvalidArgument naming the field for a bad profile, engine option or time scale.
  static absl::StatusOr<std::unique_ptr<EngineRunner>> Start(RunnerOptions options);
  ~EngineRunner();  // Stop()
  EngineRunner(const EngineRunner&) = delete;
  EngineRunner& operator=(const EngineRunner&) = delete;

  std::shared_ptr<PendingRequest> Submit(uint32_t prompt_tokens, uint32_t output_tokens,
                                         std::vector<uint64_t> block_hashes);
  EngineMetrics Metrics() const;
  const sim::EngineProfile& profile() const { return profile_; }

  // Ends every pending request with kShutdown and joins the engine thread. Idempotent.
  void Stop();

 private:
  explicit EngineRunner(RunnerOptions options);
  void Run();
  double ModelledNow() const;
  void Dispatch(std::span<const sim::EngineEvent> events);
  void PublishGauges();
  void PublishGaugesLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(metrics_mu_);  // engine thread

  const sim::EngineProfile profile_;
  const double time_scale_;
  const std::chrono::steady_clock::time_point start_;
  sim::Engine engine_;                                                        // engine thread only
  absl::flat_hash_map<uint64_t, std::shared_ptr<PendingRequest>> in_engine_;  // engine thread only

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<PendingRequest>> submissions_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;

  mutable std::mutex metrics_mu_;
  EngineMetrics metrics_ ABSL_GUARDED_BY(metrics_mu_);

  std::mutex stop_mu_;  // serialises Stop()
  std::thread thread_;
};

}  // namespace cacheroute::engine_emu
