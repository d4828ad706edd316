// cacheroute-stream-load: many concurrent streaming chat completions against one HTTP endpoint (a
// gateway, HAProxy, or an engine), the way LLM clients hold them: each stream is one connection
// that sends a request with "stream": true and reads the SSE answer to `data: [DONE]`. Prints how
// many completed and why the others failed, TTFT and duration percentiles and, with --pid, the
// peak resident memory (VmHWM) of the given processes. Event-driven (Boost.Beast, one thread), so
// thousands of streams cost the client little.
//
//   cacheroute-stream-load --target 127.0.0.1:8080 --streams 1600 --max-tokens 200 --pid 1234
//
// Requests carry no routing header: a request's system prompt names its tenant (--tenants of
// them), so a gateway keyed by `system` routes by tenant with no client change.
// Exit code: 0 when every stream completed, 1 otherwise, 2 for bad flags.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "CLI/CLI.hpp"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace bhttp = boost::beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);

struct Options {
  std::string host = "127.0.0.1";
  std::string port;
  int streams = 100;
  int max_tokens = 200;
  int tenants = 64;
  int prompt_words = 200;
  double ramp_s = 5;
  double first_byte_timeout_s = 120;
  double idle_timeout_s = 120;
};

struct Outcome {
  bool ok = false;
  std::string failure;  // why not
  double ttft_s = 0;
  double duration_s = 0;
};

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(q * v.size()))];
}

asio::awaitable<Outcome> OneStream(const Options& o, const tcp::resolver::results_type& endpoints,
                                   int index) {
  Outcome out;
  const Clock::time_point start = Clock::now();
  beast::tcp_stream stream(co_await asio::this_coro::executor);
  stream.expires_after(std::chrono::seconds(10));
  if (auto [ec, e] = co_await stream.async_connect(endpoints, kNoThrow); ec) {
    out.failure = absl::StrCat("connect: ", ec.message());
    co_return out;
  }
  const int tenant = index % o.tenants;
  std::string system = absl::StrCat("You are the assistant of tenant ", tenant, ".");
  for (int w = 0; w < o.prompt_words; ++w) absl::StrAppend(&system, " policy", w % 97);
  bhttp::request<bhttp::string_body> request{bhttp::verb::post, "/v1/chat/completions", 11};
  request.set(bhttp::field::host, absl::StrCat(o.host, ":", o.port));
  request.set(bhttp::field::content_type, "application/json");
  request.body() = absl::StrCat(
      R"({"model":"cacheroute-emu","stream":true,"max_tokens":)", o.max_tokens,
      R"(,"messages":[{"role":"system","content":")", system,
      R"("},{"role":"user","content":"question )", index, R"("}]})");
  request.prepare_payload();
  stream.expires_after(std::chrono::seconds(30));
  if (auto [ec, n] = co_await bhttp::async_write(stream, request, kNoThrow); ec) {
    out.failure = absl::StrCat("write: ", ec.message());
    co_return out;
  }
  beast::flat_buffer buffer;
  bhttp::response_parser<bhttp::buffer_body> parser;
  parser.body_limit(boost::none);
  stream.expires_after(std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(o.first_byte_timeout_s)));
  if (auto [ec, n] = co_await bhttp::async_read_header(stream, buffer, parser, kNoThrow); ec) {
    out.failure = ec == beast::error::timeout ? "no answer within the first-byte timeout"
                                              : absl::StrCat("before headers: ", ec.message());
    co_return out;
  }
  if (parser.get().result_int() != 200) {
    out.failure = absl::StrCat("HTTP ", parser.get().result_int());
    co_return out;
  }
  char chunk[4096];
  std::string tail;  // the last bytes seen, to find data: [DONE]
  bool first = true;
  while (!parser.is_done()) {
    parser.get().body().data = chunk;
    parser.get().body().size = sizeof chunk;
    stream.expires_after(std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(first ? o.first_byte_timeout_s : o.idle_timeout_s)));
    auto [ec, n] = co_await bhttp::async_read_some(stream, buffer, parser, kNoThrow);
    if (ec == bhttp::error::need_buffer) ec = {};
    const size_t got = sizeof chunk - parser.get().body().size;
    if (got > 0) {
      if (first) out.ttft_s = std::chrono::duration<double>(Clock::now() - start).count();
      first = false;
      tail.append(chunk, got);
      if (tail.size() > 64) tail.erase(0, tail.size() - 64);
    }
    if (ec) {
      out.failure = ec == beast::error::timeout ? "stream idle past the timeout"
                                                : absl::StrCat("stream broke: ", ec.message());
      co_return out;
    }
  }
  if (!absl::StrContains(tail, "data: [DONE]")) {
    out.failure = "stream ended without data: [DONE]";
    co_return out;
  }
  out.ok = true;
  out.duration_s = std::chrono::duration<double>(Clock::now() - start).count();
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  co_return out;
}

