// cacheroute-epp-bench: the endpoint picker's decision time per request next to the latency
// cacheroute-gateway adds, on loopback, in one run. One vLLM-like upstream (an httplib server
// answering a fixed completion at once) stands for --engines members; cacheroute-gateway and
// cacheroute-epp (the binaries beside this one, each a process of its own) route over the same
// members with the same policy. An open-loop load generator sends --rate requests/s on each of
// three paths, interleaved so that every path sees the same machine load:
//
//   direct    POST /v1/completions to the upstream
//   gateway   the same through cacheroute-gateway
//   epp       one ext_proc stream per request, as Envoy's filter opens it in FULL_DUPLEX_STREAMED
//             mode: request headers, then the body (the key is its `user`, so the endpoint picker
//             holds its answer for the body), the decision read; then the response's headers and
//             body, their answers read, and the stream closed
//   floor     (--floor) the same exchange with an ext_proc server that routes nothing
//             (ExtProcServer in this process, answering one fixed endpoint): what gRPC and the
//             protocol cost alone; it shares this process's cores with the load generator
//
// The EPP's decision time is from opening the stream to receiving the request_headers answer
// that carries the endpoint (what delays the request at the gateway); the gateway's added latency
// is its path's p50 (p99) minus direct's. Prints each run and, with --repeat N, the medians.
//
//   cacheroute-epp-bench --rate 1000 --seconds 4 --repeat 3
#include <grpcpp/grpcpp.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "envoy/service/ext_proc/v3/external_processor.grpc.pb.h"
#include "tools/epp/ext_proc_server.h"
#include "tools/eval/bench/loopback_service.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace ext_proc = ::envoy::service::ext_proc::v3;
using ::cacheroute::eval::CompletionUpstream;
using ::cacheroute::eval::LoopbackService;
using ::cacheroute::eval::Median;
using ::cacheroute::eval::Percentile;

void AddHeader(ext_proc::HttpHeaders& headers, const std::string& key, const std::string& value) {
  auto* h = headers.mutable_headers()->add_headers();
  h->set_key(key);
  h->set_raw_value(value);
}

// One request's whole exchange with the endpoint picker; the decision time in µs, or a negative
// number when the exchange failed.
double ExchangeOnce(ext_proc::ExternalProcessor::Stub& stub, const std::string& body,
                    const std::string& answer) {
  const Clock::time_point start = Clock::now();
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  auto stream = stub.Process(&context);
  ext_proc::ProcessingRequest request;
  AddHeader(*request.mutable_request_headers(), ":method", "POST");
  AddHeader(*request.mutable_request_headers(), ":path", "/v1/completions");
  AddHeader(*request.mutable_request_headers(), "content-type", "application/json");
  if (!stream->Write(request)) return -1;
  request.Clear();
  request.mutable_request_body()->set_body(body);
  request.mutable_request_body()->set_end_of_stream(true);
  if (!stream->Write(request)) return -1;
  ext_proc::ProcessingResponse response;
  if (!stream->Read(&response) || !response.has_request_headers()) return -1;
  const double decision = std::chrono::duration<double, std::micro>(Clock::now() - start).count();
  if (!stream->Read(&response) || !response.has_request_body()) return -1;  // the body's echo
  request.Clear();
  AddHeader(*request.mutable_response_headers(), ":status", "200");
  AddHeader(*request.mutable_response_headers(), "content-type", "application/json");
  if (!stream->Write(request)) return -1;
  request.Clear();
  request.mutable_response_body()->set_body(answer);
  request.mutable_response_body()->set_end_of_stream(true);
  if (!stream->Write(request)) return -1;
  if (!stream->Read(&response) || !stream->Read(&response)) return -1;
  stream->WritesDone();
  return stream->Finish().ok() ? decision : -1;
}

// The floor's routing side: the endpoint picker's protocol work without its routing.
class FixedExchange : public cacheroute::epp::Exchange {
 public:
  bool NeedsBody(const cacheroute::epp::HeaderList&) override { return true; }
  cacheroute::epp::Route RouteRequest(const cacheroute::epp::RequestView&) override {
    cacheroute::epp::Route route;
    route.endpoint = "127.0.0.1:8000";
    return route;
  }
  cacheroute::epp::HeaderList ResponseHeaders(const cacheroute::epp::ResponseView&) override {
    return {};
  }
  void ResponseBody(absl::string_view) override {}
  void Finished(bool) override {}
};

}  // namespace

