// The live replay's option checks and the router configuration they give (live_replay.h).
#include <cmath>

#include "tools/replay/live_replay.h"
#include "tools/replay/turn_schedule.h"

namespace mocker::replay {

Status validateLiveReplayOptions(const Workload& workload, const LiveReplayOptions& options) {
  if (options.targets.empty()) return invalidArgument("live replay needs at least one server");
  if (options.concurrency && *options.concurrency == 0) {
    return invalidArgument("concurrency must be >= 1 (got 0)");
  }
  if (!(options.request_timeout_ms > 0) || !std::isfinite(options.request_timeout_ms)) {
    return invalidArgument("request timeout must be finite and > 0");
  }
  if (!(options.connect_timeout_ms > 0) || !std::isfinite(options.connect_timeout_ms)) {
    return invalidArgument("connect timeout must be finite and > 0");
  }
  if (!(options.stats_interval_ms >= 0) || !std::isfinite(options.stats_interval_ms)) {
    return invalidArgument("stats interval must be finite and >= 0");
  }
  MOCKER_TRY_VOID(TurnSchedule::checkArrivals(workload, options.concurrency.has_value()));
  if (options.router == RouterKind::KvPrefix || options.decode_router == RouterKind::KvPrefix) {
    return invalidArgument("the kv_prefix router is offline only");
  }
  if (options.router == RouterKind::Kv) {
    MOCKER_TRY_VOID(validateKvRouterConfig(options.kv_router));
  }
  MOCKER_TRY_VOID(validateWorkerHealthConfig(options.worker_health));
  return {};
}

LiveRouterConfig liveRouterConfig(const LiveReplayOptions& options,
                                  std::span<const std::uint32_t> ranks_per_server) {
  return {.kind = options.router,
          .seed = options.router_seed,
          .ranks_per_server = std::vector<std::uint32_t>(
              ranks_per_server.begin(),
              ranks_per_server.begin() + static_cast<std::ptrdiff_t>(options.targets.size())),
          .kv = options.kv_router,
          .kv_block_size = options.kv_block_size,
          .kv_hash_seeds = options.kv_hash_seeds,
          .decode_kind = options.decode_router,
          .num_decode = static_cast<std::uint32_t>(options.decode_targets.size())};
}

}  // namespace mocker::replay
