// SglangScheduler: one DP rank of an SGLang-style engine (docs/engine.md, SGLang scheduler) over a
// paged RadixCache: fcfs/lpm ordering, prefill admission under SGLang's token budgets
// and new-token ratio, chunked prefill, exclusive extend passes and decode retraction.
//
// Owns its requests (stored once, keyed by RequestId; queues hold ids), its radix cache and its
// counters. Per-pass cost is proportional to the batch (plus the ≤ 128 waiting requests lpm
// scores): queue statistics and the page-rounding slack are maintained incrementally, and
// cancelled waiting requests are dropped lazily when they reach the head. With num_g2_blocks > 0
// a host tier sits under the radix cache as SGLang's HiCache (sglang_scheduler_hicache.cpp).
//
// Not thread-safe. Owned by the Engine facade.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/config.h"
#include "engine/detail/handoff.h"
#include "engine/detail/pass.h"
#include "engine/detail/rank_core.h"
#include "engine/detail/stats.h"
#include "engine/offload.h"
#include "engine/radix_cache.h"
#include "engine/timing_model.h"

namespace mocker::engine {

class SglangScheduler final : public detail::RankCore {
 public:
  /// "SGLang constants".
  static constexpr std::uint32_t kLpmFallbackWaiting = 128;
  static constexpr std::uint32_t kInBatchPrefixThreshold = 32;
  static constexpr double kInitRatioBase = 0.7;
  static constexpr double kMinRatioFactor = 0.14;
  static constexpr double kRatioDecayPasses = 600.0;
  /// HiCache: a host hit shorter than this many tokens is recomputed, not loaded back
  /// (HiRadixCache's load_back_threshold).
  static constexpr std::uint64_t kLoadBackThreshold = 10;

  /// REQUIRES: validated config with engine_type sglang; `config` outlives this object.
  SglangScheduler(const EngineConfig& config, std::uint32_t dp_rank);

  void submit(detail::AcceptedRequest&& request) override;
  bool cancel(RequestId id) override;
  PassResult step(double now_ms) override;
  bool hasWork() const override {
    return num_waiting_ > 0 || !running_.empty() || num_onboarding_ > 0;
  }
  LoadMetrics loadMetrics() const override;
  std::vector<std::uint64_t> cachedBlockHashes() const override {
    return detail::rawHashes(cache_.cachedHashes());
  }
  bool clearCache() override { return cache_.clear(); }
  /// Off while the cache is empty at page size 1: the radix tree is keyed by tokens (on again
  /// re-keys it by sequence hashes).
  void setKvEvents(bool enabled) override;
  void setKvEventTokens(bool enabled) override { kv_event_tokens_ = enabled; }
  Status checkInvariants() const override;
  void submitHandoff(detail::AcceptedRequest&& request, const HandoffTicket& ticket,
                     double now_ms) override;
  bool releaseHeld(RequestId id) override;
  std::optional<double> nextTimerMs() const override;
  std::vector<std::uint64_t> tierBlockHashes(Medium medium) const override;
  bool handoffReady(RequestId id, double now_ms) override { return book_.ready(id, now_ms); }
  void takeReservations(std::vector<HandoffReservation>& out) override {
    book_.takeReservations(out, dp_rank_);
  }

  /// Scheduler state exposed for tests.
  double newTokenRatio() const { return new_token_ratio_; }
  double initNewTokenRatio() const { return init_ratio_; }
  double minNewTokenRatio() const { return min_ratio_; }
  double newTokenRatioDecay() const { return decay_; }
  /// Waiting request ids in queue order (live ones only).
  std::vector<RequestId> waitingOrder() const;
  std::vector<RequestId> runningOrder() const { return running_; }
  /// Tokens of `id` whose KV is materialised (0 if unknown).
  std::uint32_t materializedTokens(RequestId id) const;

 private:
  // Disaggregation (as in the vLLM scheduler): Held — prefill worker, prompt done, KV kept for a
  // decode worker; Reserving — decode worker, in the FIFO reservation queue; Reserved — pages
  // reserved, KV in flight (materialized 0); Activated — KV in place, waiting for admission.
  // Onboarding (HiCache): its device prefix locked and pages taken for the prefix being loaded
  // back from host memory (materialized 0), in no queue until the copy ends.
  enum class ReqState : std::uint8_t {
    Waiting,
    Running,
    Done,
    Held,
    Reserving,
    Reserved,
    Activated,
    Onboarding
  };

