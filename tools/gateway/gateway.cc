// See gateway.h.
#include "tools/gateway/gateway.h"

#include <httplib.h>  // the prober's and the load scraper's blocking clients (own threads)
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <boost/asio/as_tuple.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/config_file.h"
#include "base/exposition.h"
#include "base/status_macros.h"
#include "cacheroute/dataplane/key_id.h"
#include "cacheroute/dataplane/policy_registry.h"
#include "cacheroute/v1/admin.grpc.pb.h"
#include "tools/gateway/membership/sources.h"
#include "tools/gateway/prometheus_text.h"
#include "tools/http/reactive.h"
#include "tools/http/watchdog.h"

namespace cacheroute::gateway {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using SteadyTime = std::chrono::steady_clock::time_point;
constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);

// ---- Logging: one line per event on stderr, "<time> <level> <event> key=value …". ----

void Log(absl::string_view level, absl::string_view event,
         std::initializer_list<std::pair<absl::string_view, std::string>> fields = {}) {
  std::string line =
      absl::StrCat(absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone()), " ",
                   level, " ", event);
  for (const auto& [key, value] : fields) absl::StrAppend(&line, " ", key, "=", value);
  line += "\n";
  std::fwrite(line.data(), 1, line.size(), stderr);
}

// ---- HTTP helpers. ----

// Hop-by-hop headers (RFC 9110 §7.6.1) and Content-Length (set from the body that is sent) are
// never copied from one side to the other; nor is a request's Host (set to the upstream's).
bool HopByHopOrLength(bhttp::field field) {
  switch (field) {
    case bhttp::field::content_length:
    case bhttp::field::connection:
    case bhttp::field::keep_alive:
    case bhttp::field::transfer_encoding:
    case bhttp::field::te:
    case bhttp::field::trailer:
    case bhttp::field::upgrade:
    case bhttp::field::proxy_connection:
      return true;
    default:
      return false;
  }
}
bool SkipRequestHeader(bhttp::field field) {
  return field == bhttp::field::host || HopByHopOrLength(field);
}
bool SkipResponseHeader(bhttp::field field) { return HopByHopOrLength(field); }

std::chrono::microseconds ToChrono(absl::Duration d) { return absl::ToChronoMicroseconds(d); }

template <typename Duration>
std::pair<time_t, time_t> SecondsAndMicros(Duration d) {
  const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(d).count();
  return {static_cast<time_t>(micros / 1'000'000), static_cast<time_t>(micros % 1'000'000)};
}

constexpr absl::string_view kEndpointNames[] = {"completions", "chat_completions", "models"};
constexpr absl::string_view kErrorKindNames[] = {"connect", "reset", "header_timeout",
                                                 "idle_timeout", "protocol"};

// Idle pooled connections kept per I/O thread and destination; more are closed.
constexpr size_t kMaxIdlePerDestination = 4096;
// A pooled connection idle for longer than this is checked (a non-blocking peek) before reuse.
constexpr auto kCheckIdleAfter = std::chrono::milliseconds(200);
// A non-streamed answer larger than this is a 502 (it would have to be held in memory).
constexpr size_t kMaxUnaryBody = 64u << 20;

// Reads the configured dynamic membership source once.
absl::StatusOr<std::vector<Upstream>> ReadMembershipSource(const GatewayConfig& config) {
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

// A pooled socket whose peer has closed (or sent bytes it should not have) is not reusable.
bool StillOpen(int fd) {
  char byte;
  const ssize_t n = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}

}  // namespace

// base::ReadConfigFile, and InvalidArgument naming `key` and the path when the file is blank: a
// PEM file or a token must have content.
absl::StatusOr<std::string> ReadNonEmptyFile(absl::string_view key, const std::string& path) {
  absl::StatusOr<std::string> text = base::ReadConfigFile(key, path);
  if (text.ok() && absl::StripAsciiWhitespace(*text).empty()) {
    return absl::InvalidArgumentError(absl::StrCat(key, ": \"", path, "\" is empty"));
  }
  return text;
}

