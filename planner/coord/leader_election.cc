#include "planner/coord/leader_election.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"

namespace cacheroute::coord {
namespace {

LeaderInfo ParseLeaderValue(const std::string& value) {
  LeaderInfo info;
  const size_t newline = value.find('\n');
  if (newline == std::string::npos) {
    info.id = value;
  } else {
    info.id = value.substr(0, newline);
    info.address = value.substr(newline + 1);
  }
  return info;
}

bool Transient(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnavailable ||
         status.code() == absl::StatusCode::kDeadlineExceeded;
}

std::chrono::steady_clock::duration ToSteady(absl::Duration d) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      absl::ToChronoNanoseconds(d));
}

}  // namespace

LeaderElection::LeaderElection(EtcdClient* client, Options options)
    : client_(client),
      options_(std::move(options)),
      leader_key_(options_.key_prefix + "leader"),
      value_(options_.id + "\n" + options_.address),
      clock_(options_.clock != nullptr ? options_.clock : &steady_clock_) {}

absl::Time LeaderElection::SteadyClock::Now() {
  return absl::UnixEpoch() + absl::FromChrono(std::chrono::steady_clock::now().time_since_epoch());
}

LeaderElection::~LeaderElection() { Stop(); }

absl::Status LeaderElection::Start() {
  if (client_ == nullptr) return absl::InvalidArgumentError("election: no etcd client");
  if (options_.key_prefix.empty()) return absl::InvalidArgumentError("election: empty key_prefix");
  if (options_.id.empty() || options_.id.find('\n') != std::string::npos ||
      options_.address.find('\n') != std::string::npos) {
    return absl::InvalidArgumentError("election: id must be non-empty; id and address one line");
  }
  if (options_.lease_ttl_seconds < 1) {
    return absl::InvalidArgumentError("election: lease_ttl_seconds must be at least 1");
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (started_) return absl::FailedPreconditionError("election: already started");
    started_ = true;
  }
  thread_ = std::thread([this] { Run(); });
  return absl::OkStatus();
}

void LeaderElection::JoinThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  watcher_.reset();  // joins the watch reader; its callbacks take mu_, so not under it
}

void LeaderElection::Stop() {
  JoinThread();
  Changes changes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (leading_) StepDownLocked("stopped", changes);
  }
  Fire(changes);
}

absl::Status LeaderElection::Resign() {
  JoinThread();
  Term term;
  bool was_leading;
  int64_t lease;
  int64_t abandoned;
  {
    std::lock_guard<std::mutex> lock(mu_);
    was_leading = leading_;
    term = term_;
    lease = lease_id_;
    abandoned = abandoned_lease_;
    lease_id_ = 0;
    abandoned_lease_ = 0;
  }
  absl::Status status;
  if (was_leading) {
    TxnRequest txn;
    txn.compares = FenceCompares(leader_key_, term);
    txn.success = {TxnOp::Delete(leader_key_)};
    absl::StatusOr<TxnResult> deleted = client_->Txn(txn);
    if (!deleted.ok()) status = deleted.status();
  }
  if (lease != 0) {
    absl::Status revoked = client_->RevokeLease(lease);
    if (!revoked.ok() && revoked.code() != absl::StatusCode::kNotFound && status.ok()) {
      status = revoked;
    }
  }
  if (abandoned != 0) client_->RevokeLease(abandoned).IgnoreError();
  Changes changes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (leading_) StepDownLocked("resigned", changes);
  }
  Fire(changes);
  return status;
}

bool LeaderElection::LeadingLocked() const {
  return leading_ && clock_->Now() < lease_deadline_;
}

bool LeaderElection::IsLeader() const {
  std::lock_guard<std::mutex> lock(mu_);
  return LeadingLocked();
}

std::optional<Term> LeaderElection::term() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!LeadingLocked()) return std::nullopt;
  return term_;
}

