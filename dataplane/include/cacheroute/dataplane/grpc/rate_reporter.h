// RateReporter: sends a gateway's per-key request counts to the planner (RateService.ReportRates,
// proto/cacheroute/v1/rates.proto). Every `interval` a background thread drains the RateRecorder
// into one report: the listed keys' counts, `other_count` (the keys not reported one by one, so the
// planner sees the whole cold-tail rate), the window's start and end, and a sequence number.
// Windows without requests are not reported; the next report's window then starts where the
// last report's ended.
//
// Delivery: a report whose RPC failed is retried unchanged, with the same sequence, until it is
// accepted (the planner applies a sequence at most once). Reports go out in sequence order; up to
// `max_pending` wait behind a failed one, beyond that the oldest is dropped and counted in
// Stats().dropped_reports. Sequences start at the wall-clock time in milliseconds when the
// reporter is built and go up by one per report. Why: docs/dataplane.md, "Rate reporter".
// Over several planner replicas (planner_channels.h), a report that failed UNAVAILABLE or
// DEADLINE_EXCEEDED is retried at once, same sequence, on the next channel (each at most once per
// ReportOnce); inside one channel over all replicas gRPC's round_robin sends it to another.
//
// Invariants: Start at most once; Stop is idempotent, sends one last report of the counts drained
// so far (best effort, bounded by rpc_timeout) and joins the thread; ReportOnce may be called
// instead of Start by callers that run their own timer (tests, simulators).
//
// Usage:
//   RateRecorder recorder({.max_keys = 4096});
//   RateReporter reporter(channel, recorder, {.gateway_id = "gw-1"});
//   reporter.Start();                        // drains every 10 s
//   recorder.Record(KeyId(key));             // on every request
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>

#include "cacheroute/dataplane/evidence_recorder.h"
#include "cacheroute/dataplane/grpc/planner_channels.h"
#include "cacheroute/dataplane/key_sizes.h"
#include "cacheroute/dataplane/rate_recorder.h"
#include "cacheroute/dataplane/router.h"
#include "cacheroute/dataplane/status.h"
#include "cacheroute/v1/rates.grpc.pb.h"