// Credentials for the planner channel: TLS when a CA is configured (with this gateway's
// certificate for mutual TLS), plaintext otherwise.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> PlannerCredentials(
    const GatewayConfig& config) {
  if (config.planner_tls_ca_file.empty()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  CACHEROUTE_ASSIGN_OR_RETURN(ssl.pem_root_certs,
                              ReadNonEmptyFile("planner_tls_ca_file", config.planner_tls_ca_file));
  if (!config.planner_tls_cert_file.empty()) {
    CACHEROUTE_ASSIGN_OR_RETURN(
        std::string cert, ReadNonEmptyFile("planner_tls_cert_file", config.planner_tls_cert_file));
    CACHEROUTE_ASSIGN_OR_RETURN(
        std::string key, ReadNonEmptyFile("planner_tls_key_file", config.planner_tls_key_file));
    ssl.pem_cert_chain = std::move(cert);
    ssl.pem_private_key = std::move(key);
  }
  return grpc::SslCredentials(ssl);
}

std::string ErrorBody(absl::string_view message, absl::string_view type, int code) {
  nlohmann::json body = {{"error",
                          {{"message", std::string(message)},
                           {"type", std::string(type)},
                           {"param", nullptr},
                           {"code", code}}}};
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Per upstream: failure accounting and per-destination metrics (idle connections are in Pools).
struct Gateway::Destination {
  std::atomic<uint32_t> consecutive_failures{0};
  std::atomic<uint64_t> errors{0};
  std::array<std::atomic<uint64_t>, kErrorKinds> error_kinds{};
  std::atomic<uint64_t> marked_down{0};
  std::atomic<uint32_t> health_failures{0};        // active health checks failed in a row
  std::atomic<uint64_t> health_check_failures{0};  // in all
  std::atomic<double> reported_load{0};  // the last scraped load_metric (0 when it failed)
  std::atomic<uint64_t> scrape_failures{0};
  // Served tokens by [planned]: prompt tokens of responses that reported cached tokens, and those.
  std::array<std::atomic<uint64_t>, 2> prompt_tokens{};
  std::array<std::atomic<uint64_t>, 2> cached_tokens{};
  Histogram ttft;      // streams: request received → first body chunk
  Histogram duration;  // request received → response complete

  // Zeroes every counter, for a new member at this index.
  void Reset() {
    const auto zero = [](auto& atomic) { atomic.store(0, std::memory_order_relaxed); };
    for (auto* a : {&consecutive_failures, &health_failures}) zero(*a);
    for (auto* a : {&errors, &marked_down, &health_check_failures, &scrape_failures}) zero(*a);
    zero(reported_load);
    for (auto& a : error_kinds) zero(a);
    for (auto& a : prompt_tokens) zero(a);
    for (auto& a : cached_tokens) zero(a);
    for (Histogram* h : {&ttft, &duration}) {
      for (auto& b : h->buckets) zero(b);
      zero(h->sum_ns);
    }
  }
};

// One upstream as routed to: immutable, shared by the snapshots that hold it.
struct Gateway::Member {
  std::string name;
  std::string url;
  UpstreamAddress address;
  std::string host_header;  // Host of requests to it
  tcp::resolver::results_type endpoints;
};

// A membership snapshot: by_index[d] is destination d's member for d < count; past count, the
// last member an index had (a request routed just before a change still reaches it), or null.
struct Gateway::Members {
  uint64_t generation = 0;
  uint32_t count = 0;
  std::vector<std::shared_ptr<const Member>> by_index;  // capacity_ entries
  std::shared_ptr<dataplane::Policy> policy;            // null for `cacheroute`: Router::Pick
};

// Idle keep-alive upstream connections: pools[thread][destination], each touched only by its I/O
// thread (whose executor its sockets use), so taking and returning one needs no lock and no
// re-registration with another thread's reactor.
struct IdleConnection {
  beast::tcp_stream stream;
  std::chrono::steady_clock::time_point since;
};
struct Gateway::Pools {
  std::vector<std::vector<std::vector<IdleConnection>>> idle;
};

void Gateway::Histogram::Observe(std::chrono::nanoseconds elapsed) {
  const double seconds = std::chrono::duration<double>(elapsed).count();
  const size_t bucket = std::lower_bound(kLatencyBuckets.begin(), kLatencyBuckets.end(), seconds) -
                        kLatencyBuckets.begin();
  buckets[bucket].fetch_add(1, std::memory_order_relaxed);
  sum_ns.fetch_add(static_cast<uint64_t>(elapsed.count()), std::memory_order_relaxed);
}

Gateway::Gateway(const GatewayConfig& config)
    : config_(config),
      dynamic_membership_(!config.upstreams_file.empty() || !config.upstreams_dns.empty()),
      capacity_(dynamic_membership_ ? config.max_upstreams
                                    : static_cast<uint32_t>(config.upstreams.size())),
      random_(static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count())),
      router_({.destination_count = 0,
               .capacity = capacity_,
               .dispatch = config.policy == "cacheroute-paper" ? dataplane::DispatchOptions::Paper()
                                                               : dataplane::DispatchOptions{},
               .table_ttl = std::chrono::duration_cast<dataplane::Duration>(
                   absl::ToChronoNanoseconds(config.table_ttl)),
               .external_load_weight = config.external_load_weight},
              random_),
      destinations_(new Destination[capacity_]) {
  auto empty = std::make_shared<Members>();
  empty->by_index.resize(capacity_);
  members_ = std::move(empty);
}

std::unique_ptr<dataplane::Policy> Gateway::MakePolicy(uint32_t n) {
  const dataplane::PolicyRegistry& policies = dataplane::BuiltinPolicies();
  const dataplane::PolicyInfo* info = policies.Find(config_.policy);  // validated by the config
  // cacheroute, cacheroute-paper: Router::Pick.
  if (info == nullptr || info->uses_table) return nullptr;
  dataplane::Result<std::unique_ptr<dataplane::Policy>> policy =
      info->make({.destinations = n, .random = &random_});
  return policy.ok() ? *std::move(policy) : nullptr;
}

std::shared_ptr<const Gateway::Members> Gateway::ControlMembers() const {
  std::lock_guard<std::mutex> lock(members_mu_);
  return members_;
}

std::shared_ptr<const Gateway::Members> Gateway::ThreadMembers() {
  const int thread = http::Server::CurrentThread();
  if (thread < 0 || static_cast<size_t>(thread) >= thread_members_.size()) return ControlMembers();
  std::shared_ptr<const Members>& mine = thread_members_[thread];
  if (mine != nullptr && mine->generation == members_generation_.load(std::memory_order_acquire)) {
    return mine;
  }
  // A copy of its own, so that holding it costs this thread an uncontended reference count.
  auto fresh = std::make_shared<const Members>(*ControlMembers());
  // Pooled connections to an index whose member changed go with the old member.
  std::vector<std::vector<IdleConnection>>& pools = pools_->idle[thread];
  for (uint32_t d = 0; d < pools.size(); ++d) {
    if (mine == nullptr || mine->by_index[d] != fresh->by_index[d]) pools[d].clear();
  }
  mine = std::move(fresh);
  return mine;
}

const Gateway::Member* Gateway::MemberAt(const Members& members, uint32_t d) {
  return d < members.by_index.size() ? members.by_index[d].get() : nullptr;
}

absl::Status Gateway::ApplyMembership(const std::vector<Upstream>& upstreams) {
  std::lock_guard<std::mutex> apply(apply_mu_);
  const std::shared_ptr<const Members> current = ControlMembers();
  std::vector<std::string> current_names;
  for (uint32_t d = 0; d < current->count; ++d) current_names.push_back(current->by_index[d]->name);

  // New members are resolved first; one that does not resolve is left out (and logged).
  std::vector<std::string> wanted;
  std::vector<std::shared_ptr<const Member>> made;
  for (size_t i = 0; i < upstreams.size(); ++i) {
    const Upstream& u = upstreams[i];
    const auto it = std::find(current_names.begin(), current_names.end(), u.name);
    if (it != current_names.end() && current->by_index[it - current_names.begin()]->url == u.url) {
      wanted.push_back(u.name);
      continue;
    }
    CACHEROUTE_ASSIGN_OR_RETURN(UpstreamAddress address,
                                ParseUpstreamUrl(absl::StrCat("upstreams[", i, "].url"), u.url));
    auto member = std::make_shared<Member>();
    member->name = u.name;
    member->url = u.url;
    member->address = address;
    member->host_header = absl::StrContains(address.host, ':')
                              ? absl::StrCat("[", address.host, "]:", address.port)
                              : absl::StrCat(address.host, ":", address.port);
    tcp::resolver resolver(server_->context());
    beast::error_code ec;
    member->endpoints = resolver.resolve(address.host, std::to_string(address.port), ec);
    if (ec || member->endpoints.empty()) {
      const std::string error = absl::StrCat("upstreams[", i, "].url: cannot resolve \"",
                                             address.host, "\": ", ec.message());
      if (!dynamic_membership_) return absl::InvalidArgumentError(error);
      Log("warning", "member_unresolved", {{"destination", u.name}, {"error", absl::StrCat("\"", error, "\"")}});
      continue;
    }
    wanted.push_back(u.name);
    made.push_back(std::move(member));
  }
  // A member whose URL changed is a new member under the same name: it leaves, then joins.
  std::vector<std::string> staying = current_names;
  for (std::string& name : staying) {
    for (const auto& m : made) {
      if (m->name == name) name.clear();
    }
  }
  const std::vector<std::string> next = AssignIndices(staying, wanted, capacity_);
  if (next.size() < wanted.size()) {
    Log("warning", "members_over_capacity",
        {{"members", absl::StrCat(wanted.size())}, {"max_upstreams", absl::StrCat(capacity_)}});
  }

  auto members = std::make_shared<Members>(*current);
  members->generation = current->generation + 1;
  members->count = static_cast<uint32_t>(next.size());
  for (uint32_t d = 0; d < next.size(); ++d) {
    std::shared_ptr<const Member> member;
    bool moved = false;
    uint32_t from = dataplane::kNoDestination;
    for (const auto& m : made) {
      if (m->name == next[d]) member = m;
    }
    if (member == nullptr) {  // one that stays, at its index or moved here
      const auto it = std::find(staying.begin(), staying.end(), next[d]);
      from = static_cast<uint32_t>(it - staying.begin());
      member = current->by_index[from];
      moved = from != d;
    }
    if (member == members->by_index[d]) continue;  // stays where it was
    // A new occupant of index d: fresh counters, and the health of where it came from.
    destinations_[d].Reset();
    (void)router_.SetLoad(d, 0);
    const bool up = moved ? router_.loads().Up(from) : true;
    (void)(up ? router_.MarkUp(d) : router_.MarkDown(d));
    members->by_index[d] = std::move(member);
  }
  if (members->policy == nullptr || members->count != current->count) {
    // Hash-based policies are built for a destination count; the others keep their memory.
    const bool by_count = config_.policy == "sticky" || config_.policy == "chwbl" ||
                          config_.policy == "dualmap";
    if (members->policy == nullptr || by_count) members->policy = MakePolicy(members->count);
  }
  const bool changed = next != current_names;
  {
    std::lock_guard<std::mutex> lock(members_mu_);
    members_ = members;
  }
  members_generation_.store(members->generation, std::memory_order_release);
  // The Router (and the table, re-mapped) last: a request routed to a new index before its
  // thread saw the snapshot looks again.
  dataplane::Status resized = subscriber_ != nullptr
                                  ? subscriber_->SetDestinations(next)
                                  : router_.Resize(members->count, nullptr, clock_.Now());
  if (!resized.ok) return absl::InternalError(absl::StrCat("membership: ", resized.message));
  if (changed) {
    Log("info", "membership", {{"members", absl::StrCat(members->count)},
                               {"names", absl::StrCat("\"", absl::StrJoin(next, ","), "\"")}});
    if (dynamic_membership_) planner_has_members_.store(false);
  }
  return absl::OkStatus();
}

void Gateway::PollMembership() {
  absl::StatusOr<std::vector<Upstream>> upstreams = ReadMembershipSource(config_);
  if (!upstreams.ok()) {
    const std::string error(upstreams.status().message());
    if (error != last_membership_error_) {  // once per distinct error, the members are kept
      Log("warning", "membership_read_failed", {{"error", absl::StrCat("\"", error, "\"")}});
      last_membership_error_ = error;
    }
    return;
  }
  last_membership_error_.clear();
  std::vector<Upstream> current;
  {
    const std::shared_ptr<const Members> members = ControlMembers();
    for (uint32_t d = 0; d < members->count; ++d) {
      current.push_back({members->by_index[d]->name, members->by_index[d]->url});
    }
  }
  if (SameMembers(current, *upstreams)) return;
  if (absl::Status s = ApplyMembership(*upstreams); !s.ok()) {
    Log("warning", "membership_apply_failed", {{"error", absl::StrCat("\"", s.message(), "\"")}});
  }
}

void Gateway::ReportMembership() {
  if (planner_channels_ == nullptr || planner_has_members_.load()) return;
  const std::shared_ptr<const Members> members = ControlMembers();
  if (members->count == 0) return;  // the planner keeps its list rather than none
  v1::SetDestinationsRequest request;
  for (uint32_t d = 0; d < members->count; ++d) request.add_destinations(members->by_index[d]->name);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  if (!planner_token_.empty()) context.AddMetadata("authorization", "Bearer " + planner_token_);
  v1::SetDestinationsResponse response;
  const dataplane::PlannerChannels::Pick pick = planner_channels_->Current();
  const grpc::Status status =
      v1::AdminService::NewStub(pick.channel)->SetDestinations(&context, request, &response);
  if (!status.ok()) {
    // Retried next round; on the next replica if this one is unreachable.
    if (dataplane::PlannerChannels::ShouldRotate(status.error_code())) {
      planner_channels_->Failed(pick.index);
    }
    Log("warning", "membership_report_failed",
        {{"code", absl::StrCat(status.error_code())},
         {"error", absl::StrCat("\"", status.error_message(), "\"")}});
    return;
  }
  // Only if nothing changed meanwhile (else the next round sends the newer list).
  if (ControlMembers() == members) planner_has_members_.store(true);
  Log("info", "membership_reported", {{"members", absl::StrCat(members->count)},
                                      {"version", absl::StrCat(response.version().number())}});
}

bool Gateway::WaitForStop(absl::Duration timeout) {
  std::unique_lock<std::mutex> lock(stop_mu_);
  return stop_cv_.wait_for(lock, ToChrono(timeout), [this] { return stopping_; });
}

void Gateway::RunMembership() {
  for (;;) {
    ReportMembership();
    if (WaitForStop(config_.membership_interval)) return;
    if (dynamic_membership_) PollMembership();
  }
}

absl::StatusOr<std::unique_ptr<Gateway>> Gateway::Start(const GatewayConfig& config) {
  if (absl::Status s = ValidateGatewayConfig(config); !s.ok()) return s;
  std::unique_ptr<Gateway> gateway(new Gateway(config));
  if (absl::Status s = gateway->Listen(); !s.ok()) return s;

  // The first membership: the static list, or the source read once. A file that cannot be read
  // is a bad configuration; a DNS name without addresses yet (a Service whose engines are not
  // ready) is not: the gateway starts with none and answers 503 until some appear.
  std::vector<Upstream> initial = config.upstreams;
  if (gateway->dynamic_membership_) {
    absl::StatusOr<std::vector<Upstream>> read = ReadMembershipSource(config);
    if (!read.ok() && (absl::IsInvalidArgument(read.status()) || !config.upstreams_file.empty())) {
      return read.status();
    }
    if (read.ok()) {
      initial = *std::move(read);
    } else {
      Log("warning", "membership_read_failed",
          {{"error", absl::StrCat("\"", read.status().message(), "\"")}});
    }
  }
  if (absl::Status s = gateway->ApplyMembership(initial); !s.ok()) return s;

  if (!config.planner.empty()) {
    std::vector<std::string> names;
    {
      const std::shared_ptr<const Members> members = gateway->ControlMembers();
      for (uint32_t d = 0; d < members->count; ++d) names.push_back(members->by_index[d]->name);
    }
    CACHEROUTE_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> credentials,
                                PlannerCredentials(config));
    std::string token;
    if (!config.planner_token_file.empty()) {
      CACHEROUTE_ASSIGN_OR_RETURN(
          std::string text, ReadNonEmptyFile("planner_token_file", config.planner_token_file));
      token = std::string(absl::StripAsciiWhitespace(text));
    }
    // One channel over every replica where gRPC can (planner_channels.h).
    auto channel = dataplane::PlannerChannels::Create(config.planner, credentials);
    dataplane::TableSubscriberOptions table_options;
    table_options.gateway_id = config.gateway_id;
    table_options.destinations = std::move(names);
    table_options.cache_path = config.table_cache;
    table_options.bearer_token = token;
    table_options.ignore_unknown_destinations = gateway->dynamic_membership_;
    gateway->planner_channels_ = channel;
    gateway->planner_token_ = token;
    gateway->planner_has_members_.store(!gateway->dynamic_membership_);
    gateway->subscriber_ = std::make_unique<dataplane::TableSubscriber>(channel, gateway->router_,
                                                                        std::move(table_options));
    if (dataplane::Status s = gateway->subscriber_->Start(); !s.ok) {
      return absl::InvalidArgumentError(absl::StrCat("table subscriber: ", s.message));
    }
    dataplane::RateReporterOptions report_options;
    report_options.gateway_id = config.gateway_id;
    report_options.interval = absl::ToChronoMilliseconds(config.report_interval);
    report_options.bearer_token = token;
    report_options.evidence = &gateway->evidence_;
    gateway->reporter_ = std::make_unique<dataplane::RateReporter>(channel, gateway->recorder_,
                                                                   std::move(report_options));
    if (dataplane::Status s = gateway->reporter_->Start(); !s.ok) {
      return absl::InvalidArgumentError(absl::StrCat("rate reporter: ", s.message));
    }
  } else if (config.policy == "cacheroute" || config.policy == "cacheroute-paper") {
    Log("warning", "no_planner",
        {{"detail",
          "\"policy cacheroute without a planner: no table, every request is routed by the fallback "
          "(the key's hashed pair, or power of two choices) and no rates are reported\""}});
  }
  gateway->prober_thread_ = std::thread([g = gateway.get()] { g->RunProber(); });
  if (gateway->dynamic_membership_) {
    gateway->membership_thread_ = std::thread([g = gateway.get()] { g->RunMembership(); });
  }
  if (config.load_scrape_interval > absl::ZeroDuration()) {
    gateway->scraper_thread_ = std::thread([g = gateway.get()] { g->RunLoadScraper(); });
  }
  return gateway;
}

