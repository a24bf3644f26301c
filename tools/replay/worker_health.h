// WorkerHealth: the live replay's rule for a worker that is gone or hung (tools/replay/README.md,
// "Workers that fail"), as a socket-free, clock-free unit: the loop reports what it sees, with
// its times, and asks which workers it may route to.
//
// A worker is Up, Suspect or Down. Only Up workers get new requests (when none is Up, the
// Suspect ones do; when every worker is Down, a request fails at once).
//   * Suspect, connection closed: the submit connection closed (a socket monitor saw it).
//   * Suspect, no ack: a request sent to it had no submit_ack within `ack_timeout_ms`.
//   * Down: Suspect for `down_after_ms` without clearing (below). The loop then ends the
//     requests the worker holds (failed: a worker that went away answers none of them).
//   * Down, stalled (hung): the worker holds work — requests sent to it and not ended — and has
//     produced nothing for them (no output entry, reject or error) for `stall_timeout_ms`,
//     counted from its last output or from when it started holding work, whichever is later.
//     Straight to Down: a hung worker still acknowledges and answers `stats`.
// Clearing: a worker suspect for no ack is Up again at its next message of any kind; one whose
// connection closed, when a handshake succeeds again (a process is back on the endpoint). A
// Down worker comes back the same way — for no ack, at any message (the live replay's periodic
// `stats` request is the probe); after a closed connection, at a new handshake — except a
// stalled one, which stays Down for the rest of the run (its requests are ended, so nothing it
// could send would show that it makes progress again).
//
// "First failure" (how long detection took = declared down − first failure): the time the
// connection closed, the send time of the first request that went unacknowledged, or the time
// the stalled worker last made progress (or started holding work).
//
// Deterministic: decisions depend only on the calls and their times. Not thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/result.h"

namespace mocker::replay {

struct WorkerHealthConfig {
  bool enabled = true;                 ///< false: every worker stays Up (no rule applies)
  double ack_timeout_ms = 5000.0;      ///< > 0, or 0 = the no-ack rule is off
  double down_after_ms = 2000.0;       ///< >= 0: how long a worker stays Suspect before Down
  double stall_timeout_ms = 30'000.0;  ///< > 0, or 0 = the stall rule is off
};
/// Errors name the value: negative or non-finite times.
Status validateWorkerHealthConfig(const WorkerHealthConfig& config);

enum class WorkerState : std::uint8_t { Up, Suspect, Down };
enum class HealthReason : std::uint8_t {
  ConnectionClosed,  ///< → Suspect
  NoAck,             ///< → Suspect
  SuspectTooLong,    ///< Suspect → Down
  Stalled,           ///< → Down
  Answered,          ///< → Up: a message arrived (after no ack)
  Reconnected,       ///< → Up: a handshake succeeded (after a closed connection)
};
std::string_view workerStateName(WorkerState state);
std::string_view healthReasonName(HealthReason reason);

/// One change of a worker's state.
struct HealthTransition {
  double time_ms = 0.0;
  std::uint32_t worker = 0;
  WorkerState to = WorkerState::Up;
  HealthReason reason = HealthReason::Answered;
  /// → Down: the first failure of this episode (see above); detection = time_ms − this.
  std::optional<double> first_failure_ms{};
  friend bool operator==(const HealthTransition&, const HealthTransition&) = default;
};

class WorkerHealth {
 public:
  WorkerHealth(std::uint32_t workers, WorkerHealthConfig config);

  // What the loop saw. `request` is the loop's key of a request (unique per run).
  void sent(std::uint32_t worker, std::uint64_t request, double now_ms);
  void acked(std::uint32_t worker, std::uint64_t request, double now_ms);
  /// An output entry, reject or error for a live request of the worker.
  void progressed(std::uint32_t worker, double now_ms);
  /// Any other message (a stats reply, a late message): a sign of life, not of progress.
  void answered(std::uint32_t worker, double now_ms);
  /// The request no longer counts as the worker's work (ended, handed off). Unknown: ignored.
  void released(std::uint32_t worker, std::uint64_t request);
  void connectionClosed(std::uint32_t worker, double now_ms);
  void connected(std::uint32_t worker, double now_ms);
  /// Applies the timers due at `now_ms` (no ack, suspect too long, stalled).
  void advance(double now_ms);
  /// The earliest time advance() would change something; +inf when none.
  double nextDeadlineMs() const;

  WorkerState state(std::uint32_t worker) const { return workers_[worker].state; }
  /// The workers new requests may go to: the Up ones, else the Suspect ones, else none.
  std::vector<bool> routable() const;
  /// Workers that went Down since the last call (the loop ends their requests), in order.
  std::vector<std::uint32_t> takeNewlyDown();
  const std::vector<HealthTransition>& transitions() const { return transitions_; }
  std::uint32_t size() const { return static_cast<std::uint32_t>(workers_.size()); }

 private:
  struct Worker {
    WorkerState state = WorkerState::Up;
    std::optional<HealthReason> cause{};  ///< why it left Up (ConnectionClosed, NoAck, Stalled)
    bool closed = false;                  ///< connection closed and no handshake since
    double since_ms = 0.0;                ///< when it became Suspect
    double first_failure_ms = 0.0;
    std::set<std::pair<double, std::uint64_t>> unacked{};  ///< (send time, request)
    std::unordered_map<std::uint64_t, double> held{};      ///< request → its ack clock's start
    double progress_ms = 0.0;  ///< last progress, or when it started holding work
  };
  void suspect(std::uint32_t w, HealthReason reason, double now_ms, double first_failure_ms);
  void down(std::uint32_t w, HealthReason reason, double now_ms);
  void up(std::uint32_t w, HealthReason reason, double now_ms);
  double stallDeadline(const Worker& w) const;
  double ackDeadline(const Worker& w) const;

  WorkerHealthConfig config_;
  std::vector<Worker> workers_;
  std::vector<HealthTransition> transitions_;
  std::vector<std::uint32_t> newly_down_;
};

/// The k-th routable worker (0-based, k < their count): round robin and uniform draws among
/// the routable workers.
std::uint32_t nthRoutable(const std::vector<bool>& routable, std::uint64_t k);

/// What became of the requests of the workers that went Down.
struct DownRequests {
  std::uint32_t migration_limit = 0;    ///< 0: migration off (no migration figures printed)
  std::uint64_t migrated_requests = 0;  ///< re-sent to another worker at least once
  std::uint64_t migrations = 0;         ///< re-sends over every request
  /// Lost after their last token, before their finish: ended completed, not re-sent (printed
  /// when > 0).
  std::uint64_t completed_when_lost = 0;
  std::uint64_t failed_by_down = 0;  ///< ended failed when their worker went Down
  std::uint64_t no_worker = 0;       ///< failed at dispatch: every worker was Down
  /// Disaggregated: failed at their handoff, every decode worker Down (printed when > 0).
  std::uint64_t no_decode_worker = 0;
};

/// The report's lines: the rule's settings and what became of the requests (migrated, failed),
/// then one line per change of a worker's state (when, why; going Down: the first failure and
/// the detection time) in time order: `transitions` name "server i" (the first hop), and
/// `decode_transitions` (disaggregated: the decode servers, watched by the same rule) "decode
/// server i"; at equal times the first hop's come first. The count of declarations is over both.
std::string formatWorkerHealth(const WorkerHealthConfig& config,
                               const std::vector<HealthTransition>& transitions,
                               const DownRequests& requests,
                               const std::vector<HealthTransition>& decode_transitions = {});

}  // namespace mocker::replay
