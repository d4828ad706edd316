// Membership sources: where the gateway's list of upstreams comes from when it is not fixed in the
// configuration. Each function reads its source once and returns the whole list; the caller polls
// (re-reads the file on change, re-resolves the name every few seconds), compares the result with
// SameMembers, and keeps its current list when a read fails: no function here keeps state.
//
//   ReadUpstreamsFile   a YAML file, either a sequence of {name, url} or `upstreams:` holding one.
//   ResolveUpstreams    a DNS name (A and AAAA; e.g. a Kubernetes headless Service) via c-ares,
//                       one Upstream per address, all on the same port.
//
// Contract:
//  - Results are validated as ValidateFrontendConfig validates `upstreams`: at least one, distinct
//    non-empty names, URLs http://HOST:PORT. ResolveUpstreams sorts by name and drops duplicates.
//  - Bad input (file contents, DnsSource fields) is InvalidArgument naming the key and the value.
//    A missing file, or a name that does not exist or has no address, is NotFound; an unreadable
//    file, a DNS timeout or a failing server is Unavailable (transient: try again later).
//  - No exception leaves these functions. Every function is thread-safe; ResolveUpstreams blocks
//    the calling thread for at most about source.timeout (each call has its own c-ares channel, so
//    nothing is cached between calls).
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "tools/frontend/frontend_config.h"

namespace cacheroute::frontend {

// Reads an upstream list file: YAML, either a sequence of {name, url} mappings or a mapping with
// the one key `upstreams:` holding that sequence (the shape of deploy/gateway.yaml's `upstreams`).
// An empty file is an empty list (an error). Errors name the file and the key, the key spelled as
// under `upstreams:` in both shapes, e.g.
//   upstreams_file "/x.yaml": upstreams[2].url: must be http://HOST:PORT, got "ftp://a"
// A file that does not exist is NotFound, one that cannot be read Unavailable, both naming it.
absl::StatusOr<std::vector<Upstream>> ReadUpstreamsFile(const std::string& path);

struct DnsSource {
  std::string name;    // the DNS name, e.g. "vllm.serving.svc.cluster.local"
  int port = 0;        // the engines' port (1..65535), the same for every address
  std::string server;  // optional "IPV4:PORT" of the DNS server; empty: the system resolver
                       // (/etc/resolv.conf, with its search domains and /etc/hosts)
  absl::Duration timeout = absl::Seconds(2);  // for the whole resolution; positive
};

// Resolves source.name (A and AAAA records). Each address becomes
//   Upstream{name = "IP:PORT", url = "http://IP:PORT"}   ("[IPV6]:PORT" for IPv6 addresses)
// sorted by name, without duplicates. With `server` set the name is asked as given (no search
// domains, no /etc/hosts). Errors: bad fields are InvalidArgument (CheckDnsSource); a name that
// does not exist or has no address NotFound naming the name; a timeout or server failure
// Unavailable naming the name and the server(s).
absl::StatusOr<std::vector<Upstream>> ResolveUpstreams(const DnsSource& source);

// The fields' checks ResolveUpstreams makes first, for validating a configuration at load time:
// a non-empty name, port 1..65535, a positive timeout, a server that ParseDnsServer
// (frontend_config.h) accepts.
// Errors name `key`.name, `key`.port, ... and the value.
absl::Status CheckDnsSource(absl::string_view key, const DnsSource& source);

// Whether a and b hold the same set of (name, url) pairs, in any order.
bool SameMembers(const std::vector<Upstream>& a, const std::vector<Upstream>& b);

// Destination indices for a new membership, from the current one (current[i] is destination i's
// name; "" marks an index whose member left): members of `wanted` that stay keep their index; new
// ones take the holes, lowest first, then the end; holes still left are filled by moving the last
// member into the lowest, so the result is dense. At most `capacity` members: the rest of
// `wanted`, in its order, are left out. Pure.
std::vector<std::string> AssignIndices(const std::vector<std::string>& current,
                                       const std::vector<std::string>& wanted, size_t capacity);

}  // namespace cacheroute::frontend
