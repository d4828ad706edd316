// See gateway.h.
#include "tools/gateway/gateway.h"

#include <httplib.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <deque>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "cacheroute/dataplane/key_id.h"
#include "planner/service/config.h"
#include "planner/service/http_listen.h"
#include "tools/gateway/prometheus_text.h"

namespace cacheroute::gateway {
namespace {

using SteadyTime = std::chrono::steady_clock::time_point;

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

// ---- JSON. ----

void AppendJsonString(std::string& out, absl::string_view text) {
  out += '"';
  for (const char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", static_cast<unsigned char>(c));
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

void AppendUtf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

// Reads just enough JSON to find two top-level fields: strings are decoded, every other value is
// skipped without recursion (nesting is only counted), so a hostile body costs linear time and
// constant stack.
class FieldScanner {
 public:
  explicit FieldScanner(absl::string_view text) : text_(text) {}

  std::optional<RequestFields> Scan() {
    RequestFields fields;
    SkipSpace();
    if (!Consume('{')) return std::nullopt;
    SkipSpace();
    if (Consume('}')) return End(fields);
    for (;;) {
      std::string key;
      SkipSpace();
      if (!String(&key)) return std::nullopt;
      SkipSpace();
      if (!Consume(':')) return std::nullopt;
      SkipSpace();
      if (key == "user" && Peek() == '"') {
        std::string user;
        if (!String(&user)) return std::nullopt;
        fields.user = std::move(user);
      } else if (key == "stream") {
        const size_t start = pos_;
        if (!SkipValue()) return std::nullopt;
        fields.stream = text_.substr(start, pos_ - start) == "true";
      } else {
        if (key == "user") fields.user.reset();  // a non-string user is no key
        if (!SkipValue()) return std::nullopt;
      }
      SkipSpace();
      if (Consume('}')) return End(fields);
      if (!Consume(',')) return std::nullopt;
    }
  }

 private:
  std::optional<RequestFields> End(const RequestFields& fields) {
    SkipSpace();
    if (pos_ != text_.size()) return std::nullopt;
    return fields;
  }
  char Peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  bool Consume(char c) {
    if (Peek() != c) return false;
    ++pos_;
    return true;
  }
  void SkipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t' ||
                                   text_[pos_] == '\n' || text_[pos_] == '\r')) {
      ++pos_;
    }
  }
  bool Hex4(uint32_t* value) {
    if (pos_ + 4 > text_.size()) return false;
    *value = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = text_[pos_++];
      *value <<= 4;
      if (c >= '0' && c <= '9') {
        *value |= c - '0';
      } else if (c >= 'a' && c <= 'f') {
        *value |= c - 'a' + 10;
      } else if (c >= 'A' && c <= 'F') {
        *value |= c - 'A' + 10;
      } else {
        return false;
      }
    }
    return true;
  }
  // A string at pos_, decoded into `out` (may be null to skip).
  bool String(std::string* out) {
    if (!Consume('"')) return false;
    while (pos_ < text_.size()) {
      const char c = text_[pos_++];
      if (c == '"') return true;
      if (static_cast<unsigned char>(c) < 0x20) return false;
      if (c != '\\') {
        if (out) *out += c;
        continue;
      }
      if (pos_ >= text_.size()) return false;
      const char e = text_[pos_++];
      char plain = 0;
      switch (e) {
        case '"':
        case '\\':
        case '/':
          plain = e;
          break;
        case 'b':
          plain = '\b';
          break;
        case 'f':
          plain = '\f';
          break;
        case 'n':
          plain = '\n';
          break;
        case 'r':
          plain = '\r';
          break;
        case 't':
          plain = '\t';
          break;
        case 'u': {
          uint32_t cp = 0;
          if (!Hex4(&cp)) return false;
          if (cp >= 0xD800 && cp < 0xDC00) {  // a high surrogate needs its low half
            uint32_t low = 0;
            if (!Consume('\\') || !Consume('u') || !Hex4(&low) || low < 0xDC00 || low > 0xDFFF) {
              return false;
            }
            cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
          } else if (cp >= 0xDC00 && cp < 0xE000) {
            return false;
          }
          if (out) AppendUtf8(*out, cp);
          continue;
        }
        default:
          return false;
      }
      if (out) *out += plain;
    }
    return false;
  }
  // Any value; containers by counting brackets (strings inside are skipped properly). Scalars
  // are checked only loosely: the gateway forwards the body, it does not validate it.
  bool SkipValue() {
    const char c = Peek();
    if (c == '"') return String(nullptr);
    if (c == '{' || c == '[') {
      std::vector<char> open;
      while (pos_ < text_.size()) {
        const char d = text_[pos_];
        if (d == '"') {
          if (!String(nullptr)) return false;
          continue;
        }
        ++pos_;
        if (d == '{' || d == '[') {
          open.push_back(d);
        } else if (d == '}' || d == ']') {
          if (open.empty() || open.back() != (d == '}' ? '{' : '[')) return false;
          open.pop_back();
          if (open.empty()) return true;
        }
      }
      return false;
    }
    const size_t start = pos_;
    while (pos_ < text_.size() && (absl::ascii_isalnum(text_[pos_]) || text_[pos_] == '-' ||
                                   text_[pos_] == '+' || text_[pos_] == '.')) {
      ++pos_;
    }
    return pos_ > start;
  }

