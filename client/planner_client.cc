// See planner_client.h.
#include "client/planner_client.h"

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
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
  if (options.address.empty()) {
    return absl::InvalidArgumentError("--planner: expected HOST:PORT, got \"\"");
  }
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (!options.tls_ca_file.empty()) {
    absl::StatusOr<std::string> ca = ReadCaFile(options.tls_ca_file);
    if (!ca.ok()) return ca.status();
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = *std::move(ca);
    credentials = grpc::SslCredentials(ssl);
  }
  grpc::ChannelArguments args;
  // Whole routing tables (GetTable) can exceed gRPC's default 4 MiB receive limit.
  args.SetMaxReceiveMessageSize(-1);
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(options.address, credentials, args);
  return std::unique_ptr<PlannerClient>(new PlannerClient(options, std::move(channel)));
}

PlannerClient::PlannerClient(PlannerOptions options, std::shared_ptr<grpc::Channel> channel)
    : options_(std::move(options)),
      channel_(std::move(channel)),
      rates_(v1::RateService::NewStub(channel_)),
      tables_(v1::TableService::NewStub(channel_)),
      admin_(v1::AdminService::NewStub(channel_)) {}

void PlannerClient::PrepareStreamContext(grpc::ClientContext* context) const {
  if (!options_.token.empty()) {
    context->AddMetadata("authorization", absl::StrCat("Bearer ", options_.token));
  }
}

absl::Status PlannerClient::ToStatus(absl::string_view call, const grpc::Status& status) const {
  if (status.ok()) return absl::OkStatus();
  const std::string& message = status.error_message();
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
      return absl::UnavailableError(
          absl::StrCat("planner ", options_.address, " unavailable (", call, "): ", message));
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return absl::DeadlineExceededError(
          absl::StrCat("planner ", options_.address, " did not answer ", call, " within ",
                       absl::StrCat(options_.deadline.count() / 1000.0), " s"));
    case grpc::StatusCode::UNAUTHENTICATED:
    case grpc::StatusCode::PERMISSION_DENIED:
      return absl::Status(
          static_cast<absl::StatusCode>(status.error_code()),
          absl::StrCat("planner ", options_.address, " refused ", call, ": ", message,
                       options_.token.empty() ? " (pass --token or set CACHEROUTE_TOKEN)"
                                              : " (check --token)"));
    default:
      return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                          absl::StrCat(call, ": ", message));
  }
}

template <typename Response, typename Invoke>
absl::StatusOr<Response> PlannerClient::Unary(absl::string_view call, Invoke invoke) {
  grpc::ClientContext context;
  PrepareStreamContext(&context);
  context.set_deadline(std::chrono::system_clock::now() + options_.deadline);
  Response response;
  const grpc::Status status = invoke(&context, &response);
  if (!status.ok()) return ToStatus(call, status);
  return response;
}

absl::StatusOr<v1::GetStatusResponse> PlannerClient::GetStatus() {
  return Unary<v1::GetStatusResponse>("GetStatus", [&](auto* context, auto* response) {
    return admin_->GetStatus(context, v1::GetStatusRequest(), response);
  });
}

absl::StatusOr<v1::RoutingTable> PlannerClient::GetTable(const v1::Version& version) {
  v1::GetTableRequest request;
  *request.mutable_version() = version;
  return Unary<v1::RoutingTable>("GetTable", [&](auto* context, auto* response) {
    return tables_->GetTable(context, request, response);
  });
}

absl::StatusOr<v1::ExplainResponse> PlannerClient::Explain(const v1::ExplainRequest& request) {
  return Unary<v1::ExplainResponse>("Explain", [&](auto* context, auto* response) {
    return admin_->Explain(context, request, response);
  });
}

absl::StatusOr<v1::DiffResponse> PlannerClient::Diff(const v1::DiffRequest& request) {
  return Unary<v1::DiffResponse>("Diff", [&](auto* context, auto* response) {
    return admin_->Diff(context, request, response);
  });
}

absl::StatusOr<v1::ReplanResponse> PlannerClient::Replan() {
  return Unary<v1::ReplanResponse>("Replan", [&](auto* context, auto* response) {
    return admin_->Replan(context, v1::ReplanRequest(), response);
  });
}

absl::StatusOr<v1::SetDestinationsResponse> PlannerClient::SetDestinations(
    const v1::SetDestinationsRequest& request) {
  return Unary<v1::SetDestinationsResponse>("SetDestinations", [&](auto* context, auto* response) {
    return admin_->SetDestinations(context, request, response);
  });
}

absl::StatusOr<v1::DrainResponse> PlannerClient::Drain(const v1::DrainRequest& request) {
  return Unary<v1::DrainResponse>("Drain", [&](auto* context, auto* response) {
    return admin_->Drain(context, request, response);
  });
}

absl::StatusOr<v1::GateStatus> PlannerClient::ForceGate(const v1::ForceGateRequest& request) {
  return Unary<v1::GateStatus>("ForceGate", [&](auto* context, auto* response) {
    return admin_->ForceGate(context, request, response);
  });
}

absl::StatusOr<v1::ReportRatesResponse> PlannerClient::ReportRates(
    const v1::ReportRatesRequest& request) {
  return Unary<v1::ReportRatesResponse>("ReportRates", [&](auto* context, auto* response) {
    return rates_->ReportRates(context, request, response);
  });
}

}  // namespace cacheroute::client
