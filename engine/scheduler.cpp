// vLLM v1-style scheduling of one DP rank, and the TRT-LLM variant (docs/engine.md).
//
// NOTE on the algorithm. There are no separate "prefill" and "decode" phases: every request has
// `num_computed` tokens in KV and `len` = prompt + sampled tokens; a pass gives each request up
// to `len − num_computed` tokens out of one token budget (max_num_batched_tokens). A decoding
// request always has exactly one dangling (sampled, not yet computed) token. One pass:
//
//   1. RUNNING first, in admission order: allocate blocks for the tokens it will compute. When
//      the pool is exhausted, preempt (LIFO: newest running, FIFO: oldest) — the victim frees
//      all its blocks, forgets its progress and goes to the front of WAITING — and retry.
//   2. WAITING, strict head-of-line, only if nothing was preempted: reject requests that can
//      never run, look up the cached prefix, admit the head if its blocks fit, else stop.
//   3. Prefill time over requests that computed prompt tokens; then every request whose KV now
//      covers its whole sequence samples one token (the first token comes in the pass that
//      completes the prompt); decode time over those requests.
//
// step() is these phases in order (scheduleRunning, admitWaiting, timePrefill, collectReady,
// timeDecode, emitTokens); the signal, Stored-run and pass-end pieces it shares with the SGLang
// scheduler live in detail/pass.h.
//
// Blocks become cache-visible (Stored) as soon as a pass computes their last token; completion,
// preemption and cancellation release blocks in reverse order so eviction is leaf-first. That
// block bookkeeping (prefix lookup, acquire, finalize, release) is scheduler_blocks.cpp.
#include "engine/scheduler.h"

#include <algorithm>
#include <utility>

#include "base/check.h"
#include "engine/speculative.h"

namespace mocker::engine {

VllmScheduler::VllmScheduler(const EngineConfig& config, std::uint32_t dp_rank)
    : config_(config),
      dp_rank_(dp_rank),
      block_size_(effectiveBlockSize(config)),
      timing_(config),
      pool_(effectiveNumGpuBlocks(config)),
      // Length limits: a sequence never outgrows the pool nor (chunking off) the token budget (vLLM
      // refuses to start when max_model_len does not fit either), so a lone request can never
      // preempt itself forever and a preempted one can always be readmitted.
      limit_(detail::vllmEffectiveLimit(config, block_size_)),
      lora_batch_(config.max_loras),
      lora_resident_(effectiveMaxCpuLoras(config)) {
  if (config.num_g2_blocks > 0) tiers_.emplace(offloadSettings(config, block_size_));
}

void VllmScheduler::submit(detail::AcceptedRequest&& request) {
  Req r(std::move(request));
  // A prefill worker samples only the first token, internally; the requested output travels in
  // the handoff (requested_output keeps it).
  if (isPrefillWorker()) r.max_output = std::min<std::uint32_t>(r.max_output, 1);
  if (isTrtllm() && r.prompt_len < limit_.tokens) {
    // trtllm: the reservation never covers tokens the request can never generate (len stops at L).
    r.max_output = static_cast<std::uint32_t>(
        std::min<std::uint64_t>(r.max_output, limit_.tokens - r.prompt_len));
  }
  const auto it = detail::enqueueWaiting(requests_, waiting_, std::move(r));
  addToWaitingStats(it->second);
  ++num_waiting_;
}

void VllmScheduler::addToWaitingStats(const Req& r) {
  if (r.state == ReqState::Preempted) {
    queued_decode_.add(r.len());
  } else {
    queued_prefill_.add(r.prompt_len);
  }
}

void VllmScheduler::removeFromWaitingStats(const Req& r) {
  if (r.state == ReqState::Preempted) {
    queued_decode_.remove(r.len());
  } else {
    queued_prefill_.remove(r.prompt_len);
  }
}

bool VllmScheduler::cancel(RequestId id) {
  const auto it = requests_.find(id);
  if (it == requests_.end()) return false;
  Req& r = it->second;
  bool reserve_next = false;  // capacity or the reservation head changed
  if (r.state == ReqState::Running) {
    running_.erase(std::find(running_.begin(), running_.end(), &r));
    releaseBlocks(r);
    reserve_next = true;
  } else if (r.state == ReqState::Held) {
    releaseBlocks(r);
    book_.unhold();
  } else if (r.state == ReqState::Reserving) {
    reserve_next = true;
  } else if (r.state == ReqState::Reserved) {
    releaseBlocks(r);
    reserve_next = true;
  } else if (r.state == ReqState::Activated) {
    queued_decode_.remove(r.len());
    --num_waiting_;
    releaseBlocks(r);
    reserve_next = true;
  } else {
    // Stays in waiting_ as a stale id until it reaches the head (O(1) cancel). Onboarding (in no
    // queue) and Loaded (in loaded_) requests hold blocks; an onboarding keeps its transfer.
    if (r.state == ReqState::Onboarding) --num_onboarding_;
    if (!r.blocks.empty()) reserve_next = true;
    releaseBlocks(r);
    removeFromWaitingStats(r);
    --num_waiting_;
  }
  requests_.erase(it);
  book_.cancel(id);
  book_.dropStale(requests_);
  // The next reservation head is tried at once (its events go out with the next pass).
  if (reserve_next && isDecodeWorker()) tryReserve(clock_ms_, book_.carryEvents());
  return true;
}

void VllmScheduler::preempt(std::size_t running_index) {
  Req& r = *running_[running_index];
  const RequestId id = r.id;
  releaseBlocks(r);
  r.num_computed = 0;
  r.state = ReqState::Preempted;
  ++r.num_preemptions;
  ++preemptions_total_;
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(running_index));
  waiting_.push_front(id);
  ++num_waiting_;
  addToWaitingStats(r);
}

