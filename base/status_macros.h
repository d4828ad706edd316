// Early return on error, for functions that return absl::Status or absl::StatusOr<T>.
//
//   CACHEROUTE_ASSIGN_OR_RETURN(Config config, ParseConfig(text));  // declares `config`
//   CACHEROUTE_ASSIGN_OR_RETURN(existing, Load(path));               // assigns an existing one
//
// It evaluates the absl::StatusOr expression once; on error it returns that status from the
// enclosing function, otherwise it moves the value into the left-hand side. A use is one statement
// (not the body of an unbraced if); the left-hand side and the expression must not hold a comma
// outside parentheses (name such a type with `using`). An absl::Status is returned on error with
// the one-line `if (absl::Status s = F(); !s.ok()) return s;`. The idiom is ASSIGN_OR_RETURN of
// Google's code bases (TensorFlow's TF_ASSIGN_OR_RETURN); abseil 20220623 ships no such macro.
#pragma once

#include <utility>

#include "absl/status/statusor.h"

#define CACHEROUTE_STATUS_CONCAT_INNER_(a, b) a##b
#define CACHEROUTE_STATUS_CONCAT_(a, b) CACHEROUTE_STATUS_CONCAT_INNER_(a, b)

#define CACHEROUTE_ASSIGN_OR_RETURN(lhs, expr) \
  CACHEROUTE_ASSIGN_OR_RETURN_IMPL_(CACHEROUTE_STATUS_CONCAT_(cacheroute_or_, __LINE__), lhs, expr)

#define CACHEROUTE_ASSIGN_OR_RETURN_IMPL_(result, lhs, expr) \
  auto result = (expr);                                      \
  if (!result.ok()) return std::move(result).status();       \
  lhs = *std::move(result)
