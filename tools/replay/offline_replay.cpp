#include "tools/replay/offline_replay.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <queue>
#include <span>
#include <string>
#include <utility>
#include <variant>

#include "base/check.h"
#include "engine/block_hash.h"
#include "engine/engine.h"
#include "engine/lora.h"
#include "tools/index/kv_index.h"
#include "tools/replay/detail/offline_loop.h"
#include "tools/replay/detail/offline_state.h"
#include "tools/replay/kv_router.h"
#include "tools/replay/offline_workers.h"
#include "tools/replay/random.h"
#include "tools/replay/turn_schedule.h"

namespace mocker::replay {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr std::uint64_t kProgressEveryPasses = 4096;

/// Each worker's dp_size.
std::vector<std::uint32_t> ranksPerWorker(const std::vector<engine::Engine>& workers) {
  std::vector<std::uint32_t> out;
  for (const engine::Engine& w : workers) out.push_back(w.dpSize());
  return out;
}

/// The id a request is submitted with: the live replay's ("r<dispatch index>"), so the faults'
/// rate draws and `match` patterns hit the same requests offline and live.
std::string requestId(RequestHandle handle) {
  std::string id(1, 'r');  // appended: GCC 12 reports a false -Wrestrict on "r" + to_string
  id.append(std::to_string(handle));
  return id;
}

/// The (worker, rank) slots of `workers`: the kv router's candidates.
std::size_t totalRanks(const std::vector<engine::Engine>& workers) {
  std::size_t n = 0;
  for (const engine::Engine& w : workers) n += w.dpSize();
  return n;
}

}  // namespace
}  // namespace mocker::replay

