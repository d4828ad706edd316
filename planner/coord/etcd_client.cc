#include "planner/coord/etcd_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"

namespace cacheroute::coord {
namespace {

namespace pb = ::etcdserverpb;

absl::Status FromGrpc(const grpc::Status& status, absl::string_view what,
                      absl::string_view endpoint) {
  if (status.ok()) return absl::OkStatus();
  // gRPC's and absl's status codes are the same numbers.
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      absl::StrCat(what, " on ", endpoint, ": ", status.error_message()));
}

bool TryNextEndpoint(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnavailable ||
         status.code() == absl::StatusCode::kDeadlineExceeded;
}

KeyValue FromPb(const ::mvccpb::KeyValue& kv) {
  KeyValue out;
  out.key = kv.key();
  out.value = kv.value();
  out.create_revision = kv.create_revision();
  out.mod_revision = kv.mod_revision();
  out.version = kv.version();
  out.lease = kv.lease();
  return out;
}

// The range_end that makes [key, range_end) every key with the prefix `key`.
std::string PrefixEnd(std::string key) {
  while (!key.empty()) {
    if (static_cast<unsigned char>(key.back()) < 0xff) {
      key.back() = static_cast<char>(static_cast<unsigned char>(key.back()) + 1);
      return key;
    }
    key.pop_back();
  }
  return std::string(1, '\0');  // every key
}

void ToPb(const Compare& c, pb::Compare* out) {
  out->set_key(c.key);
  switch (c.result) {
    case Compare::Result::kEqual: out->set_result(pb::Compare::EQUAL); break;
    case Compare::Result::kNotEqual: out->set_result(pb::Compare::NOT_EQUAL); break;
    case Compare::Result::kLess: out->set_result(pb::Compare::LESS); break;
    case Compare::Result::kGreater: out->set_result(pb::Compare::GREATER); break;
  }
  switch (c.target) {
    case Compare::Target::kVersion:
      out->set_target(pb::Compare::VERSION);
      out->set_version(c.number);
      break;
    case Compare::Target::kCreateRevision:
      out->set_target(pb::Compare::CREATE);
      out->set_create_revision(c.number);
      break;
    case Compare::Target::kModRevision:
      out->set_target(pb::Compare::MOD);
      out->set_mod_revision(c.number);
      break;
    case Compare::Target::kValue:
      out->set_target(pb::Compare::VALUE);
      out->set_value(c.value);
      break;
    case Compare::Target::kLease:
      out->set_target(pb::Compare::LEASE);
      out->set_lease(c.number);
      break;
  }
}

void ToPb(const TxnOp& op, pb::RequestOp* out) {
  switch (op.type) {
    case TxnOp::Type::kPut: {
      pb::PutRequest* put = out->mutable_request_put();
      put->set_key(op.key);
      put->set_value(op.value);
      put->set_lease(op.lease);
      break;
    }
    case TxnOp::Type::kDelete:
      out->mutable_request_delete_range()->set_key(op.key);
      break;
    case TxnOp::Type::kGet:
      out->mutable_request_range()->set_key(op.key);
      break;
  }
}

TxnOpResult FromPb(const pb::ResponseOp& op) {
  TxnOpResult out;
  switch (op.response_case()) {
    case pb::ResponseOp::kResponsePut:
      out.type = TxnOp::Type::kPut;
      break;
    case pb::ResponseOp::kResponseDeleteRange:
      out.type = TxnOp::Type::kDelete;
      out.deleted = op.response_delete_range().deleted();
      break;
    case pb::ResponseOp::kResponseRange:
    default:
      out.type = TxnOp::Type::kGet;
      if (op.response_range().kvs_size() > 0) out.kv = FromPb(op.response_range().kvs(0));
      break;
  }
  return out;
}

}  // namespace

