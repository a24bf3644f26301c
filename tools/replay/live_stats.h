// What a live replay (tools/replay/live_replay.h) observed besides the collector's records: the
// run's counters and the two hops of a disaggregated run as the client saw them, and their
// summaries for the report (timing fidelity, the handoff section and footer lines). No sockets.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "protocol/client.h"
#include "tools/replay/collector.h"
#include "tools/replay/worker_health.h"

namespace mocker::replay {

/// Disaggregated runs: the two hops as the client saw them. Times are wall milliseconds; one
/// sample per request that reached the step.
struct LiveHandoffStats {
  std::uint64_t handoffs = 0;        ///< `handoff` messages received (decode submits sent)
  std::uint64_t decode_acks = 0;     ///< decode submit_acks
  std::uint64_t activations = 0;     ///< decode streams that started (first token, or 0-token end)
  std::uint64_t decode_rejects = 0;  ///< decode submit_rejects (recorded rejected)
  std::uint64_t ended_on_prefill = 0;    ///< terminal entry from the prefill server (no handoff)
  std::uint64_t prefill_tokens = 0;      ///< output tokens a prefill server sent (ignored)
  std::uint64_t prefill_cancels = 0;     ///< cancels sent to a prefill server (timeout, reject)
  std::vector<double> handoff_ms{};      ///< handoff received − dispatch
  std::vector<double> decode_ack_ms{};   ///< decode submit_ack − handoff received
  std::vector<double> first_token_ms{};  ///< first decode token − decode submit_ack
  std::vector<double> wait_ms{};         ///< first decode token − handoff received
  std::vector<double> transfer_ms{};     ///< the ticket's transfer_ms (the modelled transfer)
  std::vector<std::uint64_t> per_decode_target{};  ///< handoffs sent to each decode server
  /// Held KV released by the prefill servers' hold timeout during the run (their stats'
  /// handoff_expired, end − start); 0 from servers that do not report it.
  std::uint64_t expired_holds = 0;
};

/// What one run did besides what the collector recorded.
struct LiveReplayStats {
  double wall_ms = 0.0;                     ///< run start (after the handshake) to the last event
  std::vector<std::uint64_t> per_target{};  ///< requests sent to each (prefill) server
  /// Disaggregated: ranks_per_target, rank_offset, timing_start and timing_end list the prefill
  /// servers, then the decode servers; per_target counts first hops (decode: in `handoff`).
  std::optional<LiveHandoffStats> handoff{};
  std::vector<std::uint32_t> ranks_per_target{};  ///< DP ranks each server reported
  /// Global rank index of (target t, rank r) in EngineSample::dp_rank:
  /// rank_offset[t] + r (servers in --connect order, ranks in order).
  std::vector<std::uint32_t> rank_offset{};
  std::uint64_t submit_rejects = 0;   ///< submit_reject received
  std::uint64_t finish_rejected = 0;  ///< `finish: rejected` (refused by the scheduler)
  std::uint64_t finish_cancelled = 0;
  std::uint64_t finish_failed = 0;   ///< `error` / `shutdown` finishes
  std::uint64_t error_replies = 0;   ///< `error` messages (with or without a request id)
  std::uint64_t timeouts = 0;        ///< requests cancelled by the request timeout
  std::uint64_t send_failures = 0;   ///< submits that could not be sent (recorded failed)
  std::uint64_t undecodable = 0;     ///< messages that did not decode (ignored)
  std::uint64_t index_gaps = 0;      ///< output entries whose index skipped tokens
  std::uint64_t late_messages = 0;   ///< messages for requests that had already ended
  std::uint32_t max_in_flight = 0;   ///< most requests sent and not yet ended at once
  double max_dispatch_lag_ms = 0.0;  ///< latest send relative to its due time
  /// The driver's own lag (trace mode): how long after its due time each request was sent.
  double mean_dispatch_lag_ms = 0.0;
  double p99_dispatch_lag_ms = 0.0;
  /// Each server's pass timing (stats_reply.timing) at the start-up handshake and at the end of
  /// the run (a final stats round trip); nullopt from a server that does not report it.
  std::vector<std::optional<protocol::PassTiming>> timing_start{};
  /// What each server runs (stats_reply.engine at the handshake; same order as timing_start);
  /// nullopt from a server that does not report it.
  std::vector<std::optional<protocol::EngineInfo>> engines{};
  std::uint32_t kv_block_size = 0;  ///< Kv: the block size the router hashed with
  std::vector<std::optional<protocol::PassTiming>> timing_end{};
  /// Each server's handoff_expired (summed over its ranks; 0 when it reports none) at the
  /// handshake and at the end of the run.
  std::vector<std::uint64_t> handoff_expired_start{};
  std::vector<std::uint64_t> handoff_expired_end{};
  /// Each server's injected-fault counts (stats_reply.faults, since it started) at the
  /// handshake and in its last stats reply that carried them; nullopt from a server without
  /// faults configured (it sends none).
  std::vector<std::optional<protocol::FaultCounts>> faults_start{};
  std::vector<std::optional<protocol::FaultCounts>> faults_end{};
  std::vector<std::string> warnings{};  ///< e.g. the first reject/error reasons, aliasing
  // Worker health (worker_health.h): the (prefill) servers' state changes, in order.
  std::vector<HealthTransition> health{};
  /// Disaggregated: the decode servers' state changes (worker = decode server index), in order.
  std::vector<HealthTransition> decode_health{};
  std::uint64_t failed_by_down = 0;  ///< live requests ended (failed) when their server went down
  std::uint64_t no_worker = 0;       ///< requests failed at dispatch: every server was down
  /// Disaggregated: requests failed at their handoff: every decode server was down.
  std::uint64_t no_decode_worker = 0;
  std::uint64_t migrated_requests = 0;  ///< requests re-sent at least once (live_replay.h)
  std::uint64_t migrations = 0;         ///< re-sends, over every request
  /// With migration on: requests whose server was lost after their last token but before their
  /// finish, ended completed without a re-send (live_replay.h "Migration").
  std::uint64_t completed_when_lost = 0;
  // Kv router.
  std::uint64_t kv_routed_hits = 0;      ///< dispatches routed where overlap > 0
  std::uint64_t kv_query_failures = 0;   ///< overlap queries without an answer (overlap 0 used)
  std::uint64_t kv_batches_applied = 0;  ///< the index's counters at the end of the run
  std::uint64_t kv_gaps_detected = 0;
  std::uint64_t kv_gaps_healed = 0;
  std::uint64_t kv_resyncs = 0;
};

/// What `mocker replay --mode live` prints about timing fidelity: `text` holds one line for the
/// driver's dispatch lag (trace mode only) and one per server (passes published during the run,
/// their mean lateness over the run — from the start and end stats — and the p50 / p99 / max
/// and resyncs since the server started); `warnings` says when the results stopped being
/// faithful: dispatch lag p99 over 1 ms, a server's lateness p99 over 1 ms, or a resync.
struct LiveTimingSummary {
  std::string text;
  std::vector<std::string> warnings;
};
/// `num_prefill` > 0 (disaggregated): the first num_prefill servers are named "prefill server
/// i", the others "decode server i".
LiveTimingSummary summarizeLiveTiming(const LiveReplayStats& stats, bool closed_loop,
                                      std::size_t num_prefill = 0);

/// The report's handoff section of a live disaggregated run: handoffs, activations, refused
/// (decode rejects), expired holds (the prefill servers' handoff_expired over the run), transfer
/// = the tickets' modelled transfer_ms, wait = handoff received → first decode token; the
/// decode queueing is not observable by a client (empty).
HandoffReport summarizeLiveHandoffs(const LiveHandoffStats& stats);
/// One text line per client-side handoff figure (p50 / p99 / max of handoff_ms, decode_ack_ms,
/// first_token_ms) and the anomaly counters, for the live report's footer.
std::string formatLiveHandoffs(const LiveHandoffStats& stats);

/// mean_dispatch_lag_ms and p99_dispatch_lag_ms from the per-request lags (reordered); nothing
/// when there are none.
void summarizeDispatchLag(std::vector<double>& lags, LiveReplayStats& stats);
/// Counts a terminal that came as a `finish` entry: rejected, cancelled or failed (finish_*);
/// completed counts nothing.
void countFinish(TerminalStatus status, LiveReplayStats& stats);

/// A `stats_reply` of server `target` at `now_ms` during the run: its pass timing and holds
/// expired so far (timing_end, handoff_expired_end) and one engine sample per rank it has.
void recordStatsReply(const protocol::StatsReply& reply, std::uint32_t target, double now_ms,
                      LiveReplayStats& stats, ReplayCollector& collector);

/// Disaggregated (stats.handoff set): handoff->expired_holds = the sum over the first
/// `num_prefill` servers of handoff_expired_end − handoff_expired_start (0 where it fell).
void sumExpiredHolds(std::size_t num_prefill, LiveReplayStats& stats);

/// The faults the servers injected during the run, by kind: for every kind of stats_reply.faults
/// (in its wire order), the sum over the servers of faults_end − faults_start (a count absent at
/// the handshake counts from 0). nullopt when no server reported fault counts. A server's
/// counts are those of its last stats reply: a server that crashed answers none after its
/// crash, so its own `crash` is not in them (the worker-health lines show it).
std::optional<std::vector<std::pair<std::string, std::uint64_t>>> liveServerFaults(
    const LiveReplayStats& stats);

/// Holds released by the hold timeout, over a server's ranks (its stats_reply's handoff_expired;
/// 0 from a server without them).
std::uint64_t handoffExpiredOf(const protocol::StatsReply& reply);

}  // namespace mocker::replay
