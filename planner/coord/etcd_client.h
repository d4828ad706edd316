// EtcdClient: a thin synchronous client of etcd's v3 KV, Lease and Watch gRPC services (no auth,
// no TLS), for the planner's leader election (leader_election.h) and its fenced writes.
//
// Usage:
//   auto client = EtcdClient::Create({.endpoints = {"10.0.0.1:2379", "10.0.0.2:2379"}});
//   if (!client.ok()) return client.status();
//   absl::StatusOr<LeaseGrant> lease = (*client)->GrantLease(5);
//   (*client)->Put("/k", "v", lease->id);
//   auto watcher = (*client)->Watch("/k", /*start_revision=*/0, {.on_events = ..., .on_broken = ...});
//
// Contract:
// - Each unary call has a deadline of Options::call_timeout per endpoint tried. On UNAVAILABLE or
//   DEADLINE_EXCEEDED it tries the next endpoint (each at most once per call) and keeps using the
//   one that answered. A write retried this way may already have been applied by the attempt that
//   timed out: writes are at-least-once; guard them with Txn compares where that matters.
// - Errors keep gRPC's code (gRPC and absl codes coincide): NotFound for a lease etcd no longer
//   has (KeepAliveOnce's TTL 0 included), OutOfRange for a compacted revision, FailedPrecondition
//   etc. as etcd says; the message names the call and the endpoint.
// - Thread-safe: every method may be called from any thread at the same time.
// - A Watcher delivers events on its own reader thread, in revision order, and calls on_broken at
//   most once when the stream ends other than by Cancel(); re-watch from next_revision(). No
//   callback runs after Cancel() (or the destructor) returns; never call either from a callback.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace cacheroute::coord {

// One key as etcd stores it (mvccpb.KeyValue).
struct KeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;  // revision of the put that created the key (0: no such key)
  int64_t mod_revision = 0;     // revision of its last put (or of its deletion, in a WatchEvent)
  int64_t version = 0;          // puts since creation
  int64_t lease = 0;            // lease attached (0: none)
};

struct GetResult {
  std::optional<KeyValue> kv;  // empty: the key does not exist
  int64_t revision = 0;        // the store's revision when read
};

struct LeaseGrant {
  int64_t id = 0;
  int64_t ttl_seconds = 0;  // as granted by etcd (it may raise a TTL below its minimum)
};

// A condition of a transaction on one key. A missing key has version, create and mod revision 0.
struct Compare {
  enum class Target { kVersion, kCreateRevision, kModRevision, kValue, kLease };
  enum class Result { kEqual, kNotEqual, kLess, kGreater };
  std::string key;
  Target target = Target::kVersion;
  Result result = Result::kEqual;
  int64_t number = 0;  // version, revision or lease id
  std::string value;   // for kValue

  static Compare Version(std::string key, Result result, int64_t version);
  static Compare CreateRevision(std::string key, Result result, int64_t revision);
  static Compare ModRevision(std::string key, Result result, int64_t revision);
  static Compare Value(std::string key, Result result, std::string value);
  static Compare Lease(std::string key, Result result, int64_t lease_id);
};

// One operation of a transaction branch: a put, a delete of one key, or a get of one key.
struct TxnOp {
  enum class Type { kPut, kDelete, kGet };
  Type type = Type::kGet;
  std::string key;
  std::string value;  // kPut
  int64_t lease = 0;  // kPut

  static TxnOp Put(std::string key, std::string value, int64_t lease_id = 0);
  static TxnOp Delete(std::string key);
  static TxnOp Get(std::string key);
};

struct TxnOpResult {
  TxnOp::Type type = TxnOp::Type::kGet;
  std::optional<KeyValue> kv;  // kGet: the key, if it exists
  int64_t deleted = 0;         // kDelete: keys deleted (0 or 1)
};

struct TxnRequest {
  std::vector<Compare> compares;  // all must hold for the success branch
  std::vector<TxnOp> success;
  std::vector<TxnOp> failure;
};

struct TxnResult {
  bool succeeded = false;
  int64_t revision = 0;  // the store's revision after the transaction (header.revision)
  std::vector<TxnOpResult> responses;  // one per op of the branch that ran
};

