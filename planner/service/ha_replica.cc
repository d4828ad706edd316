// See ha_replica.h.
#include "planner/service/ha_replica.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <map>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "planner/coord/etcd_client.h"
#include "planner/service/control_schedule.h"
#include "planner/service/plan_log.h"
#include "planner/service/proto_convert.h"

namespace cacheroute::service {

using coord::EtcdClient;
using coord::TxnOp;
using coord::Watcher;
using coord::WatchEvent;

struct HaReplica::State {
  Options options;
  PlannerCore* core = nullptr;
  std::string table_key, version_key, state_key, published_by_key, reports_prefix;
  std::unique_ptr<EtcdClient> client;
  std::unique_ptr<coord::LeaderElection> election;
  std::thread loop;

  mutable std::mutex mu;
  std::condition_variable cv;
  bool started = false;
  bool stop = false;
  bool takeover_pending = false;  // became leader; TakeOver not done yet
  bool in_takeover = false;       // the loop thread is in core->TakeOver
  // Watches, owned by the loop thread (created, cancelled there; Stop joins it first).
  std::unique_ptr<Watcher> table_watch;
  std::unique_ptr<Watcher> reports_watch;
  bool table_watch_live = false;
  bool reports_watch_live = false;
  bool synced = false;     // both watches have been live together once
  int64_t table_next = 0;  // where the next watch starts (0: read the key first / from now)
  int64_t reports_next = 0;
  bool reports_watched = false;  // the reports watch was open once: nothing written is missed
  // Reports: the results of the reports applied by the watch, by revision (a bounded window),
  // and the last revision applied.
  std::map<int64_t, planner::ReportResult> applied;
  int64_t applied_revision = 0;
  std::condition_variable applied_cv;
  // The lease the reports are written with, replaced when half its TTL has passed.
  std::mutex lease_mu;
  int64_t report_lease = 0;
  std::chrono::steady_clock::time_point report_lease_renew;

  int64_t ReportTtlSeconds() const {
    const int64_t intervals =
        static_cast<int64_t>(std::ceil(absl::ToDoubleSeconds(options.control_interval) * 3));
    return std::max<int64_t>(10, intervals);
  }

  void OnChange(const coord::LeadershipChange& change) {
    using Kind = coord::LeadershipChange::Kind;
    switch (change.kind) {
      case Kind::kBecameLeader:
        base::LogEvent("info", "ha_became_leader",
                       {{"replica_id", options.etcd.replica_id},
                        {"term_revision", absl::StrCat(change.term.create_revision)}});
        {
          std::lock_guard<std::mutex> lock(mu);
          takeover_pending = true;
        }
        cv.notify_all();
        break;
      case Kind::kLostLeadership:
        base::LogEvent("warning", "ha_lost_leadership",
                       {{"replica_id", options.etcd.replica_id}, {"reason", change.reason}});
        break;
      case Kind::kLeaderChanged:
        base::LogEvent(
            "info", "ha_leader_changed",
            {{"leader_id", change.leader.id}, {"leader_address", change.leader.address}});
        break;
    }
  }

  absl::Status Publish(const table::TableSnapshot& table, const v1::PlannerState& meta) {
    {
      // Until the new leader has adopted etcd's table it could number from a stale one.
      std::lock_guard<std::mutex> lock(mu);
      if (takeover_pending && !in_takeover) {
        return absl::UnavailableError("taking over leadership: adopting the published table");
      }
    }
    std::string table_bytes;
    table.ToProto().SerializeToString(&table_bytes);
    std::string meta_bytes;
    meta.SerializeToString(&meta_bytes);
    absl::StatusOr<coord::TxnResult> result = election->FencedTxn(
        {TxnOp::Put(table_key, table_bytes), TxnOp::Put(version_key, table.version().ToString()),
         TxnOp::Put(state_key, meta_bytes), TxnOp::Put(published_by_key, options.etcd.replica_id)});
    if (!result.ok()) {
      base::LogEvent("warning", "ha_publish_refused",
                     {{"version", table.version().ToString()},
                      {"error", std::string(result.status().message())}});
      return result.status();
    }
    return absl::OkStatus();
  }

  void OnTableEvents(const std::vector<WatchEvent>& events) {
    for (const WatchEvent& event : events) {
      if (event.type != WatchEvent::Type::kPut) continue;
      InstallTableBytes(event.kv.value);
    }
  }

