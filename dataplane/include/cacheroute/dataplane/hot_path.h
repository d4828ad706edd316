// How the request path's small steps are inlined (docs/dispatch.md, "Speed"). The ledger's
// helpers are forced inline wherever the compiler allows it (CACHEROUTE_HOT_INLINE); the token-work
// rule's stages and per-candidate steps, its cost terms among them (CACHEROUTE_HOT_STEP on a
// function, CACHEROUTE_HOT_LAMBDA on a lambda), only in builds without assertions: inlined at each
// candidate they are the Pick's speed (left to GCC 12, CostOf was called out of line in the bench
// and its Picks were 30% slower), and in the sanitizer builds (with assertions, whose speed is not
// measured) they would only lengthen the compile. Forcing more than that measured slower: the
// ledger's one-line counters (ShardAdd) are left to the compiler, which inlines them.
#pragma once

#if defined(__GNUC__) || defined(__clang__)
#define CACHEROUTE_HOT_INLINE __attribute__((always_inline)) inline
#else
#define CACHEROUTE_HOT_INLINE inline
#endif
#if (defined(__GNUC__) || defined(__clang__)) && defined(NDEBUG)
#define CACHEROUTE_HOT_LAMBDA __attribute__((always_inline))
#define CACHEROUTE_HOT_STEP __attribute__((always_inline)) inline
#else
#define CACHEROUTE_HOT_LAMBDA
#define CACHEROUTE_HOT_STEP inline
#endif
