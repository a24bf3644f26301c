// KV of one SGLang-mode request (engine/SGLANG.md, "Radix cache"): its radix page keys (sequence
// hashes, or tokens while the cache is token-keyed), locking a matched path and allocating private
// pages, publishing completed pages as tree nodes (Stored runs), releasing and retracting.
#include "engine/sglang_scheduler.h"

#include <algorithm>

#include "base/check.h"
#include "engine/block_hash.h"

namespace mocker::engine {

void SglangScheduler::ensureHashes(Req& r, std::uint32_t pages) const {
  if (r.hashes.size() >= pages) return;
  extendSequenceHashes(std::span(r.tokens).first(std::size_t{pages} * page_size_), page_size_,
                       r.hashSeeds(config_), r.hashes);
}

void SglangScheduler::setKvEvents(bool enabled) {
  // HiCache writes through what the tree stores (its Stored events) and loads by sequence hash:
  // a rank with a host tier keeps building its events (the engine drops them when off).
  kv_events_ = enabled || tiers_.has_value();
  const bool was_token_keyed = cache_.tokenKeyed();
  cache_.setRecordRemovals(kv_events_);
  if (was_token_keyed && !cache_.tokenKeyed()) {
    // Re-keyed by sequence hashes: every held path needs its pages' hashes now.
    for (auto& [id, r] : requests_) ensureHashes(r, r.path_pages);
  }
}

void SglangScheduler::ensureKeys(Req& r, std::uint32_t pages) const {
  if (!cache_.tokenKeyed()) return ensureHashes(r, pages);
  std::vector<BlockHash>& keys = r.token_keys;
  if (keys.size() >= pages) return;
  if (keys.empty()) {
    ensureHashes(r, 1);
    keys.push_back(r.hashes[0]);  // page 0: s_0, which carries the adapter
  }
  // The prompt's keys at once, then geometric growth (decode adds a page at a time).
  if (pages > keys.capacity()) {
    keys.reserve(std::max<std::size_t>({pages, r.prompt_len, 2 * keys.capacity()}));
  }
  for (std::size_t i = keys.size(); i < pages; ++i) keys.push_back(BlockHash{r.tokens[i]});
}

void SglangScheduler::releaseKv(Req& r) {
  const std::uint64_t before = overheadOf(r);
  cache_.releasePath(path(r));
  cache_.freePrivate(r.private_pages);
  r.path_pages = 0;
  r.private_pages = 0;
  r.materialized = 0;
  r.loaded = false;
  page_overhead_ -= before;
}

void SglangScheduler::publishPages(Req& r, std::vector<KvEvent>& events) {
  if (!config_.enable_prefix_caching) return;
  const std::uint32_t full = r.materialized / page_size_;
  const std::uint32_t first = r.path_pages;
  if (full <= first) return;
  ensureKeys(r, full);
  if (kv_events_) ensureHashes(r, full);  // Stored carries them (the keys may be tokens)
  const std::span<const BlockHash> keys = pageKeys(r);
  // Newly created pages form maximal runs of consecutive pages; one Stored per run.
  detail::StoredRuns runs(r, page_size_, events, kv_event_tokens_);
  RadixCache::PageRef parent = cache_.locate(path(r));
  MOCKER_CHECK(r.private_pages >= full - first);
  const std::uint32_t prompt_pages = r.prompt_len / page_size_;
  for (std::uint32_t i = first; i < full;) {
    bool created = false;
    const std::uint32_t n = cache_.insertRun(parent, keys.subspan(i, full - i), created,
                                             std::max(prompt_pages, full) - i);
    r.private_pages -= n;
    r.path_pages += n;
    if (!kv_events_) {
      i += n;
      continue;
    }
    for (const std::uint32_t end = i + n; i < end; ++i) runs.visit(i, created);
  }
  if (kv_events_) runs.close(full);
}

bool SglangScheduler::lockAndAllocate(Req& r, std::span<const BlockHash> prefix,
                                      std::uint32_t total_pages, std::vector<KvEvent>& events) {
  const std::uint64_t reclaimable = std::uint64_t{cache_.numFree()} + cache_.numEvictable();
  const std::uint32_t newly_locked = prefix.empty() ? 0 : cache_.countUnlocked(prefix);
  const auto required = static_cast<std::uint32_t>(total_pages - prefix.size());
  if (required > reclaimable - newly_locked) return false;
  cache_.lockPath(prefix);  // protect the hit before evicting for the rest
  r.path_pages = static_cast<std::uint32_t>(prefix.size());
  cache_.allocatePrivate(required, events);
  r.private_pages = required;
  return true;
}

bool SglangScheduler::allocateChunk(Req& r, std::uint32_t chunk_end, std::uint32_t& cached,
                                    std::vector<KvEvent>& events) {
  const std::uint64_t before = overheadOf(r);
  const std::uint64_t reclaimable = std::uint64_t{cache_.numFree()} + cache_.numEvictable();
  cached = 0;
  if (r.heldPages() == 0) {
    std::uint32_t matched = 0;
    std::span<const BlockHash> prefix;
    if (config_.enable_prefix_caching) {
      // At least one token is computed (SGLang init_next_round_input): match ≤ len − 1 tokens.
      const std::uint32_t limit = std::min(chunk_end, r.len() - 1) / page_size_;
      ensureKeys(r, limit);
      matched = cache_.matchLength(pageKeys(r).first(limit));
      // Speculative decoding: the drafter needs the last cached page's hidden states.
      if (config_.spec_num_draft_tokens && matched > 0) --matched;
      prefix = pageKeys(r).first(matched);
    }
    if (!lockAndAllocate(r, prefix, pagesFor(chunk_end), events)) return false;
    if (tiers_) tiers_->refresh(prefix);  // HiCache: a device hit refreshes its host copies
    cached = matched * page_size_;
  } else {
    const std::uint32_t required = pagesFor(chunk_end) - r.heldPages();
    if (required > reclaimable) return false;
    cache_.allocatePrivate(required, events);
    r.private_pages += required;
  }
  r.materialized = chunk_end;
  publishPages(r, events);
  page_overhead_ = page_overhead_ - before + overheadOf(r);
  return true;
}

void SglangScheduler::pushWaitingFront(Req& r) {
  r.state = ReqState::Waiting;
  waiting_.push_front(r.id);
  ++num_waiting_;
  addToWaitingStats(r);
  if (r.heldPages() > 0) waiting_holders_.push_back(r.id);
}

void SglangScheduler::retract(Req& r) {
  releaseKv(r);
  ++r.num_retractions;
  ++retractions_total_;
  pushWaitingFront(r);
}

bool SglangScheduler::releaseWaitingHolders(std::optional<std::uint64_t> needed_pages) {
  bool any = false;
  while (!waiting_holders_.empty()) {
    if (needed_pages && std::uint64_t{cache_.numFree()} + cache_.numEvictable() >= *needed_pages) {
      break;
    }
    Req& r = requests_.at(waiting_holders_.back());
    waiting_holders_.pop_back();
    releaseKv(r);
    ++r.num_retractions;
    ++retractions_total_;
    any = true;
  }
  return any;
}

}  // namespace mocker::engine
