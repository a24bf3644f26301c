#include "tools/index/query_answer.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "engine/lora.h"
#include "tools/index/index_service.h"

namespace mocker::index {

OverlapReply answerOverlap(const TieredKvIndex& tiers, const OverlapQuery& q,
                           const QueryDefaults& defaults, std::span<const WorkerEndpoint> workers) {
  const KvIndex& index = tiers.gpu();
  OverlapReply r;
  r.id = q.id;
  std::vector<std::uint64_t> hashes;
  if (q.tokens) {
    const std::uint32_t bs = q.block_size.value_or(defaults.block_size);
    const engine::HashSeeds seeds =
        engine::adapterSeeds({q.hash_seed.value_or(defaults.seeds.hash_seed),
                              q.chain_seed.value_or(defaults.seeds.chain_seed)},
                             q.lora);
    hashes = engine::sequenceHashes(*q.tokens, bs, seeds);
  }
  const std::span<const std::uint64_t> chain =
      q.tokens ? std::span<const std::uint64_t>(hashes) : std::span(*q.block_hashes);
  r.num_blocks = static_cast<std::uint32_t>(chain.size());
  std::vector<Overlap> overlaps = index.overlapsByHashes(chain);
  if (q.tiers) {
    // Ranks the GPU view has not seen may still hold host or disk blocks.
    for (const engine::Medium m : {engine::Medium::Cpu, engine::Medium::Disk}) {
      for (const WorkerRank& s : tiers.tier(m).sources()) {
        if (!index.sourceIndex(s) &&
            std::none_of(overlaps.begin(), overlaps.end(),
                         [&](const Overlap& o) { return o.source == s; })) {
          overlaps.push_back({s, 0});
        }
      }
    }
  }
  std::map<std::uint64_t, WorkerOverlap> by_worker;
  for (const WorkerEndpoint& w : workers) by_worker[w.worker_id].worker_id = w.worker_id;
  for (const Overlap& o : overlaps) {
    WorkerOverlap& w = by_worker[o.source.worker_id];
    w.worker_id = o.source.worker_id;
    w.blocks = std::max(w.blocks, o.blocks);
    RankOverlap& rank = w.ranks.emplace_back(RankOverlap{o.source.dp_rank, o.blocks});
    if (q.with_cached) rank.cached = index.numBlocks(o.source);
    if (q.tiers) {
      const TieredKvIndex::TierRun run = tiers.offloadedRun(o.source, chain, o.blocks);
      rank.tiers = TierBlocks{o.blocks, run.cpu, run.disk};
    }
  }
  for (auto& [id, w] : by_worker) {
    std::sort(w.ranks.begin(), w.ranks.end(),
              [](const RankOverlap& a, const RankOverlap& b) { return a.dp_rank < b.dp_rank; });
    r.workers.push_back(std::move(w));
  }
  return r;
}

std::vector<std::pair<std::string, std::uint64_t>> statsCounters(const IndexStats& s) {
  return {
      {"uptime_ms", static_cast<std::uint64_t>(s.uptime_s * 1000.0)},
      {"batches_received", s.batches_received},
      {"live_messages", s.live_messages},
      {"batches_applied", s.batches_applied},
      {"duplicate_batches", s.duplicate_batches},
      {"events_applied", s.events_applied},
      {"blocks_applied", s.blocks_applied},
      {"blocks_indexed", s.blocks_indexed},
      {"distinct_hashes", s.distinct_hashes},
      {"sources", s.sources},
      {"gaps_detected", s.gaps_detected},
      {"gaps_healed", s.gaps_healed},
      {"gaps_unhealed", s.gaps_unhealed},
      {"resyncs", s.resyncs},
      {"resync_failures", s.resync_failures},
      {"restarts", s.restarts},
      {"replay_requests", s.replay_requests},
      {"replay_timeouts", s.replay_timeouts},
      {"requests_unsent", s.requests_unsent},
      {"replies_unsent", s.replies_unsent},
      {"decode_errors", s.decode_errors},
      {"malformed_messages", s.malformed_messages},
      {"rank_mismatches", s.rank_mismatches},
      {"unknown_medium_events", s.unknown_medium_events},
      {"queries", s.queries},
      {"query_errors", s.query_errors},
      {"verify_runs", s.verify_runs},
      {"verify_differences", s.verify_differences},
      {"caught_up", s.caught_up},
  };
}

}  // namespace mocker::index