namespace mocker::replay::detail {

OfflineReplay::OfflineReplay(const Workload& workload, const OfflineReplayOptions& options,
                             ReplayCollector& collector, std::vector<engine::Engine> workers,
                             std::uint32_t num_prefill)
    : workload_(workload),
      options_(options),
      collector_(collector),
      workers_(std::move(workers)),
      synth_(workload.trace_block_size),
      rng_(options.router_seed),
      block_size_(workers_.front().blockSize()),
      seeds_{workers_.front().config().hash_seed, workers_.front().config().chain_seed},
      kv_visibility_(workers_.front().config().kv_event_visibility),
      num_prefill_(num_prefill),
      tracked_(workers_.size()),
      next_rank_(workers_.size(), 0),
      first_slot_(workers_.size(), 0),
      schedule_(workload, options.concurrency.has_value()),
      cost_router_(totalRanks(workers_), block_size_, options.kv_router, options.router_seed),
      faults_(options.faults, ranksPerWorker(workers_)) {
  // Only the KV-aware routers read the engines' KV events: without one they are not built
  // (Engine::setKvEvents; nothing else changes — a third of an SGLang page-1 replay).
  const bool kv_events =
      options_.router == RouterKind::Kv || options_.router == RouterKind::KvPrefix;
  // Unless a turn's prompt includes its session's history (mooncake-delta), the engine
  // synthesizes it when it needs it. The KV-aware routers hash it at dispatch from a scratch
  // copy (the same tokens: the synthesis is a pure function of the turn).
  defer_prompts_ = !workload.cumulative_prompts;
  route_reads_prompt_ = kv_events;
  for (std::uint32_t w = 0; w < workers_.size(); ++w) {
    workers_[w].setKvEvents(kv_events);
    workers_[w].setKvEventTokens(false);  // the KV index reads only the Stored hashes
    first_slot_[w] = static_cast<std::uint32_t>(slots_.size());
    for (std::uint32_t r = 0; r < workers_[w].dpSize(); ++r) {
      Slot& s = slots_.emplace_back();
      s.worker = w;
      s.rank = r;
      index_.registerSource({w, r});
    }
  }
  if (num_prefill_ > 0) {
    stats_.handoff.emplace();
    stats_.handoff->per_prefill_worker.assign(num_prefill_, 0);
    stats_.handoff->per_decode_worker.assign(workers_.size() - num_prefill_, 0);
  }
  next_pass_ms_.assign(slots_.size(), kInf);
  stats_.per_worker.assign(workers_.size(), 0);
  total_turns_ = workload.numTurns();
  if (options.concurrency) {
    for (std::uint32_t i = 0; i < *options.concurrency; ++i) free_slots_.push(0.0);
  }
}

OfflineReplayStats OfflineReplay::run() {
  while (true) {
    const double dispatch_at = nextDispatchTime();
    const double handoff_at = handoffs_.empty() ? kInf : handoffs_.top().time_ms;
    const std::optional<std::uint32_t> busy = earliestBusySlot();
    const double pass_at = busy ? next_pass_ms_[*busy] : kInf;
    if (dispatch_at == kInf && handoff_at == kInf && pass_at == kInf) break;
    // At equal times: dispatches, then handoff deliveries, then passes.
    if (dispatch_at <= pass_at && dispatch_at <= handoff_at) {
      dispatch(dispatch_at);
    } else if (handoff_at <= pass_at) {
      deliverHandoff();
    } else {
      step(*busy, pass_at);
    }
  }
  flushEvents(kInf);
  stats_.kv_index_blocks = index_.numBlocksIndexed();
  stats_.tiers = tierReport();
  stats_.warnings = synth_.warnings();
  if (!faults_.empty()) stats_.faults = std::move(faults_.stats());
  reportProgress();
  return std::move(stats_);
}

double OfflineReplay::nextDispatchTime() const {
  if (schedule_.empty()) return kInf;
  const double t = schedule_.top().time_ms;
  if (!options_.concurrency) return t;
  if (free_slots_.empty()) return kInf;  // every slot in flight: wait for a terminal
  return std::max(t, free_slots_.top());
}

std::optional<std::uint32_t> OfflineReplay::earliestBusySlot() const {
  std::optional<std::uint32_t> best;
  double best_clock = kInf;
  for (std::uint32_t g = 0; g < next_pass_ms_.size(); ++g) {
    if (next_pass_ms_[g] >= best_clock) continue;  // ties: the lowest g
    best = g;
    best_clock = next_pass_ms_[g];
  }
  return best;
}

void OfflineReplay::refreshNextPass(std::uint32_t g) {
  const Slot& s = slots_[g];
  if (s.down) {
    next_pass_ms_[g] = kInf;
    return;
  }
  const engine::Engine& e = workers_[s.worker];
  double next = !s.blocked && e.hasWork(s.rank) ? s.clock_ms : kInf;
  if (const std::optional<double> timer = e.nextTimerMs(s.rank)) {
    next = std::min(next, std::max(s.clock_ms, *timer));
  }
  next_pass_ms_[g] = next;
}

std::optional<TierReport> OfflineReplay::tierReport() const {
  std::optional<TierReport> out;
  for (const Slot& s : slots_) {
    const engine::Engine& e = workers_[s.worker];
    if (e.config().num_g2_blocks == 0) continue;
    if (!out) out.emplace();
    const engine::LoadMetrics m = e.loadMetrics(s.rank);
    const engine::TierMetrics& t = m.tiers;
    const std::uint64_t block = engine::effectiveBlockSize(e.config());
    const std::uint64_t onboarded = (t.g2_hit_blocks + t.g3_hit_blocks) * block;
    out->query_tokens += m.prefix_cache_queries_tokens;
    out->gpu_hit_tokens +=
        m.prefix_cache_hits_tokens - std::min(onboarded, m.prefix_cache_hits_tokens);
    out->g2_hit_tokens += t.g2_hit_blocks * block;
    out->g3_hit_tokens += t.g3_hit_blocks * block;
    out->offloaded_blocks += t.offloaded_blocks;
    out->bytes_gpu_to_host += t.bytes_gpu_to_host;
    out->bytes_host_to_gpu += t.bytes_host_to_gpu;
    out->bytes_host_to_disk += t.bytes_host_to_disk;
    out->bytes_disk_to_host += t.bytes_disk_to_host;
    out->onboardings += t.onboardings;
    out->onboard_ms_total += t.onboard_ms_total;
    out->onboard_ms_max = std::max(out->onboard_ms_max, t.onboard_ms_max);
  }
  return out;
}

void OfflineReplay::flushEvents(double now) {
  while (!pending_events_.empty() && pending_events_.top().visible_ms <= now) {
    const PendingEvents& p = pending_events_.top();
    const Slot& s = slots_[p.slot];
    const std::vector<engine::KvEvent>& events = p.events;
    for (std::size_t i = 0; i < events.size(); ++i) {
      // Eviction is one event per hash (SGLang page size 1: tens of millions, each a cache
      // miss in the index): start loading the slot of one a few events ahead.
      if (i + index::KvIndex::kPrefetchAhead < events.size()) {
        const engine::KvEvent& ahead = events[i + index::KvIndex::kPrefetchAhead];
        if (const auto* r = std::get_if<engine::BlockRemoved>(&ahead)) {
          index_.prefetch(r->block_hash);
        }
      }
      // The router scores GPU prefixes; offload-tier events (medium CPU / DISK) are not its.
      const engine::KvEvent& e = events[i];
      if (engine::eventMedium(e) == engine::Medium::Gpu) index_.apply(e, {s.worker, s.rank});
    }
    pending_events_.pop();
  }
}

void OfflineReplay::flushLoad(double now) {
  while (!load_changes_.empty() && load_changes_.top().time_ms <= now) {
    const LoadChange& c = load_changes_.top();
    if (c.ended) {
      cost_router_.load().remove(c.handle);
    } else {
      cost_router_.load().prefillDone(c.handle);
    }
    load_changes_.pop();
  }
}

void OfflineReplay::settleTerminals(double now) {
  for (Slot& s : slots_) {
    while (!s.pending_terminals.empty() && s.pending_terminals.top() <= now) {
      s.pending_terminals.pop();
      --s.in_flight;
    }
  }
}

std::optional<std::uint32_t> OfflineReplay::route(double now,
                                                  const std::vector<std::uint32_t>& tokens,
                                                  const std::optional<std::string>& lora,
                                                  RouterKind kind, std::uint32_t first,
                                                  std::uint32_t last, std::uint64_t turn,
                                                  bool overlap_credit) {
  const std::uint32_t lo = first_slot_[first];
  const std::uint32_t hi =
      last < workers_.size() ? first_slot_[last] : static_cast<std::uint32_t>(slots_.size());
  // A crashed or hung slot is down (a fault): never chosen; none up in range = no route.
  if (num_down_ > 0 &&
      std::all_of(slots_.begin() + lo, slots_.begin() + hi, [](const Slot& s) { return s.down; })) {
    return std::nullopt;
  }
  switch (kind) {
    case RouterKind::RoundRobin:
    case RouterKind::Random: {
      // Over the workers with a rank up, as the live router goes over the servers up.
      std::uint32_t up = last - first;
      if (num_down_ > 0) {
        up = 0;
        for (std::uint32_t w = first; w < last; ++w) up += workerUp(w);
      }
      std::uint64_t k = kind == RouterKind::RoundRobin ? turn % up : rng_.uniformIndex(up);
      std::uint32_t w = first + static_cast<std::uint32_t>(k);
      if (num_down_ > 0) {  // the k-th worker up
        for (w = first;; ++w) {
          if (workerUp(w) && k-- == 0) break;
        }
      }
      const std::uint32_t dp = workers_[w].dpSize();
      std::uint32_t r = next_rank_[w];
      while (slots_[first_slot_[w] + r].down) r = (r + 1) % dp;
      next_rank_[w] = (r + 1) % dp;
      return first_slot_[w] + r;
    }
    case RouterKind::Kv:
    case RouterKind::KvPrefix:
      break;
  }
  settleTerminals(now);
  std::uint32_t best = lo;
  while (slots_[best].down) ++best;
  if (!overlap_credit) {
    for (std::uint32_t g = best + 1; g < hi; ++g) {
      if (!slots_[g].down && slots_[g].in_flight < slots_[best].in_flight) best = g;
    }
    return best;
  }
  flushEvents(now);
  hashes_.clear();  // reuses the scratch vector's capacity
  engine::extendSequenceHashes(tokens, block_size_, engine::adapterSeeds(seeds_, lora), hashes_);
  index_.overlapBlocks(hashes_, overlap_);
  if (kind == RouterKind::Kv) {
    flushLoad(now);
    tree_sizes_.resize(slots_.size());
    for (std::uint32_t g = lo; g < hi; ++g) {
      tree_sizes_[g] = index_.numBlocks({slots_[g].worker, slots_[g].rank});
    }
    best = cost_router_.select(hashes_, static_cast<std::uint32_t>(tokens.size()), overlap_,
                               tree_sizes_, lo, hi);  // the slots down are excluded
    if (overlap_[best] > 0) ++stats_.kv_routed_hits;
    return best;
  }
  for (std::uint32_t g = best + 1; g < hi; ++g) {
    if (slots_[g].down) continue;
    if (overlap_[g] > overlap_[best] ||
        (overlap_[g] == overlap_[best] && slots_[g].in_flight < slots_[best].in_flight)) {
      best = g;
    }
  }
  if (overlap_[best] > 0) ++stats_.kv_routed_hits;
  return best;
}

bool OfflineReplay::workerUp(std::uint32_t worker) const {
  for (std::uint32_t r = 0; r < workers_[worker].dpSize(); ++r) {
    if (!slots_[first_slot_[worker] + r].down) return true;
  }
  return false;
}

void OfflineReplay::dispatch(double now) {
  const EligibleTurn next = schedule_.pop();
  if (options_.concurrency) free_slots_.pop();
  const Session& session = workload_.sessions[next.session];
  const Turn& turn = session.turns[next.turn];

  engine::Request request;
  if (defer_prompts_) {
    // The engine synthesizes the prompt when it first considers the request for admission: an
    // overloaded worker's queue holds thousands of requests, which then cost no prompt memory.
    request.deferred_prompt = synth_.defer(turn);
  } else {
    // mooncake-delta: the earlier prompt and its emitted tokens, then this turn's delta.
    request.tokens = schedule_.prompt(next, synth_.synthesize(turn));
  }
  heap_pages_.follow();
  request.max_output_tokens = turn.output_length;
  request.arrival_ms = now;
  request.lora = turn.lora;
  const auto input_tokens = static_cast<std::uint32_t>(
      defer_prompts_ ? request.deferred_prompt->size() : request.tokens.size());
  const RequestHandle handle = collector_.onArrival({.session_id = session.session_id,
                                                     .turn_index = next.turn,
                                                     .request_id = turn.request_id,
                                                     .input_length = input_tokens,
                                                     .requested_output_length = turn.output_length,
                                                     .lora = turn.lora},
                                                    now);

  const std::uint32_t first_hop_end =
      num_prefill_ > 0 ? num_prefill_ : static_cast<std::uint32_t>(workers_.size());
  // A deferred prompt the router hashes is synthesized into a scratch vector: the request then
  // holds no tokens while it waits in a rank's queue.
  const std::vector<std::uint32_t>* routed_tokens = &request.tokens;
  if (defer_prompts_ && route_reads_prompt_) {
    prompt_scratch_.clear();
    request.deferred_prompt->appendTo(prompt_scratch_);
    routed_tokens = &prompt_scratch_;
  }
  const std::optional<std::uint32_t> routed = route(
      now, *routed_tokens, request.lora, options_.router, 0, first_hop_end, dispatches_, true);
  ++dispatches_;
  if (!routed) {  // every worker crashed or hung: failed at once, as the live replay does
    ++faults_.stats().no_worker;
    end(handle, next.session, next.turn, now, TerminalStatus::Failed);
    return;
  }
  const std::uint32_t g = *routed;
  Slot& slot = slots_[g];
  request.dp_rank = slot.rank;
  // The KV-aware routers hashed the prompt's blocks as the engine does: it need not again.
  if (route_reads_prompt_) request.prompt_hashes = hashes_;
  ++stats_.per_worker[slot.worker];
  if (stats_.handoff) ++stats_.handoff->per_prefill_worker[slot.worker];
  std::uint32_t abort_after = 0;
  if (!faults_.empty()) {
    service::FaultPlan::RequestFaults f =
        faults_.onSubmit(slot.worker, slot.rank, requestId(handle), now);
    if (f.error) {  // answered `error` instead of accepted: failed at its arrival
      end(handle, next.session, next.turn, now, TerminalStatus::Failed);
      return;
    }
    if (f.abort_after_tokens && f.injection) {
      abort_after = *f.abort_after_tokens;
      pending_aborts_.emplace(handle, std::move(*f.injection));
    }
  }
  Result<engine::RequestId> id = workers_[slot.worker].submit(std::move(request));
  if (!id) {
    // Refused at submit (e.g. a prompt beyond the engine's hard limit): rejected on arrival.
    ++stats_.refused_at_submit;
    pending_aborts_.erase(handle);
    end(handle, next.session, next.turn, now, TerminalStatus::Rejected);
    return;
  }
  track(slot.worker, *id,
        {.handle = handle,
         .session = next.session,
         .turn = next.turn,
         .live = true,
         .rank = slot.rank,
         .arrival_ms = now,
         .abort_after = abort_after});
  if (options_.router == RouterKind::Kv) {
    cost_router_.load().add(handle, g, hashes_,
                            newPrefillTokens(input_tokens, overlap_[g], block_size_));
  }
  ++slot.in_flight;
  slot.blocked = false;
  if (slot.clock_ms < now) slot.clock_ms = now;  // an idle rank wakes up at the arrival
  refreshNextPass(g);
}

void OfflineReplay::track(std::uint32_t worker, engine::RequestId id, const Tracked& t) {
  auto& tracked = tracked_[worker];
  const auto index = static_cast<std::size_t>(id.value());
  if (tracked.size() <= index) tracked.resize(std::max(index + 1, tracked.size() * 2));
  tracked[index] = t;
}

void OfflineReplay::end(RequestHandle handle, std::uint32_t session, std::uint32_t turn,
                        double time_ms, TerminalStatus status, StopReason reason) {
  collector_.onTerminal(handle, time_ms, status, reason);
  ++ended_;
  if (options_.concurrency) free_slots_.push(time_ms);
  schedule_.ended(session, turn, time_ms);
}

void OfflineReplay::step(std::uint32_t g, double start_ms) {
  Slot& slot = slots_[g];
  engine::Engine& engine = workers_[slot.worker];
  double slow = 1.0;
  if (!faults_.empty()) {
    const OfflineFaults::PassFaults f = faults_.beforePass(slot.worker, slot.rank, start_ms);
    if (f.crash) {
      crash(slot.worker, start_ms);
      return;
    }
    if (f.hang) {
      for (std::uint32_t r = 0; r < engine.dpSize(); ++r) {
        if (f.hang_all_ranks || r == slot.rank) hang(first_slot_[slot.worker] + r, start_ms);
      }
      return;
    }
    slow = f.slow_factor;
  }
  engine::PassResult pass = engine.step(slot.rank, start_ms);
  heap_pages_.follow();  // admissions synthesize deferred prompts
  if (!pass.did_work) {
    slot.blocked = true;  // cannot progress until something new arrives on this rank
    refreshNextPass(g);
    return;
  }
  if (!faults_.empty()) faults_.afterPass(slot.worker, slot.rank, slow != 1.0);
  if (slow != 1.0) stretch(pass, slow);
  ++stats_.passes;
  stats_.end_ms = std::max(stats_.end_ms, pass.end_ms);
  slot.clock_ms = pass.end_ms;
  // Offload tiers: a pass a transfer's end woke up did work, so the rank runs on (a request
  // whose prefix was onboarded is admitted now; nothing new will arrive to unblock it).
  if (engine.config().num_g2_blocks > 0) slot.blocked = false;
  refreshNextPass(g);
  auto& tracked = tracked_[slot.worker];
  const bool decode_worker = num_prefill_ > 0 && slot.worker >= num_prefill_;
  // The client's admission is its prefill admission; a decode worker's is internal.
  if (!decode_worker) {
    for (const engine::Admission& a : pass.admissions) {
      collector_.onAdmission(tracked[static_cast<std::size_t>(a.id.value())].handle, pass.start_ms,
                             a.reused_input_tokens, a.is_readmission);
    }
  }
  if (num_prefill_ > 0) handleHandoffs(slot, pass);
  for (const engine::OutputSignal& sig : pass.outputs) {
    Tracked& t = tracked[static_cast<std::size_t>(sig.id.value())];
    if (t.aborted) continue;  // its stream was cut earlier in this pass
    MOCKER_CHECK(t.live);
    if (sig.token) {
      collector_.onToken(t.handle, sig.time_ms);
      schedule_.received(t.session, t.turn, std::span(&*sig.token, 1));
      if (t.abort_after > 0 && ++t.tokens == t.abort_after &&
          sig.terminal == engine::Terminal::None) {
        abortStream(slot, sig.id, t, sig.time_ms);
        continue;
      }
    }
    if (options_.router == RouterKind::Kv && sig.token && !t.first_token) {
      t.first_token = true;
      load_changes_.push({sig.time_ms, next_load_seq_++, t.handle, false});
    }
    if (sig.terminal != engine::Terminal::None) {
      t.live = false;
      if (options_.router == RouterKind::Kv) {
        load_changes_.push({sig.time_ms, next_load_seq_++, t.handle, true});
      }
      slot.pending_terminals.push(sig.time_ms);
      end(t.handle, t.session, t.turn, sig.time_ms, toStatus(sig.terminal), toReason(sig.limit));
    }
  }
  collector_.onEngineSample({.time_ms = pass.end_ms,
                             .dp_rank = g,
                             .kv_usage = pass.load.kv_usage,
                             .num_running = pass.load.running_requests,
                             .num_waiting = pass.load.waiting_requests,
                             .preemptions_total = pass.load.preemptions_total});
  stats_.kv_events += pass.kv_events.size();
  if ((options_.router == RouterKind::Kv || options_.router == RouterKind::KvPrefix) &&
      !pass.kv_events.empty()) {
    const bool at_start = kv_visibility_ == engine::KvEventVisibility::PassStart;
    pending_events_.push(
        {at_start ? pass.start_ms : pass.end_ms, next_event_seq_++, g, std::move(pass.kv_events)});
  }
  if (options_.progress && stats_.passes % kProgressEveryPasses == 0) reportProgress();
}

void OfflineReplay::reportProgress() {
  if (!options_.progress) return;
  options_.progress({.dispatched = dispatches_,
                     .ended = ended_,
                     .total = total_turns_,
                     .sim_time_ms = stats_.end_ms});
}

}  // namespace mocker::replay::detail

