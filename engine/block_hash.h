// Block hashing (docs/engine.md): XXH3-64 content hash per full block over little-endian u32
// tokens, and the chained sequence hash that identifies a block in the pool and on the wire.
//
//   c_i = XXH3_64(LE32(t_0) ‖ … ‖ LE32(t_{B−1}), hash_seed)
//   s_0 = c_0;  s_i = XXH3_64(LE64(s_{i−1}) ‖ LE64(c_i), chain_seed)
//
// A request with a LoRA adapter chains its first block too: s_0 = XXH3_64(LE64(k) ‖ LE64(c_0),
// chain_seed) with k = loraHashKey(name) (lora.h), so no block is shared across adapters and a
// request without one hashes as above.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "engine/types.h"

namespace mocker::engine {

/// Default seed of the per-block content hash (Dynamo's XXH3_SEED).
inline constexpr std::uint64_t kDefaultHashSeed = 1337;
/// Default seed of the chain step (the Dynamo mocker's; Dynamo's token crate uses 0).
inline constexpr std::uint64_t kDefaultChainSeed = 1337;

/// Seeds used for hashing; both are configuration values (docs/engine.md, Configuration).
struct HashSeeds {
  std::uint64_t hash_seed = kDefaultHashSeed;
  std::uint64_t chain_seed = kDefaultChainSeed;
  /// The request's LoRA adapter key (loraHashKey); absent = no adapter.
  std::optional<std::uint64_t> lora_key;
};

/// Content hash c of one block's tokens (any length; the engine passes exactly block_size).
std::uint64_t contentHash(std::span<const std::uint32_t> tokens, std::uint64_t hash_seed);

/// Chain step: s_i from s_{i-1} and c_i.
std::uint64_t chainHash(std::uint64_t parent, std::uint64_t content, std::uint64_t chain_seed);

/// Sequence hashes s_0..s_{k-1} of the k = floor(len/block_size) full blocks of `tokens`, as the
/// raw values that KV events, routers and indexers use. A trailing partial block has no hash.
/// REQUIRES: block_size >= 1.
std::vector<std::uint64_t> sequenceHashes(std::span<const std::uint32_t> tokens,
                                          std::uint32_t block_size, const HashSeeds& seeds);

/// Extends `hashes` (sequence hashes of the first hashes.size() full blocks of `tokens`) with
/// the hashes of every further full block. Incremental form the schedulers use as requests grow.
void extendSequenceHashes(std::span<const std::uint32_t> tokens, std::uint32_t block_size,
                          const HashSeeds& seeds, std::vector<BlockHash>& hashes);

/// The same, into raw wire values: for callers that keep a scratch vector across prompts (the
/// offline replay's kv router) instead of allocating one per sequenceHashes() call.
void extendSequenceHashes(std::span<const std::uint32_t> tokens, std::uint32_t block_size,
                          const HashSeeds& seeds, std::vector<std::uint64_t>& hashes);

}  // namespace mocker::engine
