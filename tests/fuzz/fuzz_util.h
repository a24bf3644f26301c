// Shared bits of the libFuzzer targets: a hard failure that libFuzzer reports as a crash.
#pragma once

#include <cstdio>
#include <cstdlib>

#define MOCKER_FUZZ_REQUIRE(cond)                                                           \
  do {                                                                                      \
    if (!(cond)) {                                                                          \
      std::fprintf(stderr, "%s:%d: fuzz property failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                         \
    }                                                                                       \
  } while (false)