  absl::string_view text_;
  size_t pos_ = 0;
};

// ---- HTTP helpers. ----

// Request headers not passed upstream: hop-by-hop ones, those httplib's client sets itself, the
// pseudo-headers httplib's server adds (REMOTE_ADDR …), and Accept-Encoding (the client would
// decode a compressed answer that we then pass on with its Content-Encoding).
bool SkipRequestHeader(const std::string& name) {
  static constexpr absl::string_view kSkipped[] = {
      "host",        "content-length", "connection", "keep-alive",       "transfer-encoding",
      "te",          "trailer",        "upgrade",    "proxy-connection", "accept-encoding",
      "remote_addr", "remote_port",    "local_addr", "local_port"};
  const std::string lower = absl::AsciiStrToLower(name);
  return std::find(std::begin(kSkipped), std::end(kSkipped), lower) != std::end(kSkipped);
}

bool SkipResponseHeader(const std::string& name) {
  static constexpr absl::string_view kSkipped[] = {"content-length",    "connection",  "keep-alive",
                                                   "transfer-encoding", "te",          "trailer",
                                                   "upgrade",           "content-type"};
  const std::string lower = absl::AsciiStrToLower(name);
  return std::find(std::begin(kSkipped), std::end(kSkipped), lower) != std::end(kSkipped);
}

httplib::Request UpstreamRequest(const httplib::Request& request) {
  httplib::Request upstream;
  upstream.method = request.method;
  upstream.path = request.target.empty() ? request.path : request.target;
  for (const auto& [name, value] : request.headers) {
    if (!SkipRequestHeader(name)) upstream.headers.emplace(name, value);
  }
  upstream.body = request.body;
  return upstream;
}

void CopyResponseHeaders(const httplib::Headers& from, httplib::Response& to) {
  for (const auto& [name, value] : from) {
    if (!SkipResponseHeader(name)) to.set_header(name, value);
  }
}

std::string ContentType(const httplib::Headers& headers, const char* fallback) {
  for (const auto& [name, value] : headers) {
    if (absl::EqualsIgnoreCase(name, "content-type")) return value;
  }
  return fallback;
}

template <typename Duration>
std::pair<time_t, time_t> SecondsAndMicros(Duration d) {
  const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(d).count();
  return {static_cast<time_t>(micros / 1'000'000), static_cast<time_t>(micros % 1'000'000)};
}

std::chrono::microseconds ToChrono(absl::Duration d) { return absl::ToChronoMicroseconds(d); }

std::string Number(double v) { return absl::StrFormat("%.17g", v); }

std::string LabelValue(absl::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

// What went wrong, in words a client can act on (httplib's own names are terse: "Read").
std::string DescribeError(httplib::Error error) {
  switch (error) {
    case httplib::Error::Connection:
      return "could not connect";
    case httplib::Error::ConnectionTimeout:
      return "connect timed out";
    case httplib::Error::Read:
      return "no complete answer (connection closed or read timed out)";
    case httplib::Error::Write:
      return "sending the request failed (connection closed or write timed out)";
    case httplib::Error::Canceled:
      return "request canceled";
    default:
      return httplib::to_string(error);
  }
}

constexpr absl::string_view kEndpointNames[] = {"completions", "chat_completions", "models"};

}  // namespace

