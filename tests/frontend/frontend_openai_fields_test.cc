// openai_fields.h: the routing key's sources in OpenAI request bodies and the served KV hit in
// responses and SSE streams, parsed with nlohmann::json.
#include <catch2/catch.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tools/frontend/openai_fields.h"

namespace cacheroute::frontend {
namespace {

TEST_CASE("request fields: user and stream are read from the top level only") {
  RequestFields f = ScanRequestFields(R"({"model":"m","user":"t-1","stream":true})");
  CHECK(f.user == "t-1");
  CHECK(f.stream);
  f = ScanRequestFields(
      R"({"messages":[{"role":"user","content":"{\"user\":\"x\"}"}],"stream":false})");
  CHECK_FALSE(f.user.has_value());
  CHECK_FALSE(f.stream);
  f = ScanRequestFields(R"( { "user" : "caf\u00e9 \ud83d\ude00" , "n": [1, {"a": "]"}] } )");
  CHECK(f.user == "caf\xc3\xa9 \xf0\x9f\x98\x80");
  CHECK_FALSE(ScanRequestFields(R"({"user": 7})").user.has_value());
  CHECK_FALSE(ScanRequestFields(R"({"user":"a")").user.has_value());  // truncated
  CHECK_FALSE(ScanRequestFields("not json").user.has_value());
  CHECK_FALSE(ScanRequestFields(R"(["user","a"])").user.has_value());
  CHECK_FALSE(ScanRequestFields(R"({"stream":"true"})").stream);  // a string is not true
}

TEST_CASE("system key: chat requests sharing a system prompt share a key, others do not") {
  const auto chat = [](const std::string& system, const std::string& question) {
    return ScanRequestFields(R"({"model":"m","messages":[{"role":"system","content":")" + system +
                             R"("},{"role":"user","content":")" + question + R"("}]})");
  };
  const RequestFields a = chat("You are a support bot for ACME.", "Where is my order?");
  const RequestFields b = chat("You are a support bot for ACME.", "Cancel it.");
  const RequestFields c = chat("You translate French.", "Where is my order?");
  REQUIRE(a.system.has_value());
  CHECK(a.system->rfind("system:", 0) == 0);
  CHECK(a.system == b.system);
  CHECK(a.system != c.system);
  // Content as text parts hashes like the same text as a string.
  const RequestFields parts = ScanRequestFields(
      R"({"messages":[{"role":"system","content":[{"type":"text","text":"You are a support bot for ACME."}]},)"
      R"({"role":"user","content":"x"}]})");
  CHECK(parts.system == a.system);
  // No system message: no system key.
  CHECK_FALSE(
      ScanRequestFields(R"({"messages":[{"role":"user","content":"hi"}]})").system.has_value());
}

TEST_CASE("prompt key: completions sharing their first prefix_bytes share a key") {
  const std::string head(64, 'p');
  const RequestFields a = ScanRequestFields(R"({"prompt":")" + head + R"(one"})", 64);
  const RequestFields b = ScanRequestFields(R"({"prompt":")" + head + R"(two"})", 64);
  const RequestFields longer = ScanRequestFields(R"({"prompt":")" + head + R"(one"})", 65);
  REQUIRE(a.system.has_value());
  CHECK(a.system->rfind("prompt:", 0) == 0);
  CHECK(a.system == b.system);
  CHECK(a.system != longer.system);
  // A list of prompts: the first; token ids: the first prefix_bytes / 4 ids.
  CHECK(ScanRequestFields(R"({"prompt":[")" + head + R"(one","x"]})", 64).system == a.system);
  CHECK(ScanRequestFields(R"({"prompt":[1,2,3,4,5]})", 16).system ==
        ScanRequestFields(R"({"prompt":[1,2,3,4,9]})", 16).system);
  CHECK(ScanRequestFields(R"({"prompt":[1,2,3,4,5]})", 20).system !=
        ScanRequestFields(R"({"prompt":[1,2,3,4,9]})", 20).system);
  CHECK_FALSE(ScanRequestFields(R"({"prompt":""})").system.has_value());
}

