// What the programs' mains share: the error line "<name>: error: <message>" (Fail; the tools/eval
// programs too), the service mains' (cacheroute-planner, cacheroute-gateway) exit codes for a
// configuration that does not load or a service that does not start, and SIGINT/SIGTERM as a
// flag that the main loop polls.
//
// Usage:
//   absl::StatusOr<Config> config = LoadConfig(argc, argv);
//   if (!config.ok()) return program::ConfigExit("cacheroute-x", config.status());
//   ... start; if (!started.ok()) return program::StartExit("cacheroute-x", started.status());
//   program::CatchStopSignals();
//   while (!program::StopRequested()) std::this_thread::sleep_for(...);
#pragma once

#include <csignal>
#include <iostream>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace cacheroute::base::program {

// Prints "<name>: error: <message>" on stderr and returns `code`, for main to return.
inline int Fail(absl::string_view name, int code, absl::string_view message) {
  std::cerr << name << ": error: " << message << "\n";
  return code;
}

// A loader's error: NotFound carries --help's text, printed to stdout (exit 0); any other error
// is Fail's line (exit 2).
inline int ConfigExit(absl::string_view name, const absl::Status& status) {
  if (status.code() == absl::StatusCode::kNotFound) {
    std::cout << status.message();
    return 0;
  }
  return Fail(name, 2, status.message());
}

// A service that did not start: Fail's line; exit 2 for InvalidArgument (a configuration
// refused), else 1 (an address in use, unreadable state).
inline int StartExit(absl::string_view name, const absl::Status& status) {
  return Fail(name, status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1, status.message());
}

// The handlers only set a flag (all a signal handler may do); the main loop polls it.
inline volatile std::sig_atomic_t stop_requested = 0;
inline void CatchStopSignals() {
  std::signal(SIGINT, [](int) { stop_requested = 1; });
  std::signal(SIGTERM, [](int) { stop_requested = 1; });
}
inline bool StopRequested() { return stop_requested != 0; }

}  // namespace cacheroute::base::program