namespace mocker::replay {
namespace {
using detail::OfflineReplay;
}  // namespace

HandoffReport summarizeHandoffs(const HandoffStats& stats) {
  return {.handoffs = stats.handoffs,
          .activations = stats.activations,
          .refused = stats.refused,
          .expired_holds = stats.expired_holds,
          .transfer_ms = summarize(stats.transfer_ms),
          .queue_ms = summarize(stats.queue_ms),
          .wait_ms = summarize(stats.wait_ms)};
}

Result<OfflineReplayStats> runOfflineReplay(const Workload& workload,
                                            const OfflineReplayOptions& options,
                                            ReplayCollector& collector) {
  if (options.num_workers == 0) return invalidArgument("num_workers must be >= 1 (got 0)");
  MOCKER_TRY_VOID(validateKvRouterConfig(options.kv_router));
  if (options.concurrency && *options.concurrency == 0) {
    return invalidArgument("concurrency must be >= 1 (got 0)");
  }
  MOCKER_TRY_VOID(TurnSchedule::checkArrivals(workload, options.concurrency.has_value()));
  MOCKER_TRY(OfflineWorkers workers, makeOfflineWorkers(options));
  MOCKER_TRY_VOID(checkOfflineFaults(options.faults.specs, ranksPerWorker(workers.engines),
                                     options.disagg.has_value()));
  if (workload.sessions.empty()) return OfflineReplayStats{};
  OfflineReplay replay(workload, options, collector, std::move(workers.engines),
                       workers.num_prefill);
  return replay.run();
}

}  // namespace mocker::replay
