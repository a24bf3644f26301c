// The decode side of disaggregation in the vLLM / TRT-LLM scheduler (engine/README.md,
// "Disaggregated prefill/decode"): a handed-off request queues for a reservation of its prompt's
// blocks (strict FIFO), the KV transfer fills them, and at the transfer's end the blocks become
// cache-visible and the request waits to be admitted (admitActivated, in scheduler.cpp, with the
// rest of admission). The transfer bookkeeping itself is detail/handoff.h.
#include <algorithm>
#include <utility>

#include "base/check.h"
#include "engine/block_hash.h"
#include "engine/scheduler.h"

namespace mocker::engine {

void VllmScheduler::submitHandoff(detail::AcceptedRequest&& request, const HandoffTicket& ticket,
                                  double now_ms) {
  MOCKER_CHECK(isDecodeWorker());
  Req r(std::move(request));
  if (isTrtllm() && r.prompt_len < limit_.tokens) {
    r.max_output = static_cast<std::uint32_t>(
        std::min<std::uint64_t>(r.max_output, limit_.tokens - r.prompt_len));
  }
  book_.enqueue(requests_, std::move(r), ticket, now_ms);
  clock_ms_ = std::max(clock_ms_, now_ms);
  tryReserve(now_ms, book_.carryEvents());
}

void VllmScheduler::tryReserve(double now_ms, std::vector<KvEvent>& events) {
  while (book_.reservationQueued()) {
    Req& r = requests_.at(book_.head());
    // The whole prompt's KV, in blocks: a resident prefix is claimed as cache hits, the rest are
    // fresh private blocks the transfer fills.
    std::uint32_t hits = 0;
    if (config_.enable_prefix_caching) {
      extendSequenceHashes(r.tokens, block_size_, r.hashSeeds(config_), r.hashes);
      hits = pool_.countPrefixHits(r.hashes);
    }
    if (isTrtllm()) {
      // TRT-LLM: running requests keep the blocks they were promised to completion; the
      // reservation (the prompt only: admission at activation reserves the output) takes what
      // is left. Hits that are active already cost nothing.
      std::uint32_t active_hits = 0;
      for (std::uint32_t i = 0; i < hits; ++i) active_hits += pool_.hasActiveCopy(r.hashes[i]);
      const std::uint64_t available = pool_.numBlocks() - pool_.numActive();
      if (blocksFor(r.prompt_len) - active_hits + outstandingBlocks() > available) return;
    }
    if (!acquire(r, r.prompt_len, hits, events)) return;  // the head waits; FIFO is strict
    const auto fresh = static_cast<std::uint32_t>(r.blocks.size()) - hits;
    r.state = ReqState::Reserved;
    book_.reserveHead(config_, now_ms, hits, fresh, block_size_, r.prompt_len);
  }
}

void VllmScheduler::activateReserved(Pass& pass, double now_ms) {
  book_.activateDue(pass.out, now_ms, [&](RequestId id) {
    Req& r = requests_.at(id);
    // The transferred blocks now hold the prompt's KV: they become cache-visible (Stored).
    r.num_computed = r.prompt_len;
    finalizeBlocks(r, pass.out.kv_events);
    r.state = ReqState::Activated;
    ++num_waiting_;
    queued_decode_.add(r.len());
  });
}

}  // namespace mocker::engine