absl::Status Gateway::Listen() {
  // Validated as HOST:PORT (gateway_config.cc); port 0 picks a free one.
  const size_t colon = config_.listen.rfind(':');
  std::string host = config_.listen.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  if (host == "localhost") host = "127.0.0.1";
  int port = 0;
  if (!absl::SimpleAtoi(config_.listen.substr(colon + 1), &port)) {
    return absl::InvalidArgumentError(
        absl::StrCat("listen: \"", config_.listen, "\" is not HOST:PORT"));
  }

  if (!config_.api_key_file.empty()) {
    CACHEROUTE_ASSIGN_OR_RETURN(std::string text,
                                ReadNonEmptyFile("api_key_file", config_.api_key_file));
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      line = absl::StripAsciiWhitespace(line);
      if (line.empty() || line.front() == '#') continue;
      api_keys_.emplace_back(line);
    }
    if (api_keys_.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "api_key_file: \"", config_.api_key_file, "\" holds no key (one per line)"));
    }
    std::sort(api_keys_.begin(), api_keys_.end());
  }

  // Per-thread state exists before the first request can arrive (the server serves from Start).
  const unsigned threads =
      config_.io_threads > 0 ? config_.io_threads : std::max(1u, std::thread::hardware_concurrency());
  pools_ = std::make_unique<Pools>();
  pools_->idle.resize(threads);
  for (auto& by_destination : pools_->idle) by_destination.resize(capacity_);
  thread_members_.resize(threads);

  http::ServerOptions options;
  options.host = host;
  options.port = port;
  options.threads = threads;
  options.write_timeout = std::chrono::duration_cast<std::chrono::milliseconds>(
      ToChrono(config_.write_timeout));
  options.tls_cert_file = config_.tls_cert_file;
  options.tls_key_file = config_.tls_key_file;
  absl::StatusOr<std::unique_ptr<http::Server>> server = http::Server::Start(
      options, [this](http::Exchange& x) -> asio::awaitable<void> { return Handle(x); });
  if (!server.ok()) {
    if (absl::IsInvalidArgument(server.status())) return server.status();
    return absl::UnavailableError(absl::StrCat("listen: cannot bind \"", config_.listen,
                                               "\": ", server.status().message()));
  }
  server_ = *std::move(server);
  port_ = server_->port();
  return absl::OkStatus();
}

