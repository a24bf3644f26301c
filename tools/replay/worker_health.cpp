#include "tools/replay/worker_health.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "base/check.h"
#include "base/enum_names.h"

namespace mocker::replay {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

constexpr EnumNames<WorkerState, 3> kStates{
    {{"up", WorkerState::Up}, {"suspect", WorkerState::Suspect}, {"down", WorkerState::Down}}};

constexpr EnumNames<HealthReason, 6> kReasons{
    {{"connection closed", HealthReason::ConnectionClosed},
     {"no ack", HealthReason::NoAck},
     {"suspect too long", HealthReason::SuspectTooLong},
     {"stalled: no output while holding work", HealthReason::Stalled},
     {"answered", HealthReason::Answered},
     {"reconnected", HealthReason::Reconnected}}};

Status checkTime(double value, const char* name) {
  if (!std::isfinite(value) || value < 0) {
    return invalidArgument(std::string(name) + " must be finite and >= 0 (got " +
                           std::to_string(value) + ")");
  }
  return {};
}

}  // namespace

Status validateWorkerHealthConfig(const WorkerHealthConfig& config) {
  MOCKER_TRY_VOID(checkTime(config.ack_timeout_ms, "worker ack timeout"));
  MOCKER_TRY_VOID(checkTime(config.down_after_ms, "worker down-after time"));
  MOCKER_TRY_VOID(checkTime(config.stall_timeout_ms, "worker stall timeout"));
  return {};
}

std::string_view workerStateName(WorkerState state) { return enumName(kStates, state); }

std::string_view healthReasonName(HealthReason reason) { return enumName(kReasons, reason); }

WorkerHealth::WorkerHealth(std::uint32_t workers, WorkerHealthConfig config)
    : config_(config), workers_(workers) {}

void WorkerHealth::sent(std::uint32_t worker, std::uint64_t request, double now_ms) {
  Worker& w = workers_[worker];
  if (w.held.empty()) w.progress_ms = now_ms;  // starts holding work
  w.held[request] = now_ms;
  w.unacked.insert({now_ms, request});
}

void WorkerHealth::acked(std::uint32_t worker, std::uint64_t request, double now_ms) {
  Worker& w = workers_[worker];
  if (const auto it = w.held.find(request); it != w.held.end()) {
    w.unacked.erase({it->second, request});
  }
  answered(worker, now_ms);
}

void WorkerHealth::progressed(std::uint32_t worker, double now_ms) {
  workers_[worker].progress_ms = now_ms;
  answered(worker, now_ms);
}

void WorkerHealth::answered(std::uint32_t worker, double now_ms) {
  const Worker& w = workers_[worker];
  if (w.state != WorkerState::Up && w.cause == HealthReason::NoAck && !w.closed) {
    up(worker, HealthReason::Answered, now_ms);
  }
}

void WorkerHealth::released(std::uint32_t worker, std::uint64_t request) {
  Worker& w = workers_[worker];
  const auto it = w.held.find(request);
  if (it == w.held.end()) return;
  w.unacked.erase({it->second, request});
  w.held.erase(it);
}

void WorkerHealth::connectionClosed(std::uint32_t worker, double now_ms) {
  Worker& w = workers_[worker];
  w.closed = true;
  if (!config_.enabled) return;
  if (w.state == WorkerState::Up) {
    suspect(worker, HealthReason::ConnectionClosed, now_ms, now_ms);
  } else if (w.cause == HealthReason::NoAck) {
    w.cause = HealthReason::ConnectionClosed;  // back only with a new handshake
  }
}

void WorkerHealth::connected(std::uint32_t worker, double now_ms) {
  Worker& w = workers_[worker];
  w.closed = false;
  if (w.state != WorkerState::Up && w.cause == HealthReason::ConnectionClosed) {
    up(worker, HealthReason::Reconnected, now_ms);
  }
}

double WorkerHealth::ackDeadline(const Worker& w) const {
  if (w.state != WorkerState::Up || config_.ack_timeout_ms == 0 || w.unacked.empty()) return kInf;
  return w.unacked.begin()->first + config_.ack_timeout_ms;
}

double WorkerHealth::stallDeadline(const Worker& w) const {
  if (w.state == WorkerState::Down || config_.stall_timeout_ms == 0 || w.held.empty()) return kInf;
  return w.progress_ms + config_.stall_timeout_ms;
}

void WorkerHealth::advance(double now_ms) {
  if (!config_.enabled) return;
  for (std::uint32_t i = 0; i < workers_.size(); ++i) {
    Worker& w = workers_[i];
    if (ackDeadline(w) <= now_ms) {
      suspect(i, HealthReason::NoAck, now_ms, w.unacked.begin()->first);
    }
    if (stallDeadline(w) <= now_ms) {
      w.first_failure_ms = w.progress_ms;
      down(i, HealthReason::Stalled, now_ms);
      continue;
    }
    if (w.state == WorkerState::Suspect && w.since_ms + config_.down_after_ms <= now_ms) {
      down(i, HealthReason::SuspectTooLong, now_ms);
    }
  }
}

double WorkerHealth::nextDeadlineMs() const {
  if (!config_.enabled) return kInf;
  double next = kInf;
  for (const Worker& w : workers_) {
    next = std::min({next, ackDeadline(w), stallDeadline(w)});
    if (w.state == WorkerState::Suspect) next = std::min(next, w.since_ms + config_.down_after_ms);
  }
  return next;
}

