// See engine_runner.h.
#include "tools/eval/engine_emu/engine_runner.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace cacheroute::engine_emu {

Phase PendingRequest::WaitFirstToken() const {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return phase_ != Phase::kWaiting; });
  return phase_;
}

Phase PendingRequest::WaitDone() const {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return phase_ != Phase::kWaiting && phase_ != Phase::kFirstToken; });
  return phase_;
}

namespace {

bool Ended(Phase phase) { return phase != Phase::kWaiting && phase != Phase::kFirstToken; }

}  // namespace

uint32_t PendingRequest::cached_tokens() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cached_tokens_;
}

Phase PendingRequest::phase() const {
  std::lock_guard<std::mutex> lock(mu_);
  return phase_;
}

void PendingRequest::OnAdvance(std::function<void()> callback) {
  std::shared_ptr<const std::function<void()>> previous;  // released outside mu_
  std::lock_guard<std::mutex> lock(mu_);
  previous = std::move(on_advance_);
  if (callback && !Ended(phase_)) {
    on_advance_ = std::make_shared<const std::function<void()>>(std::move(callback));
  }
}

void PendingRequest::Advance(Phase phase, uint32_t cached_tokens) {
  std::shared_ptr<const std::function<void()>> callback;
  {
    std::lock_guard<std::mutex> lock(mu_);
    phase_ = phase;
    if (phase == Phase::kFirstToken) cached_tokens_ = cached_tokens;
    // An ended request is never advanced again: let go of what the callback holds.
    callback = Ended(phase) ? std::move(on_advance_) : on_advance_;
  }
  cv_.notify_all();
  if (callback) (*callback)();
}

absl::StatusOr<std::unique_ptr<EngineRunner>> EngineRunner::Start(RunnerOptions options) {
  if (absl::Status s = sim::ValidateEngineProfile(options.profile); !s.ok()) return s;
  if (absl::Status s = sim::ValidateEngineOptions(options.engine); !s.ok()) return s;
  if (!(options.time_scale >= 0) || !std::isfinite(options.time_scale)) {
    return absl::InvalidArgumentError(
        absl::StrCat("time_scale must be a finite number >= 0, got ", options.time_scale));
  }
  std::unique_ptr<EngineRunner> runner(new EngineRunner(std::move(options)));
  runner->thread_ = std::thread([r = runner.get()] { r->Run(); });
  return runner;
}

EngineRunner::EngineRunner(RunnerOptions options)
    : profile_(options.profile),
      time_scale_(options.time_scale),
      start_(std::chrono::steady_clock::now()),
      engine_(options.profile, options.engine) {}

EngineRunner::~EngineRunner() { Stop(); }

void EngineRunner::Stop() {
  std::lock_guard<std::mutex> stop_lock(stop_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<PendingRequest> EngineRunner::Submit(uint32_t prompt_tokens, uint32_t output_tokens,
                                                     std::vector<uint64_t> block_hashes) {
  std::shared_ptr<PendingRequest> request;
  bool stopped;
  {
    std::lock_guard<std::mutex> lock(mu_);
    request = std::make_shared<PendingRequest>(next_id_++, prompt_tokens, output_tokens,
                                               std::move(block_hashes));
    stopped = stopping_;
    if (!stopped) submissions_.push_back(request);
  }
  if (stopped) {
    request->Advance(Phase::kShutdown, 0);
  } else {
    cv_.notify_one();
  }
  return request;
}

EngineMetrics EngineRunner::Metrics() const {
  std::lock_guard<std::mutex> lock(metrics_mu_);
  return metrics_;
}

double EngineRunner::ModelledNow() const {
  const std::chrono::duration<double> wall = std::chrono::steady_clock::now() - start_;
  return wall.count() / time_scale_;
}

void EngineRunner::Run() {
  std::vector<std::shared_ptr<PendingRequest>> batch;
  double last = 0;  // the latest modelled time given to the engine
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      for (;;) {
        if (stopping_) {
          batch.swap(submissions_);
          break;
        }
        if (!submissions_.empty()) break;
        const double next = engine_.NextEventTime();
        if (next == sim::kForever) {
          cv_.wait(lock);
          continue;
        }
        if (time_scale_ == 0) break;
        const auto deadline =
            start_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                         std::chrono::duration<double>(next * time_scale_));
        if (std::chrono::steady_clock::now() >= deadline) break;
        cv_.wait_until(lock, deadline);
      }
      if (stopping_) {
        lock.unlock();
        for (auto& r : batch) r->Advance(Phase::kShutdown, 0);
        for (auto& [id, r] : in_engine_) r->Advance(Phase::kShutdown, 0);
        in_engine_.clear();
        return;
      }
      batch.swap(submissions_);
    }

    const double now = time_scale_ == 0 ? last : std::max(last, ModelledNow());
    // Events due by `now` happen before the new arrivals (the engine's clock never goes back).
    while (engine_.NextEventTime() <= now) {
      const double t = engine_.NextEventTime();
      Dispatch(engine_.Step(t));
      last = t;
    }
    last = now;
    for (std::shared_ptr<PendingRequest>& r : batch) {
      r->submitted_at_ = now;
      const sim::SubmitResult result = engine_.Submit({.id = r->id(),
                                                       .prompt_tokens = r->prompt_tokens(),
                                                       .output_tokens = r->output_tokens(),
                                                       .block_hashes = r->block_hashes_},
                                                      now);
      if (result == sim::SubmitResult::kQueued) {
        in_engine_.emplace(r->id(), r);
        continue;
      }
      {
        std::lock_guard<std::mutex> lock(metrics_mu_);
        ++metrics_.rejected;
      }
      r->Advance(result == sim::SubmitResult::kRejectedQueueFull ? Phase::kRejectedQueueFull
                                                                 : Phase::kRejectedTooLarge,
                 0);
    }
    batch.clear();
    if (time_scale_ == 0 && engine_.NextEventTime() != sim::kForever) {
      const double t = engine_.NextEventTime();
      Dispatch(engine_.Step(t));
      last = t;
    }
    PublishGauges();
  }
}

