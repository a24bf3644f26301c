// SGLang's hierarchical cache (HiCache) in the SGLang scheduler (engine/SGLANG.md,
// "Hierarchical cache"): a host tier (G2) under the radix cache, written through, and the load
// back of a prefix found there. The tier itself (LRU, links, per-tier events) is OffloadTiers
// (engine/offload.h), the one vLLM mode uses.
//
// Write-through (SGLang's default --hicache-write-policy): every page the tree stores is copied
// GPU→host (the pass's GPU Stored events feed the copy queue), so an evicted page is usually in
// host memory already. Load back: a fresh request whose radix match continues in host memory
// for at least kLoadBackThreshold tokens locks its device prefix, takes private pages for the
// host part and parks (in no queue) while they cross the host→GPU link; when the copy ends, the
// pages become tree nodes (Stored, medium GPU) and the request returns to the front of waiting
// holding them, like a chunked prefill, to be admitted under the usual budgets.
#include <algorithm>
#include <span>

#include "base/check.h"
#include "engine/sglang_scheduler.h"

namespace mocker::engine {

void SglangScheduler::advanceTiers(Pass& pass, double now_ms) {
  onboard_done_.clear();
  tiers_->advance(now_ms, pass.out.kv_events, onboard_done_);
  // Loaded requests go to the front of waiting in completion order (the first done first).
  for (auto it = onboard_done_.rbegin(); it != onboard_done_.rend(); ++it) {
    const auto found = requests_.find(it->id);
    if (found == requests_.end() || found->second.state != ReqState::Onboarding) continue;
    Req& r = found->second;
    --num_onboarding_;
    // The copied pages now hold the prefix's KV: materialised, and cache-visible on the GPU.
    r.materialized = static_cast<std::uint32_t>(pageTokens(r.heldPages()));
    r.loaded = true;
    publishPages(r, pass.out.kv_events);
    pushWaitingFront(r);
  }
}

bool SglangScheduler::parkForLoadBack(Req& r, double& rem_total, std::vector<KvEvent>& events,
                                      double now_ms) {
  MOCKER_DCHECK(!cache_.tokenKeyed());  // a host tier keeps the tree keyed by sequence hashes
  // The whole prompt's match (at least one token is computed), not only the first chunk's:
  // loading computes nothing.
  const std::uint32_t limit = (r.len() - 1) / page_size_;
  ensureKeys(r, limit);
  const std::span<const BlockHash> keys = pageKeys(r).first(limit);
  const std::uint32_t gpu = cache_.matchLength(keys);
  std::uint32_t total = gpu + tiers_->countResident(keys.subspan(gpu));
  // Speculative decoding: the drafter needs the last cached page's hidden states.
  if (config_.spec_num_draft_tokens && total > 0) --total;
  const std::uint32_t hit = std::min(gpu, total);
  const std::uint32_t host = total - hit;
  // SGLang's load_back skips a host hit shorter than its load_back_threshold (the request then
  // recomputes those tokens), and so does one that does not fit: no park, a normal admission.
  if (pageTokens(host) < kLoadBackThreshold) return false;
  if (static_cast<double>(pageTokens(host)) >= rem_total) return false;
  if (!lockAndAllocate(r, keys.first(hit), total, events)) return false;
  tiers_->refresh(keys.first(hit));
  rem_total -= static_cast<double>(pageTokens(total));
  waiting_.pop_front();
  removeFromWaitingStats(r);
  --num_waiting_;
  r.state = ReqState::Onboarding;
  ++num_onboarding_;
  tiers_->onboard(r.id, keys.subspan(hit, host), now_ms);
  return true;
}

std::optional<double> SglangScheduler::nextTimerMs() const {
  std::optional<double> timer = book_.nextTimerMs();
  if (const std::optional<double> t = tiers_ ? tiers_->nextEventMs() : std::nullopt) {
    timer = timer ? std::min(*timer, *t) : *t;
  }
  return timer;
}

std::vector<std::uint64_t> SglangScheduler::tierBlockHashes(Medium medium) const {
  if (medium == Medium::Gpu) return cachedBlockHashes();
  return tiers_ ? tiers_->hashes(medium) : std::vector<std::uint64_t>{};
}

}  // namespace mocker::engine
