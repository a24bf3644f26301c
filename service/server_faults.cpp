// Failure drills in the serve loop (service/README.md "Failure drills"): the worker faults of
// the FaultPlan applied before each pass (crash, hang, slow), and the accounting every injected
// fault gets — one log line, a count by kind (/metrics, stats) and a fault-log line — and the
// faults armed and disarmed at run time through the admin interface (fault_admin.h).
#include <spdlog/spdlog.h>

#include <zmq.hpp>

#include <algorithm>

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

bool Server::Impl::submitFaults(const net::RoutedEnvelope& from, const std::string& id,
                                std::uint32_t rank, std::optional<FaultPlan::PendingAbort>& abort) {
  FaultPlan::RequestFaults f = faults_.onSubmit(rank, id, engineNowMs());
  if (!f.injection) return false;
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
