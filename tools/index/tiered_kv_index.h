// TieredKvIndex: one KvIndex per KV tier — GPU (G1), host memory (CPU, G2) and disk (DISK, G3)
// — fed by KV events routed by their `medium` (docs/engine.md, "KV offload tiers"). A router's
// prefix overlap is a question about one tier: the GPU view answers what a worker can reuse at
// once, the CPU and DISK views what it can onboard.
//
// Not thread-safe (like KvIndex).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "engine/types.h"
#include "tools/index/kv_index.h"

namespace mocker::index {

/// The tier of a wire event's `medium` (vLLM's strings): absent or "GPU" → Gpu, "CPU" → Cpu,
/// "DISK" → Disk; any other string → nullopt (the event is not indexed, and counted).
std::optional<engine::Medium> parseMedium(const std::optional<std::string>& medium);

class TieredKvIndex final {
 public:
  KvIndex& tier(engine::Medium medium) { return tiers_[static_cast<std::size_t>(medium)]; }
  const KvIndex& tier(engine::Medium medium) const {
    return tiers_[static_cast<std::size_t>(medium)];
  }
  KvIndex& gpu() { return tier(engine::Medium::Gpu); }
  const KvIndex& gpu() const { return tier(engine::Medium::Gpu); }

  /// Applies an engine event to the tier of its medium; AllBlocksCleared (vLLM's prefix-cache
  /// reset) clears the GPU tier only.
  void apply(const engine::KvEvent& event, WorkerRank source);
  /// Wire events: Stored / Removed for the tier named by `medium`. False (and counted) when
  /// the medium is unknown.
  bool applyStored(WorkerRank source, const std::optional<std::string>& medium,
                   std::span<const std::uint64_t> block_hashes,
                   std::optional<std::uint64_t> parent_block_hash);
  bool applyRemoved(WorkerRank source, const std::optional<std::string>& medium,
                    std::span<const std::uint64_t> block_hashes);
  /// Drops every block of `source` from every tier (a publisher restart: the new process starts
  /// with empty GPU, host and disk tiers).
  void clearSource(WorkerRank source);
  /// The prefix of `block_hashes` (sequence hashes s_0, s_1, …) `source` can reuse without
  /// recomputing, per tier, as the engine's admission matches it: `gpu_blocks` leading blocks on
  /// the GPU (the GPU view's overlap), then each following block in host memory if the CPU view
  /// holds it, else on disk if the DISK view does; the first block in neither ends it.
  struct TierRun {
    std::uint32_t cpu = 0;
    std::uint32_t disk = 0;
  };
  TierRun offloadedRun(WorkerRank source, std::span<const std::uint64_t> block_hashes,
                       std::uint32_t gpu_blocks) const;
  /// Events skipped for an unknown medium.
  std::uint64_t unknownMediumEvents() const { return unknown_medium_; }

 private:
  std::array<KvIndex, 3> tiers_;  // indexed by engine::Medium
  std::uint64_t unknown_medium_ = 0;
};

}  // namespace mocker::index
