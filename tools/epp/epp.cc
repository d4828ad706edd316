// See epp.h.
#include "tools/epp/epp.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "base/exposition.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "cacheroute/dataplane/policy_registry.h"
#include "tools/epp/ext_proc_server.h"
#include "tools/frontend/frontend_core.h"
#include "tools/frontend/metrics/request_metrics.h"
#include "tools/frontend/openai_fields.h"
#include "tools/http/server.h"

namespace cacheroute::epp {
namespace {

// How often a held request looks at the fleet's room and its deadline again.
constexpr std::chrono::milliseconds kAdmissionPoll{5};

namespace asio = boost::asio;

// A non-streamed answer is kept up to this size for its `usage` (the gateway, which must hold the
// whole answer anyway, reads up to 64 MiB); a larger one's usage is not read. Completions are
// far smaller; this bounds what thousands of concurrent answers can hold here.
constexpr size_t kMaxUnaryBody = 4u << 20;

// Which of the gateway's endpoints (metrics label `endpoint`) a request path is; any other POST
// path is routed as a completion is and counted as one.
frontend::Endpoint EndpointOf(absl::string_view path) {
  path = path.substr(0, path.find('?'));
  if (path == "/v1/chat/completions") return frontend::Endpoint::kChatCompletions;
  if (path == "/v1/models") return frontend::Endpoint::kModels;
  return frontend::Endpoint::kCompletions;
}

// The address a member is answered as, IP:PORT ([IPv6]:PORT): its address as resolved when it
// joined, which is what the gateway connects to.
std::string AddressOf(const frontend::Member& member) {
  if (member.endpoints.empty()) return "";
  const auto& endpoint = member.endpoints.front();
  const auto address = endpoint.address();
  return address.is_v6() ? absl::StrCat("[", address.to_string(), "]:", endpoint.port())
                         : absl::StrCat(address.to_string(), ":", endpoint.port());
}

}  // namespace

struct Epp::Counters {
  frontend::RequestMetrics requests;
  std::atomic<uint64_t> abandoned{0};         // streams that ended before their response
  std::atomic<uint64_t> subset_redirects{0};  // picks moved into GIE's subset hint
  std::atomic<uint64_t> subset_refusals{0};   // 503s for a subset with no up member
  std::atomic<uint64_t> served_redirects{0};  // outcomes credited to the member that served
  std::atomic<uint64_t> served_unknown{0};    // served endpoints that name no member
  std::atomic<bool> served_unknown_logged{false};
};

// The routing side of one stream: the gateway's HandleCompletion, split at the ext_proc phases.
class Epp::RequestExchange : public Exchange {
 public:
  explicit RequestExchange(Epp& epp)
      : epp_(epp), core_(*epp.core_), start_(core_.routing().clock().Now()) {}

  bool NeedsBody(const HeaderList& headers) override {
    return core_.NeedsBody(
        [&headers](absl::string_view name) { return FindHeader(headers, name); });
  }

  Route RouteRequest(const RequestView& request) override {
    kind_ = EndpointOf(FindHeader(request.headers, ":path").value_or(""));
    if (std::optional<Route> shed = Admit(request); shed.has_value()) return *std::move(shed);
    routed_.emplace(
        kind_ == frontend::Endpoint::kModels
            ? core_.RouteAny(start_)
            : core_.Route(
                  [&request](absl::string_view name) { return FindHeader(request.headers, name); },
                  request.body, start_));
    const frontend::Member* member = routed_->member();
    std::string address = member != nullptr ? AddressOf(*member) : "";
    Route route;
    if (member != nullptr && request.subset != nullptr &&
        std::find(request.subset->begin(), request.subset->end(), address) ==
            request.subset->end()) {
      member = InSubset(*request.subset, address);
      if (member == nullptr) {
        epp_.counters_->subset_refusals.fetch_add(1, std::memory_order_relaxed);
        route.message = absl::StrCat("no up member is among the ", request.subset->size(),
                                     " endpoints of the gateway's subset hint (", kSubsetNamespace,
                                     ", ", kSubsetKey, ")");
      }
    }
    if (member == nullptr) {
      if (route.message.empty()) route.message = "no upstream is up";
      epp_.counters_->requests.Answered(kind_, 503, core_.routing().clock().Now() - start_);
      routed_->lifecycle.Finish(503);
      routed_.reset();
      return route;
    }
    address_ = address;
    route.endpoint = std::move(address);
    for (const uint32_t d : LeastLoaded(request.subset, routed_->lifecycle.destination(),
                                        epp_.config_.fallback_endpoints)) {
      route.fallbacks.push_back(AddressOf(*routed_->members->At(d)));
    }
    return route;
  }

