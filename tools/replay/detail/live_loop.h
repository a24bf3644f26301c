// The live replay's event loop (tools/replay/live_replay.h, which documents its rules): one
// object per run over the clients of the servers it drives. Its members are defined in three
// files: live_replay.cpp (the loop, dispatch, timeouts, stats polls and the servers' messages),
// live_replay_handoffs.cpp (disaggregated: the handoff to the decode hop, the prefill servers'
// terminals) and live_replay_health.cpp (routing under worker health, down declarations,
// migration; tools/replay/worker_health.h).
//
// Not thread-safe; runs on the calling thread.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "net/client.h"
#include "service/loop_clock.h"
#include "tools/index/live_kv_index.h"
#include "tools/replay/collector.h"
#include "tools/replay/live_replay.h"
#include "tools/replay/live_requests.h"
#include "tools/replay/live_router.h"
#include "tools/replay/live_stats.h"
#include "tools/replay/turn_schedule.h"
#include "tools/replay/worker_health.h"
#include "tools/replay/workload.h"

namespace mocker::replay::detail {

class LiveReplay {
 public:
  using Clock = std::chrono::steady_clock;
  static constexpr double kInf = std::numeric_limits<double>::infinity();

  LiveReplay(const Workload& workload, const LiveReplayOptions& options, ReplayCollector& collector,
             std::vector<std::unique_ptr<net::Client>> clients, LiveReplayStats stats,
             std::unique_ptr<index::LiveKvIndex> kv_index);

  LiveReplayStats run();

 private:
  double nowMs() const;
  double nextDispatchMs() const;
  void warnOnce(std::string message);

  /// The router's pick for `request` among the routable servers (its DP rank set for kv), with
  /// its counters; nullopt when no server is routable.
  std::optional<std::uint32_t> route(std::size_t index, protocol::SubmitRequest& request);
  /// The same among the servers `routable` marks.
  std::optional<std::uint32_t> route(std::size_t index, protocol::SubmitRequest& request,
                                     const std::vector<bool>& routable);

  /// Applies the health timers of both hops. The requests a server that went down holds are
  /// migrated while they may be (completed when only their finish was lost); the others end
  /// failed at once. A decode server's requests are migrated through hop 1 again (the prefill
  /// servers), with the tokens they streamed.
  void checkHealth(double now);
  /// The health rule that watches connection `connection` (a prefill server's, or a decode
  /// server's) and the server's index there.
  std::pair<WorkerHealth*, std::uint32_t> healthOf(std::uint32_t connection) {
    if (connection < num_prefill_) return {&health_, connection};
    return {&decode_health_, connection - num_prefill_};
  }

  /// Request `index` lost its server (a prefill server, or its decode server): it went down, or
  /// the submit to (prefill) server `refused` could not be sent. Completed when only its finish was
  /// lost, else re-sent to a routable server (live_replay.h "Migration"); a re-send that cannot be
  /// sent leaves that server out and is itself lost, while the limit allows. False when the request
  /// must end failed (migration off, limit reached, no server to send it to).
  bool recoverLost(std::size_t index, double now, std::optional<std::uint32_t> refused);

  void dispatchDue(double now);
  void dispatchOne();

  /// Records the terminal of request `index` and makes its session's next turn eligible.
  void end(std::size_t index, double time_ms, TerminalStatus status,
           StopReason reason = StopReason::None);

  void expireTimeouts(double now);
  void pollStats(double now);
  void drain(std::uint32_t target);
  void handle(std::uint32_t target, const protocol::ClientMessage& msg, double now);

  void onHandoff(LiveRequest& r, const protocol::Handoff& handoff, double now);
  /// A prefill server's output entry: a terminal instead of a handoff (rejected by its
  /// scheduler, cancelled, error, shutdown) ends the request; tokens are not expected.
  void onPrefillOutput(std::uint32_t target, const protocol::RequestOutput& o, double now);
  void onOutput(std::uint32_t target, const protocol::RequestOutput& o, double now);

  void reportProgress(double now);

  const Workload& workload_;
  const LiveReplayOptions& options_;
  ReplayCollector& collector_;
  std::vector<std::unique_ptr<net::Client>> clients_;
  std::vector<net::Client*> client_ptrs_;
  PromptSynthesizer synth_;
  LiveReplayStats stats_;
  std::vector<bool> stats_pending_;
  std::uint32_t num_prefill_ = 0;  ///< clients_[0, num_prefill_): (prefill) servers; then decode
  Clock::time_point start_{};
  service::PassTimer wake_timer_;  // wakes the loop at the next dispatch or deadline
  TurnSchedule schedule_;
  LiveRequests sent_;
  WorkerHealth health_;         // the (prefill) servers' state: who gets new requests
  WorkerHealth decode_health_;  // disaggregated: the decode servers' state: who gets handoffs
  std::vector<double> dispatch_lags_;
  std::uint32_t in_flight_ = 0;
  std::uint64_t ended_ = 0;
  std::uint64_t total_turns_ = 0;
  double next_stats_ms_ = kInf;
  double last_progress_ms_ = 0.0;
  std::size_t reason_warnings_ = 0;
  std::unique_ptr<index::LiveKvIndex> kv_index_;  // kv router: the caches' view
  LiveRouter router_;                             // after kv_index_: its query reads it
};

}  // namespace mocker::replay::detail
