// Membership sources (sources.h): the upstreams file, parsed by the configuration loader's
// own `upstreams` parser (ParseUpstreamListYaml, so the checks and messages are the
// configuration's), and DNS resolution with c-ares.
//
// DNS: one c-ares channel per call, driven with ares_getsock + poll + ares_process_fd (not select:
// in a gateway holding thousands of connections the resolver's socket may be above FD_SETSIZE),
// until the query's callback has run or the deadline passed (then ares_cancel).
#include "tools/frontend/membership/sources.h"

#include <ares.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/status_macros.h"
#include "base/yaml_fields.h"

namespace cacheroute::frontend {
namespace {

using base::yaml::Invalid;
using base::yaml::Quote;

// ---- The upstreams file. ----

// The whole file, or NotFound / Unavailable naming `what` (the `upstreams_file "PATH"` prefix).
absl::StatusOr<std::string> ReadWholeFile(const std::string& path, absl::string_view what) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    const std::string message = absl::StrCat(what, ": cannot open: ", std::strerror(error));
    if (error == ENOENT || error == ENOTDIR) return absl::NotFoundError(message);
    return absl::UnavailableError(message);
  }
  std::string content;
  char buffer[64 * 1024];
  while (true) {
    const ssize_t n = read(fd, buffer, sizeof buffer);
    if (n > 0) {
      content.append(buffer, static_cast<size_t>(n));
    } else if (n == 0) {
      break;
    } else if (errno != EINTR) {
      const int error = errno;
      close(fd);
      return absl::UnavailableError(absl::StrCat(what, ": cannot read: ", std::strerror(error)));
    }
  }
  close(fd);
  return content;
}

// ---- DNS. ----

absl::Status AresLibraryInit() {
  static std::once_flag once;
  static int status = ARES_SUCCESS;
  std::call_once(once, [] { status = ares_library_init(ARES_LIB_INIT_ALL); });
  if (status == ARES_SUCCESS) return absl::OkStatus();
  return absl::InternalError(absl::StrCat("ares_library_init: ", ares_strerror(status)));
}

std::string FormatHostPort(absl::string_view ip, bool v6, int port) {
  return v6 ? absl::StrCat("[", ip, "]:", port) : absl::StrCat(ip, ":", port);
}

// What the query's callback reports; lives on ResolveUpstreams' stack, past the channel.
struct Lookup {
  bool done = false;
  // ARES_ETIMEOUT until the callback runs.
  int status = ARES_ETIMEOUT;
  std::vector<std::pair<std::string, bool>> addresses;  // (IP text, is IPv6)
};

void OnAddrInfo(void* arg, int status, int /*timeouts*/, struct ares_addrinfo* result) {
  Lookup& lookup = *static_cast<Lookup*>(arg);
  lookup.done = true;
  lookup.status = status;
  if (result == nullptr) return;
  for (const ares_addrinfo_node* node = result->nodes; node != nullptr; node = node->ai_next) {
    char text[INET6_ADDRSTRLEN] = {};
    if (node->ai_family == AF_INET && node->ai_addr != nullptr) {
      const auto* in = reinterpret_cast<const sockaddr_in*>(node->ai_addr);
      if (inet_ntop(AF_INET, &in->sin_addr, text, sizeof text) != nullptr) {
        lookup.addresses.emplace_back(text, false);
      }
    } else if (node->ai_family == AF_INET6 && node->ai_addr != nullptr) {
      const auto* in6 = reinterpret_cast<const sockaddr_in6*>(node->ai_addr);
      if (inet_ntop(AF_INET6, &in6->sin6_addr, text, sizeof text) != nullptr) {
        lookup.addresses.emplace_back(text, true);
      }
    }
  }
  ares_freeaddrinfo(result);
}

struct ChannelDeleter {
  void operator()(ares_channel channel) const { ares_destroy(channel); }
};
using Channel = std::unique_ptr<std::remove_pointer_t<ares_channel>, ChannelDeleter>;

// The servers a channel asks, for error messages: "DNS server 10.96.0.10:53".
std::string DescribeServers(ares_channel channel, const DnsSource& source) {
  if (!source.server.empty()) return absl::StrCat("DNS server ", source.server);
  struct ares_addr_port_node* servers = nullptr;
  std::vector<std::string> names;
  if (ares_get_servers_ports(channel, &servers) == ARES_SUCCESS) {
    for (const ares_addr_port_node* s = servers; s != nullptr; s = s->next) {
      char text[INET6_ADDRSTRLEN] = {};
      const bool v6 = s->family == AF_INET6;
      if (inet_ntop(s->family,
                    v6 ? static_cast<const void*>(&s->addr.addr6)
                       : static_cast<const void*>(&s->addr.addr4),
                    text, sizeof text) != nullptr) {
        names.push_back(FormatHostPort(text, v6, s->udp_port != 0 ? s->udp_port : 53));
      }
    }
    ares_free_data(servers);
  }
  if (names.empty()) return "the system's DNS servers (/etc/resolv.conf)";
  return absl::StrCat("DNS server", names.size() > 1 ? "s " : " ", absl::StrJoin(names, ", "),
                      " (/etc/resolv.conf)");
}

