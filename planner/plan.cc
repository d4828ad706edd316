// See plan.h.
#include "planner/plan.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <utility>

#include "absl/strings/str_format.h"

namespace cacheroute::planner {
namespace {

// Destinations beyond this are surely a mistake (and would cost R doubles of memory).
constexpr uint32_t kMaxDestinations = 1u << 20;

}  // namespace

uint32_t plan_internal::SplitAssignmentCount(double rate, double q_cap, uint32_t destinations,
                                             bool* capped) {
  const double ratio = rate / q_cap;
  if (!(ratio <= static_cast<double>(destinations))) {  // also catches an infinite ratio
    if (capped != nullptr) *capped = true;
    return destinations;
  }
  uint32_t k = std::max<uint32_t>(1, static_cast<uint32_t>(std::ceil(ratio)));
  // The division above rounds; settle on the smallest k with fl(rate / k) ≤ q_cap, which is what
  // the per-assignment cap promises.
  while (rate / k > q_cap) {
    if (k == destinations) {
      if (capped != nullptr) *capped = true;
      return k;
    }
    ++k;
  }
  while (k > 1 && rate / (k - 1) <= q_cap) --k;
  return k;
}

absl::Status ValidatePlanConfig(const PlanConfig& config) {
  if (config.destinations == 0 || config.destinations > kMaxDestinations) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "destinations must be between 1 and %u, got %u", kMaxDestinations, config.destinations));
  }
  if (!std::isfinite(config.q_cap) || config.q_cap <= 0) {
    return absl::InvalidArgumentError(
        absl::StrFormat("q_cap must be a finite number > 0, got %g", config.q_cap));
  }
  if (config.slots_per_destination == 0) {
    return absl::InvalidArgumentError("slots_per_destination must be >= 1, got 0");
  }
  for (const auto& [field, value] :
       {std::pair{"unkeyed_rate", config.unkeyed_rate},
        std::pair{"balance_share", config.balance_share},
        std::pair{"stickiness", config.stickiness},
        std::pair{"kv_budget_tokens", config.kv_budget_tokens},
        std::pair{"kv_capacity_tokens", config.kv_capacity_tokens},
        std::pair{"request_overhead_tokens", config.request_overhead_tokens}}) {
    if (!(value >= 0) || std::isinf(value)) {
      return absl::InvalidArgumentError(
          absl::StrFormat("%s must be a finite number >= 0, got %g", field, value));
    }
  }
  if (config.kv_budget_tokens > 0 && config.placement != Placement::kLpt) {
    return absl::InvalidArgumentError(
        "placement must be LPT when kv_budget_tokens > 0 (byte-aware planning), got hashed");
  }
  return absl::OkStatus();
}

Plan Plan::Remapped(std::span<const uint32_t> index, uint32_t destinations) const {
  const auto mapped = [&](uint32_t d) { return d < index.size() ? index[d] : kNoSpill; };
  plan_internal::PlanData out;
  out.config = data_.config;
  out.config.destinations = destinations;
  out.admitted = data_.admitted;
  out.stats = data_.stats;
  out.offsets.reserve(data_.offsets.size());
  out.destination_ids.reserve(data_.destination_ids.size());
  for (size_t i = 0; i < size(); ++i) {
    out.offsets.push_back(static_cast<uint32_t>(out.destination_ids.size()));
    const size_t first = out.destination_ids.size();
    for (uint32_t d : this->destinations(i)) {
      if (mapped(d) != kNoSpill) out.destination_ids.push_back(mapped(d));
    }
    std::sort(out.destination_ids.begin() + static_cast<std::ptrdiff_t>(first),
              out.destination_ids.end());
  }
  out.offsets.push_back(static_cast<uint32_t>(out.destination_ids.size()));
  if (!data_.spills.empty()) {
    out.spills.reserve(data_.spills.size());
    for (uint32_t s : data_.spills) out.spills.push_back(s == kNoSpill ? kNoSpill : mapped(s));
  }
  out.loads.assign(destinations, 0.0);
  for (size_t d = 0; d < data_.loads.size(); ++d) {
    if (mapped(static_cast<uint32_t>(d)) != kNoSpill) out.loads[mapped(d)] = data_.loads[d];
  }
  out.work = data_.work;
  if (!data_.work_loads.empty()) {
    out.work_loads.assign(destinations, 0.0);
    for (size_t d = 0; d < data_.work_loads.size(); ++d) {
      if (mapped(static_cast<uint32_t>(d)) != kNoSpill) {
        out.work_loads[mapped(d)] = data_.work_loads[d];
      }
    }
  }
  return Plan(std::move(out));
}

}  // namespace cacheroute::planner