Gateway::~Gateway() { Stop(); }

bool Gateway::Drain() {
  if (server_ == nullptr) return true;
  if (!draining_.exchange(true)) {
    Log("info", "draining",
        {{"active_requests", absl::StrCat(server_->active())},
         {"open_streams", absl::StrCat(open_streams())},
         {"drain_delay", absl::FormatDuration(config_.drain_delay)},
         {"drain_timeout", absl::FormatDuration(config_.drain_timeout)}});
    // /healthz answers 503 from now; keep serving until those who watch it have seen it.
    WaitForStop(config_.drain_delay);
  }
  server_->StopAccepting();
  const auto deadline = std::chrono::steady_clock::now() + ToChrono(config_.drain_timeout);
  while (server_->active() > 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  const size_t left = server_->active();
  Log(left == 0 ? "info" : "warning", "drained", {{"requests_cut", absl::StrCat(left)}});
  return left == 0;
}

void Gateway::Stop() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (server_ != nullptr) server_->Stop();
  pools_.reset();  // their sockets use the server's contexts
  if (membership_thread_.joinable()) membership_thread_.join();
  if (prober_thread_.joinable()) prober_thread_.join();
  if (scraper_thread_.joinable()) scraper_thread_.join();
  if (subscriber_ != nullptr) subscriber_->Stop();
  if (reporter_ != nullptr) reporter_->Stop();
}

bool Gateway::Authorized(const http::Request& request) const {
  if (api_keys_.empty()) return true;
  const auto it = request.find(bhttp::field::authorization);
  if (it == request.end()) return false;
  absl::string_view value(it->value().data(), it->value().size());
  if (!absl::ConsumePrefix(&value, "Bearer ")) return false;
  value = absl::StripAsciiWhitespace(value);
  return std::binary_search(api_keys_.begin(), api_keys_.end(), value);
}

asio::awaitable<void> Gateway::SendError(http::Exchange& x, int status, absl::string_view message,
                                         absl::string_view type, absl::string_view destination) {
  http::Response r = http::TextResponse(x.request(), status, "application/json",
                                        ErrorBody(message, type, status));
  if (!destination.empty()) {
    r.set("X-CacheRoute-Destination", std::string_view(destination.data(), destination.size()));
  }
  co_await x.Send(std::move(r));
}

asio::awaitable<void> Gateway::Handle(http::Exchange& x) {
  const http::Request& request = x.request();
  absl::string_view target(request.target().data(), request.target().size());
  const absl::string_view path = target.substr(0, target.find('?'));
  const bool post = request.method() == bhttp::verb::post;
  const bool get = request.method() == bhttp::verb::get;
  if (path == "/healthz" && get) {
    bool any_up = false;
    for (uint32_t d = 0; d < router_.destination_count(); ++d) any_up |= router_.loads().Up(d);
    const bool ok = any_up && !draining_.load();
    co_await x.Send(http::TextResponse(request, ok ? 200 : 503, "text/plain",
                                       ok       ? "ok\n"
                                       : any_up ? "draining\n"
                                                : "no upstream is up\n"));
    co_return;
  }
  if (path == "/metrics" && get) {
    co_await x.Send(http::TextResponse(request, 200, "text/plain; version=0.0.4; charset=utf-8",
                                       RenderMetrics()));
    co_return;
  }
  const bool completion = path == "/v1/completions" || path == "/v1/chat/completions";
  const bool models = path == "/v1/models";
  if ((completion && !post) || (models && !get)) {
    co_await SendError(x, 405, absl::StrCat("method ", absl::string_view(request.method_string().data(), request.method_string().size()),
                                            " is not allowed on ", path),
                       "invalid_request_error");
    co_return;
  }
  if (!completion && !models) {
    co_await SendError(x, 404, absl::StrCat("no route for ", path), "invalid_request_error");
    co_return;
  }
  if (!Authorized(request)) {
    unauthorized_.fetch_add(1, std::memory_order_relaxed);
    co_await SendError(x, 401,
                       "missing or unknown API key: send Authorization: Bearer <key> with a key "
                       "of the gateway's api_key_file",
                       "invalid_request_error");
    co_return;
  }
  if (models) {
    co_await HandleModels(x);
  } else {
    co_await HandleCompletion(
        x, path == "/v1/completions" ? Endpoint::kCompletions : Endpoint::kChatCompletions);
  }
}

asio::awaitable<void> Gateway::HandleCompletion(http::Exchange& x, Endpoint endpoint) {
  const SteadyTime start = std::chrono::steady_clock::now();
  const RequestFields fields = ScanRequestFields(x.request().body(), config_.prefix_bytes);
  std::optional<std::string> header;
  if (const auto it = x.request().find(config_.key_header); it != x.request().end()) {
    header.emplace(it->value().data(), it->value().size());
  }
  std::shared_ptr<const Members> members = ThreadMembers();
  const std::optional<std::string> key = RoutingKey(config_.key_from, header, fields);
  dataplane::InFlight in_flight = Route(key, *members);
  const uint32_t d = in_flight.destination();
  const dataplane::Reason reason = in_flight.reason();
  // Routed to an index this thread's snapshot does not have yet: the membership just changed.
  if (in_flight.ok() && MemberAt(*members, d) == nullptr) members = ThreadMembers();
  const Member* member = in_flight.ok() ? MemberAt(*members, d) : nullptr;
  Outcome outcome;
  if (member == nullptr) {
    co_await SendError(x, 503, "no upstream is up", "service_unavailable");
    Finish(endpoint, 503, start);
    if (key.has_value()) RecordEvidence(reason, 503, outcome);
    co_return;
  }
  const int status = co_await Forward(x, d, *member, std::move(in_flight), start, &outcome);
  Finish(endpoint, status, start);
  if (key.has_value()) RecordEvidence(reason, status, outcome);
}

