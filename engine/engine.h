// Engine: the deterministic simulation of one inference engine with `dp_size` independent
// data-parallel ranks (docs/engine.md). Each rank owns a KV block pool, a scheduler
// (vLLM, TRT-LLM or SGLang policy) and its own pass clock.
//
//   submit(Request)        → RequestId, or an error naming why the request is refused
//   cancel(id)             → Applied | Noop
//   step(rank, now_ms)     → PassResult of one modelled forward pass of that rank
//
// Time is a parameter (milliseconds as double): the engine never reads a clock,
// sleeps, logs or does I/O. The live service turns PassResult::end_ms into a deadline; offline
// tools advance a virtual clock (offline_driver.h, tools/replay/). Same config + inputs ⇒ same
// results.
//
// Not thread-safe. Owned and used by one thread (the service's engine thread or a replay loop).
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "engine/config.h"
#include "engine/lora.h"
#include "engine/types.h"

namespace mocker::engine {

namespace detail {
class RankCore;
}  // namespace detail

enum class CancelResult { Applied, Noop };

class Engine final {
 public:
  /// REQUIRES: validateEngineConfig(config) succeeded (use create() for untrusted configs).
  explicit Engine(EngineConfig config);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
  Engine(Engine&&) noexcept;
  Engine& operator=(Engine&&) noexcept;

  /// Validates `config` and builds an engine, or returns the validation error.
  static Result<Engine> create(EngineConfig config);

  /// A fresh engine standing in for `previous` (a worker restart, service/README.md "Failure
  /// drills"): its request ids continue after the ones `previous` gave out, so an id never names
  /// two requests in the caller's tables. REQUIRES: nothing submitted to this engine yet.
  void continueIdsAfter(const Engine& previous) { next_id_ = previous.next_id_; }

  const EngineConfig& config() const;
  std::uint32_t blockSize() const;
  std::uint32_t dpSize() const;

  /// Queues a request on its rank's waiting queue. Refused (InvalidArgument naming the field)
  /// for an empty prompt, tokens beside a deferred prompt, dp_rank >= dp_size, zero output
  /// without allow_empty_output. A plan whose length differs from max_output_tokens is accepted;
  /// the plan's length wins. A `lora` adapter needs max_loras > 0 and a name checkLoraName
  /// accepts.
  /// Memory: a queued request costs O(prompt + plan), never O(max_output_tokens); with a
  /// deferred prompt, O(plan) on a vLLM / TRT-LLM rank until its first admission attempt. An
  /// allocation failure refuses the request (ResourceExhausted) and leaves the engine unchanged.
  Result<RequestId> submit(Request request);

  /// Removes a waiting or running request and releases its KV blocks. Applied if the request
  /// was still known to the scheduler, Noop otherwise (finished, cancelled, unknown).
  /// The outputs a pass already returned are the caller's: use discardOutputs() to drop the
  /// cancelled request's signals from an in-flight PassResult.
  CancelResult cancel(RequestId id);

  /// Disaggregation, decode worker: queues `ticket` (from a prefill worker's PassResult::handoffs)
  /// on `dp_rank`'s FIFO reservation queue at `now_ms`; the request is activated by a later pass
  /// at max(ready, reserved) and then generates every output token. Refused (InvalidArgument) on a
  /// worker that is not a decode worker, for a block size that differs from this worker's, an
  /// empty prompt, a rank out of range, or a prompt at or beyond the effective length limit.
  Result<RequestId> submitHandoff(HandoffTicket ticket, std::uint32_t dp_rank, double now_ms);

  /// Disaggregation, decode worker (live service): a handoff submitted with ticket.ready_ms =
  /// +infinity waits after its reservation until its KV arrives. takeReservations() returns the
  /// reservations made since the last call (in reservation order, ranks ascending; submit,
  /// cancel and step reserve); handoffReady(id, now_ms) says the transfer ended at `now_ms`, so
  /// a pass at or after max(now_ms, reserved) activates it. Applied once, for a reserved handoff
  /// whose ready time is unknown; Noop otherwise (unknown, not yet reserved, already ready,
  /// cancelled). cancel() drops a pending handoff in any state.
  std::vector<HandoffReservation> takeReservations();
  CancelResult handoffReady(RequestId id, double now_ms);

  /// Disaggregation, prefill worker: the decode worker has the KV of held request `source_id`;
  /// its blocks are released (they stay cached). Applied once; Noop for an unknown, released,
  /// expired or cancelled id. cancel() also drops a held request.
  CancelResult releaseHandoff(RequestId source_id);

  /// The earliest modelled time at which step(dp_rank) has work that needs no new input (a
  /// handoff activation or a hold timeout), even if hasWork(dp_rank) is false; nullopt if none.
  std::optional<double> nextTimerMs(std::uint32_t dp_rank) const;

