#include "tools/index/verify.h"

#include <algorithm>
#include <string>
#include <variant>

#include "tools/index/tiered_kv_index.h"

namespace mocker::index {

Result<std::vector<std::uint64_t>> carrySnapshotForward(WorkerRank src,
                                                        const std::vector<std::uint64_t>& snapshot,
                                                        std::uint64_t at,
                                                        const std::vector<LoggedBatch>& log,
                                                        std::uint64_t index_at) {
  const auto first =
      std::find_if(log.begin(), log.end(), [&](const LoggedBatch& e) { return e.first > at; });
  if (first == log.end() || first->first != at + 1) {
    return Error{ErrorCode::NotFound,
                 "the kv_snapshot is at seq " + std::to_string(at) +
                     ", but the batches after it were not logged (index at seq " +
                     std::to_string(index_at) + ")"};
  }
  KvIndex worker;
  worker.applyStored(src, snapshot, std::nullopt);
  for (auto it = first; it != log.end(); ++it) {
    for (const protocol::KvEvent& ev : it->second.events) {
      // kv_snapshot is the GPU pool's: offload-tier events (medium CPU / DISK) are not replayed.
      if (const auto* st = std::get_if<protocol::BlockStoredEvent>(&ev)) {
        if (parseMedium(st->medium) == engine::Medium::Gpu) {
          worker.applyStored(src, st->block_hashes, st->parent_block_hash);
        }
      } else if (const auto* rm = std::get_if<protocol::BlockRemovedEvent>(&ev)) {
        if (parseMedium(rm->medium) == engine::Medium::Gpu)
          worker.applyRemoved(src, rm->block_hashes);
      } else {
        worker.applyCleared(src);
      }
    }
  }
  return worker.snapshot(src);
}

SourceDiff compareSource(const KvIndex& index, WorkerRank src,
                         const std::vector<std::uint64_t>& worker_hashes) {
  SnapshotDiff diff = diffSnapshot(index, src, worker_hashes);
  return {.worker_id = src.worker_id,
          .dp_rank = src.dp_rank,
          .index_blocks = index.numBlocks(src),
          .worker_blocks = worker_hashes.size(),
          .missing = std::move(diff.missing_in_index),
          .extra = std::move(diff.extra_in_index)};
}

void finishVerifyReply(VerifyReply& reply) {
  std::sort(reply.sources.begin(), reply.sources.end(),
            [](const SourceDiff& a, const SourceDiff& b) {
              return std::pair(a.worker_id, a.dp_rank) < std::pair(b.worker_id, b.dp_rank);
            });
  reply.ok = reply.errors.empty() &&
             std::all_of(reply.sources.begin(), reply.sources.end(),
                         [](const SourceDiff& d) { return d.missing.empty() && d.extra.empty(); });
}

}  // namespace mocker::index
