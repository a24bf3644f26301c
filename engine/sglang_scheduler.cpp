// SGLang-style scheduling of one DP rank (docs/engine.md, SGLang scheduler).
//
// NOTE on the algorithm. Unlike the vLLM core there is no dangling token: a request's KV covers
// all `len` tokens once it runs (a sampled token gets its slot when it is appended). One pass:
//
//   1. ORDER waiting: fcfs keeps queue order; lpm (≤ 128 waiting) sorts by cached prefix, with
//      requests sharing their first 32 tokens with an earlier short-prefix request deprioritised.
//   2. PREFILL: take waiting heads while SGLang's budgets allow (rem_total = free + evictable
//      − page slack − running requests' output reserve × new_token_ratio; rem_input; rem_chunk).
//      A fresh request locks its cached radix path, allocates the rest; a prompt larger than
//      chunked_prefill_size is cut into page-aligned chunks and goes back to the FRONT of waiting.
//   3. EXTEND passes are exclusive: if anything was prefilled, only requests that completed their
//      prompt in this pass sample (their first token); otherwise every running request decodes.
//   4. DECODE: if the page growth for one more token per request exceeds free + evictable,
//      retract the request with the fewest generated tokens (to the front of waiting) and reset
//      new_token_ratio; append one token each; pages that complete become radix nodes (Stored).
//   5. new_token_ratio decays linearly towards its minimum.
//
// step() is these phases in order (orderWaitingLpm, admit, timePrefill, selectDecoding,
// emitTokens); the signal, Stored-run and pass-end pieces it shares with the vLLM scheduler live
// in detail/pass.h. This file holds the queues, ordering, admission and prefill timing; a
// request's KV (keys, locking, allocation, publishing, retraction) is sglang_scheduler_kv.cpp,
// decode selection and token emission sglang_scheduler_decode.cpp, disaggregation
// sglang_scheduler_disagg.cpp, checkInvariants sglang_scheduler_invariants.cpp.
//
// Our rules where SGLang/Dynamo would stall forever (documented in engine/README.md):
//   * a fresh prompt needing >= N pages is rejected at the head; generation stops once a
//     sequence needs N pages; the admission output reserve is capped so a lone request fits;
//   * `charged > rem_input` stops admission only when the batch is non-empty (SGLang's
//     PrefillAdder lets the first request exceed max_prefill_tokens);
//   * if nothing can run while waiting partial prefills hold KV, or a lone decoding request
//     cannot grow, those partial prefills are retracted (their KV is released);
//   * newly prefilled requests whose first token finds no page after retraction wait (running)
//     for the next decode pass.
#include "engine/sglang_scheduler.h"

#include <algorithm>
#include <unordered_set>
#include <utility>

#include "engine/block_hash.h"

