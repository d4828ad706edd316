// TableSubscriber: keeps a gateway's Router on the planner's latest routing table. A background
// thread holds TableService.StreamTable open: on every (re)connect it sends the gateway id and
// its applied version, applies full tables and deltas through table::TableClientState, and ACKs
// an update only after Router::Install took it (else NACKs with the reason). A live stream
// refreshes the table TTL every `refresh_period`; it reconnects with jittered exponential
// backoff; with `cache_path` every applied table is also kept on disk and installed by Start().
// Pick never waits for any of this. Design: docs/protocol.md, "The gateway's subscriber".
//
// Sign of life: while it waits out a backoff, the subscriber looks at its channels' connectivity
// every `ready_check_period`; a channel that was not READY and becomes READY (the planner is
// reachable again) ends the wait at once and resets the backoff, so however long an outage was,
// the stream is back within about a period plus the channel's own reconnect delay (capped at 1 s
// by PlannerChannels::Create; a channel of your own should set GRPC_ARG_MAX_RECONNECT_BACKOFF_MS).
// `on_stream_change` tells the embedder once when an open stream is lost and once when a stream
// is open again (and at the first connect), for one log line each; Stats() counts them.
//
// Destinations are matched by name: options.destinations[i] names Router destination i. Unknown
// names NACK a table (with ignore_unknown_destinations: they are left out of it); a membership
// change is SetDestinations, which re-installs the last table re-mapped (Router::Resize).
//
// Over PlannerChannels (several replicas) a stream that ends reopens on the next channel, the
// backoff growing once per round; it resumes from the applied version, keeping the table.
// Invariants: Start at most once; Stop is idempotent, ends the stream (TryCancel) and joins the
// threads; the destructor calls Stop. Stats() is safe from any thread.
//
// Usage:
//   auto channel = grpc::CreateChannel("planner:50051", grpc::InsecureChannelCredentials());
//   TableSubscriber subscriber(channel, router, {.gateway_id = "gw-1",
//                                                .destinations = {"engine-0", "engine-1"},
//                                                .cache_path = "/var/lib/gw/table.pb"});
//   if (Status s = subscriber.Start(); !s.ok) Log(s.message);   // a bad cache file is only logged
//   ...
//   subscriber.Stop();
#pragma once

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "cacheroute/dataplane/clock.h"
#include "cacheroute/dataplane/grpc/planner_channels.h"
#include "cacheroute/dataplane/grpc/table_conversion.h"
#include "cacheroute/dataplane/random.h"
#include "cacheroute/dataplane/router.h"
#include "cacheroute/dataplane/routing_table.h"
#include "cacheroute/dataplane/status.h"
#include "cacheroute/v1/table.grpc.pb.h"
#include "proto/table/table_client_state.h"

namespace cacheroute::dataplane {

// Jittered exponential backoff: initial × multiplier^attempt, capped, then scaled by a uniform
// factor in [1 − jitter, 1 + jitter]. Pure; the randomness is injected.
struct Backoff {
  Duration initial = std::chrono::seconds(1);
  double multiplier = 1.6;
  double jitter = 0.2;
  Duration max = std::chrono::seconds(120);

