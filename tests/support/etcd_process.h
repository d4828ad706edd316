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

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <filesystem>
#include <iterator>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/strings/str_cat.h"
#include "etcd/etcdserver/etcdserverpb/rpc.grpc.pb.h"
#include "tests/support/free_port.h"
#include "tests/support/temp_dir.h"

extern char** environ;

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
  ~EtcdProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  EtcdProcess(const EtcdProcess&) = delete;
  EtcdProcess& operator=(const EtcdProcess&) = delete;

  std::string endpoint() const { return absl::StrCat("127.0.0.1:", client_port_); }
  int port() const { return client_port_; }
  int pid() const { return pid_; }
  bool running() const { return pid_ > 0; }

  // Starts etcd (again, on the same ports and data) and waits until it serves reads.
  void Start() {
    REQUIRE(pid_ <= 0);
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
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    const std::string log = dir_.File("etcd.log");
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    posix_spawn_file_actions_addopen(&actions, 2, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, kPath, &actions, nullptr, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    REQUIRE(rc == 0);
    pid_ = pid;
    WaitUntilServing();
  }

  // SIGTERM, then waits for the exit (SIGKILL after 10 s).
  void Stop() { Signal(SIGTERM, std::chrono::seconds(10)); }
  // SIGKILL and waits.
  void Kill() { Signal(SIGKILL, std::chrono::seconds(10)); }
  // Both return once every thread of etcd is stopped (or none is): kill() only queues the
  // signal, and an etcd still running for a moment would answer a call meant to time out.
  void Pause() {
    REQUIRE(pid_ > 0);
    REQUIRE(kill(pid_, SIGSTOP) == 0);
    REQUIRE(WaitForStopped(true));
  }
  void Resume() {
    REQUIRE(pid_ > 0);
    REQUIRE(kill(pid_, SIGCONT) == 0);
    REQUIRE(WaitForStopped(false));
  }

  std::string Log() const { return dir_.Read("etcd.log"); }


 private:
  void Signal(int signal, std::chrono::seconds grace) {
    if (pid_ <= 0) return;
    kill(pid_, SIGCONT);  // a paused etcd must run to handle SIGTERM
    kill(pid_, signal);
    const auto give_up = std::chrono::steady_clock::now() + grace;
    while (waitpid(pid_, nullptr, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > give_up) {
        kill(pid_, SIGKILL);
        waitpid(pid_, nullptr, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    pid_ = -1;
  }

  // Whether every thread of etcd is in state T (stopped), per /proc/<pid>/task/*/stat.
  bool AllThreadsStopped() const {
    std::error_code error;
    const std::filesystem::path tasks = absl::StrCat("/proc/", pid_, "/task");
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
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
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
  pid_t pid_ = -1;
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
