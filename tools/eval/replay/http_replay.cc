// See http_replay.h.
#include "tools/eval/replay/http_replay.h"

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "cacheroute/dataplane/key_id.h"
#include "tools/eval/replay/envoy_filter.h"
#include "tools/eval/workload/json_line.h"

namespace cacheroute::replay {
namespace {

using Clock = std::chrono::steady_clock;
using workload::JsonValue;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

constexpr std::string_view kWords[64] = {
    "able", "about", "above", "after", "again", "air",  "all",  "also", "and",  "any",  "area",
    "back", "base",  "best",  "blue",  "book",  "both", "call", "case", "city", "cold", "come",
    "data", "day",   "deep",  "door",  "down",  "each", "east", "even", "face", "fact", "far",
    "fast", "file",  "fire",  "form",  "free",  "full", "game", "give", "good", "hand", "hard",
    "head", "help",  "high",  "home",  "idea",  "just", "keep", "kind", "land", "last", "line",
    "long", "make",  "many",  "mind",  "name",  "near", "next", "open", "over"};

// A pool of worker threads grown on demand up to `max`; each owns its HTTP clients, one per
// base URL, kept alive between requests.
class WorkerPool {
 public:
  using Clients = std::map<std::string, std::unique_ptr<httplib::Client>>;
  using Task = std::function<void(Clients&)>;

  explicit WorkerPool(size_t max) : max_(max) {}
  ~WorkerPool() { Join(); }

  void Submit(Task task) {
    std::unique_lock<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
    if (idle_ == 0 && threads_.size() < max_) {
      threads_.emplace_back([this] { Loop(); });
    } else {
      lock.unlock();
      cv_.notify_one();
    }
  }

  void Join() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
    threads_.clear();
  }

 private:
  void Loop() {
    Clients clients;
    for (;;) {
      Task task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        ++idle_;
        cv_.wait(lock, [&] { return done_ || !tasks_.empty(); });
        --idle_;
        if (tasks_.empty()) return;  // done_
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task(clients);
    }
  }

  const size_t max_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> tasks_;
  size_t idle_ = 0;
  bool done_ = false;
  std::vector<std::thread> threads_;
};

std::unique_ptr<httplib::Client> MakeClient(const std::string& url, double timeout_s) {
  auto client = std::make_unique<httplib::Client>(url);
  const auto timeout = std::chrono::duration_cast<std::chrono::microseconds>(
      std::chrono::duration<double>(timeout_s));
  client->set_connection_timeout(timeout);
  client->set_read_timeout(timeout);
  client->set_write_timeout(timeout);
  client->set_keep_alive(true);
  client->set_tcp_nodelay(true);
  return client;
}

// Reads usage from a response object into `out`; false if it has none.
bool ReadUsage(const JsonValue& v, Outcome& out) {
  const JsonValue* usage = v.Find("usage");
  if (usage == nullptr || usage->type != JsonValue::Type::kObject) return false;
  auto number = [](const JsonValue* n) { return n != nullptr ? n->AsUint64().value_or(0) : 0; };
  out.prompt_tokens = number(usage->Find("prompt_tokens"));
  out.completion_tokens = number(usage->Find("completion_tokens"));
  const JsonValue* details = usage->Find("prompt_tokens_details");
  out.cached_tokens = details != nullptr && details->type == JsonValue::Type::kObject
                          ? number(details->Find("cached_tokens"))
                          : 0;
  return true;
}

// Fills the token counts of a successful response from its body; false when it is malformed or
// carries an error event.
bool ParseBody(const std::string& body, bool stream, Outcome& out) {
  if (!stream) {
    absl::StatusOr<JsonValue> v = workload::ParseJson(body);
    return v.ok() && ReadUsage(*v, out);
  }
  bool usage = false;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find('\n', pos);
    if (end == std::string::npos) end = body.size();
    std::string_view line(body.data() + pos, end - pos);
    pos = end + 1;
    if (line.substr(0, 5) != "data:") continue;
    line.remove_prefix(5);
    while (!line.empty() && line.front() == ' ') line.remove_prefix(1);
    while (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line == "[DONE]") continue;
    absl::StatusOr<JsonValue> v = workload::ParseJson(line);
    if (!v.ok()) return false;
    if (v->Find("error") != nullptr) return false;
    if (ReadUsage(*v, out)) usage = true;
  }
  return usage;
}