LeaderInfo LeaderElection::CurrentLeader() const {
  std::lock_guard<std::mutex> lock(mu_);
  if (leading_ && !LeadingLocked()) return {};  // stepping down: nobody is known to lead
  return leader_;
}

std::vector<Compare> LeaderElection::FenceCompares(const std::string& leader_key,
                                                   const Term& term) {
  return {Compare::CreateRevision(leader_key, Compare::Result::kEqual, term.create_revision),
          Compare::Lease(leader_key, Compare::Result::kEqual, term.lease_id)};
}

absl::StatusOr<std::vector<Compare>> LeaderElection::FenceCompares() const {
  std::optional<Term> current = term();
  if (!current.has_value()) {
    return absl::FailedPreconditionError(
        absl::StrCat("not the leader: ", options_.id, " holds no valid term"));
  }
  return FenceCompares(leader_key_, *current);
}

absl::StatusOr<TxnResult> LeaderElection::FencedTxn(std::vector<TxnOp> ops) {
  CACHEROUTE_ASSIGN_OR_RETURN(std::vector<Compare> compares, FenceCompares());
  TxnRequest txn;
  txn.compares = std::move(compares);
  txn.success = std::move(ops);
  CACHEROUTE_ASSIGN_OR_RETURN(TxnResult result, client_->Txn(txn));
  if (!result.succeeded) {
    {
      // Our view is stale: let the election thread read the key again.
      std::lock_guard<std::mutex> lock(mu_);
      need_campaign_ = true;
    }
    cv_.notify_all();
    return absl::FailedPreconditionError(absl::StrCat(
        "not the leader: ", leader_key_, " no longer has this term's create_revision and lease"));
  }
  return result;
}

void LeaderElection::StepDownLocked(const std::string& reason, Changes& changes) {
  if (!leading_) return;
  LeadershipChange change;
  change.kind = LeadershipChange::Kind::kLostLeadership;
  change.term = term_;
  change.reason = reason;
  leading_ = false;
  term_ = {};
  if (leader_.id == options_.id) leader_ = {};
  change.leader = leader_;
  changes.push_back(std::move(change));
}

void LeaderElection::SetLeaderLocked(LeaderInfo leader, Changes& changes) {
  if (leader == leader_) return;
  leader_ = std::move(leader);
  if (leading_) return;  // a leader's own changes are kBecameLeader/kLostLeadership
  LeadershipChange change;
  change.kind = LeadershipChange::Kind::kLeaderChanged;
  change.leader = leader_;
  change.reason = leader_.empty() ? "no leader" : "new leader";
  changes.push_back(std::move(change));
}

// The local deadline comes first: past it this replica neither leads nor trusts its lease.
void LeaderElection::CheckDeadlineLocked(Changes& changes) {
  if (lease_id_ == 0 || clock_->Now() < lease_deadline_) return;
  StepDownLocked(absl::StrCat("lease deadline passed: no keepalive within the ", lease_ttl_,
                              " s TTL"),
                 changes);
  abandoned_lease_ = lease_id_;
  lease_id_ = 0;
  need_campaign_ = true;
}

void LeaderElection::ApplyCampaignLocked(const TxnResult& result, int64_t lease,
                                         Changes& changes) {
  // The success branch is [put, get], the failure branch [get]: the last response is the key.
  std::optional<KeyValue> kv;
  if (!result.responses.empty()) kv = result.responses.back().kv;
  if (!kv.has_value()) {
    need_campaign_ = true;
    return;
  }
  if (kv->lease == lease) {
    // Ours: won now, or already (a retried campaign, or a re-read after a broken watch).
    const Term term{lease, kv->create_revision};
    if (leading_ && term_ == term) return;
    if (leading_) StepDownLocked("the leader key was recreated", changes);
    leading_ = true;
    term_ = term;
    leader_ = LeaderInfo{options_.id, options_.address};
    LeadershipChange change;
    change.kind = LeadershipChange::Kind::kBecameLeader;
    change.term = term;
    change.leader = leader_;
    change.reason = result.succeeded ? "won the campaign" : "holds the leader key";
    changes.push_back(std::move(change));
    return;
  }
  if (leading_) StepDownLocked("another replica holds the leader key", changes);
  SetLeaderLocked(ParseLeaderValue(kv->value), changes);
}

