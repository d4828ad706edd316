// ExtProcServer: the gRPC side of the endpoint picker. It serves
// envoy.service.ext_proc.v3.ExternalProcessor/Process, one ExtProcStream per stream with an
// Exchange made for it, and grpc.health.v1.Health (gRPC's own health service) with the services
// GIE's endpoint-picker protocol names: "liveness" (SERVING while the process serves), and
// "readiness", "envoy.service.ext_proc.v3.ExternalProcessor" and "" (SERVING while SetReady(true)
// and not draining).
//
// Serving model: gRPC's callback API, one ServerBidiReactor per stream: a stream holds no thread
// between its messages, so an EPP follows thousands of requests (each a stream for the whole
// exchange, streamed answers included) on gRPC's few callback threads. A reactor reads one message
// at a time, feeds it to its ExtProcStream and queues the answers, writing them in order; while
// more than kMaxQueuedAnswers wait to be written it stops reading (the data plane's own flow
// control then holds it back). The Exchange is called from one thread at a time per stream. With
// ExtProcServerOptions::hold_request, a request-path message may be handled on a thread of its own
// instead, where the Exchange may wait (the admission queue); the stream reads on once it is done.
//
// A stream ends with the machine's status (OK after an immediate response, INVALID_ARGUMENT or
// FAILED_PRECONDITION for a bad message), with OK when the data plane half-closes, and is
// cancelled when the data plane goes away; each way, ExtProcStream::Close tells the Exchange.
//
// Usage:
//   auto server = ExtProcServer::Start(options, [&] { return std::make_unique<MyExchange>(…); });
//   (*server)->SetReady(true);
//   … (*server)->Drain(delay, timeout);   // SIGTERM: not ready, then stop accepting streams
//   (*server)->Stop();                    // also done by the destructor
//
// Thread-safety: every public method may be called from any thread.
#pragma once

#include <grpcpp/grpcpp.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "base/exposition.h"
#include "envoy/service/ext_proc/v3/external_processor.grpc.pb.h"
#include "tools/epp/ext_proc_stream.h"

namespace cacheroute::epp {

struct ExtProcServerOptions {
  std::string listen = "127.0.0.1:9002";  // HOST:PORT; port 0 picks a free one
  ExtProcStreamOptions stream;
  // When set and true as a request-path message (request headers, body or trailers) arrives, the
  // stream handles that message on a thread of its own rather than on gRPC's callback thread, so
  // that its Exchange may wait there (ExtProcServer::MayWait() is true on it): the endpoint
  // picker's admission queue, while the fleet is saturated. Called on the callback thread; cheap.
  std::function<bool()> hold_request;
  // PEM files: with a certificate and key the listener speaks TLS; with a client CA too, clients
  // (the gateways) must present a certificate it signed.
  std::string tls_cert_file;
  std::string tls_key_file;
  std::string tls_client_ca_file;
};

// Makes the routing side of one new stream.
using ExchangeFactory = std::function<std::unique_ptr<Exchange>()>;

class ExtProcServer {
 public:
  // Answers queued for writing beyond which a stream stops reading until they drain.
  static constexpr size_t kMaxQueuedAnswers = 64;

  // Binds and serves. A TLS file that cannot be read is InvalidArgument naming its option; an
  // address that cannot be bound, Unavailable.
  static absl::StatusOr<std::unique_ptr<ExtProcServer>> Start(const ExtProcServerOptions& options,
                                                              ExchangeFactory factory);
  ~ExtProcServer();
  ExtProcServer(const ExtProcServer&) = delete;
  ExtProcServer& operator=(const ExtProcServer&) = delete;

  int port() const { return port_; }
  // Readiness as the health service reports it (ignored once draining).
  void SetReady(bool ready);
  bool draining() const { return draining_.load(); }
  // Graceful drain: readiness goes NOT_SERVING, streams keep being served for `delay` (so that
  // the data plane and Kubernetes see it), then no new stream is accepted and those in progress
  // may take `timeout` to end; what is left is cancelled. Returns the streams cut.
  size_t Drain(absl::Duration delay, absl::Duration timeout);
  // Stops at once, cancelling streams in progress. Idempotent.
  void Stop();

  size_t active_streams() const;
  // Whether the calling thread may block: true on the thread a stream's message was handed to
  // (ExtProcServerOptions::hold_request), false on gRPC's callback threads, whose few threads
  // every stream's answers need.
  static bool MayWait();
  // streams_active, streams_total, stream_errors_total{code}, immediate_responses_total{status},
  // messages_total{phase}.
  void RenderMetrics(base::Exposition& page) const;

 private:
  class Reactor;
  class Service;
  struct Counters;

  ExtProcServer(const ExtProcServerOptions& options, ExchangeFactory factory);
  void StreamStarted(grpc::CallbackServerContext* context);
  void StreamEnded(grpc::CallbackServerContext* context);
  void Publish(bool ready);

  const ExtProcServerOptions options_;
  const ExchangeFactory factory_;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Counters> counters_;
  int port_ = 0;
  std::atomic<bool> draining_{false};
  std::atomic<bool> ready_{false};
  // Guards active_ and stopped_; active_cv_ waits on it. Recursive: a stream cancelled by Drain
  // may end (StreamEnded) on the cancelling thread, inside TryCancel.
  mutable std::recursive_mutex mu_;
  std::condition_variable_any active_cv_;
  std::set<grpc::CallbackServerContext*> active_;  // the streams in progress
  bool stopped_ = false;
};

}  // namespace cacheroute::epp
