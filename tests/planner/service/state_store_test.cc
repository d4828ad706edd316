// Tests for planner/service/state_store: real files in a temporary directory.
#include "planner/service/state_store.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <random>

namespace cacheroute::service {
namespace {

std::string TempDir() {
  std::random_device rd;
  const auto dir = std::filesystem::temp_directory_path() /
                   ("cacheroute-state-test-" + std::to_string(rd()) + std::to_string(rd()));
  return dir.string();
}

TEST_CASE("a fresh directory has no state; Save then Load round-trips") {
  const std::string dir = TempDir() + "/nested/state";  // Open creates missing directories
  absl::StatusOr<StateStore> store = StateStore::Open(dir);
  REQUIRE(store.ok());
  absl::StatusOr<std::optional<v1::PlannerState>> empty = store->Load();
  REQUIRE(empty.ok());
  CHECK_FALSE(empty->has_value());

  v1::PlannerState state;
  state.set_format(1);
  state.add_destinations("d0");
  state.add_drained(false);
  state.mutable_table()->mutable_version()->set_epoch(7);
  state.mutable_table()->mutable_version()->set_number(3);
  REQUIRE(store->Save(state).ok());
  state.mutable_table()->mutable_version()->set_number(4);  // a second save replaces the first
  REQUIRE(store->Save(state).ok());

  absl::StatusOr<std::optional<v1::PlannerState>> loaded = StateStore::Open(dir)->Load();
  REQUIRE(loaded.ok());
  REQUIRE(loaded->has_value());
  CHECK((*loaded)->SerializeAsString() == state.SerializeAsString());
  // No temporary file is left behind.
  CHECK_FALSE(std::filesystem::exists(dir + "/" + StateStore::kFileName + ".tmp"));
  std::filesystem::remove_all(std::filesystem::path(dir).parent_path().parent_path());
}

TEST_CASE("a corrupt or unknown-format state file is DataLoss, not a fresh start") {
  const std::string dir = TempDir();
  absl::StatusOr<StateStore> store = StateStore::Open(dir);
  REQUIRE(store.ok());
  {
    std::ofstream out(dir + "/" + StateStore::kFileName, std::ios::binary);
    out << "\xff\xff\xff\xff not a protobuf";
  }
  CHECK(store->Load().status().code() == absl::StatusCode::kDataLoss);
  v1::PlannerState future;
  future.set_format(99);
  {
    std::ofstream out(dir + "/" + StateStore::kFileName, std::ios::binary);
    out << future.SerializeAsString();
  }
  absl::StatusOr<std::optional<v1::PlannerState>> loaded = store->Load();
  CHECK(loaded.status().code() == absl::StatusCode::kDataLoss);
  CHECK_THAT(std::string(loaded.status().message()), Catch::Contains("format 99"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("an unusable state directory is InvalidArgument naming state_dir") {
  const std::string file = TempDir();
  std::ofstream(file) << "a file, not a directory";
  absl::StatusOr<StateStore> store = StateStore::Open(file + "/sub");
  CHECK(store.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK_THAT(std::string(store.status().message()), Catch::Contains("state_dir"));
  std::filesystem::remove(file);
}

}  // namespace
}  // namespace cacheroute::service
