// See ext_proc_server.h.
#include "tools/epp/ext_proc_server.h"

#include <grpcpp/health_check_service_interface.h>

#include <chrono>
#include <deque>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/config_file.h"
#include "base/status_macros.h"

namespace cacheroute::epp {
namespace {

// The health services GIE's endpoint-picker protocol names; "" is every service at once.
constexpr const char* kReadyServices[] = {"readiness",
                                          "envoy.service.ext_proc.v3.ExternalProcessor"};
constexpr const char* kLiveness = "liveness";

constexpr int kGrpcCodes = 17;
// Phases counted in messages_total, by ProcessingRequest::request_case (0: none set).
constexpr const char* kPhaseNames[] = {
    "none",          "request_headers",  "response_headers", "request_body",
    "response_body", "request_trailers", "response_trailers"};

grpc::Status ToGrpc(const absl::Status& status) {
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

}  // namespace

struct ExtProcServer::Counters {
  std::atomic<uint64_t> streams{0};
  std::array<std::atomic<uint64_t>, kGrpcCodes> errors{};
  std::atomic<uint64_t> immediate_503{0};
  std::atomic<uint64_t> immediate_413{0};
  std::atomic<uint64_t> immediate_other{0};
  std::array<std::atomic<uint64_t>, 7> messages{};
};

namespace {
thread_local bool may_wait = false;  // ExtProcServer::MayWait
}  // namespace

// One Process stream. Reads are sequential (the next is started once a message is handled), so
// the ExtProcStream and its Exchange see one thread at a time; the write queue is shared with
// OnWriteDone, which may run on another thread, hence mu_.
class ExtProcServer::Reactor
    : public grpc::ServerBidiReactor<ext_proc::ProcessingRequest, ext_proc::ProcessingResponse> {
 public:
  Reactor(ExtProcServer& server, grpc::CallbackServerContext* context,
          std::unique_ptr<Exchange> exchange)
      : server_(server),
        context_(context),
        exchange_(std::move(exchange)),
        stream_(server.options_.stream, *exchange_) {
    server_.StreamStarted(context_);
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the data plane half-closed, or the stream is gone
      std::lock_guard<std::mutex> lock(mu_);
      reads_done_ = true;
      MaybeFinish();
      return;
    }
    const auto phase_case = request_.request_case();
    const bool request_path = phase_case == ext_proc::ProcessingRequest::kRequestHeaders ||
                              phase_case == ext_proc::ProcessingRequest::kRequestBody ||
                              phase_case == ext_proc::ProcessingRequest::kRequestTrailers;
    if (request_path && server_.options_.hold_request && server_.options_.hold_request()) {
      // The Exchange may wait for room: not on this callback thread. No read is outstanding
      // and Finish is not called before Handle's end, so the reactor outlives the thread's use
      // of it (Handle is the thread's last touch of it).
      std::thread([this] {
        may_wait = true;
        Handle();
      }).detach();
      return;
    }
    Handle();
  }

  // The message just read: fed to the machine, its answers queued and written, the next read.
  void Handle() {
    const int phase = static_cast<int>(request_.request_case());
    if (phase >= 0 && phase < 7) {
      server_.counters_->messages[phase].fetch_add(1, std::memory_order_relaxed);
    }
    ExtProcStream::Step step = stream_.Receive(request_);
    bool finish = false;
    grpc::Status status;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (ext_proc::ProcessingResponse& r : step.responses) {
        if (r.has_immediate_response()) CountImmediate(r.immediate_response().status().code());
        queue_.push_back(std::move(r));
      }
      if (!step.status.ok()) {
        status_ = ToGrpc(step.status);
        server_.counters_->errors[static_cast<int>(step.status.code()) % kGrpcCodes].fetch_add(
            1, std::memory_order_relaxed);
      }
      if (!step.status.ok() || step.finish) {
        finishing_ = true;
      } else if (queue_.size() < kMaxQueuedAnswers) {
        StartRead(&request_);
      } else {
        read_paused_ = true;
      }
      WriteNext();
      finish = ReadyToFinish();
      status = status_;
    }
    // Last: on a thread of its own (not a reaction), OnDone may delete the reactor once Finish
    // is called.
    if (finish) Finish(status);
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard<std::mutex> lock(mu_);
    writing_ = false;
    queue_.pop_front();
    if (!ok) {  // the stream is broken: nothing more can be sent
      queue_.clear();
      finishing_ = true;
    }
    if (read_paused_ && !finishing_ && queue_.size() < kMaxQueuedAnswers / 2) {
      read_paused_ = false;
      StartRead(&request_);
    }
    WriteNext();
    MaybeFinish();
  }

