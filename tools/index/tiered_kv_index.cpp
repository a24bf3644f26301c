#include "tools/index/tiered_kv_index.h"

namespace mocker::index {

std::optional<engine::Medium> parseMedium(const std::optional<std::string>& medium) {
  if (!medium) return engine::Medium::Gpu;
  // Exactly vLLM's strings (case matters on the wire).
  for (const auto& [name, m] : engine::kMediumNames) {
    if (*medium == name) return m;
  }
  return std::nullopt;
}

void TieredKvIndex::apply(const engine::KvEvent& event, WorkerRank source) {
  tier(engine::eventMedium(event)).apply(event, source);
}

void TieredKvIndex::clearSource(WorkerRank source) {
  for (KvIndex& t : tiers_) t.applyCleared(source);
}

bool TieredKvIndex::applyStored(WorkerRank source, const std::optional<std::string>& medium,
                                std::span<const std::uint64_t> block_hashes,
                                std::optional<std::uint64_t> parent_block_hash) {
  const std::optional<engine::Medium> m = parseMedium(medium);
  if (!m) {
    ++unknown_medium_;
    return false;
  }
  tier(*m).applyStored(source, block_hashes, parent_block_hash);
  return true;
}

bool TieredKvIndex::applyRemoved(WorkerRank source, const std::optional<std::string>& medium,
                                 std::span<const std::uint64_t> block_hashes) {
  const std::optional<engine::Medium> m = parseMedium(medium);
  if (!m) {
    ++unknown_medium_;
    return false;
  }
  tier(*m).applyRemoved(source, block_hashes);
  return true;
}

TieredKvIndex::TierRun TieredKvIndex::offloadedRun(WorkerRank source,
                                                   std::span<const std::uint64_t> block_hashes,
                                                   std::uint32_t gpu_blocks) const {
  TierRun run;
  const KvIndex& cpu = tier(engine::Medium::Cpu);
  const KvIndex& disk = tier(engine::Medium::Disk);
  for (std::size_t i = gpu_blocks; i < block_hashes.size(); ++i) {
    if (cpu.holds(source, block_hashes[i])) {
      ++run.cpu;
    } else if (disk.holds(source, block_hashes[i])) {
      ++run.disk;
    } else {
      break;
    }
  }
  return run;
}

}  // namespace mocker::index