void Gateway::RecordEvidence(dataplane::Reason reason, int status, const Outcome& outcome) {
  const double table_fraction = router_.table_fraction();
  if (table_fraction >= 1) return;
  const dataplane::Arm arm =
      reason == dataplane::Reason::kControlArm ? dataplane::Arm::kControl : dataplane::Arm::kTable;
  uint64_t prompt = 0, cached = 0;
  if (outcome.usage.has_value() && outcome.usage->cached_tokens.has_value()) {
    prompt = outcome.usage->prompt_tokens;
    cached = *outcome.usage->cached_tokens;
  }
  evidence_.Record(table_fraction, arm, outcome.ttft_seconds, status >= 500, prompt, cached);
}

asio::awaitable<void> Gateway::HandleModels(http::Exchange& x) {
  const SteadyTime start = std::chrono::steady_clock::now();
  const std::shared_ptr<const Members> members = ThreadMembers();
  dataplane::InFlight in_flight =
      router_.Track({dataplane::RandomUpDestination(router_.loads(), random_), false,
                     dataplane::Reason::kPolicy});
  const Member* member = in_flight.ok() ? MemberAt(*members, in_flight.destination()) : nullptr;
  int status = 503;
  if (member == nullptr) {
    co_await SendError(x, 503, "no upstream is up", "service_unavailable");
  } else {
    const uint32_t d = in_flight.destination();
    status = co_await Forward(x, d, *member, std::move(in_flight), start);
  }
  Finish(Endpoint::kModels, status, start);
}