std::optional<LengthLimit> VllmScheduler::rejectionReason(const Req& r) const {
  if (r.admitted_before) return std::nullopt;  // only fresh requests are rejected ("Length limits")
  if (r.prompt_len >= limit_.tokens) return limit_.binding;
  // trtllm: unreachable after the submit clamp (prompt + max_output <= L <= N·B); kept as a rule.
  if (isTrtllm() && blocksFor(std::uint64_t{r.prompt_len} + r.max_output) > pool_.numBlocks()) {
    return LengthLimit::KvCapacity;
  }
  return std::nullopt;
}

bool VllmScheduler::reachedEnd(const Req& r) const {
  return r.generated() >= r.max_output || r.len() >= limit_.tokens;
}

void VllmScheduler::finish(RequestId id) {
  const auto it = requests_.find(id);
  releaseBlocks(it->second);
  requests_.erase(it);
}

PassResult VllmScheduler::step(double now_ms) {
  clock_ms_ = std::max(clock_ms_, now_ms);
  Pass pass{.out = detail::beginPass(dp_rank_, now_ms),
            .budget = detail::limitOrUnbounded(config_.max_num_batched_tokens)};
  pass.out.kv_events = std::move(book_.carryEvents());
  book_.carryEvents().clear();
  // The per-pass lists keep their capacity from pass to pass (a lightly loaded rank runs
  // millions of small passes: an allocation each was a visible part of them).
  pass.ready.swap(ready_scratch_);
  pass.completed.swap(completed_scratch_);
  pass.ready.clear();
  pass.completed.clear();
  scheduled_.clear();
  if (tiers_) advanceTiers(pass, now_ms);
  if (isPrefillWorker()) {
    book_.expire(pass.out, now_ms, requests_, [this](Req& r) { releaseBlocks(r); });
  }
  if (isDecodeWorker()) {
    tryReserve(now_ms, pass.out.kv_events);
    activateReserved(pass, now_ms);
  }
  scheduleRunning(pass);
  if (config_.max_loras > 0) beginLoraBatch();
  if (!pass.preempted) admitWaiting(pass);
  timePrefill(pass);
  collectReady(pass);
  timeDecode(pass);
  if (config_.max_loras > 0) loadLoras(pass);
  emitTokens(pass);
  detail::finishPass(pass.out, now_ms, pass.rejected, queued_prefill_, queued_decode_,
                     loadMetrics());
  book_.stampTickets(pass.out, config_);
  if (isDecodeWorker()) {
    // The pass released blocks: the reservation head is tried again at the pass end.
    clock_ms_ = std::max(clock_ms_, pass.out.end_ms);
    tryReserve(pass.out.end_ms, pass.out.kv_events);
    pass.out.load = loadMetrics();
  }
  // Blocks the pool evicted in this pass start their way to host memory.
  if (tiers_) tiers_->offloadEvicted(pass.out.kv_events, now_ms);
  // Events off: the events this rank would have built since the last pass end (evictions and
  // Stored blocks, carried ones included) count as work all the same.
  const std::uint64_t unbuilt = unbuilt_stored_ + pool_.numRemovals();
  pass.out.did_work = !scheduled_.empty() || !pass.out.outputs.empty() ||
                      !pass.out.handoffs.empty() || !pass.out.activations.empty() ||
                      !pass.out.expired_holds.empty() || !pass.out.kv_events.empty() ||
                      (!kv_events_ && unbuilt != unbuilt_at_pass_end_);
  unbuilt_at_pass_end_ = unbuilt;
  if (pass.out.did_work) last_end_ms_ = std::max(last_end_ms_, pass.out.end_ms);
  ready_scratch_.swap(pass.ready);
  completed_scratch_.swap(pass.completed);
  return std::move(pass.out);
}