  struct Req : detail::RequestRecord {
    using RequestRecord::RequestRecord;
    std::uint32_t materialized = 0;   // tokens whose KV exists
    std::uint32_t path_pages = 0;     // cached pages held: the radix path keys[0, path_pages)
    std::uint32_t private_pages = 0;  // pages held after the path (not cache-visible)
    ReqState state = ReqState::Waiting;
    std::uint32_t num_retractions = 0;
    bool loaded = false;  // HiCache: holds a prefix loaded back from host, not yet admitted
    // Radix page keys while the cache is token-keyed (s_0, then the tokens), grown lazily;
    // otherwise the keys are `hashes`.
    std::vector<BlockHash> token_keys;

    std::uint32_t remainingOutput() const { return max_output - generated(); }
    std::uint32_t heldPages() const { return path_pages + private_pages; }
  };

  // One request's prefill work in the current pass.
  struct Prefill {
    RequestId id;
    std::uint32_t chunk_end;  // materialised tokens after this pass
    std::uint32_t kv_before;  // tokens already in KV before this chunk (cache hits or chunks)
    std::uint32_t prompt_len;
  };

  // What one pass threads through its phases.
  struct Pass {
    PassResult out;
    std::vector<detail::Rejection> rejected;  // fresh requests that can never run
    std::vector<RequestId> decode_set;        // extend pass: newly completed prompts; else running_
    std::vector<Req*> active;                 // decode_set members that sample a token this pass
    bool extend_pass = false;                 // something was prefilled: exclusive extend
    bool retracted_any = false;
    std::vector<RequestId> handoffs_admitted;  // activated handoffs admitted by this pass
  };

  std::uint64_t pageTokens(std::uint64_t pages) const { return pages * page_size_; }
  std::uint32_t pagesFor(std::uint64_t tokens) const {
    return static_cast<std::uint32_t>((tokens + page_size_ - 1) / page_size_);
  }
  // A reserved handoff's or a loading request's pages are all spoken for by their transfer: no
  // slack until it ends.
  std::uint64_t overheadOf(const Req& r) const {
    return r.state == ReqState::Reserved || r.state == ReqState::Onboarding
               ? 0
               : pageTokens(r.heldPages()) - r.materialized;
  }
  bool isPrefillWorker() const { return config_.worker_type == WorkerType::Prefill; }
  bool isDecodeWorker() const { return config_.worker_type == WorkerType::Decode; }
  /// Prefill worker: `r` is held instead of sampling once its prompt is complete.
  bool holdsAtPrompt(const Req& r) const { return isPrefillWorker() && r.generated() == 0; }

  // The phases of step(), in order (lpm ordering first when it applies).
  void orderWaitingLpm();
  /// Prefill admission, retried once after releasing waiting partial prefills when nothing
  /// could run; an OOM resets new_token_ratio.
  void admit(Pass& pass);
  /// Prefill time and FPM; completed prompts join running_ and the decode set, partial ones go
  /// back to the front of waiting.
  void timePrefill(Pass& pass);
  /// Ends requests with nothing to sample; retracts (fewest generated first) until one more
  /// token per request fits, filling `pass.active`.
  void selectDecoding(Pass& pass);
  /// Decode FPM and time, then one token per active request; compacts running_.
  void emitTokens(Pass& pass);

  /// Token slots `r` needs for one more token beyond the pages it holds.
  std::uint64_t growthOf(const Req& r) const;
  /// Token slots of free plus evictable pages.
  std::uint64_t reclaimableTokens() const;

  /// Prefill admission ("SGLang pass" step 2); fills prefills_, out.admissions and `rejected`.
  bool admitPrefill(PassResult& out, std::vector<detail::Rejection>& rejected);
  /// KV for a request holding none: locks the cached pages `prefix` (a matched path) and allocates
  /// private pages up to `total_pages`; false (nothing changed) when they do not fit.
  bool lockAndAllocate(Req& r, std::span<const BlockHash> prefix, std::uint32_t total_pages,
                       std::vector<KvEvent>& events);
  /// Allocates KV for `r` up to `chunk_end` tokens; false (nothing changed) when out of memory.
  bool allocateChunk(Req& r, std::uint32_t chunk_end, std::uint32_t& cached,
                     std::vector<KvEvent>& events);
  /// Turns every newly completed private page of `r` into a tree node (Stored runs).
  void publishPages(Req& r, std::vector<KvEvent>& events);
  /// Drops all of `r`'s KV (unlocks its path, frees private pages); materialized = 0.
  void releaseKv(Req& r);
  /// Retracts a running request to the front of waiting ("SGLang pass" step 5).
  void retract(Req& r);
  /// Releases the pages of waiting requests that hold a partial prefill, newest first, until
  /// `needed_pages` fit (all of them if needed_pages is nullopt). Returns true if any was released.
  bool releaseWaitingHolders(std::optional<std::uint64_t> needed_pages);
  void pushWaitingFront(Req& r);
  void addToWaitingStats(const Req& r);
  void removeFromWaitingStats(const Req& r);
  void finish(Req& r);
  bool reachedEnd(const Req& r) const;
  void ensureHashes(Req& r, std::uint32_t pages) const;
  /// The radix cache's page keys of `r` (at least `pages` of them after ensureKeys).
  std::span<const BlockHash> pageKeys(const Req& r) const {
    return cache_.tokenKeyed() ? std::span(r.token_keys) : std::span(r.hashes);
  }
  void ensureKeys(Req& r, std::uint32_t pages) const;
  /// The cached path `r` holds.
  std::span<const BlockHash> path(const Req& r) const { return pageKeys(r).first(r.path_pages); }