namespace mocker::engine {

SglangScheduler::SglangScheduler(const EngineConfig& config, std::uint32_t dp_rank)
    : config_(config),
      sg_(config.sglang),
      dp_rank_(dp_rank),
      page_size_(effectiveBlockSize(config)),
      timing_(config),
      // Page size 1 keys the tree by tokens while KV events are off (setKvEvents): no sequence
      // hash per token unless something reads it.
      cache_(effectiveNumGpuBlocks(config),
             page_size_ == 1 ? std::optional(HashSeeds{config.hash_seed, config.chain_seed, {}})
                             : std::nullopt),
      total_tokens_(std::uint64_t{effectiveNumGpuBlocks(config)} * page_size_),
      limit_(detail::sglangEffectiveLimit(config)),
      init_ratio_(kInitRatioBase * config.sglang.schedule_conservativeness),
      min_ratio_(kMinRatioFactor * init_ratio_),
      decay_((init_ratio_ - min_ratio_) / kRatioDecayPasses),
      new_token_ratio_(init_ratio_) {
  if (config.num_g2_blocks > 0) tiers_.emplace(offloadSettings(config, page_size_));
}

void SglangScheduler::submit(detail::AcceptedRequest&& request) {
  Req r(std::move(request));
  // Its scheduling policy may read every waiting prompt (longest prefix match).
  r.materializePrompt();
  // A prefill worker samples only the first token, internally; the requested output travels in
  // the handoff (requested_output keeps it).
  if (isPrefillWorker()) r.max_output = std::min<std::uint32_t>(r.max_output, 1);
  const auto it = detail::enqueueWaiting(requests_, waiting_, std::move(r));
  addToWaitingStats(it->second);
  ++num_waiting_;
}

void SglangScheduler::addToWaitingStats(const Req& r) {
  if (r.generated() > 0) {
    queued_decode_.add(r.len());
  } else {
    queued_prefill_.add(r.prompt_len);
  }
}

void SglangScheduler::removeFromWaitingStats(const Req& r) {
  if (r.generated() > 0) {
    queued_decode_.remove(r.len());
  } else {
    queued_prefill_.remove(r.prompt_len);
  }
}

bool SglangScheduler::cancel(RequestId id) {
  const auto it = requests_.find(id);
  if (it == requests_.end()) return false;
  Req& r = it->second;
  bool reserve_next = true;  // capacity or the reservation head changed
  switch (r.state) {
    case ReqState::Running:
      running_.erase(std::find(running_.begin(), running_.end(), id));
      break;
    case ReqState::Held:
      book_.unhold();
      reserve_next = false;
      break;
    case ReqState::Activated:
      queued_decode_.remove(r.len());
      --num_waiting_;
      break;
    case ReqState::Reserving:
    case ReqState::Reserved:
      break;
    case ReqState::Onboarding:
      // Its pages are freed; its copy still runs its course on the link.
      --num_onboarding_;
      reserve_next = false;
      break;
    case ReqState::Waiting:
    case ReqState::Done:
      // Stays in waiting_ as a stale id until it reaches the head or lpm reorders (O(1) cancel).
      removeFromWaitingStats(r);
      --num_waiting_;
      std::erase(waiting_holders_, id);
      reserve_next = false;
      break;
  }
  releaseKv(r);
  requests_.erase(it);
  book_.cancel(id);
  book_.dropStale(requests_);
  // The next reservation head is tried at once (its events go out with the next pass).
  if (reserve_next && isDecodeWorker()) tryReserve(clock_ms_, book_.carryEvents());
  return true;
}

void SglangScheduler::orderWaitingLpm() {
  struct Entry {
    bool deprioritised;
    std::uint32_t prefix;
    RequestId id;
  };
  std::vector<Entry> entries;
  entries.reserve(num_waiting_);
  const std::uint32_t key_pages = (kInBatchPrefixThreshold + page_size_ - 1) / page_size_;
  std::unordered_set<BlockHash> in_batch;
  for (RequestId id : waiting_) {
    const auto it = requests_.find(id);
    if (it == requests_.end()) continue;  // cancelled: dropped here
    Req& r = it->second;
    std::uint32_t prefix = 0;
    if (config_.enable_prefix_caching) {
      const std::uint32_t limit = (r.len() - 1) / page_size_;
      ensureKeys(r, limit);
      prefix = cache_.matchLength(pageKeys(r).first(limit)) * page_size_;
    }
    bool deprioritised = false;
    if (prefix <= kInBatchPrefixThreshold && r.len() >= key_pages * page_size_) {
      ensureHashes(r, key_pages);
      const BlockHash key = r.hashes[key_pages - 1];  // chains the first key_pages pages
      deprioritised = !in_batch.insert(key).second;
    }
    entries.push_back({deprioritised, prefix, id});
  }
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    if (a.deprioritised != b.deprioritised) return !a.deprioritised;
    if (a.prefix != b.prefix) return a.prefix > b.prefix;
    return a.id < b.id;  // arrival order
  });
  waiting_.clear();
  for (const Entry& e : entries) waiting_.push_back(e.id);
}