RequestFields ScanRequestFields(absl::string_view body) {
  return FieldScanner(body).Scan().value_or(RequestFields{});
}

// service::ReadConfigFile, and InvalidArgument naming `key` and the path when the file is blank: a
// PEM file or a token must have content.
absl::StatusOr<std::string> ReadNonEmptyFile(absl::string_view key, const std::string& path) {
  absl::StatusOr<std::string> text = service::ReadConfigFile(key, path);
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
  absl::StatusOr<std::string> ca =
      ReadNonEmptyFile("planner_tls_ca_file", config.planner_tls_ca_file);
  if (!ca.ok()) return ca.status();
  ssl.pem_root_certs = *std::move(ca);
  if (!config.planner_tls_cert_file.empty()) {
    absl::StatusOr<std::string> cert =
        ReadNonEmptyFile("planner_tls_cert_file", config.planner_tls_cert_file);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key =
        ReadNonEmptyFile("planner_tls_key_file", config.planner_tls_key_file);
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *std::move(cert);
    ssl.pem_private_key = *std::move(key);
  }
  return grpc::SslCredentials(ssl);
}

std::string ErrorBody(absl::string_view message, absl::string_view type, int code) {
  std::string out = "{\"error\":{\"message\":";
  AppendJsonString(out, message);
  out += ",\"type\":";
  AppendJsonString(out, type);
  absl::StrAppend(&out, ",\"param\":null,\"code\":", code, "}}");
  return out;
}

// Per upstream: idle keep-alive connections and failure accounting.
struct Gateway::Destination {
  std::mutex mu;
  std::vector<std::unique_ptr<httplib::Client>> idle;  // guarded by mu
  std::atomic<uint32_t> consecutive_failures{0};
  std::atomic<uint64_t> errors{0};
  std::atomic<uint64_t> marked_down{0};
  std::atomic<double> reported_load{0};  // the last scraped load_metric (0 when it failed)
  std::atomic<uint64_t> scrape_failures{0};
};

// One streaming response: the upstream is read on `reader` and its chunks queued for the HTTP
// worker that writes the downstream response.
struct Gateway::Stream {
  std::mutex mu;
  std::condition_variable cv;
  bool headers_ready = false;  // guarded by mu, as is everything below up to `reader`
  bool finished = false;
  bool cancelled = false;
  bool ok = false;
  int status = 0;
  httplib::Headers headers;
  std::deque<std::string> chunks;
  httplib::Error error = httplib::Error::Success;
  std::unique_ptr<httplib::Client> client;  // set before `reader` starts
  std::thread reader;
};

Gateway::Gateway(const GatewayConfig& config)
    : config_(config),
      random_(static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count())),
      router_({.destination_count = static_cast<uint32_t>(config.upstreams.size()),
               .dispatch = config.policy == "cacheroute-paper" ? dataplane::DispatchOptions::Paper()
                                                               : dataplane::DispatchOptions{},
               .table_ttl = std::chrono::duration_cast<dataplane::Duration>(
                   absl::ToChronoNanoseconds(config.table_ttl)),
               .external_load_weight = config.external_load_weight},
              random_),
      destinations_(new Destination[config.upstreams.size()]) {
  const auto n = static_cast<uint32_t>(config.upstreams.size());
  if (config.policy == "flatlb") {
    policy_ = std::make_unique<dataplane::FlatLbPolicy>(random_);
  } else if (config.policy == "sticky") {
    policy_ = std::make_unique<dataplane::StickyPolicy>(n);
  } else if (config.policy == "chwbl") {
    policy_ = std::make_unique<dataplane::ChwblPolicy>(n, random_);
  } else if (config.policy == "dualmap") {
    policy_ = std::make_unique<dataplane::DualMapPolicy>(n, random_);
  } else if (config.policy == "preble") {
    policy_ = std::make_unique<dataplane::PreblePolicy>(random_);
  }
  for (const Upstream& upstream : config.upstreams) {
    addresses_.push_back(*ParseUpstreamUrl("url", upstream.url));
  }
}

