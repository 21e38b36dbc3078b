// FUZZ_CHECK: the property assertion of fuselage's fuzz targets. A broken property is a
// finding, so it prints what broke and aborts; libFuzzer (or the replay driver under a
// sanitizer) then reports the crashing input. Only fuzz targets use it: library code
// returns absl::Status for anything input-dependent.
#ifndef FUSELAGE_TESTS_FUZZ_FUZZ_CHECK_H_
#define FUSELAGE_TESTS_FUZZ_FUZZ_CHECK_H_

#include <cstdio>
#include <cstdlib>
#include <string>

// `detail` is evaluated only on failure; anything convertible to std::string.
#define FUZZ_CHECK(cond, detail)                                                     \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      const std::string fuzz_check_detail_ = (detail);                               \
      std::fprintf(stderr, "%s:%d: fuzz property failed: %s\n  %s\n", __FILE__,      \
                   __LINE__, #cond, fuzz_check_detail_.c_str());                     \
      std::fflush(stderr);                                                           \
      std::abort();                                                                  \
    }                                                                                \
  } while (0)

#endif  // FUSELAGE_TESTS_FUZZ_FUZZ_CHECK_H_
