// PlannerChannels: the gRPC channels to a set of planner replicas (docs/ha.md), for
// TableSubscriber and RateReporter. gRPC fails over by itself inside one channel when its target
// resolves to all replicas, so Create builds as few channels as gRPC 1.51 allows:
//   - one address (a host, or a DNS name resolving to every replica: a headless Service): one
//     channel on that target;
//   - only IPv4 literals, or only IPv6 literals: one channel on "ipv4:a:1,b:2" / "ipv6:[a]:1,…";
//   - anything else (several host names, or IPv4 mixed with IPv6): one channel per address,
//     since a gRPC target names one resolver and one name. Callers rotate: Current() is the
//     channel to use, Failed(index) after UNAVAILABLE / DEADLINE_EXCEEDED moves to the next,
//     Use(index) goes back to a channel seen READY again.
// Every channel uses the round_robin LB policy (each RPC or stream goes to a READY replica, so
// a broken stream or a retried report lands on another replica at once, and the table fan-out
// spreads over all of them), re-resolves DNS at most once a second, caps reconnect backoff at
// 1 s and pings every 20 s (keepalive). With TLS, certificates are checked against the target's
// name: give host names (each its own channel) or one DNS name, not a list of IP literals.
// Thread-safe. Why: docs/dataplane.md, "Several planner replicas".
//
// Usage:
//   auto channels = PlannerChannels::Create({"10.0.0.1:50051", "10.0.0.2:50051"},
//                                           grpc::InsecureChannelCredentials());
//   TableSubscriber subscriber(channels, router, options);
//   RateReporter reporter(channels, recorder, report_options);
#pragma once

#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace cacheroute::dataplane {

// The gRPC targets for `addresses` (each HOST:PORT, an IPv6 host in brackets), as described
// above: one target when possible, else the addresses one by one. Pure.
inline std::vector<std::string> PlannerTargets(const std::vector<std::string>& addresses) {
  if (addresses.size() <= 1) return addresses;
  const auto literal = [](const std::string& address, int family) {
    const size_t colon = address.rfind(':');
    if (colon == std::string::npos) return false;
    std::string host = address.substr(0, colon);
    if (family == AF_INET6) {
      if (host.size() < 2 || host.front() != '[' || host.back() != ']') return false;
      host = host.substr(1, host.size() - 2);
    }
    unsigned char buffer[sizeof(in6_addr)];
    return inet_pton(family, host.c_str(), buffer) == 1;
  };
  for (const auto& [family, scheme] : {std::pair{AF_INET, "ipv4:"}, {AF_INET6, "ipv6:"}}) {
    bool all = true;
    for (const std::string& a : addresses) all = all && literal(a, family);
    if (!all) continue;
    std::string target = scheme;
    for (size_t i = 0; i < addresses.size(); ++i) target += (i ? "," : "") + addresses[i];
    return {target};
  }
  return addresses;
}

// The service config every planner channel gets.
inline constexpr const char* kPlannerServiceConfig =
    R"({"loadBalancingConfig":[{"round_robin":{}}]})";

class PlannerChannels {
 public:
  // `args` come on top of the defaults above (e.g. a larger receive limit).
  static std::shared_ptr<PlannerChannels> Create(
      const std::vector<std::string>& addresses,
      const std::shared_ptr<grpc::ChannelCredentials>& credentials,
      grpc::ChannelArguments args = {}) {
    args.SetServiceConfigJSON(kPlannerServiceConfig);
    args.SetInt(GRPC_ARG_DNS_MIN_TIME_BETWEEN_RESOLUTIONS_MS, 1000);
    args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
    // A replica that vanished without closing the connection (node lost) is noticed within
    // 30 s; the planner accepts pings every 10 s (planner_server.cc).
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 20000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 10000);
    std::vector<std::shared_ptr<grpc::ChannelInterface>> channels;
    for (const std::string& target : PlannerTargets(addresses)) {
      channels.push_back(grpc::CreateCustomChannel(target, credentials, args));
    }
    return std::make_shared<PlannerChannels>(std::move(channels));
  }

  // At least one channel.
  explicit PlannerChannels(std::vector<std::shared_ptr<grpc::ChannelInterface>> channels)
      : channels_(std::move(channels)) {}

  struct Pick {
    std::shared_ptr<grpc::ChannelInterface> channel;
    size_t index = 0;
  };
  Pick Current() const {
    std::lock_guard<std::mutex> lock(mu_);
    return {channels_[current_], current_};
  }
  // The RPC on channel `index` failed so that another replica may do better: moves on to the
  // next channel, unless another caller already moved away from `index`.
  void Failed(size_t index) {
    std::lock_guard<std::mutex> lock(mu_);
    if (index == current_) current_ = (current_ + 1) % channels_.size();
  }
  size_t size() const { return channels_.size(); }
  const std::shared_ptr<grpc::ChannelInterface>& channel(size_t index) const {
    return channels_[index];
  }
  // Channel `index` is known to work again (it became READY): make it the current one.
  void Use(size_t index) {
    std::lock_guard<std::mutex> lock(mu_);
    current_ = index % channels_.size();
  }

  // Whether a call that ended with `code` is worth trying on another replica.
  static bool ShouldRotate(grpc::StatusCode code) {
    return code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::DEADLINE_EXCEEDED;
  }

 private:
  const std::vector<std::shared_ptr<grpc::ChannelInterface>> channels_;
  mutable std::mutex mu_;
  size_t current_ = 0;  // guarded by mu_
};

}  // namespace cacheroute::dataplane
