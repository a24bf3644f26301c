// KvRouting: `mocker gateway --router kv` — load-aware KV routing as `mocker replay --mode live
// --router kv` does it: Dynamo's KV-router cost (tools/replay/kv_router.h) over every (worker,
// DP rank) of the workers requests go to, with the overlaps from a LiveKvIndex (the IndexService
// of `mocker index` on its own thread, subscribed to every rank's KV events with gap healing
// through its replay ROUTER and resync from kv_snapshot) asked before each pick, and the load
// from the choices this gateway routed (prefill queued until the first token, blocks held until
// the end). A pick whose worker holds at least one block of the prompt counts as routed to a
// cached prefix.
//
// The overlap query is one synchronous round trip to the index's thread on loopback (tens of
// microseconds; bounded by the index config's query_timeout, after which the pick is made as if
// nothing were cached and counted in queryFailures()).
//
// Not thread-safe: created, used and destroyed on the gateway's I/O thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/result.h"
#include "tools/index/live_kv_index.h"
#include "tools/replay/kv_router.h"

namespace mocker::gateway {

struct KvRoutingOptions {
  index::LiveKvIndexConfig index{};  ///< servers = the workers requests go to, in pool order
  replay::KvRouterConfig router{};
  std::uint64_t seed = 0;  ///< tie-breaks and temperature draws
};

/// The figures /metrics reports.
struct KvRoutingFigures {
  std::uint64_t routed = 0;         ///< choices routed by the kv router
  std::uint64_t routed_cached = 0;  ///< of those, to a worker holding a prefix of the prompt
  std::uint64_t query_failures = 0;
  index::IndexStats index{};
};

class KvRouting {
 public:
  struct Pick {
    std::size_t worker = 0;
    std::uint32_t dp_rank = 0;
    std::uint32_t overlap_blocks = 0;  ///< leading prompt blocks cached there
  };

  static Result<std::unique_ptr<KvRouting>> start(KvRoutingOptions options);

  /// Picks the (worker, rank) for `prompt` of adapter `lora` (absent = the base model; its
  /// blocks hashed as the engine hashes them, so another adapter's blocks are no overlap) and adds
  /// it to the load under `key` (unique among the choices in flight).
  Pick route(std::span<const std::uint32_t> prompt, std::uint64_t key,
             const std::optional<std::string>& lora);
  /// The choice produced its first token (or was handed off): its prefill leaves the queue.
  void prefillDone(std::uint64_t key) { router_.load().prefillDone(key); }
  /// The choice ended, or left its worker (handed off to a decode worker).
  void remove(std::uint64_t key) { router_.load().remove(key); }

  KvRoutingFigures figures() const;

 private:
  KvRouting(std::unique_ptr<index::LiveKvIndex> index,
            std::vector<std::pair<std::size_t, std::uint32_t>> candidates,
            const KvRoutingOptions& options);

  std::unique_ptr<index::LiveKvIndex> index_;
  std::vector<std::pair<std::size_t, std::uint32_t>> candidates_;  // global rank → (worker, rank)
  std::uint32_t block_size_;
  engine::HashSeeds seeds_;
  replay::KvCostRouter router_;
  std::vector<std::uint64_t> hashes_;
  std::vector<std::uint32_t> overlaps_;
  std::vector<std::uint64_t> cached_;
  std::uint64_t routed_ = 0;
  std::uint64_t routed_cached_ = 0;
  std::uint64_t query_failures_ = 0;
};

}  // namespace mocker::gateway