void LeaderElection::ProcessWatchLocked(Changes& changes) {
  while (!watch_queue_.empty()) {
    WatchItem item = std::move(watch_queue_.front());
    watch_queue_.pop_front();
    if (item.generation != watch_generation_) continue;  // from a watch already replaced
    if (item.broken) {
      need_campaign_ = true;  // read the key again, then watch from there
      continue;
    }
    for (const WatchEvent& event : item.events) {
      if (event.kv.key != leader_key_) continue;
      if (event.type == WatchEvent::Type::kDelete) {
        StepDownLocked("the leader key was deleted", changes);
        SetLeaderLocked({}, changes);
        need_campaign_ = true;
        continue;
      }
      if (leading_ && event.kv.lease == term_.lease_id &&
          event.kv.create_revision == term_.create_revision) {
        continue;  // our own key
      }
      if (event.kv.lease == lease_id_ && lease_id_ != 0) {
        need_campaign_ = true;  // our lease but not our term: re-read to settle it
        continue;
      }
      StepDownLocked("another replica holds the leader key", changes);
      SetLeaderLocked(ParseLeaderValue(event.kv.value), changes);
    }
  }
}

void LeaderElection::SleepWall(absl::Duration d) {
  std::unique_lock<std::mutex> lock(mu_);
  auto wake = std::chrono::steady_clock::now() + ToSteady(d);
  if (lease_id_ != 0) wake = std::min(wake, next_keepalive_);
  cv_.wait_until(lock, wake, [&] { return stop_; });
}

void LeaderElection::Fire(const Changes& changes) {
  if (!options_.on_change) return;
  for (const LeadershipChange& change : changes) options_.on_change(change);
}