void VllmScheduler::scheduleRunning(Pass& pass) {
  for (std::size_t i = 0; i < running_.size() && pass.budget > 0;) {
    Req& r = *running_[i];
    const std::uint32_t remaining = r.len() - r.num_computed;
    if (remaining == 0) {
      ++i;
      continue;
    }
    if (!config_.enable_chunked_prefill && r.num_computed < r.prompt_len &&
        r.prompt_len - r.num_computed > pass.budget) {
      break;
    }
    const auto n = static_cast<std::uint32_t>(std::min<std::uint64_t>(remaining, pass.budget));
    const Growth growth = growOrPreempt(pass, i, n, r.num_computed + n == r.len() ? draftKv(r) : 0);
    if (growth == Growth::SelfPreempted) continue;  // running_[i] is now the next request
    if (growth == Growth::Allocated) computeTokens(pass, r, r.num_computed, n);
    ++i;
  }
}

inline VllmScheduler::Growth VllmScheduler::growOrPreempt(Pass& pass, std::size_t& i,
                                                          std::uint32_t n, std::uint32_t drafts) {
  Req& r = *running_[i];
  // Most decode steps stay within the last block: acquire would take nothing (the common case,
  // checked without its division).
  if (std::uint64_t{r.num_computed} + n + drafts <= std::uint64_t{r.blocks.size()} * block_size_) {
    return Growth::Allocated;
  }
  while (!acquire(r, r.num_computed + n + drafts, 0, pass.out.kv_events)) {
    if (isTrtllm()) {
      // Guaranteed-no-evict admission (fresh or an activated handoff) and reservations that
      // leave every running request's blocks to completion free make this unreachable
      // (checkInvariants: active + outstanding <= N); no progress this pass.
      MOCKER_DCHECK(false);
      return Growth::Stalled;
    }
    const std::size_t victim =
        config_.preemption_mode == PreemptionMode::Lifo ? running_.size() - 1 : 0;
    const RequestId victim_id = running_[victim]->id;
    // A victim already scheduled in this pass gives its tokens back.
    const auto sched_it = std::find_if(scheduled_.begin(), scheduled_.end(),
                                       [&](const Scheduled& s) { return s.id == victim_id; });
    if (sched_it != scheduled_.end()) {
      pass.budget += sched_it->num_tokens;
      scheduled_.erase(sched_it);
    }
    preempt(victim);
    pass.preempted = true;
    if (victim_id == r.id) return Growth::SelfPreempted;
    if (victim < i) --i;
  }
  return Growth::Allocated;
}

inline void VllmScheduler::computeTokens(Pass& pass, Req& r, std::uint32_t computed_before,
                                         std::uint32_t n) {
  scheduled_.push_back({r.id, n, computed_before, r.len(), r.prompt_len, r.lora_id});
  r.num_computed = computed_before + n;
  if (blockFilled(r)) finalizeBlocks(r, pass.out.kv_events);  // saves the call in most passes
  pass.budget -= n;
}

inline std::uint64_t VllmScheduler::blocksToCompletion(const Req& r) const {
  const std::uint32_t total = blocksFor(std::uint64_t{r.prompt_len} + r.max_output);
  return total > r.blocks.size() ? total - r.blocks.size() : 0;
}

std::uint64_t VllmScheduler::outstandingBlocks() const {
  std::uint64_t n = 0;
  for (const Req* q : running_) n += blocksToCompletion(*q);
  return n;
}

inline void VllmScheduler::rejectHead(Pass& pass, ReqMap::iterator it, LengthLimit limit) {
  removeFromWaitingStats(it->second);
  --num_waiting_;
  waiting_.pop_front();
  pass.rejected.push_back({it->first, limit});
  releaseBlocks(it->second);  // none, unless Loaded (offload tiers)
  requests_.erase(it);
}

