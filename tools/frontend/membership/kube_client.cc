// KubeClient (kube_client.h): each request on its own io_context, driven by the calling thread in
// 20 ms slices so that a cancel check between slices can abort it (the socket is cancelled and
// the pending operation completes with operation_aborted). Bodies are read with a buffer_body
// parser, which hands over chunked and sized bodies alike, piece by piece, as they arrive.
#include "tools/frontend/membership/kube_client.h"

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>
#include <chrono>
#include <cstdlib>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "base/yaml_fields.h"

namespace cacheroute::frontend {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
namespace ssl = net::ssl;
using tcp = net::ip::tcp;

constexpr size_t kMaxBody = size_t{256} << 20;  // a Get's body; a Watch's longest line
constexpr auto kSlice = std::chrono::milliseconds(20);

std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value == nullptr ? std::string() : std::string(value);
}

// Starts an operation with a completion handler and runs `ioc` until it completes. When
// `cancelled` turns true first, cancels the socket's operations and reports operation_aborted.
template <class Start>
beast::error_code Await(net::io_context& ioc, beast::tcp_stream& socket,
                        const CancelCheck& cancelled, Start&& start) {
  bool done = false;
  beast::error_code result;
  start([&done, &result](beast::error_code ec, auto&&...) {
    result = ec;
    done = true;
  });
  bool cancelling = false;
  while (!done) {
    ioc.restart();
    ioc.run_for(kSlice);
    if (!done && !cancelling && cancelled && cancelled()) {
      socket.cancel();
      cancelling = true;
    }
  }
  return cancelling ? beast::error_code(net::error::operation_aborted) : result;
}

}  // namespace

struct KubeClient::Tls {
  ssl::context context{ssl::context::tls_client};
};

InClusterEnvironment InClusterEnvironment::FromProcess() {
  return {.service_host = Env("KUBERNETES_SERVICE_HOST"),
          .service_port = Env("KUBERNETES_SERVICE_PORT")};
}

absl::StatusOr<KubeApi> KubeApiFor(const FrontendConfig& config,
                                   const InClusterEnvironment& environment) {
  KubeApi api;
  if (!config.kube_api_server.empty()) {
    CACHEROUTE_ASSIGN_OR_RETURN(api.server,
                                ParseKubeApiServer("kube_api_server", config.kube_api_server));
    api.server_text = config.kube_api_server;
    api.token_file = config.kube_token_file;
    api.ca_file = config.kube_ca_file;
    return api;
  }
  if (environment.service_host.empty() || environment.service_port.empty()) {
    return base::yaml::Invalid(
        "kube_api_server",
        "not set, and KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT are not in the "
        "environment (not running in a Kubernetes pod): set it, e.g. \"https://HOST:6443\"");
  }
  const bool v6 = environment.service_host.find(':') != std::string::npos;
  api.server_text = absl::StrCat("https://", v6 ? "[" : "", environment.service_host,
                                 v6 ? "]" : "", ":", environment.service_port);
  CACHEROUTE_ASSIGN_OR_RETURN(api.server, ParseKubeApiServer("kube_api_server (in-cluster, from "
                                                             "KUBERNETES_SERVICE_HOST and _PORT)",
                                                             api.server_text));
  api.token_file = config.kube_token_file.empty()
                       ? absl::StrCat(environment.service_account_dir, "/token")
                       : config.kube_token_file;
  api.ca_file = config.kube_ca_file.empty()
                    ? absl::StrCat(environment.service_account_dir, "/ca.crt")
                    : config.kube_ca_file;
  return api;
}

absl::StatusOr<std::string> PoolNamespace(const FrontendConfig& config,
                                          const InClusterEnvironment& environment) {
  if (!config.inference_pool_namespace.empty()) return config.inference_pool_namespace;
  const std::string path = absl::StrCat(environment.service_account_dir, "/namespace");
  absl::StatusOr<std::string> text = ReadNonEmptyFile("inference_pool_namespace", path);
  if (!text.ok()) {
    return base::yaml::Invalid(
        "inference_pool_namespace",
        absl::StrCat("not set, and this pod's namespace cannot be read (",
                     text.status().message(), "): set it to the InferencePool's namespace"));
  }
  return std::string(absl::StripAsciiWhitespace(*text));
}