namespace cacheroute::dataplane {

struct RateReporterOptions {
  std::string gateway_id;
  std::chrono::milliseconds interval{10000};
  // Reports kept for retry while the planner is unreachable.
  size_t max_pending = 32;
  std::chrono::milliseconds rpc_timeout{5000};
  // Sent as "authorization: Bearer <token>" when non-empty.
  std::string bearer_token;
  // When set, each report carries the rollout evidence drained from it (evidence_recorder.h).
  EvidenceRecorder* evidence = nullptr;
  // When set, called on the reporter thread for each key a report lists (key_id and count set),
  // to add what the gateway knows of the key: prompt_tokens and reusable_tokens (KeySizes),
  // served_at (Router::Remembered). What it sets must pass the planner's checks (rates.proto).
  std::function<void(v1::KeyCount&)> annotate;
  // Wall-clock milliseconds since the Unix epoch, for window times and the first sequence.
  // Injected for tests; the default reads std::chrono::system_clock.
  std::function<int64_t()> now_unix_ms;
};

// What a gateway that embeds the Router knows of a key a report lists (count set), for
// RateReporterOptions::annotate: with `sizes`, the key's means scaled to the count: prompt_tokens,
// and reusable_tokens from the prompts' block hashes (KeySizes::ObservePrompt), once two of its
// prompts were compared (before that, the planner takes the measured keys' mean: the cached tokens
// of a first answer are no estimate, since it may have landed where only the template was); with
// `router`, the destination its per-key memory says the key was last sent to, by `names`
// (served_at). Leaves a field unset when nothing is known.
inline void AnnotateKeyCount(v1::KeyCount& count, const KeySizes* sizes, const Router* router,
                             std::span<const std::string> names) {
  if (sizes != nullptr) {
    if (const std::optional<KeySize> size = sizes->Get(count.key_id())) {
      const std::optional<double> reusable = size->reusable_tokens;
      if (size->answers > 0) {
        count.set_prompt_tokens(count.count() * size->prompt_tokens);
        if (reusable.has_value()) {
          count.set_reusable_tokens(std::min(count.prompt_tokens(), count.count() * *reusable));
        }
      }
    }
  }
  if (router != nullptr) {
    const KeyRecall served = router->Remembered(count.key_id());
    if (served.known() && served.destination < names.size()) {
      count.set_served_at(names[served.destination]);
    }
  }
}

// One report of `gateway_id` for the window [window_start_ms, window_end_ms) (Unix
// milliseconds): the snapshot's listed keys and counts, each passed to `annotate` when set, its
// other_count, and the window's rollout evidence when there is some. The sequence is the
// caller's to set. What RateReporter sends; the fleet simulator's gateways report through it too.
inline v1::ReportRatesRequest MakeRateReport(const std::string& gateway_id, int64_t window_start_ms,
                                             int64_t window_end_ms, const RateSnapshot& snapshot,
                                             const std::optional<WindowEvidence>& evidence,
                                             const std::function<void(v1::KeyCount&)>& annotate) {
  v1::ReportRatesRequest request;
  request.set_gateway_id(gateway_id);
  request.set_window_start_unix_ms(window_start_ms);
  request.set_window_end_unix_ms(window_end_ms);
  for (const KeyCount& k : snapshot.counts) {
    v1::KeyCount* out = request.add_counts();
    out->set_key_id(k.key_id);
    out->set_count(static_cast<double>(k.count));
    if (annotate) annotate(*out);
  }
  request.set_other_count(static_cast<double>(snapshot.other_count));
  if (evidence.has_value()) {
    v1::GateEvidence* out = request.mutable_evidence();
    out->set_table_fraction(evidence->table_fraction);
    for (auto [arm, to] : {std::pair{&evidence->evidence.table, out->mutable_table()},
                           {&evidence->evidence.control, out->mutable_control()}}) {
      to->set_requests(arm->requests);
      to->set_failures(arm->failures);
      to->set_prompt_tokens(arm->prompt_tokens);
      to->set_cached_tokens(arm->cached_tokens);
      if (arm->ttft.count() > 0) {
        to->mutable_ttft_bucket_counts()->Add(arm->ttft.counts().begin(), arm->ttft.counts().end());
      }
    }
  }
  return request;
}

struct RateReporterStats {
  uint64_t reports_sent = 0;       // accepted by the planner (duplicates included)
  uint64_t duplicates = 0;         // the planner had already applied that sequence
  uint64_t failed_attempts = 0;    // RPCs that failed (each is retried)
  uint64_t dropped_reports = 0;    // given up on because more than max_pending were queued
  uint64_t requests_reported = 0;  // Σ totals of the accepted reports
  size_t pending = 0;              // reports waiting to be (re)sent
  uint64_t last_sequence = 0;      // of the last report built
  std::string last_error;
};

class RateReporter {
 public:
  RateReporter(std::shared_ptr<grpc::ChannelInterface> channel, RateRecorder& recorder,
               RateReporterOptions options)
      : RateReporter(std::make_shared<PlannerChannels>(
                         std::vector<std::shared_ptr<grpc::ChannelInterface>>{std::move(channel)}),
                     recorder, std::move(options)) {}
  RateReporter(std::shared_ptr<PlannerChannels> channels, RateRecorder& recorder,
               RateReporterOptions options)
      : channels_(std::move(channels)), recorder_(recorder), options_(std::move(options)) {
    if (!options_.now_unix_ms) {
      options_.now_unix_ms = [] {
        return std::chrono::duration_cast<std::chrono::milliseconds>(
                   std::chrono::system_clock::now().time_since_epoch())
            .count();
      };
    }
    window_start_ms_ = options_.now_unix_ms();
    next_sequence_ = static_cast<uint64_t>(std::max<int64_t>(window_start_ms_, 1));
  }
  RateReporter(const RateReporter&) = delete;
  RateReporter& operator=(const RateReporter&) = delete;
  ~RateReporter() { Stop(); }

  Status Start() {
    if (Status s = Validate(); !s.ok) return s;
    std::lock_guard<std::mutex> lock(mu_);
    if (started_) return Status::Error("RateReporter: already started");
    started_ = true;
    thread_ = std::thread([this] { Run(); });
    return Status::Ok();
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      stopping_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) {
      thread_.join();
      ReportOnce();  // the last window, best effort
    }
  }

