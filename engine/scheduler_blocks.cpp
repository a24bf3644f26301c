// The vLLM / TRT-LLM scheduler's block bookkeeping (docs/engine.md, vLLM scheduler): prefix
// lookup, acquiring a request's blocks (cache hits, then private blocks that may evict), making
// computed blocks cache-visible (Stored runs when KV events are on) and releasing a request's
// blocks in reverse order so that eviction is leaf-first. Each block touched is a probe at a
// random place in the pool's records and hash index: the loops prefetch 8 blocks ahead.
#include <algorithm>
#include <optional>
#include <span>
#include <vector>

#include "base/check.h"
#include "engine/block_hash.h"
#include "engine/scheduler.h"

namespace mocker::engine {

void VllmScheduler::releaseBlocks(Req& r) {
  // Each release reads a block's record and its hash's slot, both at random: load the ones
  // 8 blocks further on while this one is released (a finalized block's hash is r.hashes[i]).
  constexpr std::size_t kAhead = 8;
  for (std::size_t i = r.blocks.size(); i-- > 0;) {
    if (i >= kAhead) {
      pool_.prefetch(r.blocks[i - kAhead]);
      if (i - kAhead < std::min<std::size_t>(r.num_finalized, r.hashes.size())) {
        pool_.prefetch(r.hashes[i - kAhead]);
      }
    }
    pool_.release(r.blocks[i]);
  }
  r.blocks.clear();
  r.num_finalized = 0;
}

VllmScheduler::PrefixMatch VllmScheduler::lookupPrefix(Req& r) {
  PrefixMatch m;
  if (!config_.enable_prefix_caching) return m;
  extendSequenceHashes(r.tokens, block_size_, r.hashSeeds(config_), r.hashes);
  const std::uint32_t gpu_hits = pool_.countPrefixHits(r.hashes);
  std::uint32_t hits = gpu_hits;
  // Offload tiers: a fresh request's prefix continues in G2/G3 (onboarded before it runs).
  if (tiers_ && r.state == ReqState::Waiting && !r.admitted_before) {
    hits += tiers_->countResident(std::span(r.hashes).subspan(gpu_hits));
  }
  // Recompute-the-last-block rule: a request with tokens left to generate recomputes at least its
  // last token, and allocation is whole-block, so at most floor((len − 1)/B) blocks may come from
  // the cache.
  if (!isTrtllm() && r.generated() < r.max_output) {
    hits = std::min(hits, (r.len() - 1) / block_size_);
  }
  // Speculative decoding: the drafter needs the last cached block's hidden states, so a
  // non-empty hit gives up one more block.
  if (config_.spec_num_draft_tokens && hits > 0) --hits;
  m.hit_blocks = std::min(hits, gpu_hits);
  m.onboard_blocks = hits - m.hit_blocks;
  for (std::uint32_t i = 0; i < m.hit_blocks; ++i) {
    if (pool_.hasActiveCopy(r.hashes[i])) ++m.active_blocks;
  }
  return m;
}

// Block acquisition for `target_tokens` tokens of `r`. After a successful call r.blocks is
//
//   | held (already owned) | cache hits (claimed now) | new private blocks |
//   0                      held                       held + hit_blocks    needed
//
// Hits only come with a fresh admission (held == 0); a running request only grows privately.
// New private blocks may evict inactive cached blocks, so the hits are claimed first.
bool VllmScheduler::acquire(Req& r, std::uint32_t target_tokens, std::uint32_t hit_blocks,
                            std::vector<KvEvent>& events) {
  const std::uint32_t needed = blocksFor(target_tokens);
  const auto held = static_cast<std::uint32_t>(r.blocks.size());
  if (needed <= held + hit_blocks) {
    MOCKER_DCHECK(hit_blocks == 0 || held == 0);
  }
  const std::uint32_t new_blocks = needed > held + hit_blocks ? needed - held - hit_blocks : 0;
  // Atomicity ("Acquire"): inactive hits are pinned by the claim, so they cannot also be evicted.
  std::uint32_t pinned_inactive = 0;
  for (std::uint32_t i = 0; i < hit_blocks; ++i) {
    if (!pool_.hasActiveCopy(r.hashes[i])) ++pinned_inactive;
  }
  if (new_blocks > pool_.numAllocatable() - pinned_inactive) return false;
  for (std::uint32_t i = 0; i < hit_blocks; ++i) r.blocks.push_back(pool_.claimCached(r.hashes[i]));
  r.num_finalized = std::max(r.num_finalized, hit_blocks);
  for (std::uint32_t i = 0; i < new_blocks; ++i) r.blocks.push_back(pool_.allocatePrivate(events));
  return true;
}

void VllmScheduler::finalizeBlocks(Req& r, std::vector<KvEvent>& events) {
  if (!config_.enable_prefix_caching) return;
  if (!blockFilled(r)) return;
  const std::uint32_t full = r.num_computed / block_size_;
  extendSequenceHashes(std::span(r.tokens).first(std::size_t{full} * block_size_), block_size_,
                       r.hashSeeds(config_), r.hashes);
  // A prompt finalizes hundreds of blocks at once, each a probe at a random slot of the pool's
  // index: the slot of the block 8 ahead is loaded while this one is inserted.
  constexpr std::uint32_t kAhead = 8;
  for (std::uint32_t i = r.num_finalized; i < std::min(full, r.num_finalized + kAhead); ++i) {
    pool_.prefetch(r.hashes[i]);
  }
  // Newly visible blocks form maximal runs of consecutive indices: one Stored per run when KV
  // events are on; off, the same blocks become visible and are only counted (did_work).
  std::optional<detail::StoredRuns> runs;
  if (kv_events_) runs.emplace(r, block_size_, events, kv_event_tokens_);
  std::uint64_t unbuilt = 0;
  for (std::uint32_t i = r.num_finalized; i < full; ++i) {
    if (i + kAhead < full) pool_.prefetch(r.hashes[i + kAhead]);
    const bool visible = pool_.isPrivate(r.blocks[i]) && pool_.finalize(r.blocks[i], r.hashes[i]);
    if (runs) {
      runs->visit(i, visible);
    } else {
      unbuilt += visible;
    }
  }
  if (runs) runs->close(full);
  unbuilt_stored_ += unbuilt;
  r.num_finalized = full;
}

void VllmScheduler::setKvEvents(bool enabled) {
  // Offload tiers take the pass's Removed events as the blocks to offload: a rank with tiers
  // keeps building its events (the engine drops them when off).
  kv_events_ = enabled || tiers_.has_value();
  pool_.setRecordRemovals(kv_events_);
}

}  // namespace mocker::engine
