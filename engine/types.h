// Engine data model (docs/engine.md, Requests and outputs): requests in, and everything one pass
// produces out — output signals, admissions, KV events, forward-pass metrics and load metrics.
// Plain value types; the engine never holds pointers into them after returning them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/enum_names.h"
#include "base/strong_id.h"

namespace mocker::engine {

/// Internal scheduler id: strictly increasing from 1 per engine, never reused ("Requests").
using RequestId = StrongId<struct RequestIdTag>;

/// Sequence hash s_i of a full block (block_hash.h): chains the whole prefix up to that block, so
/// it is the block's identity in the pool, the radix tree and the KV events. Its parent is s_{i-1}.
/// The event types below carry the raw values, which is what the wire and the indexers use.
using BlockHash = StrongId<struct BlockHashTag>;

/// A prompt the engine produces only when it first needs its tokens (Request::deferred_prompt).
/// Deterministic: every call appends the same size() tokens.
class PromptSource {
 public:
  virtual ~PromptSource() = default;
  /// The prompt's length in tokens.
  virtual std::uint32_t size() const = 0;
  /// Appends the prompt's size() tokens to `out`.
  virtual void appendTo(std::vector<std::uint32_t>& out) const = 0;
};

/// A request as submitted ("Requests"). The engine assigns the RequestId.
struct Request {
  std::vector<std::uint32_t> tokens;  ///< prompt, length >= 1 (empty with deferred_prompt)
  std::uint32_t max_output_tokens = 0;
  /// Planned output token ids; when present its length is authoritative ("Requests").
  std::optional<std::vector<std::uint32_t>> output_token_ids;
  std::uint32_t dp_rank = 0;
  std::optional<double> arrival_ms;  ///< informational (replay arrival / live receive time)
  /// LoRA adapter name (docs/engine.md "LoRA adapters"); absent = the base model. Needs
  /// max_loras > 0; the engine interns it (LoraRegistry) and hashes its blocks apart.
  std::optional<std::string> lora;
  /// Instead of `tokens` (then empty): the prompt, produced when the engine first needs it. A
  /// vLLM / TRT-LLM rank keeps a queued request that was never admitted without its tokens until
  /// its first admission attempt, so a deep queue costs O(1) per request instead of O(prompt)
  /// (the offline replay of an overloaded worker); SGLang ranks produce it at submit. Outputs
  /// are the same as with `tokens` = the source's tokens.
  std::shared_ptr<const PromptSource> deferred_prompt;
  /// Optional: the sequence hashes of the prompt's full blocks as this engine computes them
  /// (block_hash.h: its block size, hash seeds and the adapter's key), one per full block. A
  /// caller that hashed the prompt already (the offline replay's KV-aware router) hands them
  /// over and a vLLM / TRT-LLM rank does not hash the prompt again; SGLang ranks ignore them.
  /// Hashes of other tokens or seeds are the caller's bug (KV events and hits follow them).
  std::vector<std::uint64_t> prompt_hashes;
};

enum class Terminal : std::uint8_t { None, Completed, Rejected, Cancelled, Failed };

/// The effective length limit that bound a request ("Length limits"): why a `Completed` stream
/// stopped short of its max_output_tokens, or why a prompt was `Rejected`. None on every other
/// signal, and on a stream that ended with its last requested token.
enum class LengthLimit : std::uint8_t { None, MaxModelLen, KvCapacity, MaxNumBatchedTokens };

/// "max_model_len", "kv capacity", "max_num_batched_tokens" (docs/engine.md); "" for None.
inline constexpr EnumNames<LengthLimit, 4> kLengthLimitNames{{
    {"", LengthLimit::None},
    {"max_model_len", LengthLimit::MaxModelLen},
    {"kv capacity", LengthLimit::KvCapacity},
    {"max_num_batched_tokens", LengthLimit::MaxNumBatchedTokens},
}};
constexpr std::string_view lengthLimitName(LengthLimit limit) {
  return enumName(kLengthLimitNames, limit);
}

/// One emitted token or terminal event ("Output signals").
struct OutputSignal {
  RequestId id;
  std::optional<std::uint32_t> token;  ///< absent for terminal-without-token signals
  std::uint32_t index = 0;             ///< output position of `token`
  double time_ms = 0.0;                ///< the pass's end_ms
  Terminal terminal = Terminal::None;
  std::optional<std::uint32_t> cached_tokens;  ///< first token only: reused prompt tokens
  /// Completed short of max_output_tokens, or Rejected: the limit that bound ("Length limits").
  LengthLimit limit = LengthLimit::None;
  friend bool operator==(const OutputSignal&, const OutputSignal&) = default;
};

/// A request moved from waiting to running (time = pass start).
struct Admission {
  RequestId id;
  /// min(cached tokens, prompt length): recomputed generated tokens are never reused input.
  std::uint32_t reused_input_tokens = 0;
  bool is_readmission = false;
  friend bool operator==(const Admission&, const Admission&) = default;
};

/// The tier a KV event is about (vLLM's `medium`: "GPU", "CPU", "DISK"; docs/engine.md, "KV
/// offload tiers"). G1 = the GPU pool, G2 = host memory, G3 = disk.
enum class Medium : std::uint8_t { Gpu, Cpu, Disk };

/// vLLM's medium strings: "GPU", "CPU", "DISK".
inline constexpr EnumNames<Medium, 3> kMediumNames{{
    {"GPU", Medium::Gpu},
    {"CPU", Medium::Cpu},
    {"DISK", Medium::Disk},
}};
constexpr std::string_view mediumName(Medium medium) { return enumName(kMediumNames, medium); }

/// KV events ("Stored events"; wire form in docs/wire.md). Hashes are sequence hashes s_i.
struct BlockStored {
  std::vector<std::uint64_t> block_hashes;         ///< parent → child order
  std::optional<std::uint64_t> parent_block_hash;  ///< null when the run starts at block 0
  std::vector<std::uint32_t> token_ids;            ///< block_hashes.size() * block_size tokens
  std::uint32_t block_size = 0;
  Medium medium = Medium::Gpu;  ///< the tier that now holds the blocks
  /// The request's LoRA adapter (docs/engine.md "LoRA adapters"): its id in this engine (0 =
  /// none) and its name (empty = none), as vLLM's `lora_id` and `lora_name`.
  std::uint32_t lora_id = 0;
  std::string lora_name;
  friend bool operator==(const BlockStored&, const BlockStored&) = default;
};
/// One evicted hash per event, in eviction order ("Release and eviction", like vLLM); the wire
/// form wraps it in a one-element `block_hashes` array.
struct BlockRemoved {
  std::uint64_t block_hash = 0;
  Medium medium = Medium::Gpu;  ///< the tier that dropped the block
  friend bool operator==(const BlockRemoved&, const BlockRemoved&) = default;
};
struct AllBlocksCleared {
  friend bool operator==(const AllBlocksCleared&, const AllBlocksCleared&) = default;
};
using KvEvent = std::variant<BlockStored, BlockRemoved, AllBlocksCleared>;

/// The tier an event is about; AllBlocksCleared (the prefix-cache reset) is the GPU pool's.
inline Medium eventMedium(const KvEvent& event) {
  if (const auto* s = std::get_if<BlockStored>(&event)) return s->medium;
  if (const auto* r = std::get_if<BlockRemoved>(&event)) return r->medium;
  return Medium::Gpu;
}

/// Forward-pass metrics of one pass ("FPM fields"). Identity fields are stamped by the publisher.
struct ScheduledStats {
  std::uint64_t num_prefill_requests = 0;
  std::uint64_t sum_prefill_tokens = 0;
  double var_prefill_length = 0.0;
  std::uint64_t sum_prefill_kv_tokens = 0;
  std::uint64_t num_decode_requests = 0;
  std::uint64_t sum_decode_kv_tokens = 0;
  double var_decode_kv_tokens = 0.0;
  friend bool operator==(const ScheduledStats&, const ScheduledStats&) = default;
};
struct QueuedStats {
  std::uint64_t num_prefill_requests = 0;
  std::uint64_t sum_prefill_tokens = 0;
  double var_prefill_length = 0.0;
  std::uint64_t num_decode_requests = 0;
  std::uint64_t sum_decode_kv_tokens = 0;
  double var_decode_kv_tokens = 0.0;
  friend bool operator==(const QueuedStats&, const QueuedStats&) = default;
};
struct ForwardPassMetrics {
  std::uint32_t dp_rank = 0;
  double wall_time = 0.0;  ///< modelled pass duration in seconds (after scaling)
  ScheduledStats scheduled;
  QueuedStats queued;
  friend bool operator==(const ForwardPassMetrics&, const ForwardPassMetrics&) = default;
};

/// KV offload tiers of one rank (docs/engine.md, "KV offload tiers"); all zero when off.
/// Counters are cumulative.
struct TierMetrics {
  std::uint64_t g2_blocks = 0, g2_capacity = 0;  ///< occupancy of host memory (G2)
  std::uint64_t g3_blocks = 0, g3_capacity = 0;  ///< occupancy of disk (G3)
  std::uint64_t g2_hit_blocks = 0;     ///< blocks onboarded from G2 (prefix hits in host memory)
  std::uint64_t g3_hit_blocks = 0;     ///< blocks onboarded from G3
  std::uint64_t offloaded_blocks = 0;  ///< blocks stored in G2 from the GPU
  std::uint64_t bytes_gpu_to_host = 0, bytes_host_to_gpu = 0;
  std::uint64_t bytes_host_to_disk = 0, bytes_disk_to_host = 0;
  std::uint64_t onboardings = 0;  ///< finished onboardings
  double onboard_ms_total = 0.0;  ///< Σ (end − start) over finished onboardings
  double onboard_ms_max = 0.0;
  /// Σ transfer times of the GPU↔host legs (vLLM's kv_offload store / load time): GPU→host
  /// offload batches, and the host→GPU leg of each finished onboarding (without its disk leg).
  double store_ms_total = 0.0;
  double load_ms_total = 0.0;
  friend bool operator==(const TierMetrics&, const TierMetrics&) = default;
};

/// Load metrics of one rank ("Load metrics").
struct LoadMetrics {
  std::uint32_t dp_rank = 0;
  std::uint64_t active_blocks = 0;
  std::uint64_t total_blocks = 0;
  double kv_usage = 0.0;
  std::uint64_t running_requests = 0;
  std::uint64_t waiting_requests = 0;
  std::uint64_t preemptions_total = 0;
  std::uint64_t prefix_cache_queries_tokens = 0;
  std::uint64_t prefix_cache_hits_tokens = 0;
  double prefix_cache_hit_rate = 0.0;
  /// Disaggregation (README "Disaggregated prefill/decode"). Prefill worker: requests whose KV is
  /// held for a decode worker, and holds released by kv_hold_timeout_ms (cumulative).
  std::uint64_t held_requests = 0;
  std::uint64_t handoff_expired = 0;
  /// Decode worker: handoffs queued for a reservation, or reserved and not yet activated.
  std::uint64_t pending_handoffs = 0;
  /// KV offload tiers (zero when off); prefix_cache_* above count the GPU and onboarded hits.
  TierMetrics tiers;
  /// Requests parked while their prefix is onboarded from G2/G3 (counted in waiting_requests).
  std::uint64_t onboarding_requests = 0;
  friend bool operator==(const LoadMetrics&, const LoadMetrics&) = default;
};

/// A prefilled request handed from a prefill worker to a decode worker: everything the decode
/// side needs to continue it (README "Disaggregated prefill/decode"). Produced by the prefill
/// worker's pass that completed the prompt; submitted to a decode worker with
/// Engine::submitHandoff. A live service serialises exactly these fields.
struct HandoffTicket {
  RequestId source_id;                  ///< the request's id on the prefill worker
  std::uint32_t source_dp_rank = 0;     ///< rank of the prefill worker that holds the KV
  std::vector<std::uint32_t> tokens;    ///< prompt
  std::uint32_t max_output_tokens = 0;  ///< as the client requested (the prefill ran with 1)
  std::optional<std::vector<std::uint32_t>> output_token_ids;
  std::uint32_t cached_tokens = 0;  ///< prompt tokens the prefill worker reused from its cache
  std::uint32_t block_size = 0;     ///< the source's block size; a decode worker needs the same
  double prefill_end_ms = 0.0;      ///< end of the pass that completed the prompt
  double transfer_ms = 0.0;         ///< full-prompt transfer time on the source's settings
  double ready_ms = 0.0;            ///< prefill_end_ms + transfer_ms
  friend bool operator==(const HandoffTicket&, const HandoffTicket&) = default;
};

/// A decode worker turned a reserved handoff into a waiting request (in the pass that reports
/// it). The caller now releases the source (Engine::releaseHandoff on the prefill worker).
struct HandoffActivation {
  RequestId id;         ///< the request's id on this (decode) worker
  RequestId source_id;  ///< its id on the prefill worker
  std::uint32_t source_dp_rank = 0;
  double submitted_ms = 0.0;              ///< when the handoff joined the reservation queue
  double reserved_ms = 0.0;               ///< when its blocks were reserved
  double ready_ms = 0.0;                  ///< when its KV transfer is complete
  double activated_ms = 0.0;              ///< max(ready_ms, reserved_ms)
  std::uint32_t transferable_tokens = 0;  ///< fresh blocks · block size (not resident here)
  std::uint32_t resident_tokens = 0;      ///< prompt tokens reused from this worker's cache
  friend bool operator==(const HandoffActivation&, const HandoffActivation&) = default;
};

/// A decode worker reserved the blocks of a handoff submitted with its ready time unknown
/// (HandoffTicket::ready_ms = +infinity, a live service): the caller now fetches its KV —
/// `transferable_tokens` (missing_blocks) or the whole prompt (full_prompt) — and reports the
/// transfer's end with Engine::handoffReady.
struct HandoffReservation {
  RequestId id;
  std::uint32_t dp_rank = 0;
  double reserved_ms = 0.0;
  std::uint32_t transferable_tokens = 0;  ///< fresh blocks · block size (not resident here)
  std::uint32_t resident_tokens = 0;      ///< prompt tokens reused from this worker's cache
  std::uint32_t prompt_tokens = 0;
  friend bool operator==(const HandoffReservation&, const HandoffReservation&) = default;
};

/// Everything one pass of one rank produced ("Pass result").
struct PassResult {
  std::uint32_t dp_rank = 0;
  double start_ms = 0.0;
  double end_ms = 0.0;      ///< start_ms + prefill_ms + decode_ms
  double prefill_ms = 0.0;  ///< after speedup scaling
  double decode_ms = 0.0;
  bool did_work = false;  ///< false ⇒ nothing scheduled and nothing emitted; wait for input
  std::vector<Admission> admissions;
  std::vector<OutputSignal> outputs;  ///< order of "Output order"
  std::vector<KvEvent> kv_events;     ///< occurrence order ("KV event order")
  /// Prefill worker: requests whose prompt completed in this pass and whose KV is now held; no
  /// output signal is emitted for them. ready_ms = end_ms + transfer time.
  std::vector<HandoffTicket> handoffs;
  /// Decode worker: handoffs activated at the start of this pass (release their sources).
  std::vector<HandoffActivation> activations;
  /// Prefill worker: held requests released at the start of this pass by kv_hold_timeout_ms.
  std::vector<RequestId> expired_holds;
  ForwardPassMetrics fpm;
  LoadMetrics load;
};

}  // namespace mocker::engine