void VllmScheduler::admitWaiting(Pass& pass) {
  const std::uint64_t max_seqs = detail::limitOrUnbounded(config_.max_num_seqs);
  // TRT-LLM: blocks running requests may still need.
  std::uint64_t reserved_blocks = isTrtllm() ? outstandingBlocks() : 0;
  if (!book_.activated().empty()) admitActivated(pass, max_seqs, reserved_blocks);
  while (running_.size() < max_seqs && pass.budget > 0 && (!waiting_.empty() || !loaded_.empty())) {
    // Offload tiers: loaded requests go first — they hold every block they need, so a blocked
    // head (a preempted request that no longer fits beside them) never stalls them.
    std::deque<RequestId>& queue = loaded_.empty() ? waiting_ : loaded_;
    const auto it = requests_.find(queue.front());
    if (it == requests_.end()) {  // cancelled while waiting
      queue.pop_front();
      continue;
    }
    Req& r = it->second;
    // Decode worker: a queued reservation blocks every fresh admission (not readmissions).
    if (book_.reservationQueued() && !r.admitted_before) break;
    if (const auto limit = rejectionReason(r)) {
      rejectHead(pass, it, *limit);
      continue;
    }
    if (!lora_batch_.admits(r.lora_id)) {  // LoRA: the pass's adapter set is full
      skipForLora(queue);
      continue;
    }
    r.materializePrompt();  // a deferred prompt is first needed here
    // Loaded (offload tiers): it holds its onboarded prefix, computed; no lookup.
    PrefixMatch match{.active_blocks = static_cast<std::uint32_t>(r.blocks.size())};
    if (r.state != ReqState::Loaded) match = lookupPrefix(r);
    if (match.onboard_blocks > 0) {
      if (!parkForOnboarding(pass, r, match, reserved_blocks)) break;
      continue;  // vLLM skips a request whose KV is loading
    }
    const std::uint32_t cached =
        r.state == ReqState::Loaded ? r.num_computed : match.hit_blocks * block_size_;
    const std::uint32_t uncached = r.len() - cached;
    const auto n = static_cast<std::uint32_t>(std::min<std::uint64_t>(uncached, pass.budget));
    // Speculative decoding: a request that completes its prompt now draws a burst this pass.
    const std::uint32_t target = cached + n + (cached + n == r.len() ? draftKv(r) : 0);
    const std::uint64_t available = pool_.numBlocks() - pool_.numActive();
    if (isTrtllm()) {
      const std::uint64_t needed =
          blocksFor(std::uint64_t{r.prompt_len} + r.max_output) - match.active_blocks;
      if (needed + reserved_blocks > available) break;
    } else {
      const std::uint64_t needed = blocksFor(std::max(r.len(), target)) - match.active_blocks;
      if (needed > available) break;
    }
    // Chunking off: everything uncached in one pass. len <= L <= budget, so an empty pass always
    // has room ("Length limits"): the head waits, never forever.
    if (!config_.enable_chunked_prefill && uncached > pass.budget) break;
    if (!acquire(r, target, match.hit_blocks, pass.out.kv_events)) {
      MOCKER_DCHECK(false);  // the capacity check above guarantees the allocation
      break;
    }
    if (isTrtllm()) reserved_blocks += blocksToCompletion(r);
    removeFromWaitingStats(r);
    --num_waiting_;
    queue.pop_front();
    detail::recordAdmission(r, cached, pass.out, prefix_counters_);
    r.state = ReqState::Running;
    running_.push_back(&r);
    lora_batch_.add(r.lora_id);
    computeTokens(pass, r, cached, n);
  }
  if (!lora_skipped_.empty()) restoreLoraSkipped();
}

void VllmScheduler::timePrefill(Pass& pass) {
  // Positions are capped at the prompt: a chunk that also covers generated tokens is decode.
  std::uint64_t batch = 0, isl = 0, prefix = 0;
  detail::Welford prefill_len;
  ScheduledStats& fpm = pass.out.fpm.scheduled;
  for (const Scheduled& s : scheduled_) {
    if (s.computed_before >= s.prompt_len) continue;
    ++batch;
    isl += std::min(s.computed_before + s.num_tokens, s.prompt_len);
    prefix += s.computed_before;
    fpm.sum_prefill_tokens += s.num_tokens;
    fpm.sum_prefill_kv_tokens += s.computed_before;
    prefill_len.add(s.prompt_len);
  }
  fpm.num_prefill_requests = batch;
  fpm.var_prefill_length = prefill_len.variance();
  if (timing_.isRoofline()) return;  // timeDecode times the whole pass (timeRoofline)
  const double raw_ms = batch == 0 ? 0.0 : timing_.prefillMs(batch, isl / batch, prefix / batch);
  pass.out.prefill_ms = detail::scaledPrefillMs(config_, raw_ms);
}

