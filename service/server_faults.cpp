// Failure drills in the serve loop (service/README.md "Failure drills"): the worker faults of
// the FaultPlan applied before each pass (crash, hang, slow), and the accounting every injected
// fault gets — one log line, a count by kind (/metrics, stats) and a fault-log line — and the
// faults armed and disarmed at run time through the admin interface (fault_admin.h).
#include <spdlog/spdlog.h>

#include <zmq.hpp>

#include <algorithm>
#include <array>

#include "service/detail/server_impl.h"

namespace mocker::service {

Status Server::Impl::initFaults() {
  MOCKER_TRY(
      std::vector<FaultSpec> specs,
      parseFaultSpecs(config_.faults.inject, config_.fleet.num_workers, config_.engine.dp_size));
  faults_ = FaultPlan(std::move(specs), config_.faults.seed, options_.worker_index);
  fault_log_ = options_.fault_log;
  if (!fault_log_ && !config_.faults.log.empty()) {
    MOCKER_TRY(fault_log_, FaultLog::open(config_.faults.log));
  }
  if (!admin_ && config_.faults.admin && !options_.external_http &&
      config_.endpoints.http.enabled) {
    FaultAdmin::Options o{.num_workers = 1,
                          .dp_size = config_.engine.dp_size,
                          .first_id = static_cast<std::uint32_t>(config_.faults.inject.size())};
    if (!config_.faults.admin_key_file.empty()) {
      MOCKER_TRY(o.key, loadAdminKey(config_.faults.admin_key_file));
    }
    admin_ = std::make_shared<FaultAdmin>(std::move(o));
  }
  if (admin_) admin_->publish(options_.worker_index, adminListing());
  return {};
}

void Server::Impl::applyAdminCommands() {
  const auto apply = [this](const FaultAdmin::Command& c) -> std::uint64_t {
    if (c.op == FaultAdmin::Command::Op::Disarm) {
      const bool was = faults_.disarm(c.id);
      log_->warn("fault {} disarmed at pass {}", c.id, counters.passes);
      return was ? 1 : 0;
    }
    const std::uint64_t rank_passes = c.spec.rank ? ranks_[*c.spec.rank].passes : 0;
    const std::uint64_t at = faults_.arm(c.spec, c.id, counters.passes, rank_passes, engineNowMs());
    log_->warn("fault {} armed at pass {}{}: {}", c.id, at, c.spec.rank ? " of its rank" : "",
               faultSpecText(c.spec));
    return at;
  };
  admin_->applyCommands(options_.worker_index, apply, [this] { return adminListing(); });
}

std::vector<FaultAdmin::Listed> Server::Impl::adminListing() const {
  std::vector<FaultAdmin::Listed> out;
  for (FaultPlan::ArmedInfo& info : faults_.armed()) {
    const auto it = fired_.find(info.id);
    out.push_back({.info = std::move(info), .fired = it == fired_.end() ? 0 : it->second});
  }
  return out;
}

void Server::Impl::recordInjections() {
  for (const Injection& in : injections_) {
    ++counters.faults_injected[static_cast<std::size_t>(in.kind)];
    if (admin_) {
      ++fired_[in.fault];
      admin_stale_ = true;
    }
    const std::string line = faultLogLine(in);
    log_->warn("fault injected: {}", line);
    if (fault_log_ && !fault_log_->write(line)) {
      if (counters.fault_log_failures++ == 0) {
        log_->error("fault log '{}': write failed (further failures are only counted)",
                    config_.faults.log);
      }
    }
  }
  injections_.clear();
}

bool Server::Impl::passFaults(std::uint32_t r, double start_ms, double& slow_factor) {
  Rank& rank = ranks_[r];
  const FaultPlan::PassFaults f =
      faults_.beforePass(r, counters.passes, rank.passes, start_ms, injections_);
  recordInjections();
  if (f.crash) {
    crashed_ = true;
    return false;
  }
  if (f.restart) {
    restart_ = PendingRestart{.cleared = f.restart_cleared, .down_ms = f.restart_down_ms};
    return false;
  }
  if (f.hang) {
    rank.hung = true;
    rank.anchor_ms.reset();
    // A worker-wide hang stops each rank at its next pass; /health counts from the first.
    if (f.health_after_ms && !hang_reported_) {
      hang_reported_ = true;
      metrics_.markUnhealthyFrom(
          Clock::now() + std::chrono::duration_cast<Clock::duration>(
                             std::chrono::duration<double, std::milli>(*f.health_after_ms)));
    }
    return false;
  }
  if (f.fpm_stop) rank.fpm_stopped = true;
  if (f.metrics_freeze && !metrics_frozen_) {
    metrics_frozen_ = true;
    metrics_.freeze();  // the snapshot taken now, with this fault counted
  }
  slow_factor = f.slow_factor;
  return true;
}

void Server::Impl::crash() {
  log_->error("crash fault: closing every socket and stopping without a word to the clients");
  // Nothing queued goes out: linger 0 on the ROUTERs; the publishers' sockets go with their
  // rank (destroyed in reverse order: FPM, replay, KV publisher, KV sink).
  submit_monitor_.reset();
  for (zmq::socket_t* s : {&submit_, &cancel_, &handoff_}) {
    if (!*s) continue;
    s->set(zmq::sockopt::linger, 0);
    s->close();
  }
  for (auto& [source, dealer] : sources_) {
    dealer.set(zmq::sockopt::linger, 0);
    dealer.close();
  }
  sources_.clear();
  for (Rank& rank : ranks_) rank.in_flight.reset();
  ranks_.clear();
  metrics_.setPhase(LoopPhase::Stopped);
}

Status Server::Impl::restartWorker() {
  const PendingRestart how = *restart_;
  restart_.reset();
  log_->warn("restart fault: ending {} open request(s) with `shutdown`, starting a fresh engine",
             routes_.numRoutes());
  // The passes in flight die with the old process: nothing of them is published.
  for (Rank& rank : ranks_) {
    rank.in_flight.reset();
    rank.stalled = false;
    rank.hung = false;
    rank.anchor_ms.reset();
  }
  const double now_ms = engineNowMs();
  // As at shutdown: held requests (prefill) end without a message, their handoff was the last
  // (a decode worker's fetch in progress is never answered: its fetch timeout ends it); handoffs
  // waiting for their KV (decode) release it at their sources; every open stream gets its
  // terminal after what its client is already owed.
  for (const engine::RequestId id : holds_.takeAll()) {
    metrics_.onAbort(id, now_ms);
    routes_.close(id);
  }
  for (const PendingHandoffs::Handoff& p : pending_.takeAll()) {
    if (zmq::socket_t* dealer = sourceSocket(p.source)) {
      (void)sendToSource(*dealer, protocol::KvRelease{p.key});
    }
  }
  aborts_.clear();
  aborting_.clear();
  for (const engine::RequestId id : routes_.endAll(FinishReason::Shutdown, kRestartReason)) {
    metrics_.onAbort(id, now_ms);
    ++counters.restart_ended;
  }
  retryOwed();
  // A fresh engine: empty pools and queues, its ids after the old one's (routes still owed a
  // terminal keep theirs). resetPrefixCache would refuse while blocks are active.
  MOCKER_TRY(engine::Engine fresh, engine::Engine::create(config_.engine));
  fresh.continueIdsAfter(engine_);
  engine_ = std::move(fresh);
  for (Rank& rank : ranks_) {
    if (rank.pub.kv) {
      rank.pub.kv->restart();
      // Like kv_events.clear_on_start (a worker without prefix caching publishes no events).
      if (how.cleared && config_.engine.enable_prefix_caching) {
        rank.pub.kv->publishEvents({protocol::AllBlocksClearedEvent{}}, unixSeconds());
      }
    }
    if (rank.pub.fpm) rank.pub.fpm->restart();
    rank.pub.logSinkErrors(*log_);
  }
  if (how.down_ms > 0) {
    down_until_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double, std::milli>(how.down_ms));
    metrics_.setPhase(LoopPhase::Starting);
  }
  return {};
}

