// VllmScheduler: one DP rank of a vLLM v1-style continuous-batching engine
// (docs/engine.md, vLLM scheduler) over a paged, prefix-cached BlockPool, including the
// TensorRT-LLM guaranteed-no-evict variant (docs/engine.md, TensorRT-LLM scheduler) selected by
// engine_type = trtllm.
//
// Owns its requests (stored once, keyed by RequestId; queues hold ids), its pool and its
// counters. Per-pass cost is proportional to the requests scheduled in that pass, not to all
// requests in the system: queue statistics are maintained incrementally and cancelled waiting
// requests are dropped lazily when they reach the head.
//
// Not thread-safe. Owned by the Engine facade.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "engine/block_pool.h"
#include "engine/config.h"
#include "engine/detail/handoff.h"
#include "engine/detail/pass.h"
#include "engine/detail/rank_core.h"
#include "engine/detail/stats.h"
#include "engine/lora.h"
#include "engine/offload.h"
#include "engine/timing_model.h"

namespace mocker::engine {

class VllmScheduler final : public detail::RankCore {
 public:
  /// REQUIRES: validated config with engine_type vllm or trtllm; `config` outlives this object.
  VllmScheduler(const EngineConfig& config, std::uint32_t dp_rank);

  void submit(detail::AcceptedRequest&& request) override;
  bool cancel(RequestId id) override;
  PassResult step(double now_ms) override;
  bool hasWork() const override { return num_waiting_ > 0 || !running_.empty(); }
  LoadMetrics loadMetrics() const override;
  std::vector<std::uint64_t> cachedBlockHashes() const override {
    return detail::rawHashes(pool_.cachedHashes());
  }
  bool clearCache() override { return pool_.clearCache(); }
  void setKvEvents(bool enabled) override;
  void setKvEventTokens(bool enabled) override { kv_event_tokens_ = enabled; }
  Status checkInvariants() const override;
  void submitHandoff(detail::AcceptedRequest&& request, const HandoffTicket& ticket,
                     double now_ms) override;
  bool releaseHeld(RequestId id) override;
  std::optional<double> nextTimerMs() const override;
  bool handoffReady(RequestId id, double now_ms) override { return book_.ready(id, now_ms); }
  void takeReservations(std::vector<HandoffReservation>& out) override {
    book_.takeReservations(out, dp_rank_);
  }
  std::vector<std::uint64_t> tierBlockHashes(Medium medium) const override;
  LoraUsage loraUsage() const override;
  bool loadLora(std::uint32_t id, double now_ms) override;
  bool unloadLora(std::uint32_t id) override;

 private:
  // Held: prefill worker, prompt done, KV kept for a decode worker. Reserving: decode worker,
  // handoff in the FIFO reservation queue. Reserved: blocks reserved, waiting for activation.
  // Activated: KV in place (num_computed = prompt), waiting for admission.
  // Onboarding: KV offload tiers — blocks held, its prefix being copied from G2/G3 (parked, in no
  // queue). Loaded: that copy is done (num_computed = the blocks it holds), waiting for admission.
  enum class ReqState : std::uint8_t {
    Waiting,
    Preempted,
    Running,
    Finished,
    Held,
    Reserving,
    Reserved,
    Activated,
    Onboarding,
    Loaded
  };

  struct Req : detail::RequestRecord {
    using RequestRecord::RequestRecord;
    std::uint32_t num_computed = 0;
    std::vector<BlockId> blocks;      // index = block position in the sequence
    std::uint32_t num_finalized = 0;  // blocks [0, num_finalized) are cache-visible
    ReqState state = ReqState::Waiting;
    std::uint32_t num_preemptions = 0;
    std::uint32_t loaded_blocks = 0;  // offload tiers: GPU hits + onboarded blocks (parked)
  };
  using ReqMap = std::unordered_map<RequestId, Req>;

  // One request's work in the current pass.
  struct Scheduled {
    RequestId id;
    std::uint32_t num_tokens;       // tokens computed this pass
    std::uint32_t computed_before;  // num_computed before this pass
    std::uint32_t len_at_schedule;
    std::uint32_t prompt_len;
    std::uint32_t lora_id;  // its LoRA adapter (0 = none)
  };

  // What one pass threads through its phases.
  struct Pass {
    PassResult out;
    std::uint64_t budget = 0;  // tokens left of max_num_batched_tokens
    bool preempted = false;
    std::vector<detail::Rejection> rejected;     // fresh requests that can never run
    std::vector<Req*> ready;                     // sample a token this pass, running order
    std::uint64_t ready_len_sum = 0;             // Σ len over `ready`
    std::vector<RequestId> ended_without_token;  // rare: left before sampling
    std::vector<RequestId> completed;            // ended with this pass's token
  };

