// Fuzz target: what the gateway reads from OpenAI-compatible bodies
// (tools/frontend/openai_fields.h): a request body (ScanRequestFields, then RoutingKey) and a
// response body or SSE stream (ReadUsage, UsageScanner::Feed). The first input byte picks
// prefix_bytes and how the stream is cut into chunks; the rest is the body. Invariants: a system
// key is "system:" or "prompt:" and 16 hex digits; RoutingKey takes the first source the request
// has; cached_tokens <= prompt_tokens; UsageScanner finds the same usage however the stream is cut
// (lines here are far below kMaxLine).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/string_view.h"
#include "tests/fuzz/fuzz_check.h"
#include "tools/frontend/openai_fields.h"

namespace {

bool SameUsage(const std::optional<cacheroute::frontend::Usage>& a,
               const std::optional<cacheroute::frontend::Usage>& b) {
  if (a.has_value() != b.has_value()) return false;
  return !a.has_value() ||
         (a->prompt_tokens == b->prompt_tokens && a->cached_tokens == b->cached_tokens);
}

void CheckUsage(const std::optional<cacheroute::frontend::Usage>& u) {
  if (u.has_value() && u->cached_tokens.has_value()) {
    FUZZ_CHECK(*u->cached_tokens <= u->prompt_tokens);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace cacheroute::frontend;
  if (size == 0) return 0;
  const uint8_t control = data[0];
  const absl::string_view body(reinterpret_cast<const char*>(data + 1), size - 1);
  const size_t prefix_bytes = size_t{1} << (control & 0x0f);  // 1 … 32768

  const RequestFields fields = ScanRequestFields(body, prefix_bytes);
  if (fields.system.has_value()) {
    const std::string& s = *fields.system;
    const size_t colon = s.find(':');
    FUZZ_CHECK(colon != std::string::npos, s);
    const std::string_view kind(s.data(), colon);
    FUZZ_CHECK(kind == "system" || kind == "prompt", s);
    FUZZ_CHECK(s.size() == colon + 1 + 16, s);
    for (size_t i = colon + 1; i < s.size(); ++i) {
      FUZZ_CHECK((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f'), s);
    }
  }
  const std::vector<std::string> all = {"header", "user", "system"};
  const std::optional<std::string> none;
  const std::optional<std::string> header = std::string("h");
  FUZZ_CHECK(RoutingKey(all, header, fields) == header);
  FUZZ_CHECK(RoutingKey(all, std::string(), fields) == (fields.user ? fields.user : fields.system));
  FUZZ_CHECK(RoutingKey(all, none, fields) == (fields.user ? fields.user : fields.system));
  FUZZ_CHECK(RoutingKey({"system", "user"}, header, fields) ==
             (fields.system ? fields.system : fields.user));
  FUZZ_CHECK(RoutingKey({}, header, fields) == std::nullopt);

  // A response body, and the same bytes as an SSE stream fed whole, in chunks, byte by byte.
  CheckUsage(ReadUsage(body));
  UsageScanner whole;
  whole.Feed(body);
  CheckUsage(whole.usage());
  UsageScanner chunked;
  const size_t chunk = 1 + (control >> 4);  // 1 … 16
  for (size_t at = 0; at < body.size(); at += chunk) chunked.Feed(body.substr(at, chunk));
  FUZZ_CHECK(SameUsage(whole.usage(), chunked.usage()), "usage depends on how the stream is cut");
  UsageScanner split;
  const size_t half = body.size() / 2;
  split.Feed(body.substr(0, half));
  split.Feed(absl::string_view());
  split.Feed(body.substr(half));
  FUZZ_CHECK(SameUsage(whole.usage(), split.usage()), "usage depends on how the stream is cut");
  return 0;
}
