// Test helper: `mocker serve` as a real child process (build/tools/mocker) on ephemeral loopback
// endpoints — for behaviour that only a process shows (what it prints and when, its RSS).
// Waiting is a poll on the child's stdout with a deadline, never a sleep.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/testing/serve_child.h"

namespace mocker::service::testing {

/// The test binary's `mocker serve` child; a failed start is a test failure.
class ServeProcess : public mocker::testing::ServeChild {
 public:
  explicit ServeProcess(const std::vector<std::string>& extra, const std::string& stderr_path = {})
      : ServeChild(MOCKER_BINARY_FOR_TEST, extra, stderr_path) {
    if (!spawnError().empty()) ADD_FAILURE() << spawnError();
  }
};

}  // namespace mocker::service::testing
