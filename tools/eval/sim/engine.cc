// Engine: see engine.h.
//
// Decode bookkeeping. All decoding sequences advance together, one token per iteration, so a
// sequence that starts decoding in iteration k with r tokens left finishes at the end of iteration
// k + r − 1. That number goes into a min-heap once; an iteration's end pops exactly the sequences
// that finish. The total context of the decoding sequences (for the profile's attention term)
// grows by the number of decoders per iteration and is corrected when one joins or leaves.
#include "tools/eval/sim/engine.h"

#include <algorithm>
#include <cassert>
#include <cmath>

#include "absl/strings/str_format.h"

namespace cacheroute::sim {

absl::Status ValidateEngineOptions(const EngineOptions& options) {
  if (!(options.timeout_s > 0)) {
    return absl::InvalidArgumentError(
        absl::StrFormat("engine timeout_s must be > 0 (or infinite), got %g", options.timeout_s));
  }
  return absl::OkStatus();
}

Engine::Engine(EngineProfile profile, EngineOptions options)
    : profile_(std::move(profile)), options_(options), cache_(profile_.kv_blocks) {
  assert(ValidateEngineProfile(profile_).ok());
  assert(ValidateEngineOptions(options_).ok());
}

SubmitResult Engine::Submit(const EngineRequest& request, double now) {
  events_.clear();
  ++stats_.submitted;
  SubmitResult result = SubmitResult::kQueued;
  if (request.prompt_tokens == 0 || request.output_tokens == 0) {
    result = SubmitResult::kRejectedInvalid;
  } else if (BlocksForTokens(uint64_t{request.prompt_tokens} + request.output_tokens) >
             profile_.kv_blocks) {
    result = SubmitResult::kRejectedTooLarge;
  } else if (options_.max_waiting > 0 && waiting_count_ >= options_.max_waiting) {
    result = SubmitResult::kRejectedQueueFull;
  }
  if (result != SubmitResult::kQueued) {
    ++stats_.rejected;
    return result;
  }

  uint32_t index;
  if (free_slots_.empty()) {
    index = static_cast<uint32_t>(slots_.size());
    slots_.emplace_back();
  } else {
    index = free_slots_.back();
    free_slots_.pop_back();
  }
  Slot& s = slots_[index];
  s.id = request.id;
  s.prompt = request.prompt_tokens;
  s.output = request.output_tokens;
  s.hashes = request.block_hashes;
  s.deadline = now + options_.timeout_s;
  s.state = State::kWaiting;
  s.prefilled = 0;
  s.decode_start = 0;
  const Ref ref{index, s.generation};
  waiting_.push_back(ref);
  ++waiting_count_;
  if (std::isfinite(s.deadline)) deadlines_.push_back(ref);
  if (!in_iteration_ && !wake_pending_) {
    wake_pending_ = true;
    wake_time_ = now;
  }
  return result;
}

double Engine::NextEventTime() const {
  if (in_iteration_) return iteration_end_;
  return wake_pending_ ? wake_time_ : kForever;
}

std::span<const EngineEvent> Engine::Step(double now) {
  events_.clear();
  wake_pending_ = false;
  if (in_iteration_) {
    assert(now >= iteration_end_);
    FinishIteration(now);
  }
  ExpireDeadlines(now);
  StartIteration(now);
  return events_;
}

void Engine::Emit(EngineEventKind kind, const Slot& s, double now) {
  events_.push_back({.kind = kind,
                     .request_id = s.id,
                     .time = now,
                     .prompt_tokens = s.prompt,
                     .cached_tokens = s.alloc.cached_tokens});
}

void Engine::Release(uint32_t index) {
  Slot& s = slots_[index];
  if (s.state == State::kPrefill || s.state == State::kDecode) cache_.Free(s.alloc);
  s.state = State::kFree;
  ++s.generation;
  s.hashes = {};
  free_slots_.push_back(index);
}

void Engine::FinishIteration(double now) {
  in_iteration_ = false;
  ++stats_.iterations;
  stats_.busy_s += iteration_end_ - iteration_start_;

  // Decoders: each produced one token; those whose last token this was finish.
  decode_context_ += iteration_decodes_;
  stats_.decode_tokens += iteration_decodes_;
  while (!decode_ends_.empty() && decode_ends_.top().iteration <= iteration_) {
    const DecodeEnd end = decode_ends_.top();
    decode_ends_.pop();
    const Ref ref{end.slot, end.generation};
    if (!Alive(ref)) continue;  // timed out earlier
    Slot& s = slots_[end.slot];
    --decoding_;
    --running_;
    decode_context_ -= s.prompt + s.output;
    ++stats_.finished;
    Emit(EngineEventKind::kFinished, s, now);
    Release(end.slot);
  }

  // Prefill chunks: a completed prompt samples its first token and decodes from the next iteration.
  for (const Chunk& chunk : iteration_chunks_) {
    Slot& s = slots_[chunk.ref.slot];
    s.prefilled += chunk.tokens;
    if (s.prefilled < s.prompt) continue;
    ++stats_.first_tokens;
    Emit(EngineEventKind::kFirstToken, s, now);
    if (s.output == 1) {
      --running_;
      ++stats_.finished;
      Emit(EngineEventKind::kFinished, s, now);
      Release(chunk.ref.slot);
      continue;
    }
    s.state = State::kDecode;
    s.decode_start = iteration_ + 1;
    ++decoding_;
    decode_context_ += s.prompt + 1;
    decode_ends_.push({iteration_ + s.output - 1, chunk.ref.slot, chunk.ref.generation});
  }
  iteration_chunks_.clear();
}

void Engine::ExpireDeadlines(double now) {
  while (!deadlines_.empty()) {
    const Ref ref = deadlines_.front();
    if (Alive(ref) && slots_[ref.slot].deadline > now) break;
    deadlines_.pop_front();
    if (!Alive(ref)) continue;  // already done
    Slot& s = slots_[ref.slot];
    switch (s.state) {
      case State::kWaiting:
        --waiting_count_;  // its queue entry is skipped when reached
        break;
      case State::kPrefill:
        --running_;  // its prefilling_ entry is dropped at the next schedule
        break;
      case State::kDecode:
        --running_;
        --decoding_;
        decode_context_ -= DecodeContext(s);
        break;
      case State::kFree:
        break;
    }
    ++stats_.timed_out;
    Emit(EngineEventKind::kTimedOut, s, now);
    Release(ref.slot);
  }
}

void Engine::StartIteration(double now) {
  uint64_t budget = profile_.token_budget;
  iteration_decodes_ = decoding_;
  budget -= decoding_;  // decoding_ ≤ max_running ≤ token_budget
  uint64_t prefill_tokens = 0;

  // Sequences mid-prefill continue first, oldest first; finished or aborted ones drop out.
  size_t kept = 0;
  for (const Ref& ref : prefilling_) {
    if (!Alive(ref) || slots_[ref.slot].state != State::kPrefill) continue;
    prefilling_[kept++] = ref;
    Slot& s = slots_[ref.slot];
    const uint32_t tokens =
        static_cast<uint32_t>(std::min<uint64_t>(s.prompt - s.prefilled, budget));
    if (tokens == 0) continue;
    iteration_chunks_.push_back({ref, tokens});
    cache_.Commit(s.hashes, s.prefilled + tokens, s.alloc);
    budget -= tokens;
    prefill_tokens += tokens;
  }
  prefilling_.resize(kept);

  // Then new requests, FCFS, while budget, sequence slots and KV allow.
  while (budget > 0 && running_ < profile_.max_running && !waiting_.empty()) {
    const Ref ref = waiting_.front();
    if (!Alive(ref)) {
      waiting_.pop_front();
      continue;
    }
    Slot& s = slots_[ref.slot];
    if (!cache_.Allocate(s.hashes, s.prompt, s.prompt + s.output, s.alloc)) break;
    waiting_.pop_front();
    --waiting_count_;
    ++running_;
    ++stats_.admitted;
    s.state = State::kPrefill;
    s.prefilled = s.alloc.cached_tokens;
    const uint32_t tokens =
        static_cast<uint32_t>(std::min<uint64_t>(s.prompt - s.prefilled, budget));
    iteration_chunks_.push_back({ref, tokens});
    cache_.Commit(s.hashes, s.prefilled + tokens, s.alloc);
    budget -= tokens;
    prefill_tokens += tokens;
    prefilling_.push_back(ref);
  }
  // Sequences admitted in this iteration whose prompt is done leave prefilling_ when it ends.

  if (prefill_tokens == 0 && iteration_decodes_ == 0) {
    // Idle: nothing runs, so nothing holds KV and the queue head always fits; the queue is empty.
    assert(waiting_count_ == 0);
    return;
  }
  stats_.prefill_tokens += prefill_tokens;
  ++iteration_;
  in_iteration_ = true;
  iteration_start_ = now;
  iteration_end_ =
      now + profile_.IterationSeconds(prefill_tokens, iteration_decodes_, decode_context_);
}

}  // namespace cacheroute::sim
