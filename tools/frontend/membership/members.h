// Membership: the upstreams a front end routes to, as immutable snapshots (Members) swapped by
// pointer. Apply installs a new list: members that stay keep their destination index, new ones
// fill the holes of those that left, and the indices stay dense (AssignIndices, sources.h); each
// new member's address is resolved here, once. docs/gateway.md, "Membership", has the whole story.
//
// Apply tells the rest of the dataplane through the hooks of MembershipOptions, in this order:
//   new_occupant(d, from)  for every index whose member changed, before the snapshot is published
//                          (fresh counters; `from` is the index a moved member had, or
//                          kNoDestination for one that joined, whose health starts up);
//   install(names)         once published: re-map the Router (and its table) to the new names.
// A request routed to an index just before a change still finds the member it was routed to:
// past `count`, by_index keeps the last member an index had.
//
// Usage:
//   Membership membership({.capacity = 256, .make_policy = …, .new_occupant = …, .install = …});
//   absl::Status s = membership.Apply(upstreams);        // control path; serialised
//   std::shared_ptr<const Members> now = membership.Current();
//   const Member* m = now->At(d);                         // null: index not (or no longer) known
//
// Thread-safety: every method may be called from any thread; Apply calls are serialised. Current
// takes a mutex (control path); request paths keep a copy and compare generation() (one acquire
// load) to see that it moved.
#pragma once

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "base/exposition.h"
#include "cacheroute/dataplane/policies.h"
#include "tools/frontend/frontend_config.h"

namespace cacheroute::frontend {

// One upstream as routed to: immutable, shared by the snapshots that hold it.
struct Member {
  uint64_t id = 0;  // unique in the process (MakeMember): a new member at an index has a new id
  std::string name;
  std::string url;
  UpstreamAddress address = {};
  std::string host_header = {};                                // the Host of requests to it
  std::vector<boost::asio::ip::tcp::endpoint> endpoints = {};  // resolved when it joined
};

// A membership snapshot: by_index[d] is destination d's member for d < count; past count, the
// last member that index had, or null.
struct Members {
  uint64_t generation = 0;  // 0: nothing applied yet; each Apply adds one
  uint32_t count = 0;
  std::vector<std::shared_ptr<const Member>> by_index;  // `capacity` entries
  std::shared_ptr<dataplane::Policy> policy;            // null: Router::Pick (cacheroute)

  const Member* At(uint32_t d) const { return d < by_index.size() ? by_index[d].get() : nullptr; }
  // The names of [0, count), by index.
  std::vector<std::string> Names() const;
};

using Endpoints = std::vector<boost::asio::ip::tcp::endpoint>;

// The system resolver's (getaddrinfo) endpoints of `address`; Unavailable when it has none.
absl::StatusOr<Endpoints> ResolveAddress(const UpstreamAddress& address);

struct MembershipOptions {
  uint32_t capacity = 0;  // destinations the Router has room for
  // A dynamic source (upstreams_file, upstreams_dns): a member whose host does not resolve is
  // left out (and logged); with the static list it is an InvalidArgument error.
  bool dynamic = false;
  // The routing policy for `count` members (null: Router::Pick), built with the first snapshot
  // and, when policy_per_count (policies hashed over the member count), whenever the count
  // changes; other policies keep their memory across changes.
  std::function<std::unique_ptr<dataplane::Policy>(uint32_t count)> make_policy = nullptr;
  bool policy_per_count = false;
  std::function<void(uint32_t d, uint32_t from)> new_occupant = nullptr;
  std::function<absl::Status(const std::vector<std::string>& names)> install = nullptr;
  // How a new member's address is resolved (null: ResolveAddress); tests inject failures here.
  std::function<absl::StatusOr<Endpoints>(const UpstreamAddress& address)> resolve = nullptr;
};

class Membership {
 public:
  explicit Membership(MembershipOptions options);
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  // Installs `upstreams` as the membership. An upstream URL that does not parse is InvalidArgument
  // naming upstreams[i].url; a failed install hook's error is returned (the snapshot stays).
  absl::Status Apply(const std::vector<Upstream>& upstreams);

  // The current snapshot (never null).
  std::shared_ptr<const Members> Current() const;
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }
  // Index of the member named `name`, or kNoDestination.
  uint32_t IndexOf(absl::string_view name) const;
  std::vector<std::string> Names() const { return Current()->Names(); }
  bool dynamic() const { return options_.dynamic; }

  // members, membership_changes_total.
  void Render(base::Exposition& page) const;

 private:
  struct Resolved;
  absl::StatusOr<Resolved> ResolveNew(const std::vector<Upstream>& upstreams,
                                      const Members& current) const;
  std::shared_ptr<Members> Place(const std::vector<std::string>& next, const Resolved& resolved,
                                 const Members& current) const;

  const MembershipOptions options_;
  std::mutex apply_mu_;    // serialises Apply
  mutable std::mutex mu_;  // guards current_
  std::shared_ptr<const Members> current_;
  std::atomic<uint64_t> generation_{0};
};

// A member for `upstream` (its URL checked as upstreams[index].url: InvalidArgument), its address
// resolved by `resolve` (Unavailable naming upstreams[index].url when it fails).
absl::StatusOr<std::shared_ptr<const Member>> MakeMember(
    const Upstream& upstream, size_t index,
    const std::function<absl::StatusOr<Endpoints>(const UpstreamAddress&)>& resolve =
        ResolveAddress);

}  // namespace cacheroute::frontend