  // The delay before reconnect attempt `attempt` (0 for the first retry).
  Duration Delay(uint32_t attempt, Random& random) const {
    double base = std::chrono::duration<double>(initial).count();
    const double cap = std::chrono::duration<double>(max).count();
    for (uint32_t i = 0; i < attempt && base < cap; ++i) base *= multiplier;
    base = std::min(base, cap);
    const double unit = static_cast<double>(random.Next() >> 11) * 0x1.0p-53;  // [0, 1)
    const double factor = 1.0 - jitter + 2.0 * jitter * unit;
    return std::chrono::duration_cast<Duration>(std::chrono::duration<double>(base * factor));
  }
};

// What on_stream_change reports: one call per change, never two alike in a row.
struct TableStreamChange {
  // true: a stream is open (the first one since Start, or again after a loss); false: the open
  // stream was lost (reconnect attempts that fail after it are not reported again).
  bool connected = false;
  bool first = false;  // connected, for the first time since Start
  // connected after a loss: how long no stream was open (by the subscriber's Clock).
  Duration down_for{};
  std::string detail;  // lost: why the stream ended ("14 Socket closed", the gRPC code and text)
};

struct TableSubscriberOptions {
  std::string gateway_id;
  // Router destination i is named destinations[i]; must have Router's destination_count entries
  // (at least one, unless ignore_unknown_destinations).
  std::vector<std::string> destinations;
  // Where to keep the last applied table across restarts; empty: no disk cache.
  std::string cache_path;
  Backoff backoff;
  // How often a live stream restarts the Router's table TTL.
  Duration refresh_period = std::chrono::seconds(1);
  // While waiting to reconnect, how often the channels' connectivity is looked at (see above).
  Duration ready_check_period = std::chrono::milliseconds(200);
  // Sent as "authorization: Bearer <token>" when non-empty (the planner's auth.token_file).
  std::string bearer_token;
  // For a membership that changes at run time, where the planner may name a destination this
  // gateway has not seen yet (or no longer has): such a destination is dropped from the table's
  // entries (an entry left with none is not admitted here) instead of the table being NACKed.
  bool ignore_unknown_destinations = false;
  // Called on the stream thread, outside the subscriber's locks, when the stream's state changes
  // (TableStreamChange); must not call Stop. Empty: not called.
  std::function<void(const TableStreamChange&)> on_stream_change;
};

struct TableSubscriberStats {
  bool connected = false;    // a stream is open (the planner took our first request)
  uint64_t connects = 0;     // streams opened
  uint64_t disconnects = 0;  // streams that ended (error or planner shutdown)
  uint64_t losses = 0;       // open streams lost (each outage counts once)
  uint64_t recoveries = 0;   // streams open again after a loss
  // Backoff waits ended early because a channel became READY again (then the backoff restarts).
  uint64_t early_reconnects = 0;
  uint64_t updates = 0;      // whole updates answered (ACK + NACK)
  uint64_t acks = 0;
  uint64_t nacks = 0;
  bool loaded_from_cache = false;
  std::string last_error;  // of the last NACK, stream end or cache problem
  TableVersion version;    // applied (0.0 before the first table)
};

class TableSubscriber {
 public:
  TableSubscriber(std::shared_ptr<grpc::ChannelInterface> channel, Router& router,
                  TableSubscriberOptions options, Clock& clock = DefaultClock(),
                  Random& random = DefaultRandom())
      : TableSubscriber(
            std::make_shared<PlannerChannels>(
                std::vector<std::shared_ptr<grpc::ChannelInterface>>{std::move(channel)}),
            router, std::move(options), clock, random) {}
  TableSubscriber(std::shared_ptr<PlannerChannels> channels, Router& router,
                  TableSubscriberOptions options, Clock& clock = DefaultClock(),
                  Random& random = DefaultRandom())
      : channels_(std::move(channels)),
        router_(router),
        options_(std::move(options)),
        clock_(clock),
        random_(random),
        state_(options_.gateway_id) {
    for (uint32_t i = 0; i < options_.destinations.size(); ++i) {
      index_by_name_.emplace(options_.destinations[i], i);
    }
    state_.SetAcceptor([this](const table::TableSnapshot& table) { return Accept(table); });
  }
  TableSubscriber(const TableSubscriber&) = delete;
  TableSubscriber& operator=(const TableSubscriber&) = delete;
  ~TableSubscriber() { Stop(); }

  // Installs the cached table (if any) and starts the stream thread. An error means the options
  // are unusable; a missing or unreadable cache file only shows in Stats().last_error.
  Status Start() {
    if (options_.gateway_id.empty()) return Status::Error("gateway_id: empty");
    if (options_.destinations.size() != index_by_name_.size()) {
      return Status::Error("destinations: names must be distinct");
    }
    if (options_.destinations.empty() && !options_.ignore_unknown_destinations) {
      return Status::Error("destinations: empty");
    }
    if (!(options_.refresh_period > Duration::zero())) {
      return Status::Error("refresh_period: must be positive");
    }
    if (!(options_.ready_check_period > Duration::zero())) {
      return Status::Error("ready_check_period: must be positive");
    }
    LoadCache();
    stream_thread_ = std::thread([this] { RunStream(); });
    refresh_thread_ = std::thread([this] { RunRefresh(); });
    return Status::Ok();
  }

