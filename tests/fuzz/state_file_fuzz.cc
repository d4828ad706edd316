// Fuzz target: the planner's state file (STATE_DIR/planner-state.pb). The bytes are written to a
// state directory of this process's own and read back as a restarting planner reads them:
// StateStore::Load (parse, format check), then PlannerCore::Create restoring it (destination
// names, drained flags, RateAggregator::Restore, TableSnapshot::FromProto, the version).
// Invariants: Load accepts exactly what parses as a v1::PlannerState of format 1 (else DataLoss);
// Create either restores (and then serves the file's table at its version) or fails with
// DataLoss; a restored planner plans (or says every destination is drained), persists, and that
// state file restores again to the same latest version.
#include <stdlib.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>

#include "absl/time/time.h"
#include "base/clock.h"
#include "cacheroute/v1/planner_state.pb.h"
#include "planner/service/planner_core.h"
#include "planner/service/state_store.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

const std::string& StateDir() {
  static const std::string* dir = [] {
    const char* tmp = getenv("TMPDIR");
    std::string pattern = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") +
                          "/cacheroute-state-fuzz-XXXXXX";
    if (mkdtemp(pattern.data()) == nullptr) {
      std::perror("mkdtemp");
      std::abort();
    }
    auto* d = new std::string(pattern);
    // Leave no directory behind when the fuzzer exits normally.
    std::atexit([] {
      const std::string& s = StateDir();
      std::remove((s + "/" + cacheroute::service::StateStore::kFileName).c_str());
      std::remove((s + "/" + cacheroute::service::StateStore::kFileName + ".tmp").c_str());
      rmdir(s.c_str());
    });
    return d;
  }();
  return *dir;
}

cacheroute::service::PlannerConfig Config() {
  cacheroute::service::PlannerConfig config;
  config.destinations = {"d0", "d1", "d2"};
  config.q_cap = 10;
  config.slots_per_destination = 4;
  config.history = 2;
  config.state_dir = StateDir();
  return config;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cacheroute;
  using namespace cacheroute::service;
  const std::string path = StateDir() + "/" + StateStore::kFileName;
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
    FUZZ_CHECK(out.good(), "cannot write the state file");
  }

  absl::StatusOr<StateStore> store = StateStore::Open(StateDir());
  FUZZ_CHECK(store.ok(), store.status().ToString());
  absl::StatusOr<std::optional<v1::PlannerState>> loaded = store->Load();
  v1::PlannerState expected;
  const bool parses = expected.ParseFromArray(data, static_cast<int>(size));
  if (!parses || expected.format() != 1) {
    FUZZ_CHECK(!loaded.ok() && loaded.status().code() == absl::StatusCode::kDataLoss,
               loaded.status().ToString());
  } else {
    FUZZ_CHECK(loaded.ok() && loaded->has_value(), loaded.status().ToString());
  }

  base::ManualClock clock(absl::FromUnixSeconds(1'800'000'000));
  absl::StatusOr<std::unique_ptr<PlannerCore>> core = PlannerCore::Create(Config(), &clock);
  if (!loaded.ok()) {
    FUZZ_CHECK(!core.ok(), "a state file Load refuses was restored");
    return 0;
  }
  if (!core.ok()) {
    FUZZ_CHECK(core.status().code() == absl::StatusCode::kDataLoss, core.status().ToString());
    return 0;
  }
  std::shared_ptr<const table::TableSnapshot> latest = (*core)->Latest();
  FUZZ_CHECK(latest != nullptr, "a restored planner has no table");
  const table::TableVersion restored = latest->version();
  FUZZ_CHECK(restored == table::TableVersion::FromProto(expected.table().version()));
  FUZZ_CHECK(restored.epoch != 0 && restored.number != 0);
  (void)(*core)->Status();

  // A restored planner runs on: it plans (unless every destination is drained), persists, and
  // what it persisted restores again.
  clock.Advance(absl::Seconds(10));
  absl::StatusOr<PlanOutcome> outcome = (*core)->Replan();
  if (!outcome.ok()) {
    FUZZ_CHECK(outcome.status().code() == absl::StatusCode::kFailedPrecondition,
               outcome.status().ToString());
    return 0;
  }
  FUZZ_CHECK(outcome->version >= restored);
  FUZZ_CHECK((*core)->counters().persist_errors == 0);
  const table::TableVersion after = (*core)->Latest()->version();
  core->reset();
  absl::StatusOr<std::unique_ptr<PlannerCore>> again = PlannerCore::Create(Config(), &clock);
  FUZZ_CHECK(again.ok(), again.status().ToString());
  FUZZ_CHECK((*again)->Latest() != nullptr && (*again)->Latest()->version() == after);
  return 0;
}