Compare Compare::Version(std::string key, Result result, int64_t version) {
  return Compare{std::move(key), Target::kVersion, result, version, {}};
}
Compare Compare::CreateRevision(std::string key, Result result, int64_t revision) {
  return Compare{std::move(key), Target::kCreateRevision, result, revision, {}};
}
Compare Compare::ModRevision(std::string key, Result result, int64_t revision) {
  return Compare{std::move(key), Target::kModRevision, result, revision, {}};
}
Compare Compare::Value(std::string key, Result result, std::string value) {
  return Compare{std::move(key), Target::kValue, result, 0, std::move(value)};
}
Compare Compare::Lease(std::string key, Result result, int64_t lease_id) {
  return Compare{std::move(key), Target::kLease, result, lease_id, {}};
}

TxnOp TxnOp::Put(std::string key, std::string value, int64_t lease_id) {
  return TxnOp{Type::kPut, std::move(key), std::move(value), lease_id};
}
TxnOp TxnOp::Delete(std::string key) { return TxnOp{Type::kDelete, std::move(key), {}, 0}; }
TxnOp TxnOp::Get(std::string key) { return TxnOp{Type::kGet, std::move(key), {}, 0}; }

struct EtcdClient::Endpoint {
  std::string address;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<pb::KV::Stub> kv;
  std::unique_ptr<pb::Lease::Stub> lease;
  std::unique_ptr<pb::Watch::Stub> watch;
};

// One watch stream and its reader thread. The thread owns every read; Cancel() only cancels the
// context (thread-safe in gRPC) and joins.
struct Watcher::Stream {
  std::string endpoint;
  std::string key;
  std::string range_end;
  int64_t start_revision = 0;
  WatchCallbacks callbacks;
  Watcher* owner = nullptr;  // set before the thread may deliver anything (see Watch())

  grpc::ClientContext context;
  std::unique_ptr<pb::Watch::Stub> stub;
  std::thread thread;
  std::atomic<bool> cancelled{false};

  // Creation handshake between Watch() and the reader thread.
  std::mutex mu;
  std::condition_variable cv;
  bool settled = false;     // created, or failed before that
  bool owner_set = false;   // Watch() has linked the Watcher (or given up)
  absl::Status create_status;
  int64_t created_revision = 0;

  void Run();
  void Settle(absl::Status status, int64_t revision) {
    std::lock_guard<std::mutex> lock(mu);
    if (settled) return;
    settled = true;
    create_status = std::move(status);
    created_revision = revision;
    cv.notify_all();
  }
};

void Watcher::Stream::Run() {
  std::unique_ptr<grpc::ClientReaderWriter<pb::WatchRequest, pb::WatchResponse>> rw =
      stub->Watch(&context);
  pb::WatchRequest request;
  pb::WatchCreateRequest* create = request.mutable_create_request();
  create->set_key(key);
  if (!range_end.empty()) create->set_range_end(range_end);
  create->set_start_revision(start_revision);
  absl::Status end_status;
  bool created = false;
  bool stopped_reading = false;  // we left the loop with the stream still open
  if (rw->Write(request)) {  // else the stream is already over: Finish() says why
    pb::WatchResponse response;
    while (rw->Read(&response)) {
      if (!created) {
        if (!response.created()) continue;  // nothing else can come first
        created = true;
        Settle(absl::OkStatus(), response.header().revision());
        // Wait until Watch() has linked the Watcher, which events need.
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return owner_set; });
        if (owner == nullptr) {  // Watch() gave up (timed out)
          stopped_reading = true;
          break;
        }
      }
      if (response.canceled()) {
        if (response.compact_revision() > 0) {
          end_status = absl::OutOfRangeError(absl::StrCat(
              "watch of ", key, ": revision ", start_revision, " compacted (compact revision ",
              response.compact_revision(), ")"));
        } else {
          end_status = absl::AbortedError(
              absl::StrCat("watch of ", key, " cancelled by etcd: ", response.cancel_reason()));
        }
        stopped_reading = true;
        break;
      }
      if (response.events_size() == 0) continue;
      std::vector<WatchEvent> events;
      events.reserve(response.events_size());
      int64_t last = 0;
      for (const ::mvccpb::Event& e : response.events()) {
        WatchEvent event;
        event.type = e.type() == ::mvccpb::Event::DELETE ? WatchEvent::Type::kDelete
                                                          : WatchEvent::Type::kPut;
        event.kv = FromPb(e.kv());
        last = std::max(last, event.kv.mod_revision);
        events.push_back(std::move(event));
      }
      if (last + 1 > owner->next_revision_.load()) owner->next_revision_.store(last + 1);
      if (cancelled.load()) {
        stopped_reading = true;
        break;
      }
      if (callbacks.on_events) callbacks.on_events(events, response.header().revision());
    }
  }
  if (stopped_reading) {
    context.TryCancel();  // so Finish() does not wait for a stream we no longer read
    rw->Finish();
  } else {
    // Read() failed: the stream is over, Finish() says why.
    const grpc::Status finish = rw->Finish();
    if (end_status.ok()) {
      end_status = finish.ok() ? absl::UnavailableError("the watch stream ended")
                               : FromGrpc(finish, "Watch", endpoint);
    }
  }
  if (!created) {
    Settle(end_status, 0);
    return;
  }
  if (owner == nullptr || cancelled.load()) return;
  owner->broken_.store(true);
  if (callbacks.on_broken) callbacks.on_broken(end_status, owner->next_revision_.load());
}