int main(int argc, char** argv) {
  double rate = 1000;
  double seconds = 4;
  int threads = 16;
  int repeat = 1;
  int engines = 4;
  std::string policy = "cacheroute";
  uint32_t io_threads = 1;
  // Installed, the programs sit beside this one; in the build tree, where CMake built them.
  const std::filesystem::path dir = std::filesystem::path(argv[0]).parent_path();
  const auto beside_or = [&dir](const char* name, const char* built) {
    return std::filesystem::exists(dir / name) ? (dir / name).string() : std::string(built);
  };
  std::string gateway_binary = beside_or("cacheroute-gateway", CACHEROUTE_GATEWAY_PATH);
  std::string epp_binary = beside_or("cacheroute-epp", CACHEROUTE_EPP_PATH);
  CLI::App app{"EPP decision time per request next to the gateway's added latency, on loopback."};
  app.add_option("--rate", rate, "Requests/s on each path (direct, gateway, epp)");
  app.add_option("--seconds", seconds, "Duration of one measurement");
  app.add_option("--threads", threads, "Load generator threads");
  app.add_option("--repeat", repeat, "Runs; figures are their medians")->check(CLI::Range(1, 99));
  app.add_option("--engines", engines, "Members (all served by the one upstream)")
      ->check(CLI::Range(1, 256));
  app.add_option("--policy", policy, "Routing policy of both");
  app.add_option("--io-threads", io_threads, "The gateway's I/O threads");
  app.add_option("--gateway-binary", gateway_binary, "cacheroute-gateway to run");
  app.add_option("--epp-binary", epp_binary, "cacheroute-epp to run");
  bool with_floor = false;
  app.add_flag("--floor", with_floor,
               "Also a fourth path: an ext_proc server in this process that routes nothing");
  CLI11_PARSE(app, argc, argv);

  const std::string answer =
      R"({"id":"cmpl-1","object":"text_completion","model":"m","choices":[{"index":0,)"
      R"("text":"hello","finish_reason":"stop"}],"usage":{"prompt_tokens":12,)"
      R"("completion_tokens":1,"total_tokens":13,"prompt_tokens_details":{"cached_tokens":6}}})";
  auto upstream = std::make_unique<CompletionUpstream>(answer, 3 * threads + 8);
  const int upstream_port = upstream->port();
  const auto give_up = [](const std::string& what, const std::string& error) {
    std::fprintf(stderr, "%s did not start: %s\n", what.c_str(), error.c_str());
    return 1;
  };

  std::string members = "upstreams:\n";
  for (int e = 0; e < engines; ++e) {
    absl::StrAppendFormat(&members, "  - {name: engine-%d, url: \"http://127.0.0.1:%d\"}\n", e,
                          upstream_port);
  }
  auto gateway = std::make_unique<LoopbackService>(
      gateway_binary, "gateway",
      absl::StrFormat("listen: 127.0.0.1:0\npolicy: %s\nio_threads: %u\n%s", policy, io_threads,
                      members));
  if (gateway->port == 0) return give_up(gateway_binary, gateway->error);
  auto epp = std::make_unique<LoopbackService>(
      epp_binary, "epp",
      absl::StrFormat("listen: 127.0.0.1:0\nmetrics_listen: 127.0.0.1:0\npolicy: %s\n%s", policy,
                      members));
  if (epp->port == 0) return give_up(epp_binary, epp->error);
  std::unique_ptr<cacheroute::epp::ExtProcServer> floor;
  if (with_floor) {
    cacheroute::epp::ExtProcServerOptions options;
    options.listen = "127.0.0.1:0";
    auto started = cacheroute::epp::ExtProcServer::Start(
        options, [] { return std::make_unique<FixedExchange>(); });
    if (!started.ok()) return give_up("the floor's ext_proc server", started.status().ToString());
    floor = *std::move(started);
  }

  std::printf(
      "EPP decision time and gateway overhead on loopback: %.0f req/s per path for %.1f s, %d "
      "client threads, %d members, policy %s, gateway I/O threads %u, %d run(s)\n",
      rate, seconds, threads, engines, policy.c_str(), io_threads, repeat);
  std::printf("%-4s %-13s %8s %10s %10s %10s\n", "run", "path", "requests", "p50_us", "p99_us",
              "max_us");
  enum Path { kDirect, kGateway, kEpp, kFloor, kAllPaths };
  const int kPaths = with_floor ? kAllPaths : kFloor;
  const char* kNames[] = {"direct", "gateway", "epp-decision", "floor-decision"};
  std::vector<double> decision_p50, decision_p99, added_p50, added_p99, floor_p50, floor_p99;
  uint64_t failures_total = 0;
  for (int run = 0; run < repeat; ++run) {
    const auto total = static_cast<uint64_t>(kPaths * rate * seconds);
    const auto spacing = std::chrono::duration<double>(1.0 / (kPaths * rate));
    std::atomic<uint64_t> next{0};
    std::atomic<uint64_t> failures{0};
    std::atomic<uint64_t> late{0};
    std::vector<std::vector<std::vector<double>>> results(
        kPaths, std::vector<std::vector<double>>(threads));
    const Clock::time_point start = Clock::now() + std::chrono::milliseconds(200);
    std::vector<std::thread> workers;
    for (int t = 0; t < threads; ++t) {
      workers.emplace_back([&, t] {
        httplib::Client direct("127.0.0.1", upstream_port);
        httplib::Client through("127.0.0.1", gateway->port);
        for (httplib::Client* c : {&direct, &through}) {
          c->set_keep_alive(true);
          c->set_tcp_nodelay(true);
        }
        // A connection of its own per thread, as each Envoy worker keeps its own.
        grpc::ChannelArguments args;
        args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
        auto stub = ext_proc::ExternalProcessor::NewStub(grpc::CreateCustomChannel(
            absl::StrCat("127.0.0.1:", epp->port), grpc::InsecureChannelCredentials(), args));
        std::unique_ptr<ext_proc::ExternalProcessor::Stub> floor_stub;
        if (floor != nullptr) {
          floor_stub = ext_proc::ExternalProcessor::NewStub(grpc::CreateCustomChannel(
              absl::StrCat("127.0.0.1:", floor->port()), grpc::InsecureChannelCredentials(), args));
        }
        for (uint64_t i = next.fetch_add(1); i < total; i = next.fetch_add(1)) {
          const auto due = start + std::chrono::duration_cast<Clock::duration>(spacing * i);
          if (Clock::now() > due + std::chrono::milliseconds(1)) late.fetch_add(1);
          std::this_thread::sleep_until(due);
          const Path path = static_cast<Path>(i % kPaths);
          const std::string body = absl::StrCat(
              R"({"model":"m","prompt":"Say hello","max_tokens":1,"user":"tenant-)", i % 64, "\"}");
          double micros = -1;
          if (path == kEpp || path == kFloor) {
            micros = ExchangeOnce(path == kEpp ? *stub : *floor_stub, body, answer);
          } else {
            const Clock::time_point sent = Clock::now();
            httplib::Result result = (path == kDirect ? direct : through)
                                         .Post("/v1/completions", body, "application/json");
            if (result && result->status == 200) {
              micros = std::chrono::duration<double, std::micro>(Clock::now() - sent).count();
            }
          }
          if (micros < 0) {
            failures.fetch_add(1);
            continue;
          }
          results[path][t].push_back(micros);
        }
      });
    }
    for (std::thread& w : workers) w.join();
    double p50[kAllPaths] = {}, p99[kAllPaths] = {};
    for (int p = 0; p < kPaths; ++p) {
      std::vector<double> all;
      for (const auto& v : results[p]) all.insert(all.end(), v.begin(), v.end());
      p50[p] = Percentile(all, 0.5);
      p99[p] = Percentile(all, 0.99);
      std::printf("%-4d %-13s %8zu %10.1f %10.1f %10.1f\n", run + 1, kNames[p], all.size(), p50[p],
                  p99[p], Percentile(all, 1.0));
    }
    decision_p50.push_back(p50[kEpp]);
    decision_p99.push_back(p99[kEpp]);
    floor_p50.push_back(p50[kFloor]);
    floor_p99.push_back(p99[kFloor]);
    added_p50.push_back(p50[kGateway] - p50[kDirect]);
    added_p99.push_back(p99[kGateway] - p99[kDirect]);
    std::printf("     failures: %llu, requests sent more than 1 ms late: %llu of %llu\n",
                static_cast<unsigned long long>(failures.load()),
                static_cast<unsigned long long>(late.load()),
                static_cast<unsigned long long>(total));
    failures_total += failures.load();
  }
  if (floor != nullptr) floor->Stop();
  epp.reset();
  gateway.reset();
  upstream.reset();
  std::printf("median of %d: EPP decision p50 %.1f us, p99 %.1f us", repeat, Median(decision_p50),
              Median(decision_p99));
  if (floor != nullptr) {
    std::printf(" (protocol floor p50 %.1f us, p99 %.1f us)", Median(floor_p50), Median(floor_p99));
  }
  std::printf("; gateway added latency p50 %.1f us, p99 %.1f us\n", Median(added_p50),
              Median(added_p99));
  return failures_total == 0 ? 0 : 1;
}
