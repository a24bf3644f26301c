// Live replay (docs/traces.md, Live replay and Closed loop): a load driver that
// sends a Workload's turns to one or more running `mocker serve` instances through the client
// protocol (service::Client, protocol/README.md) and records what the client sees into a
// ReplayCollector. Times are wall-clock milliseconds since the start of the run (taken after
// every server answered the start-up handshake).
//
// One thread, one loop: zmq_poll over every server's sockets with a timeout that ends at the next
// due dispatch, request timeout or stats poll — no other waiting, no sleeps.
//   * trace mode (open loop): a session's first turn is sent at wall offset = its normalised
//     first_arrival_ms; a later turn at (observed terminal of the previous turn + delay). A slow
//     response never delays other sessions' arrivals. Due turns go out in (eligibility, source
//     line, session, turn) order, as offline.
//   * closed loop (`concurrency`): first turns eligible at 0, and at most `concurrency` requests
//     in flight (sent and not yet ended); the next eligible turn goes out when one ends.
// Recorded per request: arrival = send time; admission = submit_ack receive time, with the
// `cached_tokens` of the first output as the reused tokens (first and last admission alike:
// readmissions after preemption are invisible to a client); one token time per output token =
// the receive time of its `output` message; the terminal at the receive time of the entry that
// carries `finish` (length → completed, rejected → rejected, cancelled → cancelled, error and
// shutdown → failed) or of a submit_reject (rejected) or an `error` naming the request (failed).
// A request without a terminal after `request_timeout_ms` is cancelled on the server and recorded
// as cancelled at that moment; whatever arrives for it later is ignored.
// Timing fidelity: the driver records how late it sent each request (dispatch lag), and asks
// every server for its pass lateness (stats_reply.timing) at the handshake and once more when
// the workload is done (waiting at most 2 s for the answers); see LiveReplayStats.
// Request ids are "r<dispatch index>" (unique per run). Routing: round-robin over the servers in
// dispatch order, or uniform random (SplitMix64(router_seed)) — the server picks the DP rank —,
// or kv: Dynamo's KV-router cost (kv_router.h) over every (server, rank), with the overlaps from
// an in-process `mocker index` (IndexService on its own thread, subscribed to every rank's KV
// events with gap healing through its replay ROUTER, asked over its query socket before each
// dispatch) and the load from what this driver dispatched (prefill done at the first output,
// released at the terminal); the request names the chosen rank.
//
// Not thread-safe; runs on the calling thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "engine/block_hash.h"
#include "protocol/client.h"
#include "service/security.h"
#include "tools/replay/collector.h"
#include "tools/replay/kv_router.h"
#include "tools/replay/workload.h"

namespace mocker::replay {

/// One running `mocker serve`: its submit and cancel ROUTER endpoints, and for the kv router its
/// KV-event PUB and replay ROUTER endpoints (one per DP rank, or only rank 0's: rank r then
/// uses port + r).
struct LiveTarget {
  std::string submit_endpoint;
  std::string cancel_endpoint;
  std::vector<std::string> kv_events{};
  std::vector<std::string> kv_replay{};
};

/// The cancel endpoint of a server whose submit endpoint is `submit_endpoint` when none is
/// given: the same tcp:// host with port + 1 (the `mocker serve` default layout). Errors for
/// other schemes (ipc://, inproc://: give the cancel endpoint explicitly), a missing or wildcard
/// port, or port 65535.
Result<std::string> defaultCancelEndpoint(std::string_view submit_endpoint);

/// How a dispatch picks its server.
enum class LiveRouterKind : std::uint8_t { RoundRobin, Random, Kv };

struct LiveProgress {
  std::uint64_t dispatched = 0;
  std::uint64_t ended = 0;
  std::uint64_t total = 0;  ///< turns in the workload
  double elapsed_ms = 0.0;
};

struct LiveReplayOptions {
  std::vector<LiveTarget> targets{};  ///< >= 1
  LiveRouterKind router = LiveRouterKind::RoundRobin;
  std::uint64_t router_seed = 0;
  KvRouterConfig kv_router{};         ///< Kv only
  std::uint32_t kv_block_size = 64;   ///< Kv: the servers' block size (>= 1)
  engine::HashSeeds kv_hash_seeds{};  ///< Kv: the servers' hash seeds
  /// Closed loop when set (>= 1): first-turn timestamps are ignored.
  std::optional<std::uint32_t> concurrency{};
  /// A request still without a terminal this long after it was sent is cancelled (> 0).
  double request_timeout_ms = 600'000.0;
  /// How long every server gets to answer the start-up `stats` handshake (> 0).
  double connect_timeout_ms = 10'000.0;
  /// Poll every server's `stats` this often for engine samples (KV usage, running, waiting,
  /// preemptions per rank); 0 = only at start and end.
  double stats_interval_ms = 1000.0;
  /// Called on the replay thread about ten times a second; may be empty.
  std::function<void(const LiveProgress&)> progress{};
  /// CURVE to every server (submit and cancel sockets); none = plain TCP.
  std::optional<service::CurveClientKeys> curve{};
};

/// What one run did besides what the collector recorded.
struct LiveReplayStats {
  double wall_ms = 0.0;                     ///< run start (after the handshake) to the last event
  std::vector<std::uint64_t> per_target{};  ///< requests sent to each server
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
  std::vector<std::optional<protocol::PassTiming>> timing_end{};
  std::vector<std::string> warnings{};  ///< e.g. the first reject/error reasons, aliasing
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
LiveTimingSummary summarizeLiveTiming(const LiveReplayStats& stats, bool closed_loop);

/// Runs the whole workload against the servers. Errors: no target, concurrency 0, a
/// non-positive timeout, a session without a first arrival in trace mode, a socket that cannot
/// connect, a server that does not answer the handshake within connect_timeout_ms (named by its
/// endpoint). Everything after the handshake (rejections, errors, silent servers) is recorded,
/// never an error.
Result<LiveReplayStats> runLiveReplay(const Workload& workload, const LiveReplayOptions& options,
                                      ReplayCollector& collector);

}  // namespace mocker::replay
