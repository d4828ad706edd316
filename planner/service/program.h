// What the service mains (cacheroute-planner, cacheroute-gateway) share: their exit codes for a
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
#include <string_view>

#include "absl/status/status.h"

namespace cacheroute::service::program {

// A loader's error: NotFound carries --help's text, printed to stdout (exit 0); any other error
// is "<name>: error: <message>" on stderr (exit 2).
inline int ConfigExit(std::string_view name, const absl::Status& status) {
  if (status.code() == absl::StatusCode::kNotFound) {
    std::cout << status.message();
    return 0;
  }
  std::cerr << name << ": error: " << status.message() << "\n";
  return 2;
}

// A service that did not start: "<name>: error: <message>" on stderr; exit 2 for
// InvalidArgument (a configuration refused), else 1 (an address in use, unreadable state).
inline int StartExit(std::string_view name, const absl::Status& status) {
  std::cerr << name << ": error: " << status.message() << "\n";
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

// The handlers only set a flag (all a signal handler may do); the main loop polls it.
inline volatile std::sig_atomic_t stop_requested = 0;
inline void CatchStopSignals() {
  std::signal(SIGINT, [](int) { stop_requested = 1; });
  std::signal(SIGTERM, [](int) { stop_requested = 1; });
}
inline bool StopRequested() { return stop_requested != 0; }

}  // namespace cacheroute::service::program