void VllmScheduler::timeRoofline(Pass& pass) {
  // One mixed pass: every scheduled sequence with its chunk and context, prompt chunks first.
  // decode_ms is the decodes' own pass time, prefill_ms what the prompt chunks add to it.
  std::vector<PassSequence>& seqs = roofline_seqs_;
  seqs.clear();
  for (const Scheduled& s : scheduled_) {
    if (s.num_tokens > 0 && s.computed_before < s.prompt_len) {
      seqs.push_back({s.num_tokens, s.computed_before});
    }
  }
  const std::size_t num_prompt = seqs.size();
  for (const Scheduled& s : scheduled_) {
    if (s.num_tokens > 0 && s.computed_before >= s.prompt_len) {
      seqs.push_back({s.num_tokens, s.computed_before});
    }
  }
  const double whole_ms = timing_.passMs(seqs);
  const double decode_ms = timing_.passMs(std::span(seqs).subspan(num_prompt));
  pass.out.prefill_ms = detail::scaledPrefillMs(config_, whole_ms - decode_ms);
  pass.out.decode_ms = isPrefillWorker() ? 0.0 : detail::scaledDecodeMs(config_, decode_ms);
}

void VllmScheduler::collectReady(Pass& pass) {
  // Signals: terminal-without-token, then tokens, then rejections. running_ holds the
  // requests' map nodes, so the per-request work needs no map lookup.
  pass.ready.reserve(running_.size());
  pass.out.outputs.reserve(running_.size() + pass.rejected.size());
  for (std::size_t i = 0; i < running_.size();) {
    Req& r = *running_[i];
    if (r.num_computed >= r.len() && reachedEnd(r)) {  // e.g. max_output 0: nothing to sample
      pass.out.outputs.push_back(detail::completedWithoutToken(r, limit_.stopReason(r)));
      const RequestId id = r.id;
      pass.ended_without_token.push_back(id);
      running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
      finish(id);
      continue;
    }
    if (r.num_computed >= r.len()) {
      pass.ready.push_back(&r);
      pass.ready_len_sum += r.len();
    }
    ++i;
  }
}

void VllmScheduler::timeDecode(Pass& pass) {
  ScheduledStats& fpm = pass.out.fpm.scheduled;
  detail::Welford decode_len;
  const std::vector<RequestId>& ended = pass.ended_without_token;
  for (const Scheduled& s : scheduled_) {
    if (s.computed_before < s.prompt_len) continue;
    if (!ended.empty() && std::find(ended.begin(), ended.end(), s.id) != ended.end()) {
      continue;  // terminal right after scheduling: not decode work ("FPM fields")
    }
    ++fpm.num_decode_requests;
    fpm.sum_decode_kv_tokens += s.len_at_schedule;
    decode_len.add(s.len_at_schedule);
  }
  fpm.var_decode_kv_tokens = decode_len.variance();
  if (timing_.isRoofline()) return timeRoofline(pass);
  if (pass.ready.empty()) return;
  // decode_load: physical = resident blocks after this pass's allocations; logical = Σ len of
  // the ready requests before their new tokens (a shared prefix counts once per request).
  const std::uint64_t active_kv = config_.decode_load == DecodeLoad::Logical
                                      ? pass.ready_len_sum
                                      : std::uint64_t{pool_.numActive()} * block_size_;
  const double raw_ms =
      timing_.decodeMs(pass.ready.size(), active_kv, pass.ready_len_sum / pass.ready.size(),
                       std::uint64_t{pool_.numBlocks()} * block_size_);
  // A prefill worker's internal first token costs no decode time.
  pass.out.decode_ms = isPrefillWorker() ? 0.0 : detail::scaledDecodeMs(config_, raw_ms);
}