absl::StatusOr<std::unique_ptr<KubeClient>> KubeClient::Create(const KubeApi& api) {
  std::unique_ptr<Tls> tls;
  if (api.server.tls) {
    tls = std::make_unique<Tls>();
    beast::error_code ec;
    if (api.ca_file.empty()) {
      tls->context.set_default_verify_paths(ec);
    } else {
      tls->context.load_verify_file(api.ca_file, ec);
    }
    if (ec) {
      return base::yaml::Invalid(
          "kube_ca_file", absl::StrCat(base::yaml::Quote(api.ca_file.empty() ? "(system default)"
                                                                             : api.ca_file),
                                       " does not load as a PEM CA bundle: ", ec.message()));
    }
    tls->context.set_verify_mode(ssl::verify_peer);
  }
  return std::unique_ptr<KubeClient>(new KubeClient(api, std::move(tls)));
}

KubeClient::KubeClient(KubeApi api, std::unique_ptr<Tls> tls)
    : api_(std::move(api)), tls_(std::move(tls)) {}

KubeClient::~KubeClient() = default;

absl::StatusOr<KubeResponse> KubeClient::Get(const std::string& target,
                                             const CancelCheck& cancelled) {
  KubeResponse response;
  absl::StatusOr<KubeResponse> done = Exchange(
      target, cancelled, api_.read_timeout, [&response](int, absl::string_view piece) {
        if (response.body.size() + piece.size() > kMaxBody) return false;
        absl::StrAppend(&response.body, piece);
        return true;
      });
  if (!done.ok()) return done;
  if (response.body.size() >= kMaxBody) {
    return absl::UnavailableError(absl::StrCat("GET ", api_.server_text, target,
                                               ": the answer is larger than 256 MiB"));
  }
  response.status = done->status;
  return response;
}

absl::StatusOr<KubeResponse> KubeClient::Watch(
    const std::string& target, const std::function<bool(absl::string_view)>& on_line,
    const CancelCheck& cancelled, absl::Duration idle_timeout) {
  std::string partial;  // a 200's unfinished line; another status's body
  bool too_long = false;
  absl::StatusOr<KubeResponse> done =
      Exchange(target, cancelled, idle_timeout, [&](int status, absl::string_view piece) {
        if (status != 200) {
          absl::StrAppend(&partial, piece.substr(0, kMaxBody - std::min(kMaxBody, partial.size())));
          return true;
        }
        size_t start = 0;
        for (size_t newline = piece.find('\n'); newline != absl::string_view::npos;
             newline = piece.find('\n', start)) {
          absl::StrAppend(&partial, piece.substr(start, newline - start));
          start = newline + 1;
          const bool go_on = partial.empty() || on_line(partial);
          partial.clear();
          if (!go_on) return false;
        }
        absl::StrAppend(&partial, piece.substr(start));
        too_long = partial.size() > kMaxBody;
        return !too_long;
      });
  if (!done.ok()) return done;
  if (too_long) {
    return absl::UnavailableError(absl::StrCat("watch ", api_.server_text, target,
                                               ": a line longer than 256 MiB"));
  }
  if (done->status != 200) done->body = std::move(partial);
  return done;
}

