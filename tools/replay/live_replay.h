// Live replay (docs/traces.md, Live replay and Closed loop): a load driver that
// sends a Workload's turns to one or more running `mocker serve` instances through the client
// protocol (net::Client, protocol/README.md) and records what the client sees into a
// ReplayCollector. Times are wall-clock milliseconds since the start of the run (taken after
// every server answered the start-up handshake).
//
// One thread, one loop: Client::waitReadable over every server's sockets, with a timeout that
// ends at the next due dispatch, request timeout or stats poll — no other waiting, no sleeps.
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
// Workers that fail (worker_health.h): each (prefill) server's submit connection is watched and
// its acks and outputs timed; a server that is Down (connection closed or no ack, then suspect
// for too long; or hung: no output while holding work) gets no new request from any router
// (round_robin takes the next server up, random draws among the servers up, kv leaves its ranks
// out of the choice), and the requests it holds are migrated (below) or else ended at once as
// failed (a best-effort cancel goes to it either way). With every server down a request fails
// at once. The transitions, with their detection times, are in LiveReplayStats::health. The
// choice of server is LiveRouter's (live_router.h).
//
// Migration (`migration_limit` > 0; Dynamo's request migration): a request held by a server
// that is declared down — before its first token or mid-stream — is re-sent at once to a server
// the router picks among those up, with the original prompt followed by every token it
// streamed so far and max_tokens less those tokens (migratedSubmit, live_requests.h), as
// "r<index>.<k>" for its k-th migration (messages for an earlier attempt are ignored). A request
// is migrated at most `migration_limit` times; past that, or with no server up, it ends failed.
// One that had streamed every output token lost only its finish: it ends completed, not re-sent
// (lostRequestStep, live_requests.h; LiveReplayStats::completed_when_lost). A submit that cannot
// be sent (dispatch or re-send) is lost the same way: re-sent to another routable server, the
// refusing one left out, while the limit allows (each try is a migration); else failed.
// The client sees one request: its arrival, admission (the first ack that led to tokens), token
// times and deadline are unchanged, so its latency includes the detour (detection + the new
// server's prefill). Counted per request (RequestRecord::migrations) and in
// LiveReplayStats::migrated_requests / migrations. Disaggregated: the decode servers are watched
// by the same rule (LiveReplayStats::decode_health): a handoff goes to a decode server up (none:
// the request fails, the prefill server's KV released); the requests a decode server that went
// down holds are completed, migrated through hop 1 again (prefill of the prompt and the tokens
// so far, a new handoff) or failed, as a prefill server's.
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
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "engine/block_hash.h"
#include "net/security.h"
#include "protocol/client.h"
#include "tools/replay/collector.h"
#include "tools/replay/kv_router.h"
#include "tools/replay/live_connect.h"
#include "tools/replay/live_router.h"
#include "tools/replay/live_stats.h"
#include "tools/replay/router_kind.h"
#include "tools/replay/worker_health.h"
#include "tools/replay/workload.h"

namespace mocker::replay {

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
  /// When a (prefill) server counts as down and gets no more requests (worker_health.h).
  WorkerHealthConfig worker_health{};
  /// How many times one request may be migrated (re-sent to another server when its server goes
  /// down, or its submit could not be sent: "Migration" above); 0 = never, Dynamo's default.
  /// Without worker_health.enabled only submits that cannot be sent are migrated.
  std::uint32_t migration_limit = 0;
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
  std::optional<net::CurveClientKeys> curve{};
};

/// The option errors runLiveReplay reports before it connects: no target, concurrency 0, a
/// non-positive timeout, a session without a first arrival in trace mode, kv_prefix, a bad kv
/// router or worker health setting, migration without worker health.
Status validateLiveReplayOptions(const Workload& workload, const LiveReplayOptions& options);

/// The router over the (prefill) servers, whose DP ranks are the first targets.size() entries
/// of `ranks_per_server` (the start-up handshake's), and the decode hop.
LiveRouterConfig liveRouterConfig(const LiveReplayOptions& options,
                                  std::span<const std::uint32_t> ranks_per_server);

/// Runs the whole workload against the servers. Errors: no target, concurrency 0, a
/// non-positive timeout, a session without a first arrival in trace mode, a socket that cannot
/// connect, a server that does not answer the handshake within connect_timeout_ms (named by its
/// endpoint). Everything after the handshake (rejections, errors, silent servers) is recorded,
/// never an error.
Result<LiveReplayStats> runLiveReplay(const Workload& workload, const LiveReplayOptions& options,
                                      ReplayCollector& collector);

}  // namespace mocker::replay
