// KubeApiServer, a Kubernetes API server double for tests and benchmarks on a loopback port (cpp-httplib) that
// serves pods (/api/v1/namespaces/NS/pods) and GIE InferencePools
// (/apis/inference.networking.k8s.io/v1/namespaces/NS/inferencepools) the way the real one does
// ("Kubernetes API Concepts"): a list answers {"items": [...], "metadata": {"resourceVersion"}};
// `?watch=1&resourceVersion=RV` streams, chunked, one JSON event per line, every change after RV
// (ADDED, MODIFIED, DELETED; BOOKMARK when asked), ending after timeoutSeconds. labelSelector
// (k=v,...) and fieldSelector (metadata.name=N) filter both. Every change takes the next
// resourceVersion; Compact() forgets the history, so a watch from before it gets 410 Gone (an
// HTTP 410 Status, or with gone_as_event a 200 stream whose one event is an ERROR with code 410).
//
// Faults: FailNext(n, status) answers the next n requests with `status`; DropWatches() closes
// every open watch mid-stream (no last chunk); SendGarbage() writes a line that is not JSON on
// every open watch; set_delay() delays every answer; RequireToken() answers 401 without
// `Authorization: Bearer TOKEN`. With a certificate and key it serves HTTPS (a TU that defines
// CPPHTTPLIB_OPENSSL_SUPPORT first).
//
// Usage:
//   KubeApiServer api;                          // serving from here on (ok() tells)
//   api.SetPool("ns", "pool", {{"app", "vllm"}}, {8000});
//   api.SetPod("ns", "p0", {{"app", "vllm"}}, "10.0.0.1", /*ready=*/true);
//   config.kube_api_server = api.url();
//
// Thread-safe. Usable without Catch (cacheroute-membership-bench runs it).
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"

namespace cacheroute::eval {

class KubeApiServer {
 public:
  using Labels = std::map<std::string, std::string>;

  KubeApiServer() : KubeApiServer(std::make_unique<httplib::Server>(), false) {}
#ifdef CPPHTTPLIB_OPENSSL_SUPPORT
  // HTTPS with this certificate and key (PEM files), as a real API server serves: for a TU that
  // defines CPPHTTPLIB_OPENSSL_SUPPORT before including this header (and links OpenSSL).
  KubeApiServer(const std::string& cert_file, const std::string& key_file)
      : KubeApiServer(std::make_unique<httplib::SSLServer>(cert_file.c_str(), key_file.c_str()),
                      true) {}
#endif
  ~KubeApiServer() {
    closing_ = true;
    changed_.notify_all();
    server_->stop();
    if (thread_.joinable()) thread_.join();
  }
  KubeApiServer(const KubeApiServer&) = delete;
  KubeApiServer& operator=(const KubeApiServer&) = delete;

  bool ok() const { return port_ > 0 && server_->is_running(); }
  std::string url() const { return absl::StrCat(tls_ ? "https" : "http", "://127.0.0.1:", port_); }

