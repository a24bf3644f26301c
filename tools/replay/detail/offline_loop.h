// The offline replay's event loop (tools/replay/offline_replay.h, which documents its rules):
// one object per run over the in-process workers. Its members are defined in three files:
// offline_replay.cpp (the loop, routing, dispatch and passes), offline_replay_handoffs.cpp
// (disaggregated prefill/decode handoffs) and offline_replay_faults.cpp (failure drills: crash,
// hang, slow, abort; tools/replay/offline_faults.h).
//
// Not thread-safe; runs on the calling thread.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <queue>
#include <string>
#include <vector>

#include "engine/block_hash.h"
#include "engine/engine.h"
#include "tools/index/kv_index.h"
#include "tools/replay/collector.h"
#include "tools/replay/detail/offline_state.h"
#include "tools/replay/heap_huge_pages.h"
#include "tools/replay/kv_router.h"
#include "tools/replay/offline_faults.h"
#include "tools/replay/offline_replay.h"
#include "tools/replay/random.h"
#include "tools/replay/turn_schedule.h"
#include "tools/replay/workload.h"

namespace mocker::replay::detail {

class OfflineReplay {
 public:
  /// `num_prefill` > 0: workers [0, num_prefill) are prefill workers, the rest decode workers.
  OfflineReplay(const Workload& workload, const OfflineReplayOptions& options,
                ReplayCollector& collector, std::vector<engine::Engine> workers,
                std::uint32_t num_prefill);

  OfflineReplayStats run();

 private:
  double nextDispatchTime() const;

  std::optional<std::uint32_t> earliestBusySlot() const;

  /// Recomputes next_pass_ms_[g] after slot g's clock, blocked flag or engine queue changed
  /// (a dispatch or handoff to it, a pass of it, a release of one of its held requests). A
  /// rank with a timer (handoff activation, hold timeout, offload-tier transfer) wakes up for it
  /// even when idle.
  void refreshNextPass(std::uint32_t g);

  /// KV offload tiers: every rank's tier counters summed; nullopt when no worker has tiers.
  std::optional<TierReport> tierReport() const;

  /// Applies KV-event batches that are visible at `now` to the router's index.
  void flushEvents(double now);

  /// Applies the kv router's load changes that happened at or before `now`.
  void flushLoad(double now);

  /// Settles terminals that happened at or before `now` into the in-flight counts.
  void settleTerminals(double now);

  /// Picks a (worker, rank) slot among workers [first, last): round-robin / random over the
  /// workers (rank round-robin per worker), or kv: the highest overlap of `tokens` (with
  /// `overlap_credit`; none for the decode hop) and then the fewest requests in flight. The
  /// prompt's blocks are hashed under its adapter `lora` as the engine hashes them, so blocks
  /// cached under another adapter (or the base model) are no overlap.
  std::optional<std::uint32_t> route(double now, const std::vector<std::uint32_t>& tokens,
                                     const std::optional<std::string>& lora, RouterKind kind,
                                     std::uint32_t first, std::uint32_t last, std::uint64_t turn,
                                     bool overlap_credit);

  /// Whether some rank of `worker` is up.
  bool workerUp(std::uint32_t worker) const;

  void dispatch(double now);

  void track(std::uint32_t worker, engine::RequestId id, const Tracked& t);

  /// The earliest pending handoff reaches its decode worker (at the prefill pass end, or at the
  /// end of that worker's pass in flight).
  void deliverHandoff();

  /// Something freed capacity on `worker` (a released or cancelled hold): its ranks may run.
  void unblockWorker(std::uint32_t worker);

  /// A request reached its terminal at `time_ms`: record it, free its concurrency slot and
  /// make the session's next turn eligible after its delay.
  void end(RequestHandle handle, std::uint32_t session, std::uint32_t turn, double time_ms,
           TerminalStatus status, StopReason reason = StopReason::None);

  void step(std::uint32_t g, double start_ms);