std::vector<bool> WorkerHealth::routable() const {
  for (const WorkerState wanted : {WorkerState::Up, WorkerState::Suspect}) {
    std::vector<bool> ok(workers_.size(), false);
    bool any = false;
    for (std::size_t i = 0; i < workers_.size(); ++i) {
      ok[i] = workers_[i].state == wanted;
      any = any || ok[i];
    }
    if (any) return ok;
  }
  return std::vector<bool>(workers_.size(), false);
}

std::vector<std::uint32_t> WorkerHealth::takeNewlyDown() {
  std::vector<std::uint32_t> out;
  out.swap(newly_down_);
  return out;
}

void WorkerHealth::suspect(std::uint32_t i, HealthReason reason, double now_ms,
                           double first_failure_ms) {
  Worker& w = workers_[i];
  w.state = WorkerState::Suspect;
  w.cause = reason;
  w.since_ms = now_ms;
  w.first_failure_ms = first_failure_ms;
  transitions_.push_back(
      {.time_ms = now_ms, .worker = i, .to = WorkerState::Suspect, .reason = reason});
}

void WorkerHealth::down(std::uint32_t i, HealthReason reason, double now_ms) {
  Worker& w = workers_[i];
  w.state = WorkerState::Down;
  if (reason == HealthReason::Stalled) w.cause = HealthReason::Stalled;
  transitions_.push_back({.time_ms = now_ms,
                          .worker = i,
                          .to = WorkerState::Down,
                          .reason = reason,
                          .first_failure_ms = w.first_failure_ms});
  newly_down_.push_back(i);
}

void WorkerHealth::up(std::uint32_t i, HealthReason reason, double now_ms) {
  Worker& w = workers_[i];
  w.state = WorkerState::Up;
  w.cause.reset();
  w.progress_ms = now_ms;  // a stall is counted afresh
  // Requests still unacknowledged from before count from now: the worker answered.
  std::set<std::pair<double, std::uint64_t>> unacked;
  for (const auto& [send_ms, request] : w.unacked) {
    unacked.insert({now_ms, request});
    w.held[request] = now_ms;
  }
  w.unacked.swap(unacked);
  transitions_.push_back({.time_ms = now_ms, .worker = i, .to = WorkerState::Up, .reason = reason});
}

std::uint32_t nthRoutable(const std::vector<bool>& routable, std::uint64_t k) {
  for (std::uint32_t w = 0; w < routable.size(); ++w) {
    if (!routable[w]) continue;
    if (k == 0) return w;
    --k;
  }
  MOCKER_CHECK(false);
  return 0;
}

std::string formatWorkerHealth(const WorkerHealthConfig& config,
                               const std::vector<HealthTransition>& transitions,
                               const DownRequests& requests,
                               const std::vector<HealthTransition>& decode_transitions) {
  std::ostringstream out;
  if (!config.enabled) {
    out << "Live worker health off (no server declared down): ";
  } else {
    out << "Live worker health (suspect: connection closed";
    if (config.ack_timeout_ms > 0) out << " or no ack within " << config.ack_timeout_ms << " ms";
    out << "; down after " << config.down_after_ms << " ms suspect";
    if (config.stall_timeout_ms > 0) {
      out << " or no output for " << config.stall_timeout_ms << " ms while holding work";
    }
    std::size_t downs = 0;
    for (const auto* list : {&transitions, &decode_transitions}) {
      for (const HealthTransition& t : *list) downs += t.to == WorkerState::Down ? 1 : 0;
    }
    out << "): " << downs << " declared down; ";
  }
  if (requests.migration_limit > 0) {
    out << requests.migrated_requests
        << (requests.migrated_requests == 1 ? " request" : " requests")
        << " migrated to another server (" << requests.migrations << " migrations, limit "
        << requests.migration_limit << " per request), ";
    if (requests.completed_when_lost > 0) {
      out << requests.completed_when_lost
          << (requests.completed_when_lost == 1 ? " request" : " requests")
          << " completed whose finish was lost (every token streamed, not re-sent), ";
    }
  }
  out << requests.failed_by_down << (requests.failed_by_down == 1 ? " request" : " requests")
      << " failed with a worker that went down, " << requests.no_worker
      << " failed with no worker up";
  if (requests.no_decode_worker > 0) {
    out << ", " << requests.no_decode_worker << " failed at their handoff with no decode server up";
  }
  out << "\n";
  // Both lists are in time order: merged, the first hop's first at equal times.
  std::size_t a = 0;
  std::size_t b = 0;
  while (a < transitions.size() || b < decode_transitions.size()) {
    const bool decode =
        a == transitions.size() ||
        (b < decode_transitions.size() && decode_transitions[b].time_ms < transitions[a].time_ms);
    const HealthTransition& t = decode ? decode_transitions[b++] : transitions[a++];
    out << "  " << t.time_ms << " ms: " << (decode ? "decode server " : "server ") << t.worker
        << " " << workerStateName(t.to) << " (" << healthReasonName(t.reason);
    if (t.first_failure_ms) {
      out << "; first failure at " << *t.first_failure_ms << " ms, detected in "
          << t.time_ms - *t.first_failure_ms << " ms";
    }
    out << ")\n";
  }
  return out.str();
}

}  // namespace mocker::replay
