// KeyDeriver (tools/frontend/routing/key_deriver.h): the key a request gets from its header and
// body, and NeedsBody, which tells a front end that sees the headers first (an endpoint picker)
// whether it must wait for the body: when it says no, the body changes nothing.
#include <catch2/catch.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tools/frontend/routing/key_deriver.h"

namespace cacheroute::frontend {
namespace {

KeyDeriver With(std::vector<std::string> key_from) {
  FrontendConfig config;
  config.key_from = std::move(key_from);
  return KeyDeriver(config);
}

TEST_CASE("NeedsBody: only when a body source comes before a present key header") {
  const std::optional<std::string> header("tenant-1");
  const std::optional<std::string> none;
  const std::optional<std::string> empty("");
  CHECK_FALSE(With({"header", "user", "system"}).NeedsBody(header));
  CHECK(With({"header", "user", "system"}).NeedsBody(none));
  CHECK(With({"header", "user", "system"}).NeedsBody(empty));  // an empty header is no key
  CHECK(With({"user", "header"}).NeedsBody(header));
  CHECK(With({"system"}).NeedsBody(header));
  CHECK_FALSE(With({"header"}).NeedsBody(none));  // no body source: the body cannot give one
}

TEST_CASE("when NeedsBody is false the key is the same with or without the body") {
  const std::vector<std::string> bodies = {
      "", R"({"user":"u"})",
      R"({"messages":[{"role":"system","content":"s"},{"role":"user","content":"x"}]})"};
  for (const auto& key_from : std::vector<std::vector<std::string>>{
           {"header", "user", "system"}, {"header"}, {"header", "system"}}) {
    const KeyDeriver keys = With(key_from);
    for (const std::optional<std::string>& header :
         {std::optional<std::string>("h"), std::optional<std::string>()}) {
      if (keys.NeedsBody(header)) continue;
      for (const std::string& body : bodies) {
        INFO(body);
        CHECK(keys.KeyOf(header, body) == keys.KeyOf(header, ""));
      }
    }
  }
  // And when it is true, the body can matter.
  CHECK(With({"header", "user"}).KeyOf(std::nullopt, R"({"user":"u"})") == "u");
}

TEST_CASE("Derive: the key KeyOf gives, and the prompt from the same body") {
  const KeyDeriver keys = With({"header", "user", "system"});
  const std::string body =
      R"({"user":"u","prompt":")" + std::string(2 * kPromptBlockBytes + 5, 'p') + R"("})";
  const RoutingInput input = keys.Derive(std::nullopt, body);
  CHECK(input.key == keys.KeyOf(std::nullopt, body));
  CHECK(input.key == "u");
  CHECK(input.prompt.text_bytes == 2 * kPromptBlockBytes + 5);
  CHECK(input.block_hashes.size() == 2);
  const RoutingInput headed = keys.Derive(std::optional<std::string>("h"), body);
  CHECK(headed.key == "h");  // the header decides the key; the body still gives the prompt
  CHECK(headed.prompt.text_bytes == 2 * kPromptBlockBytes + 5);
  const RoutingInput empty = keys.Derive(std::optional<std::string>("h"), "");
  CHECK(empty.prompt.text_bytes == 0);
  CHECK(empty.block_hashes.empty());
}

}  // namespace
}  // namespace cacheroute::frontend
