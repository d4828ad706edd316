// See planner_server.h.
#include "planner/service/planner_server.h"

#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/authorization.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "cacheroute/v1/admin.grpc.pb.h"
#include "cacheroute/v1/rates.grpc.pb.h"
#include "cacheroute/v1/table.grpc.pb.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "planner/key_id.h"
#include "planner/service/control_schedule.h"
#include "planner/service/plan_log.h"
#include "planner/service/proto_convert.h"
#include "proto/table/table_stream.h"
#ifdef CACHEROUTE_HAVE_ETCD
#include "planner/service/ha_replica.h"
#endif
#include <unistd.h>

namespace cacheroute::service {
namespace {

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()));
}

// Compares in time independent of where the strings first differ.
bool ConstantTimeEquals(absl::string_view a, absl::string_view b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

absl::StatusOr<std::string> ReadFile(const std::string& path, absl::string_view field) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrCat(field, ": cannot read \"", path, "\""));
  }
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// HaReplica's calls, so that a build without etcd (CACHEROUTE_ETCD=OFF) links without it.
#ifdef CACHEROUTE_HAVE_ETCD
bool HaLeads(HaReplica* ha) { return ha->IsLeader(); }
std::pair<std::string, std::string> HaLeader(HaReplica* ha) {
  coord::LeaderInfo leader = ha->Leader();
  return {leader.id, leader.address};
}
absl::StatusOr<planner::ReportResult> HaReport(HaReplica* ha, const v1::ReportRatesRequest& r) {
  return ha->ReportRates(r);
}
v1::HaStatus HaStatusOf(HaReplica* ha) { return ha->Status(); }
#else
}  // namespace
class HaReplica {};  // never made in this build; ha_ stays null
namespace {
bool HaLeads(HaReplica*) { return true; }
std::pair<std::string, std::string> HaLeader(HaReplica*) { return {}; }
absl::StatusOr<planner::ReportResult> HaReport(HaReplica*, const v1::ReportRatesRequest&) {
  return absl::UnimplementedError("built without etcd");
}
v1::HaStatus HaStatusOf(HaReplica*) { return {}; }
#endif

constexpr char kForwardedHeader[] = "x-cacheroute-forwarded-by";

}  // namespace