  // HiCache (sglang_scheduler_hicache.cpp).
  /// Pass start: transfers that ended by `now_ms` (tier events); requests whose load back ended
  /// get their pages published (Stored) and return to the front of waiting, in completion order.
  void advanceTiers(Pass& pass, double now_ms);
  /// The fresh waiting head `r`: if its radix match continues in host memory for at least
  /// kLoadBackThreshold tokens and the pages fit (under `rem_total`, charged for them), locks
  /// its device prefix, takes pages for the host part, starts the load and parks it (popped).
  bool parkForLoadBack(Req& r, double& rem_total, std::vector<KvEvent>& events, double now_ms);

  // Disaggregation.
  /// Decode worker: reserves pages for the head of the reservation queue, in FIFO order, while
  /// the head fits; reservations made at `now_ms`.
  void tryReserve(double now_ms, std::vector<KvEvent>& events);
  /// Decode worker: reserved handoffs whose max(ready, reserved) <= now_ms become Activated.
  void activateReserved(Pass& pass, double now_ms);
  /// Decode worker: admits Activated requests (they hold their KV) ahead of waiting requests;
  /// they sample output token 0 in this pass.
  void admitActivated(Pass& pass);

  const EngineConfig& config_;
  const SglangConfig& sg_;
  const std::uint32_t dp_rank_;
  const std::uint32_t page_size_;
  const TimingModel timing_;
  RadixCache cache_;
  // Engine::setKvEvents. Off: no Stored / Removed is built; a pass whose only work was an
  // eviction still reports did_work, counted through the cache's eviction total.
  bool kv_events_ = true;
  bool kv_event_tokens_ = true;  // Engine::setKvEventTokens
  std::uint64_t evicted_at_pass_end_ = 0;
  const std::uint64_t total_tokens_;  // N·B
  // Our length limit: a sequence needing all N pages stops, a prompt that would is rejected
  // (L = (N − 1)·B + 1 tokens, binding "kv capacity"; SGLANG.md "Our rules").
  const detail::EffectiveLimit limit_;

  const double init_ratio_;
  const double min_ratio_;
  const double decay_;
  double new_token_ratio_;

  std::unordered_map<RequestId, Req> requests_;  // lookup only; order comes from the queues
  std::deque<RequestId> waiting_;  // may hold ids of cancelled requests (dropped lazily)
  std::vector<RequestId> running_;
  std::uint64_t num_waiting_ = 0;
  std::vector<RequestId> waiting_holders_;  // waiting requests that hold KV (partial prefill)
  std::uint64_t page_overhead_ = 0;         // Σ page-rounding slack of requests holding KV

  detail::RunningMoments queued_prefill_;  // prompt lengths of waiting requests without output
  detail::RunningMoments queued_decode_;   // lengths of retracted waiting requests with output

  std::uint64_t retractions_total_ = 0;
  detail::PrefixCacheCounters prefix_counters_;

  std::optional<OffloadTiers> tiers_;      // HiCache host tier; nullopt when num_g2_blocks = 0
  std::uint64_t num_onboarding_ = 0;       // requests in state Onboarding (parked)
  std::vector<OnboardDone> onboard_done_;  // advanceTiers scratch

  detail::HandoffBook book_;  // disaggregation: holds or reservations
  double clock_ms_ = 0.0;     // latest time the rank has seen

  // Per-pass scratch (kept as members to reuse their capacity).
  std::vector<Prefill> prefills_;
  std::vector<PassSequence> roofline_seqs_;  // roofline timing scratch
  bool oom_ = false;
};

}  // namespace mocker::engine
