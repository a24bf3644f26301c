// vLLM v1-style scheduling of one DP rank (../shared/spec/engine.md §5, TRT-LLM variant §6).
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
// Blocks become cache-visible (Stored) as soon as a pass computes their last token; completion,
// preemption and cancellation release blocks in reverse order so eviction is leaf-first.
#include "engine/scheduler.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "base/check.h"
#include "engine/block_hash.h"
#include "engine/detail/pass_common.h"
#include "engine/engine.h"

namespace mocker::engine {
namespace {

constexpr std::uint64_t kUnbounded = std::numeric_limits<std::uint64_t>::max();

double effectiveSpeedup(double ratio) { return ratio > 0.0 ? ratio : 1.0; }

}  // namespace

VllmScheduler::VllmScheduler(const EngineConfig& config, std::uint32_t dp_rank)
    : config_(config),
      dp_rank_(dp_rank),
      block_size_(effectiveBlockSize(config)),
      timing_(config),
      pool_(config.num_gpu_blocks),
      // Our rule: a sequence can never outgrow the pool (vLLM refuses to start when
      // max_model_len does not fit the KV cache), so generation also stops at N·B tokens —
      // otherwise a lone request that needs more than N blocks would preempt itself forever.
      max_len_(static_cast<std::uint32_t>(
          std::min<std::uint64_t>(config.max_model_len.value_or(~std::uint32_t{0}),
                                  std::uint64_t{config.num_gpu_blocks} * block_size_))) {}

void VllmScheduler::submit(detail::AcceptedRequest&& request) {
  Req r;
  r.id = request.id;
  r.prompt_len = static_cast<std::uint32_t>(request.tokens.size());
  r.tokens = std::move(request.tokens);
  r.max_output = request.max_output_tokens;
  // Generated tokens are appended in place; reserve so a long prompt is never copied to grow.
  r.tokens.reserve(std::size_t{r.prompt_len} + r.max_output);
  r.plan = std::move(request.output_token_ids);
  if (isTrtllm()) {
    // §6: clamp the output reservation to what the pool (and max_model_len) can ever hold.
    const std::uint64_t capacity = std::uint64_t{config_.num_gpu_blocks} * block_size_;
    if (r.prompt_len < capacity) {
      r.max_output = static_cast<std::uint32_t>(
          std::min<std::uint64_t>(r.max_output, capacity - r.prompt_len));
    }
    if (config_.max_model_len && r.prompt_len < *config_.max_model_len) {
      r.max_output = std::min(r.max_output, *config_.max_model_len - r.prompt_len);
    }
  }
  const RequestId id = r.id;
  addToWaitingStats(r);
  requests_.emplace(id, std::move(r));
  waiting_.push_back(id);
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
  if (r.state == ReqState::Running) {
    running_.erase(std::find(running_.begin(), running_.end(), &r));
    releaseBlocks(r);
  } else {
    // Stays in waiting_ as a stale id until it reaches the head (O(1) cancel).
    removeFromWaitingStats(r);
    --num_waiting_;
  }
  requests_.erase(it);
  return true;
}

void VllmScheduler::releaseBlocks(Req& r) {
  for (std::size_t i = r.blocks.size(); i-- > 0;) pool_.release(r.blocks[i]);
  r.blocks.clear();
  r.num_finalized = 0;
}

VllmScheduler::PrefixMatch VllmScheduler::lookupPrefix(Req& r) {
  PrefixMatch m;
  if (!config_.enable_prefix_caching) return m;
  extendSequenceHashes(r.tokens, block_size_, HashSeeds{config_.hash_seed, config_.chain_seed},
                       r.hashes);
  std::uint32_t hits = pool_.countPrefixHits(r.hashes);
  // §4.3: a request with tokens left to generate recomputes at least its last token, and
  // allocation is whole-block, so at most floor((len − 1)/B) blocks may come from the cache.
  if (!isTrtllm() && r.generated() < r.max_output) {
    hits = std::min(hits, (r.len() - 1) / block_size_);
  }
  m.hit_blocks = hits;
  for (std::uint32_t i = 0; i < hits; ++i) {
    if (pool_.hasActiveCopy(r.hashes[i])) ++m.active_blocks;
  }
  return m;
}

bool VllmScheduler::acquire(Req& r, std::uint32_t target_tokens, std::uint32_t hit_blocks,
                            std::vector<KvEvent>& events) {
  const std::uint32_t needed = blocksFor(target_tokens);
  const auto held = static_cast<std::uint32_t>(r.blocks.size());
  if (needed <= held + hit_blocks) {
    MOCKER_DCHECK(hit_blocks == 0 || held == 0);
  }
  const std::uint32_t new_blocks = needed > held + hit_blocks ? needed - held - hit_blocks : 0;
  // Atomicity (§4.4): inactive hits are pinned by the claim, so they cannot also be evicted.
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
  const std::uint32_t full = r.num_computed / block_size_;
  if (full <= r.num_finalized) return;
  extendSequenceHashes(std::span(r.tokens).first(std::size_t{full} * block_size_), block_size_,
                       HashSeeds{config_.hash_seed, config_.chain_seed}, r.hashes);
  // Newly visible blocks form maximal runs of consecutive indices; one Stored per run.
  std::uint32_t run_start = 0;
  bool in_run = false;
  const auto flush = [&](std::uint32_t end) {
    if (!in_run) return;
    in_run = false;
    BlockStored stored;
    stored.block_hashes.assign(r.hashes.begin() + run_start, r.hashes.begin() + end);
    if (run_start > 0) stored.parent_block_hash = r.hashes[run_start - 1];
    stored.token_ids.assign(r.tokens.begin() + std::ptrdiff_t{run_start} * block_size_,
                            r.tokens.begin() + std::ptrdiff_t{end} * block_size_);
    stored.block_size = block_size_;
    events.emplace_back(std::move(stored));
  };
  for (std::uint32_t i = r.num_finalized; i < full; ++i) {
    const bool newly_visible =
        pool_.isPrivate(r.blocks[i]) && pool_.finalize(r.blocks[i], r.hashes[i]);
    if (newly_visible && !in_run) {
      in_run = true;
      run_start = i;
    } else if (!newly_visible) {
      flush(i);
    }
  }
  flush(full);
  r.num_finalized = full;
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

std::optional<Terminal> VllmScheduler::rejectionReason(
    Req& r, std::optional<std::uint32_t> cached_tokens) const {
  if (r.admitted_before) return std::nullopt;  // only fresh requests are rejected (§5.5)
  if (config_.max_model_len && r.prompt_len >= *config_.max_model_len) return Terminal::Rejected;
  const std::uint64_t need_tokens =
      isTrtllm() ? std::uint64_t{r.prompt_len} + r.max_output : std::uint64_t{r.len()};
  if (isTrtllm() &&
      std::uint64_t{r.prompt_len} >= std::uint64_t{config_.num_gpu_blocks} * block_size_) {
    return Terminal::Rejected;
  }
  if (blocksFor(need_tokens) > config_.num_gpu_blocks) return Terminal::Rejected;
  if (!cached_tokens) return std::nullopt;  // the chunk check needs the prefix lookup
  if (!config_.enable_chunked_prefill && config_.max_num_batched_tokens &&
      r.prompt_len - std::min(*cached_tokens, r.prompt_len) > *config_.max_num_batched_tokens) {
    return Terminal::Rejected;
  }
  return std::nullopt;
}

std::uint32_t VllmScheduler::nextToken(const Req& r) const {
  const std::uint32_t k = r.generated();
  if (r.plan) return (*r.plan)[k];
  return syntheticToken(config_.token_seed, r.id, k);
}

bool VllmScheduler::reachedEnd(const Req& r) const {
  return r.generated() >= r.max_output || r.len() >= max_len_;
}

void VllmScheduler::finish(RequestId id) {
  const auto it = requests_.find(id);
  releaseBlocks(it->second);
  requests_.erase(it);
}

PassResult VllmScheduler::step(double now_ms) {
  PassResult out;
  out.dp_rank = dp_rank_;
  out.start_ms = now_ms;
  scheduled_.clear();
  std::vector<KvEvent>& events = out.kv_events;
  std::uint64_t budget =
      config_.max_num_batched_tokens ? *config_.max_num_batched_tokens : kUnbounded;
  const std::uint64_t max_seqs = config_.max_num_seqs ? *config_.max_num_seqs : kUnbounded;
  bool preempted = false;

  // 1. Running requests spend the budget first.
  for (std::size_t i = 0; i < running_.size() && budget > 0;) {
    Req& r = *running_[i];
    const std::uint32_t remaining = r.len() - r.num_computed;
    if (remaining == 0) {
      ++i;
      continue;
    }
    if (!config_.enable_chunked_prefill && r.num_computed < r.prompt_len &&
        r.prompt_len - r.num_computed > budget) {
      break;
    }
    const auto n = static_cast<std::uint32_t>(std::min<std::uint64_t>(remaining, budget));
    bool scheduled = false;
    bool self_preempted = false;
    while (true) {
      if (acquire(r, r.num_computed + n, 0, events)) {
        scheduled = true;
        break;
      }
      if (isTrtllm()) {
        // Guaranteed-no-evict admission makes this unreachable; no progress this pass.
        MOCKER_DCHECK(false);
        break;
      }
      const std::size_t victim =
          config_.preemption_mode == PreemptionMode::Lifo ? running_.size() - 1 : 0;
      const RequestId victim_id = running_[victim]->id;
      // A victim already scheduled in this pass gives its tokens back (§5.4).
      const auto sched_it = std::find_if(scheduled_.begin(), scheduled_.end(),
                                         [&](const Scheduled& s) { return s.id == victim_id; });
      if (sched_it != scheduled_.end()) {
        budget += sched_it->num_tokens;
        scheduled_.erase(sched_it);
      }
      preempt(victim);
      preempted = true;
      if (victim_id == r.id) {
        self_preempted = true;
        break;
      }
      if (victim < i) --i;
    }
    if (self_preempted) continue;  // running_[i] is now the next request
    if (scheduled) {
      scheduled_.push_back({r.id, n, r.num_computed, r.len(), r.prompt_len});
      r.num_computed += n;
      finalizeBlocks(r, events);
      budget -= n;
    }
    ++i;
  }

  // 2. Waiting admission, strict head-of-line; none in a pass that preempted.
  std::vector<RequestId> rejected;
  if (!preempted) {
    std::uint64_t reserved_blocks = 0;  // TRT-LLM: blocks running requests may still need
    if (isTrtllm()) {
      for (const Req* qp : running_) {
        const Req& q = *qp;
        const std::uint32_t total = blocksFor(std::uint64_t{q.prompt_len} + q.max_output);
        if (total > q.blocks.size()) reserved_blocks += total - q.blocks.size();
      }
    }
    while (running_.size() < max_seqs && budget > 0 && !waiting_.empty()) {
      const auto it = requests_.find(waiting_.front());
      if (it == requests_.end()) {  // cancelled while waiting
        waiting_.pop_front();
        continue;
      }
      Req& r = it->second;
      const auto reject_head = [&] {
        removeFromWaitingStats(r);
        --num_waiting_;
        waiting_.pop_front();
        rejected.push_back(r.id);
        requests_.erase(it);
      };
      if (!r.head_checked && rejectionReason(r, std::nullopt)) {
        reject_head();
        continue;
      }
      const PrefixMatch match = lookupPrefix(r);
      const std::uint32_t cached = match.hit_blocks * block_size_;
      if (!r.head_checked && rejectionReason(r, cached)) {
        reject_head();
        continue;
      }
      r.head_checked = true;
      const std::uint64_t available = pool_.numBlocks() - pool_.numActive();
      std::uint64_t needed = 0;
      if (isTrtllm()) {
        needed = blocksFor(std::uint64_t{r.prompt_len} + r.max_output) - match.active_blocks;
        if (needed + reserved_blocks > available) break;
      } else {
        needed = blocksFor(r.len()) - match.active_blocks;
        if (needed > available) break;
      }
      const std::uint32_t uncached = r.len() - cached;
      if (!config_.enable_chunked_prefill && r.prompt_len > cached &&
          r.prompt_len - cached > budget) {
        break;
      }
      const auto n = static_cast<std::uint32_t>(std::min<std::uint64_t>(uncached, budget));
      if (r.blocks.capacity() == 0) {
        r.blocks.reserve(blocksFor(std::uint64_t{r.prompt_len} + r.max_output));
      }
      if (!acquire(r, cached + n, match.hit_blocks, events)) {
        MOCKER_DCHECK(false);  // the capacity check above guarantees the allocation
        break;
      }
      if (isTrtllm()) {
        const std::uint32_t total = blocksFor(std::uint64_t{r.prompt_len} + r.max_output);
        if (total > r.blocks.size()) reserved_blocks += total - r.blocks.size();
      }
      removeFromWaitingStats(r);
      --num_waiting_;
      waiting_.pop_front();
      out.admissions.push_back({r.id, cached, r.admitted_before});
      if (!r.admitted_before) r.first_cached_tokens = cached;
      r.admitted_before = true;
      r.state = ReqState::Running;
      running_.push_back(&r);
      prefix_queries_tokens_ += r.len();
      prefix_hits_tokens_ += cached;
      scheduled_.push_back({r.id, n, cached, r.len(), r.prompt_len});
      r.num_computed = cached + n;
      finalizeBlocks(r, events);
      budget -= n;
    }
  }

  // 3. Prefill time over requests that computed prompt tokens (positions capped at the prompt).
  const double speedup = effectiveSpeedup(config_.speedup_ratio);
  std::uint64_t batch = 0, isl = 0, prefix = 0;
  detail::Welford prefill_len;
  ForwardPassMetrics& fpm = out.fpm;
  fpm.dp_rank = dp_rank_;
  for (const Scheduled& s : scheduled_) {
    if (s.computed_before >= s.prompt_len) continue;
    ++batch;
    isl += std::min(s.computed_before + s.num_tokens, s.prompt_len);
    prefix += s.computed_before;
    fpm.scheduled.sum_prefill_tokens += s.num_tokens;
    fpm.scheduled.sum_prefill_kv_tokens += s.computed_before;
    prefill_len.add(s.prompt_len);
  }
  fpm.scheduled.num_prefill_requests = batch;
  fpm.scheduled.var_prefill_length = prefill_len.variance();
  const double prefill_raw =
      batch == 0 ? 0.0 : timing_.prefillMs(batch, isl / batch, prefix / batch);
  out.prefill_ms = prefill_raw / speedup;

  // 4. Token emission. Signals: terminal-without-token, then tokens, then rejections (§5.6).
  //    running_ holds the requests' map nodes, so the per-request work needs no map lookup.
  std::vector<Req*> ready;
  ready.reserve(running_.size());
  out.outputs.reserve(running_.size() + rejected.size());
  std::vector<RequestId> ended_without_token;  // rare: erased before the FPM loop below
  std::uint64_t ready_len_sum = 0;
  detail::Welford decode_len;
  const bool failed = !std::isfinite(out.prefill_ms);
  for (std::size_t i = 0; i < running_.size();) {
    Req& r = *running_[i];
    if (r.num_computed >= r.len() && reachedEnd(r)) {  // e.g. max_output 0: nothing to sample
      // A request that ends without any token carries its prefix hits on this only signal.
      out.outputs.push_back(
          {r.id, std::nullopt, r.generated(), 0.0, Terminal::Completed,
           r.generated() == 0 ? std::optional(r.first_cached_tokens) : std::nullopt});
      const RequestId id = r.id;
      ended_without_token.push_back(id);
      running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(i));
      finish(id);
      continue;
    }
    if (r.num_computed >= r.len()) {
      ready.push_back(&r);
      ready_len_sum += r.len();
    }
    ++i;
  }
  for (const Scheduled& s : scheduled_) {
    if (s.computed_before < s.prompt_len) continue;
    if (!ended_without_token.empty() &&
        std::find(ended_without_token.begin(), ended_without_token.end(), s.id) !=
            ended_without_token.end()) {
      continue;  // terminal right after scheduling: not decode work (§9.1)
    }
    ++fpm.scheduled.num_decode_requests;
    fpm.scheduled.sum_decode_kv_tokens += s.len_at_schedule;
    decode_len.add(s.len_at_schedule);
  }
  fpm.scheduled.var_decode_kv_tokens = decode_len.variance();
  if (!ready.empty()) {
    const double decode_raw = timing_.decodeMs(
        ready.size(), std::uint64_t{pool_.numActive()} * block_size_, ready_len_sum / ready.size(),
        std::uint64_t{pool_.numBlocks()} * block_size_);
    out.decode_ms = decode_raw / (speedup * config_.decode_speedup_ratio);
  }
  const bool decode_failed = failed || !std::isfinite(out.decode_ms);
  // Completed requests release their blocks at once (release order shapes the LRU), are marked
  // Finished, and leave running_ and requests_ after the loop (ready holds their nodes).
  std::vector<RequestId> completed;
  const auto complete = [&](Req& r) {
    releaseBlocks(r);
    r.state = ReqState::Finished;
    completed.push_back(r.id);
  };
  for (Req* rp : ready) {
    Req& r = *rp;
    const RequestId id = r.id;
    if (decode_failed) {
      out.outputs.push_back({id, std::nullopt, r.generated(), 0.0, Terminal::Failed, {}});
      complete(r);
      continue;
    }
    const std::uint32_t k = r.generated();
    OutputSignal sig{id, nextToken(r), k, 0.0, Terminal::None, {}};
    if (k == 0) sig.cached_tokens = r.first_cached_tokens;
    r.tokens.push_back(*sig.token);
    if (reachedEnd(r)) {
      sig.terminal = Terminal::Completed;
      complete(r);
    }
    out.outputs.push_back(sig);
  }
  if (!completed.empty()) {
    std::erase_if(running_, [](const Req* r) { return r->state == ReqState::Finished; });
    for (RequestId id : completed) requests_.erase(id);
  }
  for (RequestId id : rejected) {
    out.outputs.push_back({id, std::nullopt, 0, 0.0, Terminal::Rejected, {}});
  }
  if (decode_failed) {
    out.prefill_ms = std::isfinite(out.prefill_ms) ? out.prefill_ms : 0.0;
    out.decode_ms = 0.0;
  }

  detail::stampPassEnd(out, now_ms);
  out.did_work = !scheduled_.empty() || !out.outputs.empty();
  detail::fillQueued(fpm.queued, queued_prefill_, queued_decode_);
  out.load = loadMetrics();
  return out;
}

LoadMetrics VllmScheduler::loadMetrics() const {
  return detail::makeLoadMetrics({.dp_rank = dp_rank_,
                                  .active_blocks = pool_.numActive(),
                                  .total_blocks = pool_.numBlocks(),
                                  .running = running_.size(),
                                  .waiting = num_waiting_,
                                  .preemptions = preemptions_total_,
                                  .prefix_queries_tokens = prefix_queries_tokens_,
                                  .prefix_hits_tokens = prefix_hits_tokens_});
}

Status VllmScheduler::checkInvariants() const {
  MOCKER_TRY_VOID(pool_.checkInvariants());
  const auto fail = [](const std::string& what) {
    return Error{ErrorCode::Internal, "scheduler invariant: " + what};
  };
  if (config_.max_num_seqs && running_.size() > *config_.max_num_seqs) {
    return fail("running > max_num_seqs");
  }
  std::uint64_t live_waiting = 0;
  std::unordered_map<RequestId, int> seen;
  for (RequestId id : waiting_) {
    const auto it = requests_.find(id);
    if (it == requests_.end()) continue;
    if (it->second.state == ReqState::Running) return fail("running request in waiting");
    if (++seen[id] > 1) return fail("request twice in waiting");
    if (!it->second.blocks.empty()) return fail("waiting request holds blocks");
    ++live_waiting;
  }
  if (live_waiting != num_waiting_) return fail("waiting count mismatch");
  std::uint64_t held = 0;
  for (const Req* rp : running_) {
    if (++seen[rp->id] > 1) return fail("request in two queues");
    const Req& r = *rp;
    if (requests_.find(r.id) == requests_.end() || &requests_.at(r.id) != rp) {
      return fail("running entry is not the request's node");
    }
    if (r.state != ReqState::Running) return fail("non-running request in running");
    if (r.num_computed > r.len()) return fail("num_computed > len");
    if (r.blocks.size() < blocksFor(r.num_computed)) return fail("fewer blocks than computed");
    held += r.blocks.size();
  }
  if (seen.size() != requests_.size()) return fail("request in no queue");
  if (held < pool_.numActive()) return fail("active blocks not held by any request");
  if (!config_.enable_prefix_caching && held != pool_.numActive()) {
    return fail("blocks shared although prefix caching is off");
  }
  return {};
}

}  // namespace mocker::engine
