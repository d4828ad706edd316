// Test-only: RequireOk(result) REQUIREs that an absl::StatusOr holds a value, printing its status
// when it does not, and returns the value.
#pragma once

#include <catch2/catch.hpp>
#include <utility>

#include "absl/status/statusor.h"

namespace cacheroute::testing {

template <typename T>
T RequireOk(absl::StatusOr<T> result) {
  INFO(result.status().ToString());
  REQUIRE(result.ok());
  return *std::move(result);
}

}  // namespace cacheroute::testing
