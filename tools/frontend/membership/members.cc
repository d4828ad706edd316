// See members.h.
#include "tools/frontend/membership/members.h"

#include <algorithm>
#include <atomic>
#include <boost/asio/io_context.hpp>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/logging.h"
#include "base/status_macros.h"
#include "cacheroute/dataplane/routing_table.h"
#include "tools/frontend/membership/sources.h"

namespace cacheroute::frontend {

std::vector<std::string> Members::Names() const {
  std::vector<std::string> names;
  names.reserve(count);
  for (uint32_t d = 0; d < count; ++d) names.push_back(by_index[d]->name);
  return names;
}

absl::StatusOr<Endpoints> ResolveAddress(const UpstreamAddress& address) {
  // A synchronous resolve (getaddrinfo); the context is only what Asio's resolver is made from.
  boost::asio::io_context context;
  boost::asio::ip::tcp::resolver resolver(context);
  boost::system::error_code ec;
  const auto results = resolver.resolve(address.host, std::to_string(address.port), ec);
  if (ec || results.empty()) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve \"", address.host, "\": ", ec.message()));
  }
  Endpoints endpoints;
  for (const auto& entry : results) endpoints.push_back(entry.endpoint());
  return endpoints;
}

absl::StatusOr<std::shared_ptr<const Member>> MakeMember(
    const Upstream& upstream, size_t index,
    const std::function<absl::StatusOr<Endpoints>(const UpstreamAddress&)>& resolve) {
  const std::string key = absl::StrCat("upstreams[", index, "].url");
  CACHEROUTE_ASSIGN_OR_RETURN(UpstreamAddress address, ParseUpstreamUrl(key, upstream.url));
  absl::StatusOr<Endpoints> endpoints = resolve(address);
  if (!endpoints.ok()) {
    return absl::UnavailableError(absl::StrCat(key, ": ", endpoints.status().message()));
  }
  static std::atomic<uint64_t> next_id{1};
  auto member = std::make_shared<Member>();
  member->id = next_id.fetch_add(1, std::memory_order_relaxed);
  member->name = upstream.name;
  member->url = upstream.url;
  member->host_header = absl::StrContains(address.host, ':')
                            ? absl::StrCat("[", address.host, "]:", address.port)
                            : absl::StrCat(address.host, ":", address.port);
  member->address = std::move(address);
  member->endpoints = *std::move(endpoints);
  return member;
}

// What Apply made of the new list: the names that will have a member, and the members that are
// new (joined, or under a name whose URL changed).
struct Membership::Resolved {
  std::vector<std::string> wanted;
  std::vector<std::shared_ptr<const Member>> made;

  std::shared_ptr<const Member> Made(const std::string& name) const {
    for (const auto& m : made) {
      if (m->name == name) return m;
    }
    return nullptr;
  }
};

Membership::Membership(MembershipOptions options) : options_(std::move(options)) {
  auto empty = std::make_shared<Members>();
  empty->by_index.resize(options_.capacity);
  current_ = std::move(empty);
}

std::shared_ptr<const Members> Membership::Current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_;
}

uint32_t Membership::IndexOf(absl::string_view name) const {
  const std::shared_ptr<const Members> members = Current();
  for (uint32_t d = 0; d < members->count; ++d) {
    if (members->by_index[d]->name == name) return d;
  }
  return dataplane::kNoDestination;
}

