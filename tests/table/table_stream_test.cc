// Tests for proto/table/chunking, table_stream and table_client_state: chunking large updates
// and reassembling them, and the server's TableStream driven against the gateway's
// TableClientState through an in-memory loop (full first, ACK, deltas, coalescing for a slow
// gateway, NACKs, stale nonces, protocol violations, version regressions).
#include "proto/table/table_stream.h"

#include <google/protobuf/util/message_differencer.h>

#include <catch2/catch.hpp>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "proto/table/chunking.h"
#include "proto/table/table_client_state.h"
#include "proto/table/table_snapshot.h"

namespace cacheroute::table {
namespace {

using ::google::protobuf::util::MessageDifferencer;
using Snapshot = std::shared_ptr<const TableSnapshot>;

// ---------------------------------------------------------------------------------------------
// Chunking

// A full table with `n` assignments of 1–3 destinations each, keys "key-000123".
v1::TableUpdate BigFullUpdate(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  v1::TableUpdate update;
  update.set_nonce("big-1");
  v1::RoutingTable* t = update.mutable_full();
  t->mutable_version()->set_epoch(1);
  t->mutable_version()->set_number(9);
  for (int d = 0; d < 30; ++d) {
    t->add_destinations(absl::StrCat("vllm-", d));
    t->add_expected_loads(5.5);
  }
  for (size_t i = 0; i < n; ++i) {
    v1::Assignment* a = t->add_assignments();
    a->set_key_id(rng());
    const uint32_t first = static_cast<uint32_t>(rng() % 28);
    for (uint32_t d = first; d < first + 1 + i % 3; ++d) a->add_destinations(d);
    a->set_rate(1.0 / static_cast<double>(i + 1));
    a->set_key(absl::StrFormat("key-%06d", i));
  }
  t->set_built_unix_ms(1700000000000);
  t->set_ttl_seconds(60);
  return update;
}

// Feeds all chunks to a fresh assembler; the whole update, which must come with the last chunk.
v1::TableUpdate Reassemble(const std::vector<v1::TableUpdate>& chunks) {
  ChunkAssembler assembler;
  for (size_t i = 0; i < chunks.size(); ++i) {
    absl::StatusOr<std::optional<v1::TableUpdate>> whole = assembler.Add(chunks[i]);
    INFO("chunk " << i << ": " << whole.status().ToString());
    REQUIRE(whole.ok());
    if (i + 1 < chunks.size()) {
      REQUIRE_FALSE(whole->has_value());
    } else {
      REQUIRE(whole->has_value());
      CHECK_FALSE(assembler.in_progress());
      return **whole;
    }
  }
  FAIL("no chunks");
  return {};
}

TEST_CASE("Chunk splits a 200k-assignment table into chunks of at most 1 MiB") {
  constexpr size_t kMaxBytes = size_t{1} << 20;
  v1::TableUpdate original = BigFullUpdate(200000, 7);
  original.set_chunk_count(1);
  REQUIRE(original.ByteSizeLong() > 4 * kMaxBytes);

  std::vector<v1::TableUpdate> chunks = Chunk(original, kMaxBytes);
  REQUIRE(chunks.size() > 4);
  size_t assignments = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    INFO("chunk " << i);
    const v1::TableUpdate& c = chunks[i];
    CHECK(c.ByteSizeLong() <= kMaxBytes);
    CHECK(c.nonce() == "big-1");
    CHECK(c.chunk_index() == i);
    CHECK(c.chunk_count() == chunks.size());
    REQUIRE(c.has_full());
    CHECK(c.full().has_version() == (i == 0));
    CHECK(c.full().destinations_size() == (i == 0 ? 30 : 0));
    CHECK(c.full().expected_loads_size() == (i == 0 ? 30 : 0));
    CHECK(c.full().ttl_seconds() == (i == 0 ? 60 : 0));
    // Greedy packing leaves little room unused in all but the last chunk.
    if (i + 1 < chunks.size()) CHECK(c.ByteSizeLong() > kMaxBytes - 256);
    assignments += c.full().assignments_size();
  }
  CHECK(assignments == 200000);
  CHECK(MessageDifferencer::Equals(Reassemble(chunks), original));
}

TEST_CASE("Chunk splits a delta's upserts and packed removed ids") {
  constexpr size_t kMaxBytes = 256 << 10;
  v1::TableUpdate original = BigFullUpdate(30000, 11);
  v1::TableUpdate update;
  update.set_nonce("d-4");
  v1::TableDelta* d = update.mutable_delta();
  d->mutable_base()->set_number(3);
  d->mutable_version()->set_number(4);
  *d->mutable_destinations() = original.full().destinations();
  *d->mutable_expected_loads() = original.full().expected_loads();
  *d->mutable_upserts() = original.full().assignments();
  for (uint64_t id = 0; id < 100000; ++id) d->add_removed_key_ids(id * 7919);
  d->set_ttl_seconds(30);
  v1::TableUpdate expected = update;
  expected.set_chunk_count(1);

  std::vector<v1::TableUpdate> chunks = Chunk(update, kMaxBytes);
  REQUIRE(chunks.size() > 4);
  int upserts = 0, removed = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    INFO("chunk " << i);
    CHECK(chunks[i].ByteSizeLong() <= kMaxBytes);
    REQUIRE(chunks[i].has_delta());
    CHECK(chunks[i].delta().has_base() == (i == 0));
    upserts += chunks[i].delta().upserts_size();
    removed += chunks[i].delta().removed_key_ids_size();
  }
  CHECK(upserts == 30000);
  CHECK(removed == 100000);
  CHECK(MessageDifferencer::Equals(Reassemble(chunks), expected));
}

