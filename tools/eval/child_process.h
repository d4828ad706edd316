// ChildProcess: a program run as a child process, for the tests and benchmarks that start the
// planner, the gateway, etcd or cacheroutectl as real processes. It is started with posix_spawn,
// not fork: no atfork handlers run (gRPC's stop its threads around a fork) and the child does
// nothing but exec. Standard input is /dev/null; standard output and standard error go to files
// (the same file for both when the paths are equal) or stay this process's. The destructor kills
// (SIGKILL) and reaps a child still running.
//
// Usage:
//   absl::StatusOr<std::unique_ptr<ChildProcess>> etcd = ChildProcess::Spawn(
//       {"/usr/bin/etcd", "--name=a"}, {.stdout_path = log, .stderr_path = log});
//   if (!etcd.ok()) ...;
//   (*etcd)->Signal(SIGSTOP);
//   const int status = (*etcd)->Stop(SIGTERM, std::chrono::seconds(10));  // a waitpid status
//
// A child that logs its port when it is ready ("... started ... port=N ...") is waited for with
// AwaitLogLine on its log file, and the port read with LogField / LogNumber.
//
// A program that starts children registers them with TrackChild, so that its SIGINT/SIGTERM
// handler, KillTrackedChildrenAndExit, kills them (an interrupted program does not unwind).
//
// Not thread-safe, except Signal (and pid) while another thread waits.
#pragma once

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"

extern char** environ;

namespace cacheroute::eval {

struct SpawnOptions {
  // Files for standard output and standard error ("": this process's), created when missing.
  std::string stdout_path = "";
  std::string stderr_path = "";
  bool truncate = false;  // open them truncated instead of appending
  // The child's environment ("NAME=value" each); none: this process's.
  std::optional<std::vector<std::string>> env = std::nullopt;
};

class ChildProcess {
 public:
  // argv[0] is the program's path. Unavailable naming it when it cannot be started.
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Spawn(std::vector<std::string> argv,
                                                             const SpawnOptions& options = {}) {
    if (argv.empty()) return absl::InvalidArgumentError("argv: empty");
    std::vector<char*> args;
    for (std::string& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    std::vector<std::string> env_storage = options.env.value_or(std::vector<std::string>());
    std::vector<char*> envp;
    for (std::string& e : env_storage) envp.push_back(e.data());
    envp.push_back(nullptr);

    const int flags = O_WRONLY | O_CREAT | (options.truncate ? O_TRUNC : O_APPEND);
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
    if (!options.stdout_path.empty()) {
      posix_spawn_file_actions_addopen(&actions, 1, options.stdout_path.c_str(), flags, 0600);
    }
    if (!options.stderr_path.empty() && options.stderr_path == options.stdout_path) {
      posix_spawn_file_actions_adddup2(&actions, 1, 2);
    } else if (!options.stderr_path.empty()) {
      posix_spawn_file_actions_addopen(&actions, 2, options.stderr_path.c_str(), flags, 0600);
    }
    pid_t pid = 0;
    const int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(),
                               options.env.has_value() ? envp.data() : environ);
    posix_spawn_file_actions_destroy(&actions);
    if (rc != 0) {
      return absl::UnavailableError(absl::StrCat("cannot run ", argv[0], ": ", std::strerror(rc)));
    }
    return std::unique_ptr<ChildProcess>(new ChildProcess(pid));
  }

  ~ChildProcess() { Kill(); }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // 0 once the child is reaped.
  pid_t pid() const { return pid_; }

  // Sends `signal`; false when the child is gone.
  bool Signal(int signal) const { return pid_ > 0 && kill(pid_, signal) == 0; }

  // Waits for the exit and reaps the child: its waitpid status, or -1 when it was reaped already
  // (or cannot be waited for).
  int Wait() {
    if (pid_ <= 0) return -1;
    int status = 0;
    pid_t waited;
    do {
      waited = waitpid(pid_, &status, 0);
    } while (waited < 0 && errno == EINTR);
    pid_ = 0;
    return waited == -1 ? -1 : status;
  }

  // Reaps the child if it has exited, without blocking; true when it is gone.
  bool Exited() {
    if (pid_ <= 0) return true;
    if (waitpid(pid_, nullptr, WNOHANG) == 0) return false;  // -1: it cannot be waited for
    pid_ = 0;
    return true;
  }

