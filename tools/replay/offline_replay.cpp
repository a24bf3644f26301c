#include "tools/replay/offline_replay.h"

#include <algorithm>
#include <functional>
#include <limits>
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
#include "tools/replay/detail/offline_state.h"
#include "tools/replay/kv_router.h"
#include "tools/replay/offline_workers.h"
#include "tools/replay/random.h"
#include "tools/replay/turn_schedule.h"

namespace mocker::replay {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr std::uint64_t kProgressEveryPasses = 4096;

using detail::EligibleTurn;

using detail::LoadChange;
using detail::LoadChangeLater;
using detail::PendingEvents;
using detail::PendingEventsLater;
using detail::PendingHandoff;
using detail::PendingHandoffLater;
using detail::Slot;
using detail::toReason;
using detail::toStatus;
using detail::Tracked;

/// The (worker, rank) slots of `workers`: the kv router's candidates.
std::size_t totalRanks(const std::vector<engine::Engine>& workers) {
  std::size_t n = 0;
  for (const engine::Engine& w : workers) n += w.dpSize();
  return n;
}

class OfflineReplay {
 public:
  /// `num_prefill` > 0: workers [0, num_prefill) are prefill workers, the rest decode workers.
  OfflineReplay(const Workload& workload, const OfflineReplayOptions& options,
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
        cost_router_(totalRanks(workers_), block_size_, options.kv_router, options.router_seed) {
    // Only the KV-aware routers read the engines' KV events: without one they are not built
    // (Engine::setKvEvents; nothing else changes — a third of an SGLang page-1 replay).
    const bool kv_events =
        options_.router == RouterKind::Kv || options_.router == RouterKind::KvPrefix;
    for (std::uint32_t w = 0; w < workers_.size(); ++w) {
      workers_[w].setKvEvents(kv_events);
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

  OfflineReplayStats run() {
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
    reportProgress();
    return std::move(stats_);
  }

 private:
  double nextDispatchTime() const {
    if (schedule_.empty()) return kInf;
    const double t = schedule_.top().time_ms;
    if (!options_.concurrency) return t;
    if (free_slots_.empty()) return kInf;  // every slot in flight: wait for a terminal
    return std::max(t, free_slots_.top());
  }

  std::optional<std::uint32_t> earliestBusySlot() const {
    std::optional<std::uint32_t> best;
    double best_clock = kInf;
    for (std::uint32_t g = 0; g < next_pass_ms_.size(); ++g) {
      if (next_pass_ms_[g] >= best_clock) continue;  // ties: the lowest g
      best = g;
      best_clock = next_pass_ms_[g];
    }
    return best;
  }

  /// Recomputes next_pass_ms_[g] after slot g's clock, blocked flag or engine queue changed
  /// (a dispatch or handoff to it, a pass of it, a release of one of its held requests). A
  /// rank with a timer (handoff activation, hold timeout, offload-tier transfer) wakes up for it
  /// even when idle.
  void refreshNextPass(std::uint32_t g) {
    const Slot& s = slots_[g];
    const engine::Engine& e = workers_[s.worker];
    double next = !s.blocked && e.hasWork(s.rank) ? s.clock_ms : kInf;
    if (const std::optional<double> timer = e.nextTimerMs(s.rank)) {
      next = std::min(next, std::max(s.clock_ms, *timer));
    }
    next_pass_ms_[g] = next;
  }

  /// KV offload tiers: every rank's tier counters summed; nullopt when no worker has tiers.
  std::optional<TierReport> tierReport() const {
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

  /// Applies KV-event batches that are visible at `now` to the router's index.
  void flushEvents(double now) {
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

  /// Applies the kv router's load changes that happened at or before `now`.
  void flushLoad(double now) {
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

  /// Settles terminals that happened at or before `now` into the in-flight counts.
  void settleTerminals(double now) {
    for (Slot& s : slots_) {
      while (!s.pending_terminals.empty() && s.pending_terminals.top() <= now) {
        s.pending_terminals.pop();
        --s.in_flight;
      }
    }
  }

  /// Picks a (worker, rank) slot among workers [first, last): round-robin / random over the
  /// workers (rank round-robin per worker), or kv: the highest overlap of `tokens` (with
  /// `overlap_credit`; none for the decode hop) and then the fewest requests in flight. The
  /// prompt's blocks are hashed under its adapter `lora` as the engine hashes them, so blocks
  /// cached under another adapter (or the base model) are no overlap.
  std::uint32_t route(double now, const std::vector<std::uint32_t>& tokens,
                      const std::optional<std::string>& lora, RouterKind kind, std::uint32_t first,
                      std::uint32_t last, std::uint64_t turn, bool overlap_credit) {
    const std::uint32_t num_workers = last - first;
    switch (kind) {
      case RouterKind::RoundRobin:
      case RouterKind::Random: {
        const std::uint32_t w =
            first + (kind == RouterKind::RoundRobin
                         ? static_cast<std::uint32_t>(turn % num_workers)
                         : static_cast<std::uint32_t>(rng_.uniformIndex(num_workers)));
        const std::uint32_t r = next_rank_[w];
        next_rank_[w] = (r + 1) % workers_[w].dpSize();
        return first_slot_[w] + r;
      }
      case RouterKind::Kv:
      case RouterKind::KvPrefix:
        break;
    }
    settleTerminals(now);
    const std::uint32_t lo = first_slot_[first];
    const std::uint32_t hi =
        last < workers_.size() ? first_slot_[last] : static_cast<std::uint32_t>(slots_.size());
    if (!overlap_credit) {
      std::uint32_t best = lo;
      for (std::uint32_t g = lo + 1; g < hi; ++g) {
        if (slots_[g].in_flight < slots_[best].in_flight) best = g;
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
      const std::uint32_t best = cost_router_.select(
          hashes_, static_cast<std::uint32_t>(tokens.size()), overlap_, tree_sizes_, lo, hi);
      if (overlap_[best] > 0) ++stats_.kv_routed_hits;
      return best;
    }
    std::uint32_t best = lo;
    for (std::uint32_t g = lo + 1; g < hi; ++g) {
      if (overlap_[g] > overlap_[best] ||
          (overlap_[g] == overlap_[best] && slots_[g].in_flight < slots_[best].in_flight)) {
        best = g;
      }
    }
    if (overlap_[best] > 0) ++stats_.kv_routed_hits;
    return best;
  }

  void dispatch(double now) {
    const EligibleTurn next = schedule_.pop();
    if (options_.concurrency) free_slots_.pop();
    const Session& session = workload_.sessions[next.session];
    const Turn& turn = session.turns[next.turn];

    engine::Request request;
    // mooncake-delta: the earlier prompt and its emitted tokens, then this turn's delta.
    request.tokens = schedule_.prompt(next, synth_.synthesize(turn));
    request.max_output_tokens = turn.output_length;
    request.arrival_ms = now;
    request.lora = turn.lora;
    const std::size_t input_tokens = request.tokens.size();
    const RequestHandle handle =
        collector_.onArrival({.session_id = session.session_id,
                              .turn_index = next.turn,
                              .request_id = turn.request_id,
                              .input_length = static_cast<std::uint32_t>(request.tokens.size()),
                              .requested_output_length = turn.output_length,
                              .lora = turn.lora},
                             now);

    const std::uint32_t first_hop_end =
        num_prefill_ > 0 ? num_prefill_ : static_cast<std::uint32_t>(workers_.size());
    const std::uint32_t g = route(now, request.tokens, request.lora, options_.router, 0,
                                  first_hop_end, dispatches_, true);
    ++dispatches_;
    Slot& slot = slots_[g];
    request.dp_rank = slot.rank;
    ++stats_.per_worker[slot.worker];
    if (stats_.handoff) ++stats_.handoff->per_prefill_worker[slot.worker];
    Result<engine::RequestId> id = workers_[slot.worker].submit(std::move(request));
    if (!id) {
      // Refused at submit (e.g. a prompt beyond the engine's hard limit): rejected on arrival.
      ++stats_.refused_at_submit;
      end(handle, next.session, next.turn, now, TerminalStatus::Rejected);
      return;
    }
    track(slot.worker, *id, {handle, next.session, next.turn, true});
    if (options_.router == RouterKind::Kv) {
      cost_router_.load().add(
          handle, g, hashes_,
          newPrefillTokens(static_cast<std::uint32_t>(input_tokens), overlap_[g], block_size_));
    }
    ++slot.in_flight;
    slot.blocked = false;
    if (slot.clock_ms < now) slot.clock_ms = now;  // an idle rank wakes up at the arrival
    refreshNextPass(g);
  }

  void track(std::uint32_t worker, engine::RequestId id, const Tracked& t) {
    auto& tracked = tracked_[worker];
    const auto index = static_cast<std::size_t>(id.value());
    if (tracked.size() <= index) tracked.resize(std::max(index + 1, tracked.size() * 2));
    tracked[index] = t;
  }

  /// The earliest pending handoff reaches its decode worker (at the prefill pass end, or at the
  /// end of that worker's pass in flight).
  void deliverHandoff() {
    PendingHandoff h = handoffs_.top();
    handoffs_.pop();
    HandoffStats& hs = *stats_.handoff;
    const std::uint32_t g =
        route(h.time_ms, h.ticket.tokens, std::nullopt, options_.disagg->decode_router,
              num_prefill_, static_cast<std::uint32_t>(workers_.size()), hs.handoffs, false);
    ++hs.handoffs;
    Slot& slot = slots_[g];
    ++hs.per_decode_worker[slot.worker - num_prefill_];
    const double at = std::max(h.time_ms, slot.clock_ms);
    const engine::RequestId source = h.ticket.source_id;
    Result<engine::RequestId> id =
        workers_[slot.worker].submitHandoff(std::move(h.ticket), slot.rank, at);
    if (!id) {
      // The decode worker cannot take it (its limits are smaller): rejected, source dropped.
      ++hs.refused;
      workers_[h.request.source_worker].cancel(source);
      unblockWorker(h.request.source_worker);
      end(h.request.handle, h.request.session, h.request.turn, h.time_ms, TerminalStatus::Rejected);
      return;
    }
    track(slot.worker, *id, h.request);
    ++slot.in_flight;
    slot.blocked = false;
    if (slot.clock_ms < at) slot.clock_ms = at;
    refreshNextPass(g);
  }

  /// Something freed capacity on `worker` (a released or cancelled hold): its ranks may run.
  void unblockWorker(std::uint32_t worker) {
    for (std::uint32_t r = 0; r < workers_[worker].dpSize(); ++r) {
      const std::uint32_t g = first_slot_[worker] + r;
      slots_[g].blocked = false;
      refreshNextPass(g);
    }
  }

  /// A request reached its terminal at `time_ms`: record it, free its concurrency slot and
  /// make the session's next turn eligible after its delay.
  void end(RequestHandle handle, std::uint32_t session, std::uint32_t turn, double time_ms,
           TerminalStatus status, StopReason reason = StopReason::None) {
    collector_.onTerminal(handle, time_ms, status, reason);
    ++ended_;
    if (options_.concurrency) free_slots_.push(time_ms);
    schedule_.ended(session, turn, time_ms);
  }

  void step(std::uint32_t g, double start_ms) {
    Slot& slot = slots_[g];
    engine::Engine& engine = workers_[slot.worker];
    engine::PassResult pass = engine.step(slot.rank, start_ms);
    if (!pass.did_work) {
      slot.blocked = true;  // cannot progress until something new arrives on this rank
      refreshNextPass(g);
      return;
    }
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
        collector_.onAdmission(tracked[static_cast<std::size_t>(a.id.value())].handle,
                               pass.start_ms, a.reused_input_tokens, a.is_readmission);
      }
    }
    if (num_prefill_ > 0) handleHandoffs(slot, pass);
    for (const engine::OutputSignal& sig : pass.outputs) {
      Tracked& t = tracked[static_cast<std::size_t>(sig.id.value())];
      MOCKER_CHECK(t.live);
      if (sig.token) {
        collector_.onToken(t.handle, sig.time_ms);
        schedule_.received(t.session, t.turn, std::span(&*sig.token, 1));
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
      pending_events_.push({at_start ? pass.start_ms : pass.end_ms, next_event_seq_++, g,
                            std::move(pass.kv_events)});
    }
    if (options_.progress && stats_.passes % kProgressEveryPasses == 0) reportProgress();
  }

  /// Disaggregation: new handoffs leave for the decode side, activated ones release their
  /// sources, expired holds are counted.
  void handleHandoffs(Slot& slot, engine::PassResult& pass) {
    HandoffStats& hs = *stats_.handoff;
    auto& tracked = tracked_[slot.worker];
    for (engine::HandoffTicket& t : pass.handoffs) {
      Tracked& source = tracked[static_cast<std::size_t>(t.source_id.value())];
      source.live = false;
      slot.pending_terminals.push(t.prefill_end_ms);  // leaves the prefill worker's load
      if (options_.router == RouterKind::Kv) {
        load_changes_.push({t.prefill_end_ms, next_load_seq_++, source.handle, true});
      }
      Tracked request = source;
      request.live = true;
      request.source_worker = slot.worker;
      request.prefill_end_ms = t.prefill_end_ms;
      const double at = t.prefill_end_ms;
      handoffs_.push({at, next_handoff_seq_++, std::move(t), request});
    }
    for (const engine::HandoffActivation& a : pass.activations) {
      const Tracked& t = tracked[static_cast<std::size_t>(a.id.value())];
      ++hs.activations;
      hs.transfer_ms.push_back(a.ready_ms - t.prefill_end_ms);
      hs.queue_ms.push_back(a.reserved_ms - a.submitted_ms);
      hs.wait_ms.push_back(a.activated_ms - t.prefill_end_ms);
      // The decode worker has the KV: the source is released (noop if its hold expired).
      workers_[t.source_worker].releaseHandoff(a.source_id);
      unblockWorker(t.source_worker);
    }
    hs.expired_holds += pass.expired_holds.size();
  }

  void reportProgress() {
    if (!options_.progress) return;
    options_.progress({.dispatched = dispatches_,
                       .ended = ended_,
                       .total = total_turns_,
                       .sim_time_ms = stats_.end_ms});
  }

  const Workload& workload_;
  const OfflineReplayOptions& options_;
  ReplayCollector& collector_;
  std::vector<engine::Engine> workers_;
  PromptSynthesizer synth_;
  SplitMix64 rng_;
  std::uint32_t block_size_;
  engine::HashSeeds seeds_;
  engine::KvEventVisibility kv_visibility_;
  std::uint32_t num_prefill_;                  // 0 = aggregated
  std::vector<std::vector<Tracked>> tracked_;  // per worker, by engine request id
  std::vector<std::uint32_t> next_rank_;       // per worker, round-robin rank
  std::vector<std::uint32_t> first_slot_;      // per worker, its rank 0's slot
  std::vector<Slot> slots_;                    // worker-major: g = first_slot_[worker] + rank
  std::priority_queue<PendingHandoff, std::vector<PendingHandoff>, PendingHandoffLater> handoffs_;
  std::uint64_t next_handoff_seq_ = 0;
  // Per slot: its clock when it can run a pass (not blocked, its engine rank has work), else
  // +inf; one compact array for the loop's scan instead of asking every engine each iteration.
  std::vector<double> next_pass_ms_;
  TurnSchedule schedule_;  // eligible turns, dependencies, cumulative prompts
  std::priority_queue<double, std::vector<double>, std::greater<>> free_slots_;  // closed loop
  std::priority_queue<PendingEvents, std::vector<PendingEvents>, PendingEventsLater>
      pending_events_;
  std::uint64_t next_event_seq_ = 0;
  index::KvIndex index_;
  std::vector<std::uint64_t> hashes_;      // scratch
  std::vector<std::uint32_t> overlap_;     // scratch
  std::vector<std::uint64_t> tree_sizes_;  // scratch
  KvCostRouter cost_router_;
  std::priority_queue<LoadChange, std::vector<LoadChange>, LoadChangeLater> load_changes_;
  std::uint64_t next_load_seq_ = 0;
  std::uint64_t dispatches_ = 0;
  std::uint64_t ended_ = 0;
  std::uint64_t total_turns_ = 0;
  OfflineReplayStats stats_;
};

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
  if (workload.sessions.empty()) return OfflineReplayStats{};
  OfflineReplay replay(workload, options, collector, std::move(workers.engines),
                       workers.num_prefill);
  return replay.run();
}

}  // namespace mocker::replay