bool SglangScheduler::admitPrefill(PassResult& out, std::vector<detail::Rejection>& rejected) {
  const std::uint64_t max_seqs = detail::limitOrUnbounded(config_.max_num_seqs);
  std::uint64_t reserved_output = 0;
  for (RequestId id : running_) {
    reserved_output += std::min(requests_.at(id).remainingOutput(), sg_.clip_max_new_tokens);
  }
  const std::uint64_t reclaimable =
      pageTokens(std::uint64_t{cache_.numFree()} + cache_.numEvictable());
  double rem_total = static_cast<double>(reclaimable - std::min(reclaimable, page_overhead_)) -
                     static_cast<double>(reserved_output) * new_token_ratio_;
  double rem_input = sg_.max_prefill_tokens;
  double rem_chunk = sg_.chunked_prefill_size;
  std::uint64_t admitted = 0;
  bool any = false;
  while (running_.size() + admitted < max_seqs && !waiting_.empty()) {
    const auto it = requests_.find(waiting_.front());
    if (it == requests_.end()) {  // cancelled while waiting
      waiting_.pop_front();
      continue;
    }
    Req& r = it->second;
    // Decode worker: a queued reservation blocks every fresh admission (not readmissions).
    if (book_.reservationQueued() && !r.admitted_before) break;
    if (!r.admitted_before && r.prompt_len >= limit_.tokens) {
      // Our rule: the prompt needs all N pages, so SGLang's strict `charged + reserve >=
      // rem_total` check can never pass. Checked every time a fresh request is at the head.
      removeFromWaitingStats(r);
      --num_waiting_;
      waiting_.pop_front();
      rejected.push_back({r.id, limit_.binding});
      requests_.erase(it);
      continue;
    }
    if (tiers_ && r.materialized == 0 && !r.admitted_before &&
        parkForLoadBack(r, rem_total, out.kv_events, out.start_ms)) {
      continue;
    }
    const std::uint32_t extend = r.len() - r.materialized;
    std::uint32_t chunk = extend;
    if (extend > sg_.chunked_prefill_size) {
      chunk = static_cast<std::uint32_t>(rem_chunk / page_size_) * page_size_;
      if (chunk == 0) break;
    }
    const std::uint64_t charged = pageTokens(pagesFor(chunk));
    std::uint64_t reserve = 0;
    if (chunk == extend) {
      // Our cap: a lone request (nothing else holding KV) always passes the rem_total check.
      const std::uint64_t used = pageTokens(pagesFor(r.len()));
      const std::uint64_t room = total_tokens_ > used ? total_tokens_ - used : 0;
      reserve = std::min<std::uint64_t>(
          {r.remainingOutput(), sg_.clip_max_new_tokens, room > 0 ? room - 1 : 0});
    }
    if (static_cast<double>(charged + reserve) >= rem_total) break;
    if ((static_cast<double>(charged) > rem_input && admitted > 0) ||
        static_cast<double>(charged) > rem_chunk) {
      break;
    }
    const std::uint32_t held_before = r.heldPages();
    const std::uint32_t materialized_before = r.materialized;
    std::uint32_t cached = 0;
    if (!allocateChunk(r, materialized_before + chunk, cached, out.kv_events)) {
      oom_ = true;
      break;
    }
    waiting_.pop_front();
    removeFromWaitingStats(r);
    --num_waiting_;
    if (held_before > 0) std::erase(waiting_holders_, r.id);
    if (materialized_before == 0 || r.loaded) {
      // A loaded-back request reuses its whole loaded prefix (device hit and host part).
      detail::recordAdmission(r, r.loaded ? materialized_before : cached, out, prefix_counters_);
      r.loaded = false;
    }
    rem_total -= static_cast<double>(pageTokens(r.heldPages() - held_before) + reserve);
    rem_input -= static_cast<double>(charged);
    rem_chunk -= static_cast<double>(charged);
    prefills_.push_back({r.id, r.materialized,
                         materialized_before == 0 ? cached : materialized_before, r.prompt_len});
    ++admitted;
    any = true;
    if (rem_chunk <= 0) break;
  }
  return any;
}

PassResult SglangScheduler::step(double now_ms) {
  clock_ms_ = std::max(clock_ms_, now_ms);
  Pass pass{.out = detail::beginPass(dp_rank_, now_ms)};
  pass.out.kv_events = std::move(book_.carryEvents());
  book_.carryEvents().clear();
  if (tiers_) advanceTiers(pass, now_ms);
  prefills_.clear();
  oom_ = false;
  if (isPrefillWorker()) {
    book_.expire(pass.out, now_ms, requests_, [this](Req& r) { releaseKv(r); });
  }
  if (isDecodeWorker()) {
    tryReserve(now_ms, pass.out.kv_events);
    activateReserved(pass, now_ms);
    admitActivated(pass);
  }
  if (sg_.schedule_policy == SchedulePolicy::Lpm && num_waiting_ > 1 &&
      num_waiting_ <= kLpmFallbackWaiting) {
    orderWaitingLpm();
  }
  admit(pass);
  timePrefill(pass);
  // Exclusive extend: a pass that prefilled decodes only the requests it completed (and the
  // handoffs it admitted, whose prompt is complete too).
  pass.extend_pass = !prefills_.empty();
  if (pass.extend_pass) {
    pass.decode_set.insert(pass.decode_set.end(), pass.handoffs_admitted.begin(),
                           pass.handoffs_admitted.end());
  } else {
    pass.decode_set = running_;
  }
  selectDecoding(pass);
  emitTokens(pass);
  // Ratio update: reset by a retraction, then one decay step per pass that did work.
  if (pass.retracted_any) new_token_ratio_ = init_ratio_;
  pass.out.did_work = !prefills_.empty() || !pass.out.outputs.empty() || !pass.rejected.empty() ||
                      pass.retracted_any || !pass.decode_set.empty();
  if (pass.out.did_work) new_token_ratio_ = std::max(min_ratio_, new_token_ratio_ - decay_);
  detail::finishPass(pass.out, now_ms, pass.rejected, queued_prefill_, queued_decode_,
                     loadMetrics());
  book_.stampTickets(pass.out, config_);
  if (isDecodeWorker()) {
    // The pass released pages: the reservation head is tried again at the pass end.
    clock_ms_ = std::max(clock_ms_, pass.out.end_ms);
    tryReserve(pass.out.end_ms, pass.out.kv_events);
    pass.out.load = loadMetrics();
  }
  // HiCache write-through: the pages the tree stored in this pass start their way to host.
  if (tiers_) tiers_->writeThrough(pass.out.kv_events, now_ms);
  // Evictions since the last pass end are exactly this pass's Removed events (carried ones
  // included), also when they are not built; a Stored event always comes with other work.
  pass.out.did_work = pass.out.did_work || !pass.out.handoffs.empty() ||
                      !pass.out.activations.empty() || !pass.out.expired_holds.empty() ||
                      !pass.out.kv_events.empty() || cache_.numEvicted() != evicted_at_pass_end_;
  evicted_at_pass_end_ = cache_.numEvicted();
  return std::move(pass.out);
}