  struct PrefixMatch {
    std::uint32_t hit_blocks = 0;      // blocks claimed from the cache (after the recompute cap)
    std::uint32_t active_blocks = 0;   // of those, blocks currently active (Loaded: held blocks)
    std::uint32_t onboard_blocks = 0;  // offload tiers: blocks after the hits found in G2/G3
  };

  // How a running request's allocation for this pass ended.
  enum class Growth : std::uint8_t { Allocated, SelfPreempted, Stalled };

  bool isTrtllm() const { return config_.engine_type == EngineType::Trtllm; }
  bool isPrefillWorker() const { return config_.worker_type == WorkerType::Prefill; }
  bool isDecodeWorker() const { return config_.worker_type == WorkerType::Decode; }
  std::uint32_t blocksFor(std::uint64_t tokens) const {
    return static_cast<std::uint32_t>((tokens + block_size_ - 1) / block_size_);
  }

  // The phases of step(), in order.
  /// 1. Running requests spend the budget first, preempting when the pool runs out.
  void scheduleRunning(Pass& pass);
  /// 2. Strict head-of-line admission from waiting; skipped in a pass that preempted.
  void admitWaiting(Pass& pass);
  /// 3. Prefill time and FPM over the requests that computed prompt tokens.
  void timePrefill(Pass& pass);
  /// 4. Requests with nothing left to sample end without a token; the rest whose KV covers their
  ///    whole sequence form `pass.ready`.
  void collectReady(Pass& pass);
  /// 5. Decode FPM over the scheduled decode work and decode time over `pass.ready`.
  void timeDecode(Pass& pass);
  /// 5'. Roofline timing: the pass's duration from all its scheduled sequences (timeDecode).
  void timeRoofline(Pass& pass);
  /// 6. Every ready request samples one token (or fails with the pass); completions release.
  void emitTokens(Pass& pass);

  /// Allocates blocks for `n` more tokens of running_[i], preempting victims until they fit.
  /// `i` keeps pointing at the same request when a victim before it leaves running_.
  /// `drafts` more tokens of KV are acquired for a speculative burst in this pass.
  Growth growOrPreempt(Pass& pass, std::size_t& i, std::uint32_t n, std::uint32_t drafts);
  /// Schedules `n` tokens of `r` after `computed_before` and finalizes the blocks they complete.
  void computeTokens(Pass& pass, Req& r, std::uint32_t computed_before, std::uint32_t n);
  /// Drops the waiting head `it` with a Rejected signal (naming `limit`) at the end of the pass.
  void rejectHead(Pass& pass, ReqMap::iterator it, LengthLimit limit);
  /// TRT-LLM: blocks `r` may still allocate before it completes.
  std::uint64_t blocksToCompletion(const Req& r) const;
  /// TRT-LLM: Σ blocksToCompletion over the running requests (blocks they were promised).
  std::uint64_t outstandingBlocks() const;

  /// Speculative decoding: KV tokens for the drafts of `r`'s worst-case burst (0 when off).
  std::uint32_t draftKv(const Req& r) const;
  /// After a burst of `r` that did not complete it: the accepted drafts count as computed
  /// (finalised), unused draft blocks are released.
  void acceptDrafts(Pass& pass, Req& r);

  // Disaggregation.
  /// Decode worker: reserves blocks for the head of the reservation queue, in FIFO order, while
  /// the head fits; reservations made at `now_ms`.
  void tryReserve(double now_ms, std::vector<KvEvent>& events);
  /// Decode worker: reserved handoffs whose max(ready, reserved) <= now_ms become Activated.
  void activateReserved(Pass& pass, double now_ms);
  /// Decode worker: admits Activated requests (they hold their KV) ahead of waiting requests.
  void admitActivated(Pass& pass, std::uint64_t max_seqs, std::uint64_t& reserved_blocks);

  // LoRA adapters (scheduler_lora.cpp; README "LoRA adapters").
  /// After scheduleRunning: the pass's adapter set starts as the scheduled running requests'.
  void beginLoraBatch();
  /// admitWaiting: the waiting head (front of `queue`) names an adapter the full set lacks; it is
  /// skipped (vLLM's rule), not preempted, and returns to the front after the admissions.
  void skipForLora(std::deque<RequestId>& queue);
  /// After admitWaiting: skipped requests back at the front of their queues, in their order.
  void restoreLoraSkipped();
  /// After timing: the pass loads the adapters it schedules that are not resident
  /// (lora_load_ms each, added to its prefill time), after waiting for a lora_load that is
  /// still running at its start.
  void loadLoras(Pass& pass);

