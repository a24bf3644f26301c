// The pass code every scheduler shares: the per-request record both schedulers build on, and the
// pieces of a pass result they fill the same way — opening a pass, scaling modelled times,
// admission records, output signals (token, terminal without a token, failure, rejection), Stored
// runs of newly cache-visible blocks, and closing a pass (end time, queue statistics, load
// metrics).
//
// A scheduler's step() reads as its phases over these helpers; what differs between the engine
// families (queues, budgets, allocation, preemption or retraction) stays in the scheduler.
//
// Internal to engine/. Pure functions and value types; not thread-safe.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "engine/block_hash.h"
#include "engine/config.h"
#include "engine/detail/rank_core.h"
#include "engine/detail/stats.h"
#include "engine/engine.h"
#include "engine/types.h"

namespace mocker::engine::detail {

/// "No limit" for an unset optional bound (max_num_seqs, max_num_batched_tokens).
inline constexpr std::uint64_t kUnbounded = std::numeric_limits<std::uint64_t>::max();

/// `limit` or kUnbounded when it is null.
inline std::uint64_t limitOrUnbounded(const std::optional<std::uint32_t>& limit) {
  return limit ? *limit : kUnbounded;
}

/// What every scheduler stores per request, whatever its KV bookkeeping looks like.
struct RequestRecord {
  RequestId id;
  std::vector<std::uint32_t> tokens;  // prompt followed by every sampled output token
  // Until materializePrompt(): the prompt (tokens is then empty; prompt_len is its size).
  std::shared_ptr<const PromptSource> deferred_prompt;
  std::uint32_t prompt_len = 0;
  std::uint32_t max_output = 0;        // may be clamped by the scheduler (trtllm)
  std::uint32_t requested_output = 0;  // as submitted: a stream ending before it says why
  std::optional<std::vector<std::uint32_t>> plan;
  std::vector<BlockHash> hashes;  // sequence hashes of full blocks, grown lazily
  bool admitted_before = false;
  std::uint32_t first_cached_tokens = 0;  // reused prompt tokens at the first admission
  std::uint32_t spec_steps = 0;           // speculative bursts drawn so far (the draws' step j)
  std::uint32_t lora_id = 0;              // LoRA adapter id (0 = none)
  std::string lora_name;                  // its name (empty = none)
  std::optional<std::uint64_t> lora_key;  // its hash key: the parent of block 0 (block_hash.h)

  RequestRecord() = default;
  /// Takes the prompt and plan. Reserves nothing for output: memory follows the tokens actually
  /// generated, never max_output (a queued request costs O(prompt)).
  explicit RequestRecord(AcceptedRequest&& request);

  /// A deferred prompt becomes `tokens` (room for a few outputs reserved). Needed before
  /// anything reads tokens, len() or hashes: a scheduler calls it at submit or, vLLM / TRT-LLM,
  /// when the request is first considered for admission (nothing reads them before).
  void materializePrompt() {
    if (deferred_prompt) materializeDeferred();
  }

  std::uint32_t len() const { return static_cast<std::uint32_t>(tokens.size()); }
  std::uint32_t generated() const { return len() - prompt_len; }
  /// The seeds that hash this request's blocks (its adapter's key included).
  HashSeeds hashSeeds(const EngineConfig& config) const {
    return {config.hash_seed, config.chain_seed, lora_key};
  }

 private:
  void materializeDeferred();
};

/// The effective length limit L (docs/engine.md, Length limits) and the limit that binds (the
/// first of max_model_len, kv capacity, max_num_batched_tokens equal to L). A prompt of >= L
/// tokens is rejected and generation stops when len reaches L.
struct EffectiveLimit {
  std::uint64_t tokens = kUnbounded;
  LengthLimit binding = LengthLimit::None;

  /// Tokens `r` may still generate: up to its max_output and until len reaches the limit.
  std::uint32_t remaining(const RequestRecord& r) const {
    const std::uint64_t by_output = r.max_output > r.generated() ? r.max_output - r.generated() : 0;
    const std::uint64_t by_limit = tokens > r.len() ? tokens - r.len() : 0;
    return static_cast<std::uint32_t>(std::min(by_output, by_limit));
  }