  // With `shed` on, a completion's turn in the admission queue: none when admitted (at once, or
  // after waiting), else the 429 immediate response with Retry-After (docs/epp.md, "Shedding and
  // priority"). A request waits only on a thread of its own (ExtProcServer::MayWait: the server
  // hands a stream's request message to one while the fleet is saturated, hold_request), never on
  // one of gRPC's few callback threads, which the answers that free room arrive on; there it
  // looks again every kAdmissionPoll. Queued on a callback thread (the room went in between): shed.
  std::optional<Route> Admit(const RequestView& request) {
    frontend::AdmissionQueue* queue = core_.admission();
    if (queue == nullptr || kind_ == frontend::Endpoint::kModels) return std::nullopt;
    struct Waiting {
      std::mutex mu;
      std::condition_variable cv;
      std::optional<frontend::AdmissionResult> outcome;  // guarded by mu
    };
    auto waiting = std::make_shared<Waiting>();
    const auto headers = [&request](absl::string_view name) {
      return FindHeader(request.headers, name);
    };
    frontend::AdmissionResult result = core_.OfferAdmission(
        headers, request.body, [waiting](frontend::Verdict v, frontend::ShedCause c) {
          std::lock_guard<std::mutex> lock(waiting->mu);
          waiting->outcome = frontend::AdmissionResult{v, c, 0};
          waiting->cv.notify_all();
        });
    if (result.verdict == frontend::Verdict::kQueued && !ExtProcServer::MayWait() &&
        queue->Withdraw(result.ticket, core_.routing().clock().Now(),
                        frontend::ShedCause::kQueueFull)) {
      result = {frontend::Verdict::kShed, frontend::ShedCause::kQueueFull, 0};
    }
    if (result.verdict == frontend::Verdict::kQueued) {
      std::unique_lock<std::mutex> lock(waiting->mu);
      while (!waiting->outcome.has_value()) {
        if (waiting->cv.wait_for(lock, kAdmissionPoll,
                                 [&] { return waiting->outcome.has_value(); })) {
          break;
        }
        lock.unlock();
        core_.PumpAdmission();  // room as prefills end; the deadline as time passes
        lock.lock();
      }
      result = *waiting->outcome;
    }
    if (result.verdict != frontend::Verdict::kShed) return std::nullopt;
    const int retry_after = queue->retry_after_seconds();
    Route route;
    route.status = 429;
    route.type = frontend::kShedErrorType;
    route.code = frontend::kShedErrorCode;
    route.message = frontend::ShedMessage(result.cause, retry_after);
    route.immediate_headers = {{"retry-after", absl::StrCat(retry_after)}};
    epp_.counters_->requests.Answered(kind_, 429, core_.routing().clock().Now() - start_);
    return route;
  }

  HeaderList ResponseHeaders(const ResponseView& response) override {
    status_ = response.status;
    responded_ = true;
    const std::optional<absl::string_view> type = FindHeader(response.headers, "content-type");
    streamed_ =
        type.has_value() && absl::StrContains(absl::AsciiStrToLower(*type), "text/event-stream");
    if (streamed_) epp_.counters_->requests.StreamOpened();
    if (!routed_.has_value()) return {};
    if (response.served.has_value() && *response.served != address_) Served(*response.served);
    // The member that serves, and whether the table chose it.
    return {{"x-cacheroute-destination", routed_->member()->name},
            {"x-cacheroute-planned", routed_->lifecycle.planned() ? "1" : "0"}};
  }

  void ResponseBody(absl::string_view chunk) override {
    if (chunk.empty() || !routed_.has_value()) return;
    if (streamed_) {
      routed_->lifecycle.FirstToken(/*streamed=*/true);
      usage_.Feed(chunk);
    } else if (!unary_too_big_) {
      if (unary_.size() + chunk.size() > kMaxUnaryBody) {
        unary_too_big_ = true;
        unary_.clear();
      } else {
        unary_.append(chunk.data(), chunk.size());
      }
    }
  }

  void Finished(bool complete) override {
    if (!routed_.has_value()) return;
    std::optional<frontend::Usage> usage;
    if (streamed_) {
      usage = usage_.usage();
      epp_.counters_->requests.StreamClosed();
    } else if (responded_) {
      if (absl::StrContains(unary_, "\"usage\"")) usage = frontend::ReadUsage(unary_);
      routed_->lifecycle.FirstToken(/*streamed=*/false);  // a unary answer's client sees it whole
    }
    if (usage.has_value()) routed_->lifecycle.Usage(*usage);
    routed_->lifecycle.UpstreamDone();
    if (responded_) {
      routed_->lifecycle.Finish(status_);
      epp_.counters_->requests.Answered(kind_, status_, core_.routing().clock().Now() - start_);
    } else {
      // Ended before any response: most likely the client went away. No status to count.
      epp_.counters_->abandoned.fetch_add(1, std::memory_order_relaxed);
    }
  }