  // SIGKILL, then reaps the child (nothing when it is gone).
  void Kill() {
    if (Signal(SIGKILL)) Wait();
  }

  // Sends `signal` (after SIGCONT, so that a stopped child can act on it) and waits up to
  // `grace` for the exit, then kills. The waitpid status, or -1 when the child was gone.
  int Stop(int signal, std::chrono::milliseconds grace) {
    if (pid_ <= 0) return -1;
    kill(pid_, SIGCONT);
    kill(pid_, signal);
    const auto give_up = std::chrono::steady_clock::now() + grace;
    int status = 0;
    pid_t waited;
    while ((waited = waitpid(pid_, &status, WNOHANG)) == 0) {
      if (std::chrono::steady_clock::now() > give_up) {
        kill(pid_, SIGKILL);
        return Wait();
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    pid_ = 0;
    return waited == -1 ? -1 : status;
  }

 private:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}

  pid_t pid_ = 0;
};

// A free TCP port on 127.0.0.1 (bound, read and released: another process may take it before
// the caller binds it); 0 when none could be had.
inline int FreeLoopbackPort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  close(fd);
  return ok ? ntohs(addr.sin_port) : 0;
}

// The children a program has running: TrackChild(pid, 0) adds one, TrackChild(0, pid) drops it,
// TrackChild(new, old) replaces (up to kMaxTrackedChildren at once).
inline constexpr int kMaxTrackedChildren = 64;
inline std::atomic<pid_t> tracked_children[kMaxTrackedChildren];
inline void TrackChild(pid_t pid, pid_t replacing) {
  for (auto& c : tracked_children) {
    pid_t expected = replacing;
    if (c.compare_exchange_strong(expected, pid)) return;
  }
}
// A SIGINT/SIGTERM handler (async-signal-safe): SIGKILL to every tracked child, then _exit(130).
inline void KillTrackedChildrenAndExit(int) {
  for (auto& c : tracked_children) {
    const pid_t pid = c.load();
    if (pid > 0) kill(pid, SIGKILL);
  }
  _exit(130);
}

// The file's text; "" when it cannot be read.
inline std::string ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Reads the file at `log_path` every 20 ms until it holds a complete line (newline-terminated)
// containing `marker`, and returns the first such line without its newline. DeadlineExceeded
// after `timeout`, Unavailable when `child` exits first; both quote the log so far.
inline absl::StatusOr<std::string> AwaitLogLine(ChildProcess& child, const std::string& log_path,
                                                std::string_view marker,
                                                std::chrono::milliseconds timeout) {
  const auto give_up = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const bool exited = child.Exited();  // before the read: a line logged before the exit counts
    const std::string log = ReadTextFile(log_path);
    for (size_t begin = 0, end; (end = log.find('\n', begin)) != std::string::npos;
         begin = end + 1) {
      const std::string_view line(log.data() + begin, end - begin);
      if (line.find(marker) != std::string_view::npos) return std::string(line);
    }
    if (exited || std::chrono::steady_clock::now() > give_up) {
      const std::string what =
          absl::StrCat("no line with \"", std::string(marker), "\" in ", log_path);
      return exited
                 ? absl::UnavailableError(absl::StrCat(what, ": the process exited; log:\n", log))
                 : absl::DeadlineExceededError(absl::StrCat(what, " in time; log:\n", log));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// The value of `name=` in a log line of space-separated name=value fields, up to the next space;
// nullopt when the line has no such field.
inline std::optional<std::string> LogField(std::string_view line, std::string_view name) {
  for (size_t at = line.find(name); at != std::string_view::npos; at = line.find(name, at + 1)) {
    const size_t value = at + name.size();
    if ((at == 0 || line[at - 1] == ' ') && value < line.size() && line[value] == '=') {
      const size_t end = line.find(' ', value + 1);
      return std::string(
          line.substr(value + 1, end == std::string_view::npos ? end : end - value - 1));
    }
  }
  return std::nullopt;
}

// LogField as a whole number ≥ 0; nullopt when missing or not a number.
inline std::optional<int> LogNumber(std::string_view line, std::string_view name) {
  const std::optional<std::string> field = LogField(line, name);
  if (!field || field->empty() || field->size() > 9) return std::nullopt;
  for (char c : *field) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  return std::atoi(field->c_str());
}

}  // namespace cacheroute::eval