  void Stop() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      stopping_ = true;
      if (context_ != nullptr) context_->TryCancel();
    }
    wake_.notify_all();
    if (stream_thread_.joinable()) stream_thread_.join();
    if (refresh_thread_.joinable()) refresh_thread_.join();
  }

  TableSubscriberStats Stats() const {
    std::lock_guard<std::mutex> lock(mu_);
    return stats_;
  }

  // Membership change: Router destination i is now named names[i] (non-empty, distinct, at most
  // the Router's capacity; none at all only with ignore_unknown_destinations). The last table accepted is re-mapped to the new indices and installed
  // with the new count in one Router::Resize (without one, or when it names a destination that is
  // gone and unknown names are not ignored, the Router is resized without a table until the
  // planner's next). Any thread; serialised with the stream's installs.
  Status SetDestinations(std::vector<std::string> names) {
    std::unordered_map<std::string, uint32_t> index;
    for (uint32_t i = 0; i < names.size(); ++i) {
      if (names[i].empty()) return Status::Error("destinations[" + std::to_string(i) + "]: empty");
      if (!index.emplace(names[i], i).second) {
        return Status::Error("destinations[" + std::to_string(i) + "]: '" + names[i] +
                             "' appears twice");
      }
    }
    std::lock_guard<std::mutex> lock(map_mu_);
    if (names.empty() && !options_.ignore_unknown_destinations) {
      return Status::Error("destinations: empty");
    }
    options_.destinations = std::move(names);
    index_by_name_ = std::move(index);
    std::shared_ptr<const RoutingTable> remapped;
    if (last_ != nullptr && !options_.destinations.empty()) {
      Result<RoutingTable> converted = ConvertLocked(*last_);
      if (converted.ok()) {
        remapped = std::make_shared<const RoutingTable>(*std::move(converted));
      } else {
        std::lock_guard<std::mutex> stats_lock(mu_);
        stats_.last_error = "membership change: " + converted.status().message;
      }
    }
    return router_.Resize(static_cast<uint32_t>(options_.destinations.size()), std::move(remapped),
                          clock_.Now());
  }

  // The table's name → Router index mapping, applied to a planner table (exposed for tests and
  // for gateways that fetch tables another way, e.g. TableService.GetTable).
  Result<RoutingTable> Convert(const table::TableSnapshot& table) const {
    std::lock_guard<std::mutex> lock(map_mu_);
    return ConvertLocked(table);
  }

  static Clock& DefaultClock() {
    static SteadyClock clock;
    return clock;
  }
  static Random& DefaultRandom() {
    static SeededRandom random(
        static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
    return random;
  }

 private:
  Result<RoutingTable> ConvertLocked(const table::TableSnapshot& table) const {
    return ToRoutingTable(table, index_by_name_, static_cast<uint32_t>(options_.destinations.size()),
                          options_.ignore_unknown_destinations);
  }

  // Runs inside TableClientState::OnUpdate on the stream thread: install or refuse.
  absl::Status Accept(const table::TableSnapshot& table) {
    std::lock_guard<std::mutex> lock(map_mu_);
    const table::TableVersion v = table.version();
    std::shared_ptr<const RoutingTable> installed = router_.table();
    if (installed != nullptr && installed->version() == TableVersion{v.epoch, v.number}) {
      // The same version again (e.g. after a reconnect): nothing to install, but it is current.
      router_.Refresh(clock_.Now());
      last_ = table.weak_from_this().lock();
      return absl::OkStatus();
    }
    Result<RoutingTable> converted = ConvertLocked(table);
    if (!converted.ok()) return absl::InvalidArgumentError(converted.status().message);
    Status s =
        router_.Install(std::make_shared<const RoutingTable>(*std::move(converted)), clock_.Now());
    if (!s.ok) return absl::FailedPreconditionError(s.message);
    last_ = table.weak_from_this().lock();
    return absl::OkStatus();
  }

  void LoadCache() {
    if (options_.cache_path.empty()) return;
    std::ifstream in(options_.cache_path, std::ios::binary);
    if (!in) return;  // no cache yet: the normal first start
    std::stringstream bytes;
    bytes << in.rdbuf();
    v1::RoutingTable proto;
    std::string error;
    if (!proto.ParseFromString(bytes.str())) {
      error = "cache " + options_.cache_path + ": not a RoutingTable";
    } else {
      absl::StatusOr<std::shared_ptr<const table::TableSnapshot>> snapshot =
          table::TableSnapshot::FromProto(proto);
      if (!snapshot.ok()) {
        error = "cache " + options_.cache_path + ": " + std::string(snapshot.status().message());
      } else if (absl::Status accepted = Accept(**snapshot); !accepted.ok()) {
        error = "cache " + options_.cache_path + ": " + std::string(accepted.message());
      } else {
        state_ = table::TableClientState(options_.gateway_id, *snapshot);
        state_.SetAcceptor([this](const table::TableSnapshot& t) { return Accept(t); });
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    if (error.empty()) {
      stats_.loaded_from_cache = true;
      stats_.version = router_.table()->version();
    } else {
      stats_.last_error = error;
    }
  }

  void SaveCache(const table::TableSnapshot& table) {
    if (options_.cache_path.empty()) return;
    const std::string temp = options_.cache_path + ".tmp";
    std::string error;
    {
      std::ofstream out(temp, std::ios::binary | std::ios::trunc);
      if (!out || !table.ToProto().SerializeToOstream(&out) || !out.flush()) {
        error = "cache " + temp + ": write failed";
      }
    }
    if (error.empty() && std::rename(temp.c_str(), options_.cache_path.c_str()) != 0) {
      error = "cache " + options_.cache_path + ": rename failed";
    }
    if (!error.empty()) {
      std::lock_guard<std::mutex> lock(mu_);
      stats_.last_error = error;
    }
  }

  void RunStream() {
    uint32_t attempt = 0;
    bool ever_connected = false;
    bool lost = false;  // an open stream ended and none is open since
    Time lost_at{};
    for (;;) {
      grpc::ClientContext context;
      if (!options_.bearer_token.empty()) {
        context.AddMetadata("authorization", "Bearer " + options_.bearer_token);
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (stopping_) return;
        context_ = &context;
        ++stats_.connects;
      }
      const PlannerChannels::Pick pick = channels_->Current();
      std::unique_ptr<grpc::ClientReaderWriter<v1::StreamTableRequest, v1::TableUpdate>> stream =
          v1::TableService::NewStub(pick.channel)->StreamTable(&context);
      bool opened = false;
      if (stream->Write(state_.OnConnect())) {
        // The planner took the stream. It sends nothing if we already have its latest version,
        // so an open stream is itself the sign that our table is current.
        opened = true;
        std::lock_guard<std::mutex> lock(mu_);
        stats_.connected = true;
        if (lost) ++stats_.recoveries;
      }
      if (opened && (lost || !ever_connected)) {
        Notify({.connected = true,
                .first = !ever_connected,
                .down_for = lost ? clock_.Now() - lost_at : Duration{},
                .detail = ""});
        ever_connected = true;
        lost = false;
      }
      v1::TableUpdate update;
      while (stream->Read(&update)) {
        attempt = 0;  // any response resets the backoff
        const uint64_t nacks_before = state_.nacks_sent();
        absl::StatusOr<std::optional<v1::StreamTableRequest>> answer = state_.OnUpdate(update);
        if (!answer.ok()) {
          std::lock_guard<std::mutex> lock(mu_);
          stats_.last_error = std::string(answer.status().message());
          continue;
        }
        if (!answer->has_value()) continue;  // more chunks to come
        const bool nacked = state_.nacks_sent() != nacks_before;
        if (!nacked) SaveCache(*state_.current());
        {
          std::lock_guard<std::mutex> lock(mu_);
          ++stats_.updates;
          ++(nacked ? stats_.nacks : stats_.acks);
          if (nacked) stats_.last_error = std::string(state_.last_error().message());
          const std::shared_ptr<const RoutingTable> installed = router_.table();
          stats_.version = installed ? installed->version() : TableVersion{};
        }
        if (!stream->Write(**answer)) break;
      }
      grpc::Status status = stream->Finish();
      const std::string why = std::to_string(status.error_code()) + " " + status.error_message();
      {
        std::lock_guard<std::mutex> lock(mu_);
        context_ = nullptr;
        stats_.connected = false;
        ++stats_.disconnects;
        if (stopping_) return;
        stats_.last_error = "stream ended: " + why;
        if (opened) ++stats_.losses;
      }
      if (opened) {
        lost = true;
        lost_at = clock_.Now();
        Notify({.connected = false, .first = false, .down_for = Duration{}, .detail = why});
      }
      // A stream to a healthy replica does not end: whatever ended it, try the next one.
      channels_->Failed(pick.index);
      // Over several channels the backoff grows once per round over all of them, so that dead
      // replicas ahead of a live one in the list do not stretch the wait for it.
      const Duration delay =
          options_.backoff.Delay(static_cast<uint32_t>(attempt++ / channels_->size()), random_);
      if (WaitUnlessReachable(delay)) attempt = 0;
    }
  }

  void Notify(const TableStreamChange& change) {
    if (options_.on_stream_change) options_.on_stream_change(change);
  }

  // Sleeps for `delay` of real time, until Stop, or until a channel that was seen not READY is
  // READY: then that channel becomes the current one and the answer is true. A channel that stays
  // READY throughout (the stream ended for another reason) does not cut the wait, so a planner
  // that keeps ending streams is still retried with backoff.
  bool WaitUnlessReachable(Duration delay) {
    const auto deadline = std::chrono::steady_clock::now() + delay;
    std::vector<bool> seen_down(channels_->size(), false);
    for (;;) {
      for (size_t i = 0; i < seen_down.size(); ++i) {
        const grpc_connectivity_state state = channels_->channel(i)->GetState(true);
        if (state != GRPC_CHANNEL_READY) {
          seen_down[i] = true;
        } else if (seen_down[i]) {
          channels_->Use(i);
          std::lock_guard<std::mutex> lock(mu_);
          ++stats_.early_reconnects;
          return !stopping_;
        }
      }
      const auto next =
          std::min(deadline, std::chrono::steady_clock::now() + options_.ready_check_period);
      std::unique_lock<std::mutex> lock(mu_);
      if (wake_.wait_until(lock, next, [this] { return stopping_; })) return false;
      if (next == deadline) return false;
    }
  }

  void RunRefresh() {
    for (;;) {
      bool connected;
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (wake_.wait_for(lock, options_.refresh_period, [this] { return stopping_; })) return;
        connected = stats_.connected;
      }
      if (connected && router_.table() != nullptr) router_.Refresh(clock_.Now());
    }
  }

  std::shared_ptr<PlannerChannels> channels_;
  Router& router_;
  // options_.destinations and index_by_name_ change only in SetDestinations; both, and last_,
  // are guarded by map_mu_ once Start has run. Lock order: map_mu_, then the Router's.
  TableSubscriberOptions options_;
  Clock& clock_;
  Random& random_;
  mutable std::mutex map_mu_;
  std::unordered_map<std::string, uint32_t> index_by_name_;
  std::shared_ptr<const table::TableSnapshot> last_;  // the last table accepted
  table::TableClientState state_;  // stream thread only (and Start, before the thread exists)

  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stopping_ = false;                   // guarded by mu_
  grpc::ClientContext* context_ = nullptr;  // guarded by mu_; the open stream's, for TryCancel
  TableSubscriberStats stats_;              // guarded by mu_
  std::thread stream_thread_;
  std::thread refresh_thread_;
};

}  // namespace cacheroute::dataplane
