// See membership_watcher.h.
#include "tools/frontend/membership/membership_watcher.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "tools/frontend/membership/sources.h"

namespace cacheroute::frontend {
namespace {

bool PoolSource(const FrontendConfig& config) { return !config.upstreams_inference_pool.empty(); }

// The pool source's client and options from the configuration (in-cluster where not overridden).
struct PoolAccess {
  std::unique_ptr<KubeClient> client;
  InferencePoolOptions options;
};
absl::StatusOr<PoolAccess> MakePoolAccess(const FrontendConfig& config) {
  const InClusterEnvironment environment = InClusterEnvironment::FromProcess();
  PoolAccess access;
  CACHEROUTE_ASSIGN_OR_RETURN(KubeApi api, KubeApiFor(config, environment));
  CACHEROUTE_ASSIGN_OR_RETURN(access.options.pool_namespace, PoolNamespace(config, environment));
  CACHEROUTE_ASSIGN_OR_RETURN(access.client, KubeClient::Create(api));
  access.options.pool = config.upstreams_inference_pool;
  access.options.max_members = config.max_upstreams;
  access.options.seed = static_cast<uint64_t>(absl::ToUnixNanos(absl::Now()));
  return access;
}

}  // namespace

absl::StatusOr<std::vector<Upstream>> ReadMembershipSource(const FrontendConfig& config) {
  if (!config.upstreams_file.empty()) return ReadUpstreamsFile(config.upstreams_file);
  if (PoolSource(config)) {
    CACHEROUTE_ASSIGN_OR_RETURN(PoolAccess access, MakePoolAccess(config));
    return ReadInferencePool(*access.client, access.options, [] { return false; });
  }
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
  if (!DynamicMembership(config)) return config.upstreams;
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
  if (PoolSource(config_)) {
    absl::StatusOr<PoolAccess> access = MakePoolAccess(config_);
    if (!access.ok()) {  // InitialMembers has refused this configuration already
      base::LogEvent("error", "membership_read_failed",
                     {{"error", std::string(access.status().message())}});
    } else {
      kube_ = std::move(access->client);
      access->options.on_members = [this](std::vector<Upstream> upstreams) {
        Apply(upstreams);
        ReportOnce();
      };
      pool_ = std::make_unique<InferencePoolSource>(*kube_, std::move(access->options), stop_);
      pool_->Start();
    }
  }
  thread_ = std::thread([this] {
    do {
      ReportOnce();
      if (stop_.WaitFor(config_.membership_interval)) return;
      if (pool_ == nullptr) PollOnce();  // the pool's watch applies its changes itself
    } while (true);
  });
}

void MembershipWatcher::Join() {
  if (thread_.joinable()) thread_.join();
  if (pool_ != nullptr) pool_->Join();
}

uint64_t MembershipWatcher::watch_relists() const {
  return pool_ != nullptr ? pool_->relists() : 0;
}

uint64_t MembershipWatcher::watch_restarts() const {
  return pool_ != nullptr ? pool_->watch_restarts() : 0;
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
  Apply(*upstreams);
}

void MembershipWatcher::Apply(const std::vector<Upstream>& upstreams) {
  std::vector<Upstream> current;
  {
    const std::shared_ptr<const Members> members = membership_.Current();
    for (uint32_t d = 0; d < members->count; ++d) {
      current.push_back({members->by_index[d]->name, members->by_index[d]->url});
    }
  }
  if (SameMembers(current, upstreams)) return;
  if (absl::Status s = membership_.Apply(upstreams); !s.ok()) {
    base::LogEvent("warning", "membership_apply_failed", {{"error", std::string(s.message())}});
  }
}

void MembershipWatcher::ReportOnce() {
  if (planner_ == nullptr) return;
  std::lock_guard<std::mutex> lock(report_mu_);
  std::vector<std::string> names = membership_.Names();
  if (names.empty() || names == reported_) return;
  if (planner_->ReportDestinations(names)) reported_ = std::move(names);
}

}  // namespace cacheroute::frontend
