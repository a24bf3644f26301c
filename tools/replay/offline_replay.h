// Offline replay (docs/traces.md, Offline replay and Closed loop): replays a Workload
// through one or more in-process engines ("workers", each an Engine with the same config and
// `dp_size` ranks) on a virtual clock, and feeds a ReplayCollector. No sockets, no sleeping, no
// wall clock: the same workload + options give the same collector contents, bit for bit.
//
// Event loop (global over every worker's ranks; each rank has its own pass clock):
//   * the next dispatch is the earliest eligible turn — trace mode: a session's first turn at its
//     first_arrival_ms, a later turn at (previous turn's terminal time + delay); closed loop: the
//     same for later turns, first turns at 0, and never more than `concurrency` requests in
//     flight (a dispatch waits for a terminal to free a slot). Ties: trace order.
//   * the next pass is the busy rank with the earliest clock (ties: lowest worker, then rank).
//   * dispatches at time t go before passes starting at t or later; an idle rank wakes up at
//     the dispatch time; a request dispatched while its rank's pass is in flight waits for the
//     pass boundary. The request's arrival time is its dispatch time.
// Routing (one decision per dispatch, see RouterKind). KV events of a pass become visible to the
// `kv` router at the pass end (kv_event_visibility = pass_end) or start (pass_start).
// Failure drills (options.faults): checked before each pass (crash, hang, slow) and at each
// dispatch (error, abort); a crashed or hung (worker, rank) gets no request from then on — the
// router knows at once (tools/replay/README.md, "Failure drills offline").
//
// Not thread-safe; runs on the calling thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "engine/config.h"
#include "tools/replay/collector.h"
#include "tools/replay/kv_router.h"
#include "tools/replay/offline_faults.h"
#include "tools/replay/router_kind.h"
#include "tools/replay/workload.h"