// Runs the channel until lookup.done or the deadline (then cancels: the callback runs with
// ARES_ECANCELLED). Returns a non-OK status only if poll itself fails.
absl::Status Drive(ares_channel channel, const Lookup& lookup, absl::Time deadline) {
  while (!lookup.done) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      ares_cancel(channel);
      return absl::OkStatus();
    }
    ares_socket_t sockets[ARES_GETSOCK_MAXNUM];
    const int bits = ares_getsock(channel, sockets, ARES_GETSOCK_MAXNUM);
    std::vector<pollfd> fds;
    for (int i = 0; i < ARES_GETSOCK_MAXNUM; ++i) {
      short events = 0;
      if (ARES_GETSOCK_READABLE(bits, i)) events |= POLLIN;
      if (ARES_GETSOCK_WRITABLE(bits, i)) events |= POLLOUT;
      if (events != 0) fds.push_back(pollfd{sockets[i], events, 0});
    }
    struct timeval max_wait = absl::ToTimeval(left);
    struct timeval wait_buffer {};
    const struct timeval* wait = ares_timeout(channel, &max_wait, &wait_buffer);
    const double wait_ms = std::ceil(wait->tv_sec * 1e3 + wait->tv_usec / 1e3);
    const int ready = poll(fds.data(), fds.size(), static_cast<int>(std::max(wait_ms, 0.0)));
    if (ready < 0) {
      if (errno == EINTR) continue;
      const int error = errno;
      ares_cancel(channel);
      return absl::InternalError(absl::StrCat("poll: ", std::strerror(error)));
    }
    if (ready == 0) {
      ares_process_fd(channel, ARES_SOCKET_BAD, ARES_SOCKET_BAD);  // timeouts and retries
      continue;
    }
    for (const pollfd& p : fds) {
      if (p.revents == 0) continue;
      const bool readable = (p.revents & (POLLIN | POLLERR | POLLHUP)) != 0;
      const bool writable = (p.revents & POLLOUT) != 0;
      ares_process_fd(channel, readable ? p.fd : ARES_SOCKET_BAD,
                      writable ? p.fd : ARES_SOCKET_BAD);
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<Upstream>> ReadUpstreamsFile(const std::string& path) {
  const std::string what = absl::StrCat("upstreams_file ", Quote(path));
  CACHEROUTE_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path, what));
  absl::StatusOr<std::vector<Upstream>> upstreams = ParseUpstreamListYaml(text);
  if (!upstreams.ok()) {
    return absl::Status(upstreams.status().code(),
                        absl::StrCat(what, ": ", upstreams.status().message()));
  }
  return upstreams;
}

absl::Status CheckDnsSource(absl::string_view key, const DnsSource& source) {
  const auto field = [key](absl::string_view name) {
    return key.empty() ? std::string(name) : absl::StrCat(key, ".", name);
  };
  if (source.name.empty()) return Invalid(field("name"), "must be a non-empty DNS name, got \"\"");
  if (source.port < 1 || source.port > 65535) {
    return Invalid(field("port"), absl::StrCat("must be between 1 and 65535, got ", source.port));
  }
  if (source.timeout <= absl::ZeroDuration() || source.timeout == absl::InfiniteDuration()) {
    return Invalid(field("timeout"), absl::StrCat("must be a finite duration > 0, got ",
                                                  absl::FormatDuration(source.timeout)));
  }
  if (!source.server.empty()) {
    if (absl::Status s = ParseDnsServer(field("server"), source.server).status(); !s.ok()) return s;
  }
  return absl::OkStatus();
}

