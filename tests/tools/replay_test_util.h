// Shared helpers for the replay tests: paths to the repository's trace data.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

namespace mocker::replay::testing {

/// Repository root (compile-time), so the binary also runs outside ctest.
inline std::string sourceDir() { return MOCKER_SOURCE_DIR_FOR_TEST; }

/// A sample trace shipped in the repository's data/traces/.
inline std::string sampleTrace(const std::string& name) {
  return sourceDir() + "/data/traces/" + name;
}

}  // namespace mocker::replay::testing

/// Skips the current test when the sample trace `path` is absent: data/traces/ is optional (a
/// checkout or package may leave the large sample files out), so its tests skip rather than fail.
#define MOCKER_SKIP_UNLESS_SAMPLE_TRACE(path)                                               \
  do {                                                                                      \
    if (!std::filesystem::exists(path)) {                                                   \
      GTEST_SKIP() << "sample trace not present: " << (path) << " (data/traces/ optional)"; \
    }                                                                                       \
  } while (false)
