// IndexCore's verify (tools/index/README.md, "verify"): a queue of jobs, each a catch-up (a
// replay from every stream's next seq), one kv_snapshot request per worker, and per rank of each
// reply a comparison at the index's position (VerifyPosition decides: now, carried forward, or
// when the index reaches the snapshot's seq).
#include <set>

#include "tools/index/index_core.h"

namespace mocker::index {
namespace {

std::string sourceName(WorkerRank src) {
  return "worker " + std::to_string(src.worker_id) + " rank " + std::to_string(src.dp_rank);
}

}  // namespace

void IndexCore::startVerify(VerifyJob job) {
  verifies_.push_back(std::move(job));
  if (verifies_.size() == 1) beginVerify();
}

void IndexCore::beginVerify() {
  VerifyJob& job = verifies_.front();
  job.catching_up = true;
  job.targets.assign(streams_.size(), 0);
  const auto now = Clock::now();
  for (std::size_t i = 0; i < streams_.size(); ++i) {
    // Catch up first: a replay from the next expected seq brings any lost tail.
    streams_[i].sequencer.catchUp(now, actions_);
    perform(i, now);
    job.targets[i] = streams_[i].sequencer.catchUpTarget();
  }
  job.deadline = now + 2 * config_.replay_timeout;
  stepVerify();
}

void IndexCore::stepVerify() {
  if (verifies_.empty()) return;
  VerifyJob& job = verifies_.front();
  if (!job.catching_up) return;
  bool ready = true;
  for (std::size_t i = 0; i < streams_.size(); ++i) {
    if (!streams_[i].sequencer.settled(job.targets[i])) ready = false;
  }
  if (!ready && Clock::now() < job.deadline) return;
  if (!ready) job.reply.errors.push_back("catch-up did not finish before the deadline");
  job.catching_up = false;
  std::set<std::uint64_t> without;
  for (const Stream& c : streams_) {
    if (c.channel == kNoChannel) without.insert(c.spec.worker_id);
  }
  for (std::uint64_t w : without) {
    job.reply.errors.push_back("worker " + std::to_string(w) +
                               ": no snapshot endpoint (give snapshot=EP)");
  }
  job.awaiting = 0;
  for (std::size_t chi = 0; chi < channels_.size(); ++chi) {
    Channel& ch = channels_[chi];
    const SendReport report = outbox_.snapshotRequest(chi, protocol::KvSnapshotRequest{});
    if (report.sent) {
      ch.waiting.push_back({SnapKind::Verify, 0, Clock::now()});
      ++job.awaiting;
      for (Stream& c : streams_) {
        if (c.channel == chi) c.position.startLogging();
      }
    } else {
      ++s_.requests_unsent;
      job.reply.errors.push_back("worker " + std::to_string(ch.worker_id) +
                                 ": kv_snapshot request not sent (" + report.describe() + ")");
    }
  }
  if (job.awaiting == 0) finishVerify();
}

void IndexCore::finishVerify() {
  VerifyJob job = std::move(verifies_.front());
  verifies_.pop_front();
  VerifyReply& r = job.reply;
  r.id = job.id;
  finishVerifyReply(r);
  ++s_.verify_runs;
  if (!r.ok) ++s_.verify_differences;
  if (job.requester) {
    sendQueryReply(*job.requester, job.delimiter, r);
  } else {
    if (config_.on_verify) config_.on_verify(r);
    if (config_.stop_after_verify) stop_ = true;
  }
  if (!verifies_.empty()) beginVerify();
}

void IndexCore::onVerifySnapshot(std::size_t chi, const protocol::KvSnapshotReply* snap,
                                 const std::string& failure) {
  if (verifies_.empty()) return;
  const Channel& ch = channels_[chi];
  VerifyJob& job = verifies_.front();
  if (snap == nullptr) {
    job.reply.errors.push_back("worker " + std::to_string(ch.worker_id) + ": " + failure);
  } else {
    std::set<std::uint32_t> ranks;
    for (const auto& r : snap->ranks) {
      ranks.insert(r.dp_rank);
      compareAt(chi, r);
    }
    for (const WorkerRank& src : index_.sources()) {
      if (src.worker_id != ch.worker_id || ranks.contains(src.dp_rank)) continue;
      job.reply.sources.push_back({.worker_id = src.worker_id,
                                   .dp_rank = src.dp_rank,
                                   .index_blocks = index_.numBlocks(src),
                                   .worker_blocks = 0,
                                   .missing = {},
                                   .extra = index_.snapshot(src)});
    }
  }
  for (Stream& c : streams_) {
    if (c.channel == chi && !c.position.waiting()) c.position.stopLogging();
  }
  if (job.awaiting > 0 && --job.awaiting == 0) finishVerify();
}

void IndexCore::compareNow(WorkerRank src, const std::vector<std::uint64_t>& worker_hashes) {
  verifies_.front().reply.sources.push_back(compareSource(index_, src, worker_hashes));
}

void IndexCore::compareAt(std::size_t chi, const protocol::RankBlocks& r) {
  const WorkerRank src{channels_[chi].worker_id, r.dp_rank};
  Stream* stream = nullptr;
  for (Stream& c : streams_) {
    if (c.channel == chi && c.rank == r.dp_rank) stream = &c;
  }
  // A rank no stream follows is compared as it is.
  if (stream == nullptr) {
    compareNow(src, r.block_hashes);
    return;
  }
  using Kind = VerifyPosition::Decision::Kind;
  const VerifyPosition::Decision d =
      stream->position.decide(src, r, Clock::now() + config_.snapshot_timeout);
  switch (d.kind) {
    case Kind::CompareNow:
      compareNow(src, d.hashes);
      break;
    case Kind::Error:
      verifies_.front().reply.errors.push_back(sourceName(src) + ": " + d.error);
      break;
    case Kind::Later:
      ++verifies_.front().awaiting;
      break;
  }
}

void IndexCore::resolvePending(const Stream& c,
                               const std::optional<std::vector<std::uint64_t>>& hashes,
                               const std::optional<std::string>& error) {
  if (verifies_.empty()) return;
  const WorkerRank src = source(c);
  if (error) {
    verifies_.front().reply.errors.push_back(sourceName(src) + ": " + *error);
  } else {
    compareNow(src, *hashes);
  }
  // Finished by the loop, not here: perform() may be iterating its actions.
  if (VerifyJob& job = verifies_.front(); job.awaiting > 0 && --job.awaiting == 0) {
    verify_done_ = true;
  }
}

void IndexCore::streamJumped(Stream& c) {
  if (auto error = c.position.jumped()) resolvePending(c, std::nullopt, error);
}

}  // namespace mocker::index