TEST_CASE("prompt: chat counts each message's role and text, completions their prompt") {
  RequestFields f = ScanRequestFields(
      R"({"messages":[{"role":"system","content":"be brief"},)"
      R"({"role":"user","content":[{"type":"text","text":"hi"},{"type":"image_url"}]}]})");
  // "system" + "be brief" + NUL, "user" + "hi" + NUL
  CHECK(f.prompt.text_bytes == 6 + 8 + 1 + 4 + 2 + 1);
  CHECK(f.prompt.token_ids == 0);
  CHECK(ScanRequestFields(R"({"prompt":"hello"})").prompt.text_bytes == 5);
  f = ScanRequestFields(R"({"prompt":["abc","de"]})");  // a batch: every prompt counts
  CHECK(f.prompt.text_bytes == 5);
  f = ScanRequestFields(R"({"prompt":[1,2,3]})");
  CHECK(f.prompt.token_ids == 3);
  CHECK(f.prompt.text_bytes == 0);
  CHECK(ScanRequestFields(R"({"prompt":[[1,2],[3,4,5]]})").prompt.token_ids == 5);
  CHECK(ScanRequestFields("not json").prompt.text_bytes == 0);
  CHECK(ScanRequestFields(R"({"model":"m"})").prompt.text_bytes == 0);
}

TEST_CASE("prompt blocks: whole blocks only, each hash naming its whole prefix") {
  const auto blocks = [](const std::string& prompt) {
    return ScanRequestFields(R"({"prompt":")" + prompt + R"("})").block_hashes;
  };
  const std::string a(kPromptBlockBytes, 'a'), b(kPromptBlockBytes, 'b');
  CHECK(blocks(a.substr(1)).empty());  // a partial block has no hash
  const std::vector<uint64_t> ab = blocks(a + b + "tail");
  REQUIRE(ab.size() == 2);
  CHECK(blocks(a + b) == ab);                      // the tail does not change whole blocks
  CHECK(blocks(a + b + a).front() == ab.front());  // a shared first block, the same hash
  const std::vector<uint64_t> bb = blocks(b + b);
  REQUIRE(bb.size() == 2);
  CHECK(bb[1] != ab[1]);  // the same block after another prefix: another hash
  // Chat: the rendered messages, so the same conversation so far gives the same blocks.
  const std::string turn = R"({"role":"user","content":")" + a + R"("})";
  const std::vector<uint64_t> one =
      ScanRequestFields(R"({"messages":[)" + turn + "]}").block_hashes;
  const std::vector<uint64_t> two =
      ScanRequestFields(R"({"messages":[)" + turn + "," + turn + "]}").block_hashes;
  REQUIRE(one.size() == 1);
  REQUIRE(two.size() == 2);
  CHECK(two[0] == one[0]);
  // Token ids: blocks of kPromptBlockIds ids.
  std::string ids;
  for (size_t i = 0; i < 2 * kPromptBlockIds + 3; ++i) ids += (i ? "," : "") + std::to_string(i);
  CHECK(ScanRequestFields(R"({"prompt":[)" + ids + "]}").block_hashes.size() == 2);
}

TEST_CASE("RoutingKey: the first source the request has, in key_from's order") {
  RequestFields f;
  f.user = "u";
  f.system = "system:1";
  const std::vector<std::string> all = {"header", "user", "system"};
  CHECK(RoutingKey(all, std::string("h"), f) == "h");
  CHECK(RoutingKey(all, std::nullopt, f) == "u");
  CHECK(RoutingKey(all, std::string(""), f) == "u");  // an empty header is no key
  CHECK(RoutingKey({"system", "user"}, std::string("h"), f) == "system:1");
  f.user.reset();
  CHECK(RoutingKey(all, std::nullopt, f) == "system:1");
  CHECK_FALSE(RoutingKey({"header", "user"}, std::nullopt, f).has_value());
}

TEST_CASE("ErrorBody: OpenAI's error shape, the message escaped and made valid UTF-8") {
  CHECK(ErrorBody("no upstream is up", "service_unavailable", "no_upstream") ==
        R"({"error":{"code":"no_upstream","message":"no upstream is up","param":null,)"
        R"("type":"service_unavailable"}})");
  CHECK(ErrorBody("a \"quoted\"\nline \xff", "invalid_request_error", "") ==
        R"({"error":{"code":null,"message":"a \"quoted\"\nline )"
        "\xef\xbf\xbd"
        R"(","param":null,)"
        R"("type":"invalid_request_error"}})");
}