absl::StatusOr<Membership::Resolved> Membership::ResolveNew(const std::vector<Upstream>& upstreams,
                                                            const Members& current) const {
  Resolved resolved;
  for (size_t i = 0; i < upstreams.size(); ++i) {
    const Upstream& u = upstreams[i];
    const auto same =
        std::find_if(current.by_index.begin(), current.by_index.begin() + current.count,
                     [&u](const std::shared_ptr<const Member>& m) { return m->name == u.name; });
    if (same != current.by_index.begin() + current.count && (*same)->url == u.url) {
      resolved.wanted.push_back(u.name);
      continue;
    }
    absl::StatusOr<std::shared_ptr<const Member>> member =
        options_.resolve ? MakeMember(u, i, options_.resolve) : MakeMember(u, i);
    if (!member.ok()) {
      if (!absl::IsUnavailable(member.status())) return member.status();
      const std::string error(member.status().message());
      if (!options_.dynamic) return absl::InvalidArgumentError(error);
      base::LogEvent("warning", "member_unresolved", {{"destination", u.name}, {"error", error}});
      continue;
    }
    resolved.wanted.push_back(u.name);
    resolved.made.push_back(*std::move(member));
  }
  return resolved;
}

std::shared_ptr<Members> Membership::Place(const std::vector<std::string>& next,
                                           const Resolved& resolved, const Members& current) const {
  auto members = std::make_shared<Members>(current);
  members->generation = current.generation + 1;
  members->count = static_cast<uint32_t>(next.size());
  for (uint32_t d = 0; d < next.size(); ++d) {
    std::shared_ptr<const Member> member = resolved.Made(next[d]);
    uint32_t from = dataplane::kNoDestination;
    if (member == nullptr) {  // one that stays, at its index or moved here
      for (uint32_t i = 0; i < current.count; ++i) {
        if (current.by_index[i]->name == next[d]) from = i;
      }
      member = current.by_index[from];
    }
    if (member == members->by_index[d]) continue;  // stays where it was
    if (options_.new_occupant) options_.new_occupant(d, from);
    members->by_index[d] = std::move(member);
  }
  if (members->policy == nullptr || members->count != current.count) {
    if ((members->policy == nullptr || options_.policy_per_count) && options_.make_policy) {
      members->policy = options_.make_policy(members->count);
    }
  }
  return members;
}

absl::Status Membership::Apply(const std::vector<Upstream>& upstreams) {
  std::lock_guard<std::mutex> apply(apply_mu_);
  const std::shared_ptr<const Members> current = Current();
  CACHEROUTE_ASSIGN_OR_RETURN(Resolved resolved, ResolveNew(upstreams, *current));
  const std::vector<std::string> current_names = current->Names();
  // A member whose URL changed is a new member under the same name: it leaves, then joins.
  std::vector<std::string> staying = current_names;
  for (std::string& name : staying) {
    if (resolved.Made(name) != nullptr) name.clear();
  }
  const std::vector<std::string> next = AssignIndices(staying, resolved.wanted, options_.capacity);
  if (next.size() < resolved.wanted.size()) {
    base::LogEvent("warning", "members_over_capacity",
                   {{"members", absl::StrCat(resolved.wanted.size())},
                    {"max_upstreams", absl::StrCat(options_.capacity)}});
  }
  std::shared_ptr<const Members> members = Place(next, resolved, *current);
  {
    std::lock_guard<std::mutex> lock(mu_);
    current_ = members;
  }
  generation_.store(members->generation, std::memory_order_release);
  // The Router (and the table, re-mapped) last: a request routed to a new index before its
  // thread saw the snapshot looks again.
  if (options_.install) {
    if (absl::Status s = options_.install(next); !s.ok()) {
      return absl::InternalError(absl::StrCat("membership: ", s.message()));
    }
  }
  if (next != current_names) {
    base::LogEvent(
        "info", "membership",
        {{"members", absl::StrCat(members->count)}, {"names", absl::StrJoin(next, ",")}});
  }
  return absl::OkStatus();
}

void Membership::Render(base::Exposition& page) const {
  const std::shared_ptr<const Members> members = Current();
  page.Gauge("members",
             "Upstreams routed to (the membership: static, upstreams_file or upstreams_dns).",
             static_cast<double>(members->count));
  page.Counter("membership_changes_total", "Membership changes applied since the start.",
               static_cast<double>(members->generation - 1));
}

}  // namespace cacheroute::frontend
