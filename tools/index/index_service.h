// IndexService: the engine of `mocker index` (tools/index/README.md) — a KV-event subscriber
// that keeps a router's prefix index (tools/index/kv_index.h) in step with one or more workers.
//
// Per configured rank endpoint ("connection"): a SUB on the worker's KV-event PUB and, when
// given, a DEALER on its replay ROUTER. Batches carry per-rank sequence numbers; a Sequencer
// per connection (tools/index/sequencer.h, no sockets) decides what to apply and what to ask
// for, and the service performs it: batches are applied strictly in order, duplicates and old
// seqs are dropped, out-of-order batches are buffered, a gap triggers a replay request (both
// reply layouts r1/r2), and a gap the replay cannot fill (the ring overran) is reported and
// healed by a resync: the source is cleared and rebuilt from the worker's kv_snapshot (client
// protocol, via the worker's submit endpoint), after which batches continue from the newest seq
// seen. At connect a replay from seq 0 covers the ZeroMQ slow-joiner window; an idle connection
// is probed with a replay from its next seq every probe interval so that lost tail batches are
// found too. A ROUTER answers overlap, stats and verify queries (protocol/index_query.h).
// Every socket read and write goes through net/zmq_io.h; a send that cannot be done is
// counted (requests_unsent, replies_unsent) and, for replay requests, retried. What is not
// socket I/O (sequencing, applying, verify, queries, counters) is IndexCore (index_core.h).
//
// Thread-safety: create, run() and destroy on one thread (the loop owns every socket and the
// index); requestStop() and stats() may be called from any thread (requestStop also from a
// signal handler: it writes an eventfd).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "engine/block_hash.h"
#include "protocol/index_query.h"
#include "tools/index/kv_index.h"
#include "tools/index/worker_spec.h"

namespace mocker::index {

/// Cumulative counters and gauges (a consistent copy, see IndexService::stats()).
struct IndexStats {
  double uptime_s = 0.0;
  std::uint64_t batches_received = 0;  ///< live + replayed messages that decoded as batches
  std::uint64_t live_messages = 0;     ///< messages read from the SUBs
  std::uint64_t batches_applied = 0;
  std::uint64_t duplicate_batches = 0;  ///< seq already applied (replay overlap, old seqs)
  std::uint64_t events_applied = 0;
  std::uint64_t blocks_applied = 0;  ///< hashes in applied Stored + Removed events
  std::uint64_t blocks_indexed = 0;  ///< (hash, source) pairs held now
  std::uint64_t distinct_hashes = 0;
  std::uint64_t sources = 0;
  std::uint64_t gaps_detected = 0;
  std::uint64_t gaps_healed = 0;    ///< filled through replay
  std::uint64_t gaps_unhealed = 0;  ///< ring overrun or no replay endpoint
  std::uint64_t resyncs = 0;        ///< sources rebuilt from kv_snapshot
  std::uint64_t resync_failures = 0;
  std::uint64_t restarts = 0;  ///< publisher restarts seen (live seq went back): blocks dropped
  std::uint64_t replay_requests = 0;
  std::uint64_t replay_timeouts = 0;
  std::uint64_t requests_unsent = 0;  ///< replay / kv_snapshot requests that could not be sent
  std::uint64_t replies_unsent = 0;   ///< query replies the ROUTER could not send (peer gone/full)
  std::uint64_t decode_errors = 0;    ///< batches whose payload did not decode
  std::uint64_t malformed_messages = 0;  ///< wrong frame count / seq size
  std::uint64_t rank_mismatches = 0;     ///< batch dp_rank differs from the connection's rank
  /// Stored / Removed events whose `medium` is none of GPU, CPU, DISK: skipped.
  std::uint64_t unknown_medium_events = 0;
  std::uint64_t queries = 0;
  std::uint64_t query_errors = 0;
  std::uint64_t verify_runs = 0;
  std::uint64_t verify_differences = 0;  ///< verify runs that found a difference or error
  std::uint64_t caught_up = 0;           ///< 1 when every connection finished its initial replay
};
/// Name → value pairs in a fixed order (the stats reply, --stats-json).
std::vector<std::pair<std::string, std::uint64_t>> statsCounters(const IndexStats& s);

struct IndexServiceConfig {
  std::vector<WorkerEndpoint> workers;
  std::string query_endpoint = "tcp://127.0.0.1:5560";  ///< ROUTER (binds); "" = no queries
  std::uint32_t block_size = 64;  ///< default for token queries (= mocker serve's vllm default)
  engine::HashSeeds seeds;        ///< default for token queries
  int sub_rcvhwm = 100000;        ///< ZMQ_RCVHWM of each SUB (0 = unlimited)
  int sub_rcvbuf = -1;            ///< ZMQ_RCVBUF of each SUB (-1 = OS default)
  int linger_ms = 100;            ///< ZMQ_LINGER of every socket on close
  /// CURVE on the query ROUTER (service/README.md, "Security"): this index's secret key (Z85)
  /// and the client public keys (Z85) allowed to query; an empty secret key = no CURVE.
  std::string query_curve_secret_key;
  std::vector<std::string> query_curve_clients;
  /// CURVE towards CURVE workers: their public key and this index's secret key (Z85), used on
  /// the replay and snapshot DEALERs and, with worker_curve_publishers, on the SUBs; empty = no
  /// CURVE. This index's public key must be on the workers' allow-list.
  std::string worker_curve_server_key;
  std::string worker_curve_secret_key;
  bool worker_curve_publishers = false;
  bool replay_at_start = true;  ///< ask replay(0) at connect (slow-joiner window)
  std::chrono::milliseconds probe_interval{1000};  ///< idle catch-up probe; 0 = off
  std::chrono::milliseconds replay_timeout{2000};
  std::chrono::milliseconds snapshot_timeout{5000};
  /// Called from run() every stats_interval (0 = never) and once when run() ends.
  std::chrono::milliseconds stats_interval{0};
  std::function<void(const IndexStats&)> on_stats;
  /// `--verify`: after the initial catch-up, run one verify and hand it to on_verify;
  /// `--once`: then stop.
  bool verify_at_start = false;
  bool stop_after_verify = false;
  std::function<void(const VerifyReply&)> on_verify;
};

class IndexService final {
 public:
  /// Creates the sockets (SUBs and DEALERs connect, the query ROUTER binds). Errors name the
  /// endpoint.
  static Result<std::unique_ptr<IndexService>> create(IndexServiceConfig config);
  ~IndexService();
  IndexService(const IndexService&) = delete;
  IndexService& operator=(const IndexService&) = delete;

  /// The bound query endpoint (ephemeral port resolved), "" when disabled.
  const std::string& queryEndpoint() const;

  /// Runs until requestStop() (or, with stop_after_verify, until the verify finished). Call once.
  Status run();
  /// Async-signal-safe; callable from any thread.
  void requestStop();

  /// A copy of the counters as of the end of the loop's last iteration. Any thread.
  IndexStats stats() const;

 private:
  class Impl;
  explicit IndexService(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mocker::index
