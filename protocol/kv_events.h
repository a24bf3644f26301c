// KV-cache event batches in vLLM's wire format (docs/wire.md, KV events): the msgpack payload of
// frame 2 of a KV-event message, `[ts, events, data_parallel_rank]`, with BlockStored /
// BlockRemoved / AllBlocksCleared events in one of the positional layouts (p6, p7, p8 default,
// p9, p12) or the tagged-map layouts (map, map26). The decoder accepts every layout (and any
// positional event at least as long as its required prefix), so indexers can read any vLLM era.
//
// Pure functions on plain value types; thread-safe. Never throws.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/enum_names.h"
#include "base/result.h"

namespace mocker::protocol {

/// BlockStored: a run of consecutive blocks of one sequence became cached.
struct BlockStoredEvent {
  std::vector<std::uint64_t> block_hashes;         ///< sequence hashes, parent → child order
  std::optional<std::uint64_t> parent_block_hash;  ///< nullopt: the run starts at block 0
  std::vector<std::uint32_t> token_ids;            ///< block_hashes.size() × block_size tokens
  std::uint32_t block_size = 0;
  std::optional<std::int64_t> lora_id;        ///< the adapter's id; nil without an adapter
  std::optional<std::string> medium = "GPU";  ///< absent in p6 (decodes as nullopt)
  std::optional<std::string> lora_name;       ///< its name (newer layout); nil without one
  friend bool operator==(const BlockStoredEvent&, const BlockStoredEvent&) = default;
};

/// BlockRemoved: blocks were evicted (our engines emit one hash per event).
struct BlockRemovedEvent {
  std::vector<std::uint64_t> block_hashes;
  std::optional<std::string> medium = "GPU";  ///< absent in p6
  friend bool operator==(const BlockRemovedEvent&, const BlockRemovedEvent&) = default;
};

/// AllBlocksCleared: the rank dropped its whole prefix cache.
struct AllBlocksClearedEvent {
  friend bool operator==(const AllBlocksClearedEvent&, const AllBlocksClearedEvent&) = default;
};

using KvEvent = std::variant<BlockStoredEvent, BlockRemovedEvent, AllBlocksClearedEvent>;

/// One batch = all events one pass of one rank produced, in occurrence order.
struct KvEventBatch {
  double ts = 0.0;  ///< seconds (Unix wall time live, virtual time offline)
  std::vector<KvEvent> events;
  std::uint32_t dp_rank = 0;  ///< decoded nil (vLLM without DP) becomes 0
  friend bool operator==(const KvEventBatch&, const KvEventBatch&) = default;
};

/// Event layouts (docs/wire.md, Event layouts), named by BlockStored's element count.
enum class KvLayout { P6, P7, P8, P9, P12, Map, Map26 };

/// What a Stored event whose run starts at block 0 carries as parent (docs/wire.md, Field rules).
enum class ParentRoot { Nil, Zero };

struct KvEncodeOptions {
  KvLayout layout = KvLayout::P8;
  ParentRoot parent_root = ParentRoot::Nil;
  bool force_uint64_hashes = false;  ///< every hash (and a zero parent) as `cf` + 8 bytes
};

/// The names of the layouts and parent roots (the config file's and flags' spellings too).
inline constexpr EnumNames<KvLayout, 7> kKvLayoutNames{{{"p6", KvLayout::P6},
                                                        {"p7", KvLayout::P7},
                                                        {"p8", KvLayout::P8},
                                                        {"p9", KvLayout::P9},
                                                        {"p12", KvLayout::P12},
                                                        {"map", KvLayout::Map},
                                                        {"map26", KvLayout::Map26}}};
inline constexpr EnumNames<ParentRoot, 2> kParentRootNames{
    {{"nil", ParentRoot::Nil}, {"zero", ParentRoot::Zero}}};

/// "p6", ..., "map26" and back (any ASCII case).
std::string_view toString(KvLayout layout);
Result<KvLayout> parseKvLayout(std::string_view s);
std::string_view toString(ParentRoot root);
Result<ParentRoot> parseParentRoot(std::string_view s);

/// Encodes a batch. Strings are the fields' values (nullopt → nil); layout-specific constants
/// (extra_keys, group_idx, kv_cache_spec_kind, sliding window) are written per layout.
std::vector<std::byte> encodeKvEventBatch(const KvEventBatch& batch,
                                          const KvEncodeOptions& options = {});
/// Same, appending to `out` (lets a hot loop reuse one buffer).
void appendKvEventBatch(const KvEventBatch& batch, const KvEncodeOptions& options,
                        std::vector<std::byte>& out);

/// Decodes a batch in any layout (events of different layouts may even be mixed). Positional
/// events need at least tag + required fields (BlockStored 5, BlockRemoved 2, AllBlocksCleared
/// 1); trailing positional fields past p12 and unknown map keys are ignored. Hashes may be
/// unsigned or negative (i64, reinterpreted) integers, never bin. Errors are Corruption (bad
/// bytes, wrong type, missing field, unknown tag) or InvalidArgument (a limit of
/// protocol/limits.h exceeded) and name the field, e.g. "events[2].block_hashes[0]: expected
/// integer hash, got bin".
Result<KvEventBatch> decodeKvEventBatch(std::span<const std::byte> payload);

}  // namespace mocker::protocol