// `first_chunk` runs once, when the first chunk of the response arrives (its first token when it
// streams; the whole response otherwise). `start` is when the request left the client. With a
// `filter` (an endpoint picker's ext_proc stream) the response's headers and each chunk pass
// through the picker first, as Envoy forwards them, and the picker's response headers say where
// the request went.
Outcome Send(httplib::Client& client, const std::string& body, const std::string& key,
             const HttpReplayOptions& options, Clock::time_point start, EnvoyFilter* filter,
             const std::function<void()>& first_chunk) {
  Outcome out;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = {{"Content-Type", "application/json"}, {"X-CacheRoute-Key", key}};
  req.body = body;
  std::string received;
  Clock::time_point first = Clock::time_point::min();
  bool relayed = true;  // every part the picker was sent came back
  EnvoyFilter::Headers added;
  if (filter != nullptr) {
    req.response_handler = [&](const httplib::Response& response) {
      relayed = filter->ResponseHeaders(response.status, &added);
      return relayed;
    };
  }
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    if (filter != nullptr && !filter->ResponseBody(absl::string_view(data, n), false)) {
      relayed = false;
      return false;
    }
    if (first == Clock::time_point::min()) {
      first = Clock::now();
      first_chunk();
    }
    received.append(data, n);
    return true;
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  bool sent = client.send(req, res, error);
  if (sent && filter != nullptr) {
    relayed = relayed && filter->ResponseBody("", true) && filter->Finish().ok();
    sent = relayed;
  }
  const Clock::time_point end = Clock::now();
  out.latency_s = Seconds(end - start);
  out.ttft_s =
      options.stream && first != Clock::time_point::min() ? Seconds(first - start) : out.latency_s;
  if (!sent) {
    if (!relayed) {
      out.kind = OutcomeKind::kTransportError;
    } else if (error == httplib::Error::Connection) {
      out.kind = OutcomeKind::kConnectError;
    } else if (out.latency_s >= options.timeout_s * 0.99) {
      out.kind = OutcomeKind::kTimeout;
    } else {
      out.kind = OutcomeKind::kTransportError;
    }
    return out;
  }
  out.http_status = res.status;
  if (filter != nullptr) {
    for (const auto& [name, value] : added) {
      if (name == "x-cacheroute-destination") out.via = value;
      if (name == "x-cacheroute-planned") out.planned = value == "1";
    }
  } else {
    out.via = res.get_header_value("X-CacheRoute-Destination");
    out.planned = res.get_header_value("X-CacheRoute-Planned") == "1";
  }
  if (res.status == 429) {
    out.kind = OutcomeKind::kShed;
    return out;
  }
  if (res.status < 200 || res.status >= 300) {
    out.kind = OutcomeKind::kHttpError;
    return out;
  }
  const bool is_stream = options.stream;
  if (!ParseBody(received, is_stream, out)) {
    out.kind = is_stream && received.find("\"error\"") != std::string::npos
                   ? OutcomeKind::kHttpError
                   : OutcomeKind::kTransportError;
  }
  return out;
}