void VllmScheduler::emitTokens(Pass& pass) {
  const bool failed = detail::passFailed(pass.out);
  // Completed requests release their blocks at once (release order shapes the LRU), are marked
  // Finished, and leave running_ and requests_ after the loop (pass.ready holds their nodes).
  const auto complete = [&](Req& r) {
    releaseBlocks(r);
    r.state = ReqState::Finished;
    pass.completed.push_back(r.id);
  };
  bool held = false;
  for (Req* rp : pass.ready) {
    Req& r = *rp;
    if (failed) {
      pass.out.outputs.push_back(detail::failedSignal(r));
      complete(r);
      continue;
    }
    if (isPrefillWorker() && r.generated() == 0) {
      // Prompt complete: keep its KV and describe it in a handoff (no signal).
      r.state = ReqState::Held;
      book_.hold(r, dp_rank_, block_size_, pass.out);
      held = true;
      continue;
    }
    // One token, or a speculative burst: all share the pass's end time.
    const std::uint32_t burst =
        config_.spec_num_draft_tokens
            ? specBurst(config_, dp_rank_, r.id, r.spec_steps++, limit_.remaining(r))
            : 1;
    for (std::uint32_t t = 0; t < burst; ++t) {
      OutputSignal& sig = detail::emitToken(r, config_.token_seed, pass.out.outputs);
      if (reachedEnd(r)) {
        sig.terminal = Terminal::Completed;
        sig.limit = limit_.stopReason(r);
        complete(r);  // touches no signal
        break;
      }
    }
    if (config_.spec_num_draft_tokens && r.state != ReqState::Finished) acceptDrafts(pass, r);
  }
  if (!pass.completed.empty() || held) {
    std::erase_if(running_, [](const Req* r) {
      return r->state == ReqState::Finished || r->state == ReqState::Held;
    });
    for (RequestId id : pass.completed) requests_.erase(id);
  }
}

bool VllmScheduler::releaseHeld(RequestId id) {
  return book_.releaseHeld(requests_, id, [this](Req& r) { releaseBlocks(r); });
}

std::optional<double> VllmScheduler::nextTimerMs() const {
  std::optional<double> timer = book_.nextTimerMs();
  if (const std::optional<double> t = tiers_ ? tiers_->nextEventMs() : std::nullopt) {
    timer = timer ? std::min(*timer, *t) : *t;
  }
  return timer;
}

void VllmScheduler::admitActivated(Pass& pass, std::uint64_t max_seqs,
                                   std::uint64_t& reserved_blocks) {
  while (!book_.activated().empty() && running_.size() < max_seqs && pass.budget > 0) {
    Req& r = requests_.at(book_.activated().front());
    if (isTrtllm()) {
      const std::uint64_t available = pool_.numBlocks() - pool_.numActive();
      if (blocksToCompletion(r) + reserved_blocks > available) break;
    }
    // It holds its prompt's blocks; a speculative burst may need more right away.
    if (!acquire(r, r.len() + draftKv(r), 0, pass.out.kv_events)) break;
    if (isTrtllm()) reserved_blocks += blocksToCompletion(r);
    --num_waiting_;
    queued_decode_.remove(r.len());
    book_.admitFront(r, pass.out, prefix_counters_);
    r.state = ReqState::Running;
    running_.push_back(&r);
    computeTokens(pass, r, r.num_computed, 0);  // nothing to compute: token 0 is sampled now
    // Our rule: sampling token 0 takes one slot of the token budget, like any decode request
    // (budget > 0 here), so a pass never samples more requests than its budget.
    --pass.budget;
  }
}

std::uint32_t VllmScheduler::draftKv(const Req& r) const {
  if (config_.spec_num_draft_tokens.value_or(0) == 0) return 0;  // no drafts: no room for them
  const std::uint32_t remaining = limit_.remaining(r);
  return remaining == 0 ? 0 : specWorstCaseBurst(config_, remaining) - 1;
}

void VllmScheduler::acceptDrafts(Pass& pass, Req& r) {
  // The accepted drafts' KV was computed by this pass; only the last token dangles. Blocks
  // reserved for drafts that were not accepted go back to the pool.
  r.num_computed = r.len() - 1;
  finalizeBlocks(r, pass.out.kv_events);
  const std::uint32_t keep = blocksFor(r.num_computed);
  while (r.blocks.size() > keep) {
    pool_.release(r.blocks.back());
    r.blocks.pop_back();
  }
}

LoadMetrics VllmScheduler::loadMetrics() const {
  LoadMetrics m = detail::makeLoadMetrics({.dp_rank = dp_rank_,
                                           .active_blocks = pool_.numActive(),
                                           .total_blocks = pool_.numBlocks(),
                                           .running = running_.size(),
                                           .waiting = num_waiting_,
                                           .preemptions = preemptions_total_,
                                           .prefix = prefix_counters_});
  book_.fillLoadMetrics(m);
  if (tiers_) m.tiers = tiers_->metrics();
  m.onboarding_requests = num_onboarding_;
  return m;
}

}  // namespace mocker::engine