  std::shared_ptr<const table::TableSnapshot> ParseTable(const std::string& bytes) {
    v1::RoutingTable proto;
    if (!proto.ParseFromString(bytes)) {
      base::LogEvent("error", "ha_bad_table",
                     {{"key", table_key}, {"error", "not a RoutingTable"}});
      return nullptr;
    }
    absl::StatusOr<std::shared_ptr<const table::TableSnapshot>> snapshot =
        table::TableSnapshot::FromProto(proto);
    if (!snapshot.ok()) {
      base::LogEvent("error", "ha_bad_table",
                     {{"key", table_key}, {"error", std::string(snapshot.status().message())}});
      return nullptr;
    }
    return *std::move(snapshot);
  }

  void InstallTableBytes(const std::string& bytes) {
    if (std::shared_ptr<const table::TableSnapshot> snapshot = ParseTable(bytes)) {
      core->InstallPublished(std::move(snapshot));
    }
  }

  void OnReportEvents(const std::vector<WatchEvent>& events) {
    for (const WatchEvent& event : events) {
      if (event.type != WatchEvent::Type::kPut) continue;  // expired or deleted: already applied
      v1::ReportRatesRequest request;
      std::optional<planner::ReportResult> result;
      if (request.ParseFromString(event.kv.value)) {
        absl::StatusOr<planner::ReportResult> applied_result =
            core->ReportRates(ToRateReport(request));
        if (applied_result.ok()) result = *applied_result;
      }
      std::lock_guard<std::mutex> lock(mu);
      if (result.has_value()) applied[event.kv.mod_revision] = *result;
      while (applied.size() > 4096) applied.erase(applied.begin());
      applied_revision = std::max(applied_revision, event.kv.mod_revision);
    }
    applied_cv.notify_all();
  }

  // (Re)opens a broken or missing watch, from where the last one stopped; loop thread only.
  void EnsureWatch(bool table) {
    std::unique_ptr<Watcher>& watch = table ? table_watch : reports_watch;
    int64_t& next = table ? table_next : reports_next;
    bool& live = table ? table_watch_live : reports_watch_live;
    {
      std::lock_guard<std::mutex> lock(mu);
      if (watch != nullptr && !watch->broken()) return;
    }
    if (watch != nullptr) {
      next = watch->next_revision();
      watch->Cancel();
      std::lock_guard<std::mutex> lock(mu);
      watch.reset();
      live = false;
    }
    if (table && next == 0) {  // first time, or compacted: read the key, watch after the read
      absl::StatusOr<coord::GetResult> got = client->Get(table_key);
      if (!got.ok()) return;
      if (got->kv.has_value()) InstallTableBytes(got->kv->value);
      next = got->revision + 1;
    }
    const std::string what = table ? "table" : "reports";
    absl::StatusOr<std::unique_ptr<Watcher>> opened = client->Watch(
        table ? table_key : reports_prefix, next,
        {.on_events =
             [this, table](const std::vector<WatchEvent>& events, int64_t) {
               if (table) {
                 OnTableEvents(events);
               } else {
                 OnReportEvents(events);
               }
             },
         .on_broken =
             [this, what, &live](const absl::Status& status, int64_t) {
               base::LogEvent("warning", "ha_watch_broken",
                              {{"watch", what}, {"error", std::string(status.message())}});
               {
                 std::lock_guard<std::mutex> lock(mu);
                 live = false;
               }
               cv.notify_all();
             }},
        table ? coord::WatchScope::kKey : coord::WatchScope::kPrefix);
    if (!opened.ok()) {
      if (absl::IsOutOfRange(opened.status())) {
        // Compacted: the table is read again; reports in between cannot be seen any more.
        base::LogEvent("error", "ha_watch_compacted",
                       {{"watch", what}, {"error", std::string(opened.status().message())}});
        next = 0;
      }
      return;
    }
    std::lock_guard<std::mutex> lock(mu);
    watch = *std::move(opened);
    live = !watch->broken();
    if (!table) reports_watched = true;
    if (table_watch_live && reports_watch_live) synced = true;
  }

