// cacheroute-engine-emu in-process on a loopback port chosen by the kernel, spoken to over real
// HTTP: vLLM's request and response shapes, usage and cached tokens, streaming, errors, /metrics
// (and promtool when installed), /health and /v1/models, and hundreds of streams at once over two
// I/O threads. The engine runs at --time-scale 0 except in that last test.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "tests/support/run_command.h"
#include "tests/support/temp_dir.h"
#include "tools/eval/engine_emu/server.h"
#include "tools/eval/engine_emu/tokenizer.h"
#include "tools/eval/workload/json_line.h"

namespace cacheroute::engine_emu {
namespace {

using workload::JsonValue;
using workload::ParseJson;

// Model "emu-model" on the llama-8b-h100 profile, two I/O threads, at this time scale.
EmuOptions Options(double time_scale) {
  EmuOptions options;
  options.model = "emu-model";
  options.io_threads = 2;
  options.runner.profile = *sim::FindEngineProfile("llama-8b-h100");
  options.runner.time_scale = time_scale;
  return options;
}

std::unique_ptr<EmuServer> Start(const EmuOptions& options) {
  absl::StatusOr<std::unique_ptr<EmuServer>> server = EmuServer::Start(options);
  REQUIRE(server.ok());
  return *std::move(server);
}

// Engine "7", answering at once (time scale 0).
std::unique_ptr<EmuServer> StartEmu() {
  EmuOptions options = Options(0);
  options.engine_label = "7";
  return Start(options);
}

std::string Words(int n, const std::string& prefix = "w") {
  std::string out;
  for (int i = 0; i < n; ++i) out += (i ? " " : "") + prefix + std::to_string(i);
  return out;
}

struct Reply {
  int status = 0;
  std::string body;
  JsonValue json;
};

Reply Post(httplib::Client& client, const std::string& path, const std::string& body) {
  httplib::Result res = client.Post(path.c_str(), body, "application/json");
  REQUIRE(res);
  Reply reply{res->status, res->body, {}};
  if (res->get_header_value("Content-Type").find("json") != std::string::npos) {
    absl::StatusOr<JsonValue> v = ParseJson(res->body);
    REQUIRE(v.ok());
    reply.json = *v;
  }
  return reply;
}

uint64_t Field(const JsonValue& v, std::initializer_list<const char*> path) {
  const JsonValue* cur = &v;
  for (const char* name : path) {
    cur = cur->Find(name);
    REQUIRE(cur != nullptr);
  }
  REQUIRE(cur->AsUint64().has_value());
  return *cur->AsUint64();
}

uint64_t Cached(const Reply& r) {
  return Field(r.json, {"usage", "prompt_tokens_details", "cached_tokens"});
}

// The lines of `text`, without their '\n' (no empty line after a final '\n').
std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    lines.push_back(text.substr(pos, end - pos));
    pos = end + 1;
  }
  return lines;
}

// name{labels} value lines of a /metrics page, by the whole series text.
std::map<std::string, double> Samples(const std::string& page) {
  std::map<std::string, double> out;
  for (const std::string& line : Lines(page)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    out[line.substr(0, space)] = std::stod(line.substr(space + 1));
  }
  return out;
}

std::string Series(const std::string& name) {
  return name + "{model_name=\"emu-model\",engine=\"7\"}";
}

TEST_CASE("completions report usage, and a repeated prompt hits its full blocks") {
  auto server = StartEmu();
  httplib::Client client("127.0.0.1", server->port());
  const std::string body =
      R"({"model": "emu-model", "prompt": ")" + Words(40) + R"(", "max_tokens": 5})";
  Reply first = Post(client, "/v1/completions", body);
  REQUIRE(first.status == 200);
  CHECK(first.json.Find("object")->text == "text_completion");
  CHECK(Field(first.json, {"usage", "prompt_tokens"}) == 40);
  CHECK(Field(first.json, {"usage", "completion_tokens"}) == 5);
  CHECK(Field(first.json, {"usage", "total_tokens"}) == 45);
  CHECK(Cached(first) == 0);
  const JsonValue& choice = first.json.Find("choices")->items.at(0);
  CHECK(choice.Find("finish_reason")->text == "length");
  CHECK(Tokenize(choice.Find("text")->text).size() == 5);

  // 40 tokens: two full 16-token blocks are cached.
  CHECK(Cached(Post(client, "/v1/completions", body)) == 32);
  // 48 tokens, all three blocks cached after one run, but at most prompt - 1 tokens are served
  // from the cache: two blocks.
  const std::string exact = R"({"prompt": ")" + Words(48) + R"(", "max_tokens": 1})";
  CHECK(Cached(Post(client, "/v1/completions", exact)) == 32);
  CHECK(Cached(Post(client, "/v1/completions", exact)) == 32);
  // A prompt that diverges in its second block keeps only the first.
  const std::string diverged =
      R"({"prompt": ")" + Words(20) + " " + Words(30, "x") + R"(", "max_tokens": 2})";
  CHECK(Cached(Post(client, "/v1/completions", diverged)) == 16);
  // Token ids work as a prompt too, and share nothing with words.
  Reply ids = Post(client, "/v1/completions", R"({"prompt": [1, 2, 3, 4], "max_tokens": 3})");
  CHECK(Field(ids.json, {"usage", "prompt_tokens"}) == 4);
}