// Routes request `body` through the endpoint picker `stub` and sends it where the picker said.
Outcome SendThroughPicker(WorkerPool::Clients& clients,
                          envoy::service::ext_proc::v3::ExternalProcessor::Stub& stub,
                          const std::string& body, const std::string& key,
                          const HttpReplayOptions& options,
                          const std::function<void()>& first_chunk) {
  const Clock::time_point start = Clock::now();
  EnvoyFilter filter(stub, std::chrono::seconds(static_cast<int64_t>(options.timeout_s * 10) + 1),
                     options.picker_header_value ? HeaderField::kValue : HeaderField::kRawValue);
  absl::StatusOr<std::string> endpoint =
      filter.Route({{"x-cacheroute-key", key}, {"content-length", absl::StrCat(body.size())}},
                   body);
  if (!endpoint.ok()) {
    Outcome out;
    out.latency_s = out.ttft_s = Seconds(Clock::now() - start);
    out.http_status = filter.ImmediateStatus();
    out.kind = out.http_status == 429  ? OutcomeKind::kShed
               : out.http_status != 0 ? OutcomeKind::kHttpError
                                      : OutcomeKind::kTransportError;
    return out;
  }
  const std::string url = NormalizeUrl(*endpoint);
  std::unique_ptr<httplib::Client>& client = clients[url];
  if (client == nullptr) client = MakeClient(url, options.timeout_s);
  Outcome out = Send(*client, body, key, options, start, &filter, first_chunk);
  if (out.kind != OutcomeKind::kOk && out.kind != OutcomeKind::kShed) client.reset();
  return out;
}

}  // namespace

std::string NormalizeUrl(const std::string& url) {
  std::string out = url.find("://") == std::string::npos ? "http://" + url : url;
  while (!out.empty() && out.back() == '/') out.pop_back();
  return out;
}

std::string PromptText(const workload::Request& request, uint32_t block_size, uint64_t index) {
  std::string text;
  text.reserve(static_cast<size_t>(request.input_length) * 6);
  const uint64_t bs = block_size == 0 ? 16 : block_size;
  for (uint64_t t = 0; t < request.input_length; ++t) {
    const uint64_t block = t / bs;
    // Words of a block come from its hash id (shared prefix → shared text); past the ids they
    // come from the request's index (unique).
    const uint64_t seed = block < request.hash_ids.size()
                              ? request.hash_ids[block]
                              : dataplane::Mix64(index ^ 0x5a5a5a5a5a5a5a5aULL) + block;
    const uint64_t h = dataplane::Mix64(seed ^ dataplane::Mix64(t % bs + 1));
    if (!text.empty()) text += ' ';
    text += kWords[h % 64];
  }
  return text;
}

std::string RequestBody(const workload::Request& request, uint32_t block_size, uint64_t index,
                        const HttpReplayOptions& options) {
  std::string body = "{";
  if (!options.model.empty())
    absl::StrAppend(&body, "\"model\":", workload::JsonQuote(options.model), ",");
  absl::StrAppend(&body, "\"prompt\":",
                  workload::JsonQuote(options.prompt == PromptMode::kWords
                                          ? PromptText(request, block_size, index)
                                          : std::string("x")),
                  ",\"max_tokens\":", std::max<uint32_t>(1, request.output_length),
                  ",\"ignore_eos\":true");
  if (options.stream) {
    body += ",\"stream\":true,\"stream_options\":{\"include_usage\":true}";
  } else {
    body += ",\"stream\":false";
  }
  body += ",\"cacheroute_hash_ids\":[";
  for (size_t i = 0; i < request.hash_ids.size(); ++i) {
    absl::StrAppend(&body, i == 0 ? "" : ",", request.hash_ids[i]);
  }
  absl::StrAppend(&body, "],\"cacheroute_block_size\":", block_size,
                  ",\"cacheroute_input_length\":", std::max<uint32_t>(1, request.input_length),
                  "}");
  return body;
}

