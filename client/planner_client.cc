// See planner_client.h.
#include "client/planner_client.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/status_macros.h"
#include "client/text_format.h"
#include "grpc/support/log.h"

namespace cacheroute::client {
namespace {

absl::StatusOr<std::string> ReadCaFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-ca: cannot read ", QuoteForMessage(path)));
  }
  std::stringstream text;
  text << in.rdbuf();
  if (text.str().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-ca: ", QuoteForMessage(path), " is empty; expected PEM certificates"));
  }
  return text.str();
}

}  // namespace

absl::StatusOr<std::unique_ptr<PlannerClient>> PlannerClient::Connect(
    const PlannerOptions& options) {
  // gRPC logs failures (TLS handshakes, connection errors) on stderr by itself; the command
  // reports them as its one error line instead.
  gpr_set_log_function([](gpr_log_func_args*) {});
  std::vector<std::string> addresses;
  for (absl::string_view part : absl::StrSplit(options.address, ',')) {
    part = absl::StripAsciiWhitespace(part);
    if (part.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--planner: expected HOST:PORT or a comma-separated list of them, got ",
                       QuoteForMessage(options.address)));
    }
    addresses.emplace_back(part);
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (!options.tls_ca_file.empty()) {
    CACHEROUTE_ASSIGN_OR_RETURN(std::string ca, ReadCaFile(options.tls_ca_file));
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = std::move(ca);
    credentials = grpc::SslCredentials(ssl);
  }
  grpc::ChannelArguments args;
  // Whole routing tables (GetTable) can exceed gRPC's default 4 MiB receive limit.
  args.SetMaxReceiveMessageSize(-1);
  // One channel per address, so that every failure can be told by its address.
  std::vector<Replica> replicas;
  for (std::string& address : addresses) {
    Replica replica;
    replica.channel = grpc::CreateCustomChannel(address, credentials, args);
    replica.rates = v1::RateService::NewStub(replica.channel);
    replica.tables = v1::TableService::NewStub(replica.channel);
    replica.admin = v1::AdminService::NewStub(replica.channel);
    replica.address = std::move(address);
    replicas.push_back(std::move(replica));
  }
  return std::unique_ptr<PlannerClient>(new PlannerClient(options, std::move(replicas)));
}

PlannerClient::PlannerClient(PlannerOptions options, std::vector<Replica> replicas)
    : options_(std::move(options)), replicas_(std::move(replicas)) {}

void PlannerClient::PrepareStreamContext(grpc::ClientContext* context) const {
  if (!options_.token.empty()) {
    context->AddMetadata("authorization", absl::StrCat("Bearer ", options_.token));
  }
}

absl::Status PlannerClient::ToStatus(absl::string_view call, const grpc::Status& status) const {
  return ToStatusFor(address(), call, status);
}

absl::Status PlannerClient::ToStatusFor(const std::string& address, absl::string_view call,
                                        const grpc::Status& status) const {
  if (status.ok()) return absl::OkStatus();
  const std::string& message = status.error_message();
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      return absl::UnavailableError(
          absl::StrCat("planner ", address, " unavailable (", call, "): ", message));
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return absl::DeadlineExceededError(
          absl::StrCat("planner ", address, " did not answer ", call, " within ",
                       absl::StrCat(options_.deadline.count() / 1000.0), " s"));
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::PERMISSION_DENIED:
      return absl::Status(
          static_cast<absl::StatusCode>(status.error_code()),
          absl::StrCat("planner ", address, " refused ", call, ": ", message,
                       options_.token.empty() ? " (pass --token or set CACHEROUTE_TOKEN)"
                                              : " (check --token)"));
    default:
      return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                          absl::StrCat(call, ": ", message));
  }
}

template <typename Response, typename Invoke>
absl::StatusOr<Response> PlannerClient::Unary(absl::string_view call, Invoke invoke) {
  std::vector<std::string> failures;  // one message per address that did not answer
  for (size_t tried = 0; tried < replicas_.size(); ++tried) {
    const size_t index = (current_ + tried) % replicas_.size();
    grpc::ClientContext context;
    PrepareStreamContext(&context);
    context.set_deadline(std::chrono::system_clock::now() + options_.deadline);
    Response response;
    const grpc::Status status = invoke(replicas_[index], &context, &response);
    const bool unreachable = status.error_code() == grpc::StatusCode::UNAVAILABLE ||
                             status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
    if (!unreachable) current_ = index;  // it answered, whatever it said
    if (status.ok()) return response;
    absl::Status error = ToStatusFor(replicas_[index].address, call, status);
    if (!unreachable) return error;
    failures.emplace_back(error.message());
    if (tried + 1 == replicas_.size())
      return absl::Status(error.code(), absl::StrJoin(failures, "; "));
  }
  return absl::InternalError("unreachable");
}

absl::StatusOr<v1::GetStatusResponse> PlannerClient::GetStatus() {
  return Unary<v1::GetStatusResponse>("GetStatus", [&](Replica& r, auto* context, auto* response) {
    return r.admin->GetStatus(context, v1::GetStatusRequest(), response);
  });
}

absl::StatusOr<v1::RoutingTable> PlannerClient::GetTable(const v1::Version& version) {
  v1::GetTableRequest request;
  *request.mutable_version() = version;
  return Unary<v1::RoutingTable>("GetTable", [&](Replica& r, auto* context, auto* response) {
    return r.tables->GetTable(context, request, response);
  });
}

absl::StatusOr<v1::ExplainResponse> PlannerClient::Explain(const v1::ExplainRequest& request) {
  return Unary<v1::ExplainResponse>("Explain", [&](Replica& r, auto* context, auto* response) {
    return r.admin->Explain(context, request, response);
  });
}

absl::StatusOr<v1::DiffResponse> PlannerClient::Diff(const v1::DiffRequest& request) {
  return Unary<v1::DiffResponse>("Diff", [&](Replica& r, auto* context, auto* response) {
    return r.admin->Diff(context, request, response);
  });
}

absl::StatusOr<v1::ReplanResponse> PlannerClient::Replan() {
  return Unary<v1::ReplanResponse>("Replan", [&](Replica& r, auto* context, auto* response) {
    return r.admin->Replan(context, v1::ReplanRequest(), response);
  });
}

absl::StatusOr<v1::SetDestinationsResponse> PlannerClient::SetDestinations(
    const v1::SetDestinationsRequest& request) {
  return Unary<v1::SetDestinationsResponse>(
      "SetDestinations", [&](Replica& r, auto* context, auto* response) {
        return r.admin->SetDestinations(context, request, response);
      });
}

absl::StatusOr<v1::DrainResponse> PlannerClient::Drain(const v1::DrainRequest& request) {
  return Unary<v1::DrainResponse>("Drain", [&](Replica& r, auto* context, auto* response) {
    return r.admin->Drain(context, request, response);
  });
}

absl::StatusOr<v1::GateStatus> PlannerClient::ForceGate(const v1::ForceGateRequest& request) {
  return Unary<v1::GateStatus>("ForceGate", [&](Replica& r, auto* context, auto* response) {
    return r.admin->ForceGate(context, request, response);
  });
}

absl::StatusOr<v1::ReportRatesResponse> PlannerClient::ReportRates(
    const v1::ReportRatesRequest& request) {
  return Unary<v1::ReportRatesResponse>("ReportRates",
                                        [&](Replica& r, auto* context, auto* response) {
                                          return r.rates->ReportRates(context, request, response);
                                        });
}

}  // namespace cacheroute::client