TEST_CASE("chat completions render a fixed template, so a longer conversation hits its prefix") {
  auto server = StartEmu();
  httplib::Client client("127.0.0.1", server->port());
  const std::string system = R"({"role": "system", "content": ")" + Words(60) + R"("})";
  Reply one = Post(client, "/v1/chat/completions",
                   R"({"messages": [)" + system + R"(, {"role": "user", "content": "hi"}]})");
  REQUIRE(one.status == 200);
  CHECK(one.json.Find("object")->text == "chat.completion");
  // <|start|> system w0..w59 <|end|> <|start|> user hi <|end|> <|start|> assistant
  CHECK(Field(one.json, {"usage", "prompt_tokens"}) == 69);
  CHECK(Field(one.json, {"usage", "completion_tokens"}) == kDefaultMaxTokens);
  const JsonValue& message = *one.json.Find("choices")->items.at(0).Find("message");
  CHECK(message.Find("role")->text == "assistant");
  Reply two = Post(client, "/v1/chat/completions",
                   R"({"messages": [)" + system +
                       R"(, {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                           {"role": "assistant", "content": "hello"},
                           {"role": "user", "content": "more"}], "max_completion_tokens": 2})");
  REQUIRE(two.status == 200);
  CHECK(Field(two.json, {"usage", "completion_tokens"}) == 2);
  // Its first 69 tokens are the first conversation's whole prompt: four full blocks.
  CHECK(Cached(two) == 64);
}

TEST_CASE("streaming sends SSE chunks, usage last when asked, then [DONE]") {
  auto server = StartEmu();
  httplib::Client client("127.0.0.1", server->port());
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    const bool chat = std::string(path) == "/v1/chat/completions";
    const std::string prompt =
        chat ? R"("messages": [{"role": "user", "content": "a b c"}])" : R"("prompt": "a b c d e")";
    httplib::Result res = client.Post(path, "{" + prompt + R"(, "max_tokens": 4, "stream": true,
                 "stream_options": {"include_usage": true}})",
                                      "application/json");
    REQUIRE(res);
    REQUIRE(res->status == 200);
    CHECK(res->get_header_value("Content-Type").find("text/event-stream") == 0);
    std::vector<std::string> events;
    size_t pos = 0;
    while ((pos = res->body.find("data: ", pos)) != std::string::npos) {
      const size_t end = res->body.find("\n\n", pos);
      REQUIRE(end != std::string::npos);
      events.push_back(res->body.substr(pos + 6, end - pos - 6));
      pos = end;
    }
    REQUIRE(events.size() == 6);  // 4 tokens, usage, [DONE]
    CHECK(events.back() == "[DONE]");
    std::string text;
    for (int i = 0; i < 4; ++i) {
      absl::StatusOr<JsonValue> chunk = ParseJson(events[i]);
      REQUIRE(chunk.ok());
      const JsonValue& choice = chunk->Find("choices")->items.at(0);
      if (chat) {
        const JsonValue* delta = choice.Find("delta");
        CHECK((delta->Find("role") != nullptr) == (i == 0));
        text += delta->Find("content")->text;
      } else {
        text += choice.Find("text")->text;
      }
      CHECK((choice.Find("finish_reason")->type == JsonValue::Type::kNull) == (i < 3));
    }
    CHECK(Tokenize(text).size() == 4);
    absl::StatusOr<JsonValue> usage = ParseJson(events[4]);
    REQUIRE(usage.ok());
    CHECK(usage->Find("choices")->items.empty());
    CHECK(Field(*usage, {"usage", "completion_tokens"}) == 4);
    CHECK(Field(*usage, {"usage", "prompt_tokens"}) == (chat ? 8 : 5));
  }
}

