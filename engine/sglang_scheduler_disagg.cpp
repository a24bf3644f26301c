// Disaggregation in the SGLang scheduler (docs/engine.md, disaggregated serving): a prefill
// worker's held prompts, a decode worker's FIFO page reservations, activation and admission.
#include "engine/sglang_scheduler.h"

#include <algorithm>
#include <span>

#include "base/check.h"

namespace mocker::engine {

bool SglangScheduler::releaseHeld(RequestId id) {
  return book_.releaseHeld(requests_, id, [this](Req& r) { releaseKv(r); });
}

void SglangScheduler::submitHandoff(detail::AcceptedRequest&& request, const HandoffTicket& ticket,
                                    double now_ms) {
  MOCKER_CHECK(isDecodeWorker());
  Req r(std::move(request));
  book_.enqueue(requests_, std::move(r), ticket, now_ms);
  clock_ms_ = std::max(clock_ms_, now_ms);
  tryReserve(now_ms, book_.carryEvents());
}

void SglangScheduler::tryReserve(double now_ms, std::vector<KvEvent>& events) {
  while (book_.reservationQueued()) {
    Req& r = requests_.at(book_.head());
    // The whole prompt's KV, in pages: a resident prefix (radix match over the prompt's full
    // pages) is locked so it cannot be evicted, the rest are private pages the transfer fills.
    std::span<const BlockHash> prefix;
    if (config_.enable_prefix_caching) {
      const std::uint32_t full = r.prompt_len / page_size_;
      ensureKeys(r, full);
      prefix = pageKeys(r).first(cache_.matchLength(pageKeys(r).first(full)));
    }
    const std::uint32_t pages = pagesFor(r.prompt_len);
    if (!lockAndAllocate(r, prefix, pages, events)) return;  // the head waits; FIFO is strict
    r.state = ReqState::Reserved;
    const auto resident = static_cast<std::uint32_t>(prefix.size());
    book_.reserveHead(config_, now_ms, resident, pages - resident, page_size_, r.prompt_len);
  }
}

void SglangScheduler::activateReserved(Pass& pass, double now_ms) {
  book_.activateDue(pass.out, now_ms, [&](RequestId id) {
    Req& r = requests_.at(id);
    // The transferred pages now hold the prompt's KV: complete ones become radix nodes (Stored).
    r.state = ReqState::Activated;
    r.materialized = r.prompt_len;
    publishPages(r, pass.out.kv_events);
    page_overhead_ += overheadOf(r);
    ++num_waiting_;
    queued_decode_.add(r.len());
  });
}

void SglangScheduler::admitActivated(Pass& pass) {
  const std::uint64_t max_seqs = detail::limitOrUnbounded(config_.max_num_seqs);
  while (!book_.activated().empty() && running_.size() < max_seqs) {
    Req& r = requests_.at(book_.activated().front());
    --num_waiting_;
    queued_decode_.remove(r.len());
    book_.admitFront(r, pass.out, prefix_counters_);
    r.state = ReqState::Running;
    running_.push_back(r.id);
    pass.handoffs_admitted.push_back(r.id);
  }
}

}  // namespace mocker::engine
