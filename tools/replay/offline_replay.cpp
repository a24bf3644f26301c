#include "tools/replay/offline_replay.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <queue>
#include <string>
#include <utility>

#include "base/check.h"
#include "engine/block_hash.h"
#include "engine/engine.h"
#include "tools/index/kv_index.h"
#include "tools/replay/detail/eligible_turn.h"
#include "tools/replay/kv_router.h"
#include "tools/replay/random.h"

namespace mocker::replay {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr std::uint64_t kProgressEveryPasses = 4096;

using detail::EligibleTurn;

/// What the loop remembers about a submitted request, indexed by its engine id.
struct Tracked {
  RequestHandle handle = 0;
  std::uint32_t session = 0;
  std::uint32_t turn = 0;
  bool live = false;
  bool first_token = false;  ///< the kv router's load saw its prefill end
};

/// A change of the kv router's load, effective from `time_ms` (a pass's outputs carry times up
/// to its end, which can be after a dispatch that the loop handles later).
struct LoadChange {
  double time_ms = 0.0;
  std::uint64_t seq = 0;
  RequestHandle handle = 0;
  bool ended = false;  ///< false: first token (prefill done)
};
struct LoadChangeLater {
  bool operator()(const LoadChange& a, const LoadChange& b) const {
    return a.time_ms != b.time_ms ? a.time_ms > b.time_ms : a.seq > b.seq;
  }
};

/// One (worker, rank) pair: a global rank.
struct Slot {
  std::uint32_t worker = 0;
  std::uint32_t rank = 0;
  double clock_ms = 0.0;  ///< next pass start (or end of the pass in flight)
  bool blocked = false;   ///< last pass did nothing: wait for a new dispatch
  std::uint64_t in_flight = 0;
  std::priority_queue<double, std::vector<double>, std::greater<>> pending_terminals;
};

/// KV events of one pass, visible to the router from `visible_ms` on.
struct PendingEvents {
  double visible_ms = 0.0;
  std::uint64_t seq = 0;
  std::uint32_t slot = 0;
  std::vector<engine::KvEvent> events;
};
struct PendingEventsLater {
  bool operator()(const PendingEvents& a, const PendingEvents& b) const {
    return a.visible_ms != b.visible_ms ? a.visible_ms > b.visible_ms : a.seq > b.seq;
  }
};

StopReason toReason(engine::LengthLimit limit) {
  switch (limit) {
    case engine::LengthLimit::None:
      return StopReason::None;
    case engine::LengthLimit::MaxModelLen:
      return StopReason::MaxModelLen;
    case engine::LengthLimit::KvCapacity:
      return StopReason::KvCapacity;
    case engine::LengthLimit::MaxNumBatchedTokens:
      return StopReason::MaxNumBatchedTokens;
  }
  return StopReason::None;
}

TerminalStatus toStatus(engine::Terminal t) {
  switch (t) {
    case engine::Terminal::Completed:
      return TerminalStatus::Completed;
    case engine::Terminal::Rejected:
      return TerminalStatus::Rejected;
    case engine::Terminal::Cancelled:
      return TerminalStatus::Cancelled;
    case engine::Terminal::Failed:
      return TerminalStatus::Failed;
    case engine::Terminal::None:
      break;
  }
  return TerminalStatus::Incomplete;
}

class OfflineReplay {
 public:
  OfflineReplay(const Workload& workload, const OfflineReplayOptions& options,
                ReplayCollector& collector, std::vector<engine::Engine> workers)
      : workload_(workload),
        options_(options),
        collector_(collector),
        workers_(std::move(workers)),
        synth_(workload.trace_block_size),
        rng_(options.router_seed),
        dp_size_(workers_.front().dpSize()),
        block_size_(workers_.front().blockSize()),
        seeds_{options.engine.hash_seed, options.engine.chain_seed},
        tracked_(workers_.size()),
        next_rank_(workers_.size(), 0),
        cost_router_(workers_.size() * dp_size_, block_size_, options.kv_router,
                     options.router_seed) {
    for (std::uint32_t w = 0; w < workers_.size(); ++w) {
      for (std::uint32_t r = 0; r < dp_size_; ++r) {
        Slot& s = slots_.emplace_back();
        s.worker = w;
        s.rank = r;
        index_.registerSource({w, r});
      }
    }
    next_pass_ms_.assign(slots_.size(), kInf);
    stats_.per_worker.assign(workers_.size(), 0);
    total_turns_ = workload.numTurns();
    waiting_on_.assign(workload.sessions.size(), 0);
    released_at_.assign(workload.sessions.size(), 0.0);
    dependents_.resize(workload.sessions.size());
    if (workload.cumulative_prompts) history_.resize(workload.sessions.size());
    for (std::uint32_t s = 0; s < workload.sessions.size(); ++s) {
      const Session& session = workload.sessions[s];
      for (std::uint32_t d : session.wait_for) dependents_[d].push_back(s);
      waiting_on_[s] = static_cast<std::uint32_t>(session.wait_for.size());
      if (!session.wait_for.empty()) continue;  // released when its dependencies end
      const double at = options.concurrency ? 0.0 : *session.first_arrival_ms;
      eligible_.push({at, session.turns.front().line, s, 0});
    }
    if (options.concurrency) {
      for (std::uint32_t i = 0; i < *options.concurrency; ++i) free_slots_.push(0.0);
    }
  }

