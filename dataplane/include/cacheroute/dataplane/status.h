// Status and Result<T>: errors as values for the dataplane, without abseil.
//
// The dataplane must build with the C++20 standard library alone, so it cannot use absl::Status.
// These two types are the minimum it needs: a success flag and a human-readable reason that names
// the offending field and value. They are used on the control path (building and installing
// tables, marking destinations); the request path returns plain values and never fails.
//
// Invariants: Status::Ok() has an empty message; an error Status has a non-empty one. A Result
// holds a value exactly when its status is ok.
//
// Usage:
//   Result<RoutingTable> table = RoutingTable::Build(...);
//   if (!table.ok()) Log(table.status().message);
//   Use(*table);
#pragma once

#include <optional>
#include <string>
#include <utility>

namespace cacheroute::dataplane {

struct Status {
  bool ok = true;
  std::string message;

  static Status Ok() { return {}; }
  static Status Error(std::string message) { return {false, std::move(message)}; }
};

template <typename T>
class Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT: implicit, like absl::StatusOr
  Result(Status status) : status_(std::move(status)) {  // NOLINT
    // An ok Status without a value would make operator* undefined; turn it into an error.
    if (status_.ok) status_ = Status::Error("Result constructed from an ok Status without a value");
  }

  bool ok() const { return value_.has_value(); }
  const Status& status() const { return status_; }

  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T& operator*() & { return *value_; }
  const T& operator*() const& { return *value_; }
  T&& operator*() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }

 private:
  Status status_;
  std::optional<T> value_;
};

}  // namespace cacheroute::dataplane