  void DoTakeOver() {
    absl::StatusOr<coord::TxnResult> read = client->Txn(
        {.compares = {}, .success = {TxnOp::Get(table_key), TxnOp::Get(state_key)}, .failure = {}});
    if (!read.ok() || read->responses.size() != 2) return;  // retried by the loop
    std::shared_ptr<const table::TableSnapshot> table;
    if (read->responses[0].kv.has_value()) table = ParseTable(read->responses[0].kv->value);
    std::optional<v1::PlannerState> meta;
    if (read->responses[1].kv.has_value()) {
      meta.emplace();
      if (!meta->ParseFromString(read->responses[1].kv->value)) meta.reset();
    }
    {
      std::lock_guard<std::mutex> lock(mu);
      in_takeover = true;
    }
    absl::StatusOr<PlanOutcome> outcome = core->TakeOver(std::move(table), meta);
    {
      std::lock_guard<std::mutex> lock(mu);
      in_takeover = false;
      if (outcome.ok()) takeover_pending = false;
    }
    if (!outcome.ok()) {
      base::LogEvent("warning", "ha_takeover_failed",
                     {{"error", std::string(outcome.status().message())}});
      return;
    }
    base::LogEvent("info", "table_published",
                   {{"version", outcome->version.ToString()}, {"by", "takeover"}});
  }

  void Tick(ControlSchedule::Step step) {
    const bool plan = step == ControlSchedule::Step::kPlan;
    if (election->IsLeader()) {
      LogPlanOutcome(plan ? core->Replan() : core->ObserveGate());
    } else {
      core->FollowerTick(plan);
    }
  }

  void Run() {
    ControlSchedule schedule(options.control_interval, options.gate_interval);
    const auto start = std::chrono::steady_clock::now();
    const auto since_start = [start] {
      return absl::FromChrono(std::chrono::steady_clock::now() - start);
    };
    while (true) {
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait_for(lock, std::chrono::milliseconds(100));
        if (stop) break;
      }
      EnsureWatch(/*table=*/true);
      EnsureWatch(/*table=*/false);
      bool takeover;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (!election->IsLeader()) takeover_pending = false;
        takeover = takeover_pending;
      }
      if (takeover) {
        DoTakeOver();
        schedule.Restart(since_start());
        continue;
      }
      if (options.run_ticker && since_start() >= schedule.next()) {
        Tick(schedule.Take());
        if (since_start() > schedule.next()) schedule.Restart(since_start());
      }
    }
  }

  absl::StatusOr<int64_t> ReportLease() {
    std::lock_guard<std::mutex> lock(lease_mu);
    const auto now = std::chrono::steady_clock::now();
    if (report_lease != 0 && now < report_lease_renew) return report_lease;
    CACHEROUTE_ASSIGN_OR_RETURN(coord::LeaseGrant grant, client->GrantLease(ReportTtlSeconds()));
    report_lease = grant.id;
    report_lease_renew = now + std::chrono::seconds(std::max<int64_t>(1, grant.ttl_seconds / 2));
    return report_lease;
  }
};

absl::StatusOr<std::unique_ptr<HaReplica>> HaReplica::Create(Options options, PlannerCore* core) {
  if (!options.etcd.enabled || options.etcd.replica_id.empty() || options.etcd.advertise.empty()) {
    return absl::InvalidArgumentError("etcd: enabled, replica_id and advertise are required");
  }
  std::unique_ptr<HaReplica> replica(new HaReplica());
  auto state = std::make_unique<State>();
  state->options = options;
  state->core = core;
  const std::string& prefix = options.etcd.key_prefix;
  state->table_key = prefix + "table";
  state->version_key = prefix + "version";
  state->state_key = prefix + "state";
  state->published_by_key = prefix + "published_by";
  state->reports_prefix = prefix + "reports/";
  absl::StatusOr<std::unique_ptr<EtcdClient>> client =
      EtcdClient::Create({.endpoints = options.etcd.endpoints});
  if (!client.ok()) return client.status();
  state->client = *std::move(client);
  State* raw = state.get();
  state->election = std::make_unique<coord::LeaderElection>(
      state->client.get(),
      coord::LeaderElection::Options{
          .key_prefix = prefix,
          .id = options.etcd.replica_id,
          .address = options.etcd.advertise,
          .lease_ttl_seconds = options.etcd.lease_ttl_seconds,
          .on_change = [raw](const coord::LeadershipChange& change) { raw->OnChange(change); }});
  core->SetPublishHook([raw](const table::TableSnapshot& table, const v1::PlannerState& meta) {
    return raw->Publish(table, meta);
  });
  replica->state_ = std::move(state);
  return replica;
}

absl::Status HaReplica::Start() {
  State& s = *state_;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (s.started) return absl::FailedPreconditionError("HaReplica: started twice");
    s.started = true;
  }
  if (absl::Status status = s.election->Start(); !status.ok()) return status;
  s.loop = std::thread([&s] { s.Run(); });
  return absl::OkStatus();
}