// All three services, sharing the core, the auth check and the set of live table streams.
class PlannerServices final : public v1::RateService::CallbackService,
                              public v1::TableService::CallbackService,
                              public v1::AdminService::CallbackService {
 public:
  PlannerServices(const PlannerConfig& config, PlannerCore* core) : config_(config), core_(core) {
    listener_ = core_->AddListener(
        [this](std::shared_ptr<const table::TableSnapshot> latest) { PublishToStreams(latest); });
  }
  ~PlannerServices() override { core_->RemoveListener(listener_); }

  // --- RateService
  grpc::ServerUnaryReactor* ReportRates(grpc::CallbackServerContext* context,
                                        const v1::ReportRatesRequest* request,
                                        v1::ReportRatesResponse* response) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    if (grpc::Status auth = CheckAuth(context, /*mutating=*/true); !auth.ok()) {
      reactor->Finish(auth);
      return reactor;
    }
    absl::StatusOr<planner::ReportResult> result;
    if (!config_.etcd.enabled) {
      result = core_->ReportRates(ToRateReport(*request));
    } else if (HaReplica* ha = ha_.load(); ha == nullptr) {
      result = absl::UnavailableError("replica starting");
    } else if (absl::Status valid = core_->ValidateReport(ToRateReport(*request)); !valid.ok()) {
      result = valid;
    } else {
      // Accepted only once in etcd; every replica then applies it once (docs/ha.md).
      result = HaReport(ha, *request);
    }
    if (!result.ok()) {
      base::LogEvent("warning", "report_rejected",
                     {{"gateway_id", request->gateway_id()},
                      {"error", std::string(result.status().message())}});
      reactor->Finish(ToGrpc(result.status()));
      return reactor;
    }
    response->set_duplicate(result->duplicate);
    response->set_accepted_keys(result->accepted_keys);
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  // --- TableService
  grpc::ServerBidiReactor<v1::StreamTableRequest, v1::TableUpdate>* StreamTable(
      grpc::CallbackServerContext* context) override;

  grpc::ServerUnaryReactor* GetTable(grpc::CallbackServerContext* context,
                                     const v1::GetTableRequest* request,
                                     v1::RoutingTable* response) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    if (grpc::Status auth = CheckAuth(context, /*mutating=*/false); !auth.ok()) {
      reactor->Finish(auth);
      return reactor;
    }
    absl::StatusOr<std::shared_ptr<const table::TableSnapshot>> snapshot =
        core_->Get(table::TableVersion::FromProto(request->version()));
    if (!snapshot.ok()) {
      reactor->Finish(ToGrpc(snapshot.status()));
      return reactor;
    }
    *response = (*snapshot)->ToProto();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  // --- AdminService
  grpc::ServerUnaryReactor* GetStatus(grpc::CallbackServerContext* context,
                                      const v1::GetStatusRequest*,
                                      v1::GetStatusResponse* response) override {
    return Unary(context, false, [&] {
      *response = core_->Status();
      if (HaReplica* ha = ha_.load()) *response->mutable_ha() = HaStatusOf(ha);
      return absl::OkStatus();
    });
  }

  grpc::ServerUnaryReactor* Explain(grpc::CallbackServerContext* context,
                                    const v1::ExplainRequest* request,
                                    v1::ExplainResponse* response) override {
    return Unary(context, false, [&] {
      if (request->key_id() == 0 && request->key().empty()) {
        return absl::InvalidArgumentError("key_id: set key_id or key");
      }
      const uint64_t key_id =
          request->key().empty() ? request->key_id() : cacheroute::KeyId(request->key());
      *response = core_->Explain(key_id);
      if (response->key().empty()) response->set_key(request->key());
      return absl::OkStatus();
    });
  }

  grpc::ServerUnaryReactor* Diff(grpc::CallbackServerContext* context,
                                 const v1::DiffRequest* request,
                                 v1::DiffResponse* response) override {
    return Unary(context, false, [&]() -> absl::Status {
      if (table::TableVersion::FromProto(request->from()).IsZero()) {
        return absl::InvalidArgumentError("from: a version is required");
      }
      auto from = core_->Get(table::TableVersion::FromProto(request->from()));
      if (!from.ok()) return from.status();
      auto to = core_->Get(table::TableVersion::FromProto(request->to()));
      if (!to.ok()) return to.status();
      *response = table::Diff(**from, **to).ToProto();
      return absl::OkStatus();
    });
  }

  grpc::ServerUnaryReactor* Replan(grpc::CallbackServerContext* context,
                                   const v1::ReplanRequest* request,
                                   v1::ReplanResponse* response) override {
    return Write(context, *request, response, &v1::AdminService::Stub::Replan,
                 [&]() -> absl::Status {
                   CACHEROUTE_ASSIGN_OR_RETURN(PlanOutcome outcome, core_->Replan());
                   *response->mutable_version() = outcome.version.ToProto();
                   response->set_changed(outcome.changed);
                   return absl::OkStatus();
                 });
  }

  grpc::ServerUnaryReactor* SetDestinations(grpc::CallbackServerContext* context,
                                            const v1::SetDestinationsRequest* request,
                                            v1::SetDestinationsResponse* response) override {
    return Write(context, *request, response, &v1::AdminService::Stub::SetDestinations,
                 [&]() -> absl::Status {
                   absl::StatusOr<PlanOutcome> outcome = core_->SetDestinations(
                       {request->destinations().begin(), request->destinations().end()});
                   if (!outcome.ok()) return outcome.status();
                   *response->mutable_version() = outcome->version.ToProto();
                   base::LogEvent("info", "destinations_set",
                                  {{"count", absl::StrCat(request->destinations_size())},
                                   {"version", outcome->version.ToString()}});
                   return absl::OkStatus();
                 });
  }

  grpc::ServerUnaryReactor* Drain(grpc::CallbackServerContext* context,
                                  const v1::DrainRequest* request,
                                  v1::DrainResponse* response) override {
    return Write(
        context, *request, response, &v1::AdminService::Stub::Drain, [&]() -> absl::Status {
          CACHEROUTE_ASSIGN_OR_RETURN(PlanOutcome outcome,
                                      core_->Drain(request->destination(), request->undrain()));
          *response->mutable_version() = outcome.version.ToProto();
          base::LogEvent(
              "info", request->undrain() ? "destination_undrained" : "destination_drained",
              {{"destination", request->destination()}, {"version", outcome.version.ToString()}});
          return absl::OkStatus();
        });
  }

  grpc::ServerUnaryReactor* ForceGate(grpc::CallbackServerContext* context,
                                      const v1::ForceGateRequest* request,
                                      v1::GateStatus* response) override {
    return Write(
        context, *request, response, &v1::AdminService::Stub::ForceGate, [&]() -> absl::Status {
          CACHEROUTE_ASSIGN_OR_RETURN(*response,
                                      core_->ForceGate(request->state(), request->why()));
          base::LogEvent("info", request->state().empty() ? "gate_released" : "gate_forced",
                         {{"state", response->state()},
                          {"table_fraction", absl::StrCat(response->table_fraction())},
                          {"why", request->why()}});
          return absl::OkStatus();
        });
  }

  // --- Table-stream registry, used by StreamTableReactor.
  class StreamTableReactor;
  void Register(StreamTableReactor* reactor);
  void Unregister(StreamTableReactor* reactor);
  PlannerCore* core() { return core_; }
  const PlannerConfig& config() const { return config_; }
  // Whether this replica serves fleet sharing: without etcd always; with replicas only the leader,
  // so that every gateway shares through one exchange (the others answer FAILED_PRECONDITION
  // naming the leader, and the gateway's share stream moves on to another replica).
  grpc::Status ShareAllowed() {
    HaReplica* ha = ha_.load();
    if (config_.etcd.enabled && ha == nullptr) {
      return grpc::Status(grpc::StatusCode::UNAVAILABLE, "replica starting");
    }
    if (ha == nullptr || HaLeads(ha)) return grpc::Status::OK;
    const auto [id, address] = HaLeader(ha);
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        id.empty() ? std::string("not the leader, and no leader is known (etcd "
                                                 "unreachable?): fleet sharing is the leader's")
                                   : absl::StrCat("not the leader: fleet sharing is the leader's, ",
                                                  id, " at ", address));
  }

  grpc::Status CheckAuth(grpc::CallbackServerContext* context, bool mutating) const {
    if (config_.token.empty() || (!mutating && !config_.token_required_for_reads)) {
      return grpc::Status::OK;
    }
    const auto& metadata = context->client_metadata();
    const auto it = metadata.find("authorization");
    const std::optional<absl::string_view> token =
        it == metadata.end()
            ? std::nullopt
            : base::BearerToken(absl::string_view(it->second.data(), it->second.size()));
    if (!token.has_value() || !ConstantTimeEquals(*token, config_.token)) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          "authorization: a valid bearer token is required");
    }
    return grpc::Status::OK;
  }

 private:
  template <typename Body>
  grpc::ServerUnaryReactor* Unary(grpc::CallbackServerContext* context, bool mutating, Body body) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    grpc::Status status = CheckAuth(context, mutating);
    if (status.ok()) status = ToGrpc(body());
    reactor->Finish(status);
    return reactor;
  }

  // An admin write: on the leader (or without etcd) `body`; on a follower forwarded to the
  // leader's advertised address with the caller's token, or FAILED_PRECONDITION naming it.
  template <typename Request, typename Response, typename Body>
  grpc::ServerUnaryReactor* Write(grpc::CallbackServerContext* context, const Request& request,
                                  Response* response,
                                  grpc::Status (v1::AdminService::Stub::*method)(
                                      grpc::ClientContext*, const Request&, Response*),
                                  Body body) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    grpc::Status status = CheckAuth(context, /*mutating=*/true);
    if (status.ok()) {
      HaReplica* ha = ha_.load();
      if (config_.etcd.enabled && ha == nullptr) {
        status = grpc::Status(grpc::StatusCode::UNAVAILABLE, "replica starting");
      } else if (ha != nullptr && !HaLeads(ha)) {
        status = Forward(context, ha, request, response, method);
      } else {
        status = ToGrpc(body());
      }
    }
    reactor->Finish(status);
    return reactor;
  }

  template <typename Request, typename Response>
  grpc::Status Forward(grpc::CallbackServerContext* context, HaReplica* ha, const Request& request,
                       Response* response,
                       grpc::Status (v1::AdminService::Stub::*method)(grpc::ClientContext*,
                                                                      const Request&, Response*)) {
    const auto [id, address] = HaLeader(ha);
    if (id.empty()) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          "not the leader, and no leader is known (etcd unreachable?)");
    }
    const std::string named = absl::StrCat("the leader is ", id, " at ", address);
    if (id == HaStatusOf(ha).replica_id()) {
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          "not the leader: this replica's lease has lapsed (etcd unreachable?)");
    }
    const auto& metadata = context->client_metadata();
    if (metadata.find(kForwardedHeader) != metadata.end() || !config_.tls.cert_file.empty()) {
      // Forwarded once already (leadership moved meanwhile), or TLS, whose client side a
      // replica is not configured with: the caller retries at the leader.
      return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                          absl::StrCat("not the leader: ", named));
    }
    std::shared_ptr<grpc::Channel> channel;
    {
      absl::MutexLock lock(&channels_mu_);
      std::shared_ptr<grpc::Channel>& cached = channels_[address];
      if (cached == nullptr) {
        cached = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
      }
      channel = cached;
    }
    std::unique_ptr<v1::AdminService::Stub> stub = v1::AdminService::NewStub(channel);
    grpc::ClientContext client;
    client.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (const auto it = metadata.find("authorization"); it != metadata.end()) {
      client.AddMetadata("authorization", std::string(it->second.data(), it->second.size()));
    }
    client.AddMetadata(kForwardedHeader, "1");
    grpc::Status status = (stub.get()->*method)(&client, request, response);
    if (!status.ok() && status.error_code() == grpc::StatusCode::UNAVAILABLE) {
      return grpc::Status(
          grpc::StatusCode::UNAVAILABLE,
          absl::StrCat("forwarding to the leader failed (", named, "): ", status.error_message()));
    }
    return status;
  }

  void PublishToStreams(const std::shared_ptr<const table::TableSnapshot>& latest);

 public:
  void set_ha(HaReplica* ha) { ha_.store(ha); }

 private:
  std::atomic<HaReplica*> ha_{nullptr};
  absl::Mutex channels_mu_;
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels_ ABSL_GUARDED_BY(channels_mu_);
  const PlannerConfig config_;
  PlannerCore* const core_;
  uint64_t listener_ = 0;
  absl::Mutex streams_mu_;  // lock order: streams_mu_, then a reactor's mu_
  std::set<StreamTableReactor*> streams_ ABSL_GUARDED_BY(streams_mu_);
  std::atomic<uint64_t> next_stream_{1};

  friend class StreamTableReactor;
};