  // KV offload tiers (scheduler_offload.cpp; README "KV offload tiers").
  /// Pass start: transfers that ended by `now_ms` (tier events) and finished onboardings, whose
  /// requests join `loaded_` (admitted ahead of waiting) as Loaded.
  void advanceTiers(Pass& pass, double now_ms);
  /// The waiting head `r` has `match.onboard_blocks` blocks in G2/G3: claims its GPU hits,
  /// allocates the onboarded blocks and parks it while they are copied. False if they do not fit
  /// (the head then waits, like any admission that does not fit).
  bool parkForOnboarding(Pass& pass, Req& r, const PrefixMatch& match,
                         std::uint64_t reserved_blocks);

  PrefixMatch lookupPrefix(Req& r);
  bool acquire(Req& r, std::uint32_t target_tokens, std::uint32_t hit_blocks,
               std::vector<KvEvent>& events);
  void finalizeBlocks(Req& r, std::vector<KvEvent>& events);
  /// Whether `r` filled a block since finalizeBlocks last ran (most decode steps do not):
  /// checked without a division.
  bool blockFilled(const Req& r) const {
    return r.num_computed >= (std::uint64_t{r.num_finalized} + 1) * block_size_;
  }
  void releaseBlocks(Req& r);
  void preempt(std::size_t running_index);
  void removeFromWaitingStats(const Req& r);
  void addToWaitingStats(const Req& r);
  /// The limit that makes a fresh head request impossible to run ("Length limits"), or nullopt.
  /// Checked every time a fresh head is considered; a readmitted request is never rejected.
  std::optional<LengthLimit> rejectionReason(const Req& r) const;
  void finish(RequestId id);
  bool reachedEnd(const Req& r) const;

  const EngineConfig& config_;
  const std::uint32_t dp_rank_;
  const std::uint32_t block_size_;
  const TimingModel timing_;
  BlockPool pool_;
  const detail::EffectiveLimit limit_;  // L: prompts >= L rejected, generation stops at L

  ReqMap requests_;                // lookup only; order comes from the queues
  std::deque<RequestId> waiting_;  // may hold ids of cancelled requests (dropped at the head)
  std::vector<Req*> running_;      // nodes of requests_ (stable until erased)
  std::uint64_t num_waiting_ = 0;

  detail::RunningMoments queued_prefill_;  // prompt lengths of never-run waiting requests
  detail::RunningMoments queued_decode_;   // lengths of preempted waiting requests

  std::uint64_t preemptions_total_ = 0;
  detail::PrefixCacheCounters prefix_counters_;

  detail::HandoffBook book_;               // disaggregation: holds or reservations
  std::optional<OffloadTiers> tiers_;      // KV offload tiers; nullopt when num_g2_blocks = 0
  std::uint64_t num_onboarding_ = 0;       // requests in state Onboarding
  std::deque<RequestId> loaded_;           // Loaded requests, admitted ahead of waiting_ (may hold
                                           // ids of cancelled requests, dropped at the head)
  std::vector<OnboardDone> onboard_done_;  // advanceTiers scratch
  double clock_ms_ = 0.0;                  // latest time the rank has seen
  // Engine::setKvEvents. Off: no Stored / Removed is built (an offline replay without a KV-aware
  // router reads none); a pass whose only work produced events still reports did_work, counted
  // by the pool's removals and the Stored runs not built since the last pass end.
  bool kv_events_ = true;
  bool kv_event_tokens_ = true;  // Engine::setKvEventTokens
  std::uint64_t unbuilt_stored_ = 0;
  std::uint64_t unbuilt_at_pass_end_ = 0;

  // LoRA adapters (max_loras > 0).
  LoraBatch lora_batch_;         // this pass's adapters (at most max_loras)
  LoraResidency lora_resident_;  // resident adapters (max_cpu_loras, LRU)
  std::vector<std::pair<RequestId, bool>> lora_skipped_;  // (id, from loaded_) this pass
  double last_end_ms_ = 0.0;         // end of the rank's latest pass that did work
  double lora_busy_until_ms_ = 0.0;  // a lora_load's end: a pass starting earlier waits for it

  // Per-pass scratch (kept as members to reuse their capacity).
  std::vector<Scheduled> scheduled_;
  std::vector<Req*> ready_scratch_;           // Pass::ready's storage between passes
  std::vector<RequestId> completed_scratch_;  // Pass::completed's storage between passes
  std::vector<PassSequence> roofline_seqs_;   // timeRoofline scratch
};

}  // namespace mocker::engine
