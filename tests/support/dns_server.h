// Test-only: a tiny authoritative DNS server over UDP on 127.0.0.1 (RFC 1035 wire format), on its
// own thread, for resolvers under test.
//
//   DnsServer dns;                                  // bound to 127.0.0.1:<free port>
//   dns.SetA("vllm.test", {"127.0.0.2", "127.0.0.3"});
//   dns.SetAAAA("vllm.test", {"::1"});
//   source.server = dns.address();                  // "127.0.0.1:PORT"
//
// Answers one question per query: the records set for the name and type (A or AAAA), TTL 1 s; an
// empty NOERROR answer for a known name asked for a type it has none of (or another type);
// NXDOMAIN for an unknown name; FORMERR for a query it cannot parse (compressed names included).
// Names compare case-insensitively, without the trailing dot. SetSilent(true) drops every query.
// Every setter is thread-safe and may be called while queries are answered. Errors in the
// constructor throw std::system_error. The destructor stops and joins the thread.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

namespace cacheroute::testing {

class DnsServer {
 public:
  DnsServer() {
    fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) throw std::system_error(errno, std::generic_category(), "DnsServer socket");
    sockaddr_in address{};
    address.sin_family = AF_INET;
    address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t length = sizeof address;
    if (bind(fd_, reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
      const int error = errno;
      close(fd_);
      throw std::system_error(error, std::generic_category(), "DnsServer bind");
    }
    port_ = ntohs(address.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~DnsServer() {
    stop_ = true;
    thread_.join();
    close(fd_);
  }
  DnsServer(const DnsServer&) = delete;
  DnsServer& operator=(const DnsServer&) = delete;

  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  // Replaces the name's A (or AAAA) records; an empty list keeps the name known, without records.
  void SetA(const std::string& name, const std::vector<std::string>& ipv4s) {
    Set(name, kTypeA, AF_INET, ipv4s);
  }
  void SetAAAA(const std::string& name, const std::vector<std::string>& ipv6s) {
    Set(name, kTypeAAAA, AF_INET6, ipv6s);
  }
  void Remove(const std::string& name) {
    std::lock_guard<std::mutex> lock(mutex_);
    records_.erase(Lower(name));
  }
  void SetSilent(bool silent) { silent_ = silent; }
  int queries() const { return queries_; }  // queries received, answered or not

 private:
  static constexpr uint16_t kTypeA = 1, kTypeAAAA = 28, kClassIn = 1;
  using Rdata = std::vector<uint8_t>;

  static std::string Lower(std::string name) {
    if (!name.empty() && name.back() == '.') name.pop_back();
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    return name;
  }

  void Set(const std::string& name, uint16_t type, int family,
           const std::vector<std::string>& ips) {
    std::vector<Rdata> rdatas;
    for (const std::string& ip : ips) {
      Rdata rdata(family == AF_INET ? 4 : 16);
      if (inet_pton(family, ip.c_str(), rdata.data()) != 1) {
        throw std::invalid_argument("DnsServer: not an address: " + ip);
      }
      rdatas.push_back(rdata);
    }
    std::lock_guard<std::mutex> lock(mutex_);
    records_[Lower(name)][type] = std::move(rdatas);
  }

  void Serve() {
    uint8_t query[512];
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 20) <= 0) continue;  // wakes up every 20 ms to see stop_
      sockaddr_in from{};
      socklen_t from_length = sizeof from;
      const ssize_t n =
          recvfrom(fd_, query, sizeof query, 0, reinterpret_cast<sockaddr*>(&from), &from_length);
      if (n < 12) continue;  // not even a header
      ++queries_;
      if (silent_) continue;
      const std::vector<uint8_t> reply = Answer(query, static_cast<size_t>(n));
      if (!reply.empty()) {
        sendto(fd_, reply.data(), reply.size(), 0, reinterpret_cast<sockaddr*>(&from), from_length);
      }
    }
  }

  // The response to one query (empty: send nothing).
  std::vector<uint8_t> Answer(const uint8_t* q, size_t n) {
    const auto u16 = [q](size_t at) { return static_cast<uint16_t>(q[at] << 8 | q[at + 1]); };
    if ((q[2] & 0x80) != 0) return {};  // a response, not a query
    std::vector<uint8_t> out(q, q + 12);
    out[2] = static_cast<uint8_t>(0x84 | (q[2] & 0x01));  // QR, AA, the query's RD
    out[3] = 0x80;                                        // RA, rcode 0
    for (size_t i = 6; i < 12; ++i) out[i] = 0;           // ANCOUNT, NSCOUNT, ARCOUNT
    const auto fail = [&out](uint8_t rcode) {
      out[3] = static_cast<uint8_t>(0x80 | rcode);
      out[4] = out[5] = 0;  // no question
      return out;
    };
    if (((q[2] >> 3) & 0x0f) != 0 || u16(4) != 1) return fail(4 /*NOTIMP*/);

    // QNAME: labels of 1..63 bytes, ending with the empty label; at most 255 bytes in all.
    std::string name;
    size_t at = 12;
    while (true) {
      if (at >= n) return fail(1 /*FORMERR*/);
      const uint8_t length = q[at];
      if (length == 0) break;
      if (length > 63 || at + 1 + length > n || at - 12 + 1 + length > 255) return fail(1);
      if (!name.empty()) name += '.';
      name.append(reinterpret_cast<const char*>(q + at + 1), length);
      at += 1 + length;
    }
    ++at;
    if (at + 4 > n) return fail(1);
    const uint16_t type = u16(at), klass = u16(at + 2);
    at += 4;
    out.insert(out.end(), q + 12, q + at);  // the question, verbatim
    out[5] = 1;

    std::vector<Rdata> answers;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      const auto known = records_.find(Lower(name));
      if (known == records_.end()) {
        out[3] = 0x80 | 3;  // NXDOMAIN, with the question
        return out;
      }
      const auto records = known->second.find(type);
      if (klass == kClassIn && records != known->second.end()) answers = records->second;
    }
    const auto put16 = [&out](size_t value) {
      out.push_back(static_cast<uint8_t>(value >> 8));
      out.push_back(static_cast<uint8_t>(value));
    };
    for (const Rdata& rdata : answers) {
      put16(0xc00c);  // NAME: a pointer to the question's
      put16(type);
      put16(kClassIn);
      put16(0);  // TTL: 1 s
      put16(1);
      put16(rdata.size());
      out.insert(out.end(), rdata.begin(), rdata.end());
    }
    out[6] = static_cast<uint8_t>(answers.size() >> 8);  // ANCOUNT
    out[7] = static_cast<uint8_t>(answers.size());
    return out;
  }

  int fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<bool> silent_{false};
  std::atomic<int> queries_{0};
  std::mutex mutex_;
  std::map<std::string, std::map<uint16_t, std::vector<Rdata>>> records_;  // name -> type -> rdata
  std::thread thread_;
};

}  // namespace cacheroute::testing
