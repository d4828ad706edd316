// KubeClient: the few Kubernetes API requests the InferencePool membership source makes (a GET of
// a collection, and a watch of one), over Boost.Beast, plain HTTP or TLS (OpenSSL, the server's
// certificate verified against a CA bundle and the server's host name or IP address).
//
//   Get(target)             one GET; the status and the whole body (at most 256 MiB).
//   Watch(target, on_line)  one GET whose body streams (Transfer-Encoding: chunked): on_line
//                           receives each line of a 200 response as it completes (a watch event,
//                           one JSON object per line; "Kubernetes API Concepts", "Efficient
//                           detection of changes"); any other status returns with the body.
//
// Every request opens its own connection and sends `Authorization: Bearer TOKEN` with the token
// file read afresh (a projected service-account token is rotated by the kubelet) when one is
// configured. A request is cancelled when its `cancelled` predicate turns true (polled every
// 20 ms) and fails when the connection, TLS handshake or a read is idle longer than its timeout.
//
// Usage:
//   CACHEROUTE_ASSIGN_OR_RETURN(KubeApi api, KubeApiFor(config));   // overrides or in-cluster
//   CACHEROUTE_ASSIGN_OR_RETURN(std::unique_ptr<KubeClient> client, KubeClient::Create(api));
//   absl::StatusOr<KubeResponse> list = client->Get("/api/v1/namespaces/ns/pods", never);
//   client->Watch("/api/v1/namespaces/ns/pods?watch=1&resourceVersion=7", on_line, stopping);
//
// Errors: a configuration that cannot be used (a CA file that does not load, no in-cluster
// environment) is InvalidArgument naming the key; a token file that cannot be read, a failed
// connection, handshake or read, a stream that ends without its last chunk Unavailable; a
// cancelled request Cancelled. An HTTP error status is not an error here: the caller reads it.
// Thread-safety: Get and Watch may be called from several threads at once; each blocks its own.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "tools/frontend/frontend_config.h"

namespace cacheroute::frontend {

// Where and how to reach the API server, as resolved from the configuration (KubeApiFor).
struct KubeApi {
  KubeServerAddress server;
  std::string server_text;  // as configured, for messages: "https://10.96.0.1:443"
  std::string token_file;   // "": no Authorization header
  std::string ca_file;      // TLS: the CA bundle; "": the system's default CAs
  absl::Duration connect_timeout = absl::Seconds(5);  // connect and TLS handshake
  absl::Duration read_timeout = absl::Seconds(30);    // a Get's whole answer; a Watch's header
};

// What in-cluster configuration reads: the environment the kubelet gives every container and
// the service account's directory (normally kServiceAccountDir).
struct InClusterEnvironment {
  std::string service_host;  // KUBERNETES_SERVICE_HOST
  std::string service_port;  // KUBERNETES_SERVICE_PORT
  std::string service_account_dir = kServiceAccountDir;
  static InClusterEnvironment FromProcess();
};

// The API server of `config`: kube_api_server with kube_token_file and kube_ca_file when set;
// otherwise https://KUBERNETES_SERVICE_HOST:KUBERNETES_SERVICE_PORT with the service account's
// token and ca.crt (InvalidArgument naming kube_api_server when those variables are not set:
// not running in a pod). The files are not read here.
absl::StatusOr<KubeApi> KubeApiFor(const FrontendConfig& config,
                                   const InClusterEnvironment& environment);

// The namespace of the pool: inference_pool_namespace, or the service account's `namespace`
// file (InvalidArgument naming inference_pool_namespace when it cannot be read).
absl::StatusOr<std::string> PoolNamespace(const FrontendConfig& config,
                                          const InClusterEnvironment& environment);

struct KubeResponse {
  int status = 0;    // the HTTP status
  std::string body;  // Get: the body; Watch: the body of a non-200 answer ("" for a 200)
};

// True when the request should stop.
using CancelCheck = std::function<bool()>;

class KubeClient {
 public:
  // Loads the CA bundle (InvalidArgument naming kube_ca_file when it does not load).
  static absl::StatusOr<std::unique_ptr<KubeClient>> Create(const KubeApi& api);
  ~KubeClient();
  KubeClient(const KubeClient&) = delete;
  KubeClient& operator=(const KubeClient&) = delete;

  absl::StatusOr<KubeResponse> Get(const std::string& target, const CancelCheck& cancelled);

  // Streams `target`. on_line gets each line of a 200 body without its '\n' (empty lines are
  // skipped); returning false ends the request (OK). OK too when the server ends the stream
  // (its `timeoutSeconds` ran out); Unavailable when the connection drops or no byte arrives
  // for `idle_timeout` (a watch with bookmarks hears from the server about once a minute).
  absl::StatusOr<KubeResponse> Watch(const std::string& target,
                                     const std::function<bool(absl::string_view)>& on_line,
                                     const CancelCheck& cancelled, absl::Duration idle_timeout);

  const KubeApi& api() const { return api_; }

 private:
  struct Tls;
  KubeClient(KubeApi api, std::unique_ptr<Tls> tls);
  // One request; each body piece goes to `sink` (false: stop reading).
  absl::StatusOr<KubeResponse> Exchange(
      const std::string& target, const CancelCheck& cancelled, absl::Duration idle_timeout,
      const std::function<bool(int status, absl::string_view piece)>& sink);

  const KubeApi api_;
  const std::unique_ptr<Tls> tls_;  // null for http://
};

}  // namespace cacheroute::frontend