  void OnDone() override {
    stream_.Close();
    server_.StreamEnded(context_);
    delete this;
  }

 private:
  void CountImmediate(int status) {
    Counters& c = *server_.counters_;
    (status == 503   ? c.immediate_503
     : status == 413 ? c.immediate_413
                     : c.immediate_other)
        .fetch_add(1, std::memory_order_relaxed);
  }
  // Under mu_.
  void WriteNext() {
    if (writing_ || queue_.empty() || finished_) return;
    writing_ = true;
    StartWrite(&queue_.front());
  }
  // Under mu_: whether the stream is to end now (every answer written and a reason to); then
  // marks it finished, and the caller calls Finish.
  bool ReadyToFinish() {
    if (finished_ || writing_ || !queue_.empty()) return false;
    if (!finishing_ && !reads_done_) return false;
    finished_ = true;
    return true;
  }
  // Under mu_, in a reaction: ends the stream once every answer is written and there is a reason to.
  void MaybeFinish() {
    if (ReadyToFinish()) Finish(status_);
  }

  ExtProcServer& server_;
  grpc::CallbackServerContext* const context_;
  std::unique_ptr<Exchange> exchange_;
  ExtProcStream stream_;
  ext_proc::ProcessingRequest request_;  // the read in progress
  std::mutex mu_;
  std::deque<ext_proc::ProcessingResponse> queue_;  // front: being written
  bool writing_ = false;
  bool read_paused_ = false;
  bool reads_done_ = false;
  bool finishing_ = false;
  bool finished_ = false;
  grpc::Status status_;  // what the stream ends with
};

class ExtProcServer::Service : public ext_proc::ExternalProcessor::CallbackService {
 public:
  explicit Service(ExtProcServer& server) : server_(server) {}
  grpc::ServerBidiReactor<ext_proc::ProcessingRequest, ext_proc::ProcessingResponse>* Process(
      grpc::CallbackServerContext* context) override {
    return new Reactor(server_, context, server_.factory_());
  }

 private:
  ExtProcServer& server_;
};

ExtProcServer::ExtProcServer(const ExtProcServerOptions& options, ExchangeFactory factory)
    : options_(options),
      factory_(std::move(factory)),
      service_(std::make_unique<Service>(*this)),
      counters_(std::make_unique<Counters>()) {}

bool ExtProcServer::MayWait() { return may_wait; }

absl::StatusOr<std::unique_ptr<ExtProcServer>> ExtProcServer::Start(
    const ExtProcServerOptions& options, ExchangeFactory factory) {
  std::unique_ptr<ExtProcServer> server(new ExtProcServer(options, std::move(factory)));
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (!options.tls_cert_file.empty() || !options.tls_key_file.empty()) {
    grpc::SslServerCredentialsOptions ssl(
        options.tls_client_ca_file.empty()
            ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
            : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    CACHEROUTE_ASSIGN_OR_RETURN(std::string cert,
                                base::ReadConfigFile("tls_cert_file", options.tls_cert_file));
    CACHEROUTE_ASSIGN_OR_RETURN(std::string key,
                                base::ReadConfigFile("tls_key_file", options.tls_key_file));
    ssl.pem_key_cert_pairs.push_back({key, cert});
    if (!options.tls_client_ca_file.empty()) {
      CACHEROUTE_ASSIGN_OR_RETURN(
          ssl.pem_root_certs,
          base::ReadConfigFile("tls_client_ca_file", options.tls_client_ca_file));
    }
    credentials = grpc::SslServerCredentials(ssl);
  }
  grpc::EnableDefaultHealthCheckService(true);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, credentials, &server->port_);
  // A request body travels whole in one BUFFERED message; the data plane's own limit applies
  // first, this one only keeps gRPC from refusing what it allows.
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(std::min<size_t>(options.stream.max_request_body + (1u << 20), INT32_MAX)));
  // Envoy keeps its ext_proc connections open between requests; a gateway that vanished without
  // closing them is noticed by keepalive pings.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 60000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.RegisterService(server->service_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("listen: cannot bind \"", options.listen, "\" (address in use or invalid?)"));
  }
  grpc::HealthCheckServiceInterface* health = server->server_->GetHealthCheckService();
  health->SetServingStatus(kLiveness, true);
  server->Publish(false);
  return server;
}

