// KeyId: the stable, documented 64-bit id of a routing key string (proto/cacheroute/v1/
// common.proto). Gateways hash keys with it before reporting; the planner plans on ids alone.
// There is one definition, the dataplane's (standard C++ only, so the planner may use it while
// gateways embed the dataplane without the planner); this header makes it cacheroute::KeyId.
#pragma once

#include "cacheroute/dataplane/key_id.h"

namespace cacheroute {

using dataplane::KeyId;

}  // namespace cacheroute
