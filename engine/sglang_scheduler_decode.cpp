// The decode half of an SGLang-mode pass (engine/SGLANG.md, "One pass", steps 4 and 5): which
// requests sample (retracting the fewest-generated while one more token each does not fit),
// decode timing and FPM, token emission, page growth and completion.
#include "engine/sglang_scheduler.h"

#include <algorithm>

#include "base/check.h"
#include "engine/speculative.h"

namespace mocker::engine {

bool SglangScheduler::reachedEnd(const Req& r) const {
  // Our rule: a sequence that needs every page stops (it could never be re-admitted).
  return r.generated() >= r.max_output || r.len() >= limit_.tokens;
}

void SglangScheduler::finish(Req& r) {
  releaseKv(r);
  r.state = ReqState::Done;
}

std::uint64_t SglangScheduler::growthOf(const Req& r) const {
  if (holdsAtPrompt(r)) return 0;  // its internal first token never takes a KV slot
  // One more token, or a speculative burst's worst case (its KV is reserved before the draws).
  const std::uint32_t remaining = limit_.remaining(r);
  const std::uint32_t tokens = remaining == 0 ? 1 : specWorstCaseBurst(config_, remaining);
  const std::uint64_t needed = pageTokens(pagesFor(std::uint64_t{r.len()} + tokens));
  const std::uint64_t held = pageTokens(r.heldPages());
  return needed > held ? needed - held : 0;
}

std::uint64_t SglangScheduler::reclaimableTokens() const {
  return pageTokens(std::uint64_t{cache_.numFree()} + cache_.numEvictable());
}

void SglangScheduler::selectDecoding(Pass& pass) {
  pass.active.reserve(pass.decode_set.size());
  for (RequestId id : pass.decode_set) {
    Req& r = requests_.at(id);
    if (r.remainingOutput() == 0) {  // nothing to sample (max_output 0)
      pass.out.outputs.push_back(detail::completedWithoutToken(r, limit_.stopReason(r)));
      finish(r);
      continue;
    }
    pass.active.push_back(&r);
  }
  std::vector<Req*>& active = pass.active;
  std::uint64_t growth = 0;
  for (const Req* r : active) growth += growthOf(*r);
  while (growth > reclaimableTokens() && active.size() > 1) {
    // Retract the request with the fewest generated tokens (ties: earliest in running order).
    std::size_t victim = 0;
    for (std::size_t i = 1; i < active.size(); ++i) {
      if (active[i]->generated() < active[victim]->generated()) victim = i;
    }
    growth -= growthOf(*active[victim]);
    retract(*active[victim]);
    active.erase(active.begin() + static_cast<std::ptrdiff_t>(victim));
    pass.retracted_any = true;
  }
  if (growth > reclaimableTokens() && !pass.extend_pass) {
    pass.retracted_any |= releaseWaitingHolders((growth + page_size_ - 1) / page_size_);
  }
  if (growth > reclaimableTokens() && !pass.extend_pass) {
    // Our rule: only handoffs (reserved, or activated and not yet admitted) can still pin the
    // pool; the lone decoding request is retracted, as vLLM preempts itself, so they can proceed.
    MOCKER_DCHECK(isDecodeWorker() && active.size() == 1);
    retract(*active.front());
    pass.retracted_any = true;
    active.clear();
    growth = 0;
  }
  if (growth > reclaimableTokens()) {
    // Newly prefilled requests wait (running) for the next decode pass; a decode pass cannot
    // get here (a lone sequence always fits once nothing else pins KV).
    MOCKER_DCHECK(pass.extend_pass);
    active.clear();
  }
}

void SglangScheduler::emitTokens(Pass& pass) {
  ScheduledStats& fpm = pass.out.fpm.scheduled;
  std::uint64_t len_sum = 0;
  detail::Welford decode_len;
  for (const Req* r : pass.active) {
    len_sum += r->len();
    if (!pass.extend_pass) {
      ++fpm.num_decode_requests;
      fpm.sum_decode_kv_tokens += r->len();
      decode_len.add(r->len());
    }
  }
  fpm.var_decode_kv_tokens = decode_len.variance();
  if (timing_.isRoofline()) {
    // A decode pass: each sequence computes its latest token over the ones before it. An extend
    // pass's first tokens were timed with its chunks.
    roofline_seqs_.clear();
    if (!pass.extend_pass) {
      for (const Req* r : pass.active) roofline_seqs_.push_back({1, r->len() - 1u});
    }
    pass.out.decode_ms = detail::scaledDecodeMs(config_, timing_.passMs(roofline_seqs_));
  } else if (!pass.active.empty()) {
    const double raw_ms = timing_.decodeMs(pass.active.size(), std::min(len_sum, total_tokens_),
                                           len_sum / pass.active.size(), total_tokens_);
    pass.out.decode_ms = detail::scaledDecodeMs(config_, raw_ms);
  }
  const bool failed = detail::passFailed(pass.out);
  for (Req* rp : pass.active) {
    Req& r = *rp;
    if (failed) {
      pass.out.outputs.push_back(detail::failedSignal(r));
      finish(r);
      continue;
    }
    if (holdsAtPrompt(r)) {
      // Prompt complete: keep its KV and describe it in a handoff (no signal; the pass still
      // charged decode time for it, as Dynamo's SGLang prefill worker does).
      r.state = ReqState::Held;
      book_.hold(r, dp_rank_, page_size_, pass.out);
      continue;
    }
    const std::uint64_t before = overheadOf(r);
    if (const std::uint64_t growth = growthOf(r); growth > 0) {
      const auto pages = static_cast<std::uint32_t>(growth / page_size_);
      cache_.allocatePrivate(pages, pass.out.kv_events);
      r.private_pages += pages;
    }
    // One token, or a speculative burst: all share the pass's end time.
    const std::uint32_t burst =
        config_.spec_num_draft_tokens
            ? specBurst(config_, dp_rank_, r.id, r.spec_steps++, limit_.remaining(r))
            : 1;
    for (std::uint32_t t = 0; t < burst; ++t) {
      (void)detail::emitToken(r, config_.token_seed, pass.out.outputs);
    }
    r.materialized = r.len();
    publishPages(r, pass.out.kv_events);
    // Pages reserved for drafts that were not accepted go back to the pool.
    if (const std::uint32_t keep = pagesFor(r.materialized); r.heldPages() > keep) {
      const std::uint32_t unused = r.heldPages() - keep;
      cache_.freePrivate(unused);
      r.private_pages -= unused;
    }
    page_overhead_ = page_overhead_ - before + overheadOf(r);
    if (reachedEnd(r)) {
      OutputSignal& last = pass.out.outputs.back();
      last.terminal = Terminal::Completed;
      last.limit = limit_.stopReason(r);
      finish(r);
    }
  }
  // Drop finished and retracted requests from running (one compaction per pass).
  std::erase_if(running_, [&](RequestId id) {
    const auto it = requests_.find(id);
    if (it->second.state == ReqState::Done) {
      requests_.erase(it);
      return true;
    }
    return it->second.state != ReqState::Running;
  });
}

}  // namespace mocker::engine
