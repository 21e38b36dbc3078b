// CHECK for our own invariants only (never for input-dependent conditions, which get an
// absl::Status). Debian's Abseil 20220623 has no absl/log, hence this one macro.
#ifndef FUSELAGE_GRAPH_CHECK_H_
#define FUSELAGE_GRAPH_CHECK_H_

#include <cstdio>
#include <cstdlib>

#define FUSELAGE_CHECK(cond)                                                       \
  do {                                                                             \
    if (!(cond)) {                                                                 \
      std::fprintf(stderr, "%s:%d: internal invariant failed: %s\n", __FILE__,     \
                   __LINE__, #cond);                                               \
      std::abort();                                                                \
    }                                                                              \
  } while (0)

#endif  // FUSELAGE_GRAPH_CHECK_H_