  /// A `slow` fault: the pass takes `factor` × its modelled time (its outputs and handoffs
  /// stretched with it), as `mocker serve` paces it.
  static void stretch(engine::PassResult& pass, double factor);

  /// A `crash` fault at `time_ms`: the worker stops; every request it holds fails then.
  void crash(std::uint32_t worker, double time_ms);

  /// A `hang` fault of slot `g` at `time_ms`: no more passes; the requests it holds end
  /// `cancelled` at their arrival + the request timeout (the client's own), never before now.
  void hang(std::uint32_t g, double time_ms);

  void markDown(std::uint32_t g);

  /// Ends a request a crashed or hung worker holds (it is never stepped again).
  void endHeld(Tracked& t, double time_ms, TerminalStatus status);

  /// An `abort` fault: the stream of `id` on `slot` reached its token count at `time_ms`; it
  /// ends `failed` and leaves the engine.
  void abortStream(Slot& slot, engine::RequestId id, Tracked& t, double time_ms);

  /// Disaggregation: new handoffs leave for the decode side, activated ones release their
  /// sources, expired holds are counted.
  void handleHandoffs(Slot& slot, engine::PassResult& pass);

  void reportProgress();

  HeapHugePages heap_pages_;  // first: the heap is advised before the run allocates
  const Workload& workload_;
  const OfflineReplayOptions& options_;
  ReplayCollector& collector_;
  std::vector<engine::Engine> workers_;
  PromptSynthesizer synth_;
  bool defer_prompts_ = false;       // submit turns' prompts as Request::deferred_prompt
  bool route_reads_prompt_ = false;  // the router hashes prompts (kv, kv_prefix)
  SplitMix64 rng_;
  std::uint32_t block_size_;
  engine::HashSeeds seeds_;
  engine::KvEventVisibility kv_visibility_;
  std::uint32_t num_prefill_;                  // 0 = aggregated
  std::vector<std::vector<Tracked>> tracked_;  // per worker, by engine request id
  std::vector<std::uint32_t> next_rank_;       // per worker, round-robin rank
  std::vector<std::uint32_t> first_slot_;      // per worker, its rank 0's slot
  std::vector<Slot> slots_;                    // worker-major: g = first_slot_[worker] + rank
  std::priority_queue<PendingHandoff, std::vector<PendingHandoff>, PendingHandoffLater> handoffs_;
  std::uint64_t next_handoff_seq_ = 0;
  // Per slot: its clock when it can run a pass (not blocked, its engine rank has work), else
  // +inf; one compact array for the loop's scan instead of asking every engine each iteration.
  std::vector<double> next_pass_ms_;
  TurnSchedule schedule_;  // eligible turns, dependencies, cumulative prompts
  std::priority_queue<double, std::vector<double>, std::greater<>> free_slots_;  // closed loop
  std::priority_queue<PendingEvents, std::vector<PendingEvents>, PendingEventsLater>
      pending_events_;
  std::uint64_t next_event_seq_ = 0;
  index::KvIndex index_;
  std::vector<std::uint64_t> hashes_;          // scratch
  std::vector<std::uint32_t> prompt_scratch_;  // scratch: a deferred prompt the router hashes
  std::vector<std::uint32_t> overlap_;         // scratch
  std::vector<std::uint64_t> tree_sizes_;      // scratch
  KvCostRouter cost_router_;
  std::priority_queue<LoadChange, std::vector<LoadChange>, LoadChangeLater> load_changes_;
  std::uint64_t next_load_seq_ = 0;
  OfflineFaults faults_;
  std::uint32_t num_down_ = 0;                                  // slots down (crashed or hung)
  std::map<RequestHandle, service::Injection> pending_aborts_;  // by handle, until it fires
  std::uint64_t dispatches_ = 0;
  std::uint64_t ended_ = 0;
  std::uint64_t total_turns_ = 0;
  OfflineReplayStats stats_;
};

}  // namespace mocker::replay::detail