absl::StatusOr<KubeResponse> KubeClient::Exchange(
    const std::string& target, const CancelCheck& cancelled, absl::Duration idle_timeout,
    const std::function<bool(int status, absl::string_view piece)>& sink) {
  const std::string what = absl::StrCat("GET ", api_.server_text, target);
  const auto failed = [&what](absl::string_view step, const beast::error_code& ec) {
    if (ec == net::error::operation_aborted) {
      return absl::CancelledError(absl::StrCat(what, ": cancelled"));
    }
    return absl::UnavailableError(absl::StrCat(what, ": ", step, ": ", ec.message()));
  };
  std::string token;
  if (!api_.token_file.empty()) {
    absl::StatusOr<std::string> text = ReadNonEmptyFile("kube_token_file", api_.token_file);
    if (!text.ok()) return absl::UnavailableError(text.status().message());
    token = std::string(absl::StripAsciiWhitespace(*text));
  }

  net::io_context ioc;
  tcp::resolver resolver(ioc);
  beast::error_code ec;
  const tcp::resolver::results_type endpoints =
      resolver.resolve(api_.server.host, std::to_string(api_.server.port), ec);
  if (ec) return failed("resolving the host", ec);

  // The plain stream, or the TLS stream over it; `socket` is the TCP layer either way.
  std::optional<beast::tcp_stream> plain;
  std::optional<beast::ssl_stream<beast::tcp_stream>> secure;
  if (tls_ != nullptr) {
    secure.emplace(ioc, tls_->context);
  } else {
    plain.emplace(ioc);
  }
  beast::tcp_stream& socket = secure ? beast::get_lowest_layer(*secure) : *plain;
  const auto timeout = [](absl::Duration d) { return absl::ToChronoMilliseconds(d); };

  socket.expires_after(timeout(api_.connect_timeout));
  ec = Await(ioc, socket, cancelled, [&](auto handler) {
    socket.async_connect(endpoints, std::move(handler));
  });
  if (ec) return failed("connecting", ec);
  if (secure) {
    boost::system::error_code not_ip;
    net::ip::make_address(api_.server.host, not_ip);
    if (not_ip && !SSL_set_tlsext_host_name(secure->native_handle(), api_.server.host.c_str())) {
      return absl::UnavailableError(absl::StrCat(what, ": cannot set the TLS server name"));
    }
    secure->set_verify_callback(ssl::host_name_verification(api_.server.host));
    socket.expires_after(timeout(api_.connect_timeout));
    ec = Await(ioc, socket, cancelled, [&](auto handler) {
      secure->async_handshake(ssl::stream_base::client, std::move(handler));
    });
    if (ec) return failed("TLS handshake (is kube_ca_file the server's CA?)", ec);
  }

  http::request<http::empty_body> request{http::verb::get, target, 11};
  const bool v6 = api_.server.host.find(':') != std::string::npos;
  request.set(http::field::host, absl::StrCat(v6 ? "[" : "", api_.server.host, v6 ? "]" : "", ":",
                                              api_.server.port));
  request.set(http::field::accept, "application/json");
  request.set(http::field::user_agent, "cacheroute-frontend");
  if (!token.empty()) request.set(http::field::authorization, absl::StrCat("Bearer ", token));
  const auto write = [&](auto& stream) {
    return Await(ioc, socket, cancelled, [&](auto handler) {
      http::async_write(stream, request, std::move(handler));
    });
  };
  socket.expires_after(timeout(api_.read_timeout));
  ec = secure ? write(*secure) : write(*plain);
  if (ec) return failed("sending the request", ec);

  beast::flat_buffer buffer;
  http::response_parser<http::buffer_body> parser;
  parser.body_limit(boost::none);  // the sink limits what it keeps
  const auto read = [&](auto& stream, bool header) {
    return Await(ioc, socket, cancelled, [&](auto handler) {
      if (header) {
        http::async_read_header(stream, buffer, parser, std::move(handler));
      } else {
        http::async_read_some(stream, buffer, parser, std::move(handler));
      }
    });
  };
  ec = secure ? read(*secure, true) : read(*plain, true);
  if (ec) return failed("reading the response header", ec);
  KubeResponse response{.status = static_cast<int>(parser.get().result_int())};

  char piece[16 * 1024];
  while (!parser.is_done()) {
    parser.get().body().data = piece;
    parser.get().body().size = sizeof piece;
    socket.expires_after(timeout(idle_timeout));
    ec = secure ? read(*secure, false) : read(*plain, false);
    if (ec == http::error::need_buffer) ec = {};
    if (ec) {
      return failed(ec == http::error::partial_message || ec == http::error::end_of_stream
                        ? "the stream ended before its last chunk"
                        : "reading the body",
                    ec);
    }
    const size_t n = sizeof piece - parser.get().body().size;
    if (n > 0 && !sink(response.status, absl::string_view(piece, n))) break;
  }
  beast::error_code ignored;
  socket.socket().shutdown(tcp::socket::shutdown_both, ignored);
  return response;
}

}  // namespace cacheroute::frontend