  /// The limit that stopped `r`'s generation, or None when it ended at its requested output.
  LengthLimit stopReason(const RequestRecord& r) const {
    return r.len() >= tokens && r.generated() < r.requested_output ? binding : LengthLimit::None;
  }
};

/// vLLM / TRT-LLM: L = min(max_model_len, N·B, max_num_batched_tokens if chunked prefill
/// is off), null terms ∞.
EffectiveLimit vllmEffectiveLimit(const EngineConfig& config, std::uint32_t block_size);

/// SGLang: L = (N − 1)·B + 1, binding kv capacity (a sequence needing all N pages stops).
EffectiveLimit sglangEffectiveLimit(const EngineConfig& config);

/// The effective limit of `config`'s engine type.
EffectiveLimit effectiveLimit(const EngineConfig& config);

/// A fresh request refused at the head of waiting, with the limit its prompt reached.
struct Rejection {
  RequestId id;
  LengthLimit limit = LengthLimit::None;
};

/// Prefix-cache counters of the load metrics, accumulated per admission.
struct PrefixCacheCounters {
  std::uint64_t queries_tokens = 0;
  std::uint64_t hits_tokens = 0;
};

/// An empty pass result of `dp_rank` starting at `now_ms`.
inline PassResult beginPass(std::uint32_t dp_rank, double now_ms) {
  PassResult out;
  out.dp_rank = dp_rank;
  out.start_ms = now_ms;
  out.fpm.dp_rank = dp_rank;
  return out;
}

/// Modelled prefill time after the speedup ratio (0 = 1: time is never compressed to nothing).
inline double scaledPrefillMs(const EngineConfig& config, double raw_ms) {
  const double speedup = config.speedup_ratio > 0.0 ? config.speedup_ratio : 1.0;
  return raw_ms / speedup;
}

/// Modelled decode time after the speedup and decode speedup ratios.
inline double scaledDecodeMs(const EngineConfig& config, double raw_ms) {
  const double speedup = config.speedup_ratio > 0.0 ? config.speedup_ratio : 1.0;
  return raw_ms / (speedup * config.decode_speedup_ratio);
}

/// True if the timing model produced a non-finite time: every sampling request of the pass then
/// fails instead of emitting a token.
inline bool passFailed(const PassResult& out) {
  return !std::isfinite(out.prefill_ms) || !std::isfinite(out.decode_ms);
}

/// Records that `r` moved from waiting to running with `cached` reused prompt tokens: the
/// admission event, the first admission's cached tokens and the prefix-cache counters.
inline void recordAdmission(RequestRecord& r, std::uint32_t cached, PassResult& out,
                            PrefixCacheCounters& counters) {
  // "Pass result": generated tokens recomputed after a preemption are never reused *input*.
  out.admissions.push_back({r.id, std::min(cached, r.prompt_len), r.admitted_before});
  if (!r.admitted_before) r.first_cached_tokens = cached;
  r.admitted_before = true;
  counters.queries_tokens += r.len();
  counters.hits_tokens += cached;
}

/// The next output token of `r`: its planned token, or the synthetic one (syntheticToken).
inline std::uint32_t nextOutputToken(const RequestRecord& r, std::uint64_t token_seed) {
  const std::uint32_t k = r.generated();
  if (r.plan) return (*r.plan)[k];
  return syntheticToken(token_seed, r.id, k);
}

/// Samples the next token of `r`: appends it to r.tokens and its signal to `outputs` (the first
/// token carries the reused prompt tokens), and returns the signal. The caller sets `terminal`
/// if `r` ends with it.
///
/// The signal is written field by field into its slot: an aggregate built on the stack and
/// copied in was stored in narrow pieces and reloaded 16 bytes at a time, a store-forwarding
/// stall per copy that was the largest part of a decode pass's per-token cost.
inline OutputSignal& emitToken(RequestRecord& r, std::uint64_t token_seed,
                               std::vector<OutputSignal>& outputs) {
  const std::uint32_t k = r.generated();
  const std::uint32_t token = nextOutputToken(r, token_seed);
  OutputSignal& sig = outputs.emplace_back();
  sig.id = r.id;
  sig.token = token;
  sig.index = k;
  if (k == 0) sig.cached_tokens = r.first_cached_tokens;
  r.tokens.push_back(token);
  return sig;
}

/// Completed without a token (nothing left to sample, e.g. max_output 0). A request that ends
/// without any token carries its prefix hits on this only signal.
inline OutputSignal completedWithoutToken(const RequestRecord& r, LengthLimit limit) {
  return {r.id,
          std::nullopt,
          r.generated(),
          0.0,
          Terminal::Completed,
          r.generated() == 0 ? std::optional(r.first_cached_tokens) : std::nullopt,
          limit};
}

/// Failed in a pass whose modelled time is not finite.
inline OutputSignal failedSignal(const RequestRecord& r) {
  return {r.id, std::nullopt, r.generated(), 0.0, Terminal::Failed, {}};
}

/// Appends one BlockStored per maximal run of consecutive blocks that became cache-visible.
/// Visit the candidate blocks of one request in increasing index order with visit(), then call
/// close() with the end of the visited range. A run's parent is the hash of the block before it
/// (null for block 0).
class StoredRuns {
 public:
  /// `with_tokens`: each BlockStored carries its blocks' token ids (Engine::setKvEventTokens).
  StoredRuns(const RequestRecord& r, std::uint32_t block_size, std::vector<KvEvent>& events,
             bool with_tokens)
      : r_(r), block_size_(block_size), events_(events), with_tokens_(with_tokens) {}

  void visit(std::uint32_t block, bool newly_visible) {
    if (newly_visible && !in_run_) {
      in_run_ = true;
      run_start_ = block;
    } else if (!newly_visible) {
      flush(block);
    }
  }
  void close(std::uint32_t end) { flush(end); }

 private:
  void flush(std::uint32_t end);

  const RequestRecord& r_;
  const std::uint32_t block_size_;
  std::vector<KvEvent>& events_;
  const bool with_tokens_;
  std::uint32_t run_start_ = 0;
  bool in_run_ = false;
};

/// The raw values of `hashes`, as KV events and cache snapshots carry them.
std::vector<std::uint64_t> rawHashes(std::span<const BlockHash> hashes);

/// Closes a pass: the rejections of this pass go last (signal order); a failed pass keeps a finite
/// prefill time and no decode time; the end time is stamped on the pass and on every signal; FPM
/// wall time and queue fields and the rank's load metrics (`load`, taken after the pass) are
/// filled in.
void finishPass(PassResult& out, double now_ms, std::span<const Rejection> rejected,
                const RunningMoments& queued_prefill, const RunningMoments& queued_decode,
                const LoadMetrics& load);

/// Load metrics with the derived usage and hit-rate fields.
struct LoadCounts {
  std::uint32_t dp_rank = 0;
  std::uint64_t active_blocks = 0;
  std::uint64_t total_blocks = 0;
  std::uint64_t running = 0;
  std::uint64_t waiting = 0;
  std::uint64_t preemptions = 0;
  PrefixCacheCounters prefix;
};
LoadMetrics makeLoadMetrics(const LoadCounts& c);

}  // namespace mocker::engine::detail