absl::StatusOr<std::unique_ptr<Gateway>> Gateway::Start(const GatewayConfig& config) {
  if (absl::Status s = ValidateGatewayConfig(config); !s.ok()) return s;
  std::unique_ptr<Gateway> gateway(new Gateway(config));
  if (absl::Status s = gateway->Listen(); !s.ok()) return s;

  if (!config.planner.empty()) {
    std::vector<std::string> names;
    for (const Upstream& u : config.upstreams) names.push_back(u.name);
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
        PlannerCredentials(config);
    if (!credentials.ok()) return credentials.status();
    std::string token;
    if (!config.planner_token_file.empty()) {
      absl::StatusOr<std::string> text =
          ReadNonEmptyFile("planner_token_file", config.planner_token_file);
      if (!text.ok()) return text.status();
      token = std::string(absl::StripAsciiWhitespace(*text));
    }
    auto channel = grpc::CreateChannel(config.planner, *credentials);
    dataplane::TableSubscriberOptions table_options;
    table_options.gateway_id = config.gateway_id;
    table_options.destinations = std::move(names);
    table_options.cache_path = config.table_cache;
    table_options.bearer_token = token;
    gateway->subscriber_ = std::make_unique<dataplane::TableSubscriber>(channel, gateway->router_,
                                                                        std::move(table_options));
    if (dataplane::Status s = gateway->subscriber_->Start(); !s.ok) {
      return absl::InvalidArgumentError(absl::StrCat("table subscriber: ", s.message));
    }
    dataplane::RateReporterOptions report_options;
    report_options.gateway_id = config.gateway_id;
    report_options.interval = absl::ToChronoMilliseconds(config.report_interval);
    report_options.bearer_token = token;
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
  int port = 0;
  absl::SimpleAtoi(config_.listen.substr(colon + 1), &port);

  server_ = std::make_unique<httplib::Server>();
  const size_t threads = config_.server_threads;
  server_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  // Small writes (headers, SSE chunks) must not wait for Nagle's algorithm and delayed ACKs.
  server_->set_tcp_nodelay(true);
  server_->set_keep_alive_max_count(1'000'000);
  // Idle keep-alive connections notice stop() only between polls; httplib's Linux default (0)
  // polls once for the whole keep-alive timeout, which would hold Stop() up for 5 s.
  server_->set_idle_interval(std::chrono::milliseconds(50));
  server_->set_read_timeout(ToChrono(config_.read_timeout));
  server_->set_write_timeout(ToChrono(config_.write_timeout));
  server_->Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
    HandleCompletion(req, res, Endpoint::kCompletions);
  });
  server_->Post("/v1/chat/completions",
                [this](const httplib::Request& req, httplib::Response& res) {
                  HandleCompletion(req, res, Endpoint::kChatCompletions);
                });
  server_->Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    HandleModels(req, res);
  });
  server_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    res.set_content(RenderMetrics(), "text/plain; version=0.0.4; charset=utf-8");
  });
  server_->Get("/healthz", [this](const httplib::Request&, httplib::Response& res) {
    bool any_up = false;
    for (uint32_t d = 0; d < router_.destination_count(); ++d) any_up |= router_.loads().Up(d);
    res.status = any_up ? 200 : 503;
    res.set_content(any_up ? "ok\n" : "no upstream is up\n", "text/plain");
  });

  if (port == 0) {
    port_ = server_->bind_to_any_port(host);
  } else {
    port_ = server_->bind_to_port(host, port) ? port : -1;
  }
  if (port_ <= 0) {
    return absl::UnavailableError(
        absl::StrCat("listen: cannot bind \"", config_.listen, "\" (address in use?)"));
  }
  server_thread_ = service::ListenInBackground(*server_);
  return absl::OkStatus();
}

Gateway::~Gateway() { Stop(); }

