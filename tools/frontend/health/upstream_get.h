// UpstreamGet: the blocking GET that the health prober (/health) and the load scraper (/metrics)
// send to an upstream from their own threads, never from an I/O thread (cpp-httplib's client).
//
// Usage:
//   httplib::Result r = UpstreamGet(member.address, "/health", connect_timeout, read_timeout);
//   if (r && r->status == 200) …;   // !r: no answer (httplib::to_string(r.error()) says why)
#pragma once

#include <httplib.h>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "tools/frontend/frontend_config.h"

namespace cacheroute::frontend {

httplib::Result UpstreamGet(const UpstreamAddress& address, absl::string_view path,
                            absl::Duration connect_timeout, absl::Duration read_timeout);

}  // namespace cacheroute::frontend