TEST_CASE("Chunk leaves an update that fits as one chunk") {
  v1::TableUpdate update = BigFullUpdate(10, 1);
  std::vector<v1::TableUpdate> chunks = Chunk(update, 1 << 20);
  REQUIRE(chunks.size() == 1);
  CHECK(chunks[0].chunk_index() == 0);
  CHECK(chunks[0].chunk_count() == 1);
  update.set_chunk_count(1);
  CHECK(MessageDifferencer::Equals(chunks[0], update));
  // The limit is inclusive.
  CHECK(Chunk(update, update.ByteSizeLong()).size() == 1);
  CHECK(Chunk(update, update.ByteSizeLong() - 1).size() > 1);
}

TEST_CASE("Chunk gives an item larger than the limit a chunk of its own") {
  v1::TableUpdate update = BigFullUpdate(3, 1);
  std::vector<v1::TableUpdate> chunks = Chunk(update, 40);
  REQUIRE(chunks.size() == 4);  // the header alone, then one assignment each
  CHECK(chunks[0].full().assignments_size() == 0);
  for (size_t i = 1; i < chunks.size(); ++i) CHECK(chunks[i].full().assignments_size() == 1);
  update.set_chunk_count(1);
  CHECK(MessageDifferencer::Equals(Reassemble(chunks), update));
}