TEST_CASE("ModelIdOfPath: the id of /v1/models/{id}, percent-decoded") {
  CHECK(ModelIdOfPath("/v1/models/cacheroute-emu") == "cacheroute-emu");
  CHECK(ModelIdOfPath("/v1/models/meta-llama%2FLlama-3.1-8B") == "meta-llama/Llama-3.1-8B");
  CHECK(ModelIdOfPath("/v1/models/meta-llama%2fx") == "meta-llama/x");
  CHECK(ModelIdOfPath("/v1/models/org/name") == "org/name");  // a raw '/' stays in the id
  CHECK_FALSE(ModelIdOfPath("/v1/models/").has_value());
  CHECK_FALSE(ModelIdOfPath("/v1/models").has_value());
  CHECK_FALSE(ModelIdOfPath("/v1/modelsx/a").has_value());
  CHECK_FALSE(ModelIdOfPath("/v1/models/a%2").has_value());
  CHECK_FALSE(ModelIdOfPath("/v1/models/a%zz").has_value());
}

TEST_CASE("FindModel: the entry of an id in a /v1/models list, fields in the list's order") {
  const std::string list =
      R"({"object":"list","data":[{"id":"a","object":"model","owned_by":"vllm"},)"
      R"({"id":"b/c","root":"b/c","object":"model"}]})";
  CHECK(*FindModel(list, "b/c") ==
        std::optional<std::string>(R"({"id":"b/c","root":"b/c","object":"model"})"));
  CHECK(*FindModel(list, "a") ==
        std::optional<std::string>(R"({"id":"a","object":"model","owned_by":"vllm"})"));
  CHECK_FALSE(FindModel(list, "x")->has_value());
  CHECK_FALSE(FindModel(R"({"object":"list","data":[{"name":"a"},3]})", "a")->has_value());
  for (const char* bad : {"", "[]", R"({"data":{}})", "not json"}) {
    INFO(bad);
    CHECK(absl::IsInvalidArgument(FindModel(bad, "a").status()));
  }
}

TEST_CASE(
    "usage: prompt, cached and completion tokens from a body, absent or bad fields give nothing") {
  std::optional<Usage> u = ReadUsage(
      R"({"usage":{"prompt_tokens":120,"completion_tokens":5,"prompt_tokens_details":{"cached_tokens":96}}})");
  REQUIRE(u.has_value());
  CHECK(u->prompt_tokens == 120);
  CHECK(u->cached_tokens == 96u);
  CHECK(u->completion_tokens == 5);
  u = ReadUsage(R"({"usage":{"prompt_tokens":7}})");
  REQUIRE(u.has_value());
  CHECK_FALSE(u->cached_tokens.has_value());  // the engine did not report it
  CHECK(u->completion_tokens == 0);
  // More cached than prompt tokens is not believed.
  CHECK_FALSE(
      ReadUsage(R"({"usage":{"prompt_tokens":7,"prompt_tokens_details":{"cached_tokens":9}}})")
          ->cached_tokens.has_value());
  CHECK_FALSE(ReadUsage(R"({"usage":null})").has_value());
  CHECK_FALSE(ReadUsage(R"({"usage":{"prompt_tokens":-1}})").has_value());
  CHECK_FALSE(ReadUsage("{").has_value());
}

TEST_CASE("UsageScanner: finds the usage event of an SSE stream however it is split") {
  const std::string stream =
      "data: {\"choices\":[{\"text\":\"a\"}]}\n\n"
      "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":50,\"prompt_tokens_details\":"
      "{\"cached_tokens\":32}}}\r\n\r\n"
      "data: [DONE]\n\n";
  for (size_t step : {1u, 3u, 7u, 1000u}) {
    UsageScanner scanner;
    for (size_t i = 0; i < stream.size(); i += step) scanner.Feed(stream.substr(i, step));
    INFO("fed " << step << " bytes at a time");
    REQUIRE(scanner.usage().has_value());
    CHECK(scanner.usage()->prompt_tokens == 50);
    CHECK(scanner.usage()->cached_tokens == 32u);
  }
  UsageScanner none;
  none.Feed("data: {\"choices\":[]}\n\ndata: [DONE]\n\n");
  CHECK_FALSE(none.usage().has_value());
  // A line longer than kMaxLine is skipped, and the scanner goes on after it.
  UsageScanner big;
  big.Feed("data: {\"usage\":\"" + std::string(UsageScanner::kMaxLine + 10, 'x'));
  big.Feed("\"}\ndata: {\"usage\":{\"prompt_tokens\":3}}\n");
  REQUIRE(big.usage().has_value());
  CHECK(big.usage()->prompt_tokens == 3);
}

}  // namespace
}  // namespace cacheroute::frontend