void SglangScheduler::admit(Pass& pass) {
  admitPrefill(pass.out, pass.rejected);
  if (prefills_.empty() && running_.empty() && !waiting_holders_.empty()) {
    // Our rule: nothing can run while partial prefills pin KV ⇒ release them and retry.
    pass.retracted_any |= releaseWaitingHolders(std::nullopt);
    admitPrefill(pass.out, pass.rejected);
  }
  if (oom_) new_token_ratio_ = init_ratio_;
}

void SglangScheduler::timePrefill(Pass& pass) {
  ScheduledStats& fpm = pass.out.fpm.scheduled;
  detail::Welford prefill_len;
  std::uint64_t sum_isl = 0, sum_prefix = 0;
  std::vector<RequestId> partial;
  for (const Prefill& p : prefills_) {
    sum_isl += p.chunk_end;
    sum_prefix += p.kv_before;
    if (p.chunk_end > p.kv_before) {
      ++fpm.num_prefill_requests;
      fpm.sum_prefill_tokens += p.chunk_end - p.kv_before;
      fpm.sum_prefill_kv_tokens += p.kv_before;
      prefill_len.add(p.prompt_len);
    }
    Req& r = requests_.at(p.id);
    if (r.materialized < r.len()) {
      partial.push_back(p.id);
    } else {
      r.state = ReqState::Running;
      running_.push_back(p.id);
      pass.decode_set.push_back(p.id);
    }
  }
  for (std::size_t i = partial.size(); i-- > 0;) pushWaitingFront(requests_.at(partial[i]));
  fpm.var_prefill_length = prefill_len.variance();
  const std::uint64_t batch = prefills_.size();
  double raw_ms = 0.0;
  if (timing_.isRoofline()) {
    // An extend pass: every chunk with its context; the first tokens it samples are part of it.
    roofline_seqs_.clear();
    for (const Prefill& p : prefills_) {
      if (p.chunk_end > p.kv_before)
        roofline_seqs_.push_back({p.chunk_end - p.kv_before, p.kv_before});
    }
    raw_ms = timing_.passMs(roofline_seqs_);
  } else if (batch > 0) {
    raw_ms = timing_.prefillMs(batch, sum_isl / batch, sum_prefix / batch);
  }
  pass.out.prefill_ms = detail::scaledPrefillMs(config_, raw_ms);
}

LoadMetrics SglangScheduler::loadMetrics() const {
  LoadMetrics m = detail::makeLoadMetrics({.dp_rank = dp_rank_,
                                           .active_blocks = cache_.numActive(),
                                           .total_blocks = cache_.numPages(),
                                           .running = running_.size(),
                                           .waiting = num_waiting_ + num_onboarding_,
                                           .preemptions = retractions_total_,
                                           .prefix = prefix_counters_});
  book_.fillLoadMetrics(m);
  if (tiers_) m.tiers = tiers_->metrics();
  m.onboarding_requests = num_onboarding_;
  return m;
}

std::vector<RequestId> SglangScheduler::waitingOrder() const {
  std::vector<RequestId> out;
  for (RequestId id : waiting_) {
    if (requests_.contains(id)) out.push_back(id);
  }
  return out;
}

std::uint32_t SglangScheduler::materializedTokens(RequestId id) const {
  const auto it = requests_.find(id);
  return it == requests_.end() ? 0 : it->second.materialized;
}

}  // namespace mocker::engine
