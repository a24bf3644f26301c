// Shared helpers for the replay tests: paths to checked-in and shared trace data.
#pragma once

#include <string>

namespace mocker::replay::testing {

/// Repository root (compile-time), so the binary also runs outside ctest.
inline std::string sourceDir() { return MOCKER_SOURCE_DIR_FOR_TEST; }

/// A sample trace shipped in the repository's data/traces/.
inline std::string sampleTrace(const std::string& name) {
  return sourceDir() + "/data/traces/" + name;
}

}  // namespace mocker::replay::testing
