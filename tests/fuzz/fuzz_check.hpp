// An invariant that fails aborts, so libFuzzer records the input as a crash (assert() would be
// compiled out in a release build).
#pragma once

#include <cstdio>
#include <cstdlib>

#define TETHER_FUZZ_CHECK(cond)                                                         \
  do {                                                                                  \
    if (!(cond)) {                                                                      \
      std::fprintf(stderr, "%s:%d: invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                     \
    }                                                                                   \
  } while (false)