// One gateway's table stream. table::TableStream decides what to send; this class only moves
// messages: one read and at most one write outstanding, Finish exactly once when neither is.
class PlannerServices::StreamTableReactor final
    : public grpc::ServerBidiReactor<v1::StreamTableRequest, v1::TableUpdate> {
 public:
  StreamTableReactor(PlannerServices* services, grpc::CallbackServerContext* context)
      : services_(services),
        stream_(absl::StrCat("s", services->next_stream_.fetch_add(1)), kMaxTableMessageBytes) {
    if (grpc::Status auth = services_->CheckAuth(context, /*mutating=*/false); !auth.ok()) {
      absl::MutexLock lock(&mu_);
      RequestFinishLocked(auth);
      return;
    }
    StartRead(&request_);
  }

  void Publish(std::shared_ptr<const table::TableSnapshot> latest) {
    absl::MutexLock lock(&mu_);
    if (finishing_) return;
    stream_.OnPublish(std::move(latest));
    MaybeWriteLocked();
  }

  void OnReadDone(bool ok) override {
    bool first = false;
    {
      absl::MutexLock lock(&mu_);
      if (!ok) {  // the gateway closed its side, or the call is cancelled
        RequestFinishLocked(grpc::Status::OK);
        return;
      }
      if (absl::Status s = stream_.OnRequest(request_); !s.ok()) {
        RequestFinishLocked(ToGrpc(s));
        return;
      }
      first = gateway_id_.empty();
      gateway_id_ = stream_.gateway_id();
      acked_ = stream_.acked_version();
      MaybeWriteLocked();
      StartRead(&request_);
    }
    if (first) {
      services_->core()->RecordSubscriber(gateway_id_, true);
      services_->Register(this);  // sends the latest table, if any
    }
    services_->core()->RecordAck(gateway_id_, acked_);
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

  void OnDone() override {
    services_->Unregister(this);
    if (!gateway_id_.empty()) services_->core()->RecordSubscriber(gateway_id_, false);
    delete this;
  }

  void OnCancel() override {
    absl::MutexLock lock(&mu_);
    RequestFinishLocked(grpc::Status::CANCELLED);
  }

 private:
  // gRPC's default receive limit is 4 MiB; chunks stay well below it.
  static constexpr size_t kMaxTableMessageBytes = 3u << 20;

  void MaybeWriteLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (writing_ || finishing_) return;
    if (queue_.empty()) {
      std::vector<v1::TableUpdate> chunks = stream_.TakeUpdate();
      for (auto& chunk : chunks) queue_.push_back(std::move(chunk));
    }
    if (queue_.empty()) return;
    current_ = std::move(queue_.front());
    queue_.erase(queue_.begin());
    writing_ = true;
    StartWrite(&current_);
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

  PlannerServices* const services_;
  absl::Mutex mu_;
  table::TableStream stream_ ABSL_GUARDED_BY(mu_);
  v1::StreamTableRequest request_;
  v1::TableUpdate current_ ABSL_GUARDED_BY(mu_);
  std::vector<v1::TableUpdate> queue_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finishing_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  grpc::Status finish_status_ ABSL_GUARDED_BY(mu_);
  // Copied out of the lock for the core's bookkeeping; written only on the read path.
  std::string gateway_id_;
  table::TableVersion acked_;
};

grpc::ServerBidiReactor<v1::StreamTableRequest, v1::TableUpdate>* PlannerServices::StreamTable(
    grpc::CallbackServerContext* context) {
  return new StreamTableReactor(this, context);
}

void PlannerServices::Register(StreamTableReactor* reactor) {
  absl::MutexLock lock(&streams_mu_);
  streams_.insert(reactor);
  if (std::shared_ptr<const table::TableSnapshot> latest = core_->Latest()) {
    reactor->Publish(std::move(latest));
  }
}

void PlannerServices::Unregister(StreamTableReactor* reactor) {
  absl::MutexLock lock(&streams_mu_);
  streams_.erase(reactor);
}

void PlannerServices::PublishToStreams(const std::shared_ptr<const table::TableSnapshot>& latest) {
  absl::MutexLock lock(&streams_mu_);
  for (StreamTableReactor* reactor : streams_) reactor->Publish(latest);
}

absl::StatusOr<std::unique_ptr<PlannerServer>> PlannerServer::Start(const PlannerConfig& config,
                                                                    base::Clock* clock,
                                                                    bool run_ticker) {
  std::unique_ptr<PlannerServer> server(new PlannerServer());
  CACHEROUTE_ASSIGN_OR_RETURN(server->core_, PlannerCore::Create(config, clock));
  server->services_ = std::make_unique<PlannerServices>(config, server->core_.get());
  // A stream publishes, so it needs the token that writes do; with replicas only the leader
  // serves sharing (ShareAllowed), at the stream's start and at every batch.
  server->share_ = std::make_unique<ShareService>(
      planner::ShareExchangeOptions{}, *clock,
      [services = server->services_.get()](grpc::CallbackServerContext* context) {
        grpc::Status status = services->CheckAuth(context, /*mutating=*/true);
        return status.ok() ? services->ShareAllowed() : status;
      },
      [services = server->services_.get()] { return services->ShareAllowed(); });

  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (!config.tls.cert_file.empty()) {
    grpc::SslServerCredentialsOptions ssl(
        config.tls.client_ca_file.empty()
            ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
            : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    CACHEROUTE_ASSIGN_OR_RETURN(std::string cert, ReadFile(config.tls.cert_file, "tls.cert_file"));
    CACHEROUTE_ASSIGN_OR_RETURN(std::string key, ReadFile(config.tls.key_file, "tls.key_file"));
    ssl.pem_key_cert_pairs.push_back({key, cert});
    if (!config.tls.client_ca_file.empty()) {
      CACHEROUTE_ASSIGN_OR_RETURN(ssl.pem_root_certs,
                                  ReadFile(config.tls.client_ca_file, "tls.client_ca_file"));
    }
    credentials = grpc::SslServerCredentials(ssl);
  }

  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(config.listen, credentials, &server->port_);
  builder.SetMaxReceiveMessageSize(static_cast<int>(config.max_message_bytes));
  // Keepalive: gateways may ping every 10 s even without calls; idle streams are probed.
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 60000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10000);
  builder.RegisterService(static_cast<v1::RateService::CallbackService*>(server->services_.get()));
  builder.RegisterService(static_cast<v1::TableService::CallbackService*>(server->services_.get()));
  builder.RegisterService(static_cast<v1::AdminService::CallbackService*>(server->services_.get()));
  builder.RegisterService(server->share_.get());
  server->server_ = builder.BuildAndStart();
  if (server->server_ == nullptr || server->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("listen: cannot bind \"", config.listen, "\" (address in use or invalid?)"));
  }
  server->server_->GetHealthCheckService()->SetServingStatus(true);
  if (config.etcd.enabled) {
#ifdef CACHEROUTE_HAVE_ETCD
    HaReplica::Options options{
        .etcd = config.etcd,
        .control_interval = config.control_interval,
        .gate_interval = config.gate_enabled ? config.gate_interval : absl::ZeroDuration(),
        .run_ticker = run_ticker};
    char hostname[256] = {};
    gethostname(hostname, sizeof(hostname) - 1);
    if (options.etcd.replica_id.empty()) {
      options.etcd.replica_id = hostname[0] != 0 ? hostname : "planner";
    }
    if (options.etcd.advertise.empty()) {
      // The listen address with the port bound (listen may say port 0); a wildcard host is
      // replaced by the host name, which other replicas can at least try to resolve.
      std::string host = config.listen.substr(0, config.listen.rfind(':'));
      if (host.empty() || host == "0.0.0.0" || host == "[::]" || host == "::") host = hostname;
      options.etcd.advertise = absl::StrCat(host, ":", server->port_);
    }
    CACHEROUTE_ASSIGN_OR_RETURN(server->ha_,
                                HaReplica::Create(std::move(options), server->core_.get()));
    if (absl::Status s = server->ha_->Start(); !s.ok()) return s;
    server->services_->set_ha(server->ha_.get());
#else
    return absl::FailedPreconditionError(
        "etcd: this cacheroute-planner was built without etcd support (CACHEROUTE_ETCD=OFF)");
#endif
  }
  if (!config.metrics_listen.empty()) {
    std::function<v1::HaStatus()> ha_status;
    if (HaReplica* ha = server->ha_.get()) ha_status = [ha] { return HaStatusOf(ha); };
    absl::StatusOr<std::unique_ptr<MetricsServer>> metrics =
        MetricsServer::Start(config.metrics_listen, server->core_.get(), clock, ha_status,
                             [share = server->share_.get()] { return share->Stats(); });
    if (!metrics.ok()) return metrics.status();
    server->metrics_ = *std::move(metrics);
  }

  // With replicas, HaReplica runs the control interval (only its leader plans).
  if (run_ticker && !config.etcd.enabled) {
    PlannerServer* raw = server.get();
    ControlSchedule schedule(config.control_interval,
                             config.gate_enabled ? config.gate_interval : absl::ZeroDuration());
    server->ticker_ = std::thread([raw, schedule]() mutable {
      const absl::Time start = absl::Now();
      while (!raw->shutdown_.WaitForNotificationWithDeadline(start + schedule.next())) {
        LogPlanOutcome(schedule.Take() == ControlSchedule::Step::kPlan ? raw->core_->Replan()
                                                                       : raw->core_->ObserveGate());
        // A step that overran the next one's time: the next comes a whole interval later.
        if (start + schedule.next() < absl::Now()) schedule.Restart(absl::Now() - start);
      }
    });
  }
  return server;
}

void PlannerServer::Shutdown() {
  {
    absl::MutexLock lock(&shutdown_mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  shutdown_.Notify();
  if (ticker_.joinable()) ticker_.join();
#ifdef CACHEROUTE_HAVE_ETCD
  if (ha_ != nullptr) {
    // Hands leadership over at once; then this replica neither plans nor publishes.
    if (absl::Status s = ha_->Resign(); !s.ok()) {
      base::LogEvent("warning", "ha_resign_failed", {{"error", std::string(s.message())}});
    }
  }
#endif
  metrics_.reset();
  // Share streams never end on their own: end them so that the server stops at once.
  if (share_ != nullptr) share_->Shutdown();
  if (server_ != nullptr) {
    server_->GetHealthCheckService()->SetServingStatus(false);
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  }
}

void PlannerServer::Wait() { shutdown_.WaitForNotification(); }

PlannerServer::~PlannerServer() {
  Shutdown();
  server_.reset();
  share_.reset();
  services_.reset();
  ha_.reset();
}

}  // namespace cacheroute::service
