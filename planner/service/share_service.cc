// See share_service.h.
#include "planner/service/share_service.h"

#include <deque>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace cacheroute::service {
namespace {

// gRPC's default receive limit is 4 MiB; an update stays below it unless one batch alone is larger.
constexpr size_t kMaxUpdateBytes = size_t{3} << 20;

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

}  // namespace

// One gateway's Share stream: one read and at most one write outstanding, Finish exactly once
// when no write is.
class ShareService::Reactor final
    : public grpc::ServerBidiReactor<v1::ShareRequest, v1::ShareUpdate> {
 public:
  Reactor(ShareService* service, grpc::CallbackServerContext* context) : service_(service) {
    grpc::Status refused = service_->authorize_ ? service_->authorize_(context) : grpc::Status::OK;
    if (refused.ok() && !service_->Register(this)) {
      refused = grpc::Status(grpc::StatusCode::UNAVAILABLE, "planner shutting down");
    }
    if (!refused.ok()) {
      absl::MutexLock lock(&mu_);
      RequestFinishLocked(refused);
      return;
    }
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the gateway closed its side, or the call ended
      absl::MutexLock lock(&mu_);
      RequestFinishLocked(grpc::Status::OK);
      return;
    }
    if (service_->serving_) {
      if (grpc::Status serving = service_->serving_(); !serving.ok()) {
        absl::MutexLock lock(&mu_);
        RequestFinishLocked(serving);
        return;
      }
    }
    // gateway_id_ is written only here, and reads are serialised.
    const std::string& sender = request_.batch().gateway_id();
    if (!gateway_id_.empty() && sender != gateway_id_) {
      absl::MutexLock lock(&mu_);
      RequestFinishLocked(
          grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                       absl::StrCat("share batch gateway_id: the stream's gateway is \"",
                                    gateway_id_, "\", got \"", sender, "\"")));
      return;
    }
    const bool first = gateway_id_.empty();
    std::string id = sender;
    if (absl::Status s = service_->exchange_.Publish(std::move(*request_.mutable_batch()));
        !s.ok()) {
      absl::MutexLock lock(&mu_);
      RequestFinishLocked(ToGrpc(s));
      return;
    }
    if (first) {
      // Subscribing after publishing loses nothing: what others published meanwhile is in the
      // exchange's snapshot, which a new subscription starts with.
      gateway_id_ = std::move(id);
      std::shared_ptr<planner::ShareExchange::Subscription> subscription =
          service_->exchange_.Subscribe(gateway_id_);
      absl::MutexLock lock(&mu_);
      subscription_ = std::move(subscription);
    }
    service_->Deliver();
    {
      absl::MutexLock lock(&mu_);
      if (finishing_) return;  // ended meanwhile (the planner stopping): no more reads
    }
    StartRead(&request_);
  }

  void OnWriteDone(bool ok) override {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    if (!ok) {
      RequestFinishLocked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write failed"));
      return;
    }
    if (finishing_) {
      FinishIfIdleLocked();
      return;
    }
    MaybeWriteLocked();
  }

  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    RequestFinishLocked(grpc::Status::CANCELLED);
  }

  void OnDone() override {
    service_->Unregister(this);
    {
      absl::MutexLock lock(&mu_);
      if (subscription_ != nullptr) subscription_->Close();
      subscription_.reset();  // leaves the exchange's fan-out
    }
    delete this;
  }

  void MaybeWrite() {
    absl::MutexLock lock(&mu_);
    MaybeWriteLocked();
  }

  void End(grpc::Status status) {
    absl::MutexLock lock(&mu_);
    RequestFinishLocked(std::move(status));
  }

 private:
  void MaybeWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finishing_ || subscription_ == nullptr) return;
    if (pending_.empty()) {
      for (v1::ShareBatch& batch : subscription_->Take()) pending_.push_back(std::move(batch));
    }
    if (pending_.empty()) return;
    update_.Clear();
    size_t bytes = 0;
    while (!pending_.empty() && (update_.batches_size() == 0 ||
                                 bytes + pending_.front().ByteSizeLong() <= kMaxUpdateBytes)) {
      bytes += pending_.front().ByteSizeLong();
      *update_.add_batches() = std::move(pending_.front());
      pending_.pop_front();
    }
    writing_ = true;
    StartWrite(&update_);
  }

  void RequestFinishLocked(grpc::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!finishing_) {
      finishing_ = true;
      finish_status_ = std::move(status);
    }
    FinishIfIdleLocked();
  }

  void FinishIfIdleLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (finished_ || writing_) return;
    finished_ = true;
    Finish(finish_status_);
  }

  ShareService* const service_;
  v1::ShareRequest request_;
  std::string gateway_id_;
  absl::Mutex mu_;
  std::shared_ptr<planner::ShareExchange::Subscription> subscription_ ABSL_GUARDED_BY(mu_);
  std::deque<v1::ShareBatch> pending_ ABSL_GUARDED_BY(mu_);
  v1::ShareUpdate update_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status finish_status_ ABSL_GUARDED_BY(mu_);
};

ShareService::ShareService(const planner::ShareExchangeOptions& options, base::Clock& clock,
                           Authorize authorize, Serving serving)
    : exchange_(options, clock), authorize_(std::move(authorize)), serving_(std::move(serving)) {}

ShareService::~ShareService() { Shutdown(); }

grpc::ServerBidiReactor<v1::ShareRequest, v1::ShareUpdate>* ShareService::Share(
    grpc::CallbackServerContext* context) {
  return new Reactor(this, context);
}

void ShareService::Shutdown() {
  absl::MutexLock lock(&streams_mu_);
  shut_down_ = true;
  for (Reactor* reactor : streams_) {
    reactor->End(grpc::Status(grpc::StatusCode::UNAVAILABLE, "planner shutting down"));
  }
}

bool ShareService::Register(Reactor* reactor) {
  absl::MutexLock lock(&streams_mu_);
  if (shut_down_) return false;
  streams_.insert(reactor);
  return true;
}

void ShareService::Unregister(Reactor* reactor) {
  absl::MutexLock lock(&streams_mu_);
  streams_.erase(reactor);
}

void ShareService::Deliver() {
  absl::MutexLock lock(&streams_mu_);
  for (Reactor* reactor : streams_) reactor->MaybeWrite();
}

}  // namespace cacheroute::service