TEST_CASE("bad requests get vLLM-style 400 errors naming the field") {
  auto server = StartEmu();
  httplib::Client client("127.0.0.1", server->port());
  struct Case {
    const char* path;
    const char* body;
    const char* param;  // "" for null
    const char* message_part;
  };
  const Case cases[] = {
      {"/v1/completions", R"({"prompt": "a",)", "", "JSON decode error"},
      {"/v1/completions", R"([1, 2])", "", "JSON object"},
      {"/v1/completions", R"({"max_tokens": 3})", "prompt", "\"prompt\" is required"},
      {"/v1/completions", R"({"prompt": 7})", "prompt", "must be a string"},
      {"/v1/completions", R"({"prompt": "a", "max_tokens": "ten"})", "max_tokens",
       "\"max_tokens\""},
      {"/v1/completions", R"({"prompt": "a", "max_tokens": 0})", "max_tokens", "between 1"},
      {"/v1/completions", R"({"prompt": "a", "stream": "yes"})", "stream", "a boolean"},
      {"/v1/completions", R"({"prompt": "a", "cacheroute_hash_ids": [1]})",
       "cacheroute_input_length", "required"},
      {"/v1/chat/completions", R"({"prompt": "a"})", "messages", "\"messages\" is required"},
      {"/v1/chat/completions", R"({"messages": [{"content": "a"}]})", "messages[0].role",
       "required"},
      {"/v1/chat/completions", R"({"messages": [{"role": "user", "content": 5}]})",
       "messages[0].content", "got a number"},
  };
  for (const Case& c : cases) {
    INFO(c.path << " " << c.body);
    Reply r = Post(client, c.path, c.body);
    CHECK(r.status == 400);
    // OpenAI's error object, as vLLM's OpenAI server sends it: everything inside "error".
    REQUIRE(r.json.Find("error") != nullptr);
    CHECK(r.json.Find("message") == nullptr);
    const JsonValue& error = *r.json.Find("error");
    CHECK(error.Find("type")->text == "BadRequestError");
    CHECK(Field(r.json, {"error", "code"}) == 400);
    const JsonValue* param = error.Find("param");
    REQUIRE(param != nullptr);
    if (std::string(c.param).empty()) {
      CHECK(param->type == JsonValue::Type::kNull);
    } else {
      CHECK(param->text == c.param);
    }
    CHECK(error.Find("message")->text.find(c.message_part) != std::string::npos);
  }
  Reply wrong_model = Post(client, "/v1/completions", R"({"model": "other", "prompt": "a"})");
  CHECK(wrong_model.status == 404);
  REQUIRE(wrong_model.json.Find("error") != nullptr);
  CHECK(wrong_model.json.Find("error")->Find("type")->text == "NotFoundError");
  CHECK(wrong_model.json.Find("error")->Find("message")->text.find("other") != std::string::npos);
}

TEST_CASE("the extension fields define the prompt's blocks, expanded into 16-token blocks") {
  auto server = StartEmu();
  httplib::Client client("127.0.0.1", server->port());
  auto send = [&](const std::string& ids, int block_size, int length) {
    return Post(client, "/v1/completions",
                R"({"prompt": "", "max_tokens": 1, "cacheroute_hash_ids": )" + ids +
                    R"(, "cacheroute_block_size": )" + std::to_string(block_size) +
                    R"(, "cacheroute_input_length": )" + std::to_string(length) + "}");
  };
  Reply a = send("[7, 8]", 512, 1000);
  REQUIRE(a.status == 200);
  CHECK(Field(a.json, {"usage", "prompt_tokens"}) == 1000);
  CHECK(Cached(a) == 0);
  // Same first 512-token block, different second: the first block's 32 sub-blocks hit.
  CHECK(Cached(send("[7, 9]", 512, 1000)) == 512);
  // Same ids: every full 16-token block below the prompt's last token (62 blocks = 992 tokens).
  CHECK(Cached(send("[7, 8]", 512, 1000)) == 992);
  // Ids at 16 tokens each map one to one.
  CHECK(Cached(send("[1, 2, 3]", 16, 48)) == 0);
  CHECK(Cached(send("[1, 2, 4]", 16, 48)) == 32);
}