ExtProcServer::~ExtProcServer() { Stop(); }

void ExtProcServer::Publish(bool ready) {
  grpc::HealthCheckServiceInterface* health = server_->GetHealthCheckService();
  health->SetServingStatus("", ready);
  for (const char* service : kReadyServices) health->SetServingStatus(service, ready);
}

void ExtProcServer::SetReady(bool ready) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  if (stopped_ || draining_.load()) return;
  if (ready_.exchange(ready) != ready) Publish(ready);
}

void ExtProcServer::StreamStarted(grpc::CallbackServerContext* context) {
  counters_->streams.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::recursive_mutex> lock(mu_);
  active_.insert(context);
}

void ExtProcServer::StreamEnded(grpc::CallbackServerContext* context) {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  active_.erase(context);
  if (active_.empty()) active_cv_.notify_all();
}

size_t ExtProcServer::active_streams() const {
  std::lock_guard<std::recursive_mutex> lock(mu_);
  return active_.size();
}

size_t ExtProcServer::Drain(absl::Duration delay, absl::Duration timeout) {
  {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    if (stopped_ || draining_.exchange(true)) return 0;
    Publish(false);
  }
  std::this_thread::sleep_for(absl::ToChronoMicroseconds(delay));
  const auto deadline = std::chrono::steady_clock::now() + absl::ToChronoMicroseconds(timeout);
  // Shutdown stops accepting streams at once and returns once those in progress have ended; what
  // is still open at the deadline is counted, then cancelled here (a count taken before anything
  // is cut, so it cannot race the cancellation).
  std::thread shutdown([this] { server_->Shutdown(); });
  size_t left;
  {
    std::unique_lock<std::recursive_mutex> lock(mu_);
    active_cv_.wait_until(lock, deadline, [this] { return active_.empty(); });
    left = active_.size();
    // A copy: a cancelled stream may leave active_ while this loop runs. Each context stays valid
    // until its stream has ended, which needs mu_, held here.
    const std::vector<grpc::CallbackServerContext*> cut(active_.begin(), active_.end());
    for (grpc::CallbackServerContext* context : cut) context->TryCancel();
  }
  shutdown.join();
  return left;
}

void ExtProcServer::Stop() {
  {
    std::lock_guard<std::recursive_mutex> lock(mu_);
    if (stopped_) return;
    stopped_ = true;
  }
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now());
    server_->Wait();
  }
}

void ExtProcServer::RenderMetrics(base::Exposition& page) const {
  const auto relaxed = [](const std::atomic<uint64_t>& a) {
    return static_cast<double>(a.load(std::memory_order_relaxed));
  };
  page.Gauge("streams_active", "ext_proc streams (HTTP requests) in progress.",
             static_cast<double>(active_streams()));
  page.Counter("streams_total", "ext_proc streams accepted since the start.",
               relaxed(counters_->streams));
  page.Family("messages_total", "counter",
              "ext_proc messages received, by phase (none: a message that set no phase).");
  for (int p = 0; p < 7; ++p) {
    page.Sample("messages_total", relaxed(counters_->messages[p]),
                base::Exposition::Label("phase", kPhaseNames[p]));
  }
  page.Family("stream_errors_total", "counter",
              "Streams ended with an error status for a bad message, by gRPC code "
              "(3 INVALID_ARGUMENT: malformed, 9 FAILED_PRECONDITION: out of order or an "
              "unsupported mode).");
  for (int code = 1; code < kGrpcCodes; ++code) {
    const uint64_t n = counters_->errors[code].load(std::memory_order_relaxed);
    if (n > 0 || code == 3 || code == 9) {
      page.Sample("stream_errors_total", static_cast<double>(n),
                  absl::StrCat("code=\"", code, "\""));
    }
  }
  page.Family("immediate_responses_total", "counter",
              "Requests answered by the endpoint picker itself: 503 no endpoint can serve, 413 a "
              "body over max_request_body.");
  page.Sample("immediate_responses_total", relaxed(counters_->immediate_503), "status=\"503\"");
  page.Sample("immediate_responses_total", relaxed(counters_->immediate_413), "status=\"413\"");
  page.Sample("immediate_responses_total", relaxed(counters_->immediate_other), "status=\"other\"");
}

}  // namespace cacheroute::epp
