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
// in detail/pass.h.
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

#include "base/check.h"
#include "engine/block_hash.h"
#include "engine/speculative.h"

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
      new_token_ratio_(init_ratio_) {}

void SglangScheduler::submit(detail::AcceptedRequest&& request) {
  Req r(std::move(request));
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

void SglangScheduler::ensureHashes(Req& r, std::uint32_t pages) const {
  if (r.hashes.size() >= pages) return;
  extendSequenceHashes(std::span(r.tokens).first(std::size_t{pages} * page_size_), page_size_,
                       r.hashSeeds(config_), r.hashes);
}

void SglangScheduler::setKvEvents(bool enabled) {
  kv_events_ = enabled;
  const bool was_token_keyed = cache_.tokenKeyed();
  cache_.setRecordRemovals(enabled);
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
  detail::StoredRuns runs(r, page_size_, events);
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
    if (materialized_before == 0) detail::recordAdmission(r, cached, out, prefix_counters_);
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

bool SglangScheduler::reachedEnd(const Req& r) const {
  // Our rule: a sequence that needs every page stops (it could never be re-admitted).
  return r.generated() >= r.max_output || r.len() >= limit_.tokens;
}

void SglangScheduler::finish(Req& r) {
  releaseKv(r);
  r.state = ReqState::Done;
}

PassResult SglangScheduler::step(double now_ms) {
  clock_ms_ = std::max(clock_ms_, now_ms);
  Pass pass{.out = detail::beginPass(dp_rank_, now_ms)};
  pass.out.kv_events = std::move(book_.carryEvents());
  book_.carryEvents().clear();
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
      pass.out.outputs.push_back(detail::sampleToken(r, config_.token_seed));
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

LoadMetrics SglangScheduler::loadMetrics() const {
  LoadMetrics m = detail::makeLoadMetrics({.dp_rank = dp_rank_,
                                           .active_blocks = cache_.numActive(),
                                           .total_blocks = cache_.numPages(),
                                           .running = running_.size(),
                                           .waiting = num_waiting_,
                                           .preemptions = retractions_total_,
                                           .prefix = prefix_counters_});
  book_.fillLoadMetrics(m);
  return m;
}

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

Status SglangScheduler::checkInvariants() const {
  const auto fail = [](const std::string& what) {
    return Error{ErrorCode::Internal, "sglang scheduler invariant: " + what};
  };
  std::vector<std::span<const BlockHash>> paths;
  std::uint64_t private_pages = 0, overhead = 0, num_held = 0;
  std::unordered_map<RequestId, int> seen;
  for (const auto& [id, r] : requests_) {
    if (r.path_pages > pageKeys(r).size()) return fail("path beyond the request's page keys");
    if (r.path_pages > 0) paths.push_back(path(r));
    private_pages += r.private_pages;
    overhead += overheadOf(r);
    if (r.state == ReqState::Held) {
      ++num_held;
      if (++seen[id] > 1) return fail("held request in a queue");
      if (r.materialized != r.prompt_len) return fail("held request without its prompt's KV");
    }
    if (r.state == ReqState::Reserving || r.state == ReqState::Reserved) {
      // KV in flight: the whole prompt's pages are reserved (none before the reservation), the
      // resident prefix locked, nothing materialised yet.
      const std::uint32_t pages = r.state == ReqState::Reserved ? pagesFor(r.prompt_len) : 0;
      if (r.heldPages() != pages) return fail("handoff holds the wrong number of pages");
      if (r.materialized != 0) return fail("handoff materialised before activation");
      if (r.path_pages > r.prompt_len / page_size_) return fail("handoff path beyond its prompt");
      continue;
    }
    if (r.heldPages() != pagesFor(r.materialized)) return fail("held pages != ceil(kv / B)");
    if (config_.enable_prefix_caching && r.path_pages != r.materialized / page_size_) {
      return fail("a complete page is not in the radix tree");
    }
    if (!config_.enable_prefix_caching && r.path_pages != 0)
      return fail("tree use without caching");
    if (r.materialized > r.len()) return fail("materialized > len");
  }
  MOCKER_TRY_VOID(cache_.checkInvariants(paths));
  if (private_pages != cache_.numPrivate()) return fail("private page count mismatch");
  if (overhead != page_overhead_) return fail("page overhead mismatch");
  if (config_.max_num_seqs && running_.size() > *config_.max_num_seqs) {
    return fail("running > max_num_seqs");
  }
  std::uint64_t live_waiting = 0, holders = 0;
  for (RequestId id : waiting_) {
    const auto it = requests_.find(id);
    if (it == requests_.end()) continue;
    if (it->second.state != ReqState::Waiting) return fail("non-waiting request in waiting");
    if (++seen[id] > 1) return fail("request twice in waiting");
    if (it->second.heldPages() > 0) {
      ++holders;
      if (std::find(waiting_holders_.begin(), waiting_holders_.end(), id) ==
          waiting_holders_.end()) {
        return fail("waiting request holds KV but is not a holder");
      }
    }
    ++live_waiting;
  }
  if (holders != waiting_holders_.size()) return fail("holder list mismatch");
  if (live_waiting + book_.activated().size() != num_waiting_) {
    return fail("waiting count mismatch");
  }
  MOCKER_TRY_VOID(book_.checkInvariants(seen, requests_, num_held));
  for (RequestId id : book_.activated()) {
    const Req& r = requests_.at(id);
    if (r.materialized != r.len()) return fail("activated handoff without its prompt's KV");
  }
  if (queued_prefill_.count() + queued_decode_.count() != num_waiting_) {
    return fail("queued statistics count mismatch");
  }
  for (RequestId id : running_) {
    if (++seen[id] > 1) return fail("request in two queues");
    const Req& r = requests_.at(id);
    if (r.state != ReqState::Running) return fail("non-running request in running");
    if (r.materialized != r.len()) return fail("running request without KV for every token");
  }
  if (seen.size() != requests_.size()) return fail("request in no queue");
  return {};
}

}  // namespace mocker::engine
