// Shared helpers for the replay tests: paths to the repository's trace data, a small engine.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "engine/config.h"

namespace mocker::replay::testing {

/// Repository root (compile-time), so the binary also runs outside ctest.
inline std::string sourceDir() { return MOCKER_SOURCE_DIR_FOR_TEST; }

/// A sample trace shipped in the repository's data/traces/.
inline std::string sampleTrace(const std::string& name) {
  return sourceDir() + "/data/traces/" + name;
}

/// A small engine whose passes take a fixed time: prefill 10 ms, decode 2 ms.
inline engine::EngineConfig smallEngine() {
  return engine::EngineConfig{.num_gpu_blocks = 256,
                              .block_size = 16,
                              .timing_model = engine::TimingModelKind::Fixed,
                              .fixed_prefill_ms = 10.0,
                              .fixed_decode_ms = 2.0};
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
