// InProcessPlanner: the real PlannerServer on a loopback port, for tests of gRPC clients (the
// dataplane's subscriber and reporter, the gateway). Time is a base::ManualClock and plans
// happen only through Replan(), so what the planner publishes is exact. Stop() and Start() restart
// it on the same port and state directory, as a crashed and restarted planner would come back.
#pragma once

#include <grpcpp/grpcpp.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "base/clock.h"
#include "cacheroute/v1/admin.grpc.pb.h"
#include "cacheroute/v1/rates.grpc.pb.h"
#include "planner/key_id.h"
#include "planner/service/planner_server.h"
#include "tests/support/eventually.h"
#include "tests/support/rate_reports.h"
#include "tests/support/require_ok.h"

namespace cacheroute::testing {

class InProcessPlanner {
 public:
  // `credentials`: how the fixture's own calls reach the planner (plaintext when null; a TLS
  // planner needs SslCredentials trusting its CA). They carry config.token when it is set.
  explicit InProcessPlanner(service::PlannerConfig config,
                            std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr)
      : config_(std::move(config)),
        credentials_(credentials != nullptr ? std::move(credentials)
                                            : grpc::InsecureChannelCredentials()),
        clock_(absl::FromUnixSeconds(1'800'000'000)) {
    Start();
  }

  // Starts (or restarts) the planner; after the first start it keeps the same port.
  void Start() {
    server_ = cacheroute::testing::RequireOk(
        service::PlannerServer::Start(config_, &clock_, /*run_ticker=*/false));
    if (port_ == 0) {
      port_ = server_->port();
      config_.listen = absl::StrCat("127.0.0.1:", port_);
    }
    auto channel = grpc::CreateChannel(target(), credentials_);
    rates_ = v1::RateService::NewStub(channel);
    admin_ = v1::AdminService::NewStub(channel);
  }
  void Stop() { server_.reset(); }
  bool running() const { return server_ != nullptr; }
  service::PlannerCore& core() { return server_->core(); }

  std::string target() const { return absl::StrCat("127.0.0.1:", port_); }
  std::shared_ptr<grpc::Channel> NewChannel() const {
    return grpc::CreateChannel(target(), grpc::InsecureChannelCredentials());
  }

  // Reports `counts` (key → requests in the last 10 s) as gateway `gateway`.
  void Report(const std::string& gateway, uint64_t sequence,
              const std::vector<std::pair<std::string, double>>& counts) {
    const v1::ReportRatesRequest request = MakeRateReport(gateway, sequence, clock_.Now(), counts);
    grpc::ClientContext context;
    Authorize(context);
    v1::ReportRatesResponse response;
    grpc::Status status = rates_->ReportRates(&context, request, &response);
    INFO(status.error_message());
    REQUIRE(status.ok());
  }

  // Lets 100 s of planner time pass, then plans.
  v1::ReplanResponse Replan() {
    clock_.Advance(absl::Seconds(100));
    return CallAdmin(&v1::AdminService::Stub::Replan);
  }

  v1::GetStatusResponse Status() { return CallAdmin(&v1::AdminService::Stub::GetStatus); }

  // The last report sequence the planner has from `gateway` (0 when it has none).
  uint64_t LastSequence(const std::string& gateway) {
    const v1::GetStatusResponse status = Status();
    for (const auto& g : status.gateways()) {
      if (g.gateway_id() == gateway) return g.last_sequence();
    }
    return 0;
  }

  base::ManualClock& clock() { return clock_; }

 private:
  void Authorize(grpc::ClientContext& context) const {
    if (!config_.token.empty()) context.AddMetadata("authorization", "Bearer " + config_.token);
  }

  // An AdminService call with an empty request, which must succeed.
  template <typename Request, typename Response>
  Response CallAdmin(grpc::Status (v1::AdminService::Stub::*method)(grpc::ClientContext*,
                                                                    const Request&, Response*)) {
    grpc::ClientContext context;
    Authorize(context);
    Response response;
    grpc::Status status = (admin_.get()->*method)(&context, Request(), &response);
    INFO(status.error_message());
    REQUIRE(status.ok());
    return response;
  }

  service::PlannerConfig config_;
  std::shared_ptr<grpc::ChannelCredentials> credentials_;
  base::ManualClock clock_;
  int port_ = 0;
  std::unique_ptr<service::PlannerServer> server_;
  std::unique_ptr<v1::RateService::Stub> rates_;
  std::unique_ptr<v1::AdminService::Stub> admin_;
};

}  // namespace cacheroute::testing