Watcher::Watcher(std::unique_ptr<Stream> stream, int64_t next_revision)
    : stream_(std::move(stream)), next_revision_(next_revision) {}

Watcher::~Watcher() { Cancel(); }

void Watcher::Cancel() {
  if (stream_ == nullptr) return;
  stream_->cancelled.store(true);
  stream_->context.TryCancel();
  if (stream_->thread.joinable()) stream_->thread.join();
}

EtcdClient::EtcdClient(Options options) : options_(std::move(options)) {}
EtcdClient::~EtcdClient() = default;

absl::StatusOr<std::unique_ptr<EtcdClient>> EtcdClient::Create(Options options) {
  if (options.endpoints.empty()) return absl::InvalidArgumentError("etcd: no endpoints");
  if (options.call_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("etcd: call_timeout must be positive");
  }
  if (options.connect_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("etcd: connect_timeout must be positive");
  }
  std::unique_ptr<EtcdClient> client(new EtcdClient(std::move(options)));
  for (const std::string& address : client->options_.endpoints) {
    if (address.empty()) return absl::InvalidArgumentError("etcd: an empty endpoint");
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS,
                static_cast<int>(absl::ToInt64Milliseconds(client->options_.keepalive_time)));
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                static_cast<int>(absl::ToInt64Milliseconds(client->options_.keepalive_timeout)));
    // etcd refuses pings without an active call; a watch is one, and pings must go on while it
    // is idle.
    args.SetInt(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 0);
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);
    const int backoff_ms =
        static_cast<int>(absl::ToInt64Milliseconds(client->options_.max_reconnect_backoff));
    args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, std::min(100, backoff_ms));
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, backoff_ms);
    // gRPC core reads its minimum connect timeout from this argument, not a minimum backoff: a
    // small value here gives each attempt only the backoff to finish its handshake.
    args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS,
                static_cast<int>(absl::ToInt64Milliseconds(client->options_.connect_timeout)));
    // Its own connection, not one shared with other clients of the same process.
    args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
    auto endpoint = std::make_unique<Endpoint>();
    endpoint->address = address;
    endpoint->channel =
        grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
    endpoint->kv = pb::KV::NewStub(endpoint->channel);
    endpoint->lease = pb::Lease::NewStub(endpoint->channel);
    endpoint->watch = pb::Watch::NewStub(endpoint->channel);
    client->endpoints_.push_back(std::move(endpoint));
  }
  return client;
}

std::string EtcdClient::current_endpoint() const {
  return endpoints_[current_.load() % endpoints_.size()]->address;
}