namespace mocker::replay {

/// How a dispatch picks its (worker, dp_rank).
///   RoundRobin: worker = dispatch number mod num_workers; rank round-robin per worker.
///   Random:     worker uniform from SplitMix64(router_seed); rank round-robin per worker.
///   Kv:         Dynamo's KV-router cost (tools/replay/kv_router.h) over every (worker, rank):
///               overlap_weight × blocks to prefill + active blocks, with the overlap from the
///               KV index fed by the workers' own KV events and the load from what was
///               dispatched (prefill done at the first token, released at the terminal, each at
///               its own time); lowest cost wins, ties to the smallest index tree, then seeded
///               random (router_seed); temperature > 0 samples a softmax.
///   KvPrefix:   every (worker, rank) is scored by the number of leading blocks of the
///               request's sequence hashes (engine block size and hash seeds) that the KV
///               index says it holds. Highest overlap wins; ties go to the fewest requests in
///               flight on that (worker, rank) (dispatched and not yet ended at the dispatch
///               instant); then to the lowest worker index, then the lowest rank.
/// (RouterKind, its names and parser: tools/replay/router_kind.h.)

/// Progress, reported every few thousand passes and once at the end.
struct OfflineProgress {
  std::uint64_t dispatched = 0;  ///< requests dispatched so far
  std::uint64_t ended = 0;       ///< requests that reached a terminal
  std::uint64_t total = 0;       ///< turns in the workload
  double sim_time_ms = 0.0;      ///< latest pass end reached
};

/// Disaggregated prefill/decode (tools/replay/README.md, Disaggregated replay): P prefill workers
/// compute prompts and hand their KV to D decode workers, which generate every output token.
/// Hop 1 (request → prefill worker) uses OfflineReplayOptions::router; hop 2 (handoff → decode
/// worker) uses `decode_router`: RoundRobin, Random, or Kv = overlap credit 0, i.e. the decode
/// (worker, rank) with the fewest requests in flight (ties: lowest index), as Dynamo routes it.
/// A handoff is delivered to its decode worker at the end of the prefill pass; the decode worker
/// releases the source when it activates the request.
struct DisaggOptions {
  std::uint32_t num_prefill_workers = 1;  ///< >= 1
  std::uint32_t num_decode_workers = 1;   ///< >= 1
  /// Engine settings per role; worker_type is set by the replay. Both need the same block size.
  engine::EngineConfig prefill_engine{};
  engine::EngineConfig decode_engine{};
  RouterKind decode_router = RouterKind::RoundRobin;
};

/// Handoff statistics of a disaggregated run, one sample per activated handoff.
struct HandoffStats {
  std::uint64_t handoffs = 0;         ///< handoffs delivered to a decode worker
  std::uint64_t activations = 0;      ///< handoffs activated (source released)
  std::uint64_t expired_holds = 0;    ///< holds released by kv_hold_timeout_ms
  std::uint64_t refused = 0;          ///< refused by the decode worker (recorded as rejected)
  std::vector<double> transfer_ms{};  ///< ready − prefill end (the modelled KV transfer)
  std::vector<double> queue_ms{};     ///< reserved − delivered (waiting for decode blocks)
  std::vector<double> wait_ms{};      ///< activated − prefill end (handoff to decode start)
  std::vector<std::uint64_t> per_prefill_worker{};
  std::vector<std::uint64_t> per_decode_worker{};
};

/// The report's view of `stats` (distributions of the three handoff times).
HandoffReport summarizeHandoffs(const HandoffStats& stats);

struct OfflineReplayOptions {
  /// Configuration of every worker. REQUIRES: valid (validateEngineConfig); the replay forces
  /// allow_empty_output = true (0-token outputs are allowed in replay, docs/engine.md, Requests).
  engine::EngineConfig engine{};
  std::uint32_t num_workers = 1;  ///< >= 1
  RouterKind router = RouterKind::RoundRobin;
  std::uint64_t router_seed = 0;  ///< Random and Kv routers
  KvRouterConfig kv_router{};     ///< Kv router only (validated by runOfflineReplay)
  /// Closed loop when set (>= 1): first-turn timestamps are ignored.
  std::optional<std::uint32_t> concurrency{};
  /// Called on the replay thread; may be empty.
  std::function<void(const OfflineProgress&)> progress{};
  /// Disaggregated when set: `engine` and `num_workers` are unused.
  std::optional<DisaggOptions> disagg{};
  /// Failure drills (tools/replay/offline_faults.h): the fault plan applied to the workers;
  /// empty specs = none. Checked by runOfflineReplay (checkOfflineFaults).
  OfflineFaultOptions faults{};
};

/// Counters of one run (besides what the collector recorded).
struct OfflineReplayStats {
  std::uint64_t passes = 0;                   ///< passes that did work, all ranks
  double end_ms = 0.0;                        ///< latest pass end
  std::vector<std::uint64_t> per_worker{};    ///< requests dispatched to each worker
  std::uint64_t refused_at_submit = 0;        ///< recorded as rejected at arrival
  std::uint64_t kv_events = 0;                ///< KV events produced, all ranks (kv routers only)
  std::uint64_t kv_index_blocks = 0;          ///< Kv router: (hash, rank) pairs indexed at end
  std::uint64_t kv_routed_hits = 0;           ///< Kv routers: dispatches with overlap > 0
  std::vector<std::string> warnings{};        ///< e.g. the hash-id aliasing warning
  std::optional<HandoffStats> handoff{};      ///< disaggregated runs only
  std::optional<TierReport> tiers{};          ///< runs with KV offload tiers (num_g2_blocks > 0)
  std::optional<OfflineFaultStats> faults{};  ///< runs with a fault plan
};

/// Runs the whole workload. Per-pass engine samples go to collector.onEngineSample with
/// dp_rank = worker · dp_size + rank (a global rank index; disaggregated: prefill workers first,
/// then decode workers). Errors (before anything is simulated): invalid engine config,
/// num_workers 0, concurrency 0, a session without a first arrival in trace mode; disaggregated:
/// 0 workers of a role, different block sizes, an engine type without disaggregation; a fault
/// spec offline cannot honour (checkOfflineFaults).
Result<OfflineReplayStats> runOfflineReplay(const Workload& workload,
                                            const OfflineReplayOptions& options,
                                            ReplayCollector& collector);

}  // namespace mocker::replay