void EngineRunner::Dispatch(std::span<const sim::EngineEvent> events) {
  if (events.empty()) return;
  // Counters and gauges first, then the waiters: a response never precedes its own count.
  std::vector<std::pair<std::shared_ptr<PendingRequest>, const sim::EngineEvent*>> wake;
  wake.reserve(events.size());
  {
    std::lock_guard<std::mutex> lock(metrics_mu_);
    for (const sim::EngineEvent& e : events) {
      auto it = in_engine_.find(e.request_id);
      if (it == in_engine_.end()) continue;
      PendingRequest& r = *it->second;
      switch (e.kind) {
        case sim::EngineEventKind::kFirstToken: {
          metrics_.prompt_tokens += e.prompt_tokens;
          metrics_.prefix_queries += e.prompt_tokens;
          metrics_.prefix_hits += e.cached_tokens;
          metrics_.generation_tokens += 1;
          const double ttft = e.time - r.submitted_at_;
          const size_t bucket = std::lower_bound(kTtftBuckets.begin(), kTtftBuckets.end(), ttft) -
                                kTtftBuckets.begin();
          ++metrics_.ttft_buckets[bucket];
          metrics_.ttft_sum += ttft;
          ++metrics_.ttft_count;
          break;
        }
        case sim::EngineEventKind::kFinished:
          metrics_.generation_tokens += r.output_tokens() - 1;
          ++metrics_.finished;
          break;
        case sim::EngineEventKind::kTimedOut:
          ++metrics_.timed_out;
          break;
      }
      wake.emplace_back(it->second, &e);
      if (e.kind != sim::EngineEventKind::kFirstToken) in_engine_.erase(it);
    }
    // The gauges too: a scrape right after the last response must not see it still running.
    PublishGaugesLocked();
  }
  for (auto& [r, e] : wake) {
    switch (e->kind) {
      case sim::EngineEventKind::kFirstToken:
        r->Advance(Phase::kFirstToken, e->cached_tokens);
        break;
      case sim::EngineEventKind::kFinished:
        r->Advance(Phase::kFinished, 0);
        break;
      case sim::EngineEventKind::kTimedOut:
        r->Advance(Phase::kTimedOut, 0);
        break;
    }
  }
}

void EngineRunner::PublishGauges() {
  std::lock_guard<std::mutex> lock(metrics_mu_);
  PublishGaugesLocked();
}

void EngineRunner::PublishGaugesLocked() {
  metrics_.running = engine_.running();
  metrics_.waiting = engine_.waiting();
  metrics_.kv_usage = engine_.cache().usage();
  metrics_.kv_blocks = engine_.cache().capacity_blocks();
}

}  // namespace cacheroute::engine_emu
