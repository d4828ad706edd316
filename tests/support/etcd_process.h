// Test-only: a real single-member etcd (/usr/bin/etcd) on free loopback ports, its data in a fresh
// temporary directory. The constructor starts it and waits until it answers a KV read; Stop()
// (SIGTERM), Kill() (SIGKILL), Pause()/Resume() (SIGSTOP/SIGCONT) and Start() again on the same
// ports and data directory. The destructor always kills it and removes the directory.
//
// Usage:
//   CACHEROUTE_SKIP_WITHOUT_ETCD();  // in a TEST_CASE: warns and returns when etcd is missing
//   EtcdProcess etcd;
//   auto client = coord::EtcdClient::Create({.endpoints = {etcd.endpoint()}});
#pragma once

#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"
#include "tests/support/free_port.h"
#include "tests/support/temp_dir.h"
#include "tools/eval/child_process.h"

namespace cacheroute::testing {

class EtcdProcess {
 public:
  static constexpr const char* kPath = "/usr/bin/etcd";
  static constexpr const char* kMissing =
      "/usr/bin/etcd is missing (Debian package etcd-server): skipping this test";
  static bool Available() { return access(kPath, X_OK) == 0; }

  EtcdProcess()
      : dir_("cacheroute-etcd"), client_port_(FreeLoopbackPort()), peer_port_(FreeLoopbackPort()) {
    REQUIRE(client_port_ != peer_port_);
    Start();
  }
  ~EtcdProcess() = default;  // the child is killed
  EtcdProcess(const EtcdProcess&) = delete;
  EtcdProcess& operator=(const EtcdProcess&) = delete;

  std::string endpoint() const { return absl::StrCat("127.0.0.1:", client_port_); }
  int port() const { return client_port_; }
  int pid() const { return child_ != nullptr ? child_->pid() : 0; }
  bool running() const { return pid() > 0; }

  // Starts etcd (again, on the same ports and data) and waits until it serves reads.
  void Start() {
    REQUIRE(!running());
    const std::string client_url = absl::StrCat("http://127.0.0.1:", client_port_);
    const std::string peer_url = absl::StrCat("http://127.0.0.1:", peer_port_);
    std::vector<std::string> args = {
        kPath,
        "--name=test",
        "--data-dir=" + dir_.File("data"),
        "--listen-client-urls=" + client_url,
        "--advertise-client-urls=" + client_url,
        "--listen-peer-urls=" + peer_url,
        "--initial-advertise-peer-urls=" + peer_url,
        "--initial-cluster=test=" + peer_url,
        "--initial-cluster-state=new",
        // One member: it elects itself at once; a short election timeout also lowers etcd's
        // minimum lease TTL (1.5 election timeouts), so tests can use TTLs of a second or two.
        "--heartbeat-interval=25",
        "--election-timeout=250",
        "--logger=zap",
        "--log-outputs=stderr",
        "--log-level=warn",
    };
    const std::string log = dir_.File("etcd.log");
    absl::StatusOr<std::unique_ptr<eval::ChildProcess>> child =
        eval::ChildProcess::Spawn(std::move(args), {.stdout_path = log, .stderr_path = log});
    INFO(child.status().ToString());
    REQUIRE(child.ok());
    child_ = *std::move(child);
    WaitUntilServing();
  }

  // SIGTERM, then waits for the exit (SIGKILL after 10 s).
  void Stop() { Exit(SIGTERM); }
  // SIGKILL and waits.
  void Kill() { Exit(SIGKILL); }
  // Both return once every thread of etcd is stopped (or none is): kill() only queues the
  // signal, and an etcd still running for a moment would answer a call meant to time out.
  void Pause() {
    REQUIRE(running());
    REQUIRE(child_->Signal(SIGSTOP));
    REQUIRE(WaitForStopped(true));
  }
  void Resume() {
    REQUIRE(running());
    REQUIRE(child_->Signal(SIGCONT));
    REQUIRE(WaitForStopped(false));
  }

  std::string Log() const { return dir_.Read("etcd.log"); }


 private:
  // `signal` (a paused etcd is continued first, to handle it), then the exit (SIGKILL after 10 s).
  void Exit(int signal) {
    if (child_ != nullptr) child_->Stop(signal, std::chrono::seconds(10));
  }

  // Whether every thread of etcd is in state T (stopped), per /proc/<pid>/task/*/stat.
  bool AllThreadsStopped() const {
    std::error_code error;
    const std::filesystem::path tasks = absl::StrCat("/proc/", pid(), "/task");
    for (const auto& task : std::filesystem::directory_iterator(tasks, error)) {
      std::ifstream in(task.path() / "stat");
      std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      const size_t paren = stat.rfind(')');
      if (paren == std::string::npos || paren + 2 >= stat.size()) continue;  // thread gone
      if (stat[paren + 2] != 'T') return false;
    }
    return !error;
  }
  bool WaitForStopped(bool stopped) const {
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (AllThreadsStopped() != stopped) {
      if (std::chrono::steady_clock::now() > give_up) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return true;
  }

  void WaitUntilServing() {
    auto channel = grpc::CreateChannel(endpoint(), grpc::InsecureChannelCredentials());
    auto kv = etcdserverpb::KV::NewStub(channel);
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (true) {
      if (child_->Exited()) {
        INFO(Log());
        FAIL("etcd exited while starting");
      }
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(500));
      context.set_wait_for_ready(true);
      etcdserverpb::RangeRequest request;
      request.set_key("probe");
      etcdserverpb::RangeResponse response;
      if (kv->Range(&context, request, &response).ok()) return;
      if (std::chrono::steady_clock::now() > give_up) {
        INFO(Log());
        FAIL("etcd did not answer within 30 s");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }

  TempDir dir_;
  int client_port_;
  int peer_port_;
  std::unique_ptr<eval::ChildProcess> child_;
};

}  // namespace cacheroute::testing

// Ends the calling test (a void function: a TEST_CASE body) with a warning when /usr/bin/etcd is
// not installed.
#define CACHEROUTE_SKIP_WITHOUT_ETCD()                          \
  do {                                                          \
    if (!::cacheroute::testing::EtcdProcess::Available()) {     \
      WARN(::cacheroute::testing::EtcdProcess::kMissing);       \
      return;                                                   \
    }                                                           \
  } while (false)
