// The in-process workers of an offline replay (tools/replay/offline_replay.h): `num_workers`
// aggregated engines, or with `disagg` the prefill engines followed by the decode engines (each
// role's worker type set, the same block size on both sides). Every engine allows empty outputs
// (a 0-token turn completes). Errors name the role and what is wrong.
#pragma once

#include <cstdint>
#include <vector>

#include "base/result.h"
#include "engine/engine.h"
#include "tools/replay/offline_replay.h"

namespace mocker::replay {

struct OfflineWorkers {
  std::vector<engine::Engine> engines;
  std::uint32_t num_prefill = 0;  ///< > 0: engines [0, num_prefill) are prefill workers
};

Result<OfflineWorkers> makeOfflineWorkers(const OfflineReplayOptions& options);

}  // namespace mocker::replay
