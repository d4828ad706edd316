// Membership sources (tools/frontend/membership/sources.h): the upstreams file in both shapes and
// its errors, DNS resolution with c-ares against a real DNS server on loopback
// (support/dns_server.h), and SameMembers.
#include <catch2/catch.hpp>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "support/dns_server.h"
#include "support/temp_dir.h"
#include "tools/frontend/membership/sources.h"

namespace cacheroute::frontend {
namespace {

using cacheroute::testing::DnsServer;
using cacheroute::testing::TempDir;

std::vector<std::string> Names(const std::vector<Upstream>& upstreams) {
  std::vector<std::string> names;
  for (const Upstream& u : upstreams) names.push_back(u.name);
  return names;
}

// The error of reading `content` from a file, which must name the file.
std::string FileError(const std::string& content) {
  TempDir dir("gateway_membership_test");
  const std::string path = dir.Write("upstreams.yaml", content);
  absl::StatusOr<std::vector<Upstream>> upstreams = ReadUpstreamsFile(path);
  REQUIRE_FALSE(upstreams.ok());
  CHECK(upstreams.status().code() == absl::StatusCode::kInvalidArgument);
  const std::string message(upstreams.status().message());
  CHECK(absl::StartsWith(message, "upstreams_file \"" + path + "\": "));
  return message;
}

DnsSource Source(const DnsServer& dns, const std::string& name) {
  DnsSource source;
  source.name = name;
  source.port = 8000;
  source.server = dns.address();
  source.timeout = absl::Seconds(2);
  return source;
}

TEST_CASE("an upstreams file is read in both shapes") {
  TempDir dir("gateway_membership_test");
  const std::string list = dir.Write("list.yaml", R"(
- {name: engine-0, url: "http://127.0.0.1:8001"}
- name: engine-1
  url: http://[::1]:8002/
)");
  const std::string mapping = dir.Write("mapping.yaml", R"(
upstreams:
  - {name: engine-0, url: "http://127.0.0.1:8001"}
  - {name: engine-1, url: "http://[::1]:8002/"}
)");
  for (const std::string& path : {list, mapping}) {
    INFO(path);
    absl::StatusOr<std::vector<Upstream>> upstreams = ReadUpstreamsFile(path);
    REQUIRE(upstreams.ok());
    REQUIRE(upstreams->size() == 2);
    CHECK((*upstreams)[0].name == "engine-0");
    CHECK((*upstreams)[0].url == "http://127.0.0.1:8001");
    CHECK((*upstreams)[1].name == "engine-1");
    CHECK((*upstreams)[1].url == "http://[::1]:8002/");  // as written, like the configuration
  }
}

TEST_CASE("a second read of the upstreams file sees its change") {
  TempDir dir("gateway_membership_test");
  const std::string path =
      dir.Write("upstreams.yaml", "- {name: a, url: \"http://10.0.0.1:80\"}\n");
  absl::StatusOr<std::vector<Upstream>> first = ReadUpstreamsFile(path);
  REQUIRE(first.ok());
  CHECK(Names(*first) == std::vector<std::string>{"a"});

  dir.Write("upstreams.yaml",
            "upstreams:\n  - {name: a, url: \"http://10.0.0.1:80\"}\n"
            "  - {name: b, url: \"http://10.0.0.2:80\"}\n");
  absl::StatusOr<std::vector<Upstream>> second = ReadUpstreamsFile(path);
  REQUIRE(second.ok());
  CHECK(Names(*second) == std::vector<std::string>{"a", "b"});
  CHECK_FALSE(SameMembers(*first, *second));
}

TEST_CASE("a bad upstreams file is an error naming the file and the key") {
  struct Case {
    std::string content;
    std::string text;
  };
  // The whole message after the file's name.
  const std::vector<Case> ends_with = {
      {"- {name: a}\n", "upstreams[0].url: missing"},
      {"- {url: \"http://h:1\"}\n", "upstreams[0].name: missing"},
      {"- {name: a, url: \"http://h:1\"}\n- {name: a, url: \"http://h:2\"}\n",
       "upstreams[1].name: duplicate name \"a\""},
      {"- {name: a, url: \"http://h:1\"}\n- {name: b, url: \"http://h:2\"}\n"
       "- {name: c, url: \"ftp://a\"}\n",
       "upstreams[2].url: must be http://HOST:PORT, got \"ftp://a\""},
      {"[]\n", "upstreams: must list at least one upstream, got none"},
  };
  // A part of the message.
  const std::vector<Case> contains = {
      {"upstreams: [ {name: a", "line "},
      {"just text", "a list of {name, url}"},
      {"- {name: a, url: \"http://h:0\"}\n", "upstreams[0].url: "},
      {"- {name: a, url: \"http://h:1\", weight: 2}\n", "upstreams[0].weight: unknown key"},
      {"upstreams: []\n", "upstreams: must list at least one"},
      {"", "upstreams: must list at least one"},
      {"upstreams:\n", "upstreams: expected a list"},
      {"policy: sticky\n", "policy: unknown key"},
      {"upstreams: []\nupstreams: []\n", "more than once"},
      {"- {name: a, url: \"http://h:1\"}\n---\n- {name: b, url: \"http://h:2\"}\n",
       "one YAML document"},
  };
  for (const Case& c : ends_with) {
    INFO("content: " << c.content);
    CHECK_THAT(FileError(c.content), Catch::EndsWith(c.text));
  }
  for (const Case& c : contains) {
    INFO("content: " << c.content);
    CHECK_THAT(FileError(c.content), Catch::Contains(c.text));
  }
}

TEST_CASE("an upstreams file that is missing or unreadable is NotFound or Unavailable") {
  TempDir dir("gateway_membership_test");
  const std::string missing = dir.File("missing.yaml");
  absl::StatusOr<std::vector<Upstream>> none = ReadUpstreamsFile(missing);
  CHECK(none.status().code() == absl::StatusCode::kNotFound);
  CHECK_THAT(std::string(none.status().message()), Catch::Contains(missing));

  absl::StatusOr<std::vector<Upstream>> directory = ReadUpstreamsFile(dir.path().string());
  CHECK(directory.status().code() == absl::StatusCode::kUnavailable);
  CHECK_THAT(std::string(directory.status().message()), Catch::Contains(dir.path().string()));
}

TEST_CASE("DNS: A records become sorted upstreams on the port, and changes are seen") {
  DnsServer dns;
  dns.SetA("vllm.serving.test", {"127.0.0.3", "127.0.0.2"});
  const DnsSource source = Source(dns, "vllm.serving.test");

  absl::StatusOr<std::vector<Upstream>> upstreams = ResolveUpstreams(source);
  REQUIRE(upstreams.ok());
  CHECK(Names(*upstreams) == std::vector<std::string>{"127.0.0.2:8000", "127.0.0.3:8000"});
  CHECK((*upstreams)[0].url == "http://127.0.0.2:8000");
  CHECK((*upstreams)[1].url == "http://127.0.0.3:8000");
  for (const Upstream& u : *upstreams) CHECK(ParseUpstreamUrl(u.name, u.url).ok());

  dns.SetA("VLLM.Serving.test", {"127.0.0.4", "127.0.0.2", "127.0.0.5"});
  absl::StatusOr<std::vector<Upstream>> changed = ResolveUpstreams(source);
  REQUIRE(changed.ok());
  CHECK(Names(*changed) ==
        std::vector<std::string>{"127.0.0.2:8000", "127.0.0.4:8000", "127.0.0.5:8000"});
  CHECK_FALSE(SameMembers(*upstreams, *changed));
}

TEST_CASE("DNS: AAAA records go in brackets; both families together; duplicates dropped") {
  DnsServer dns;
  dns.SetAAAA("v6.test", {"::1"});
  absl::StatusOr<std::vector<Upstream>> v6 = ResolveUpstreams(Source(dns, "v6.test"));
  REQUIRE(v6.ok());
  REQUIRE(v6->size() == 1);
  CHECK((*v6)[0].name == "[::1]:8000");
  CHECK((*v6)[0].url == "http://[::1]:8000");
  absl::StatusOr<UpstreamAddress> address = ParseUpstreamUrl("url", (*v6)[0].url);
  REQUIRE(address.ok());
  CHECK(address->host == "::1");

  dns.SetA("both.test", {"127.0.0.2", "127.0.0.2"});
  dns.SetAAAA("both.test", {"::1", "::1"});
  absl::StatusOr<std::vector<Upstream>> both = ResolveUpstreams(Source(dns, "both.test"));
  REQUIRE(both.ok());
  CHECK(Names(*both) == std::vector<std::string>{"127.0.0.2:8000", "[::1]:8000"});
}

TEST_CASE("DNS: an unknown name, or one without addresses, is NotFound naming it") {
  DnsServer dns;
  absl::StatusOr<std::vector<Upstream>> unknown = ResolveUpstreams(Source(dns, "nobody.test"));
  CHECK(unknown.status().code() == absl::StatusCode::kNotFound);
  CHECK_THAT(std::string(unknown.status().message()), Catch::Contains("\"nobody.test\""));

  dns.SetA("empty.test", {});
  absl::StatusOr<std::vector<Upstream>> empty = ResolveUpstreams(Source(dns, "empty.test"));
  CHECK(empty.status().code() == absl::StatusCode::kNotFound);
  CHECK_THAT(std::string(empty.status().message()), Catch::Contains("\"empty.test\""));

  dns.SetA("gone.test", {"127.0.0.2"});
  REQUIRE(ResolveUpstreams(Source(dns, "gone.test")).ok());
  dns.Remove("gone.test");
  CHECK(ResolveUpstreams(Source(dns, "gone.test")).status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("DNS: a silent server is Unavailable after the timeout, naming the name and server") {
  DnsServer dns;
  dns.SetA("vllm.test", {"127.0.0.2"});
  dns.SetSilent(true);
  DnsSource source = Source(dns, "vllm.test");
  source.timeout = absl::Milliseconds(300);
  absl::StatusOr<std::vector<Upstream>> upstreams = ResolveUpstreams(source);  // it returns
  CHECK(upstreams.status().code() == absl::StatusCode::kUnavailable);
  const std::string message(upstreams.status().message());
  CHECK_THAT(message, Catch::Contains("\"vllm.test\""));
  CHECK_THAT(message, Catch::Contains(dns.address()));
  CHECK(dns.queries() >= 1);

  dns.SetSilent(false);  // and it recovers
  CHECK(ResolveUpstreams(source).ok());
}

TEST_CASE("DNS: resolving from several threads at once") {
  DnsServer dns;
  dns.SetA("vllm.test", {"127.0.0.2", "127.0.0.3"});
  std::vector<std::thread> threads;
  std::vector<int> ok(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 10; ++i) {
        absl::StatusOr<std::vector<Upstream>> upstreams =
            ResolveUpstreams(Source(dns, "vllm.test"));
        if (upstreams.ok() && upstreams->size() == 2) ++ok[t];
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  CHECK(ok == std::vector<int>(4, 10));
}

TEST_CASE("DNS: bad source fields are InvalidArgument naming the field and the value") {
  DnsServer dns;
  for (const char* server :
       {"localhost:53", "127.0.0.1", "127.0.0.1:0", "127.0.0.1:65536", "127.0.0.1:x", ":53",
        "[::1]:53", "127.0.0.1:53:53", " 127.0.0.1:53"}) {
    INFO(server);
    DnsSource source = Source(dns, "vllm.test");
    source.server = server;
    absl::StatusOr<std::vector<Upstream>> upstreams = ResolveUpstreams(source);
    CHECK(upstreams.status().code() == absl::StatusCode::kInvalidArgument);
    const std::string message(upstreams.status().message());
    CHECK_THAT(message, Catch::StartsWith("source.server: "));
    CHECK_THAT(message, Catch::Contains(std::string("\"") + server + "\""));
    CHECK(ParseDnsServer("upstreams_dns.server", server).status().code() ==
          absl::StatusCode::kInvalidArgument);
  }
  absl::StatusOr<DnsServerAddress> parsed = ParseDnsServer("server", "10.96.0.10:53");
  REQUIRE(parsed.ok());
  CHECK(parsed->ip == "10.96.0.10");
  CHECK(parsed->port == 53);

  DnsSource source = Source(dns, "vllm.test");
  source.port = 0;
  CHECK_THAT(std::string(CheckDnsSource("dns", source).message()),
             Catch::Equals("dns.port: must be between 1 and 65535, got 0"));
  source = Source(dns, "");
  CHECK_THAT(std::string(ResolveUpstreams(source).status().message()),
             Catch::StartsWith("source.name: "));
  source = Source(dns, "vllm.test");
  source.timeout = absl::ZeroDuration();
  CHECK_THAT(std::string(CheckDnsSource("", source).message()), Catch::StartsWith("timeout: "));
  CHECK(CheckDnsSource("dns", Source(dns, "vllm.test")).ok());
}

TEST_CASE("SameMembers compares (name, url) pairs in any order") {
  const Upstream a{"a", "http://10.0.0.1:80"}, b{"b", "http://10.0.0.2:80"};
  CHECK(SameMembers({}, {}));
  CHECK(SameMembers({a, b}, {b, a}));
  CHECK_FALSE(SameMembers({a, b}, {a}));
  CHECK_FALSE(SameMembers({a}, {Upstream{"a", "http://10.0.0.9:80"}}));
  CHECK_FALSE(SameMembers({a}, {Upstream{"a2", a.url}}));
}

TEST_CASE("AssignIndices keeps the indices of members that stay and stays dense") {
  using Names = std::vector<std::string>;
  // The first membership: in the order given.
  CHECK(AssignIndices({}, {"a", "b", "c"}, 8) == Names{"a", "b", "c"});
  // Nothing changed, in another order: the same indices.
  CHECK(AssignIndices({"a", "b", "c"}, {"c", "a", "b"}, 8) == Names{"a", "b", "c"});
  // One joins: at the end.
  CHECK(AssignIndices({"a", "b", "c"}, {"d", "c", "b", "a"}, 8) == Names{"a", "b", "c", "d"});
  // One leaves and one joins: the new one takes the hole.
  CHECK(AssignIndices({"a", "b", "c"}, {"a", "c", "x"}, 8) == Names{"a", "x", "c"});
  // One leaves: the last moves into its hole.
  CHECK(AssignIndices({"a", "b", "c", "d"}, {"a", "c", "d"}, 8) == Names{"a", "d", "c"});
  // The last leaves: nothing moves.
  CHECK(AssignIndices({"a", "b", "c", "d"}, {"a", "b", "c"}, 8) == Names{"a", "b", "c"});
  // Two leave, one of them last: one move.
  CHECK(AssignIndices({"a", "b", "c", "d", "e"}, {"a", "c", "d"}, 8) == Names{"a", "d", "c"});
  // All leave.
  CHECK(AssignIndices({"a", "b"}, {}, 8).empty());
  // Past the capacity: the rest of `wanted` is left out, in its order.
  CHECK(AssignIndices({"a"}, {"a", "b", "c", "d"}, 3) == Names{"a", "b", "c"});
  // A hole marker ("") in the current list: a member whose URL changed, placed anew.
  CHECK(AssignIndices({"a", "", "c"}, {"a", "b", "c"}, 8) == Names{"a", "b", "c"});
}

}  // namespace
}  // namespace cacheroute::frontend
