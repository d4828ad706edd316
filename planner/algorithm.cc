// See algorithm.h.
#include "planner/algorithm.h"

#include <optional>

#include "absl/strings/str_cat.h"
#include "cacheroute/dataplane/enum_names.h"

namespace cacheroute::planner {
namespace {

constexpr dataplane::EnumName<Algorithm> kAlgorithmNames[] = {
    {Algorithm::kCacheRoute, "cacheroute"},
    {Algorithm::kCacheRoutePaper, "cacheroute-paper"},
};
static_assert(dataplane::IsEnumTable(kAlgorithmNames, Algorithm::kCacheRoutePaper));

}  // namespace

std::string_view AlgorithmName(Algorithm algorithm) {
  return dataplane::NameOf(kAlgorithmNames, algorithm);
}

absl::StatusOr<Algorithm> ParseAlgorithm(absl::string_view name) {
  if (std::optional<Algorithm> a =
          dataplane::ParseName(kAlgorithmNames, std::string_view(name.data(), name.size()))) {
    return *a;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown algorithm \"", name, "\" (one of ", AlgorithmNames(), ")"));
}

std::string AlgorithmNames() { return dataplane::JoinNames(kAlgorithmNames); }

PlanConfig PlanConfigFor(Algorithm algorithm, PlanConfig base) {
  const bool shipped = algorithm == Algorithm::kCacheRoute;
  base.spill = shipped;
  base.balance_share = shipped ? kCacheRouteBalanceShare : 0.0;
  return base;
}

bool PlansByteAware(Algorithm algorithm) { return algorithm == Algorithm::kCacheRoute; }

}  // namespace cacheroute::planner
