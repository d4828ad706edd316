// InferencePoolSource (inference_pool_source.h). Two threads, each a list-then-watch loop
// (ListWatch) over one collection: the pool's publishes the Selection its spec makes and bumps
// pool_generation_; the pods' waits for a Selection, and its list/watch is cancelled as soon as
// the generation moves, then starts over with the new selector.
#include "tools/frontend/membership/inference_pool_source.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "nlohmann/json.hpp"
#include "tools/frontend/membership/sources.h"

namespace cacheroute::frontend {

using json = nlohmann::json;
using Selection = InferencePoolSource::Selection;

// The collection's objects by name, as last listed and watched.
struct InferencePoolSource::Objects {
  std::map<std::string, json> by_name;
};

namespace {

constexpr char kGroupVersion[] = "inference.networking.k8s.io/v1";

std::string PoolsPath(const std::string& ns) {
  return absl::StrCat("/apis/", kGroupVersion, "/namespaces/", ns, "/inferencepools");
}
std::string PodsPath(const std::string& ns) {
  return absl::StrCat("/api/v1/namespaces/", ns, "/pods");
}

// Percent-encodes a query value (RFC 3986 unreserved characters stay).
std::string QueryEscape(absl::string_view value) {
  std::string out;
  for (const char c : value) {
    if (absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_' ||
        c == '~') {
      out.push_back(c);
    } else {
      absl::StrAppend(&out, "%", absl::string_view("0123456789ABCDEF" + ((c >> 4) & 0xF), 1),
                      absl::string_view("0123456789ABCDEF" + (c & 0xF), 1));
    }
  }
  return out;
}

std::string PoolSelector(const std::string& pool) {
  return absl::StrCat("fieldSelector=", QueryEscape(absl::StrCat("metadata.name=", pool)));
}

std::string PodSelector(const Selection& selection) {
  std::vector<std::string> terms;
  for (const auto& [key, value] : selection.match_labels) terms.push_back(key + "=" + value);
  return absl::StrCat("labelSelector=", QueryEscape(absl::StrJoin(terms, ",")));
}

// A string at `pointer` of `object`, or "".
std::string StringAt(const json& object, const char* pointer) {
  const json::json_pointer at(pointer);
  if (!object.contains(at)) return "";
  const json& value = object.at(at);
  return value.is_string() ? value.get<std::string>() : "";
}

// The pool's spec as a Selection: FailedPrecondition naming the field.
absl::StatusOr<Selection> ParseSelection(const json& pool) {
  const std::string name = StringAt(pool, "/metadata/name");
  const auto invalid = [&name](absl::string_view field, absl::string_view what) {
    // Not InvalidArgument: the pool is the cluster's, not this configuration; it is retried.
    return absl::FailedPreconditionError(
        absl::StrCat("InferencePool \"", name, "\": ", field, ": ", what));
  };
  Selection selection;
  const json::json_pointer labels_at("/spec/selector/matchLabels");
  if (!pool.contains(labels_at) || !pool.at(labels_at).is_object() ||
      pool.at(labels_at).empty()) {
    return invalid("spec.selector.matchLabels",
                   "missing or empty (it would select every pod of the namespace)");
  }
  for (const auto& [key, value] : pool.at(labels_at).items()) {
    if (!value.is_string()) {
      return invalid(absl::StrCat("spec.selector.matchLabels.", key),
                     absl::StrCat("must be a string, got ", value.dump()));
    }
    selection.match_labels[key] = value.get<std::string>();
  }
  const json::json_pointer ports_at("/spec/targetPorts");
  if (!pool.contains(ports_at) || !pool.at(ports_at).is_array() || pool.at(ports_at).empty()) {
    return invalid("spec.targetPorts", "missing or empty");
  }
  const json& ports = pool.at(ports_at);
  for (size_t i = 0; i < ports.size(); ++i) {
    const json* number = ports[i].is_object() && ports[i].contains("number")
                             ? &ports[i]["number"]
                             : nullptr;
    if (number == nullptr || !number->is_number_integer() || number->get<int64_t>() < 1 ||
        number->get<int64_t>() > 65535) {
      return invalid(absl::StrCat("spec.targetPorts[", i, "].number"),
                     absl::StrCat("must be a port from 1 to 65535, got ",
                                  number == nullptr ? "nothing" : number->dump()));
    }
    selection.ports.push_back(static_cast<int>(number->get<int64_t>()));
  }
  std::sort(selection.ports.begin(), selection.ports.end());
  selection.ports.erase(std::unique(selection.ports.begin(), selection.ports.end()),
                        selection.ports.end());
  return selection;
}

// The pod's IP when it takes requests: Ready=True, an IP, not being deleted; "" otherwise.
std::string ReadyIp(const json& pod) {
  const json::json_pointer deleting("/metadata/deletionTimestamp");
  if (pod.contains(deleting) && !pod.at(deleting).is_null()) return "";
  const std::string ip = StringAt(pod, "/status/podIP");
  const json::json_pointer conditions_at("/status/conditions");
  if (ip.empty() || !pod.contains(conditions_at) || !pod.at(conditions_at).is_array()) return "";
  for (const json& condition : pod.at(conditions_at)) {
    if (condition.is_object() && condition.value("type", json()) == "Ready") {
      return condition.value("status", json()) == "True" ? ip : "";
    }
  }
  return "";
}

// Whether the pod carries every label of the selection (the API server filters by it already; a
// pod relabelled out of it arrives as DELETED, but an older server or a proxy may send MODIFIED).
bool Selected(const json& pod, const Selection& selection) {
  const json::json_pointer labels_at("/metadata/labels");
  if (selection.match_labels.empty()) return true;
  if (!pod.contains(labels_at) || !pod.at(labels_at).is_object()) return false;
  const json& labels = pod.at(labels_at);  // keys may hold '/': looked up, not as a pointer
  for (const auto& [key, value] : selection.match_labels) {
    const auto it = labels.find(key);
    if (it == labels.end() || !it->is_string() || it->get<std::string>() != value) return false;
  }
  return true;
}

std::vector<Upstream> Members(const std::map<std::string, json>& pods, const Selection& selection,
                              size_t max_members, const std::string& pool) {
  std::vector<Upstream> members;
  for (const auto& [name, pod] : pods) {
    if (!Selected(pod, selection)) continue;
    const std::string ip = ReadyIp(pod);
    if (ip.empty()) continue;
    const bool v6 = ip.find(':') != std::string::npos;
    for (const int port : selection.ports) {
      std::string host_port = absl::StrCat(v6 ? "[" : "", ip, v6 ? "]:" : ":", port);
      members.push_back(Upstream{host_port, absl::StrCat("http://", host_port)});
    }
  }
  std::sort(members.begin(), members.end(),
            [](const Upstream& a, const Upstream& b) { return a.name < b.name; });
  members.erase(std::unique(members.begin(), members.end(),
                            [](const Upstream& a, const Upstream& b) { return a.name == b.name; }),
                members.end());
  if (members.size() > max_members) {
    base::LogEvent("warning", "membership_capped",
                   {{"pool", pool},
                    {"members", std::to_string(members.size())},
                    {"max_upstreams", std::to_string(max_members)}});
    members.resize(max_members);
  }
  return members;
}

// The message of a Kubernetes Status body, or the body's start.
std::string StatusMessage(const std::string& body) {
  const json status = json::parse(body, nullptr, false);
  if (status.is_object() && status.value("message", json()).is_string()) {
    return status["message"].get<std::string>();
  }
  return body.substr(0, 200);
}

// Unavailable for a non-200 answer, with a hint for the statuses a misconfiguration gives.
absl::Status HttpError(const std::string& what, const KubeResponse& response) {
  std::string hint;
  if (response.status == 401) hint = " (is kube_token_file the service account's token?)";
  if (response.status == 403) {
    hint = " (does the service account have a Role to get, list and watch pods and "
           "inferencepools? deploy/k8s/inference/epp-rbac.yaml)";
  }
  if (response.status == 404) {
    hint = absl::StrCat(" (does the API server serve ", kGroupVersion,
                        "? are the Gateway API Inference Extension CRDs installed?)");
  }
  return absl::UnavailableError(absl::StrCat(what, ": HTTP ", response.status, ": ",
                                             StatusMessage(response.body), hint));
}

struct Listed {
  std::map<std::string, json> by_name;
  std::string resource_version;
};

absl::StatusOr<Listed> List(KubeClient& client, const std::string& collection,
                            const std::string& selector, const CancelCheck& cancelled) {
  const std::string target = absl::StrCat(collection, "?", selector);
  CACHEROUTE_ASSIGN_OR_RETURN(KubeResponse response, client.Get(target, cancelled));
  const std::string what = absl::StrCat("listing ", target);
  if (response.status != 200) return HttpError(what, response);
  const json list = json::parse(response.body, nullptr, false);
  if (!list.is_object() || !list.contains("items") || !list["items"].is_array()) {
    return absl::UnavailableError(
        absl::StrCat(what, ": not a Kubernetes list: ", response.body.substr(0, 200)));
  }
  Listed listed;
  listed.resource_version = StringAt(list, "/metadata/resourceVersion");
  for (const json& item : list["items"]) {
    const std::string name = StringAt(item, "/metadata/name");
    if (!name.empty()) listed.by_name[name] = item;
  }
  return listed;
}

}  // namespace

absl::StatusOr<std::vector<Upstream>> ReadInferencePool(KubeClient& client,
                                                        const InferencePoolOptions& options,
                                                        const CancelCheck& cancelled) {
  CACHEROUTE_ASSIGN_OR_RETURN(Listed pools, List(client, PoolsPath(options.pool_namespace),
                                                 PoolSelector(options.pool), cancelled));
  if (pools.by_name.empty()) {
    return absl::NotFoundError(absl::StrCat("InferencePool \"", options.pool,
                                            "\" not found in namespace \"",
                                            options.pool_namespace, "\" at ",
                                            client.api().server_text));
  }
  CACHEROUTE_ASSIGN_OR_RETURN(Selection selection, ParseSelection(pools.by_name.begin()->second));
  CACHEROUTE_ASSIGN_OR_RETURN(Listed pods, List(client, PodsPath(options.pool_namespace),
                                                PodSelector(selection), cancelled));
  return Members(pods.by_name, selection, options.max_members, options.pool);
}

InferencePoolSource::InferencePoolSource(KubeClient& client, InferencePoolOptions options,
                                         StopSignal& stop)
    : client_(client), options_(std::move(options)), stop_(stop), random_(options_.seed) {}

void InferencePoolSource::Start() {
  pool_thread_ = std::thread([this] { RunPool(); });
  pods_thread_ = std::thread([this] { RunPods(); });
}

void InferencePoolSource::Join() {
  if (pool_thread_.joinable()) pool_thread_.join();
  if (pods_thread_.joinable()) {
    changed_.notify_all();
    pods_thread_.join();
  }
}

bool InferencePoolSource::Sleep(dataplane::Duration delay, const CancelCheck& cancelled) {
  const absl::Time until = absl::Now() + absl::FromChrono(delay);
  while (!cancelled()) {
    const absl::Duration left = until - absl::Now();
    if (left <= absl::ZeroDuration()) return true;
    stop_.WaitFor(std::min(left, absl::Milliseconds(20)));
  }
  return false;
}

void InferencePoolSource::ListWatch(const std::string& collection, const std::string& selector,
                                    const CancelCheck& cancelled, const OnChange& on_change) {
  Objects objects;
  std::string resource_version;
  bool need_list = true;
  uint32_t failures = 0;  // in a row: the backoff's attempt
  std::string last_error;
  const auto fail = [&](const std::string& error) {
    if (error != last_error) {
      base::LogEvent("warning", "membership_read_failed",
                     {{"pool", options_.pool}, {"error", error}});
      last_error = error;
    }
    dataplane::Duration delay = options_.backoff.Delay(failures++, random_);
    return Sleep(std::min<dataplane::Duration>(delay, options_.backoff.max), cancelled);
  };
  const int64_t timeout_seconds =
      std::max<int64_t>(1, absl::ToInt64Seconds(options_.watch_timeout));
  while (!cancelled()) {
    if (need_list) {
      absl::StatusOr<Listed> listed = List(client_, collection, selector, cancelled);
      if (absl::IsCancelled(listed.status())) return;
      if (!listed.ok()) {
        if (!fail(std::string(listed.status().message()))) return;
        continue;
      }
      objects.by_name = std::move(listed->by_name);
      resource_version = std::move(listed->resource_version);
      need_list = false;
      failures = 0;
      last_error.clear();
      on_change(objects);
    }
    bool gone = false;
    bool heard = false;
    std::string error;
    const auto on_line = [&](absl::string_view line) {
      const json event = json::parse(line, nullptr, false);
      const std::string type = event.is_object() ? event.value("type", "") : "";
      const json* object = event.is_object() && event.contains("object") && event["object"].is_object()
                               ? &event["object"]
                               : nullptr;
      if (type.empty() || object == nullptr) {
        error = absl::StrCat("watch ", collection, ": not a watch event: ",
                             line.substr(0, 200));
        return false;
      }
      if (type == "ERROR") {
        const json code = object->value("code", json());
        gone = code.is_number_integer() && code.get<int64_t>() == 410;
        error = absl::StrCat("watch ", collection, ": ERROR event: ", object->dump().substr(0, 300));
        return false;
      }
      const std::string version = StringAt(*object, "/metadata/resourceVersion");
      if (!version.empty()) resource_version = version;
      heard = true;
      if (type == "BOOKMARK") return true;
      const std::string name = StringAt(*object, "/metadata/name");
      if (type == "ADDED" || type == "MODIFIED") {
        objects.by_name[name] = *object;
      } else if (type == "DELETED") {
        objects.by_name.erase(name);
      } else {
        return true;  // a type this client does not know: skipped
      }
      on_change(objects);
      return true;
    };
    const std::string target = absl::StrCat(
        collection, "?", selector, "&watch=1&allowWatchBookmarks=true&resourceVersion=",
        QueryEscape(resource_version), "&timeoutSeconds=", timeout_seconds);
    absl::StatusOr<KubeResponse> watched = client_.Watch(
        target, on_line, cancelled, options_.watch_timeout + absl::Seconds(30));
    if (heard) failures = 0;
    if (absl::IsCancelled(watched.status())) return;
    if (watched.ok() && watched->status == 410) gone = true;
    if (gone) {  // the resourceVersion is too old: list again, at once
      relists_.fetch_add(1, std::memory_order_relaxed);
      base::LogEvent("info", "membership_relisted",
                     {{"pool", options_.pool}, {"collection", collection}});
      need_list = true;
      continue;
    }
    if (watched.ok() && watched->status != 200) {
      error = std::string(HttpError(absl::StrCat("watch ", target), *watched).message());
    } else if (!watched.ok()) {
      error = std::string(watched.status().message());
    }
    if (error.empty()) continue;  // the server ended the watch: resume from resource_version
    watch_restarts_.fetch_add(1, std::memory_order_relaxed);
    base::LogEvent("warning", "membership_watch_restarted",
                   {{"pool", options_.pool}, {"error", error}});
    if (!fail(error)) return;
  }
}

void InferencePoolSource::RunPool() {
  const CancelCheck stopping = [this] { return stop_.triggered(); };
  std::string last_problem;
  ListWatch(PoolsPath(options_.pool_namespace), PoolSelector(options_.pool), stopping,
            [&](const Objects& pools) {
              std::optional<Selection> next;
              std::string problem;
              const auto pool = pools.by_name.find(options_.pool);
              if (pool == pools.by_name.end()) {
                problem = absl::StrCat("InferencePool \"", options_.pool,
                                       "\" not found in namespace \"", options_.pool_namespace,
                                       "\"; the members stay until it exists");
              } else if (absl::StatusOr<Selection> parsed = ParseSelection(pool->second);
                         parsed.ok()) {
                next = *std::move(parsed);
              } else {
                problem = std::string(parsed.status().message());
              }
              if (!problem.empty() && problem != last_problem) {
                base::LogEvent("warning",
                               pool == pools.by_name.end() ? "inference_pool_not_found"
                                                           : "inference_pool_invalid",
                               {{"pool", options_.pool}, {"error", problem}});
              }
              last_problem = problem;
              if (!next.has_value()) return;  // keep the last usable selection
              std::lock_guard<std::mutex> lock(mu_);
              if (selection_ == next) return;
              selection_ = std::move(next);
              pool_generation_.fetch_add(1, std::memory_order_relaxed);
              changed_.notify_all();
            });
}

void InferencePoolSource::RunPods() {
  std::optional<std::vector<Upstream>> last;
  while (!stop_.triggered()) {
    Selection selection;
    uint64_t generation = 0;
    {
      std::unique_lock<std::mutex> lock(mu_);
      changed_.wait_for(lock, std::chrono::milliseconds(20),
                        [this] { return selection_.has_value(); });
      if (!selection_.has_value()) continue;
      selection = *selection_;
      generation = pool_generation_.load(std::memory_order_relaxed);
    }
    const CancelCheck moved = [this, generation] {
      return stop_.triggered() || pool_generation_.load(std::memory_order_relaxed) != generation;
    };
    ListWatch(PodsPath(options_.pool_namespace), PodSelector(selection), moved,
              [&](const Objects& pods) {
                std::vector<Upstream> members =
                    Members(pods.by_name, selection, options_.max_members, options_.pool);
                if (last.has_value() && SameMembers(*last, members)) return;
                last = members;
                if (options_.on_members) options_.on_members(std::move(members));
              });
  }
}

}  // namespace cacheroute::frontend