 private:
  // Up to `n` up members other than `exclude` (and within `subset` when given), least loaded
  // first (the lower index on a tie).
  std::vector<uint32_t> LeastLoaded(const std::vector<std::string>* subset, uint32_t exclude,
                                    size_t n) const {
    const frontend::Members& members = *routed_->members;
    const dataplane::Router& router = core_.routing().router();
    std::vector<std::pair<double, uint32_t>> up;
    for (uint32_t d = 0; d < members.count && n > 0; ++d) {
      if (d == exclude || members.At(d) == nullptr || !router.loads().Up(d)) continue;
      if (subset != nullptr &&
          std::find(subset->begin(), subset->end(), AddressOf(*members.At(d))) == subset->end()) {
        continue;
      }
      up.emplace_back(router.loads().Load(d), d);
    }
    const size_t k = std::min(n, up.size());
    std::partial_sort(up.begin(), up.begin() + static_cast<long>(k), up.end());
    std::vector<uint32_t> out;
    for (size_t i = 0; i < k; ++i) out.push_back(up[i].second);
    return out;
  }

  // GIE's subset hint: the least-loaded up member whose address is in `subset`, the request
  // moved there; null when none is.
  const frontend::Member* InSubset(const std::vector<std::string>& subset, std::string& address) {
    const std::vector<uint32_t> least = LeastLoaded(&subset, dataplane::kNoDestination, 1);
    if (least.empty()) return nullptr;
    const uint32_t best = least.front();
    routed_.emplace(core_.Redirect(*std::move(routed_), best));
    epp_.counters_->subset_redirects.fetch_add(1, std::memory_order_relaxed);
    address = AddressOf(*routed_->members->At(best));
    return routed_->members->At(best);
  }

