// See share_link.h.
#include "tools/frontend/planner_link/share_link.h"

#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "cacheroute/dataplane/grpc/share_conversion.h"
#include "cacheroute/dataplane/grpc/table_conversion.h"

namespace cacheroute::frontend {
namespace {

// How long a stopping link waits for the planner to end the stream after its last batch.
constexpr auto kFarewellWait = std::chrono::seconds(1);

}  // namespace

ShareLink::ShareLink(std::shared_ptr<dataplane::PlannerChannels> channels,
                     dataplane::Router& router, dataplane::PlacementOutbox& outbox,
                     const dataplane::Clock& clock, std::vector<std::string> destinations,
                     ShareLinkOptions options)
    : channels_(std::move(channels)),
      router_(router),
      outbox_(outbox),
      clock_(clock),
      options_(std::move(options)),
      random_(static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count())),
      names_(std::move(destinations)),
      index_(dataplane::DestinationIndexOf(names_)) {}

void ShareLink::Start() {
  if (thread_.joinable()) return;
  thread_ = std::thread([this] { Run(); });
}

void ShareLink::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
  ForgetRemoteWork();
}

void ShareLink::SetDestinations(const std::vector<std::string>& names) {
  std::lock_guard<std::mutex> lock(mu_);
  names_ = names;
  index_ = dataplane::DestinationIndexOf(names_);
  ApplyRemoteWorkLocked();  // re-maps by name; a departed name's work is gone
}

ShareLinkStats ShareLink::Stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  ShareLinkStats stats = stats_;
  stats.remote_gateways = remote_.size();
  return stats;
}

void ShareLink::Run() {
  uint32_t attempt = 0;
  for (;;) {
    grpc::ClientContext context;
    if (!options_.bearer_token.empty()) {
      context.AddMetadata("authorization", "Bearer " + options_.bearer_token);
    }
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      context_ = &context;
      reader_done_ = false;
    }
    const dataplane::PlannerChannels::Pick pick = channels_->Current();
    std::unique_ptr<Stream> stream = v1::ShareService::NewStub(pick.channel)->Share(&context);
    std::thread reader([this, &stream] { Read(*stream); });
    const bool opened = Serve(*stream, context);
    reader.join();
    const grpc::Status status = stream->Finish();
    bool stopping = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      context_ = nullptr;
      stats_.connected = false;
      stopping = stopping_;
      if (opened && !stopping) ++stats_.losses;
    }
    // On its own again: nothing of the others' work may stand without news of it.
    ForgetRemoteWork();
    if (stopping) return;
    if (opened) {
      attempt = 0;
      base::LogEvent("warning", "share_stream_lost",
                     {{"error", absl::StrCat(status.error_code(), " ", status.error_message())}});
    }
    channels_->Failed(pick.index);
    // A follower of replicated planners: the next replica is tried at the first backoff step, so
    // that the stream finds the leader quickly.
    if (status.error_code() == grpc::StatusCode::FAILED_PRECONDITION) attempt = 0;
    const dataplane::Duration delay =
        options_.backoff.Delay(static_cast<uint32_t>(attempt++ / channels_->size()), random_);
    std::unique_lock<std::mutex> lock(mu_);
    if (wake_.wait_for(lock, delay, [this] { return stopping_; })) return;
  }
}

bool ShareLink::Serve(Stream& stream, grpc::ClientContext& context) {
  bool opened = false;
  const auto interval = absl::ToChronoNanoseconds(options_.interval);
  for (;;) {
    bool stopping = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stopping = stopping_;
    }
    v1::ShareRequest request = NextRequest(/*farewell=*/stopping);
    const size_t bytes = request.ByteSizeLong();
    if (!stream.Write(request)) break;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (!opened) {
        opened = true;
        ++stats_.connects;
        stats_.connected = true;
        base::LogEvent("info", "share_stream_open");
      }
      ++stats_.batches_sent;
      stats_.bytes_sent += bytes;
      stats_.placements_sent += static_cast<uint64_t>(request.batch().placements_size());
    }
    if (stopping) break;
    ExpireRemoteWork();
    std::unique_lock<std::mutex> lock(mu_);
    if (wake_.wait_for(lock, interval, [this] { return stopping_ || reader_done_; }) &&
        reader_done_) {
      break;
    }
  }
  stream.WritesDone();
  std::unique_lock<std::mutex> lock(mu_);
  // The planner ends the stream once it has read the end of ours; a planner that does not is
  // not waited for.
  if (!wake_.wait_for(lock, kFarewellWait, [this] { return reader_done_; })) context.TryCancel();
  return opened;
}