TEST_CASE("/metrics counters agree with the usage the responses reported") {
  auto server = StartEmu();
  httplib::Client client("127.0.0.1", server->port());
  uint64_t prompt = 0, cached = 0, completion = 0;
  for (int i = 0; i < 12; ++i) {
    const std::string body = R"({"prompt": ")" + Words(20 + 7 * (i % 4)) + R"(", "max_tokens": )" +
                             std::to_string(1 + i % 5) +
                             (i % 3 == 0 ? R"(, "stream": false)" : "") + "}";
    Reply r = Post(client, "/v1/completions", body);
    REQUIRE(r.status == 200);
    prompt += Field(r.json, {"usage", "prompt_tokens"});
    cached += Cached(r);
    completion += Field(r.json, {"usage", "completion_tokens"});
  }
  CHECK(cached > 0);
  httplib::Result res = client.Get("/metrics");
  REQUIRE(res);
  REQUIRE(res->status == 200);
  std::map<std::string, double> s = Samples(res->body);
  CHECK(s.at(Series("vllm:prefix_cache_queries_total")) == prompt);
  CHECK(s.at(Series("vllm:prefix_cache_hits_total")) == cached);
  CHECK(s.at(Series("vllm:prompt_tokens_total")) == prompt);
  CHECK(s.at(Series("vllm:generation_tokens_total")) == completion);
  CHECK(s.at(Series("vllm:num_requests_running")) == 0);
  CHECK(s.at(Series("vllm:num_requests_waiting")) == 0);
  CHECK(s.at(Series("vllm:kv_cache_usage_perc")) == 0);
  // The cache configuration, as vLLM publishes it: label values of an info metric.
  CHECK(absl::StrContains(res->body,
                          "vllm:cache_config_info{model_name=\"emu-model\",engine=\"7\","
                          "block_size=\"16\",num_gpu_blocks=\""));
  CHECK(s.at(Series("vllm:time_to_first_token_seconds_count")) == 12);
  CHECK(s.at("vllm:time_to_first_token_seconds_bucket{model_name=\"emu-model\",engine=\"7\","
             "le=\"+Inf\"}") == 12);

  // promtool, when installed. vLLM's names contain ':', which promtool's linter flags as a style
  // matter (colons are meant for recording rules); that is the only finding allowed.
  if (system("command -v promtool > /dev/null 2>&1") != 0) {
    WARN("promtool is not on PATH (Debian package prometheus): skipping its check");
    return;
  }
  const testing::CommandResult promtool =
      testing::RunCommand("promtool", {"check", "metrics"}, res->body);
  const std::string output = promtool.out + promtool.err;
  INFO(output);
  for (const std::string& line : Lines(output)) {
    if (line.empty()) continue;
    CHECK(line.find("metric names should not contain ':'") != std::string::npos);
  }
  // 0: clean; 3: lint findings only (all of them the colon rule, checked above); 1 is an error.
  CHECK((promtool.exit_code == 0 || promtool.exit_code == 3));
}

TEST_CASE("/health and /v1/models answer like vLLM's") {
  auto server = StartEmu();
  httplib::Client client("127.0.0.1", server->port());
  httplib::Result health = client.Get("/health");
  REQUIRE(health);
  CHECK(health->status == 200);
  httplib::Result models = client.Get("/v1/models");
  REQUIRE(models);
  REQUIRE(models->status == 200);
  absl::StatusOr<JsonValue> v = ParseJson(models->body);
  REQUIRE(v.ok());
  CHECK(v->Find("object")->text == "list");
  const JsonValue& model = v->Find("data")->items.at(0);
  CHECK(model.Find("id")->text == "emu-model");
  CHECK(model.Find("object")->text == "model");
}