// Runs fn(endpoint, context) -> grpc::Status on the current endpoint, then on the next ones while
// they are unavailable or time out.
template <typename Fn>
absl::Status EtcdClient::Call(absl::string_view what, Fn&& fn) {
  const size_t n = endpoints_.size();
  const size_t start = current_.load();
  std::vector<std::string> errors;
  for (size_t i = 0; i < n; ++i) {
    const size_t index = (start + i) % n;
    Endpoint& endpoint = *endpoints_[index];
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + options_.call_timeout));
    absl::Status status = FromGrpc(fn(endpoint, &context), what, endpoint.address);
    if (!TryNextEndpoint(status) || i + 1 == n) {
      if (!TryNextEndpoint(status)) current_.store(index);
      if (!errors.empty() && !status.ok()) {
        errors.push_back(std::string(status.message()));
        return absl::Status(status.code(), absl::StrJoin(errors, "; "));
      }
      return status;
    }
    errors.push_back(std::string(status.message()));
  }
  return absl::InternalError("unreachable");
}

absl::StatusOr<GetResult> EtcdClient::Get(absl::string_view key) {
  pb::RangeRequest request;
  request.set_key(std::string(key));
  pb::RangeResponse response;
  absl::Status status = Call("Get", [&](Endpoint& e, grpc::ClientContext* c) {
    return e.kv->Range(c, request, &response);
  });
  if (!status.ok()) return status;
  GetResult result;
  result.revision = response.header().revision();
  if (response.kvs_size() > 0) result.kv = FromPb(response.kvs(0));
  return result;
}

absl::StatusOr<int64_t> EtcdClient::Put(absl::string_view key, absl::string_view value,
                                        int64_t lease_id) {
  pb::PutRequest request;
  request.set_key(std::string(key));
  request.set_value(std::string(value));
  request.set_lease(lease_id);
  pb::PutResponse response;
  absl::Status status = Call("Put", [&](Endpoint& e, grpc::ClientContext* c) {
    return e.kv->Put(c, request, &response);
  });
  if (!status.ok()) return status;
  return response.header().revision();
}

absl::StatusOr<int64_t> EtcdClient::Delete(absl::string_view key) {
  pb::DeleteRangeRequest request;
  request.set_key(std::string(key));
  pb::DeleteRangeResponse response;
  absl::Status status = Call("Delete", [&](Endpoint& e, grpc::ClientContext* c) {
    return e.kv->DeleteRange(c, request, &response);
  });
  if (!status.ok()) return status;
  return response.deleted();
}

absl::StatusOr<LeaseGrant> EtcdClient::GrantLease(int64_t ttl_seconds) {
  if (ttl_seconds <= 0) return absl::InvalidArgumentError("GrantLease: ttl must be positive");
  pb::LeaseGrantRequest request;
  request.set_ttl(ttl_seconds);
  pb::LeaseGrantResponse response;
  absl::Status status = Call("GrantLease", [&](Endpoint& e, grpc::ClientContext* c) {
    return e.lease->LeaseGrant(c, request, &response);
  });
  if (!status.ok()) return status;
  if (!response.error().empty()) {
    return absl::FailedPreconditionError(absl::StrCat("GrantLease: ", response.error()));
  }
  return LeaseGrant{response.id(), response.ttl()};
}

absl::StatusOr<int64_t> EtcdClient::KeepAliveOnce(int64_t lease_id) {
  pb::LeaseKeepAliveRequest request;
  request.set_id(lease_id);
  pb::LeaseKeepAliveResponse response;
  absl::Status status = Call("KeepAliveOnce", [&](Endpoint& e, grpc::ClientContext* c) {
    auto stream = e.lease->LeaseKeepAlive(c);
    if (stream->Write(request)) stream->WritesDone();
    const bool got = stream->Read(&response);
    grpc::Status finish = stream->Finish();
    if (got) return grpc::Status::OK;
    if (!finish.ok()) return finish;
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "no keepalive response");
  });
  if (!status.ok()) return status;
  if (response.ttl() <= 0) {
    return absl::NotFoundError(absl::StrCat("KeepAliveOnce: lease ", lease_id, " not found"));
  }
  return response.ttl();
}

