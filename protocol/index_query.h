// The query protocol of `mocker index` (tools/index/README.md, "Query protocol"): msgpack maps
// exchanged with the index's query ROUTER. A client (DEALER or REQ) sends one request frame:
//   {"type": "overlap", "tokens": [...] | "block_hashes": [...], "block_size"?, "hash_seed"?,
//    "chain_seed"?, "lora"?, "with_cached"?, "tiers"?, "id"?}
//   {"type": "stats", "id"?}      {"type": "verify", "id"?}
// and receives one reply frame: overlap_reply, stats_reply, verify_reply or error. "id" (a
// string) is echoed. Unknown keys are ignored; a malformed request yields an error reply.
//
// It lives in protocol/ to share the client protocol's msgpack helpers (the same structural
// pre-scan and limits, typed accessors and error messages); its types keep the mocker::index
// namespace because protocol's client types already use the names StatsReply and ErrorReply.
//
// Pure functions on plain value types; thread-safe. Never throws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "base/result.h"

namespace mocker::index {

/// Bounds on a query (a request beyond them gets an error reply).
inline constexpr std::size_t kMaxQueryBytes = std::size_t{16} << 20;
inline constexpr std::size_t kMaxQueryTokens = std::size_t{1} << 22;
inline constexpr std::size_t kMaxQueryHashes = std::size_t{1} << 20;
inline constexpr std::uint32_t kMaxQueryBlockSize = 1u << 20;

/// "For this prompt (or block-hash chain), how many leading blocks does each worker hold?"
/// Exactly one of tokens / block_hashes is set.
struct OverlapQuery {
  std::optional<std::string> id;
  std::optional<std::vector<std::uint32_t>> tokens;
  std::optional<std::vector<std::uint64_t>> block_hashes;
  std::optional<std::uint32_t> block_size;  ///< tokens only; default: the index's --block-size
  std::optional<std::uint64_t> hash_seed;   ///< tokens only; default: the index's seeds
  std::optional<std::uint64_t> chain_seed;
  /// tokens only: the prompt's LoRA adapter (1..256 bytes of UTF-8, no control characters). Its
  /// blocks are hashed as the engine hashes that adapter's (docs/engine.md, "LoRA adapters"),
  /// so blocks cached under another adapter or the base model are no overlap. Absent: the base
  /// model. (A block_hashes query already names the adapter through its hashes.)
  std::optional<std::string> lora;
  /// "with_cached": true — each rank entry of the reply also says how many blocks the index
  /// holds for it (RankOverlap::cached; a router's tie-break by cache size).
  bool with_cached = false;
  /// "tiers": true — each rank entry also splits the prefix the rank can reuse without
  /// recomputing across its KV tiers, as the engine's admission does (docs/engine.md, "KV
  /// offload tiers"): the leading GPU blocks, then the blocks that continue the chain in host
  /// memory (CPU) or else on disk (DISK) (RankOverlap::tiers).
  bool tiers = false;
  friend bool operator==(const OverlapQuery&, const OverlapQuery&) = default;
};

struct StatsQuery {
  std::optional<std::string> id;
  friend bool operator==(const StatsQuery&, const StatsQuery&) = default;
};

struct VerifyQuery {
  std::optional<std::string> id;
  friend bool operator==(const VerifyQuery&, const VerifyQuery&) = default;
};

using QueryRequest = std::variant<OverlapQuery, StatsQuery, VerifyQuery>;

/// A rank's reusable prefix split by tier (an overlap query's "tiers"): `gpu` leading blocks on
/// the GPU (= RankOverlap::blocks), then `cpu` + `disk` blocks that continue the chain, each
/// counted in host memory when the rank holds it there, else on disk. The first block held by
/// neither ends the run. Wire: {"GPU": g, "CPU": c, "DISK": d} (vLLM's medium strings).
struct TierBlocks {
  std::uint32_t gpu = 0;
  std::uint32_t cpu = 0;
  std::uint32_t disk = 0;
  friend bool operator==(const TierBlocks&, const TierBlocks&) = default;
};

struct RankOverlap {
  std::uint32_t dp_rank = 0;
  std::uint32_t blocks = 0;
  std::optional<std::uint64_t> cached;  ///< blocks the index holds for it (with_cached only)
  std::optional<TierBlocks> tiers;      ///< the prefix per tier ("tiers" queries only)
  friend bool operator==(const RankOverlap&, const RankOverlap&) = default;
};

struct WorkerOverlap {
  std::uint64_t worker_id = 0;
  std::uint32_t blocks = 0;  ///< max over the worker's ranks
  std::vector<RankOverlap> ranks;
  friend bool operator==(const WorkerOverlap&, const WorkerOverlap&) = default;
};

struct OverlapReply {
  std::optional<std::string> id;
  std::uint32_t num_blocks = 0;        ///< full blocks in the query
  std::vector<WorkerOverlap> workers;  ///< every known worker, ascending id (0 = holds none)
  friend bool operator==(const OverlapReply&, const OverlapReply&) = default;
};

struct StatsReply {
  std::optional<std::string> id;
  std::vector<std::pair<std::string, std::uint64_t>> counters;  ///< name → value, fixed order
  friend bool operator==(const StatsReply&, const StatsReply&) = default;
};

/// One (worker, rank) compared with the worker's kv_snapshot.
struct SourceDiff {
  std::uint64_t worker_id = 0;
  std::uint32_t dp_rank = 0;
  std::uint64_t index_blocks = 0;
  std::uint64_t worker_blocks = 0;
  std::vector<std::uint64_t> missing;  ///< the worker holds it, the index does not (ascending)
  std::vector<std::uint64_t> extra;    ///< the index holds it, the worker does not (ascending)
  friend bool operator==(const SourceDiff&, const SourceDiff&) = default;
};

struct VerifyReply {
  std::optional<std::string> id;
  bool ok = false;                  ///< no differences and no errors
  std::vector<SourceDiff> sources;  ///< every compared (worker, rank), ascending
  std::vector<std::string> errors;  ///< e.g. a worker without a snapshot endpoint, a timeout
  friend bool operator==(const VerifyReply&, const VerifyReply&) = default;
};

struct QueryError {
  std::optional<std::string> id;
  std::string message;
  friend bool operator==(const QueryError&, const QueryError&) = default;
};

using QueryReply = std::variant<OverlapReply, StatsReply, VerifyReply, QueryError>;

/// Request side (the index decodes, clients encode).
Result<QueryRequest> decodeQueryRequest(std::span<const std::byte> payload);
std::vector<std::byte> encodeQueryRequest(const QueryRequest& request);

/// Reply side (the index encodes, clients decode).
std::vector<std::byte> encodeQueryReply(const QueryReply& reply);
Result<QueryReply> decodeQueryReply(std::span<const std::byte> payload);

/// The "id" of a request whose decoding failed, when it could still be read (for the error).
std::optional<std::string> peekQueryId(std::span<const std::byte> payload);

}  // namespace mocker::index
