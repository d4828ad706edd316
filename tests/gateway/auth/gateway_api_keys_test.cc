// ApiKeys (tools/gateway/auth/api_keys.h): key files read from real files, and which
// Authorization values pass.
#include <catch2/catch.hpp>

#include "absl/strings/match.h"
#include "tests/support/require_ok.h"
#include "tests/support/temp_dir.h"
#include "tools/gateway/auth/api_keys.h"

namespace cacheroute::gateway {
namespace {

TEST_CASE("without api_key_file every request passes") {
  const ApiKeys keys = testing::RequireOk(ApiKeys::Load(""));
  CHECK_FALSE(keys.enabled());
  CHECK(keys.Authorized(std::nullopt));
  CHECK(keys.Authorized("Basic x"));
}

TEST_CASE("a key file: one key a line, blanks and comments ignored; only listed keys pass") {
  testing::TempDir dir("api_keys_test");
  const std::string path = dir.Write("keys", "# team a\n  key-a  \n\nkey-b\n#key-c\n");
  const ApiKeys keys = testing::RequireOk(ApiKeys::Load(path));
  CHECK(keys.enabled());
  CHECK(keys.Authorized("Bearer key-a"));
  CHECK(keys.Authorized("Bearer key-b "));
  CHECK(keys.Authorized("bearer key-a"));  // the scheme in any case (RFC 9110)
  CHECK(keys.Authorized("BEARER key-a"));
  CHECK_FALSE(keys.Authorized("Bearer key-c"));  // commented out
  CHECK_FALSE(keys.Authorized("Bearer #key-c"));
  CHECK_FALSE(keys.Authorized("Bearer key"));
  CHECK_FALSE(keys.Authorized("Basic key-a"));
  CHECK_FALSE(keys.Authorized("key-a"));
  CHECK_FALSE(keys.Authorized(std::nullopt));
}

TEST_CASE("a key file that cannot serve is an error naming api_key_file and the path") {
  testing::TempDir dir("api_keys_test");
  const std::string blank = dir.Write("blank", " \n\n");
  const std::string comments = dir.Write("comments", "# only a comment\n");
  const std::string missing = dir.File("missing");
  for (const std::string& path : {blank, comments, missing}) {
    const absl::StatusOr<ApiKeys> keys = ApiKeys::Load(path);
    INFO(keys.status());
    CHECK(absl::IsInvalidArgument(keys.status()));
    CHECK(absl::StrContains(keys.status().message(), "api_key_file"));
    CHECK(absl::StrContains(keys.status().message(), path));
  }
  CHECK(absl::StrContains(ApiKeys::Load(comments).status().message(), "holds no key"));
}

}  // namespace
}  // namespace cacheroute::gateway