absl::Status EtcdClient::RevokeLease(int64_t lease_id) {
  pb::LeaseRevokeRequest request;
  request.set_id(lease_id);
  pb::LeaseRevokeResponse response;
  return Call("RevokeLease", [&](Endpoint& e, grpc::ClientContext* c) {
    return e.lease->LeaseRevoke(c, request, &response);
  });
}

absl::StatusOr<TxnResult> EtcdClient::Txn(const TxnRequest& txn) {
  pb::TxnRequest request;
  for (const Compare& c : txn.compares) ToPb(c, request.add_compare());
  for (const TxnOp& op : txn.success) ToPb(op, request.add_success());
  for (const TxnOp& op : txn.failure) ToPb(op, request.add_failure());
  pb::TxnResponse response;
  absl::Status status = Call("Txn", [&](Endpoint& e, grpc::ClientContext* c) {
    return e.kv->Txn(c, request, &response);
  });
  if (!status.ok()) return status;
  TxnResult result;
  result.succeeded = response.succeeded();
  result.revision = response.header().revision();
  for (const pb::ResponseOp& op : response.responses()) result.responses.push_back(FromPb(op));
  return result;
}

absl::StatusOr<std::unique_ptr<Watcher>> EtcdClient::Watch(std::string key,
                                                           int64_t start_revision,
                                                           WatchCallbacks callbacks,
                                                           WatchScope scope) {
  if (start_revision < 0) return absl::InvalidArgumentError("Watch: negative start revision");
  const size_t n = endpoints_.size();
  const size_t start = current_.load();
  std::vector<std::string> errors;
  absl::Status last;
  for (size_t i = 0; i < n; ++i) {
    const size_t index = (start + i) % n;
    Endpoint& endpoint = *endpoints_[index];
    auto stream = std::make_unique<Watcher::Stream>();
    stream->endpoint = endpoint.address;
    stream->key = key;
    if (scope == WatchScope::kPrefix) stream->range_end = PrefixEnd(key);
    stream->start_revision = start_revision;
    stream->callbacks = callbacks;
    stream->stub = pb::Watch::NewStub(endpoint.channel);
    Watcher::Stream* s = stream.get();
    s->thread = std::thread([s] { s->Run(); });
    bool settled;
    {
      std::unique_lock<std::mutex> lock(s->mu);
      settled = s->cv.wait_for(lock, absl::ToChronoMilliseconds(options_.call_timeout),
                               [&] { return s->settled; });
    }
    absl::Status status;
    if (!settled) {
      status = absl::DeadlineExceededError(
          absl::StrCat("Watch on ", endpoint.address, ": no confirmation from etcd"));
    } else {
      status = s->create_status;
    }
    if (status.ok()) {
      const int64_t next = start_revision > 0 ? start_revision : s->created_revision + 1;
      std::unique_ptr<Watcher> watcher(new Watcher(std::move(stream), next));
      {
        std::lock_guard<std::mutex> lock(s->mu);
        s->owner = watcher.get();
        s->owner_set = true;
        s->cv.notify_all();
      }
      current_.store(index);
      return watcher;
    }
    // Give up on this stream: the thread sees owner == nullptr (or the cancellation) and exits.
    s->cancelled.store(true);
    {
      std::lock_guard<std::mutex> lock(s->mu);
      s->owner_set = true;
      s->cv.notify_all();
    }
    s->context.TryCancel();
    s->thread.join();
    errors.push_back(std::string(status.message()));
    last = status;
    if (!TryNextEndpoint(status)) break;
  }
  return absl::Status(last.code(), absl::StrJoin(errors, "; "));
}

}  // namespace cacheroute::coord
