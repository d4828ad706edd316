// base::BearerToken (base/authorization.h): the Bearer scheme in any case, its credentials
// trimmed; other schemes give none.
#include "base/authorization.h"

#include <catch2/catch.hpp>

namespace cacheroute::base {
namespace {

TEST_CASE("BearerToken: the credentials of the Bearer scheme, whitespace around them removed") {
  CHECK(BearerToken("Bearer abc") == "abc");
  CHECK(BearerToken("Bearer   abc \t") == "abc");
  CHECK(BearerToken("Bearer ") == "");
  CHECK_FALSE(BearerToken("Basic YWJj").has_value());
  CHECK_FALSE(BearerToken("abc").has_value());
  CHECK_FALSE(BearerToken("Bearer").has_value());
  CHECK_FALSE(BearerToken("Bearerabc").has_value());
  CHECK_FALSE(BearerToken("").has_value());
}

TEST_CASE("BearerToken: the scheme's name is case-insensitive (RFC 9110, section 11.1)") {
  CHECK(BearerToken("bearer abc") == "abc");
  CHECK(BearerToken("BEARER abc") == "abc");
  CHECK(BearerToken("bEaReR abc") == "abc");
  CHECK_FALSE(BearerToken("bearers abc").has_value());
  CHECK_FALSE(BearerToken("xearer abc").has_value());
}

}  // namespace
}  // namespace cacheroute::base
