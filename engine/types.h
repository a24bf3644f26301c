// Engine data model (README.md): requests in, and everything one pass produces
// out — output signals, admissions, KV events, forward-pass metrics and load metrics. Plain value
// types; the engine never holds pointers into them after returning them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/strong_id.h"

namespace mocker::engine {

/// Internal scheduler id: strictly increasing from 1 per engine, never reused (§2.1).
using RequestId = StrongId<struct RequestIdTag>;

/// Sequence hash s_i of a full block (block_hash.h): chains the whole prefix up to that block, so
/// it is the block's identity in the pool, the radix tree and the KV events. Its parent is s_{i-1}.
/// The event types below carry the raw values, which is what the wire and the indexers use.
using BlockHash = StrongId<struct BlockHashTag>;

/// A request as submitted (§2.1). The engine assigns the RequestId.
struct Request {
  std::vector<std::uint32_t> tokens;  ///< prompt, length >= 1
  std::uint32_t max_output_tokens = 0;
  /// Planned output token ids; when present its length is authoritative (§2.1).
  std::optional<std::vector<std::uint32_t>> output_token_ids;
  std::uint32_t dp_rank = 0;
  std::optional<double> arrival_ms;  ///< informational (replay arrival / live receive time)
};

enum class Terminal : std::uint8_t { None, Completed, Rejected, Cancelled, Failed };

/// The effective length limit that bound a request (§5.5): why a `Completed` stream stopped
/// short of its max_output_tokens, or why a prompt was `Rejected`. None on every other signal,
/// and on a stream that ended with its last requested token.
enum class LengthLimit : std::uint8_t { None, MaxModelLen, KvCapacity, MaxNumBatchedTokens };

/// "max_model_len", "kv capacity", "max_num_batched_tokens" (the spec's names); "" for None.
constexpr std::string_view lengthLimitName(LengthLimit limit) {
  switch (limit) {
    case LengthLimit::None:
      return "";
    case LengthLimit::MaxModelLen:
      return "max_model_len";
    case LengthLimit::KvCapacity:
      return "kv capacity";
    case LengthLimit::MaxNumBatchedTokens:
      return "max_num_batched_tokens";
  }
  return "";
}

/// One emitted token or terminal event (§2.3).
struct OutputSignal {
  RequestId id;
  std::optional<std::uint32_t> token;  ///< absent for terminal-without-token signals
  std::uint32_t index = 0;             ///< output position of `token`
  double time_ms = 0.0;                ///< the pass's end_ms
  Terminal terminal = Terminal::None;
  std::optional<std::uint32_t> cached_tokens;  ///< first token only: reused prompt tokens
  /// Completed short of max_output_tokens, or Rejected: the limit that bound (§5.5).
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

/// KV events (§4.6, wire.md §3). Hashes are sequence hashes s_i.
struct BlockStored {
  std::vector<std::uint64_t> block_hashes;         ///< parent → child order
  std::optional<std::uint64_t> parent_block_hash;  ///< null when the run starts at block 0
  std::vector<std::uint32_t> token_ids;            ///< block_hashes.size() * block_size tokens
  std::uint32_t block_size = 0;
  friend bool operator==(const BlockStored&, const BlockStored&) = default;
};
/// One evicted hash per event, in eviction order (§4.5, like vLLM); the wire form wraps it in a
/// one-element `block_hashes` array.
struct BlockRemoved {
  std::uint64_t block_hash = 0;
  friend bool operator==(const BlockRemoved&, const BlockRemoved&) = default;
};
struct AllBlocksCleared {
  friend bool operator==(const AllBlocksCleared&, const AllBlocksCleared&) = default;
};
using KvEvent = std::variant<BlockStored, BlockRemoved, AllBlocksCleared>;

/// Forward-pass metrics of one pass (§9.1). Identity fields are stamped by the publisher.
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

/// Load metrics of one rank (§10).
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
  friend bool operator==(const LoadMetrics&, const LoadMetrics&) = default;
};

/// Everything one pass of one rank produced (§2.4).
struct PassResult {
  std::uint32_t dp_rank = 0;
  double start_ms = 0.0;
  double end_ms = 0.0;      ///< start_ms + prefill_ms + decode_ms
  double prefill_ms = 0.0;  ///< after speedup scaling
  double decode_ms = 0.0;
  bool did_work = false;  ///< false ⇒ nothing scheduled and nothing emitted; wait for input
  std::vector<Admission> admissions;
  std::vector<OutputSignal> outputs;  ///< order of §5.6
  std::vector<KvEvent> kv_events;     ///< occurrence order (§4.8)
  ForwardPassMetrics fpm;
  LoadMetrics load;
};

}  // namespace mocker::engine