// Peak resident set of `pid` (VmHWM) in MiB, or -1.
double PeakRssMiB(int pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    if (absl::StartsWith(line, "VmHWM:")) return std::stod(line.substr(6)) / 1024.0;
  }
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  std::string target;
  std::string label = "target";
  std::vector<int> pids;
  CLI::App app{"Concurrent streaming chat completions against one endpoint; prints outcomes."};
  app.add_option("--target", target, "HOST:PORT of the endpoint")->required();
  app.add_option("--streams", o.streams, "Concurrent streams (one request each)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--max-tokens", o.max_tokens, "Tokens per answer")->check(CLI::Range(1, 100000));
  app.add_option("--tenants", o.tenants, "Distinct system prompts")->check(CLI::Range(1, 1000000));
  app.add_option("--prompt-words", o.prompt_words, "Words of each system prompt");
  app.add_option("--ramp", o.ramp_s, "Seconds over which the streams start");
  app.add_option("--first-byte-timeout", o.first_byte_timeout_s, "Seconds to the first byte");
  app.add_option("--idle-timeout", o.idle_timeout_s, "Seconds between two body chunks");
  app.add_option("--pid", pids, "Processes whose peak RSS to report (repeatable)");
  app.add_option("--label", label, "Name of the endpoint in the output");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  const size_t colon = target.rfind(':');
  if (colon == std::string::npos) {
    std::fprintf(stderr, "--target: expected HOST:PORT, got \"%s\"\n", target.c_str());
    return 2;
  }
  o.host = target.substr(0, colon);
  o.port = target.substr(colon + 1);

  asio::io_context context(1);
  tcp::resolver resolver(context);
  beast::error_code ec;
  const auto endpoints = resolver.resolve(o.host, o.port, ec);
  if (ec) {
    std::fprintf(stderr, "--target: cannot resolve \"%s\": %s\n", target.c_str(),
                 ec.message().c_str());
    return 2;
  }
  std::vector<Outcome> outcomes(o.streams);
  const Clock::time_point start = Clock::now();
  for (int i = 0; i < o.streams; ++i) {
    asio::co_spawn(
        context,
        [&, i]() -> asio::awaitable<void> {
          asio::steady_timer delay(co_await asio::this_coro::executor);
          delay.expires_at(start + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(o.ramp_s * i / o.streams)));
          co_await delay.async_wait(kNoThrow);
          outcomes[i] = co_await OneStream(o, endpoints, i);
        },
        asio::detached);
  }
  context.run();
  const double wall = std::chrono::duration<double>(Clock::now() - start).count();

  std::vector<double> ttft, duration;
  std::map<std::string, int> failures;
  for (const Outcome& x : outcomes) {
    if (x.ok) {
      ttft.push_back(x.ttft_s);
      duration.push_back(x.duration_s);
    } else {
      ++failures[x.failure];
    }
  }
  const int failed = o.streams - static_cast<int>(ttft.size());
  std::printf("%s: %d streams of %d tokens over %.1f s ramp, %.1f s wall\n", label.c_str(),
              o.streams, o.max_tokens, o.ramp_s, wall);
  std::printf("%-10s %8s %8s %8s %10s %10s %10s %10s\n", "endpoint", "streams", "ok", "failed",
              "ttft_p50", "ttft_p99", "dur_p50", "dur_p99");
  std::printf("%-10s %8d %8zu %8d %10.3f %10.3f %10.3f %10.3f\n", label.c_str(), o.streams,
              ttft.size(), failed, Percentile(ttft, 0.5), Percentile(ttft, 0.99),
              Percentile(duration, 0.5), Percentile(duration, 0.99));
  std::printf("failed_fraction %.5f\n", static_cast<double>(failed) / o.streams);
  for (const auto& [why, n] : failures) std::printf("  failed %6d: %s\n", n, why.c_str());
  for (int pid : pids) std::printf("peak_rss_mib pid=%d %.1f\n", pid, PeakRssMiB(pid));
  return failed == 0 ? 0 : 1;
}
