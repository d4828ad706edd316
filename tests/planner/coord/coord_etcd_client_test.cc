// Tests for planner/coord/etcd_client: against a real etcd (tests/support/etcd_process.h), no mocks.
#include "planner/coord/etcd_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/etcd_process.h"
#include "tests/support/eventually.h"
#include "tests/support/require_ok.h"

namespace cacheroute::coord {
namespace {

using testing::EtcdProcess;
using testing::Eventually;
using namespace std::chrono_literals;

std::unique_ptr<EtcdClient> Connect(std::vector<std::string> endpoints,
                                    absl::Duration timeout = absl::Seconds(2)) {
  EtcdClient::Options options;
  options.endpoints = std::move(endpoints);
  options.call_timeout = timeout;
  return cacheroute::testing::RequireOk(EtcdClient::Create(std::move(options)));
}

// A watch (REQUIREd to start) and what it delivered, read from the test thread.
struct Recorder {
  Recorder(EtcdClient& client, const std::string& key, int64_t start_revision,
           WatchScope scope = WatchScope::kKey)
      : watcher(testing::RequireOk(client.Watch(key, start_revision, Callbacks(), scope))) {}

  std::mutex mu;
  std::vector<WatchEvent> events;
  bool broken = false;
  absl::Status broken_status;
  int64_t broken_next = 0;

  WatchCallbacks Callbacks() {
    return WatchCallbacks{
        .on_events =
            [this](const std::vector<WatchEvent>& batch, int64_t) {
              std::lock_guard<std::mutex> lock(mu);
              events.insert(events.end(), batch.begin(), batch.end());
            },
        .on_broken =
            [this](const absl::Status& status, int64_t next) {
              std::lock_guard<std::mutex> lock(mu);
              broken = true;
              broken_status = status;
              broken_next = next;
            },
    };
  }
  size_t count() {
    std::lock_guard<std::mutex> lock(mu);
    return events.size();
  }
  std::vector<WatchEvent> Events() {
    std::lock_guard<std::mutex> lock(mu);
    return events;
  }
  bool is_broken() {
    std::lock_guard<std::mutex> lock(mu);
    return broken;
  }

  std::unique_ptr<Watcher> watcher;  // the last member: destroyed, and so cancelled, first
};

// Fault injection: a loopback TCP relay to `upstream_port` that holds each new connection for
// `delay` before it connects upstream, so the server's first bytes (its HTTP/2 SETTINGS) reach
// the client that much later: a slow handshake, as on a loaded host.
class SlowHandshakeRelay {
 public:
  SlowHandshakeRelay(int upstream_port, std::chrono::milliseconds delay)
      : upstream_port_(upstream_port), delay_(delay) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(listen_fd_ >= 0);
    sockaddr_in addr = Loopback(0);
    REQUIRE(bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0);
    REQUIRE(listen(listen_fd_, 16) == 0);
    socklen_t len = sizeof(addr);
    REQUIRE(getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    port_ = ntohs(addr.sin_port);
    acceptor_ = std::thread([this] { Accept(); });
  }
  ~SlowHandshakeRelay() {
    stop_ = true;
    acceptor_.join();
    for (std::thread& t : relays_) t.join();
    close(listen_fd_);
  }
  std::string endpoint() const { return absl::StrCat("127.0.0.1:", port_); }
  int connections() const { return connections_.load(); }