bool Server::Impl::stayDown() {
  if (!down_until_) return true;
  // Like the startup delay: sockets up, nothing read, answered or published.
  while (true) {
    const auto now = Clock::now();
    if (now >= *down_until_) break;
    PollTimeout timeout(now);
    timeout.wakeBy(*down_until_);
    if (const auto wake = metrics_.onTurn(now)) timeout.wakeBy(*wake);
    std::array<zmq::pollitem_t, 2> items{
        {{nullptr, stop_event_.fd(), ZMQ_POLLIN, 0},
         {nullptr, admin_ ? admin_->wakeFd(options_.worker_index) : -1, ZMQ_POLLIN, 0}}};
    try {
      zmq::poll(items.data(), admin_ ? 2 : 1, timeout.value());
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
    }
    if (items[0].revents & ZMQ_POLLIN) {
      stop_event_.drain();
      stopping_ = true;
      log_->info("stop while down after a restart: stopping");
      return false;
    }
    if (admin_ && (items[1].revents & ZMQ_POLLIN)) applyAdminCommands();
  }
  down_until_.reset();
  metrics_.setPhase(LoopPhase::Serving);
  log_->warn("restart fault: the worker is back");
  return true;
}

bool Server::Impl::submitFaults(const net::RoutedEnvelope& from, const std::string& id,
                                std::uint32_t rank, std::optional<FaultPlan::PendingAbort>& abort,
                                bool& silent) {
  FaultPlan::RequestFaults f = faults_.onSubmit(rank, id, engineNowMs());
  if (!f.injection) return false;
  if (f.silent) {
    silent = true;
    ++counters.fault_silenced;
    injections_.push_back(std::move(*f.injection));
    recordInjections();
    return false;
  }
  if (f.abort_after_tokens) {
    abort = FaultPlan::PendingAbort{*f.abort_after_tokens, std::move(*f.injection)};
    return false;
  }
  ++counters.rejected_submits;
  ++counters.fault_errors;
  injections_.push_back(std::move(*f.injection));
  recordInjections();
  reply(submit_, from, protocol::ErrorReply{*f.error, std::move(f.error_message), id});
  return true;
}

