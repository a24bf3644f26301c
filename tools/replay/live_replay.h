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
// Disaggregated (decode_targets non-empty; tools/replay/README.md, Disaggregated replay): the
// `targets` are `mocker serve --worker-type prefill` servers and `decode_targets` `--worker-type
// decode` servers. Hop 1 sends the submit to a prefill server (router / kv over the prefill
// servers only); its `handoff` message makes hop 2: the same submit plus the ticket, unchanged, to
// the decode server chosen by `decode_router` (round_robin: dispatch index mod D; random:
// SplitMix64(router_seed) mixed with the dispatch index; kv = overlap credit 0: the decode server
// with the fewest requests handed to it and not ended, ties to the lowest index), sent when the
// handoff arrives. The request is recorded as the client sees it end to end: arrival = the
// prefill send, admission = the prefill submit_ack (as offline: the prefill admission; reuse =
// token 0's cached_tokens, the ticket's), tokens and terminal from the decode stream; a prefill
// submit_reject / terminal entry (a 0-token request completes there: nothing to decode), or a
// decode submit_reject (the prefill worker's held KV is then released by a cancel to it), ends it
// there. A request timeout cancels on the worker that holds
// the request: the prefill server until the decode submit was sent, then the decode server. Both
// connections stay open to the end.
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
#include "tools/replay/router_kind.h"
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

/// The endpoint `offset` ports after a server's tcp://HOST:PORT submit endpoint, when none is
/// given (the `mocker serve` default layout: cancel + 1, kv_events + 2, kv_replay + 3). `what`
/// names it in errors ("the cancel endpoint"), `flag` the option that gives it explicitly.
/// Errors for text that is no endpoint (e.g. "missing tcp://"), other schemes (ipc://,
/// inproc://), a missing or wildcard port, or a port past 65535 - offset.
Result<std::string> defaultEndpointAfter(std::string_view submit_endpoint, std::uint32_t offset,
                                         std::string_view what, std::string_view flag);

/// defaultEndpointAfter(submit_endpoint, 1): the cancel endpoint (--connect-cancel).
Result<std::string> defaultCancelEndpoint(std::string_view submit_endpoint);

struct LiveProgress {
  std::uint64_t dispatched = 0;
  std::uint64_t ended = 0;
  std::uint64_t total = 0;  ///< turns in the workload
  double elapsed_ms = 0.0;
};

struct LiveReplayOptions {
  std::vector<LiveTarget> targets{};  ///< >= 1 (the prefill servers when disaggregated)
  /// Disaggregated when non-empty: the decode servers (handoff targets).
  std::vector<LiveTarget> decode_targets{};
  /// Disaggregated: how a handoff picks its decode server (Kv = fewest requests in flight).
  RouterKind decode_router = RouterKind::RoundRobin;
  /// How a dispatch picks its server (RoundRobin, Random or Kv; KvPrefix is offline only).
  RouterKind router = RouterKind::RoundRobin;
  std::uint64_t router_seed = 0;
  KvRouterConfig kv_router{};  ///< Kv only
  /// Kv: the servers' block size; 0 = the one they report at start-up (stats_reply.engine). Set:
  /// a server that reports another one is an error (its KV events would not match the hashes).
  std::uint32_t kv_block_size = 0;
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

/// The kv router's block size: `given` (--router-block-size; 0 = not given) or the one every
/// server reports (`engines[t]`, stats_reply.engine; `servers[t]` names it). Errors: a server
/// that reports another size than `given`, servers that disagree, no size given and one server
/// that does not report it.
Result<std::uint32_t> resolveKvBlockSize(
    std::uint32_t given, const std::vector<std::optional<protocol::EngineInfo>>& engines,
    const std::vector<std::string>& servers);

/// Runs the whole workload against the servers. Errors: no target, concurrency 0, a
/// non-positive timeout, a session without a first arrival in trace mode, a socket that cannot
/// connect, a server that does not answer the handshake within connect_timeout_ms (named by its
/// endpoint). Everything after the handshake (rejections, errors, silent servers) is recorded,
/// never an error.
Result<LiveReplayStats> runLiveReplay(const Workload& workload, const LiveReplayOptions& options,
                                      ReplayCollector& collector);

}  // namespace mocker::replay