  // GIE's served endpoint names another member than the one picked (the data plane retried on a
  // fallback): the request's outcome from here on (first token, usage, served hit, in flight) is
  // that member's. A value naming no member is ignored, counted, and logged once per process.
  void Served(const std::string& served) {
    const frontend::Members& members = *routed_->members;
    for (uint32_t d = 0; d < members.count; ++d) {
      const frontend::Member* member = members.At(d);
      if (member == nullptr || AddressOf(*member) != served) continue;
      routed_.emplace(core_.Redirect(*std::move(routed_), d));
      address_ = served;
      epp_.counters_->served_redirects.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    epp_.counters_->served_unknown.fetch_add(1, std::memory_order_relaxed);
    if (!epp_.counters_->served_unknown_logged.exchange(true)) {
      base::LogEvent("warning", "served_endpoint_unknown",
                     {{"value", served},
                      {"picked", address_},
                      {"detail",
                       "the data plane's x-gateway-destination-endpoint-served names no member: "
                       "ignored (counted in served_unknown_total; logged once)"}});
    }
  }

  Epp& epp_;
  frontend::FrontendCore& core_;
  const dataplane::Time start_;
  std::optional<frontend::RoutedRequest> routed_;
  std::string address_;  // the endpoint the request is credited to (IP:PORT)
  frontend::Endpoint kind_ = frontend::Endpoint::kCompletions;
  int status_ = 0;
  bool responded_ = false;
  bool streamed_ = false;
  frontend::UsageScanner usage_;  // a streamed answer's
  std::string unary_;             // a non-streamed answer, for its usage
  bool unary_too_big_ = false;
};

Epp::Epp(const EppConfig& config) : config_(config), counters_(std::make_unique<Counters>()) {}

absl::StatusOr<std::unique_ptr<Epp>> Epp::Start(const EppConfig& config) {
  if (absl::Status s = ValidateEppConfig(config); !s.ok()) return s;
  std::unique_ptr<Epp> epp(new Epp(config));
  epp->core_ = std::make_unique<frontend::FrontendCore>(config.dataplane, epp->stop_);
  ExtProcServerOptions options;
  options.listen = config.listen;
  if (frontend::AdmissionQueue* queue = epp->core_->admission();
      queue != nullptr && config.dataplane.shed_queue_capacity > 0) {
    // A request message is handled on a thread of its own while the fleet is saturated (less
    // room than one destination's threshold, or waiters), so that it may wait in the queue.
    frontend::FrontendCore* core = epp->core_.get();
    const double margin = config.dataplane.shed_saturation_tokens;
    options.hold_request = [core, queue, margin] {
      return queue->queued() > 0 || core->AdmissionRoom() < margin;
    };
  }
  options.stream = {.request_body_mode = config.request_body_mode,
                    .response_body_mode = config.response_body_mode,
                    .max_request_body = config.max_request_body};
  options.tls_cert_file = config.tls_cert_file;
  options.tls_key_file = config.tls_key_file;
  options.tls_client_ca_file = config.tls_client_ca_file;
  Epp* raw = epp.get();
  CACHEROUTE_ASSIGN_OR_RETURN(epp->server_, ExtProcServer::Start(options, [raw] {
                                return std::make_unique<RequestExchange>(*raw);
                              }));
  if (absl::Status s = epp->StartMetrics(); !s.ok()) return s;
  if (absl::Status s = epp->core_->Start(); !s.ok()) return s;
  epp->server_->SetReady(epp->core_->routing().AnyUp());
  epp->readiness_thread_ = std::thread([raw] { raw->RunReadiness(); });
  return epp;
}

absl::Status Epp::StartMetrics() {
  CACHEROUTE_ASSIGN_OR_RETURN(
      base::yaml::HostPort address,
      base::yaml::SplitHostPort("metrics_listen", config_.metrics_listen, "[::]:9090"));
  http::ServerOptions options;
  options.host = address.host == "localhost" ? "127.0.0.1" : address.host;
  options.port = address.port;
  options.threads = 1;
  absl::StatusOr<std::unique_ptr<http::Server>> server =
      http::Server::Start(options, [this](http::Exchange& x) -> asio::awaitable<void> {
        const http::Request& request = x.request();
        const absl::string_view target(request.target().data(), request.target().size());
        const absl::string_view path = target.substr(0, target.find('?'));
        if (path == "/metrics") {
          co_await x.Send(http::TextResponse(
              request, 200, "text/plain; version=0.0.4; charset=utf-8", RenderMetrics()));
        } else if (path == "/debug/explain" && request.method() == boost::beast::http::verb::post) {
          const absl::StatusOr<std::string> explained = core_->Explain(
              [&request](absl::string_view name) -> std::optional<absl::string_view> {
                const auto it = request.find(boost::beast::string_view(name.data(), name.size()));
                if (it == request.end()) return std::nullopt;
                return absl::string_view(it->value().data(), it->value().size());
              },
              absl::string_view(request.body()));
          // The answer is made before the co_await (GCC 12 mishandles a conditional of temporaries
          // inside one).
          http::Response response = http::TextResponse(request, 200, "application/json",
                                                       explained.ok() ? *explained : "");
          if (!explained.ok()) {
            response = http::TextResponse(
                request, 400, "application/json",
                frontend::ErrorBody(explained.status().message(), "invalid_request_error",
                                    absl::IsFailedPrecondition(explained.status())
                                        ? "policy_not_explained"
                                        : "no_routing_key"));
          }
          co_await x.Send(std::move(response));
        } else if (path == "/healthz") {
          const bool up = core_->routing().AnyUp();
          const bool ok = up && !server_->draining();
          co_await x.Send(http::TextResponse(request, ok ? 200 : 503, "text/plain",
                                             ok   ? "ok\n"
                                             : up ? "draining\n"
                                                  : "no upstream is up\n"));
        } else {
          co_await x.Send(http::TextResponse(
              request, 404, "text/plain",
              "not found: GET /metrics, GET /healthz and POST /debug/explain are served\n"));
        }
      });
  if (!server.ok()) {
    if (absl::IsInvalidArgument(server.status())) return server.status();
    return absl::UnavailableError(absl::StrCat("metrics_listen: cannot bind \"",
                                               config_.metrics_listen,
                                               "\": ", server.status().message()));
  }
  metrics_server_ = *std::move(server);
  return absl::OkStatus();
}

void Epp::RunReadiness() {
  // Members come and go, and go down and up, on the dataplane's own threads; a second is soon
  // enough for the readiness probe (the data plane itself keeps sending while ready).
  while (!stop_.WaitFor(absl::Seconds(1))) server_->SetReady(core_->routing().AnyUp());
}

Epp::~Epp() { Stop(); }

size_t Epp::Drain() {
  if (server_ == nullptr) return 0;
  base::LogEvent("info", "draining",
                 {{"active_streams", absl::StrCat(server_->active_streams())},
                  {"drain_delay", absl::FormatDuration(config_.drain_delay)},
                  {"drain_timeout", absl::FormatDuration(config_.drain_timeout)}});
  const size_t cut = server_->Drain(config_.drain_delay, config_.drain_timeout);
  base::LogEvent(cut == 0 ? "info" : "warning", "drained", {{"streams_cut", absl::StrCat(cut)}});
  return cut;
}

void Epp::Stop() {
  if (!stop_.Trigger()) return;
  if (server_ != nullptr) server_->Stop();  // every stream's request finishes first
  if (readiness_thread_.joinable()) readiness_thread_.join();
  if (metrics_server_ != nullptr) metrics_server_->Stop();
  if (core_ != nullptr) core_->Stop();
}

int Epp::port() const { return server_ != nullptr ? server_->port() : 0; }
int Epp::metrics_port() const { return metrics_server_ != nullptr ? metrics_server_->port() : 0; }

std::vector<std::string> Epp::DestinationNames() const { return core_->membership().Names(); }

std::vector<std::string> Epp::DestinationEndpoints() const {
  const std::shared_ptr<const frontend::Members> members = core_->membership().Current();
  std::vector<std::string> endpoints;
  for (uint32_t d = 0; d < members->count; ++d) endpoints.push_back(AddressOf(*members->At(d)));
  return endpoints;
}

size_t Epp::active_streams() const { return server_ != nullptr ? server_->active_streams() : 0; }

bool Epp::ready() const {
  return server_ != nullptr && !server_->draining() && core_->routing().AnyUp();
}

dataplane::RouterStats Epp::RouterStats() const { return core_->routing().Stats(); }

std::shared_ptr<const dataplane::RoutingTable> Epp::table() const {
  return core_->routing().router().table();
}

std::optional<dataplane::TableSubscriberStats> Epp::SubscriberStats() const {
  return core_->SubscriberStats();
}

std::optional<dataplane::RateReporterStats> Epp::ReporterStats() const {
  return core_->ReporterStats();
}

std::optional<double> Epp::measured_hit() const { return core_->routing().served_hit().measured(); }

std::string Epp::RenderMetrics() const {
  base::Exposition page("cacheroute_epp_");
  const frontend::RoutingCore& routing = core_->routing();
  const frontend::DestinationHealth& health = core_->health();
  const dataplane::RouterStats stats = routing.Stats();
  const std::vector<std::string> labels =
      frontend::FrontendCore::DestinationLabels(*core_->membership().Current(), stats);
  const auto relaxed = [](const std::atomic<uint64_t>& a) {
    return static_cast<double>(a.load(std::memory_order_relaxed));
  };
  // The gateway's families, measured the same way (docs/gateway.md, "Metrics").
  counters_->requests.RenderRequests(page);
  routing.RenderPicks(page, stats);
  routing.RenderLoads(page, stats, labels);
  health.RenderCounters(page, labels);
  core_->scraper().Render(page, labels);
  counters_->requests.RenderLatency(page);
  routing.RenderLatency(page, labels);
  routing.served_hit().Render(page, labels);
  core_->RenderMembership(page);
  frontend::RenderPlannerLink(page, core_->planner());
  page.Gauge("open_streams", "Streamed answers (text/event-stream) in progress.",
             static_cast<double>(counters_->requests.open_streams()));
  page.Gauge("draining", "1 after SIGTERM, while streams in progress finish.",
             server_ != nullptr && server_->draining() ? 1 : 0);
  page.Gauge("ready", "1 while readiness is SERVING: a member is up and not draining.",
             ready() ? 1 : 0);
  // The endpoint picker's own.
  if (server_ != nullptr) server_->RenderMetrics(page);
  page.Counter("abandoned_total",
               "Requests routed whose stream ended before any response (the client went away, "
               "or the gateway did): in flight until then, never counted as answered.",
               relaxed(counters_->abandoned));
  page.Counter("subset_redirects_total",
               "Picks moved to the least-loaded member of the gateway's subset hint "
               "(x-gateway-destination-endpoint-subset) because the policy chose outside it.",
               relaxed(counters_->subset_redirects));
  page.Counter("subset_refusals_total",
               "Requests answered 503 because no member of the subset hint was up.",
               relaxed(counters_->subset_refusals));
  page.Counter("served_redirects_total",
               "Requests whose served endpoint (x-gateway-destination-endpoint-served) named "
               "another member than the one picked: their outcome was credited to it.",
               relaxed(counters_->served_redirects));
  page.Counter("served_unknown_total",
               "Served endpoints (x-gateway-destination-endpoint-served) that named no member: "
               "ignored.",
               relaxed(counters_->served_unknown));
  if (core_->admission() != nullptr) core_->admission()->Render(page);
  return page.Take();
}

}  // namespace cacheroute::epp
