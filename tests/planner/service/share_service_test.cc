// ShareService (planner/service/share_service.h) over real gRPC on a loopback port: a batch one
// gateway publishes reaches every other gateway and never its sender, the recent past first on a
// new stream; a malformed batch or a second gateway id ends the stream with INVALID_ARGUMENT
// naming the field; the bearer token is required; a stopping planner ends the streams.
#include "planner/service/share_service.h"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "base/clock.h"
#include "cacheroute/v1/share.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "support/planner_fixture.h"
#include "tests/support/planner_config.h"

namespace cacheroute::service {
namespace {

v1::ShareRequest Batch(const std::string& gateway, uint64_t key_id, uint64_t sequence) {
  v1::ShareRequest request;
  request.set_sequence(sequence);
  v1::ShareBatch* batch = request.mutable_batch();
  batch->set_gateway_id(gateway);
  batch->add_destinations("d0");
  batch->add_destinations("d1");
  v1::SharedPlacement* p = batch->add_placements();
  p->set_key_id(key_id);
  p->set_has_key(true);
  p->set_destination(1);
  p->set_prompt_tokens(100);
  return request;
}

// One gateway's Share stream, with a deadline so that a test that goes wrong fails, not hangs.
struct Stream {
  Stream(testing::InProcessPlanner& planner, const std::string& token = "")
      : stub(v1::ShareService::NewStub(planner.NewChannel())) {
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
    stream = stub->Share(&context);
  }
  // The next batch received; false when the stream ended first.
  bool Next(v1::ShareBatch& out) {
    while (pending.empty()) {
      v1::ShareUpdate update;
      if (!stream->Read(&update)) return false;
      for (const v1::ShareBatch& b : update.batches()) pending.push_back(b);
    }
    out = pending.front();
    pending.erase(pending.begin());
    return true;
  }
  grpc::Status End() {
    stream->WritesDone();
    v1::ShareUpdate update;
    while (stream->Read(&update)) {
    }
    return stream->Finish();
  }