struct WatchEvent {
  enum class Type { kPut, kDelete };
  Type type = Type::kPut;
  KeyValue kv;  // kDelete: key and mod_revision (the deletion's revision) only
};

enum class WatchScope { kKey, kPrefix };

struct WatchCallbacks {
  // Events of one response, in revision order; `revision` is the response header's revision.
  std::function<void(const std::vector<WatchEvent>& events, int64_t revision)> on_events;
  // The stream ended other than by Cancel(): etcd or the network went away (UNAVAILABLE...), or
  // etcd cancelled the watch (OutOfRange when start_revision was compacted: read again, then
  // watch from the read's revision + 1). `next_revision` is where a new watch should start.
  std::function<void(const absl::Status& status, int64_t next_revision)> on_broken;
};

class Watcher {
 public:
  ~Watcher();  // Cancel()
  Watcher(const Watcher&) = delete;
  Watcher& operator=(const Watcher&) = delete;

  // Ends the stream and joins the reader thread. Idempotent. Not from a callback.
  void Cancel();
  // The revision after the last one delivered (or the start revision): resume from here.
  int64_t next_revision() const { return next_revision_.load(); }
  bool broken() const { return broken_.load(); }

 private:
  friend class EtcdClient;
  struct Stream;
  Watcher(std::unique_ptr<Stream> stream, int64_t next_revision);
  std::unique_ptr<Stream> stream_;
  std::atomic<int64_t> next_revision_;
  std::atomic<bool> broken_{false};
};

class EtcdClient {
 public:
  struct Options {
    std::vector<std::string> endpoints;  // "host:port", tried in this order
    absl::Duration call_timeout = absl::Seconds(2);
    // gRPC keepalive on the channels, so a watch on a dead connection breaks. Below etcd's
    // --grpc-keepalive-min-time (5 s by default) etcd closes the connection for too many pings.
    absl::Duration keepalive_time = absl::Seconds(10);
    absl::Duration keepalive_timeout = absl::Seconds(5);
    // Upper bound of gRPC's reconnect backoff, so a restarted etcd is reached again quickly.
    absl::Duration max_reconnect_backoff = absl::Seconds(1);
    // How long one connection attempt (TCP, then HTTP/2 SETTINGS) may take. Apart from the
    // backoff: on a loaded host a handshake slower than the backoff must still complete.
    absl::Duration connect_timeout = absl::Seconds(20);
  };

  static absl::StatusOr<std::unique_ptr<EtcdClient>> Create(Options options);
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  absl::StatusOr<GetResult> Get(absl::string_view key);
  // Returns the revision of the put.
  absl::StatusOr<int64_t> Put(absl::string_view key, absl::string_view value, int64_t lease_id = 0);
  // Returns how many keys were deleted (0 or 1).
  absl::StatusOr<int64_t> Delete(absl::string_view key);

  absl::StatusOr<LeaseGrant> GrantLease(int64_t ttl_seconds);
  // One keepalive round trip; returns the lease's TTL in seconds. NotFound when the lease is gone.
  absl::StatusOr<int64_t> KeepAliveOnce(int64_t lease_id);
  // Revokes the lease and deletes its keys. NotFound when the lease is already gone.
  absl::Status RevokeLease(int64_t lease_id);

  absl::StatusOr<TxnResult> Txn(const TxnRequest& request);

  // Watches a key (or every key with that prefix) from start_revision (0: from now). Returns once
  // etcd has confirmed the watch (within call_timeout per endpoint).
  absl::StatusOr<std::unique_ptr<Watcher>> Watch(std::string key, int64_t start_revision,
                                                 WatchCallbacks callbacks,
                                                 WatchScope scope = WatchScope::kKey);

  const std::vector<std::string>& endpoints() const { return options_.endpoints; }
  // The endpoint the next call tries first.
  std::string current_endpoint() const;

 private:
  struct Endpoint;
  explicit EtcdClient(Options options);
  template <typename Fn>
  absl::Status Call(absl::string_view what, Fn&& fn);

  Options options_;
  std::vector<std::unique_ptr<Endpoint>> endpoints_;
  std::atomic<size_t> current_{0};
};

}  // namespace cacheroute::coord
