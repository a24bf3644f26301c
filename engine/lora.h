// LoRA adapters (docs/engine.md, "LoRA adapters"): the engine's adapter names and their ids, the
// per-pass adapter set that max_loras bounds, and the resident adapters (max_cpu_loras, LRU)
// whose misses cost lora_load_ms.
//
//   LoraRegistry    name → small id (1, 2, … in order of first use; 0 = no adapter), the
//                   adapter's hash key (block_hash.h: the parent of a request's first block)
//   LoraBatch       the adapters of one pass, at most max_loras of them (vLLM's rule)
//   LoraResidency   adapters resident in host memory (LRU, max_cpu_loras); a pass that schedules
//                   one that is not resident loads it
//
// Pure value types; not thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/result.h"
#include "engine/block_hash.h"

namespace mocker::engine {

/// Longest adapter name the engine accepts, in bytes (the client protocol's limit too).
inline constexpr std::size_t kMaxLoraNameBytes = 256;
/// Most distinct adapter names one engine interns.
inline constexpr std::size_t kMaxLoraAdapters = 4096;

/// Checks an adapter name: 1..kMaxLoraNameBytes bytes, no ASCII control characters (the wire
/// and trace decoders have already checked that it is UTF-8). The error names `field` ("lora").
Status checkLoraName(std::string_view name, std::string_view field);

/// The hash key of adapter `name`: XXH3_64 of its UTF-8 bytes with `hash_seed`. A request with an
/// adapter chains its first block from this key, so prefixes are never shared across adapters
/// and every worker with the same seeds computes the same hashes (block_hash.h).
std::uint64_t loraHashKey(std::string_view name, std::uint64_t hash_seed);

/// `seeds` for a prompt of adapter `lora` (absent = the base model: `seeds` unchanged): its
/// lora_key set from `seeds.hash_seed`, as the engine sets it. Routers and indexers that hash a
/// request's prompt to score prefix hits use this, so a prefix cached under one adapter is no
/// hit for another adapter or for the base model.
HashSeeds adapterSeeds(HashSeeds seeds, const std::optional<std::string>& lora);

class LoraRegistry {
 public:
  /// The id of `name`, interned on first use (1, 2, …). Refused (InvalidArgument naming "lora")
  /// for a name checkLoraName refuses or once kMaxLoraAdapters names are known.
  Result<std::uint32_t> intern(std::string_view name);
  /// The id of `name` if it was interned, else 0.
  std::uint32_t find(std::string_view name) const;
  /// The name of id `id` (REQUIRES: 1 <= id <= size()).
  const std::string& name(std::uint32_t id) const { return names_[id - 1]; }
  std::size_t size() const { return names_.size(); }

 private:
  std::vector<std::string> names_;                      // id - 1 → name
  std::unordered_map<std::string, std::uint32_t> ids_;  // name → id
};

/// The adapters of one pass: a request with adapter `id` may join while the set holds `id` or
/// has fewer than max_loras adapters (vLLM's scheduler: otherwise it is skipped, not preempted).
class LoraBatch {
 public:
  explicit LoraBatch(std::uint32_t max_loras = 0) : max_(max_loras) {}
  void clear() { ids_.clear(); }
  /// True if a request with adapter `id` (0 = none: always) may be scheduled in this pass.
  bool admits(std::uint32_t id) const;
  /// Records a scheduled request's adapter (0 is ignored).
  void add(std::uint32_t id);
  std::span<const std::uint32_t> ids() const { return ids_; }

 private:
  std::uint32_t max_;
  std::vector<std::uint32_t> ids_;  // in the order they joined
};

/// Adapters resident in host memory, least recently used first (vLLM's CPU LoRA cache,
/// max_cpu_loras). Not resident ⇒ loaded from storage before the pass that schedules it runs.
class LoraResidency {
 public:
  explicit LoraResidency(std::uint32_t capacity = 0) : capacity_(capacity) {}
  /// A pass schedules `pass_ids` (distinct, at most capacity): each becomes the most recently
  /// used; those not resident are loaded, evicting the least recently used adapters not in this
  /// pass. Returns how many were loaded.
  std::uint32_t use(std::span<const std::uint32_t> pass_ids);
  /// A load outside a pass (lora_load, vLLM's add_lora): `id` becomes the most recently used;
  /// if it was not resident it is loaded, evicting the least recently used adapter when all
  /// capacity slots are taken (as vLLM's worker: even one that running requests use — the
  /// pass that next schedules it loads it again). Returns whether it was loaded.
  bool load(std::uint32_t id);
  /// Drops `id` (lora_unload, vLLM's remove_lora). Returns whether it was resident.
  bool remove(std::uint32_t id);
  bool resident(std::uint32_t id) const;
  std::span<const std::uint32_t> lru() const { return lru_; }

 private:
  std::uint32_t capacity_;
  std::vector<std::uint32_t> lru_;  // least recently used first
};

/// Adapter names of one rank's requests (vllm:lora_requests_info): the ids of running requests'
/// and waiting requests' adapters, each once, ascending.
struct LoraUsage {
  std::vector<std::uint32_t> running;
  std::vector<std::uint32_t> waiting;
};

}  // namespace mocker::engine