void HaReplica::StopLoop() {
  State& s = *state_;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.stop = true;
  }
  s.cv.notify_all();
  s.applied_cv.notify_all();
  if (s.loop.joinable()) s.loop.join();
  // The loop thread is gone: the watches are this thread's now.
  if (s.table_watch) s.table_watch->Cancel();
  if (s.reports_watch) s.reports_watch->Cancel();
}

void HaReplica::Stop() {
  StopLoop();
  state_->election->Stop();
}

absl::Status HaReplica::Resign() {
  StopLoop();
  return state_->election->Resign();
}

HaReplica::~HaReplica() {
  if (state_ == nullptr) return;
  Stop();
  state_->core->SetPublishHook(nullptr);
}

absl::StatusOr<planner::ReportResult> HaReplica::ReportRates(
    const v1::ReportRatesRequest& request) {
  State& s = *state_;
  {
    std::lock_guard<std::mutex> lock(s.mu);
    if (!s.reports_watched) {
      return absl::UnavailableError("replica starting: not yet watching the replicated reports");
    }
  }
  absl::StatusOr<int64_t> lease = s.ReportLease();
  if (!lease.ok()) {
    return absl::UnavailableError(
        absl::StrCat("etcd unreachable, report not accepted: ", lease.status().message()));
  }
  std::string bytes;
  request.SerializeToString(&bytes);
  const std::string key =
      absl::StrFormat("%s%s/%020d", s.reports_prefix, request.gateway_id(), request.sequence());
  absl::StatusOr<int64_t> revision = s.client->Put(key, bytes, *lease);
  if (!revision.ok() && absl::IsNotFound(revision.status())) {
    // The lease is gone (etcd restarted from a snapshot, or the lease expired): grant another.
    {
      std::lock_guard<std::mutex> lock(s.lease_mu);
      s.report_lease = 0;
    }
    lease = s.ReportLease();
    if (lease.ok()) revision = s.client->Put(key, bytes, *lease);
  }
  if (!revision.ok()) {
    const absl::Status& error = revision.status();
    if (absl::IsUnavailable(error) || absl::IsDeadlineExceeded(error)) {
      return absl::UnavailableError(
          absl::StrCat("etcd unreachable, report not accepted: ", error.message()));
    }
    // etcd refused it (e.g. larger than its --max-request-bytes): retrying would not help.
    return absl::Status(error.code(), absl::StrCat("report not accepted: ", error.message()));
  }
  // Accepted: it is in etcd. Wait a little for this replica's watch to apply it.
  std::unique_lock<std::mutex> lock(s.mu);
  s.applied_cv.wait_for(lock, std::chrono::seconds(2),
                        [&] { return s.stop || s.applied_revision >= *revision; });
  const auto it = s.applied.find(*revision);
  if (it != s.applied.end()) return it->second;
  return planner::ReportResult{.duplicate = false,
                               .accepted_keys = static_cast<uint64_t>(request.counts_size())};
}

bool HaReplica::IsLeader() const { return state_->election->IsLeader(); }

coord::LeaderInfo HaReplica::Leader() const { return state_->election->CurrentLeader(); }

std::string HaReplica::NotReadyReason() const {
  const State& s = *state_;
  if (s.core->Latest() == nullptr) return "no table yet";
  if (s.election->IsLeader()) return "";
  // A follower is ready once both watches have been live together (it has caught up with etcd).
  // It stays ready through a later etcd outage: serving the last table then is the point
  // (docs/ha.md), and an outage would otherwise take every replica out of the Service at once.
  std::lock_guard<std::mutex> lock(s.mu);
  if (!s.synced) {
    return absl::StrCat("follower not yet synced: no live watch on ",
                        s.table_watch_live ? s.reports_prefix : s.table_key,
                        " so far (etcd unreachable?)");
  }
  return "";
}

v1::HaStatus HaReplica::Status() const {
  const State& s = *state_;
  v1::HaStatus out;
  const bool leader = s.election->IsLeader();
  out.set_role(leader ? "leader" : "follower");
  out.set_replica_id(s.options.etcd.replica_id);
  const coord::LeaderInfo info = s.election->CurrentLeader();
  out.set_leader_id(info.id);
  out.set_leader_address(info.address);
  if (std::optional<coord::Term> term = s.election->term()) {
    out.set_term_lease_id(term->lease_id);
    out.set_term_revision(term->create_revision);
  }
  {
    std::lock_guard<std::mutex> lock(s.mu);
    out.set_table_watch_live(s.table_watch_live);
  }
  out.set_ready_reason(NotReadyReason());
  return out;
}

}  // namespace cacheroute::service