  // Drains the recorder into a new report, then sends every pending report in sequence order,
  // stopping at the first failure (it stays pending with its sequence). Returns the first failure.
  Status ReportOnce() {
    if (Status s = Validate(); !s.ok) return s;
    std::lock_guard<std::mutex> send_lock(send_mu_);
    std::optional<WindowEvidence> evidence;
    if (options_.evidence != nullptr) evidence = options_.evidence->Drain();
    Enqueue(recorder_.Drain(), evidence);
    size_t rotations = 0;  // channels moved past in this call; each is tried at most once
    while (true) {
      v1::ReportRatesRequest request;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (pending_.empty()) return Status::Ok();
        request = pending_.front();
      }
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + options_.rpc_timeout);
      if (!options_.bearer_token.empty()) {
        context.AddMetadata("authorization", "Bearer " + options_.bearer_token);
      }
      v1::ReportRatesResponse response;
      const PlannerChannels::Pick pick = channels_->Current();
      grpc::Status status =
          v1::RateService::NewStub(pick.channel)->ReportRates(&context, request, &response);
      if (!status.ok() && PlannerChannels::ShouldRotate(status.error_code()) &&
          channels_->size() > 1) {
        channels_->Failed(pick.index);
        if (++rotations < channels_->size()) {
          std::lock_guard<std::mutex> lock(mu_);
          ++stats_.failed_attempts;
          continue;  // the same report, on the next replica
        }
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (!status.ok()) {
        ++stats_.failed_attempts;
        stats_.last_error = "ReportRates sequence " + std::to_string(request.sequence()) + ": " +
                            std::to_string(status.error_code()) + " " + status.error_message();
        // INVALID_ARGUMENT will not get better by retrying: drop it rather than block the queue.
        if (status.error_code() == grpc::StatusCode::INVALID_ARGUMENT) {
          pending_.pop_front();
          ++stats_.dropped_reports;
        }
        stats_.pending = pending_.size();
        return Status::Error(stats_.last_error);
      }
      pending_.pop_front();
      ++stats_.reports_sent;
      if (response.duplicate()) ++stats_.duplicates;
      uint64_t total = static_cast<uint64_t>(request.other_count());
      for (const v1::KeyCount& k : request.counts()) total += static_cast<uint64_t>(k.count());
      stats_.requests_reported += total;
      stats_.pending = pending_.size();
    }
  }

  RateReporterStats Stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

 private:
  Status Validate() const {
    if (options_.gateway_id.empty()) return Status::Error("gateway_id: empty");
    if (options_.interval.count() <= 0) {
      return Status::Error("interval: " + std::to_string(options_.interval.count()) +
                           " ms, must be positive");
    }
    if (options_.max_pending == 0) return Status::Error("max_pending: 0, must be at least 1");
    return Status::Ok();
  }

  void Enqueue(const RateSnapshot& snapshot, const std::optional<WindowEvidence>& evidence) {
    // An empty window is not worth a report (the planner's estimate decays by itself), and while
    // the planner is away empty reports would only push real ones out of the bounded queue.
    if (snapshot.total == 0 && !evidence.has_value()) return;
    const int64_t end_ms = options_.now_unix_ms();
    // The planner wants end > start: a window is at least a millisecond, even if the clock did
    // not move (or went backwards); the next window starts where this one ended.
    const int64_t window_end_ms = std::max(end_ms, window_start_ms_ + 1);
    v1::ReportRatesRequest request =
        MakeRateReport(options_.gateway_id, window_start_ms_, window_end_ms, snapshot, evidence,
                       options_.annotate);
    window_start_ms_ = window_end_ms;
    std::lock_guard<std::mutex> lock(mu_);
    request.set_sequence(next_sequence_++);
    stats_.last_sequence = request.sequence();
    pending_.push_back(std::move(request));
    while (pending_.size() > options_.max_pending) {
      pending_.pop_front();
      ++stats_.dropped_reports;
    }
    stats_.pending = pending_.size();
  }

  void Run() {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (wake_.wait_for(lock, options_.interval, [this] { return stopping_; })) return;
      }
      ReportOnce();  // a failure stays pending and shows in Stats()
    }
  }

  std::shared_ptr<PlannerChannels> channels_;
  RateRecorder& recorder_;
  RateReporterOptions options_;

  std::mutex send_mu_;           // serialises ReportOnce (window bookkeeping and order of sends)
  int64_t window_start_ms_ = 0;  // guarded by send_mu_ after construction

  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool started_ = false;                        // guarded by mu_
  bool stopping_ = false;                       // guarded by mu_
  uint64_t next_sequence_ = 1;                  // guarded by mu_
  std::deque<v1::ReportRatesRequest> pending_;  // guarded by mu_
  RateReporterStats stats_;                     // guarded by mu_
  std::thread thread_;
};

}  // namespace cacheroute::dataplane