std::string DiscoverModel(const std::string& url, double timeout_s) {
  std::unique_ptr<httplib::Client> client = MakeClient(url, timeout_s);
  httplib::Result res = client->Get("/v1/models");
  if (!res || res->status != 200) return "";
  absl::StatusOr<JsonValue> v = workload::ParseJson(res->body);
  if (!v.ok()) return "";
  const JsonValue* data = v->Find("data");
  if (data == nullptr || data->type != JsonValue::Type::kArray || data->items.empty()) return "";
  const JsonValue* id = data->items[0].Find("id");
  return id != nullptr && id->type == JsonValue::Type::kString ? id->text : "";
}

HttpReplayResult RunHttpReplay(const workload::Workload& workload, Dispatcher* dispatcher,
                               const HttpReplayOptions& options) {
  HttpReplayResult result;
  const size_t n = workload.requests.size();
  result.outcomes.resize(n);
  std::vector<std::string> targets;
  for (const std::string& t : options.targets) targets.push_back(NormalizeUrl(t));
  // Endpoint pickers: one channel each, shared by the workers (a channel is thread-safe).
  std::vector<std::unique_ptr<envoy::service::ext_proc::v3::ExternalProcessor::Stub>> pickers;
  for (const std::string& address : options.pickers) {
    pickers.push_back(envoy::service::ext_proc::v3::ExternalProcessor::NewStub(
        grpc::CreateChannel(address, grpc::InsecureChannelCredentials())));
  }
  const size_t fronts = pickers.empty() ? targets.size() : pickers.size();
  const uint32_t concurrency = std::max<uint32_t>(1, options.concurrency);

  std::atomic<uint32_t> open{0};
  WorkerPool pool(concurrency);
  const Clock::time_point start = Clock::now();
  for (size_t i = 0; i < n; ++i) {
    const workload::Request& request = workload.requests[i];
    // Pacing, not synchronisation: the open loop sends at the trace's times.
    std::this_thread::sleep_until(start + std::chrono::duration_cast<Clock::duration>(
                                              std::chrono::duration<double>(request.arrival_s)));
    if (open.load(std::memory_order_acquire) >= concurrency) {
      result.outcomes[i].kind = OutcomeKind::kRejected;
      continue;
    }
    Dispatcher::Ticket ticket;
    // Without a dispatcher the targets are gateways (or endpoint pickers), dealt the requests in
    // turn.
    uint32_t destination = static_cast<uint32_t>(i % fronts);
    if (dispatcher != nullptr) {
      ticket = dispatcher->Pick(request, workload.block_size);
      destination = ticket.destination;
      if (destination == dataplane::kNoDestination) {
        result.outcomes[i].kind = OutcomeKind::kRejected;
        continue;
      }
    }
    open.fetch_add(1, std::memory_order_acq_rel);
    pool.Submit([&, i, destination, ticket](WorkerPool::Clients& clients) mutable {
      const workload::Request& r = workload.requests[i];
      const std::string body = RequestBody(r, workload.block_size, i, options);
      const auto first_chunk = [&] {
        if (dispatcher != nullptr) dispatcher->FirstToken(ticket);
      };
      Outcome outcome;
      if (!pickers.empty()) {
        outcome = SendThroughPicker(clients, *pickers[destination], body, r.key, options,
                                    first_chunk);
      } else {
        std::unique_ptr<httplib::Client>& client = clients[targets[destination]];
        if (client == nullptr) client = MakeClient(targets[destination], options.timeout_s);
        outcome = Send(*client, body, r.key, options, Clock::now(), nullptr, first_chunk);
        // Reconnect next time (a 429 leaves the connection open).
        if (outcome.kind != OutcomeKind::kOk && outcome.kind != OutcomeKind::kShed) client.reset();
      }
      outcome.destination = dispatcher != nullptr ? destination : dataplane::kNoDestination;
      result.outcomes[i] = outcome;
      if (dispatcher != nullptr) dispatcher->Done(ticket, &outcome);
      open.fetch_sub(1, std::memory_order_acq_rel);
    });
  }
  pool.Join();
  result.wall_s = Seconds(Clock::now() - start);
  return result;
}

}  // namespace cacheroute::replay
