// Fuzz target: routing tables and table updates from the wire, on the gateway's side.
// The input is split at kSeparator: the first part is a v1::RoutingTable (as GetTable or a table
// cache file brings it), every later part a v1::TableUpdate of one stream (chunks, full tables,
// deltas), in order.
//   RoutingTable → TableSnapshot::FromProto; an accepted snapshot keeps the snapshot invariants
//     (table_snapshot.h), round-trips through ToProto → FromProto to an equal table, converts to
//     the dataplane's RoutingTable (TableSubscriber::Convert, as the subscriber installs it: with
//     known names always; with unknown names ignored always), and a delta from a base table to
//     it (ComputeDelta → ApplyDelta) routes like it.
//   TableUpdate → TableClientState::OnUpdate (chunk reassembly, FromProto, ApplyDelta, the
//     subscriber's acceptor): an ACK moves current() to a valid table at the answered version,
//     never backwards; a NACK, a missing chunk or an error leaves current() as it was.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "cacheroute/dataplane/grpc/table_subscriber.h"
#include "cacheroute/dataplane/random.h"
#include "cacheroute/dataplane/router.h"
#include "cacheroute/v1/table.pb.h"
#include "proto/table/table_client_state.h"
#include "proto/table/table_snapshot.h"
#include "tests/fuzz/fuzz_check.h"