namespace {

// A c-ares channel for `source`: two tries of T/4 and T/2 (c-ares doubles the second), so c-ares
// gives up by itself within source.timeout and the deadline's ares_cancel is only a backstop.
absl::StatusOr<Channel> OpenChannel(const DnsSource& source) {
  struct ares_options options {};
  int mask = ARES_OPT_TIMEOUTMS | ARES_OPT_TRIES;
  options.timeout =
      static_cast<int>(std::max<int64_t>(1, absl::ToInt64Milliseconds(source.timeout) / 4));
  options.tries = 2;
  char dns_only[] = "b";
  if (!source.server.empty()) {  // ask the name as given: no search domains, no /etc/hosts
    mask |= ARES_OPT_DOMAINS | ARES_OPT_LOOKUPS;
    options.domains = nullptr;
    options.ndomains = 0;
    options.lookups = dns_only;
  }
  ares_channel raw = nullptr;
  if (const int status = ares_init_options(&raw, &options, mask); status != ARES_SUCCESS) {
    if (raw != nullptr) ares_destroy(raw);
    return absl::UnavailableError(absl::StrCat("resolving ", Quote(source.name),
                                               ": ares_init_options: ", ares_strerror(status)));
  }
  Channel channel(raw);
  if (!source.server.empty()) {
    if (const int status = ares_set_servers_ports_csv(channel.get(), source.server.c_str());
        status != ARES_SUCCESS) {
      return Invalid("source.server",
                     absl::StrCat(Quote(source.server), ": ", ares_strerror(status)));
    }
  }
  return channel;
}

// The error a finished lookup stands for (OK when it found addresses).
absl::Status LookupStatus(const Lookup& lookup, ares_channel channel, const DnsSource& source) {
  const std::string name = Quote(source.name);
  const auto no_address = [&] {
    return absl::NotFoundError(absl::StrCat("DNS name ", name, " has no A or AAAA record (asked ",
                                            DescribeServers(channel, source), ")"));
  };
  switch (lookup.status) {
    case ARES_SUCCESS:
      return lookup.addresses.empty() ? no_address() : absl::OkStatus();
    case ARES_ENOTFOUND:
      return absl::NotFoundError(absl::StrCat("DNS name ", name, " does not exist (asked ",
                                              DescribeServers(channel, source), ")"));
    case ARES_ENODATA:
      return no_address();
    case ARES_EBADNAME:
      return Invalid("source.name", absl::StrCat(name, " is not a valid DNS name"));
    case ARES_ETIMEOUT:
    case ARES_ECANCELLED:
      return absl::UnavailableError(absl::StrCat("resolving ", name, ": no answer from ",
                                                 DescribeServers(channel, source), " within ",
                                                 absl::FormatDuration(source.timeout)));
    default:
      return absl::UnavailableError(absl::StrCat("resolving ", name, " with ",
                                                 DescribeServers(channel, source), ": ",
                                                 ares_strerror(lookup.status)));
  }
}

}  // namespace

absl::StatusOr<std::vector<Upstream>> ResolveUpstreams(const DnsSource& source) {
  if (absl::Status s = CheckDnsSource("source", source); !s.ok()) return s;
  if (absl::Status s = AresLibraryInit(); !s.ok()) return s;
  const absl::Time deadline = absl::Now() + source.timeout;
  Lookup lookup;  // declared before the channel: ares_destroy may still run the callback
  CACHEROUTE_ASSIGN_OR_RETURN(Channel channel, OpenChannel(source));

  struct ares_addrinfo_hints hints {};
  hints.ai_family = AF_UNSPEC;  // A and AAAA
  hints.ai_flags = ARES_AI_NOSORT;
  ares_getaddrinfo(channel.get(), source.name.c_str(), nullptr, &hints, &OnAddrInfo, &lookup);
  if (absl::Status s = Drive(channel.get(), lookup, deadline); !s.ok()) return s;
  if (absl::Status s = LookupStatus(lookup, channel.get(), source); !s.ok()) return s;

  std::vector<Upstream> upstreams;
  for (const auto& [ip, v6] : lookup.addresses) {
    const std::string host_port = FormatHostPort(ip, v6, source.port);
    upstreams.push_back(Upstream{host_port, absl::StrCat("http://", host_port)});
  }
  std::sort(upstreams.begin(), upstreams.end(),
            [](const Upstream& a, const Upstream& b) { return a.name < b.name; });
  upstreams.erase(
      std::unique(upstreams.begin(), upstreams.end(),
                  [](const Upstream& a, const Upstream& b) { return a.name == b.name; }),
      upstreams.end());
  return upstreams;
}

bool SameMembers(const std::vector<Upstream>& a, const std::vector<Upstream>& b) {
  const auto pairs = [](const std::vector<Upstream>& list) {
    std::set<std::pair<std::string, std::string>> set;
    for (const Upstream& u : list) set.emplace(u.name, u.url);
    return set;
  };
  return pairs(a) == pairs(b);
}

std::vector<std::string> AssignIndices(const std::vector<std::string>& current,
                                       const std::vector<std::string>& wanted, size_t capacity) {
  std::vector<std::string> next(current.size());
  std::vector<bool> placed(wanted.size(), false);
  for (size_t i = 0; i < current.size(); ++i) {
    const auto it = std::find(wanted.begin(), wanted.end(), current[i]);
    if (it != wanted.end()) {
      next[i] = current[i];
      placed[it - wanted.begin()] = true;
    }
  }
  size_t hole = 0;
  for (size_t w = 0; w < wanted.size(); ++w) {
    if (placed[w]) continue;
    while (hole < next.size() && !next[hole].empty()) ++hole;
    if (hole < next.size()) {
      next[hole] = wanted[w];
    } else if (next.size() < capacity) {
      next.push_back(wanted[w]);
    }
  }
  for (;;) {
    while (!next.empty() && next.back().empty()) next.pop_back();
    const auto first_hole = std::find(next.begin(), next.end(), std::string());
    if (first_hole == next.end()) break;
    *first_hole = std::move(next.back());
    next.pop_back();
  }
  return next;
}

}  // namespace cacheroute::frontend
