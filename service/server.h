// Server: the live service behind `mocker serve` — the loop that owns the sockets.
//
// One thread — the one that calls run() — owns the engine and every ZeroMQ socket:
//   submit  ROUTER  submits, stats, kv_snapshot (and cancels); streamed outputs go back here
//   cancel  ROUTER  cancels only, read before submits, never behind a submission backlog
//   kv[r]   PUB + replay ROUTER per DP rank (vLLM-compatible KV events)
//   fpm[r]  PUB per DP rank (Dynamo-compatible forward-pass metrics)
//   handoff ROUTER (prefill worker): kv_fetch / kv_release from decode workers
//   DEALER per prefill worker a decode worker fetches KV from (created on demand, bounded)
// and runs a zmq_poll loop whose timeout is the time left until the earliest in-flight pass (or
// heartbeat) is due. Each pass of a rank is computed at its start (engine.step), then the loop
// waits its modelled duration / speedup_ratio — servicing cancels and reading submits meanwhile
// — and publishes at the pass boundary: KV events and FPM, then outputs, one message per client.
// speedup_ratio = 0 publishes as soon as a pass is computed. An idle loop blocks in poll.
//
// The bookkeeping is in socket-free units the loop calls: RouteTable (who owns which request,
// what it was sent, owed terminals), OutputBatcher (a pass's outputs -> one message per client),
// LoopClock / PollTimeout (engine time <-> wall time, the poll timeout), admission (limits,
// rank choice, paused submits, the address-space probe), PrefillHolds / PendingHandoffs (the
// two sides of a live handoff); RankPublishers opens each rank's publishers. Server::Impl lives
// in service/detail/server_impl.h, implemented in server*.cpp; service/README.md has the file
// table.
//
// Backpressure: the submit ROUTER uses ROUTER_MANDATORY; what a client is owed but could not be
// sent (its pipe is full) waits in its queue, in order — acks, outputs, terminals — each request
// holding at most max_buffered_outputs undelivered signals; one more abandons that request
// (cancelled in the engine at once, terminal `cancelled` after its buffered outputs). A client
// that stays unroutable (EHOSTUNREACH) for a second is considered gone and forgotten. Nothing
// ever blocks the loop. Every message sent stays within protocol/limits.h (split as needed).
//
// Thread-safety: construct, run() and destroy on one thread; requestStop() may be called from
// any thread or a signal handler (it writes an eventfd).
#pragma once

#include <array>
#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/result.h"
#include "service/config.h"
#include "service/fault_admin.h"
#include "service/fault_log.h"
#include "service/fault_plan.h"

namespace zmq {
class context_t;
}