void LeaderElection::Run() {
  while (true) {
    Changes changes;
    int64_t lease;
    int64_t abandoned;
    bool campaign;
    bool keepalive_due;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stop_) return;
      CheckDeadlineLocked(changes);
      ProcessWatchLocked(changes);
      lease = lease_id_;
      abandoned = abandoned_lease_;
      campaign = need_campaign_;
      keepalive_due = lease != 0 && std::chrono::steady_clock::now() >= next_keepalive_;
    }
    Fire(changes);
    changes.clear();

    // The lease comes before anything else: a campaign or watch that keeps failing must not
    // starve the keepalives.
    if (keepalive_due) {
      KeepAlive(lease);
      continue;
    }

    // A lease given up at its local deadline: revoke it, so its key (if any) goes now rather
    // than at etcd's expiry. When etcd cannot be reached, neither can a new lease be granted.
    if (abandoned != 0) {
      const absl::Status revoked = client_->RevokeLease(abandoned);
      if (Transient(revoked)) {
        SleepWall(options_.retry_interval);
        continue;
      }
      std::lock_guard<std::mutex> lock(mu_);
      if (abandoned_lease_ == abandoned) abandoned_lease_ = 0;
    }

    if (lease == 0) {
      const absl::Time sent = clock_->Now();
      absl::StatusOr<LeaseGrant> grant = client_->GrantLease(options_.lease_ttl_seconds);
      if (!grant.ok()) {
        SleepWall(options_.retry_interval);
        continue;
      }
      std::lock_guard<std::mutex> lock(mu_);
      lease_id_ = grant->id;
      lease_ttl_ = grant->ttl_seconds;
      lease_deadline_ = sent + absl::Seconds(grant->ttl_seconds);
      next_keepalive_ =
          std::chrono::steady_clock::now() + ToSteady(absl::Seconds(lease_ttl_) / 3);
      need_campaign_ = true;
      continue;
    }

    if (campaign) {
      watcher_.reset();
      TxnRequest txn;
      txn.compares = {Compare::CreateRevision(leader_key_, Compare::Result::kEqual, 0)};
      txn.success = {TxnOp::Put(leader_key_, value_, lease), TxnOp::Get(leader_key_)};
      txn.failure = {TxnOp::Get(leader_key_)};
      absl::StatusOr<TxnResult> result = client_->Txn(txn);
      if (!result.ok()) {
        // NotFound: our lease is gone (a put on it is refused); start over with a new one.
        std::lock_guard<std::mutex> lock(mu_);
        if (result.status().code() == absl::StatusCode::kNotFound && lease_id_ == lease) {
          StepDownLocked("lease not found in etcd", changes);
          lease_id_ = 0;
        }
      }
      if (!result.ok()) {
        Fire(changes);
        SleepWall(options_.retry_interval);
        continue;
      }
      uint64_t generation;
      {
        std::lock_guard<std::mutex> lock(mu_);
        CheckDeadlineLocked(changes);
        need_campaign_ = false;
        if (lease_id_ == lease) {
          ApplyCampaignLocked(*result, lease, changes);  // may ask for another read
        } else {
          need_campaign_ = true;
        }
        generation = ++watch_generation_;
        watch_queue_.clear();
      }
      Fire(changes);
      changes.clear();
      WatchCallbacks callbacks;
      callbacks.on_events = [this, generation](const std::vector<WatchEvent>& events, int64_t) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          watch_queue_.push_back(WatchItem{generation, events, false});
        }
        cv_.notify_all();
      };
      callbacks.on_broken = [this, generation](const absl::Status&, int64_t) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          watch_queue_.push_back(WatchItem{generation, {}, true});
        }
        cv_.notify_all();
      };
      // From the revision after the read: nothing between the two is missed.
      absl::StatusOr<std::unique_ptr<Watcher>> watcher =
          client_->Watch(leader_key_, result->revision + 1, std::move(callbacks));
      if (!watcher.ok()) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          need_campaign_ = true;
        }
        SleepWall(options_.retry_interval);
        continue;
      }
      watcher_ = *std::move(watcher);
      continue;
    }

    // Wait for the next keepalive, the local deadline, a watch event or Stop().
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto wake = next_keepalive_;
      const absl::Duration to_deadline = lease_deadline_ - clock_->Now();
      wake = std::min(wake, std::chrono::steady_clock::now() +
                                ToSteady(std::max(to_deadline, absl::ZeroDuration())));
      cv_.wait_until(lock, wake,
                     [&] { return stop_ || need_campaign_ || !watch_queue_.empty(); });
    }
    // The top of the loop checks the deadline first, whatever woke us (also a SIGCONT).
  }
}

void LeaderElection::KeepAlive(int64_t lease) {
  Changes changes;
  const absl::Time sent = clock_->Now();
  absl::StatusOr<int64_t> ttl = client_->KeepAliveOnce(lease);
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (lease_id_ != lease) return;
    const auto now = std::chrono::steady_clock::now();
    if (ttl.ok()) {
      lease_deadline_ = std::max(lease_deadline_, sent + absl::Seconds(*ttl));
      next_keepalive_ = now + ToSteady(absl::Seconds(lease_ttl_) / 3);
    } else if (ttl.status().code() == absl::StatusCode::kNotFound) {
      StepDownLocked("lease expired in etcd", changes);
      lease_id_ = 0;
      need_campaign_ = true;
    } else {
      next_keepalive_ =
          now + ToSteady(std::min(options_.retry_interval, absl::Seconds(lease_ttl_) / 3));
    }
    CheckDeadlineLocked(changes);
  }
  Fire(changes);
}

}  // namespace cacheroute::coord