TEST_CASE("hundreds of streams are in flight at once over two I/O threads, and all complete") {
  // 300 streams of 16 tokens: the engine runs 256 at a time (vLLM's max_num_seqs), each decode
  // step ≈ 11 modelled ms, so at time scale 5 a stream lasts about a second of wall time, far
  // longer than 300 clients take to connect. The old server held a thread per waiting request.
  constexpr int kStreams = 300;
  constexpr int kTokens = 16;
  constexpr int kIoThreads = 2;
  EmuOptions options = Options(5);
  options.io_threads = kIoThreads;
  std::unique_ptr<EmuServer> server = Start(options);
  const int port = server->port();

  struct Outcome {
    int status = 0;  // 0: no response
    std::vector<std::string> events;
  };
  std::vector<Outcome> outcomes(kStreams);
  std::atomic<int> finished{0};
  std::vector<std::thread> clients;
  clients.reserve(kStreams);
  for (int i = 0; i < kStreams; ++i) {
    clients.emplace_back([&, i] {
      httplib::Client client("127.0.0.1", port);
      client.set_connection_timeout(30);
      client.set_read_timeout(60);
      const std::string body = R"({"prompt": ")" + Words(8 + i % 5, "s" + std::to_string(i)) +
                               R"(", "max_tokens": )" + std::to_string(kTokens) +
                               R"(, "stream": true, "stream_options": {"include_usage": true}})";
      httplib::Result res = client.Post("/v1/completions", body, "application/json");
      if (res) {
        outcomes[i].status = res->status;
        size_t pos = 0;
        while ((pos = res->body.find("data: ", pos)) != std::string::npos) {
          const size_t end = res->body.find("\n\n", pos);
          if (end == std::string::npos) break;
          outcomes[i].events.push_back(res->body.substr(pos + 6, end - pos - 6));
          pos = end;
        }
      }
      finished.fetch_add(1);
    });
  }
  // Poll until every client is done, for at most two minutes, noting how many requests the engine
  // held at once.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  uint32_t peak = 0;
  while (finished.load() < kStreams && std::chrono::steady_clock::now() < deadline) {
    const EngineMetrics m = server->runner().Metrics();
    peak = std::max(peak, m.running + m.waiting);
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const bool all_finished = finished.load() == kStreams;
  if (!all_finished) server->Stop();  // answers what is left, so the clients return
  for (std::thread& t : clients) t.join();
  REQUIRE(all_finished);

  int complete = 0;
  for (int i = 0; i < kStreams; ++i) {
    INFO("stream " << i);
    const Outcome& o = outcomes[i];
    CHECK(o.status == 200);
    REQUIRE(o.events.size() == kTokens + 2);  // the tokens, usage, [DONE]
    CHECK(o.events.back() == "[DONE]");
    absl::StatusOr<JsonValue> usage = ParseJson(o.events[kTokens]);
    REQUIRE(usage.ok());
    CHECK(Field(*usage, {"usage", "completion_tokens"}) == kTokens);
    complete += o.status == 200 && o.events.back() == "[DONE]";
  }
  CHECK(complete == kStreams);
  // More requests waited on the engine at once than there are I/O threads.
  INFO("peak requests in the engine: " << peak);
  CHECK(peak > kIoThreads);
  const EngineMetrics m = server->runner().Metrics();
  CHECK(m.finished == kStreams);
  CHECK(m.running == 0);
}

TEST_CASE("Stop answers a stream in progress and a waiting request, then returns") {
  // Real time: 5,000 tokens take the engine about 30 s, so both requests are still running when
  // Stop comes right after the stream's first chunk.
  std::unique_ptr<EmuServer> server = Start(Options(1));
  const int port = server->port();
  const std::string body = R"({"prompt": "a b c", "max_tokens": 5000)";

  std::atomic<bool> got_chunk{false};
  std::string stream;  // the streaming client's thread only, until joined
  std::thread streamer([&] {
    httplib::Client client("127.0.0.1", port);
    client.set_read_timeout(60);
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = body + R"(, "stream": true})";
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
      stream.append(data, n);
      got_chunk.store(true);
      return true;
    };
    client.send(req);
  });
  Reply waiting;
  std::thread waiter([&] {
    httplib::Client client("127.0.0.1", port);
    client.set_read_timeout(60);
    httplib::Result res = client.Post("/v1/completions", body + "}", "application/json");
    if (res) waiting = {res->status, res->body, {}};
  });
  // Both in the engine and the stream begun, or two minutes passed.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  while (!(got_chunk.load() && server->runner().Metrics().running == 2) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  const bool both_running = got_chunk.load() && server->runner().Metrics().running == 2;
  server->Stop();
  streamer.join();
  waiter.join();
  REQUIRE(both_running);

  CHECK(waiting.status == 503);
  absl::StatusOr<JsonValue> error = ParseJson(waiting.body);
  REQUIRE(error.ok());
  REQUIRE(error->Find("error") != nullptr);
  CHECK(error->Find("error")->Find("type")->text == "ServiceUnavailableError");
  // The first token, then an error event and [DONE].
  INFO(stream);
  CHECK(stream.find(R"("text":"the ")") != std::string::npos);
  CHECK(stream.find(R"(data: {"error":{"message":")") != std::string::npos);
  CHECK(stream.find("shutting down") != std::string::npos);
  CHECK(stream.size() >= 14);
  CHECK(stream.substr(stream.size() - 14) == "data: [DONE]\n\n");
}

}  // namespace
}  // namespace cacheroute::engine_emu