namespace cacheroute::fuzz {
namespace {

using table::TableEntry;
using table::TableSnapshot;
using table::TableVersion;

constexpr std::string_view kSeparator = "\n--cacheroute-fuzz--\n";
const std::vector<std::string> kGatewayDestinations = {"d0", "d1", "d2", "d3", "d4", "d5"};

// A Router and a never-started TableSubscriber over it: only Convert is used (no stream, no
// thread; the channel is never connected).
struct Subscriber {
  dataplane::SeededRandom random{1};
  dataplane::Router router;
  dataplane::TableSubscriber subscriber;
  explicit Subscriber(bool ignore_unknown)
      : router(dataplane::RouterOptions{.destination_count =
                                            static_cast<uint32_t>(kGatewayDestinations.size())},
               random),
        subscriber(grpc::CreateChannel("127.0.0.1:1", grpc::InsecureChannelCredentials()), router,
                   {.gateway_id = "gw-fuzz",
                    .destinations = kGatewayDestinations,
                    .ignore_unknown_destinations = ignore_unknown}) {}
};

Subscriber& Strict() {
  static Subscriber* s = new Subscriber(false);
  return *s;
}
Subscriber& Lenient() {
  static Subscriber* s = new Subscriber(true);
  return *s;
}

// The table a stream starts from when the input's first part is not a valid one: version 5.10.
std::shared_ptr<const TableSnapshot> DefaultBase() {
  static const std::shared_ptr<const TableSnapshot> base = TableSnapshot::FromEntries(
      {5, 10}, {"d0", "d1", "d2", "d3"}, {4, 3, 2, 1},
      {{.key_id = 11, .rate = 4, .destinations = {0}, .key = "a", .spill = 1},
       {.key_id = 22, .rate = 3, .destinations = {1, 2}, .key = "b"},
       {.key_id = 33, .rate = 1, .destinations = {3}, .key = ""}},
      1'800'000'000'000, 60);
  return base;
}

void CheckInvariants(const TableSnapshot& t) {
  const size_t n = t.destinations().size();
  FUZZ_CHECK(n >= 1);
  FUZZ_CHECK(t.expected_loads().size() == n);
  for (size_t i = 0; i < n; ++i) {
    FUZZ_CHECK(!t.destinations()[i].empty());
    FUZZ_CHECK(std::isfinite(t.expected_loads()[i]) && t.expected_loads()[i] >= 0);
    for (size_t j = 0; j < i; ++j) FUZZ_CHECK(t.destinations()[i] != t.destinations()[j]);
  }
  FUZZ_CHECK(std::isfinite(t.ttl_seconds()) && t.ttl_seconds() >= 0);
  FUZZ_CHECK(t.built_unix_ms() >= 0);
  for (size_t i = 0; i < t.entries().size(); ++i) {
    const TableEntry& e = t.entries()[i];
    FUZZ_CHECK(std::isfinite(e.rate) && e.rate >= 0);
    FUZZ_CHECK(i == 0 || t.entries()[i - 1].rate >= e.rate, "entries not hottest first");
    FUZZ_CHECK(!e.destinations.empty());
    for (size_t j = 0; j < e.destinations.size(); ++j) {
      FUZZ_CHECK(e.destinations[j] < n);
      FUZZ_CHECK(j == 0 || e.destinations[j - 1] < e.destinations[j]);
    }
    if (e.spill.has_value()) {
      FUZZ_CHECK(*e.spill < n);
      FUZZ_CHECK(!std::binary_search(e.destinations.begin(), e.destinations.end(), *e.spill));
    }
    const TableEntry* found = t.Find(e.key_id);
    FUZZ_CHECK(found == &e, "Find does not return the entry (repeated key_id?)");
  }
}

void CheckEqual(const TableSnapshot& a, const TableSnapshot& b) {
  FUZZ_CHECK(a.version() == b.version());
  FUZZ_CHECK(a.destinations() == b.destinations());
  FUZZ_CHECK(a.expected_loads() == b.expected_loads());
  FUZZ_CHECK(a.entries() == b.entries());
  FUZZ_CHECK(a.built_unix_ms() == b.built_unix_ms());
  FUZZ_CHECK(a.ttl_seconds() == b.ttl_seconds());
  FUZZ_CHECK(a.SameRouting(b) && b.SameRouting(a));
}

// Convert as the dataplane's subscriber does, and check the result routes like the snapshot.
void CheckConvert(const TableSnapshot& t) {
  bool all_known = true;
  std::vector<uint32_t> index(t.destinations().size(), dataplane::kNoDestination);
  for (size_t i = 0; i < t.destinations().size(); ++i) {
    const auto it = std::find(kGatewayDestinations.begin(), kGatewayDestinations.end(),
                              t.destinations()[i]);
    if (it == kGatewayDestinations.end()) {
      all_known = false;
    } else {
      index[i] = static_cast<uint32_t>(it - kGatewayDestinations.begin());
    }
  }
  dataplane::Result<dataplane::RoutingTable> strict = Strict().subscriber.Convert(t);
  FUZZ_CHECK(strict.ok() == all_known, strict.ok() ? "" : strict.status().message);
  dataplane::Result<dataplane::RoutingTable> lenient = Lenient().subscriber.Convert(t);
  FUZZ_CHECK(lenient.ok(), lenient.status().message);
  const dataplane::RoutingTable& rt = *lenient;
  FUZZ_CHECK((rt.version() == dataplane::TableVersion{t.version().epoch, t.version().number}));
  for (const TableEntry& e : t.entries()) {
    std::vector<uint32_t> want;
    for (uint32_t d : e.destinations) {
      if (index[d] != dataplane::kNoDestination) want.push_back(index[d]);
    }
    std::sort(want.begin(), want.end());
    const dataplane::DestinationSet got = rt.Find(e.key_id);
    FUZZ_CHECK(got.ToVector() == want, "converted destination set differs");
    if (!want.empty()) {
      const uint32_t spill = e.spill.has_value() ? index[*e.spill] : dataplane::kNoDestination;
      FUZZ_CHECK(got.spill() == (spill == dataplane::kNoDestination ? dataplane::kNoSpill : spill));
    }
  }
}

// ApplyDelta(base, ComputeDelta(base, target)) routes like target.
void CheckDelta(const TableSnapshot& base, const TableSnapshot& target_in) {
  std::shared_ptr<const TableSnapshot> target = target_in.weak_from_this().lock();
  if (!(base.version() < target->version())) {
    if (base.version().number == UINT64_MAX) return;
    target = target->WithVersion({base.version().epoch, base.version().number + 1});
  }
  const v1::TableDelta delta = table::ComputeDelta(base, *target);
  absl::StatusOr<std::shared_ptr<const TableSnapshot>> applied = table::ApplyDelta(base, delta);
  FUZZ_CHECK(applied.ok(), applied.status().ToString());
  CheckInvariants(**applied);
  FUZZ_CHECK((*applied)->SameRouting(*target), "a computed delta does not reproduce its target");
  FUZZ_CHECK((*applied)->version() == target->version());
  const table::TableDiff diff = table::Diff(base, *target);
  FUZZ_CHECK(diff.churn >= 0 && diff.churn <= 1);
}

// An accepted snapshot: every check above.
void CheckSnapshot(const TableSnapshot& t) {
  CheckInvariants(t);
  absl::StatusOr<std::shared_ptr<const TableSnapshot>> back = TableSnapshot::FromProto(t.ToProto());
  FUZZ_CHECK(back.ok(), back.status().ToString());
  CheckEqual(t, **back);
  CheckConvert(t);
}

}  // namespace
}  // namespace cacheroute::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cacheroute;
  using namespace cacheroute::fuzz;
  const std::vector<std::string_view> parts =
      Split(std::string_view(reinterpret_cast<const char*>(data), size), kSeparator);

  std::shared_ptr<const TableSnapshot> base = DefaultBase();
  v1::RoutingTable proto;
  if (proto.ParseFromArray(parts[0].data(), static_cast<int>(parts[0].size()))) {
    absl::StatusOr<std::shared_ptr<const TableSnapshot>> snapshot = TableSnapshot::FromProto(proto);
    if (snapshot.ok()) {
      CheckSnapshot(**snapshot);
      CheckDelta(*DefaultBase(), **snapshot);
      CheckDelta(**snapshot, *DefaultBase());
      if (!(*snapshot)->version().IsZero()) base = *snapshot;
    } else {
      FUZZ_CHECK(snapshot.status().code() == absl::StatusCode::kInvalidArgument,
                 snapshot.status().ToString());
    }
  }
  if (parts.size() == 1) return 0;

  table::TableClientState state("gw-fuzz", base);
  // As the dataplane's subscriber: a table the gateway cannot route by is NACKed.
  state.SetAcceptor([](const TableSnapshot& t) -> absl::Status {
    dataplane::Result<dataplane::RoutingTable> converted = Strict().subscriber.Convert(t);
    if (!converted.ok()) return absl::InvalidArgumentError(converted.status().message);
    return absl::OkStatus();
  });
  const v1::StreamTableRequest hello = state.OnConnect();
  FUZZ_CHECK(TableVersion::FromProto(hello.applied_version()) == base->version());
  for (size_t i = 1; i < parts.size(); ++i) {
    v1::TableUpdate update;
    if (!update.ParseFromArray(parts[i].data(), static_cast<int>(parts[i].size()))) continue;
    const std::shared_ptr<const TableSnapshot> before = state.current();
    const uint64_t acks = state.acks_sent();
    const uint64_t nacks = state.nacks_sent();
    absl::StatusOr<std::optional<v1::StreamTableRequest>> answer = state.OnUpdate(update);
    if (!answer.ok() || !answer->has_value()) {
      FUZZ_CHECK(state.current() == before, "current() moved without an ACK");
      FUZZ_CHECK(state.acks_sent() == acks && state.nacks_sent() == nacks);
      if (!answer.ok()) {
        FUZZ_CHECK(answer.status().code() == absl::StatusCode::kInvalidArgument);
      }
      continue;
    }
    const v1::StreamTableRequest& reply = **answer;
    FUZZ_CHECK(reply.response_nonce() == update.nonce());
    FUZZ_CHECK(TableVersion::FromProto(reply.applied_version()) == state.version());
    if (reply.has_error()) {
      FUZZ_CHECK(reply.error().code() != 0);
      FUZZ_CHECK(state.current() == before, "a NACK moved current()");
      FUZZ_CHECK(state.nacks_sent() == nacks + 1 && state.acks_sent() == acks);
    } else {
      FUZZ_CHECK(state.acks_sent() == acks + 1 && state.nacks_sent() == nacks);
      FUZZ_CHECK(state.current() != nullptr);
      FUZZ_CHECK(before == nullptr || before->version() <= state.version(),
                 "an ACK went backwards");
      CheckSnapshot(*state.current());
    }
  }
  return 0;
}