TEST_CASE("ChunkAssembler rejects broken chunk sequences and starts over after an error") {
  std::vector<v1::TableUpdate> chunks = Chunk(BigFullUpdate(2000, 3), 8 << 10);
  REQUIRE(chunks.size() >= 3);
  ChunkAssembler assembler;

  struct Case {
    const char* what;
    std::function<std::vector<v1::TableUpdate>()> sequence;  // the last one fails
    const char* message;
  };
  // The chunks before `index` as they are, then chunk `index` after `change`.
  const auto altered = [&chunks](size_t index, std::function<void(v1::TableUpdate&)> change) {
    return [&chunks, index, change] {
      std::vector<v1::TableUpdate> sequence(chunks.begin(), chunks.begin() + index + 1);
      change(sequence.back());
      return sequence;
    };
  };
  const std::vector<Case> cases = {
      {"no body", [] { return std::vector<v1::TableUpdate>(1); }, "body: neither full nor delta"},
      {"chunk_count 0", altered(0, [](v1::TableUpdate& c) { c.set_chunk_count(0); }),
       "chunk_count: 0"},
      {"index beyond count",
       altered(0, [](v1::TableUpdate& c) { c.set_chunk_index(c.chunk_count()); }),
       "is not below chunk_count"},
      {"starts past chunk 0", [&] { return std::vector{chunks[1]}; },
       "chunk_index: 1 (nonce \"big-1\") but no update is in progress"},
      {"out of order",
       [&] {
         return std::vector{chunks[0], chunks[2]};
       },
       "chunk_index: 2, expected 1"},
      {"repeated chunk",
       [&] {
         return std::vector{chunks[0], chunks[1], chunks[1]};
       },
       "chunk_index: 1, expected 2"},
      {"nonce changes", altered(1, [](v1::TableUpdate& c) { c.set_nonce("other"); }),
       "nonce: \"other\" in the middle of update \"big-1\""},
      {"count changes",
       altered(1, [](v1::TableUpdate& c) { c.set_chunk_count(c.chunk_count() + 1); }),
       "chunk_count: "},
      {"body kind changes", altered(1, [](v1::TableUpdate& c) { c.mutable_delta(); }),
       "body: a delta chunk in a full update"},
      {"header repeated",
       altered(1, [](v1::TableUpdate& c) { c.mutable_full()->mutable_version()->set_number(9); }),
       "full.version: set in chunk 1"},
      {"rollout repeated",
       altered(1,
               [](v1::TableUpdate& c) {
                 c.mutable_full()->mutable_rollout()->set_table_fraction(0.5);
               }),
       "full.rollout: set in chunk 1"},
  };
  for (const Case& c : cases) {
    SECTION(c.what) {
      std::vector<v1::TableUpdate> sequence = c.sequence();
      for (size_t i = 0; i + 1 < sequence.size(); ++i) {
        absl::StatusOr<std::optional<v1::TableUpdate>> r = assembler.Add(sequence[i]);
        REQUIRE(r.ok());
        REQUIRE_FALSE(r->has_value());
      }
      absl::StatusOr<std::optional<v1::TableUpdate>> r = assembler.Add(sequence.back());
      INFO(r.status().ToString());
      REQUIRE_FALSE(r.ok());
      CHECK(r.status().code() == absl::StatusCode::kInvalidArgument);
      CHECK_THAT(std::string(r.status().message()), Catch::Contains(c.message));
      CHECK_FALSE(assembler.in_progress());
      // The partial update is gone: a complete sequence goes through from the start.
      for (size_t i = 0; i < chunks.size(); ++i) {
        absl::StatusOr<std::optional<v1::TableUpdate>> again = assembler.Add(chunks[i]);
        REQUIRE(again.ok());
        CHECK(again->has_value() == (i + 1 == chunks.size()));
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// TableStream against TableClientState

constexpr TableVersion V(uint64_t number) { return {1, number}; }

// Version n of a small evolving table: keys 1..20 start on destination k % 3; version n has moved
// keys 1..n to (k + 1) % 3 and added keys 101..100+n.
Snapshot Evolving(uint64_t n, size_t extra_keys = 0) {
  v1::RoutingTable t;
  *t.mutable_version() = V(n).ToProto();
  for (const char* name : {"a", "b", "c"}) {
    t.add_destinations(name);
    t.add_expected_loads(1.0);
  }
  std::vector<std::pair<uint64_t, uint32_t>> keys;
  for (uint64_t k = 1; k <= 20 + extra_keys; ++k) keys.push_back({k, (k + (k <= n ? 1 : 0)) % 3});
  for (uint64_t m = 1; m <= n; ++m) keys.push_back({100000 + m, m % 3});
  std::sort(keys.begin(), keys.end());
  for (const auto& [key, destination] : keys) {
    v1::Assignment* a = t.add_assignments();
    a->set_key_id(key);
    a->add_destinations(destination);
    a->set_rate(1e6 - static_cast<double>(key));  // distinct, hottest first by key
    a->set_key(absl::StrCat("tenant-", key));
  }
  t.set_built_unix_ms(static_cast<int64_t>(1000 * n));
  t.set_ttl_seconds(60);
  absl::StatusOr<Snapshot> s = TableSnapshot::FromProto(t);
  REQUIRE(s.ok());
  return *s;
}

struct Sent {
  bool delta = false;
  TableVersion base;  // deltas only
  TableVersion version;
  size_t chunks = 0;
};

Sent Describe(const std::vector<v1::TableUpdate>& chunks) {
  REQUIRE_FALSE(chunks.empty());
  const v1::TableUpdate& c = chunks[0];
  if (c.has_delta()) {
    return {true, TableVersion::FromProto(c.delta().base()),
            TableVersion::FromProto(c.delta().version()), chunks.size()};
  }
  return {false, {}, TableVersion::FromProto(c.full().version()), chunks.size()};
}

// The in-memory stream: the server's chunks go to the client, its answers back to the server.
struct Loop {
  explicit Loop(size_t max_bytes = kDefaultMaxMessageBytes, Snapshot cached = nullptr)
      : server("s", max_bytes), client("gw-1", std::move(cached)) {}

  void Connect() { REQUIRE(server.OnRequest(client.OnConnect()).ok()); }

  // Connects and publishes version 1; its update, one chunk, is taken but not delivered.
  std::vector<v1::TableUpdate> ConnectAndTakeFirst() {
    Connect();
    server.OnPublish(Evolving(1));
    std::vector<v1::TableUpdate> first = server.TakeUpdate();
    REQUIRE(first.size() == 1);
    return first;
  }

  // The client's answer to a whole update.
  v1::StreamTableRequest Deliver(const std::vector<v1::TableUpdate>& chunks) {
    std::optional<v1::StreamTableRequest> answer;
    for (size_t i = 0; i < chunks.size(); ++i) {
      absl::StatusOr<std::optional<v1::StreamTableRequest>> r = client.OnUpdate(chunks[i]);
      INFO(r.status().ToString());
      REQUIRE(r.ok());
      REQUIRE(r->has_value() == (i + 1 == chunks.size()));
      answer = *r;
    }
    return *answer;
  }

  // Sends the pending update, if any, and returns the server's view of it; the answer is fed back.
  std::optional<Sent> Step() {
    std::vector<v1::TableUpdate> chunks = server.TakeUpdate();
    if (chunks.empty()) return std::nullopt;
    Sent sent = Describe(chunks);
    absl::Status s = server.OnRequest(Deliver(chunks));
    INFO(s.ToString());
    REQUIRE(s.ok());
    return sent;
  }

  TableStream server;
  TableClientState client;
};

TEST_CASE("TableStream sends a full table first, then a delta after the ACK") {
  Loop loop;
  loop.server.OnPublish(Evolving(1));
  CHECK(loop.server.TakeUpdate().empty());  // nothing before the gateway's first request
  loop.Connect();
  CHECK(loop.server.gateway_id() == "gw-1");

  std::vector<v1::TableUpdate> first = loop.server.TakeUpdate();
  REQUIRE(first.size() == 1);
  CHECK(first[0].nonce() == "s-1");
  REQUIRE(first[0].has_full());
  CHECK(TableVersion::FromProto(first[0].full().version()) == V(1));
  CHECK(loop.server.awaiting_ack());
  CHECK(loop.server.TakeUpdate().empty());  // one outstanding update at most
  v1::StreamTableRequest ack = loop.Deliver(first);
  CHECK(ack.response_nonce() == "s-1");
  CHECK_FALSE(ack.has_error());
  CHECK(TableVersion::FromProto(ack.applied_version()) == V(1));
  REQUIRE(loop.server.OnRequest(ack).ok());
  CHECK(loop.server.acked_version() == V(1));
  CHECK_FALSE(loop.server.awaiting_ack());
  CHECK(loop.server.TakeUpdate().empty());  // nothing newer

  loop.server.OnPublish(Evolving(2));
  std::vector<v1::TableUpdate> second = loop.server.TakeUpdate();
  REQUIRE(second.size() == 1);
  CHECK(second[0].nonce() == "s-2");
  REQUIRE(second[0].has_delta());
  CHECK(TableVersion::FromProto(second[0].delta().base()) == V(1));
  CHECK(TableVersion::FromProto(second[0].delta().version()) == V(2));
  CHECK(second[0].delta().upserts_size() == 2);  // key 2 moved, key 100002 added
  REQUIRE(loop.server.OnRequest(loop.Deliver(second)).ok());
  CHECK(loop.server.acked_version() == V(2));
  CHECK(loop.client.current()->version() == V(2));
  CHECK(loop.client.current()->SameRouting(*Evolving(2)));
  CHECK(loop.server.updates_sent() == 2);
  CHECK(loop.server.nacks() == 0);
  CHECK(loop.client.acks_sent() == 2);
}

TEST_CASE("TableStream coalesces versions for a slow gateway into one delta") {
  Loop loop;
  std::vector<v1::TableUpdate> first = loop.ConnectAndTakeFirst();
  for (uint64_t n : {2, 3, 4}) {
    loop.server.OnPublish(Evolving(n));
    CHECK(loop.server.TakeUpdate().empty());
  }
  REQUIRE(loop.server.OnRequest(loop.Deliver(first)).ok());
  CHECK(loop.server.acked_version() == V(1));

  std::optional<Sent> next = loop.Step();
  REQUIRE(next.has_value());
  CHECK(next->delta);
  CHECK(next->base == V(1));
  CHECK(next->version == V(4));
  CHECK_FALSE(loop.Step().has_value());  // exactly one
  CHECK(loop.server.updates_sent() == 2);
  CHECK(loop.client.current()->SameRouting(*Evolving(4)));
  CHECK(loop.server.acked_version() == V(4));
}

TEST_CASE("TableStream answers a NACKed delta with a full table of the latest") {
  Loop loop;
  loop.Connect();
  loop.server.OnPublish(Evolving(1));
  REQUIRE(loop.Step().has_value());
  loop.server.OnPublish(Evolving(2));
  std::vector<v1::TableUpdate> delta = loop.server.TakeUpdate();
  REQUIRE(delta.size() == 1);
  REQUIRE(delta[0].has_delta());

  SECTION("a NACK written by hand") {
    v1::StreamTableRequest nack;
    nack.set_response_nonce(delta[0].nonce());
    *nack.mutable_applied_version() = V(1).ToProto();
    nack.mutable_error()->set_code(9);
    nack.mutable_error()->set_message("base mismatch");
    REQUIRE(loop.server.OnRequest(nack).ok());
  }
  SECTION("the client's own NACK of a corrupted delta") {
    delta[0].mutable_delta()->mutable_upserts(0)->set_destinations(0, 7);
    v1::StreamTableRequest nack = loop.Deliver(delta);
    REQUIRE(nack.has_error());
    CHECK(nack.error().code() == static_cast<int>(absl::StatusCode::kInvalidArgument));
    CHECK_THAT(nack.error().message(), Catch::Contains("delta.upserts[0].destinations[0]: 7"));
    CHECK(TableVersion::FromProto(nack.applied_version()) == V(1));
    CHECK(loop.client.current()->version() == V(1));  // the last good table stays
    REQUIRE(loop.server.OnRequest(nack).ok());
  }
  CHECK(loop.server.nacks() == 1);
  CHECK(loop.server.acked_version() == V(1));
  CHECK_FALSE(loop.server.awaiting_ack());

  std::optional<Sent> next = loop.Step();
  REQUIRE(next.has_value());
  CHECK_FALSE(next->delta);
  CHECK(next->version == V(2));
  CHECK(loop.client.current()->SameRouting(*Evolving(2)));
  // Once acknowledged, deltas resume.
  loop.server.OnPublish(Evolving(3));
  next = loop.Step();
  REQUIRE(next.has_value());
  CHECK(next->delta);
  CHECK(next->base == V(2));
}

TEST_CASE("TableStream does not resend a NACKed full table until a newer version") {
  Loop loop;
  std::vector<v1::TableUpdate> full = loop.ConnectAndTakeFirst();
  // A table the gateway must refuse: key 1 twice.
  *full[0].mutable_full()->add_assignments() = full[0].full().assignments(0);
  full[0].mutable_full()->mutable_assignments()->rbegin()->set_rate(0);
  v1::StreamTableRequest nack = loop.Deliver(full);
  REQUIRE(nack.has_error());
  CHECK_THAT(nack.error().message(), Catch::Contains("full.assignments[21].key_id: 1 repeats"));
  CHECK(loop.client.current() == nullptr);
  CHECK(TableVersion::FromProto(nack.applied_version()).IsZero());
  REQUIRE(loop.server.OnRequest(nack).ok());
  CHECK(loop.server.nacks() == 1);

  CHECK(loop.server.TakeUpdate().empty());
  loop.server.OnPublish(Evolving(1));  // the same version again: ignored
  CHECK(loop.server.TakeUpdate().empty());
  loop.server.OnPublish(Evolving(2));
  std::optional<Sent> next = loop.Step();
  REQUIRE(next.has_value());
  CHECK_FALSE(next->delta);  // nothing was acknowledged: no base for a delta
  CHECK(next->version == V(2));
  CHECK(loop.client.current()->version() == V(2));
  CHECK(loop.server.updates_sent() == 2);
}

TEST_CASE("TableStream ignores requests with a stale or unknown nonce") {
  Loop loop;
  std::vector<v1::TableUpdate> first = loop.ConnectAndTakeFirst();

  v1::StreamTableRequest unknown;
  unknown.set_response_nonce("s-0");
  *unknown.mutable_applied_version() = V(1).ToProto();
  CHECK(loop.server.OnRequest(unknown).ok());
  unknown.mutable_error()->set_code(3);
  CHECK(loop.server.OnRequest(unknown).ok());
  CHECK(loop.server.OnRequest(v1::StreamTableRequest()).ok());  // no nonce at all
  CHECK(loop.server.awaiting_ack());
  CHECK(loop.server.nacks() == 0);
  CHECK(loop.server.acked_version().IsZero());

  v1::StreamTableRequest ack = loop.Deliver(first);
  REQUIRE(loop.server.OnRequest(ack).ok());
  CHECK(loop.server.acked_version() == V(1));

  loop.server.OnPublish(Evolving(2));
  std::vector<v1::TableUpdate> second = loop.server.TakeUpdate();
  REQUIRE(second.size() == 1);
  // The first update's ACK, repeated, and a NACK of it, arrive late: both are stale now.
  REQUIRE(loop.server.OnRequest(ack).ok());
  v1::StreamTableRequest late_nack = ack;
  late_nack.mutable_error()->set_code(3);
  REQUIRE(loop.server.OnRequest(late_nack).ok());
  CHECK(loop.server.awaiting_ack());
  CHECK(loop.server.nacks() == 0);
  CHECK(loop.server.acked_version() == V(1));
  REQUIRE(loop.server.OnRequest(loop.Deliver(second)).ok());
  CHECK(loop.server.acked_version() == V(2));
}

TEST_CASE("TableStream rejects protocol violations") {
  TableStream stream("s");
  stream.OnPublish(Evolving(1));

  SECTION("a first request without gateway_id") {
    absl::Status s = stream.OnRequest(v1::StreamTableRequest());
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(s.message()), Catch::Contains("gateway_id: empty"));
    CHECK(stream.gateway_id().empty());
    CHECK(stream.TakeUpdate().empty());
  }
  SECTION("a gateway_id over 128 bytes") {
    v1::StreamTableRequest r;
    r.set_gateway_id(std::string(129, 'g'));
    absl::Status s = stream.OnRequest(r);
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(s.message()), Catch::Contains("gateway_id: 129 bytes"));
    CHECK(stream.TakeUpdate().empty());
  }
  SECTION("another gateway_id later on") {
    v1::StreamTableRequest r;
    r.set_gateway_id("gw-1");
    REQUIRE(stream.OnRequest(r).ok());
    r.set_gateway_id("gw-2");
    absl::Status s = stream.OnRequest(r);
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(s.message()),
               Catch::Contains("gateway_id: \"gw-2\" on a stream opened by \"gw-1\""));
  }
  SECTION("an ACK naming another version than the update carried") {
    v1::StreamTableRequest r;
    r.set_gateway_id("gw-1");
    REQUIRE(stream.OnRequest(r).ok());
    std::vector<v1::TableUpdate> update = stream.TakeUpdate();
    REQUIRE(update.size() == 1);
    v1::StreamTableRequest ack;
    ack.set_response_nonce(update[0].nonce());
    *ack.mutable_applied_version() = V(7).ToProto();
    absl::Status s = stream.OnRequest(ack);
    CHECK(s.code() == absl::StatusCode::kInvalidArgument);
    CHECK_THAT(std::string(s.message()),
               Catch::Contains("applied_version: 1.7 in the ACK of update s-1, which carried "
                               "version 1.1"));
    CHECK(stream.acked_version().IsZero());
  }
}

TEST_CASE("TableStream never goes backwards or resends what the gateway has") {
  SECTION("an older publish is ignored") {
    Loop loop;
    loop.Connect();
    loop.server.OnPublish(Evolving(3));
    loop.server.OnPublish(Evolving(2));
    loop.server.OnPublish(nullptr);
    std::optional<Sent> sent = loop.Step();
    REQUIRE(sent.has_value());
    CHECK(sent->version == V(3));
  }
  SECTION("a gateway with a cached table gets only newer versions, as a full table") {
    Loop loop(kDefaultMaxMessageBytes, Evolving(2));
    loop.Connect();
    CHECK(loop.server.acked_version() == V(2));
    loop.server.OnPublish(Evolving(2));
    CHECK_FALSE(loop.Step().has_value());
    loop.server.OnPublish(Evolving(3));
    std::optional<Sent> sent = loop.Step();
    REQUIRE(sent.has_value());
    CHECK_FALSE(sent->delta);  // the server has no 1.2 snapshot on this stream to diff from
    CHECK(sent->version == V(3));
    CHECK(loop.client.current()->SameRouting(*Evolving(3)));
  }
}

TEST_CASE("TableStream chunks large updates and the client reassembles them") {
  Loop loop(/*max_bytes=*/4096);
  loop.Connect();
  loop.server.OnPublish(Evolving(1, /*extra_keys=*/2000));
  std::vector<v1::TableUpdate> full = loop.server.TakeUpdate();
  REQUIRE(full.size() > 5);
  for (const v1::TableUpdate& c : full) CHECK(c.ByteSizeLong() <= 4096);
  REQUIRE(loop.server.OnRequest(loop.Deliver(full)).ok());
  CHECK(loop.client.current()->entries() == Evolving(1, 2000)->entries());

  loop.server.OnPublish(Evolving(400, /*extra_keys=*/2000));
  std::optional<Sent> sent = loop.Step();
  REQUIRE(sent.has_value());
  CHECK(sent->delta);
  CHECK(sent->chunks > 1);
  CHECK(loop.client.current()->SameRouting(*Evolving(400, 2000)));
  CHECK(loop.server.acked_version() == V(400));
}

// ---------------------------------------------------------------------------------------------
// TableClientState alone

v1::TableUpdate FullUpdate(const std::string& nonce, const TableSnapshot& table) {
  v1::TableUpdate u;
  u.set_nonce(nonce);
  *u.mutable_full() = table.ToProto();
  u.set_chunk_count(1);
  return u;
}

v1::TableUpdate DeltaUpdate(const std::string& nonce, const TableSnapshot& base,
                            const TableSnapshot& target) {
  v1::TableUpdate u;
  u.set_nonce(nonce);
  *u.mutable_delta() = ComputeDelta(base, target);
  u.set_chunk_count(1);
  return u;
}

v1::StreamTableRequest MustAnswer(TableClientState& client, const v1::TableUpdate& update) {
  absl::StatusOr<std::optional<v1::StreamTableRequest>> r = client.OnUpdate(update);
  INFO(r.status().ToString());
  REQUIRE(r.ok());
  REQUIRE(r->has_value());
  return **r;
}

TEST_CASE("TableClientState refuses to go backwards and keeps the last good table") {
  TableClientState client("gw-9", Evolving(5));
  v1::StreamTableRequest hello = client.OnConnect();
  CHECK(hello.gateway_id() == "gw-9");
  CHECK(TableVersion::FromProto(hello.applied_version()) == V(5));

  SECTION("an older full table") {
    v1::StreamTableRequest nack = MustAnswer(client, FullUpdate("n1", *Evolving(3)));
    CHECK(nack.response_nonce() == "n1");
    REQUIRE(nack.has_error());
    CHECK(nack.error().code() == static_cast<int>(absl::StatusCode::kInvalidArgument));
    CHECK_THAT(nack.error().message(),
               Catch::Contains("full.version: 1.3 is older than the applied version 1.5"));
    CHECK(TableVersion::FromProto(nack.applied_version()) == V(5));
    CHECK(client.nacks_sent() == 1);
  }
  SECTION("a table with the zero version") {
    v1::TableUpdate u = FullUpdate("n1", *Evolving(6));
    u.mutable_full()->clear_version();
    v1::StreamTableRequest nack = MustAnswer(client, u);
    REQUIRE(nack.has_error());
    CHECK_THAT(nack.error().message(), Catch::Contains("full.version: 0.0 is the zero version"));
  }
  SECTION("a delta on another base") {
    v1::StreamTableRequest nack = MustAnswer(client, DeltaUpdate("n2", *Evolving(4), *Evolving(6)));
    REQUIRE(nack.has_error());
    CHECK(nack.error().code() == static_cast<int>(absl::StatusCode::kFailedPrecondition));
    CHECK_THAT(nack.error().message(),
               Catch::Contains("delta.base: 1.4 does not match the applied version 1.5"));
  }
  SECTION("a broken chunk sequence") {
    std::vector<v1::TableUpdate> chunks = Chunk(FullUpdate("n3", *Evolving(6, 500)), 2048);
    REQUIRE(chunks.size() > 2);
    v1::StreamTableRequest nack = MustAnswer(client, chunks[1]);
    CHECK(nack.response_nonce() == "n3");
    REQUIRE(nack.has_error());
    CHECK_THAT(nack.error().message(), Catch::Contains("chunk_index: 1"));
  }
  CHECK(client.current()->version() == V(5));
  CHECK(client.current()->SameRouting(*Evolving(5)));
  CHECK(client.acks_sent() == 0);

  // A newer table is still accepted afterwards; the same version again is acknowledged too.
  v1::StreamTableRequest ack = MustAnswer(client, FullUpdate("n4", *Evolving(6)));
  CHECK_FALSE(ack.has_error());
  CHECK(TableVersion::FromProto(ack.applied_version()) == V(6));
  CHECK_FALSE(MustAnswer(client, FullUpdate("n5", *Evolving(6))).has_error());
  CHECK(client.current()->version() == V(6));
}

TEST_CASE("TableClientState needs a table before a delta and a nonce to answer") {
  TableClientState client("gw-9");
  CHECK(client.current() == nullptr);
  CHECK(TableVersion::FromProto(client.OnConnect().applied_version()).IsZero());

  v1::StreamTableRequest nack = MustAnswer(client, DeltaUpdate("n1", *Evolving(1), *Evolving(2)));
  REQUIRE(nack.has_error());
  CHECK(nack.error().code() == static_cast<int>(absl::StatusCode::kFailedPrecondition));
  CHECK_THAT(nack.error().message(), Catch::Contains("no table is applied yet"));

  v1::TableUpdate no_nonce = FullUpdate("", *Evolving(1));
  absl::StatusOr<std::optional<v1::StreamTableRequest>> r = client.OnUpdate(no_nonce);
  REQUIRE_FALSE(r.ok());
  CHECK_THAT(std::string(r.status().message()), Catch::Contains("nonce: empty"));
  CHECK(client.current() == nullptr);
}

}  // namespace
}  // namespace cacheroute::table