asio::awaitable<int> Gateway::Forward(http::Exchange& x, uint32_t d, const Member& member,
                                      dataplane::InFlight in_flight, SteadyTime start,
                                      Outcome* outcome) {
  const auto executor = co_await asio::this_coro::executor;
  Destination& destination = destinations_[d];
  const bool planned = in_flight.planned();
  // "upstream NAME (URL)", for error answers only (never built on the way of a success).
  const auto who = [&member] {
    return absl::StrCat("upstream ", member.name, " (", member.url, ")");
  };
  // The in-flight count and the per-destination duration end when the upstream's part is over,
  // before the last bytes go to the client (who may send the next request at once).
  struct Done {
    Destination& destination;
    dataplane::InFlight& in_flight;
    SteadyTime start;
    bool done = false;
    void operator()() {
      if (done) return;
      done = true;
      in_flight.Release();
      destination.duration.Observe(std::chrono::steady_clock::now() - start);
    }
    ~Done() { (*this)(); }
  } done{destination, in_flight, start};

  const http::Request& request = x.request();
  bhttp::request<bhttp::string_body> upstream{request.method(), request.target(), 11};
  for (const auto& field : request) {
    if (SkipRequestHeader(field.name())) continue;
    if (!api_keys_.empty() && field.name() == bhttp::field::authorization) continue;
    upstream.insert(field.name_string(), field.value());
  }
  upstream.set(bhttp::field::host, member.host_header);
  upstream.body() = request.body();
  upstream.keep_alive(true);
  upstream.prepare_payload();

  const int thread = http::Server::CurrentThread();
  std::vector<IdleConnection>* pool =
      thread >= 0 && static_cast<size_t>(thread) < pools_->idle.size()
          ? &pools_->idle[thread][d]
          : nullptr;
  std::optional<beast::tcp_stream> connection;
  std::optional<http::Watch> watch;  // timeouts of `connection`'s operations
  beast::flat_buffer buffer;
  buffer.reserve(8192);  // headers and a small answer in one read
  std::optional<bhttp::response_parser<bhttp::buffer_body>> parser;
  for (int attempt = 0;; ++attempt) {
    bool reused = false;
    watch.reset();
    connection.reset();
    if (attempt == 0 && pool != nullptr) {  // a pooled connection that is still open
      while (!pool->empty()) {
        IdleConnection idle = std::move(pool->back());
        pool->pop_back();
        // One that was in use moments ago is taken as it is (were it closed after all, the retry
        // below covers it); one that idled longer is checked first.
        if (std::chrono::steady_clock::now() - idle.since < kCheckIdleAfter ||
            StillOpen(idle.stream.socket().native_handle())) {
          connection.emplace(std::move(idle.stream));
          reused = true;
          break;
        }
      }
    }
    watch.reset();
    if (!connection) {
      connection.emplace(executor);
      watch.emplace(http::Watchdog::Current(), connection->socket());
      watch->Arm(ToChrono(config_.connect_timeout));
      auto [ec, endpoint] = co_await connection->async_connect(member.endpoints, kNoThrow);
      watch->Disarm();
      if (ec) {
        const std::string error = watch->fired()
                                      ? "connect timed out"
                                      : absl::StrCat("could not connect: ", ec.message());
        RecordError(d, member, ErrorKind::kConnect, error);
        done();
        co_await SendError(x, 502, absl::StrCat(who(), " failed: ", error), "upstream_error", member.name);
        co_return 502;
      }
      beast::error_code ignored;
      connection->socket().set_option(tcp::no_delay(true), ignored);
      // The connect left the socket registered for EPOLLOUT (Asio keeps a write interest once
      // an operation waited for it), and edge-triggered EPOLLOUT fires after every write whose
      // data the peer acknowledged: an extra wake-up of this thread per request on a connection
      // that is pooled for many. Registering the descriptor afresh drops that interest; a later
      // write that must wait adds it back.
      watch.reset();  // it refers to the socket that is replaced
      const int fd = connection->socket().release(ignored);
      if (!ignored) {
        connection.emplace(executor);
        connection->socket().assign(endpoint.protocol(), fd, ignored);
        if (ignored) ::close(fd);  // not usable: the request fails below as a reset
      }
      watch.emplace(http::Watchdog::Current(), connection->socket());
    } else {
      watch.emplace(http::Watchdog::Current(), connection->socket());
    }
    watch->Arm(ToChrono(config_.write_timeout));
    beast::error_code nb;
    // Once per connection: a pooled one is non-blocking already (each set is an ioctl).
    if (!connection->socket().non_blocking()) connection->socket().non_blocking(true, nb);
    const beast::error_code write_ec = co_await http::ReactiveWrite(connection->socket(), upstream);
    watch->Disarm();
    const bool write_timed_out = watch->fired();
    beast::error_code ec = write_ec;
    parser.emplace();
    parser->body_limit(boost::none);
    buffer.clear();
    if (!ec) {
      watch->Arm(ToChrono(config_.header_timeout));
      // The answer to a request just written is not there yet.
      ec = co_await http::ReactiveReadHeader(connection->socket(), buffer, *parser,
                                             /*expect_data=*/false);
      watch->Disarm();
    }
    if (!ec) break;
    const bool timed_out = write_timed_out || watch->fired();
    if (reused && !timed_out && !parser->got_some()) continue;  // a stale keep-alive: retry
    if (timed_out) {
      const std::string error =
          absl::StrCat(write_ec ? "sending the request" : "the response headers", " took longer than ",
                       absl::FormatDuration(write_ec ? config_.write_timeout : config_.header_timeout));
      RecordError(d, member, ErrorKind::kHeaderTimeout, error);
      done();
        co_await SendError(x, 504, absl::StrCat(who(), ": ", error), "upstream_timeout", member.name);
      co_return 504;
    }
    const bool protocol = ec.category() == bhttp::make_error_code(bhttp::error::bad_version).category() &&
                          ec != bhttp::error::end_of_stream && ec != bhttp::error::partial_message;
    const std::string error =
        protocol ? absl::StrCat("malformed response: ", ec.message())
                 : absl::StrCat("connection closed before the response headers (", ec.message(), ")");
    RecordError(d, member, protocol ? ErrorKind::kProtocol : ErrorKind::kReset, error);
    done();
        co_await SendError(x, 502, absl::StrCat(who(), " failed: ", error), "upstream_error", member.name);
    co_return 502;
  }
  RecordSuccess(d);

  const auto& answer = parser->get();
  const int status = static_cast<int>(answer.result_int());
  bhttp::response_header<> header;
  header.result(answer.result_int());
  for (const auto& field : answer) {
    if (!SkipResponseHeader(field.name())) header.insert(field.name_string(), field.value());
  }
  header.set("X-CacheRoute-Destination", member.name);
  header.set("X-CacheRoute-Planned", planned ? "1" : "0");
  const bool streamed = answer.chunked() || !answer.has_content_length();

  constexpr size_t kChunk = 4096;  // SSE events are small; 8,000 streams hold 32 MB of these
  std::unique_ptr<char[]> chunk(new char[kChunk]);
  bool client_gone = false;
  bool broken = false;
  std::string body;  // a non-streamed answer, sent whole
  UsageScanner usage;
  if (streamed) {
    open_streams_.fetch_add(1, std::memory_order_relaxed);
    client_gone = !co_await x.StartStream(std::move(header));
  }
  bool first = true;
  while (!parser->is_done() && !client_gone) {
    parser->get().body().data = chunk.get();
    parser->get().body().size = kChunk;
    watch->Arm(ToChrono(config_.read_timeout));
    beast::error_code ec = co_await http::ReactiveReadSome(connection->socket(), buffer, *parser);
    watch->Disarm();
    if (ec == bhttp::error::need_buffer) ec = {};
    const size_t got = kChunk - parser->get().body().size;
    if (got > 0) {
      const absl::string_view bytes(chunk.get(), got);
      if (streamed) {
        if (first) {
          const auto ttft = std::chrono::steady_clock::now() - start;
          destination.ttft.Observe(ttft);
          if (outcome != nullptr) {
            outcome->ttft_seconds = std::chrono::duration<double>(ttft).count();
          }
        }
        first = false;
        usage.Feed(bytes);
        if (!co_await x.SendChunk(std::string_view(bytes.data(), bytes.size()))) client_gone = true;
      } else if (body.size() + got > kMaxUnaryBody) {
        ec = bhttp::error::body_limit;
      } else {
        body.append(bytes.data(), bytes.size());
      }
    }
    if (ec) {
      broken = true;
      const ErrorKind kind = watch->fired() ? ErrorKind::kIdleTimeout : ErrorKind::kReset;
      const std::string error =
          watch->fired() ? absl::StrCat("no body bytes for ", absl::FormatDuration(config_.read_timeout))
                        : absl::StrCat("the body broke off: ", ec.message());
      // After the headers the destination has answered: counted, never marked down for it.
      RecordError(d, member, kind, error, /*may_mark_down=*/false);
      break;
    }
  }
  if (streamed) {
    open_streams_.fetch_sub(1, std::memory_order_relaxed);
    done();
    if (!broken && !client_gone) co_await x.EndStream();
    if (usage.usage()) RecordUsage(d, planned, *usage.usage());
    if (outcome != nullptr) outcome->usage = usage.usage();
  } else if (broken) {
    done();
        co_await SendError(x, 502, absl::StrCat(who(), " failed: the response body broke off"),
                       "upstream_error", member.name);
  } else {
    if (absl::StrContains(body, "\"usage\"")) {
      if (std::optional<Usage> u = ReadUsage(body); u.has_value()) {
        RecordUsage(d, planned, *u);
        if (outcome != nullptr) outcome->usage = u;
      }
    }
    if (outcome != nullptr) {
      outcome->ttft_seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    http::Response response{static_cast<bhttp::status>(status), x.request().version()};
    response.base() = std::move(header);
    response.body() = std::move(body);
    done();
    co_await x.Send(std::move(response));
  }

  // Back to the pool only when the answer was read to its end and the upstream keeps it open.
  watch.reset();
  if (parser->is_done() && parser->keep_alive() && !broken && !client_gone && pool != nullptr &&
      pool->size() < kMaxIdlePerDestination) {
    pool->push_back({std::move(*connection), std::chrono::steady_clock::now()});
  } else {
    beast::error_code ignored;
    connection->socket().close(ignored);
  }
  co_return broken && !streamed ? 502 : status;
}

std::optional<double> Gateway::measured_hit() const {
  std::lock_guard<std::mutex> lock(hit_mu_);
  if (seen_prompt_ <= 0) return std::nullopt;
  return seen_cached_ / seen_prompt_;
}

void Gateway::RecordUsage(uint32_t d, bool planned, const Usage& usage) {
  if (!usage.cached_tokens.has_value() || usage.prompt_tokens == 0) return;
  Destination& destination = destinations_[d];
  destination.prompt_tokens[planned].fetch_add(usage.prompt_tokens, std::memory_order_relaxed);
  destination.cached_tokens[planned].fetch_add(*usage.cached_tokens, std::memory_order_relaxed);
  // The fleet simulator's memory (tools/eval/sim/fleet.cc): an exponential window of ~1,000 answers.
  constexpr double kKeep = 1 - 1.0 / 1000;
  double hit;
  {
    std::lock_guard<std::mutex> lock(hit_mu_);
    seen_cached_ = seen_cached_ * kKeep + static_cast<double>(*usage.cached_tokens);
    seen_prompt_ = seen_prompt_ * kKeep + static_cast<double>(usage.prompt_tokens);
    hit = seen_cached_ / seen_prompt_;
  }
  (void)router_.SetMeasuredHit(std::clamp(hit, 0.0, 1.0));
}

void Gateway::RecordSuccess(uint32_t d) {
  destinations_[d].consecutive_failures.store(0, std::memory_order_relaxed);
}

void Gateway::RecordError(uint32_t d, const Member& member, ErrorKind kind, absl::string_view error,
                          bool may_mark_down) {
  Destination& destination = destinations_[d];
  destination.errors.fetch_add(1, std::memory_order_relaxed);
  destination.error_kinds[static_cast<int>(kind)].fetch_add(1, std::memory_order_relaxed);
  // Slow is not dead: only a failed connect or a reset before the headers counts towards down.
  if (!may_mark_down || (kind != ErrorKind::kConnect && kind != ErrorKind::kReset)) return;
  const uint32_t failures =
      destination.consecutive_failures.fetch_add(1, std::memory_order_relaxed) + 1;
  // Exactly one request crosses the threshold, so the destination is marked down (and logged)
  // once per outage.
  if (failures == config_.failure_threshold) {
    MarkDown(d, member, "consecutive_failures", failures, absl::StrCat("\"", error, "\""));
  }
}

void Gateway::MarkDown(uint32_t d, const Member& member, absl::string_view count_name,
                       uint32_t count, std::string error) {
  router_.MarkDown(d);
  destinations_[d].marked_down.fetch_add(1, std::memory_order_relaxed);
  Log("warning", "destination_down",
      {{"destination", member.name},
       {"url", member.url},
       {count_name, absl::StrCat(count)},
       {"error", std::move(error)}});
}

void Gateway::Finish(Endpoint endpoint, int status, SteadyTime start) {
  const int status_class = std::clamp(status / 100, 1, 5) - 1;
  requests_[static_cast<int>(endpoint) * kStatusClasses + status_class].fetch_add(
      1, std::memory_order_relaxed);
  latency_.Observe(std::chrono::steady_clock::now() - start);
}

uint32_t Gateway::DestinationIndex(absl::string_view name) const {
  const std::shared_ptr<const Members> members = ControlMembers();
  for (uint32_t d = 0; d < members->count; ++d) {
    if (members->by_index[d]->name == name) return d;
  }
  return dataplane::kNoDestination;
}

std::vector<std::string> Gateway::DestinationNames() const {
  const std::shared_ptr<const Members> members = ControlMembers();
  std::vector<std::string> names;
  for (uint32_t d = 0; d < members->count; ++d) names.push_back(members->by_index[d]->name);
  return names;
}

std::optional<dataplane::TableSubscriberStats> Gateway::SubscriberStats() const {
  if (subscriber_ == nullptr) return std::nullopt;
  return subscriber_->Stats();
}

std::optional<dataplane::RateReporterStats> Gateway::ReporterStats() const {
  if (reporter_ == nullptr) return std::nullopt;
  return reporter_->Stats();
}

dataplane::InFlight Gateway::Route(const std::optional<std::string>& key,
                                   const Members& members) {
  if (!key.has_value()) {
    picks_[kNoKeyPick].fetch_add(1, std::memory_order_relaxed);
    return router_.Track({dataplane::PowerOfTwoChoices(router_.loads(), random_), false,
                          dataplane::Reason::kPolicy});
  }
  const uint64_t key_id = dataplane::KeyId(*key);
  recorder_.Record(key_id);
  dataplane::Policy* policy = members.policy.get();
  dataplane::InFlight in_flight = policy == nullptr
                                      ? router_.Pick(key_id, clock_.Now())
                                      : router_.Track(policy->Pick(key_id, router_.loads()));
  picks_[static_cast<int>(in_flight.reason())].fetch_add(1, std::memory_order_relaxed);
  return in_flight;
}

// GET /health of `member`: its status, or 0 when there was no answer within `timeout`.
int Gateway::GetHealth(const Member& member, absl::Duration timeout) const {
  httplib::Client client(member.address.host, member.address.port);
  const auto [connect_s, connect_us] = SecondsAndMicros(ToChrono(config_.connect_timeout));
  const auto [read_s, read_us] = SecondsAndMicros(ToChrono(timeout));
  client.set_connection_timeout(connect_s, connect_us);
  client.set_read_timeout(read_s, read_us);
  httplib::Result result = client.Get("/health");
  return result ? result->status : 0;
}

void Gateway::RunProber() {
  const bool active = config_.health_check_interval > absl::ZeroDuration();
  auto next_check = std::chrono::steady_clock::now() + ToChrono(config_.health_check_interval);
  for (;;) {
    if (WaitForStop(config_.probe_interval)) return;
    const std::shared_ptr<const Members> members = ControlMembers();
    // Down members: a 200 brings one back.
    for (uint32_t d = 0; d < members->count; ++d) {
      if (router_.loads().Up(d)) continue;
      const Member& member = *members->by_index[d];
      const int status = GetHealth(member, config_.connect_timeout);
      if (status == 200) {
        destinations_[d].consecutive_failures.store(0, std::memory_order_relaxed);
        destinations_[d].health_failures.store(0, std::memory_order_relaxed);
        router_.MarkUp(d);
        Log("info", "destination_up",
            {{"destination", member.name}, {"url", member.url}, {"health_status", "200"}});
      }
    }
    // Active health checks of up members (health_check_interval): failure_threshold failed
    // checks in a row (no answer within health_check_timeout, or not 200) mark one down.
    if (!active || std::chrono::steady_clock::now() < next_check) continue;
    next_check = std::chrono::steady_clock::now() + ToChrono(config_.health_check_interval);
    for (uint32_t d = 0; d < members->count; ++d) {
      if (!router_.loads().Up(d)) continue;
      const Member& member = *members->by_index[d];
      Destination& destination = destinations_[d];
      const int status = GetHealth(member, config_.health_check_timeout);
      if (status == 200) {
        destination.health_failures.store(0, std::memory_order_relaxed);
        continue;
      }
      destination.health_check_failures.fetch_add(1, std::memory_order_relaxed);
      const uint32_t failures =
          destination.health_failures.fetch_add(1, std::memory_order_relaxed) + 1;
      if (failures == config_.failure_threshold) {
        MarkDown(d, member, "failed_health_checks", failures,
                 status == 0 ? "none" : absl::StrCat("HTTP ", status));
      }
    }
  }
}

void Gateway::ScrapeLoads() {
  const auto [connect_s, connect_us] = SecondsAndMicros(ToChrono(config_.connect_timeout));
  const std::shared_ptr<const Members> members = ControlMembers();
  for (uint32_t d = 0; d < members->count; ++d) {
    if (!router_.loads().Up(d)) continue;
    const Member& member = *members->by_index[d];
    httplib::Client client(member.address.host, member.address.port);
    client.set_connection_timeout(connect_s, connect_us);
    client.set_read_timeout(connect_s, connect_us);
    httplib::Result result = client.Get("/metrics");
    std::optional<double> value;
    if (result && result->status == 200) value = SumSamples(result->body, config_.load_metric);
    if (!value.has_value() || *value < 0) {
      const uint64_t failures =
          destinations_[d].scrape_failures.fetch_add(1, std::memory_order_relaxed);
      if (failures == 0) {  // the first one is worth a line; the counter tells the rest
        Log("warning", "load_scrape_failed",
            {{"destination", member.name},
             {"url", member.url},
             {"metric", config_.load_metric},
             {"detail", result ? absl::StrCat("\"HTTP ", result->status,
                                              ", or no finite sample of the metric\"")
                               : absl::StrCat("\"", httplib::to_string(result.error()), "\"")}});
      }
      value = 0;
    }
    destinations_[d].reported_load.store(*value, std::memory_order_relaxed);
    router_.SetLoad(d, *value);
  }
}

void Gateway::RunLoadScraper() {
  for (;;) {
    ScrapeLoads();
    if (WaitForStop(config_.load_scrape_interval)) return;
  }
}

std::string Gateway::RenderMetrics() {
  base::Exposition page("cacheroute_gateway_");
  const auto family = [&](absl::string_view name, absl::string_view type, absl::string_view help) {
    page.Family(name, type, help);
  };
  const auto sample = [&](absl::string_view name, double value, absl::string_view labels = "") {
    page.Sample(name, value, labels);
  };
  const std::shared_ptr<const Members> members = ControlMembers();
  const dataplane::RouterStats stats = router_.Stats(clock_.Now());
  // The members the Router counts (the two agree but for a moment during a change).
  const uint32_t count = std::min<uint32_t>(members->count, stats.in_flight.size());
  const auto destination_label = [&](uint32_t d) {
    return base::Exposition::Label("destination", members->by_index[d]->name);
  };

  family("requests_total", "counter", "Requests answered, by endpoint and status class.");
  for (int e = 0; e < kEndpoints; ++e) {
    for (int c = 0; c < kStatusClasses; ++c) {
      const uint64_t n = requests_[e * kStatusClasses + c].load(std::memory_order_relaxed);
      sample("requests_total", static_cast<double>(n),
             absl::StrCat("endpoint=\"", kEndpointNames[e], "\",code=\"", c + 1, "xx\""));
    }
  }
  family("picks_total", "counter",
         "Routing decisions by reason: planned, the CacheRoute fallbacks (no_table, stale, "
         "set_down, not_admitted), policy (other policies), control_arm (a rollout's control "
         "arm), no_key.");
  for (int r = 0; r <= dataplane::kReasonCount; ++r) {
    const std::string_view name = dataplane::ReasonName(static_cast<dataplane::Reason>(r));
    const absl::string_view reason =
        r == kNoKeyPick ? "no_key" : absl::string_view(name.data(), name.size());
    sample("picks_total", static_cast<double>(picks_[r].load(std::memory_order_relaxed)),
           absl::StrCat("reason=\"", reason, "\""));
  }
  family("table_version", "gauge", "Number of the installed table version (0: none).");
  sample("table_version", static_cast<double>(stats.has_table ? stats.version.number : 0),
         absl::StrCat("epoch=\"", stats.has_table ? stats.version.epoch : 0, "\""));
  family("table_age_seconds", "gauge", "Seconds since the installed table was installed.");
  sample("table_age_seconds",
         stats.has_table ? std::chrono::duration<double>(stats.table_age).count() : 0.0);
  family("table_stale", "gauge", "1 when the table is older than table_ttl (not routed by).");
  sample("table_stale", stats.stale ? 1 : 0);
  // A family with one sample per destination, labelled with its name.
  const auto per_destination = [&](absl::string_view name, absl::string_view type,
                                   absl::string_view help, const auto& value_of) {
    family(name, type, help);
    for (uint32_t d = 0; d < count; ++d) {
      sample(name, static_cast<double>(value_of(d)), destination_label(d));
    }
  };
  const auto relaxed = [](const auto& atomic) { return atomic.load(std::memory_order_relaxed); };
  per_destination("in_flight", "gauge", "Requests in flight per destination.",
                  [&](uint32_t d) { return stats.in_flight[d]; });
  per_destination("destination_up", "gauge",
                  "1 when the destination is routed to, 0 when marked down.",
                  [&](uint32_t d) { return stats.up[d] ? 1 : 0; });
  per_destination("upstream_errors_total", "counter",
                  "Upstream errors of every kind towards each destination (upstream_error_kinds_total splits them).",
                  [&](uint32_t d) { return relaxed(destinations_[d].errors); });
  per_destination("destination_marked_down_total", "counter",
                  "Times each destination was marked down after failure_threshold connect failures or resets.",
                  [&](uint32_t d) { return relaxed(destinations_[d].marked_down); });
  per_destination("health_check_failures_total", "counter",
                  "Active health checks (health_check_interval) of an up destination that failed.",
                  [&](uint32_t d) { return relaxed(destinations_[d].health_check_failures); });
  per_destination("reported_load", "gauge",
                  "The load_metric each destination last reported (load_scrape_interval; 0 when "
                  "off or the scrape failed).",
                  [&](uint32_t d) { return relaxed(destinations_[d].reported_load); });
  per_destination("load_scrape_failures_total", "counter",
                  "Scrapes of a destination's /metrics that failed or lacked load_metric.",
                  [&](uint32_t d) { return relaxed(destinations_[d].scrape_failures); });
  // A histogram family; `labels` (may be empty) go before le.
  const auto histogram = [&](absl::string_view name, const Histogram& h, absl::string_view labels) {
    std::array<uint64_t, kLatencyBuckets.size() + 1> counts;
    for (size_t b = 0; b < counts.size(); ++b) {
      counts[b] = h.buckets[b].load(std::memory_order_relaxed);
    }
    page.Histogram(name, kLatencyBuckets, counts,
                   static_cast<double>(h.sum_ns.load(std::memory_order_relaxed)) * 1e-9, labels);
  };
  family("request_duration_seconds", "histogram",
         "Time from receiving a request to the end of its response (streams: the last chunk).");
  histogram("request_duration_seconds", latency_, "");
  family("destination_request_duration_seconds", "histogram",
         "Per destination: time from receiving a request to the end of its upstream answer.");
  for (uint32_t d = 0; d < count; ++d) {
    histogram("destination_request_duration_seconds", destinations_[d].duration,
              destination_label(d));
  }
  family("time_to_first_token_seconds", "histogram",
         "Per destination, streamed answers: time from receiving a request to the first body "
         "chunk.");
  for (uint32_t d = 0; d < count; ++d) {
    histogram("time_to_first_token_seconds", destinations_[d].ttft, destination_label(d));
  }
  family("upstream_error_kinds_total", "counter",
         "Upstream errors by kind: connect, reset (before the headers: both count towards "
         "marking down; after them: counted only), header_timeout, idle_timeout, protocol.");
  for (uint32_t d = 0; d < count; ++d) {
    for (int k = 0; k < kErrorKinds; ++k) {
      sample("upstream_error_kinds_total",
             static_cast<double>(destinations_[d].error_kinds[k].load(std::memory_order_relaxed)),
             absl::StrCat(destination_label(d), ",kind=\"", kErrorKindNames[k], "\""));
    }
  }
  family("prompt_tokens_total", "counter",
         "Prompt tokens of answers whose usage reported cached tokens, per destination, planned "
         "(routed by the table) or not.");
  family("cached_tokens_total", "counter",
         "Of those, tokens served from the prefix cache (usage.prompt_tokens_details."
         "cached_tokens): the served KV hit is cached / prompt.");
  for (const char* name : {"prompt_tokens_total", "cached_tokens_total"}) {
    for (uint32_t d = 0; d < count; ++d) {
      for (int planned = 0; planned < 2; ++planned) {
        const auto& counter = absl::string_view(name) == "prompt_tokens_total"
                                  ? destinations_[d].prompt_tokens[planned]
                                  : destinations_[d].cached_tokens[planned];
        sample(name, static_cast<double>(counter.load(std::memory_order_relaxed)),
               absl::StrCat(destination_label(d), ",planned=\"", planned, "\""));
      }
    }
  }
  family("measured_kv_hit", "gauge",
         "The served KV hit given to the router (cached / prompt tokens over ~1,000 answers).");
  sample("measured_kv_hit", measured_hit().value_or(0));
  family("members", "gauge",
         "Upstreams routed to (the membership: static, upstreams_file or upstreams_dns).");
  sample("members", static_cast<double>(members->count));
  family("membership_changes_total", "counter", "Membership changes applied since the start.");
  sample("membership_changes_total", static_cast<double>(members->generation - 1));
  family("open_streams", "gauge", "Streamed answers in progress.");
  sample("open_streams", static_cast<double>(open_streams()));
  family("active_requests", "gauge", "Requests in progress.");
  sample("active_requests", static_cast<double>(active_requests()));
  family("client_connections", "gauge", "Open client connections.");
  sample("client_connections", server_ ? static_cast<double>(server_->connections()) : 0.0);
  family("draining", "gauge", "1 after SIGTERM, while requests in progress finish.");
  sample("draining", draining_.load() ? 1 : 0);
  family("unauthorized_total", "counter", "Requests refused for a missing or unknown API key.");
  sample("unauthorized_total", static_cast<double>(unauthorized_.load(std::memory_order_relaxed)));

  family("planner_connected", "gauge", "1 while the table stream to the planner is open.");
  const std::optional<dataplane::TableSubscriberStats> subscriber = SubscriberStats();
  sample("planner_connected", subscriber && subscriber->connected ? 1 : 0);
  const std::optional<dataplane::RateReporterStats> reporter = ReporterStats();
  family("rate_reports_total", "counter", "Rate reports the planner accepted.");
  sample("rate_reports_total", reporter ? static_cast<double>(reporter->reports_sent) : 0);
  family("rate_report_failures_total", "counter", "Rate report RPCs that failed (retried).");
  sample("rate_report_failures_total",
         reporter ? static_cast<double>(reporter->failed_attempts) : 0);
  return page.Take();
}

}  // namespace cacheroute::gateway
