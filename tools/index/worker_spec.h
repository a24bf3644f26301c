// A `mocker index` worker: the endpoints of one of its ranks (WorkerEndpoint), and the `--worker`
// syntax that names them (parseWorkerSpec; tools/index/README.md, Usage). No sockets.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace mocker::index {

/// One rank endpoint of a worker.
struct WorkerEndpoint {
  std::uint64_t worker_id = 0;
  std::optional<std::uint32_t> dp_rank;  ///< given explicitly (ID/R=…) or by dp=N expansion
  std::string events;                    ///< the rank's KV-event PUB (the SUB connects)
  std::string replay;                    ///< the rank's replay ROUTER; "" = no replay
  std::string snapshot;                  ///< the worker's submit ROUTER (kv_snapshot); "" = none
  std::string topic;                     ///< SUB prefix filter (default "": everything)
  friend bool operator==(const WorkerEndpoint&, const WorkerEndpoint&) = default;
};

/// Parses one `--worker` value:
///   ID[/RANK]=EVENTS[,replay=EP][,snapshot=EP][,dp=N][,topic=T]
/// ID is a decimal u64. `dp=N` (N >= 1, without /RANK) expands to ranks 0..N-1 with the DP port
/// offset (rank r uses port + r) applied to EVENTS and replay (snapshot is per worker, not offset).
/// Errors name what is wrong.
Result<std::vector<WorkerEndpoint>> parseWorkerSpec(std::string_view spec);

}  // namespace mocker::index