bool Server::Impl::cutByAbort(const engine::OutputSignal& s) {
  const auto it = aborts_.find(s.id);
  if (it == aborts_.end()) return false;
  if (s.token && s.index >= it->second.after_tokens) {
    if (std::find(aborting_.begin(), aborting_.end(), s.id) == aborting_.end()) {
      aborting_.push_back(s.id);
    }
    return true;
  }
  if (s.terminal != engine::Terminal::None) aborts_.erase(it);  // ended before its cut
  return false;
}

void Server::Impl::endAborted() {
  for (const engine::RequestId id : aborting_) {
    auto node = aborts_.extract(id);
    const Route* route = routes_.find(id);
    if (node.empty() || !route || route->state != RouteState::Active) continue;
    cancelInEngine(id, route->rank);
    ++counters.fault_aborts;
    routes_.oweTerminal(id, FinishReason::Error,
                        "fault injected: stream aborted after " +
                            std::to_string(node.mapped().after_tokens) + " tokens");
    node.mapped().injection.time_ms = engineNowMs();
    injections_.push_back(std::move(node.mapped().injection));
  }
  aborting_.clear();
  recordInjections();
}

void Server::Impl::publishKvEvents(std::uint32_t r, std::span<const engine::KvEvent> events) {
  Rank& rank = ranks_[r];
  if (!rank.pub.kv) return;
  publishers::KvBatchFault fault;
  if (!events.empty() && faults_.hasKvFaults()) {
    const FaultPlan::BatchFaults f = faults_.onBatch(r, rank.pub.kv->nextSeq(), counters.passes,
                                                     rank.passes, engineNowMs(), injections_);
    fault = {.drop = f.drop,
             .unhealable = f.unhealable,
             .suppress = f.suppress,
             .duplicate = f.duplicate,
             .reorder = f.reorder,
             .delay_s = f.delay_ms / 1000.0,
             .truncate_ring = f.truncate_ring};
    recordInjections();
  }
  rank.pub.kv->publishPass(events, unixSeconds(), fault);
}

void Server::Impl::releaseHeldBatches() {
  if (!faults_.hasKvFaults()) return;
  const double now = unixSeconds();
  for (Rank& rank : ranks_) {
    if (rank.pub.kv && rank.pub.kv->numHeld() > 0) rank.pub.kv->releaseDue(now);
  }
}

void Server::Impl::wakeForHeldBatches(PollTimeout& timeout, Clock::time_point now) const {
  if (!faults_.hasKvFaults()) return;
  const double unix_now = unixSeconds();
  for (const Rank& rank : ranks_) {
    const auto release = rank.pub.kv ? rank.pub.kv->nextRelease() : std::nullopt;
    if (!release) continue;
    timeout.wakeBy(now + std::chrono::duration_cast<Clock::duration>(
                             std::chrono::duration<double>(*release - unix_now)));
  }
}

}  // namespace mocker::service
