// Shared helper of the live replay tests: one live replay run, its collector and its stats.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <utility>

#include "tests/service/live_service.h"
#include "tools/replay/collector.h"
#include "tools/replay/live_replay.h"
#include "tools/replay/workload.h"

namespace mocker::replay::testing {

struct LiveRun {
  ReplayCollector collector;
  LiveReplayStats stats;
};

/// Runs `w` live with `options`; a request's timeout is bounded to 30 s (scaled for sanitizer
/// builds) so a broken test ends instead of hanging. A failed run is a test failure.
inline LiveRun runLive(const Workload& w, LiveReplayOptions options) {
  LiveRun run;
  options.request_timeout_ms =
      std::min(options.request_timeout_ms, 30'000.0 * service::testing::kSlowdown);
  auto stats = runLiveReplay(w, options, run.collector);
  EXPECT_TRUE(stats.has_value()) << (stats ? "" : stats.error().toString());
  if (stats) run.stats = std::move(*stats);
  return run;
}

}  // namespace mocker::replay::testing