void Gateway::Stop() {
  {
    std::lock_guard<std::mutex> lock(stop_mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (server_ != nullptr) server_->stop();
  if (server_thread_.joinable()) server_thread_.join();
  if (prober_thread_.joinable()) prober_thread_.join();
  if (scraper_thread_.joinable()) scraper_thread_.join();
  if (subscriber_ != nullptr) subscriber_->Stop();
  if (reporter_ != nullptr) reporter_->Stop();
}

uint32_t Gateway::DestinationIndex(absl::string_view name) const {
  for (uint32_t d = 0; d < config_.upstreams.size(); ++d) {
    if (config_.upstreams[d].name == name) return d;
  }
  return dataplane::kNoDestination;
}

std::optional<dataplane::TableSubscriberStats> Gateway::SubscriberStats() const {
  if (subscriber_ == nullptr) return std::nullopt;
  return subscriber_->Stats();
}

std::optional<dataplane::RateReporterStats> Gateway::ReporterStats() const {
  if (reporter_ == nullptr) return std::nullopt;
  return reporter_->Stats();
}

dataplane::InFlight Gateway::Route(const std::optional<std::string>& key) {
  if (!key.has_value()) {
    picks_[kNoKeyPick].fetch_add(1, std::memory_order_relaxed);
    return router_.Track({dataplane::PowerOfTwoChoices(router_.loads(), random_), false,
                          dataplane::Reason::kPolicy});
  }
  const uint64_t key_id = dataplane::KeyId(*key);
  recorder_.Record(key_id);
  dataplane::InFlight in_flight = policy_ == nullptr
                                      ? router_.Pick(key_id, clock_.Now())
                                      : router_.Track(policy_->Pick(key_id, router_.loads()));
  picks_[static_cast<int>(in_flight.reason())].fetch_add(1, std::memory_order_relaxed);
  return in_flight;
}

void Gateway::HandleCompletion(const httplib::Request& request, httplib::Response& response,
                               Endpoint endpoint) {
  const SteadyTime start = std::chrono::steady_clock::now();
  const RequestFields fields = ScanRequestFields(request.body);
  std::optional<std::string> key;
  if (request.has_header(config_.key_header.c_str())) {
    key = request.get_header_value(config_.key_header.c_str());
  } else {
    key = fields.user;
  }
  dataplane::InFlight in_flight = Route(key);
  if (!in_flight.ok()) {
    response.status = 503;
    response.set_content(ErrorBody("no upstream is up", "service_unavailable", 503),
                         "application/json");
    Finish(endpoint, response.status, start);
    return;
  }
  const uint32_t d = in_flight.destination();
  response.set_header("X-CacheRoute-Destination", config_.upstreams[d].name);
  response.set_header("X-CacheRoute-Planned", in_flight.planned() ? "1" : "0");
  if (fields.stream) {
    ForwardStream(d, request, response, std::move(in_flight), endpoint, start);
    return;
  }
  ForwardUnary(d, request, response);
  in_flight.Release();
  Finish(endpoint, response.status, start);
}

void Gateway::HandleModels(const httplib::Request& request, httplib::Response& response) {
  const SteadyTime start = std::chrono::steady_clock::now();
  dataplane::InFlight in_flight =
      router_.Track({dataplane::RandomUpDestination(router_.loads(), random_), false,
                     dataplane::Reason::kPolicy});
  if (!in_flight.ok()) {
    response.status = 503;
    response.set_content(ErrorBody("no upstream is up", "service_unavailable", 503),
                         "application/json");
  } else {
    response.set_header("X-CacheRoute-Destination",
                        config_.upstreams[in_flight.destination()].name);
    response.set_header("X-CacheRoute-Planned", "0");
    ForwardUnary(in_flight.destination(), request, response);
  }
  Finish(Endpoint::kModels, response.status, start);
}

bool Gateway::ForwardUnary(uint32_t d, const httplib::Request& request,
                           httplib::Response& response) {
  std::unique_ptr<httplib::Client> client = AcquireClient(d);
  httplib::Request upstream = UpstreamRequest(request);
  httplib::Response answer;
  httplib::Error error = httplib::Error::Success;
  if (!client->send(upstream, answer, error)) {
    RecordFailure(d, DescribeError(error));
    response.status = 502;
    response.set_content(
        ErrorBody(absl::StrCat("upstream ", config_.upstreams[d].name, " (",
                               config_.upstreams[d].url, ") failed: ", DescribeError(error)),
                  "upstream_error", 502),
        "application/json");
    return false;  // the client's connection is in an unknown state: dropped with it
  }
  ReleaseClient(d, std::move(client));
  RecordSuccess(d);
  response.status = answer.status;
  CopyResponseHeaders(answer.headers, response);
  response.set_content(std::move(answer.body), ContentType(answer.headers, "application/json"));
  return true;
}

void Gateway::ForwardStream(uint32_t d, const httplib::Request& request,
                            httplib::Response& response, dataplane::InFlight in_flight,
                            Endpoint endpoint, SteadyTime start) {
  auto stream = std::make_shared<Stream>();
  stream->client = AcquireClient(d);
  httplib::Request upstream = UpstreamRequest(request);
  upstream.response_handler = [stream](const httplib::Response& answer) {
    std::lock_guard<std::mutex> lock(stream->mu);
    stream->status = answer.status;
    stream->headers = answer.headers;
    stream->headers_ready = true;
    stream->cv.notify_all();
    return !stream->cancelled;
  };
  upstream.content_receiver = [stream](const char* data, size_t size, uint64_t, uint64_t) {
    std::lock_guard<std::mutex> lock(stream->mu);
    if (stream->cancelled) return false;
    stream->chunks.emplace_back(data, size);
    stream->cv.notify_all();
    return true;
  };
  // The reader thread touches only `stream` (its own shared_ptr keeps it alive).
  stream->reader = std::thread([stream, upstream = std::move(upstream)]() mutable {
    httplib::Response answer;
    httplib::Error error = httplib::Error::Success;
    const bool ok = stream->client->send(upstream, answer, error);
    std::lock_guard<std::mutex> lock(stream->mu);
    stream->ok = ok;
    stream->error = error;
    stream->finished = true;
    stream->cv.notify_all();
  });

  bool headers_ready;
  {
    std::unique_lock<std::mutex> lock(stream->mu);
    stream->cv.wait(lock, [&] { return stream->headers_ready || stream->finished; });
    headers_ready = stream->headers_ready;
  }
  if (!headers_ready) {  // never reached the upstream, or it closed without answering
    stream->reader.join();
    const std::string error = DescribeError(stream->error);
    RecordFailure(d, error);
    response.status = 502;
    response.set_content(ErrorBody(absl::StrCat("upstream ", config_.upstreams[d].name, " (",
                                                config_.upstreams[d].url, ") failed: ", error),
                                   "upstream_error", 502),
                         "application/json");
    in_flight.Release();
    Finish(endpoint, response.status, start);
    return;
  }

  response.status = stream->status;
  CopyResponseHeaders(stream->headers, response);
  // Called from the worker thread until it calls sink.done() or returns false (which drops the
  // downstream connection without the final chunk, so the client sees the stream broke).
  auto provider = [stream](size_t, httplib::DataSink& sink) {
    for (;;) {
      std::deque<std::string> chunks;
      bool finished;
      bool ok;
      {
        std::unique_lock<std::mutex> lock(stream->mu);
        stream->cv.wait(lock, [&] { return !stream->chunks.empty() || stream->finished; });
        chunks.swap(stream->chunks);
        finished = stream->finished;
        ok = stream->ok;
      }
      for (const std::string& chunk : chunks) {
        if (!sink.write(chunk.data(), chunk.size())) return false;
      }
      if (finished) {
        if (!ok) return false;
        sink.done();
        return true;
      }
    }
  };
  // Runs when the response is destroyed, written or not: ends the upstream read, the in-flight
  // count and the latency measurement.
  auto in_flight_holder = std::make_shared<dataplane::InFlight>(std::move(in_flight));
  auto releaser = [this, stream, in_flight_holder, d, endpoint, start,
                   status = stream->status](bool) {
    bool ok;
    {
      std::lock_guard<std::mutex> lock(stream->mu);
      stream->cancelled = !stream->finished;
    }
    stream->client->stop();  // unblocks a read of an upstream that is still generating
    stream->reader.join();
    {
      std::lock_guard<std::mutex> lock(stream->mu);
      ok = stream->ok || stream->cancelled;  // a client that hung up is not the upstream's fault
    }
    if (ok) {
      RecordSuccess(d);
    } else {
      RecordFailure(d, DescribeError(stream->error));
    }
    if (stream->ok) ReleaseClient(d, std::move(stream->client));
    in_flight_holder->Release();
    Finish(endpoint, status, start);
  };
  response.set_chunked_content_provider(ContentType(stream->headers, "text/event-stream"),
                                        std::move(provider), std::move(releaser));
}

std::unique_ptr<httplib::Client> Gateway::AcquireClient(uint32_t d) {
  Destination& destination = destinations_[d];
  {
    std::lock_guard<std::mutex> lock(destination.mu);
    if (!destination.idle.empty()) {
      std::unique_ptr<httplib::Client> client = std::move(destination.idle.back());
      destination.idle.pop_back();
      return client;
    }
  }
  auto client = std::make_unique<httplib::Client>(addresses_[d].host, addresses_[d].port);
  client->set_keep_alive(true);
  client->set_tcp_nodelay(true);
  const auto [connect_s, connect_us] = SecondsAndMicros(ToChrono(config_.connect_timeout));
  client->set_connection_timeout(connect_s, connect_us);
  const auto [read_s, read_us] = SecondsAndMicros(ToChrono(config_.read_timeout));
  client->set_read_timeout(read_s, read_us);
  const auto [write_s, write_us] = SecondsAndMicros(ToChrono(config_.write_timeout));
  client->set_write_timeout(write_s, write_us);
  return client;
}

void Gateway::ReleaseClient(uint32_t d, std::unique_ptr<httplib::Client> client) {
  // Bounded by the worker count: at most one client per worker is ever out at a time.
  Destination& destination = destinations_[d];
  std::lock_guard<std::mutex> lock(destination.mu);
  destination.idle.push_back(std::move(client));
}

void Gateway::RecordSuccess(uint32_t d) {
  destinations_[d].consecutive_failures.store(0, std::memory_order_relaxed);
}

void Gateway::RecordFailure(uint32_t d, absl::string_view error) {
  Destination& destination = destinations_[d];
  destination.errors.fetch_add(1, std::memory_order_relaxed);
  const uint32_t failures =
      destination.consecutive_failures.fetch_add(1, std::memory_order_relaxed) + 1;
  // Exactly one request crosses the threshold, so the destination is marked down (and logged)
  // once per outage.
  if (failures == config_.failure_threshold) {
    router_.MarkDown(d);
    destination.marked_down.fetch_add(1, std::memory_order_relaxed);
    Log("warning", "destination_down",
        {{"destination", config_.upstreams[d].name},
         {"url", config_.upstreams[d].url},
         {"consecutive_failures", absl::StrCat(failures)},
         {"error", absl::StrCat("\"", error, "\"")}});
  }
}

void Gateway::Finish(Endpoint endpoint, int status, SteadyTime start) {
  const int status_class = std::clamp(status / 100, 1, 5) - 1;
  requests_[static_cast<int>(endpoint) * kStatusClasses + status_class].fetch_add(
      1, std::memory_order_relaxed);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  const double seconds = std::chrono::duration<double>(elapsed).count();
  const size_t bucket = std::lower_bound(kLatencyBuckets.begin(), kLatencyBuckets.end(), seconds) -
                        kLatencyBuckets.begin();
  latency_buckets_[bucket].fetch_add(1, std::memory_order_relaxed);
  latency_sum_ns_.fetch_add(
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(elapsed).count()),
      std::memory_order_relaxed);
}

void Gateway::RunProber() {
  const auto interval = ToChrono(config_.probe_interval);
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(stop_mu_);
      if (stop_cv_.wait_for(lock, interval, [this] { return stopping_; })) return;
    }
    for (uint32_t d = 0; d < router_.destination_count(); ++d) {
      if (router_.loads().Up(d)) continue;
      httplib::Client client(addresses_[d].host, addresses_[d].port);
      const auto [connect_s, connect_us] = SecondsAndMicros(ToChrono(config_.connect_timeout));
      client.set_connection_timeout(connect_s, connect_us);
      client.set_read_timeout(connect_s, connect_us);
      httplib::Result result = client.Get("/health");
      if (result && result->status == 200) {
        destinations_[d].consecutive_failures.store(0, std::memory_order_relaxed);
        router_.MarkUp(d);
        Log("info", "destination_up",
            {{"destination", config_.upstreams[d].name},
             {"url", config_.upstreams[d].url},
             {"health_status", absl::StrCat(result->status)}});
      }
    }
  }
}

