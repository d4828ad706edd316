// StateStore: the planner's state directory. One file, STATE_DIR/planner-state.pb, replaced
// atomically: written to a temporary file, fsync'ed, renamed over the old one, and the directory
// fsync'ed, so a crash at any moment leaves either the old state or the new one, never a mix.
//
// Usage:
//   StateStore store("/var/lib/cacheroute");
//   absl::StatusOr<std::optional<v1::PlannerState>> state = store.Load();  // nullopt: fresh dir
//   absl::Status saved = store.Save(new_state);
#pragma once

#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "cacheroute/v1/planner_state.pb.h"

namespace cacheroute::service {

class StateStore {
 public:
  static constexpr char kFileName[] = "planner-state.pb";

  // Creates the directory if it does not exist.
  static absl::StatusOr<StateStore> Open(std::string dir);

  // nullopt when there is no state file yet; DataLoss when it exists but cannot be parsed.
  absl::StatusOr<std::optional<v1::PlannerState>> Load() const;
  absl::Status Save(const v1::PlannerState& state) const;

  const std::string& dir() const { return dir_; }

 private:
  explicit StateStore(std::string dir) : dir_(std::move(dir)) {}
  std::string dir_;
};

}  // namespace cacheroute::service