  /// Runs one pass of `dp_rank` starting at `now_ms`. A pass with nothing to do returns
  /// did_work = false and end_ms = now_ms.
  PassResult step(std::uint32_t dp_rank, double now_ms);

  /// True while the rank has waiting or running requests.
  bool hasWork(std::uint32_t dp_rank) const;
  /// True while any rank has work.
  bool hasWork() const;

  /// Current load metrics of a rank ("Load metrics").
  LoadMetrics loadMetrics(std::uint32_t dp_rank) const;

  /// Sorted sequence hashes of every block currently cache-visible on `dp_rank` (active or
  /// inactive): the state a KV-event subscriber should reproduce (`kv_snapshot`).
  std::vector<std::uint64_t> cachedBlockHashes(std::uint32_t dp_rank) const;
  /// Sorted hashes a tier of `dp_rank` holds (README "KV offload tiers"): Gpu = the pool
  /// (cachedBlockHashes), Cpu = G2, Disk = G3 (empty when the tier is off).
  std::vector<std::uint64_t> tierBlockHashes(std::uint32_t dp_rank, Medium medium) const;

  /// KV events on (the default) or off. Off: every pass returns an empty `kv_events` and nothing
  /// else changes (outputs, timing, did_work, metrics are those of a run with events on). For a
  /// caller that would discard them (offline replay without a KV-aware router): the ranks then
  /// skip building their Stored / Removed events (SGLang: a third of a page-size-1 replay; vLLM /
  /// TRT-LLM: the Stored token copies; a rank with offload tiers keeps building them).
  void setKvEvents(bool enabled);
  bool kvEvents() const { return kv_events_; }
  /// Whether a BlockStored carries its blocks' token ids (the default, as vLLM's wire event).
  /// Off: `token_ids` stays empty and nothing else changes — for a caller that reads only the
  /// hashes (the offline replay's KV index), which then pays no copy of every stored prompt.
  void setKvEventTokens(bool enabled);

  /// vLLM reset_prefix_cache: succeeds only when the rank has no active blocks; drops every
  /// cached block and returns the AllBlocksCleared event to publish. nullopt ⇒ refused.
  std::optional<KvEvent> resetPrefixCache(std::uint32_t dp_rank);

  /// Checks the rank's internal invariants (free + active + inactive = total, refcounts,
  /// queue membership, copies). Returns an error describing the first violation. For tests.
  Status checkInvariantsForTest(std::uint32_t dp_rank) const;

  /// LoRA adapters (docs/engine.md "LoRA adapters"): the name of adapter id `id` as KV events
  /// and loraUsage carry it (REQUIRES: an id this engine gave out, >= 1).
  const std::string& loraName(std::uint32_t id) const { return loras_.name(id); }
  /// lora_load (vLLM's add_lora) at `now_ms`, on every rank: adapter `name` becomes resident
  /// (the most recently used; the least recently used one is evicted when max_cpu_loras are
  /// resident). A rank where it was not resident is busy for lora_load_ms from max(now_ms, the
  /// end of its last pass): a pass starting before then waits. True if some rank loaded it.
  /// Refused: LoRA off (Unsupported), a name checkLoraName refuses or one more than
  /// kMaxLoraAdapters (InvalidArgument naming "name").
  Result<bool> loadLora(std::string_view name, double now_ms);
  /// lora_unload (vLLM's remove_lora), on every rank: `name` is no longer resident; a running
  /// or waiting request of it loads it again when next scheduled. True if some rank held it.
  /// Refused as loadLora.
  Result<bool> unloadLora(std::string_view name);
  /// Adapters of `dp_rank`'s running and waiting requests (vllm:lora_requests_info); O(requests).
  LoraUsage loraUsage(std::uint32_t dp_rank) const;

 private:
  std::unique_ptr<EngineConfig> config_;
  std::vector<std::unique_ptr<detail::RankCore>> ranks_;
  std::uint64_t next_id_ = 1;
  bool kv_events_ = true;
  LoraRegistry loras_;
};

/// Removes every output signal of `id` from `pass` (a cancel during the in-flight pass).
void discardOutputs(PassResult& pass, RequestId id);

/// A rank's effective length limit L (docs/engine.md "Length limits"): a fresh prompt of >= L
/// tokens is rejected and generation stops when prompt + output reaches L; `binding` names the
/// limit equal to L (the first of max_model_len, kv capacity, max_num_batched_tokens). The same
/// for every rank of `config`. REQUIRES: a valid config.
struct LengthBound {
  std::uint64_t tokens = 0;
  LengthLimit binding = LengthLimit::None;
};
LengthBound effectiveLengthLimit(const EngineConfig& config);

/// Output token k of a request without a plan ("Output tokens").
std::uint32_t syntheticToken(std::uint64_t token_seed, RequestId id, std::uint32_t k);

}  // namespace mocker::engine