void Gateway::ScrapeLoads() {
  const auto [connect_s, connect_us] = SecondsAndMicros(ToChrono(config_.connect_timeout));
  for (uint32_t d = 0; d < router_.destination_count(); ++d) {
    if (!router_.loads().Up(d)) continue;
    httplib::Client client(addresses_[d].host, addresses_[d].port);
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
            {{"destination", config_.upstreams[d].name},
             {"url", config_.upstreams[d].url},
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
  const auto interval = ToChrono(config_.load_scrape_interval);
  for (;;) {
    ScrapeLoads();
    std::unique_lock<std::mutex> lock(stop_mu_);
    if (stop_cv_.wait_for(lock, interval, [this] { return stopping_; })) return;
  }
}

std::string Gateway::RenderMetrics() {
  constexpr absl::string_view kPrefix = "cacheroute_gateway_";
  std::string out;
  const auto family = [&](absl::string_view name, absl::string_view type, absl::string_view help) {
    absl::StrAppend(&out, "# HELP ", kPrefix, name, " ", help, "\n# TYPE ", kPrefix, name, " ",
                    type, "\n");
  };
  const auto sample = [&](absl::string_view name, double value, absl::string_view labels = "") {
    absl::StrAppend(&out, kPrefix, name, labels.empty() ? "" : "{", labels,
                    labels.empty() ? "" : "}", " ", Number(value), "\n");
  };
  const auto destination_label = [&](uint32_t d) {
    return absl::StrCat("destination=\"", LabelValue(config_.upstreams[d].name), "\"");
  };
  const dataplane::RouterStats stats = router_.Stats(clock_.Now());

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
         "set_down, not_admitted), policy (other policies), no_key.");
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
    for (uint32_t d = 0; d < config_.upstreams.size(); ++d) {
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
                  "Connection failures and timeouts towards each destination.",
                  [&](uint32_t d) { return relaxed(destinations_[d].errors); });
  per_destination("destination_marked_down_total", "counter",
                  "Times each destination was marked down after failure_threshold failures.",
                  [&](uint32_t d) { return relaxed(destinations_[d].marked_down); });
  per_destination("reported_load", "gauge",
                  "The load_metric each destination last reported (load_scrape_interval; 0 when "
                  "off or the scrape failed).",
                  [&](uint32_t d) { return relaxed(destinations_[d].reported_load); });
  per_destination("load_scrape_failures_total", "counter",
                  "Scrapes of a destination's /metrics that failed or lacked load_metric.",
                  [&](uint32_t d) { return relaxed(destinations_[d].scrape_failures); });
  family("request_duration_seconds", "histogram",
         "Time from receiving a request to the end of its response (streams: the last chunk).");
  uint64_t cumulative = 0;
  for (size_t b = 0; b <= kLatencyBuckets.size(); ++b) {
    cumulative += latency_buckets_[b].load(std::memory_order_relaxed);
    const std::string le = b == kLatencyBuckets.size() ? "+Inf" : Number(kLatencyBuckets[b]);
    sample("request_duration_seconds_bucket", static_cast<double>(cumulative),
           absl::StrCat("le=\"", le, "\""));
  }
  sample("request_duration_seconds_sum",
         static_cast<double>(latency_sum_ns_.load(std::memory_order_relaxed)) * 1e-9);
  sample("request_duration_seconds_count", static_cast<double>(cumulative));

  family("planner_connected", "gauge", "1 while the table stream to the planner is open.");
  const std::optional<dataplane::TableSubscriberStats> subscriber = SubscriberStats();
  sample("planner_connected", subscriber && subscriber->connected ? 1 : 0);
  const std::optional<dataplane::RateReporterStats> reporter = ReporterStats();
  family("rate_reports_total", "counter", "Rate reports the planner accepted.");
  sample("rate_reports_total", reporter ? static_cast<double>(reporter->reports_sent) : 0);
  family("rate_report_failures_total", "counter", "Rate report RPCs that failed (retried).");
  sample("rate_report_failures_total",
         reporter ? static_cast<double>(reporter->failed_attempts) : 0);
  return out;
}

}  // namespace cacheroute::gateway
