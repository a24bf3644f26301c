// Invariant checks. MOCKER_CHECK(cond) aborts in every build with file:line and the condition
// when a "can't happen" condition happens (RELEASE_ASSERT / TLLM_CHECK). MOCKER_DCHECK is for
// costly checks and compiles to nothing in NDEBUG builds. Never use these for untrusted input:
// that returns a Result (result.h).
//
// Header-only; writes to stderr only on the abort path.
#pragma once

#include <cstdio>
#include <cstdlib>

namespace mocker::detail {

[[noreturn]] inline void checkFailed(const char* file, int line, const char* condition,
                                     const char* message) {
  std::fprintf(stderr, "%s:%d: MOCKER_CHECK failed: %s%s%s\n", file, line, condition,
               message[0] != '\0' ? " — " : "", message);
  std::fflush(stderr);
  std::abort();
}

}  // namespace mocker::detail

#define MOCKER_CHECK(cond)                                          \
  do {                                                              \
    if (!(cond)) [[unlikely]]                                       \
      ::mocker::detail::checkFailed(__FILE__, __LINE__, #cond, ""); \
  } while (false)

#define MOCKER_CHECK_MSG(cond, msg)                                  \
  do {                                                               \
    if (!(cond)) [[unlikely]]                                        \
      ::mocker::detail::checkFailed(__FILE__, __LINE__, #cond, msg); \
  } while (false)

#ifdef NDEBUG
#define MOCKER_DCHECK(cond) \
  do {                      \
  } while (false && (cond))
#else
#define MOCKER_DCHECK(cond) MOCKER_CHECK(cond)
#endif
