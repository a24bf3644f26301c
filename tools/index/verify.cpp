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

void VerifyPosition::startLogging() {
  stopLogging();
  logging_ = true;
}

void VerifyPosition::stopLogging() {
  logging_ = false;
  log_broken_ = false;
  log_.clear();
}

std::optional<std::vector<std::uint64_t>> VerifyPosition::applied(std::uint64_t seq,
                                                                  protocol::KvEventBatch&& batch) {
  // After a resync the index is at the snapshot's seq; a buffered batch at or before it is
  // applied again without changing anything (set semantics), so the position stays.
  last_applied_ = std::max(last_applied_.value_or(seq), seq);
  if (logging_) log_.emplace_back(seq, std::move(batch));
  if (!pending_ || seq != pending_->seq) return std::nullopt;
  std::vector<std::uint64_t> hashes = std::move(pending_->hashes);
  pending_.reset();
  stopLogging();
  return hashes;
}

std::optional<std::string> VerifyPosition::jumped() {
  last_applied_.reset();
  log_broken_ = logging_;
  if (!pending_) return std::nullopt;
  const std::uint64_t at = pending_->seq;
  pending_.reset();
  stopLogging();
  return "the stream restarted or lost batches before the index reached seq " + std::to_string(at) +
         " of the worker's kv_snapshot";
}

VerifyPosition::Decision VerifyPosition::decide(WorkerRank src, const protocol::RankBlocks& rank,
                                                Clock::time_point deadline) {
  using Kind = Decision::Kind;
  // Without the seq (an older service, no KV events) or after the stream jumped, the snapshot
  // is compared as it is: exact only while the worker is idle.
  if (!rank.last_seq || log_broken_ || last_applied_ == rank.last_seq) {
    return {.kind = Kind::CompareNow, .hashes = rank.block_hashes, .error = {}};
  }
  const std::uint64_t at = *rank.last_seq;
  if (last_applied_ && *last_applied_ > at) {
    // The index is ahead: carry the snapshot forward through the batches logged since the
    // request was sent (it was sent before the worker published `at + 1`, so they cover it).
    Result<std::vector<std::uint64_t>> carried =
        carrySnapshotForward(src, rank.block_hashes, at, log_, *last_applied_);
    if (!carried) return {.kind = Kind::Error, .hashes = {}, .error = carried.error().message};
    return {.kind = Kind::CompareNow, .hashes = std::move(*carried), .error = {}};
  }
  // The index has not reached the snapshot's seq yet: compare when it applies it.
  pending_ = Pending{.hashes = rank.block_hashes, .seq = at, .deadline = deadline};
  return {.kind = Kind::Later, .hashes = {}, .error = {}};
}

std::optional<std::string> VerifyPosition::expire(Clock::time_point now, std::int64_t timeout_ms) {
  if (!pending_ || now < pending_->deadline) return std::nullopt;
  const std::uint64_t at = pending_->seq;
  pending_.reset();
  stopLogging();
  return "the index did not reach seq " + std::to_string(at) +
         " of the worker's kv_snapshot within " + std::to_string(timeout_ms) + " ms (it is at " +
         (last_applied_ ? "seq " + std::to_string(*last_applied_) : std::string("no batch")) + ")";
}

}  // namespace mocker::index
