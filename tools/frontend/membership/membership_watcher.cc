// See membership_watcher.h.
#include "tools/frontend/membership/membership_watcher.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "tools/frontend/membership/sources.h"

namespace cacheroute::frontend {

absl::StatusOr<std::vector<Upstream>> ReadMembershipSource(const FrontendConfig& config) {
  if (!config.upstreams_file.empty()) return ReadUpstreamsFile(config.upstreams_file);
  DnsSource source;
  const size_t colon = config.upstreams_dns.rfind(':');
  source.name = config.upstreams_dns.substr(0, colon);
  if (!absl::SimpleAtoi(config.upstreams_dns.substr(colon + 1), &source.port)) {
    // Validated as NAME:PORT (gateway_config.cc): only a config built by hand gets here.
    return absl::InvalidArgumentError(
        absl::StrCat("upstreams_dns: \"", config.upstreams_dns, "\" is not NAME:PORT"));
  }
  source.server = config.dns_server;
  source.timeout = std::min(config.membership_interval, absl::Seconds(5));
  return ResolveUpstreams(source);
}

absl::StatusOr<std::vector<Upstream>> InitialMembers(const FrontendConfig& config) {
  if (config.upstreams_file.empty() && config.upstreams_dns.empty()) return config.upstreams;
  absl::StatusOr<std::vector<Upstream>> read = ReadMembershipSource(config);
  if (read.ok()) return read;
  if (absl::IsInvalidArgument(read.status()) || !config.upstreams_file.empty()) return read;
  base::LogEvent("warning", "membership_read_failed",
                 {{"error", std::string(read.status().message())}});
  return config.upstreams;
}

MembershipWatcher::MembershipWatcher(const FrontendConfig& config, Membership& membership,
                                     PlannerLink* planner, StopSignal& stop)
    : config_(config), membership_(membership), planner_(planner), stop_(stop) {}

void MembershipWatcher::Start() {
  thread_ = std::thread([this] {
    do {
      ReportOnce();
      if (stop_.WaitFor(config_.membership_interval)) return;
      PollOnce();
    } while (true);
  });
}

void MembershipWatcher::Join() {
  if (thread_.joinable()) thread_.join();
}

void MembershipWatcher::PollOnce() {
  absl::StatusOr<std::vector<Upstream>> upstreams = ReadMembershipSource(config_);
  if (!upstreams.ok()) {
    const std::string error(upstreams.status().message());
    if (error != last_error_) {  // once per distinct error; the members are kept
      base::LogEvent("warning", "membership_read_failed", {{"error", error}});
      last_error_ = error;
    }
    return;
  }
  last_error_.clear();
  std::vector<Upstream> current;
  {
    const std::shared_ptr<const Members> members = membership_.Current();
    for (uint32_t d = 0; d < members->count; ++d) {
      current.push_back({members->by_index[d]->name, members->by_index[d]->url});
    }
  }
  if (SameMembers(current, *upstreams)) return;
  if (absl::Status s = membership_.Apply(*upstreams); !s.ok()) {
    base::LogEvent("warning", "membership_apply_failed", {{"error", std::string(s.message())}});
  }
}

void MembershipWatcher::ReportOnce() {
  if (planner_ == nullptr) return;
  std::vector<std::string> names = membership_.Names();
  if (names.empty() || names == reported_) return;
  if (planner_->ReportDestinations(names)) reported_ = std::move(names);
}

}  // namespace cacheroute::frontend