  // ---- Objects: each call is one change (ADDED, MODIFIED or DELETED). ----
  void SetPool(const std::string& ns, const std::string& name, const Labels& match_labels,
               const std::vector<int>& ports) {
    nlohmann::json pool = {
        {"apiVersion", "inference.networking.k8s.io/v1"},
        {"kind", "InferencePool"},
        {"metadata", {{"name", name}, {"namespace", ns}}},
        {"spec", {{"selector", {{"matchLabels", match_labels}}}, {"targetPorts", nlohmann::json::array()}}}};
    for (int port : ports) pool["spec"]["targetPorts"].push_back({{"number", port}});
    Put("inferencepools", ns, name, std::move(pool));
  }
  // A pool object as given (for pools with a bad spec).
  void SetPoolObject(const std::string& ns, const std::string& name, nlohmann::json pool) {
    pool["metadata"]["name"] = name;
    pool["metadata"]["namespace"] = ns;
    Put("inferencepools", ns, name, std::move(pool));
  }
  void DeletePool(const std::string& ns, const std::string& name) {
    Delete("inferencepools", ns, name);
  }
  void SetPod(const std::string& ns, const std::string& name, const Labels& labels,
              const std::string& ip, bool ready, bool deleting = false) {
    nlohmann::json pod = {{"apiVersion", "v1"},
                          {"kind", "Pod"},
                          {"metadata", {{"name", name}, {"namespace", ns}, {"labels", labels}}},
                          {"status",
                           {{"phase", "Running"},
                            {"conditions",
                             {{{"type", "PodScheduled"}, {"status", "True"}},
                              {{"type", "Ready"}, {"status", ready ? "True" : "False"}}}}}}};
    if (!ip.empty()) pod["status"]["podIP"] = ip;
    if (deleting) pod["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z";
    Put("pods", ns, name, std::move(pod));
  }
  void DeletePod(const std::string& ns, const std::string& name) { Delete("pods", ns, name); }

  // A BOOKMARK at the current resourceVersion to every open watch (of any kind).
  void Bookmark() { Append("", "", "BOOKMARK", nlohmann::json::object()); }
  // Forgets the history: a watch from a resourceVersion before now gets 410 Gone.
  void Compact() {
    std::lock_guard<std::mutex> lock(mu_);
    compacted_ = version_;
  }
  void set_gone_as_event(bool v) {
    std::lock_guard<std::mutex> lock(mu_);
    gone_as_event_ = v;
  }

  // ---- Faults. ----
  void FailNext(int n, int status) {
    std::lock_guard<std::mutex> lock(mu_);
    fail_count_ = n;
    fail_status_ = status;
  }
  void DropWatches() {
    std::lock_guard<std::mutex> lock(mu_);
    ++drops_;
    changed_.notify_all();
  }
  void SendGarbage() {
    std::lock_guard<std::mutex> lock(mu_);
    ++garbage_;
    changed_.notify_all();
  }
  void set_delay(std::chrono::milliseconds delay) {
    std::lock_guard<std::mutex> lock(mu_);
    delay_ = delay;
  }
  void RequireToken(const std::string& token) {
    std::lock_guard<std::mutex> lock(mu_);
    token_ = token;
  }

  // ---- What was asked. ----
  int lists(const std::string& kind) {
    std::lock_guard<std::mutex> lock(mu_);
    return lists_[kind];
  }
  int watches(const std::string& kind) {
    std::lock_guard<std::mutex> lock(mu_);
    return watches_[kind];
  }
  int open_watches() const { return open_watches_.load(); }
  // The query of the last watch of `kind` (its parameters: resourceVersion, labelSelector, ...).
  std::map<std::string, std::string> last_watch(const std::string& kind) {
    std::lock_guard<std::mutex> lock(mu_);
    return last_watch_[kind];
  }
  uint64_t resource_version() {
    std::lock_guard<std::mutex> lock(mu_);
    return version_;
  }

 private:
  KubeApiServer(std::unique_ptr<httplib::Server> server, bool tls)
      : server_(std::move(server)), tls_(tls) {
    server_->set_keep_alive_max_count(1);
    // A watch holds its thread until it ends: room for many (a client that went away is only
    // noticed at the next write).
    server_->new_task_queue = [] { return new httplib::ThreadPool(64); };
    server_->Get(R"(/api/v1/namespaces/([^/]+)/pods)",
                 [this](const httplib::Request& req, httplib::Response& res) {
                   Serve("pods", req, res);
                 });
    server_->Get(R"(/apis/inference\.networking\.k8s\.io/v1/namespaces/([^/]+)/inferencepools)",
                 [this](const httplib::Request& req, httplib::Response& res) {
                   Serve("inferencepools", req, res);
                 });
    if (!server_->is_valid()) return;  // an unreadable certificate or key: ok() says false
    port_ = server_->bind_to_any_port("127.0.0.1");
    if (port_ > 0) thread_ = std::thread([this] { server_->listen_after_bind(); });
    for (int i = 0; i < 2000 && port_ > 0 && !server_->is_running(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  struct Event {
    uint64_t version;
    std::string kind, ns, type;  // kind "" : every kind
    nlohmann::json object;
    nlohmann::json previous;  // MODIFIED: the object before (null otherwise)
  };
  using Key = std::tuple<std::string, std::string, std::string>;  // kind, namespace, name

  void Put(const std::string& kind, const std::string& ns, const std::string& name,
           nlohmann::json object) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = objects_.find({kind, ns, name});
    nlohmann::json previous = it == objects_.end() ? nlohmann::json() : it->second;
    AppendLocked(kind, ns, it == objects_.end() ? "ADDED" : "MODIFIED", std::move(object), name,
                 std::move(previous));
  }
  void Delete(const std::string& kind, const std::string& ns, const std::string& name) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = objects_.find({kind, ns, name});
    if (it == objects_.end()) return;
    nlohmann::json last = it->second;
    objects_.erase(it);
    AppendLocked(kind, ns, "DELETED", std::move(last), "");
  }
  void Append(const std::string& kind, const std::string& ns, const std::string& type,
              nlohmann::json object) {
    std::lock_guard<std::mutex> lock(mu_);
    AppendLocked(kind, ns, type, std::move(object), "");
  }
  // name non-empty: the object is stored under it.
  void AppendLocked(const std::string& kind, const std::string& ns, const std::string& type,
                    nlohmann::json object, const std::string& name,
                    nlohmann::json previous = nlohmann::json()) {
    ++version_;
    object["metadata"]["resourceVersion"] = std::to_string(version_);
    if (!name.empty()) objects_[{kind, ns, name}] = object;
    events_.push_back({version_, kind, ns, type, std::move(object), std::move(previous)});
    changed_.notify_all();
  }

  static bool Matches(const nlohmann::json& object, const std::string& label_selector,
                      const std::string& field_selector) {
    for (absl::string_view term : absl::StrSplit(label_selector, ',', absl::SkipEmpty())) {
      const std::vector<std::string> kv = absl::StrSplit(term, absl::MaxSplits('=', 1));
      const nlohmann::json& labels = object["metadata"].value("labels", nlohmann::json::object());
      if (kv.size() != 2 || labels.value(kv[0], std::string("\x01")) != kv[1]) return false;
    }
    if (!field_selector.empty()) {
      const std::string wanted = "metadata.name=";
      if (field_selector.rfind(wanted, 0) != 0) return false;
      return object["metadata"].value("name", "") == field_selector.substr(wanted.size());
    }
    return true;
  }

  static void StatusBody(httplib::Response& res, int code, const std::string& reason,
                         const std::string& message) {
    res.status = code;
    res.set_content(nlohmann::json({{"kind", "Status"},
                                    {"apiVersion", "v1"},
                                    {"status", "Failure"},
                                    {"reason", reason},
                                    {"message", message},
                                    {"code", code}})
                        .dump(),
                    "application/json");
  }

  void Serve(const std::string& kind, const httplib::Request& req, httplib::Response& res) {
    const std::string ns = req.matches[1];
    std::chrono::milliseconds delay{0};
    const bool watch = req.get_param_value("watch") == "1" || req.get_param_value("watch") == "true";
    const std::string labels = req.get_param_value("labelSelector");
    const std::string fields = req.get_param_value("fieldSelector");
    uint64_t from = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      delay = delay_;
      ++(watch ? watches_ : lists_)[kind];
      if (watch) {
        auto& last = last_watch_[kind];
        last.clear();
        for (const auto& [k, v] : req.params) last[k] = v;
      }
    }
    if (delay.count() > 0) std::this_thread::sleep_for(delay);
    std::unique_lock<std::mutex> lock(mu_);
    if (!token_.empty() && req.get_header_value("Authorization") != "Bearer " + token_) {
      StatusBody(res, 401, "Unauthorized", "Unauthorized");
      return;
    }
    if (fail_count_ > 0) {
      --fail_count_;
      StatusBody(res, fail_status_, "InternalError", "injected failure");
      return;
    }
    if (!watch) {
      nlohmann::json list = {{"kind", kind == "pods" ? "PodList" : "InferencePoolList"},
                             {"metadata", {{"resourceVersion", std::to_string(version_)}}},
                             {"items", nlohmann::json::array()}};
      for (const auto& [key, object] : objects_) {
        if (std::get<0>(key) == kind && std::get<1>(key) == ns && Matches(object, labels, fields)) {
          list["items"].push_back(object);
        }
      }
      res.set_content(list.dump(), "application/json");
      return;
    }
    if (!absl::SimpleAtoi(req.get_param_value("resourceVersion"), &from)) from = version_;
    if (from < compacted_) {
      const std::string message =
          absl::StrCat("too old resource version: ", from, " (", compacted_, ")");
      if (!gone_as_event_) {
        StatusBody(res, 410, "Expired", message);
        return;
      }
      nlohmann::json error = {{"type", "ERROR"},
                              {"object",
                               {{"kind", "Status"},
                                {"status", "Failure"},
                                {"reason", "Expired"},
                                {"message", message},
                                {"code", 410}}}};
      res.set_content(error.dump() + "\n", "application/json");
      return;
    }
    int timeout_seconds = 0;
    if (!absl::SimpleAtoi(req.get_param_value("timeoutSeconds"), &timeout_seconds)) {
      timeout_seconds = 1800;
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_seconds);
    const uint64_t drops = drops_;
    const uint64_t garbage = garbage_;
    lock.unlock();
    res.set_chunked_content_provider(
        "application/json",
        [this, kind, ns, labels, fields, cursor = from, drops, garbage_seen = garbage, deadline, opened = false](
            size_t, httplib::DataSink& sink) mutable {
          if (!opened) {
            opened = true;
            ++open_watches_;
          }
          std::string out;
          bool drop = false;
          {
            std::unique_lock<std::mutex> lock(mu_);
            changed_.wait_for(lock, std::chrono::milliseconds(20), [&] {
              return closing_ || drops_ != drops || garbage_ != garbage_seen ||
                     events_.back().version > cursor;
            });
            drop = closing_ || drops_ != drops;
            if (garbage_ != garbage_seen) {  // to the watches open now only, never replayed
              garbage_seen = garbage_;
              out += "this is not JSON {\n";
            }
            for (const Event& e : events_) {
              if (drop || e.version <= cursor) continue;
              cursor = e.version;
              if (!e.kind.empty() && (e.kind != kind || e.ns != ns)) continue;
              if (e.type == "BOOKMARK") {
                out += nlohmann::json({{"type", "BOOKMARK"},
                                       {"object",
                                        {{"kind", kind == "pods" ? "Pod" : "InferencePool"},
                                         {"metadata",
                                          {{"resourceVersion", std::to_string(e.version)}}}}}})
                           .dump() +
                       "\n";
              } else {
                // As the API server's watch cache: a modified object that starts matching the
                // selector is ADDED to this watch, one that stops matching DELETED.
                const bool now = Matches(e.object, labels, fields);
                const bool before = !e.previous.is_null() && Matches(e.previous, labels, fields);
                std::string type = e.type;
                if (type == "MODIFIED" && now != before) type = now ? "ADDED" : "DELETED";
                if (now || (type == "DELETED" && before)) {
                  out += nlohmann::json({{"type", type}, {"object", e.object}}).dump() + "\n";
                }
              }
            }
          }
          if (drop) {
            --open_watches_;
            return false;  // the connection closes without the last chunk
          }
          if (!out.empty() && !sink.write(out.data(), out.size())) {
            --open_watches_;
            return false;
          }
          if (std::chrono::steady_clock::now() >= deadline) {
            --open_watches_;
            sink.done();
          }
          return true;
        });
  }

  std::unique_ptr<httplib::Server> server_;
  const bool tls_;
  int port_ = 0;
  std::thread thread_;
  std::atomic<bool> closing_{false};
  std::atomic<int> open_watches_{0};

  std::mutex mu_;
  std::condition_variable changed_;
  uint64_t version_ = 1;  // below: guarded by mu_
  uint64_t compacted_ = 0;
  bool gone_as_event_ = false;
  std::map<Key, nlohmann::json> objects_;
  std::vector<Event> events_ = {{1, "-", "", "NONE", {}, {}}};  // never empty
  uint64_t drops_ = 0;
  uint64_t garbage_ = 0;
  int fail_count_ = 0;
  int fail_status_ = 500;
  std::chrono::milliseconds delay_{0};
  std::string token_;
  std::map<std::string, int> lists_, watches_;
  std::map<std::string, std::map<std::string, std::string>> last_watch_;
};

}  // namespace cacheroute::eval
