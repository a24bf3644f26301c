// KV offload tiers in the vLLM / TRT-LLM scheduler (docs/engine.md, "KV offload tiers"): the
// pass-start transfer bookkeeping and the parking of a request whose prefix is onboarded from
// G2/G3. The tiers themselves (LRU per tier, links, events) are engine/offload.h.
//
// A request parks like vLLM's WAITING_FOR_REMOTE_KVS: at admission its GPU hits are claimed and
// blocks for the onboarded prefix allocated, then it leaves the waiting queue (the requests
// behind it may be admitted) until the copy ends; it then returns to the front of waiting with
// those blocks computed and is admitted like any request (budget, max_num_seqs, capacity).
#include <algorithm>
#include <span>

#include "base/check.h"
#include "engine/scheduler.h"

namespace mocker::engine {

void VllmScheduler::advanceTiers(Pass& pass, double now_ms) {
  onboard_done_.clear();
  tiers_->advance(now_ms, pass.out.kv_events, onboard_done_);
  // Loaded requests are admitted ahead of waiting, in completion order.
  for (auto it = onboard_done_.begin(); it != onboard_done_.end(); ++it) {
    const auto found = requests_.find(it->id);
    if (found == requests_.end() || found->second.state != ReqState::Onboarding) continue;
    Req& r = found->second;
    // The copied blocks now hold the prefix's KV: computed, and cache-visible on the GPU.
    r.num_computed = r.loaded_blocks * block_size_;
    finalizeBlocks(r, pass.out.kv_events);
    r.state = ReqState::Loaded;
    --num_onboarding_;
    loaded_.push_back(r.id);
  }
}

bool VllmScheduler::parkForOnboarding(Pass& pass, Req& r, const PrefixMatch& match,
                                      std::uint64_t reserved_blocks) {
  // Every block its admission will need is taken now — the whole sequence (TRT-LLM: to
  // completion) — so a loaded request never waits for capacity while others hold theirs (parked
  // requests holding part of what the head needs, with nothing running, would never progress).
  const std::uint64_t target =
      isTrtllm() ? std::uint64_t{r.prompt_len} + r.max_output : std::uint64_t{r.len()} + draftKv(r);
  const std::uint64_t available = pool_.numBlocks() - pool_.numActive();
  // TRT-LLM: the blocks running requests were promised stay free (reserved_blocks).
  const std::uint64_t needed =
      blocksFor(target) - match.active_blocks + (isTrtllm() ? reserved_blocks : 0);
  if (needed > available) return false;
  if (!acquire(r, static_cast<std::uint32_t>(target), match.hit_blocks, pass.out.kv_events)) {
    return false;
  }
  r.loaded_blocks = match.hit_blocks + match.onboard_blocks;
  waiting_.pop_front();
  r.state = ReqState::Onboarding;
  ++num_onboarding_;
  tiers_->onboard(r.id, std::span(r.hashes).subspan(match.hit_blocks, match.onboard_blocks),
                  pass.out.start_ms);
  return true;
}

std::vector<std::uint64_t> VllmScheduler::tierBlockHashes(Medium medium) const {
  if (medium == Medium::Gpu) return cachedBlockHashes();
  return tiers_ ? tiers_->hashes(medium) : std::vector<std::uint64_t>{};
}

}  // namespace mocker::engine
