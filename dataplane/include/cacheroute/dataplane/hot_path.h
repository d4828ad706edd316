// How the request path's small steps are inlined (docs/dispatch.md, "Speed"). The ledger's
// helpers are forced inline wherever the compiler allows it (CACHEROUTE_HOT_INLINE); the token-work
// rule's stages and per-candidate steps, its cost terms among them (CACHEROUTE_HOT_STEP on a
// function, CACHEROUTE_HOT_LAMBDA on a lambda), only in builds without assertions: inlined at each
// candidate they are the Pick's speed (GCC 12 otherwise calls some of them out of line: 30% slower
// Picks in the bench), and in the sanitizer builds (with assertions, whose speed is not measured)
// they would only lengthen the compile.
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
