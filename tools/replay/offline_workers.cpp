#include "tools/replay/offline_workers.h"

#include <string>
#include <utility>

namespace mocker::replay {

Result<OfflineWorkers> makeOfflineWorkers(const OfflineReplayOptions& options) {
  OfflineWorkers out;
  std::vector<engine::Engine>& workers = out.engines;
  const auto add = [&workers](engine::EngineConfig config, std::uint32_t count,
                              const char* role) -> Status {
    config.allow_empty_output = true;
    for (std::uint32_t w = 0; w < count; ++w) {
      Result<engine::Engine> e = engine::Engine::create(config);
      if (!e) {
        return Error{e.error().code,
                     std::string(role) + (role[0] != '\0' ? " workers: " : "") + e.error().message};
      }
      workers.push_back(std::move(*e));
    }
    return {};
  };
  if (options.disagg) {
    const DisaggOptions& d = *options.disagg;
    if (d.num_prefill_workers == 0 || d.num_decode_workers == 0) {
      return invalidArgument(
          "a disaggregated replay needs >= 1 prefill and >= 1 decode worker (got " +
          std::to_string(d.num_prefill_workers) + " and " + std::to_string(d.num_decode_workers) +
          ")");
    }
    engine::EngineConfig prefill = d.prefill_engine;
    prefill.worker_type = engine::WorkerType::Prefill;
    engine::EngineConfig decode = d.decode_engine;
    decode.worker_type = engine::WorkerType::Decode;
    MOCKER_TRY_VOID(add(prefill, d.num_prefill_workers, "prefill"));
    MOCKER_TRY_VOID(add(decode, d.num_decode_workers, "decode"));
    const std::uint32_t pb = engine::effectiveBlockSize(prefill);
    const std::uint32_t db = engine::effectiveBlockSize(decode);
    if (pb != db) {
      return invalidArgument("block_size: the prefill workers use " + std::to_string(pb) +
                             " tokens per block and the decode workers " + std::to_string(db) +
                             "; a KV handoff needs the same block size on both sides");
    }
    out.num_prefill = d.num_prefill_workers;
  } else {
    // A prefill worker alone would hold every request forever, a decode worker would refuse
    // every fresh one: the roles exist only in pairs.
    if (options.engine.worker_type != engine::WorkerType::Aggregated) {
      return invalidArgument(
          "worker_type: an aggregated replay runs aggregated workers (got '" +
          std::string(engine::toString(options.engine.worker_type)) +
          "'); a disaggregated replay is --num-prefill-workers P --num-decode-workers D, which "
          "sets each role's worker type");
    }
    MOCKER_TRY_VOID(add(options.engine, options.num_workers, ""));
  }
  return out;
}

}  // namespace mocker::replay