  OfflineReplayStats run() {
    while (true) {
      const double dispatch_at = nextDispatchTime();
      const std::optional<std::uint32_t> busy = earliestBusySlot();
      const double pass_at = busy ? slots_[*busy].clock_ms : kInf;
      if (dispatch_at == kInf && pass_at == kInf) break;
      if (dispatch_at <= pass_at) {
        dispatch(dispatch_at);
      } else {
        step(*busy);
      }
    }
    flushEvents(kInf);
    stats_.kv_index_blocks = index_.numBlocksIndexed();
    stats_.warnings = synth_.warnings();
    reportProgress();
    return std::move(stats_);
  }

 private:
  double nextDispatchTime() const {
    if (eligible_.empty()) return kInf;
    const double t = eligible_.top().time_ms;
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
  /// (a dispatch to it or a pass of it: nothing else changes them).
  void refreshNextPass(std::uint32_t g) {
    const Slot& s = slots_[g];
    next_pass_ms_[g] = !s.blocked && workers_[s.worker].hasWork(s.rank) ? s.clock_ms : kInf;
  }

  /// Applies KV-event batches that are visible at `now` to the router's index.
  void flushEvents(double now) {
    while (!pending_events_.empty() && pending_events_.top().visible_ms <= now) {
      const PendingEvents& p = pending_events_.top();
      const Slot& s = slots_[p.slot];
      for (const engine::KvEvent& e : p.events) index_.apply(e, {s.worker, s.rank});
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

  std::uint32_t route(double now, const std::vector<std::uint32_t>& tokens) {
    const auto num_workers = static_cast<std::uint32_t>(workers_.size());
    switch (options_.router) {
      case RouterKind::RoundRobin:
      case RouterKind::Random: {
        const std::uint32_t w = options_.router == RouterKind::RoundRobin
                                    ? static_cast<std::uint32_t>(dispatches_ % num_workers)
                                    : static_cast<std::uint32_t>(rng_.uniformIndex(num_workers));
        const std::uint32_t r = next_rank_[w];
        next_rank_[w] = (r + 1) % dp_size_;
        return w * dp_size_ + r;
      }
      case RouterKind::Kv:
      case RouterKind::KvPrefix:
        break;
    }
    flushEvents(now);
    hashes_.clear();  // reuses the scratch vector's capacity
    engine::extendSequenceHashes(tokens, block_size_, seeds_, hashes_);
    index_.overlapBlocks(hashes_, overlap_);
    if (options_.router == RouterKind::Kv) {
      flushLoad(now);
      tree_sizes_.resize(slots_.size());
      for (std::uint32_t g = 0; g < slots_.size(); ++g) {
        tree_sizes_[g] = index_.numBlocks({slots_[g].worker, slots_[g].rank});
      }
      const std::uint32_t best = cost_router_.select(
          hashes_, static_cast<std::uint32_t>(tokens.size()), overlap_, tree_sizes_);
      if (overlap_[best] > 0) ++stats_.kv_routed_hits;
      return best;
    }
    settleTerminals(now);
    std::uint32_t best = 0;
    for (std::uint32_t g = 1; g < slots_.size(); ++g) {
      if (overlap_[g] > overlap_[best] ||
          (overlap_[g] == overlap_[best] && slots_[g].in_flight < slots_[best].in_flight)) {
        best = g;
      }
    }
    if (overlap_[best] > 0) ++stats_.kv_routed_hits;
    return best;
  }

  void dispatch(double now) {
    const EligibleTurn next = eligible_.top();
    eligible_.pop();
    if (options_.concurrency) free_slots_.pop();
    const Session& session = workload_.sessions[next.session];
    const Turn& turn = session.turns[next.turn];

    engine::Request request;
    request.tokens = synth_.synthesize(turn);
    if (workload_.cumulative_prompts) {
      // mooncake-delta: the earlier prompt and its emitted tokens, then this turn's delta. The
      // history keeps this prompt (the tokens it emits are appended) while turns remain.
      std::vector<std::uint32_t>& history = history_[next.session];
      history.insert(history.end(), request.tokens.begin(), request.tokens.end());
      if (next.turn + 1 < session.turns.size()) {
        request.tokens = history;
      } else {
        request.tokens = std::move(history);
        history = {};
      }
    }
    request.max_output_tokens = turn.output_length;
    request.arrival_ms = now;
    const std::size_t input_tokens = request.tokens.size();
    const RequestHandle handle =
        collector_.onArrival({.session_id = session.session_id,
                              .turn_index = next.turn,
                              .request_id = turn.request_id,
                              .input_length = static_cast<std::uint32_t>(request.tokens.size()),
                              .requested_output_length = turn.output_length},
                             now);

    const std::uint32_t g = route(now, request.tokens);
    ++dispatches_;
    Slot& slot = slots_[g];
    request.dp_rank = slot.rank;
    ++stats_.per_worker[slot.worker];
    Result<engine::RequestId> id = workers_[slot.worker].submit(std::move(request));
    if (!id) {
      // Refused at submit (e.g. a prompt beyond the engine's hard limit): rejected on arrival.
      ++stats_.refused_at_submit;
      end(handle, next.session, next.turn, now, TerminalStatus::Rejected);
      return;
    }
    auto& tracked = tracked_[slot.worker];
    const auto index = static_cast<std::size_t>(id->value());
    if (tracked.size() <= index) tracked.resize(std::max(index + 1, tracked.size() * 2));
    tracked[index] = {handle, next.session, next.turn, true};
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

  /// A request reached its terminal at `time_ms`: record it, free its concurrency slot and
  /// make the session's next turn eligible after its delay.
  void end(RequestHandle handle, std::uint32_t session, std::uint32_t turn, double time_ms,
           TerminalStatus status, StopReason reason = StopReason::None) {
    collector_.onTerminal(handle, time_ms, status, reason);
    ++ended_;
    if (options_.concurrency) free_slots_.push(time_ms);
    const Session& s = workload_.sessions[session];
    if (turn + 1 < s.turns.size()) {
      const Turn& next = s.turns[turn + 1];
      eligible_.push({time_ms + next.delay_after_previous_ms, next.line, session, turn + 1});
      return;
    }
    // The session ended: release the sessions waiting for it once all their dependencies ended.
    for (std::uint32_t d : dependents_[session]) {
      released_at_[d] = std::max(released_at_[d], time_ms);
      if (--waiting_on_[d] > 0) continue;
      const Session& dependent = workload_.sessions[d];
      eligible_.push(
          {released_at_[d] + dependent.dependency_delay_ms, dependent.turns.front().line, d, 0});
    }
  }

  void step(std::uint32_t g) {
    Slot& slot = slots_[g];
    engine::Engine& engine = workers_[slot.worker];
    engine::PassResult pass = engine.step(slot.rank, slot.clock_ms);
    if (!pass.did_work) {
      slot.blocked = true;  // cannot progress until something new arrives on this rank
      refreshNextPass(g);
      return;
    }
    ++stats_.passes;
    stats_.end_ms = std::max(stats_.end_ms, pass.end_ms);
    slot.clock_ms = pass.end_ms;
    refreshNextPass(g);
    auto& tracked = tracked_[slot.worker];
    for (const engine::Admission& a : pass.admissions) {
      collector_.onAdmission(tracked[static_cast<std::size_t>(a.id.value())].handle, pass.start_ms,
                             a.reused_input_tokens, a.is_readmission);
    }
    for (const engine::OutputSignal& sig : pass.outputs) {
      Tracked& t = tracked[static_cast<std::size_t>(sig.id.value())];
      MOCKER_CHECK(t.live);
      if (sig.token) {
        collector_.onToken(t.handle, sig.time_ms);
        if (workload_.cumulative_prompts &&
            t.turn + 1 < workload_.sessions[t.session].turns.size()) {
          history_[t.session].push_back(*sig.token);
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
      const bool at_start =
          options_.engine.kv_event_visibility == engine::KvEventVisibility::PassStart;
      pending_events_.push({at_start ? pass.start_ms : pass.end_ms, next_event_seq_++, g,
                            std::move(pass.kv_events)});
    }
    if (options_.progress && stats_.passes % kProgressEveryPasses == 0) reportProgress();
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
  std::uint32_t dp_size_;
  std::uint32_t block_size_;
  engine::HashSeeds seeds_;
  std::vector<std::vector<Tracked>> tracked_;  // per worker, by engine request id
  std::vector<std::uint32_t> next_rank_;       // per worker, round-robin rank
  std::vector<Slot> slots_;                    // worker-major: g = worker · dp_size + rank
  // Per slot: its clock when it can run a pass (not blocked, its engine rank has work), else
  // +inf; one compact array for the loop's scan instead of asking every engine each iteration.
  std::vector<double> next_pass_ms_;
  std::priority_queue<EligibleTurn, std::vector<EligibleTurn>, std::greater<>> eligible_;
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
  // Dependencies (agentic): per session, the sessions waiting for it, how many of its own
  // dependencies have not ended yet, and the latest terminal among those that have.
  std::vector<std::vector<std::uint32_t>> dependents_;
  std::vector<std::uint32_t> waiting_on_;
  std::vector<double> released_at_;
  // Cumulative prompts (mooncake-delta): per session, the last prompt plus its emitted tokens.
  std::vector<std::vector<std::uint32_t>> history_;
  std::uint64_t dispatches_ = 0;
  std::uint64_t ended_ = 0;
  std::uint64_t total_turns_ = 0;
  OfflineReplayStats stats_;
};

}  // namespace

std::string_view toString(RouterKind kind) {
  switch (kind) {
    case RouterKind::RoundRobin:
      return "round_robin";
    case RouterKind::Kv:
      return "kv";
    case RouterKind::Random:
      return "random";
    case RouterKind::KvPrefix:
      return "kv_prefix";
  }
  return "round_robin";
}

Result<RouterKind> parseRouterKind(std::string_view text) {
  if (text == "round_robin" || text == "round-robin") return RouterKind::RoundRobin;
  if (text == "kv") return RouterKind::Kv;
  if (text == "random") return RouterKind::Random;
  if (text == "kv_prefix") return RouterKind::KvPrefix;
  return invalidArgument("router: expected round_robin | kv | kv_prefix | random (got '" +
                         std::string(text) + "')");
}

Result<OfflineReplayStats> runOfflineReplay(const Workload& workload,
                                            const OfflineReplayOptions& options,
                                            ReplayCollector& collector) {
  if (options.num_workers == 0) return invalidArgument("num_workers must be >= 1 (got 0)");
  MOCKER_TRY_VOID(validateKvRouterConfig(options.kv_router));
  if (options.concurrency && *options.concurrency == 0) {
    return invalidArgument("concurrency must be >= 1 (got 0)");
  }
  if (!options.concurrency) {
    for (const Session& s : workload.sessions) {
      if (!s.first_arrival_ms && s.wait_for.empty()) {
        return invalidArgument("session '" + s.session_id +
                               "' has no arrival time: trace mode needs a timestamp on every "
                               "first turn (closed-loop replay with a concurrency does not)");
      }
    }
  }
  engine::EngineConfig config = options.engine;
  config.allow_empty_output = true;
  std::vector<engine::Engine> workers;
  workers.reserve(options.num_workers);
  for (std::uint32_t w = 0; w < options.num_workers; ++w) {
    Result<engine::Engine> e = engine::Engine::create(config);
    if (!e) return e.error();
    workers.push_back(std::move(*e));
  }
  if (workload.sessions.empty()) return OfflineReplayStats{};
  OfflineReplay replay(workload, options, collector, std::move(workers));
  return replay.run();
}

}  // namespace mocker::replay