void ShareLink::Read(Stream& stream) {
  v1::ShareUpdate update;
  while (stream.Read(&update)) {
    for (const v1::ShareBatch& batch : update.batches()) Apply(batch);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    reader_done_ = true;
  }
  wake_.notify_all();
}

v1::ShareRequest ShareLink::NextRequest(bool farewell) {
  const dataplane::PlacementBatch placements = outbox_.Drain();
  std::vector<std::string> names;
  {
    std::lock_guard<std::mutex> lock(mu_);
    names = names_;
  }
  std::vector<dataplane::DestinationWork> work;
  if (!farewell) {
    work.reserve(names.size());
    for (uint32_t d = 0; d < names.size(); ++d) work.push_back(router_.LedgerWork(d));
  }
  v1::ShareRequest request;
  *request.mutable_batch() =
      dataplane::ToShareBatch(options_.gateway_id, names, placements, &work, clock_.Now());
  request.set_sequence(++sequence_);
  return request;
}

void ShareLink::Apply(const v1::ShareBatch& batch) {
  const size_t bytes = batch.ByteSizeLong();
  const dataplane::Time now = clock_.Now();
  std::lock_guard<std::mutex> lock(mu_);
  const dataplane::ReceivedShare in =
      dataplane::FromShareBatch(batch, index_, static_cast<uint32_t>(names_.size()), now);
  router_.Learn(in.placements);
  ++stats_.batches_received;
  stats_.bytes_received += bytes;
  stats_.placements_learned += in.placements.placements.size();
  stats_.unknown_destinations += in.unknown_destinations;
  Remote& remote = remote_[batch.gateway_id()];
  remote.last = now;
  if (!in.work.has_value()) return;
  remote.work.clear();
  for (uint32_t d = 0; d < in.work->size(); ++d) {
    const dataplane::DestinationWork& w = (*in.work)[d];
    if (w.queued_prefill_tokens > 0 || w.prefilling > 0 || w.decoding > 0) {
      remote.work[names_[d]] = w;
    }
  }
  ApplyRemoteWorkLocked();
}

void ShareLink::ForgetRemoteWork() {
  std::lock_guard<std::mutex> lock(mu_);
  remote_.clear();
  ApplyRemoteWorkLocked();
}

void ShareLink::ExpireRemoteWork() {
  const dataplane::Time now = clock_.Now();
  const auto ttl = absl::ToChronoNanoseconds(options_.remote_work_ttl);
  std::lock_guard<std::mutex> lock(mu_);
  const size_t before = remote_.size();
  std::erase_if(remote_, [&](const auto& entry) { return now - entry.second.last > ttl; });
  if (remote_.size() != before) ApplyRemoteWorkLocked();
}

void ShareLink::ApplyRemoteWorkLocked() {
  const auto count = static_cast<uint32_t>(names_.size());
  for (uint32_t d = 0; d < count; ++d) {
    dataplane::DestinationWork sum;
    for (const auto& [gateway, remote] : remote_) {
      const auto it = remote.work.find(names_[d]);
      if (it != remote.work.end()) sum += it->second;
    }
    (void)router_.SetRemoteWork(d, sum);
  }
  // Indices the membership no longer has carry nothing into their next occupant.
  for (uint32_t d = count; d < applied_count_; ++d) (void)router_.SetRemoteWork(d, {});
  applied_count_ = count;
}

void RenderShareLink(base::Exposition& page, const ShareLink* link,
                     const dataplane::PlacementOutbox* outbox) {
  const ShareLinkStats s = link != nullptr ? link->Stats() : ShareLinkStats{};
  const auto count = [](uint64_t n) { return static_cast<double>(n); };
  page.Gauge("share_connected", "1 while the fleet-sharing stream to the planner is open.",
             s.connected ? 1 : 0);
  page.Counter("share_batches_sent_total", "Share batches sent to the planner.",
               count(s.batches_sent));
  page.Counter("share_bytes_sent_total", "Serialized bytes of the share requests sent.",
               count(s.bytes_sent));
  page.Counter("share_placements_sent_total", "Placements sent to the other gateways.",
               count(s.placements_sent));
  page.Counter("share_batches_received_total", "Other gateways' share batches received.",
               count(s.batches_received));
  page.Counter("share_bytes_received_total", "Serialized bytes of the share batches received.",
               count(s.bytes_received));
  page.Counter("share_placements_learned_total", "Other gateways' placements the Router learned.",
               count(s.placements_learned));
  page.Gauge("share_remote_gateways", "Other gateways whose work in flight is applied.",
             count(s.remote_gateways));
  page.Counter("share_outbox_dropped_total",
               "Placements not shared because the outbox was busy or full.",
               outbox != nullptr ? count(outbox->dropped()) : 0);
}

}  // namespace cacheroute::frontend