 private:
  static sockaddr_in Loopback(int port) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    return addr;
  }
  // Waits up to 50 ms for fd to become readable; false when stopping or on timeout.
  bool Readable(int fd) {
    pollfd p{fd, POLLIN, 0};
    return !stop_ && poll(&p, 1, 50) > 0;
  }
  void Accept() {  // one thread per connection, all joined by the destructor
    while (!stop_) {
      if (!Readable(listen_fd_)) continue;
      const int client = accept(listen_fd_, nullptr, nullptr);
      if (client < 0) continue;
      ++connections_;
      relays_.emplace_back([this, client] { Relay(client); });
    }
  }
  void Relay(int client) {
    const auto until = std::chrono::steady_clock::now() + delay_;
    while (!stop_ && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    const int server = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr = Loopback(upstream_port_);
    if (server >= 0 && connect(server, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      char buffer[16384];
      while (!stop_) {
        pollfd fds[2] = {{client, POLLIN, 0}, {server, POLLIN, 0}};
        if (poll(fds, 2, 50) <= 0) continue;
        bool open = true;
        for (int i = 0; i < 2 && open; ++i) {
          if (fds[i].revents == 0) continue;
          const ssize_t n = read(fds[i].fd, buffer, sizeof(buffer));
          open = n > 0 && send(fds[1 - i].fd, buffer, n, MSG_NOSIGNAL) == n;
        }
        if (!open) break;
      }
    }
    if (server >= 0) close(server);
    close(client);
  }

  const int upstream_port_;
  const std::chrono::milliseconds delay_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> connections_{0};
  std::thread acceptor_;
  std::vector<std::thread> relays_;  // the acceptor's until it is joined
};

TEST_CASE("Create rejects no endpoints and a non-positive timeout") {
  CHECK(EtcdClient::Create({}).status().code() == absl::StatusCode::kInvalidArgument);
  EtcdClient::Options options;
  options.endpoints = {"127.0.0.1:1"};
  options.call_timeout = absl::ZeroDuration();
  CHECK(EtcdClient::Create(options).status().code() == absl::StatusCode::kInvalidArgument);
  options.call_timeout = absl::Seconds(1);
  options.connect_timeout = absl::ZeroDuration();
  absl::Status status = EtcdClient::Create(options).status();
  CHECK(status.code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(status.message()), Catch::Contains("connect_timeout"));
}

TEST_CASE("Put, Get and Delete round-trip with their revisions") {
  CACHEROUTE_SKIP_WITHOUT_ETCD();
  EtcdProcess etcd;
  auto client = Connect({etcd.endpoint()});

  absl::StatusOr<GetResult> missing = client->Get("/a");
  REQUIRE(missing.ok());
  CHECK_FALSE(missing->kv.has_value());
  CHECK(missing->revision >= 1);

  absl::StatusOr<int64_t> first = client->Put("/a", "one");
  REQUIRE(first.ok());
  CHECK(*first > missing->revision);
  absl::StatusOr<int64_t> second = client->Put("/a", std::string("two\0bytes", 9));
  REQUIRE(second.ok());
  CHECK(*second == *first + 1);

  absl::StatusOr<GetResult> got = client->Get("/a");
  REQUIRE(got.ok());
  REQUIRE(got->kv.has_value());
  CHECK(got->kv->key == "/a");
  CHECK(got->kv->value == std::string("two\0bytes", 9));
  CHECK(got->kv->create_revision == *first);
  CHECK(got->kv->mod_revision == *second);
  CHECK(got->kv->version == 2);
  CHECK(got->kv->lease == 0);
  CHECK(got->revision == *second);

  CHECK(*client->Delete("/a") == 1);
  CHECK(*client->Delete("/a") == 0);
  CHECK_FALSE(client->Get("/a")->kv.has_value());
}

TEST_CASE("a lease is granted, kept alive, revoked with its keys, and expires") {
  CACHEROUTE_SKIP_WITHOUT_ETCD();
  EtcdProcess etcd;
  auto client = Connect({etcd.endpoint()});

  CHECK(client->GrantLease(0).status().code() == absl::StatusCode::kInvalidArgument);
  absl::StatusOr<LeaseGrant> lease = client->GrantLease(30);
  REQUIRE(lease.ok());
  CHECK(lease->id != 0);
  CHECK(lease->ttl_seconds == 30);
  absl::StatusOr<int64_t> ttl = client->KeepAliveOnce(lease->id);
  REQUIRE(ttl.ok());
  CHECK(*ttl == 30);

  REQUIRE(client->Put("/leased", "v", lease->id).ok());
  CHECK(client->Get("/leased")->kv->lease == lease->id);
  REQUIRE(client->RevokeLease(lease->id).ok());
  CHECK_FALSE(client->Get("/leased")->kv.has_value());
  CHECK(client->KeepAliveOnce(lease->id).status().code() == absl::StatusCode::kNotFound);
  CHECK(client->RevokeLease(lease->id).code() == absl::StatusCode::kNotFound);
  // A put on a lease that does not exist is refused.
  CHECK(client->Put("/leased", "v", lease->id).status().code() == absl::StatusCode::kNotFound);

  // Expiry: a short lease that nobody keeps alive takes its key with it.
  absl::StatusOr<LeaseGrant> short_lease = client->GrantLease(1);
  REQUIRE(short_lease.ok());
  REQUIRE(client->Put("/expiring", "v", short_lease->id).ok());
  CHECK(Eventually([&] { return !client->Get("/expiring")->kv.has_value(); }, 20s));
  CHECK(client->KeepAliveOnce(short_lease->id).status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("Txn runs the success branch when every compare holds, else the failure branch") {
  CACHEROUTE_SKIP_WITHOUT_ETCD();
  EtcdProcess etcd;
  auto client = Connect({etcd.endpoint()});
  absl::StatusOr<LeaseGrant> lease = client->GrantLease(30);
  REQUIRE(lease.ok());

  // Create-if-absent, the election's campaign.
  TxnRequest create;
  create.compares = {Compare::CreateRevision("/k", Compare::Result::kEqual, 0)};
  create.success = {TxnOp::Put("/k", "mine", lease->id), TxnOp::Get("/k")};
  create.failure = {TxnOp::Get("/k")};
  absl::StatusOr<TxnResult> won = client->Txn(create);
  REQUIRE(won.ok());
  CHECK(won->succeeded);
  REQUIRE(won->responses.size() == 2);
  CHECK(won->responses[0].type == TxnOp::Type::kPut);
  CHECK(won->responses[1].type == TxnOp::Type::kGet);
  REQUIRE(won->responses[1].kv.has_value());
  CHECK(won->responses[1].kv->create_revision == won->revision);
  CHECK(won->responses[1].kv->lease == lease->id);

  absl::StatusOr<TxnResult> lost = client->Txn(create);
  REQUIRE(lost.ok());
  CHECK_FALSE(lost->succeeded);
  CHECK(lost->revision == won->revision);  // nothing was written
  REQUIRE(lost->responses.size() == 1);
  REQUIRE(lost->responses[0].kv.has_value());
  CHECK(lost->responses[0].kv->value == "mine");

  // Every compare target, each holding; then one of them not.
  const int64_t rev = won->revision;
  TxnRequest all;
  all.compares = {Compare::CreateRevision("/k", Compare::Result::kEqual, rev),
                  Compare::ModRevision("/k", Compare::Result::kLess, rev + 1),
                  Compare::Version("/k", Compare::Result::kEqual, 1),
                  Compare::Value("/k", Compare::Result::kEqual, "mine"),
                  Compare::Lease("/k", Compare::Result::kEqual, lease->id),
                  Compare::Version("/other", Compare::Result::kEqual, 0)};
  all.success = {TxnOp::Put("/other", "x"), TxnOp::Delete("/k")};
  absl::StatusOr<TxnResult> done = client->Txn(all);
  REQUIRE(done.ok());
  CHECK(done->succeeded);
  REQUIRE(done->responses.size() == 2);
  CHECK(done->responses[1].deleted == 1);
  CHECK(done->revision == rev + 1);  // one transaction, one revision
  CHECK(client->Get("/other")->kv->value == "x");
  CHECK_FALSE(client->Get("/k")->kv.has_value());

  TxnRequest stale;
  stale.compares = {Compare::Value("/other", Compare::Result::kEqual, "x"),
                    Compare::ModRevision("/other", Compare::Result::kGreater, done->revision)};
  stale.success = {TxnOp::Put("/other", "y")};
  absl::StatusOr<TxnResult> refused = client->Txn(stale);
  REQUIRE(refused.ok());
  CHECK_FALSE(refused->succeeded);
  CHECK(refused->responses.empty());
  CHECK(client->Get("/other")->kv->value == "x");
}

TEST_CASE("Watch delivers puts and deletes in order and resumes from a revision") {
  CACHEROUTE_SKIP_WITHOUT_ETCD();
  EtcdProcess etcd;
  auto client = Connect({etcd.endpoint()});

  Recorder now(*client, "/w", 0);
  Recorder prefix(*client, "/w/", 0, WatchScope::kPrefix);

  const int64_t r1 = *client->Put("/w", "1");
  const int64_t r2 = *client->Put("/w", "2");
  REQUIRE(client->Put("/w/a", "a").ok());
  REQUIRE(client->Put("/wx", "not under /w/").ok());
  const int64_t r3 = [&] {
    REQUIRE(*client->Delete("/w") == 1);
    return client->Get("/w")->revision;
  }();
  REQUIRE(Eventually([&] { return now.count() >= 3; }, 10s));
  std::vector<WatchEvent> events = now.Events();
  REQUIRE(events.size() == 3);
  CHECK(events[0].type == WatchEvent::Type::kPut);
  CHECK(events[0].kv.value == "1");
  CHECK(events[0].kv.mod_revision == r1);
  CHECK(events[1].kv.value == "2");
  CHECK(events[1].kv.create_revision == r1);
  CHECK(events[2].type == WatchEvent::Type::kDelete);
  CHECK(events[2].kv.key == "/w");
  CHECK(events[2].kv.mod_revision == r3);
  CHECK(now.watcher->next_revision() == r3 + 1);

  REQUIRE(Eventually([&] { return prefix.count() >= 1; }, 10s));
  std::vector<WatchEvent> under = prefix.Events();
  REQUIRE(under.size() == 1);
  CHECK(under[0].kv.key == "/w/a");

  // From a past revision: the history since r2 again, then new events.
  Recorder replay(*client, "/w", r2);
  REQUIRE(Eventually([&] { return replay.count() >= 2; }, 10s));
  const int64_t r4 = *client->Put("/w", "4");
  REQUIRE(Eventually([&] { return replay.count() >= 3; }, 10s));
  events = replay.Events();
  REQUIRE(events.size() == 3);
  CHECK(events[0].kv.mod_revision == r2);
  CHECK(events[1].type == WatchEvent::Type::kDelete);
  CHECK(events[2].kv.mod_revision == r4);
  CHECK(events[2].kv.create_revision == r4);  // recreated

  // Cancel: no more events, no on_broken.
  REQUIRE(Eventually([&] { return now.count() >= 4; }, 10s));
  now.watcher->Cancel();
  now.watcher->Cancel();  // idempotent
  REQUIRE(client->Put("/w", "5").ok());
  REQUIRE(Eventually([&] { return replay.count() >= 4; }, 10s));
  CHECK(now.count() == 4);  // r4 reached it before the cancel, "5" did not
  CHECK_FALSE(now.is_broken());
}

TEST_CASE("a watch reports a broken stream; a new watch from next_revision misses nothing") {
  CACHEROUTE_SKIP_WITHOUT_ETCD();
  EtcdProcess etcd;
  auto client = Connect({etcd.endpoint()});
  Recorder first(*client, "/b", 0);
  const int64_t r1 = *client->Put("/b", "1");
  REQUIRE(Eventually([&] { return first.count() == 1; }, 10s));

  etcd.Kill();
  REQUIRE(Eventually([&] { return first.is_broken(); }, 20s));
  {
    std::lock_guard<std::mutex> lock(first.mu);
    CHECK(first.broken_status.code() == absl::StatusCode::kUnavailable);
    CHECK(first.broken_next == r1 + 1);
  }
  CHECK(first.watcher->broken());
  // While etcd is down, calls fail as unavailable (or time out).
  const absl::StatusCode down = client->Get("/b").status().code();
  CHECK((down == absl::StatusCode::kUnavailable || down == absl::StatusCode::kDeadlineExceeded));

  etcd.Start();  // same data directory: the history is still there
  const int64_t r2 = *client->Put("/b", "2");
  Recorder second(*client, "/b", first.watcher->next_revision());
  REQUIRE(Eventually([&] { return second.count() >= 1; }, 10s));
  std::vector<WatchEvent> events = second.Events();
  REQUIRE(events.size() == 1);
  CHECK(events[0].kv.mod_revision == r2);
  CHECK(events[0].kv.value == "2");
}

TEST_CASE("calls fail over to the next endpoint when the first is dead") {
  CACHEROUTE_SKIP_WITHOUT_ETCD();
  EtcdProcess etcd;
  const std::string dead = absl::StrCat("127.0.0.1:", testing::FreeLoopbackPort());
  auto client = Connect({dead, etcd.endpoint()});
  CHECK(client->current_endpoint() == dead);
  REQUIRE(client->Put("/f", "v").ok());
  CHECK(client->current_endpoint() == etcd.endpoint());  // it stays with the one that answered
  CHECK(client->Get("/f")->kv->value == "v");
  auto failover_watch_client = Connect({dead, etcd.endpoint()});
  Recorder recorder(*failover_watch_client, "/f", 0);
  REQUIRE(client->Put("/f", "w").ok());
  CHECK(Eventually([&] { return recorder.count() == 1; }, 10s));

  // No endpoint answers: UNAVAILABLE naming both.
  auto nowhere = Connect({dead, absl::StrCat("127.0.0.1:", testing::FreeLoopbackPort())});
  absl::Status status = nowhere->Get("/f").status();
  CHECK(status.code() == absl::StatusCode::kUnavailable);
  CHECK_THAT(std::string(status.message()), Catch::Contains(dead));
}

TEST_CASE("a handshake slower than the whole reconnect backoff still connects") {
  CACHEROUTE_SKIP_WITHOUT_ETCD();
  EtcdProcess etcd;
  // 2 s is above the backoff cap (1 s, 1.2 s with jitter), which once bounded each attempt: then
  // every attempt timed out before etcd's SETTINGS frame came, and no call ever succeeded.
  SlowHandshakeRelay relay(etcd.port(), std::chrono::milliseconds(2000));
  auto client = Connect({relay.endpoint()}, absl::Seconds(10));
  absl::Status put = client->Put("/slow", "v").status();
  INFO(put.ToString());
  REQUIRE(put.ok());
  CHECK(client->Get("/slow")->kv->value == "v");
  CHECK(relay.connections() == 1);  // the first attempt was given the time it needed
}

TEST_CASE("a paused etcd makes calls time out at the call deadline, then it answers again") {
  CACHEROUTE_SKIP_WITHOUT_ETCD();
  EtcdProcess etcd;
  auto client = Connect({etcd.endpoint()}, absl::Milliseconds(300));
  REQUIRE(client->Put("/p", "v").ok());
  etcd.Pause();
  CHECK(client->Get("/p").status().code() == absl::StatusCode::kDeadlineExceeded);
  CHECK(client->KeepAliveOnce(1).status().code() == absl::StatusCode::kDeadlineExceeded);
  etcd.Resume();
  CHECK(Eventually([&] { return client->Get("/p").ok(); }, 10s));
}

}  // namespace
}  // namespace cacheroute::coord