  std::unique_ptr<v1::ShareService::Stub> stub;
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReaderWriter<v1::ShareRequest, v1::ShareUpdate>> stream;
  std::vector<v1::ShareBatch> pending;
};

TEST_CASE("a batch from one gateway reaches the other, never its sender") {
  testing::InProcessPlanner planner(testing::LoopbackPlannerConfig({"d0", "d1"}));
  Stream a(planner);
  Stream b(planner);
  REQUIRE(a.stream->Write(Batch("gw-a", 11, 1)));
  // B's first batch subscribes it: A's earlier batch comes from the exchange's recent past.
  REQUIRE(b.stream->Write(Batch("gw-b", 22, 1)));
  v1::ShareBatch got;
  REQUIRE(b.Next(got));
  CHECK(got.gateway_id() == "gw-a");
  REQUIRE(got.placements_size() == 1);
  CHECK(got.placements(0).key_id() == 11);
  CHECK(got.destinations(1) == "d1");
  // A sees B's batch, then B sees A's next one as it is published.
  REQUIRE(a.Next(got));
  CHECK(got.gateway_id() == "gw-b");
  CHECK(got.placements(0).key_id() == 22);
  REQUIRE(a.stream->Write(Batch("gw-a", 33, 2)));
  REQUIRE(b.Next(got));
  CHECK(got.gateway_id() == "gw-a");
  CHECK(got.placements(0).key_id() == 33);
  // Nothing of A's own ever comes back to A: after B's stream ends, A's holds nothing more.
  REQUIRE(b.End().ok());
  a.stream->WritesDone();
  while (a.Next(got)) CHECK(got.gateway_id() != "gw-a");
  CHECK(a.stream->Finish().ok());
}

TEST_CASE("a malformed batch ends the stream with INVALID_ARGUMENT naming the field") {
  testing::InProcessPlanner planner(testing::LoopbackPlannerConfig({"d0", "d1"}));
  Stream watcher(planner);
  REQUIRE(watcher.stream->Write(Batch("gw-w", 1, 1)));

  SECTION("a placement's destination outside the batch's names") {
    Stream bad(planner);
    v1::ShareRequest request = Batch("gw-bad", 5, 1);
    request.mutable_batch()->mutable_placements(0)->set_destination(7);
    REQUIRE(bad.stream->Write(request));
    const grpc::Status status = bad.End();
    CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(status.error_message(), Catch::Contains("placements[0].destination"));
  }
  SECTION("a second gateway id on one stream") {
    Stream bad(planner);
    REQUIRE(bad.stream->Write(Batch("gw-one", 5, 1)));
    REQUIRE(bad.stream->Write(Batch("gw-two", 6, 2)));
    const grpc::Status status = bad.End();
    CHECK(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
    CHECK_THAT(status.error_message(), Catch::Contains("gateway_id"));
    CHECK_THAT(status.error_message(), Catch::Contains("gw-two"));
  }
  // Nothing of a refused batch was forwarded: the watcher got at most gw-one's first batch.
  watcher.stream->WritesDone();
  v1::ShareBatch got;
  while (watcher.Next(got)) {
    CHECK(got.gateway_id() != "gw-bad");
    CHECK(got.gateway_id() != "gw-two");
  }
  CHECK(watcher.stream->Finish().ok());
}

TEST_CASE("a share stream needs the planner's bearer token") {
  service::PlannerConfig config = testing::LoopbackPlannerConfig({"d0", "d1"});
  config.token = "s3cret";
  testing::InProcessPlanner planner(config);
  Stream without(planner);
  without.stream->Write(Batch("gw-a", 1, 1));
  CHECK(without.End().error_code() == grpc::StatusCode::UNAUTHENTICATED);
  Stream with(planner, "s3cret");
  REQUIRE(with.stream->Write(Batch("gw-a", 1, 1)));
  CHECK(with.End().ok());
}

TEST_CASE("a stopping planner ends the share streams") {
  testing::InProcessPlanner planner(testing::LoopbackPlannerConfig({"d0", "d1"}));
  Stream a(planner);
  Stream b(planner);
  REQUIRE(a.stream->Write(Batch("gw-a", 1, 1)));
  REQUIRE(b.stream->Write(Batch("gw-b", 2, 1)));
  // Once A has B's batch, A's stream is one the service holds (not a call still arriving, which
  // the server would cancel instead).
  v1::ShareBatch got;
  REQUIRE(a.Next(got));
  planner.Stop();
  CHECK_FALSE(a.Next(got));
  CHECK(a.stream->Finish().error_code() == grpc::StatusCode::UNAVAILABLE);
}

TEST_CASE("a replica that does not serve sharing refuses streams, and ends them when it stops") {
  // The ShareService alone on a loopback port, with the serving check a replicated planner gives
  // it (only the leader serves).
  base::RealClock clock;
  std::atomic<bool> leading{false};
  ShareService share({}, clock, nullptr, [&leading] {
    return leading.load() ? grpc::Status::OK
                          : grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                                         "not the leader: fleet sharing is the leader's");
  });
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&share);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  REQUIRE(server != nullptr);
  const std::shared_ptr<grpc::Channel> channel =
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
  auto open = [&channel](grpc::ClientContext& context) {
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    return v1::ShareService::NewStub(channel)->Share(&context);
  };
  {
    grpc::ClientContext context;
    auto stream = open(context);
    stream->Write(Batch("gw-a", 1, 1));
    stream->WritesDone();
    v1::ShareUpdate update;
    while (stream->Read(&update)) {
    }
    const grpc::Status status = stream->Finish();
    CHECK(status.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
    CHECK(absl::StrContains(status.error_message(), "not the leader"));
  }
  leading = true;
  grpc::ClientContext context;
  auto stream = open(context);
  REQUIRE(stream->Write(Batch("gw-a", 1, 1)));
  leading = false;  // leadership lost: the next batch ends the stream
  stream->Write(Batch("gw-a", 2, 2));
  v1::ShareUpdate update;
  while (stream->Read(&update)) {
  }
  CHECK(stream->Finish().error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  share.Shutdown();
  server->Shutdown();
}

}  // namespace
}  // namespace cacheroute::service