namespace mocker::service {

class MetricsBoard;

/// The resolved endpoints (ephemeral ports filled in), for logs and tests.
struct BoundEndpoints {
  std::string submit;
  std::string cancel;
  std::vector<std::string> kv_events;  ///< per DP rank (empty when disabled)
  std::vector<std::string> kv_replay;
  std::vector<std::string> fpm;
  std::string http;     ///< "http://HOST:PORT" (/metrics, /health, /ready); empty when disabled
  std::string handoff;  ///< prefill worker's handoff ROUTER; empty for other worker types
};

/// Counters for tests and logs.
struct ServerCounters {
  std::uint64_t submits = 0;
  std::uint64_t rejected_submits = 0;
  std::uint64_t limit_rejections = 0;  ///< submits refused by a [limits] limit
  std::uint64_t cancels_applied = 0;
  std::uint64_t cancels_not_found = 0;
  std::uint64_t cancels_denied = 0;  ///< cancels naming another client's requests
  std::uint64_t disconnect_cancels =
      0;  ///< active requests cancelled when a client's connection closed
  std::uint64_t backpressure_cancels = 0;
  std::uint64_t unroutable_cancels = 0;  ///< active requests cancelled when a client was gone
  std::uint64_t unroutable_sends = 0;    ///< output sends answered EHOSTUNREACH
  /// Clients forgotten with open routes (unroutable for kGoneAfter, or connection closed):
  /// nothing more is sent to them, not even the terminals of streams the engine finished.
  std::uint64_t clients_gone = 0;
  std::uint64_t malformed_messages = 0;
  std::uint64_t passes = 0;
  std::uint64_t output_messages = 0;
  std::uint64_t dropped_replies = 0;   ///< rejects, errors, cancel and stats replies not sent
  std::uint64_t queued_acks = 0;       ///< acks that waited in the client's queue (pipe full)
  std::uint64_t buffered_outputs = 0;  ///< output entries that waited in the client's queue
  std::uint64_t dropped_shutdown_messages = 0;  ///< clients whose final messages did not all go
  // Disaggregated prefill/decode (service/README.md "Disaggregated prefill/decode (live)").
  std::uint64_t handoffs_sent = 0;      ///< prefill: `handoff` messages sent to clients
  std::uint64_t kv_fetches_ready = 0;   ///< prefill: kv_fetch answered ready (KV released)
  std::uint64_t kv_fetches_missed = 0;  ///< prefill: kv_fetch answered not_found
  std::uint64_t kv_releases = 0;        ///< prefill: kv_release that freed a held request
  std::uint64_t handoff_expired = 0;    ///< prefill: holds ended by kv_hold_timeout_ms
  std::uint64_t handoff_failures = 0;   ///< decode: handoffs ended with a `handoff:` error
  // Failure drills (service/README.md "Failure drills").
  std::array<std::uint64_t, kNumFaultKinds> faults_injected{};  ///< by FaultKind
  std::uint64_t slowed_passes = 0;                              ///< passes a `slow` fault stretched
  std::uint64_t fault_errors = 0;        ///< submits answered with an injected `error`
  std::uint64_t fault_aborts = 0;        ///< streams an `abort` fault ended
  std::uint64_t fault_silenced = 0;      ///< submits a `silent` fault acknowledged and left
  std::uint64_t restart_ended = 0;       ///< streams a `restart` fault ended `shutdown`
  std::uint64_t fault_log_failures = 0;  ///< fault-log lines that could not be written
};

struct ServerOptions {
  /// Finish every in-flight request before exiting on stop (`--drain`); otherwise each gets a
  /// terminal `shutdown` message.
  bool drain = false;
  /// Called once on the run() thread when the service starts serving: after the startup delay
  /// (`engine.startup_time_s`), just before the first request is read. `mocker serve` prints
  /// `ready` here. Not called when a stop comes first.
  std::function<void()> on_ready;
  /// The ZeroMQ context to open the sockets in (a fleet shares one, and its I/O threads, between
  /// its workers); null = a context of this server's own. Not with security.curve: a context has
  /// one ZAP handler, so each CURVE server needs its own context.
  std::shared_ptr<zmq::context_t> context;
  /// The process serves this server's /metrics, /health and /ready elsewhere (a fleet's one
  /// HTTP endpoint reads metricsBoard()): endpoints.http is not bound, but the loop publishes
  /// its metrics and turns at least once a second as with HTTP on.
  bool external_http = false;
  /// The logger name of this server's lines ("" = "serve"); a fleet names each worker's
  /// "serve[<worker id>]" so that its lines (the stats line included) can be told apart. Same
  /// sinks and level as "serve".
  std::string log_name;
  /// This server's index in its fleet (0 alone): which `[faults]` specs with `worker=` apply.
  std::uint32_t worker_index = 0;
  /// The fault log shared by a fleet's workers; null = the server opens `faults.log` itself
  /// (when set).
  std::shared_ptr<FaultLog> fault_log;
  /// The fault admin interface a fleet's HTTP endpoint serves (box `worker_index` is this
  /// server's); null = the server makes its own when `faults.admin` is on and it serves HTTP.
  std::shared_ptr<FaultAdmin> fault_admin;
};

class Server final {
 public:
  /// Creates the engine and binds/connects every socket. Errors name the endpoint.
  static Result<std::unique_ptr<Server>> create(ServiceConfig config, ServerOptions options = {});
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  const BoundEndpoints& endpoints() const;

  /// Waits out the startup delay (reading nothing), calls options.on_ready, serves until
  /// requestStop(); then shuts down (service/README.md, Shutdown) and returns. Call once.
  Status run();

  /// Asks run() to stop. Async-signal-safe; callable from any thread.
  void requestStop();

  /// What the HTTP thread reads (ServerOptions::external_http); lives as long as the server.
  const MetricsBoard& metricsBoard() const;

  /// Whether run() ended because a `crash` fault fired (its sockets are closed, nothing was
  /// sent to the clients); `mocker serve` then exits with kFaultCrashExitCode.
  bool crashed() const;

  /// Counters; read only from the run() thread or after run() returned.
  const ServerCounters& counters() const;

  /// CURVE handshakes the ZAP handler refused (key not on the allow-list); 0 without CURVE.
  /// Callable from any thread.
  std::uint64_t numRefusedHandshakes() const;

 private:
  class Impl;
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mocker::service
