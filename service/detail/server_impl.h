// Server::Impl, the serve loop's state and steps, shared by the files that implement it:
//   server.cpp           setup, the loop (poll set, timeout, readable sockets), passes, shutdown
//   server_requests.cpp  sends, and the requests read from the submit and cancel sockets
//   server_streams.cpp   outputs delivered per client, owed messages, streams that end early
//   server_handoff.cpp   disaggregated prefill/decode: holds, kv_fetch / kv_release, handoffs
// Internal to service/ (see server.h for the design).
#pragma once

#include <spdlog/spdlog.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>
#include <zmq.hpp>

#include "engine/engine.h"
#include "net/connection_monitor.h"
#include "net/security.h"
#include "net/stop_event.h"
#include "net/zap_handler.h"
#include "net/zmq_io.h"
#include "protocol/client.h"
#include "service/admission.h"
#include "service/loop_clock.h"
#include "service/metrics_publisher.h"
#include "service/output_batcher.h"
#include "service/pending_handoffs.h"
#include "service/prefill_holds.h"
#include "service/rank_publishers.h"
#include "service/route_table.h"
#include "service/server.h"

namespace mocker::service {

class Server::Impl {
 public:
  using Clock = std::chrono::steady_clock;
  using ClientMessage = protocol::ClientMessage;
  using FinishReason = protocol::FinishReason;

  /// Submits read per loop iteration (the rest wait for the next one, after passes and outputs).
  static constexpr int kSubmitsPerIteration = 64;
  /// Submits read before the cancel socket is looked at again, within an iteration: a cancel
  /// waits behind at most this many submits, not a whole iteration's (the look costs one
  /// receive on an empty socket, ~1 µs, against ~10 µs per submit).
  static constexpr int kSubmitsBetweenCancels = 8;
  /// Submits read per iteration even when a pass end is due (the rest wait for the next
  /// iteration, after the pass is published): progress for submits, bounded delay for passes.
  static constexpr int kSubmitsPastDeadline = 8;
  /// How often a client owed a terminal message is retried while nothing else wakes the loop.
  static constexpr auto kOwedRetryInterval = std::chrono::milliseconds(5);
  /// A client whose sends keep failing with EHOSTUNREACH this long is considered gone.
  static constexpr auto kGoneAfter = std::chrono::milliseconds(1000);
  /// How far behind the modelled timeline a rank's next pass may start (catching up by running
  /// passes back to back) before the schedule gives up and starts it now (a resync: lateness
  /// is then inherited, and counted).
  static constexpr double kMaxCatchUpMs = 100.0;
  /// After client traffic, free heap memory is handed back to the OS at most this often.
  static constexpr auto kTrimInterval = std::chrono::milliseconds(1000);

  /// Who sent a message, beyond its routing id (service/README.md, "Ownership").
  struct Peer {
    std::string principal;  ///< the CURVE public key (Z85); empty without CURVE
    int connection_fd = -1;
  };
  static Peer peerOf(const std::vector<zmq::message_t>& parts);
  /// The "serve" logger (registered on first use).
  static std::shared_ptr<spdlog::logger> serveLogger();
  /// Sends one message on a decode worker's DEALER to a prefill worker, without blocking; false
  /// if it could not be queued (the pipe is full, or the socket failed).
  static bool sendToSource(zmq::socket_t& dealer, const ClientMessage& message);

  Impl(ServiceConfig config, ServerOptions options, engine::Engine&& engine)
      : config_(std::move(config)),
        options_(options),
        engine_(std::move(engine)),
        log_(options_.log_name.empty() ? serveLogger() : serveLogger()->clone(options_.log_name)),
        routes_(kGoneAfter),
        metrics_(config_, log_, start_,
                 [this](std::vector<engine::LoadMetrics>& load, ServiceMetrics& service) {
                   collectMetrics(load, service);
                 }) {}

  Status init();
  Status run();
  void requestStop() { stop_event_.notify(); }
  std::uint64_t numRefusedHandshakes() const { return zap_ ? zap_->numRefused() : 0; }
  const MetricsBoard& metricsBoard() const { return metrics_.board(); }
  bool crashed() const { return crashed_; }

  BoundEndpoints endpoints;
  ServerCounters counters;

 private:
  struct Rank {
    std::optional<engine::PassResult> in_flight;
    Clock::time_point deadline{};
    bool stalled = false;  // a pass made no progress: wait for input before stepping again
    // Where the next pass starts on the engine clock: the previous pass's modelled end while the
    // rank stays busy, the arrival of the submit that woke it when it was idle (none: now).
    std::optional<double> anchor_ms;
    RankPublishers pub;
    std::uint64_t passes = 0;  // passes this rank has run (fault triggers)
    bool hung = false;         // a `hang` fault: no pass starts any more
    bool fpm_stopped = false;  // an `fpm_stop` fault: no FPM (nor heartbeat) is published
    /// The rank's FPM publisher, null once an `fpm_stop` fault fired (its socket stays bound).
    publishers::FpmPublisher* fpm() const { return fpm_stopped ? nullptr : pub.fpm.get(); }
  };

  double engineNowMs() const { return clock_.engineMs(Clock::now()); }

  // Disaggregated prefill/decode (service/README.md "Disaggregated prefill/decode (live)").
  bool isPrefill() const { return config_.engine.worker_type == engine::WorkerType::Prefill; }
  bool isDecode() const { return config_.engine.worker_type == engine::WorkerType::Decode; }
  /// Prefill: sends the `handoff` of each ticket of a completed pass (or ends its request).
  void publishHandoffs(const engine::PassResult& pass);
  /// Prefill: frees held request `id` (no longer held) in the engine and closes its route.
  void endHeld(engine::RequestId id);
  void handleHandoffSocketMessage(std::vector<zmq::message_t>& parts);
  /// Prefill: answers a kv_fetch on the handoff ROUTER.
  void replyFetch(const PrefillHolds::Requester& to, const std::string& key,
                  protocol::KvFetchResult result);
  /// Prefill: answers the kv_fetches whose transfer end has come.
  void answerDueFetches();
  /// The kv_fetch fault (if any) that hits a fetch of `key`, its injection recorded; nullopt
  /// for none, or a key nothing fetchable is held under.
  std::optional<FaultPlan::FetchFaults> fetchFaults(const std::string& key);
  /// Decode: a submit carrying a ticket; the refusal reason, or the engine's id.
  Result<engine::RequestId> submitHandoff(const protocol::SubmitRequest& req, std::uint32_t rank,
                                          double now_ms);
  /// Decode: the DEALER to `source`, connected on first use; nullptr past the source limit.
  zmq::socket_t* sourceSocket(const std::string& source);
  /// Decode: sends the kv_fetch of every handoff the engine reserved since the last call.
  void sendFetches();
  void readFetchReplies(zmq::socket_t& dealer);
  /// Decode: ends a pending handoff's request with finish "error", reason `why` ("handoff: ...");
  /// `release`: tell the source to free the KV.
  void failHandoff(engine::RequestId id, std::string why, bool release);
  void expireFetches();

  // Sockets: setup, sends.
  Result<zmq::socket_t> makeRouter(const EndpointConfig& ep, std::string& resolved,
                                   const char* zap_domain = net::kZapDomain);
  Status startSecurity();
  /// Sets CURVE server options on a socket about to bind (no-op without CURVE).
  void secure(zmq::socket_t& socket, const char* zap_domain = net::kZapDomain) const {
    if (curve_) net::makeCurveServer(socket, *curve_, zap_domain);
  }
  net::SendOutcome sendTo(zmq::socket_t& socket, const std::string& client, bool delimiter,
                          std::vector<std::byte>&& payload);
  net::SendOutcome sendTo(zmq::socket_t& socket, const std::string& client, bool delimiter,
                          zmq::message_t&& payload);
  void reply(zmq::socket_t& socket, const net::RoutedEnvelope& to, const ClientMessage& message);

  // Requests: read and answer.
  void drainCancels();
  std::optional<ClientMessage> decodeRequest(zmq::socket_t& socket,
                                             const net::RoutedEnvelope& from);
  void handleCancelSocketMessage(std::vector<zmq::message_t>& parts);
  /// Reads up to `budget` submit-socket messages, stopping early (after kSubmitsPastDeadline)
  /// once `until` (the next pass end) has passed: a burst of large submits must not make the
  /// pass late. Every kSubmitsBetweenCancels submits, waiting cancels are served first.
  int drainSubmits(int budget, std::optional<Clock::time_point> until = std::nullopt);
  void handleSubmitSocketMessage(std::vector<zmq::message_t>& parts);
  /// Accepts one submit. Throws std::bad_alloc (engine and route table unchanged) when it runs
  /// out of memory; drainSubmits turns that into a `resource_exhausted` error.
  void handleSubmit(const net::RoutedEnvelope& from, const Peer& peer,
                    protocol::SubmitRequest&& req);
  /// Answers a submit-socket message that ran out of memory with `resource_exhausted`.
  void refuseOutOfMemory(std::vector<zmq::message_t>& parts);
  void handleCancel(zmq::socket_t& reply_socket, const net::RoutedEnvelope& from, const Peer& peer,
                    const protocol::CancelRequest& req);
  protocol::StatsReply statsReply(const net::RoutedEnvelope& from, const Peer& peer) const;
  /// The kv_snapshot reply, or the error when it would not fit the protocol's limits.
  ClientMessage kvSnapshotReply(const protocol::KvSnapshotRequest& req) const;
  // lora_load / lora_unload: done on the engine at once (Engine::loadLora / unloadLora).
  protocol::LoraReply loraReply(const protocol::LoraLoad& req);
  protocol::LoraReply loraReply(const protocol::LoraUnload& req);
  protocol::LoraReply loraReply(protocol::LoraOp op, const std::string& name,
                                const Result<bool>& done);
  bool submitsPaused() const {
    return service::submitsPaused(engine_, config_.service.max_submit_backlog);
  }

  // Passes: start, complete, deliver outputs.
  void startPasses();
  /// Whether passes wait for their modelled end (speedup_ratio > 0).
  bool paced() const { return config_.engine.speedup_ratio > 0; }
  void completeDuePasses(bool force);
  /// Publishes rank r's in-flight pass; `timed`: record its lateness (when its outputs go out).
  void completePass(std::uint32_t r, bool timed);
  void deliver();
  void heartbeats();
  void serviceReplays();
  void trimHeap();
  /// The gauges and counters of a metrics snapshot (MetricsPublisher calls it when due).
  void collectMetrics(std::vector<engine::LoadMetrics>& load, ServiceMetrics& service) const;
  /// Waits until the startup delay is over; false if a stop came first.
  bool awaitStartup();
  /// The poll timeout of this loop turn (pass ends, heartbeats, timers, retries); arms the pass
  /// timer at the earliest in-flight pass end, returned in `next_end`.
  std::chrono::milliseconds pollTimeout(Clock::time_point now,
                                        std::optional<Clock::time_point>& next_end);
  /// What one loop turn polls, by name (slots of `poll_`).
  struct PollSlots {
    net::PollSet::Slot stop = 0, pass_timer = 0, cancel = 0, submit = 0, monitor = 0;
    net::PollSet::Range replays;
    std::optional<net::PollSet::Slot> handoff;
    net::PollSet::Range sources;              ///< in sources_ order
    std::optional<net::PollSet::Slot> admin;  ///< the fault admin's wake-up
  };
  PollSlots fillPollSet();
  /// Reads what the poll found readable; false when a stop without drain ends the loop.
  bool serviceReadable(const PollSlots& slots, std::optional<Clock::time_point> next_end,
                       bool& draining);

  // Streams that end early: cancel in the engine, owe the client its terminal.
  void cancelInEngine(engine::RequestId id, std::uint32_t rank);
  /// The KV-event batch whose state the engine's cache of rank `r` is in now: the last one
  /// published, or the next one when a running pass has events still to publish at its end.
  std::optional<std::uint64_t> lastKvSeq(std::uint32_t r) const {
    const Rank& rank = ranks_[r];
    return rank.pub.lastKvSeq(rank.in_flight && !rank.in_flight->kv_events.empty());
  }
  void abandon(engine::RequestId id, std::string why);
  /// Forgets `client`, cancelling its active requests (counted in `cancelled`).
  void dropClient(const std::string& client, std::uint64_t& cancelled);
  void endClosedConnections();
  // Ends the clients on the connections in closed_fds_ (found by a drain) and clears it.
  void endConnectionsFoundClosed();
  /// What flush() left: the queue is empty, still waiting (pipe full), or the client is gone.
  enum class Flush { Done, Blocked, Gone };
  /// Sends `client`'s queue in order, as many messages as its pipe takes.
  Flush flush(const std::string& client);
  void retryOwed();
  /// Queues entry `e` of a batch that could not be sent, or abandons its request when its
  /// buffer is full.
  void bufferOrAbandon(const OutputBatcher::Entry& e);
  void shutdown();

  // Failure drills (service/README.md "Failure drills").
  /// Opens the fault plan and log from the configuration.
  Status initFaults();
  /// The worker faults before rank `r`'s next pass starting at `start_ms`: false when no pass
  /// may start (a crash or a hang); `slow_factor` set for the pass.
  bool passFaults(std::uint32_t r, double start_ms, double& slow_factor);
  /// Logs, counts and writes to the fault log what injections_ holds, then clears it.
  void recordInjections();
  /// Publishes rank `r`'s KV events of a pass as one batch, with the KV-event faults the plan
  /// picks for it (drop, suppress, duplicate, reorder, delay, truncate_ring).
  void publishKvEvents(std::uint32_t r, std::span<const engine::KvEvent> events);
  /// Sends the batches a `delay` fault held whose time has come; wakes `timeout` by the next.
  void releaseHeldBatches();
  void wakeForHeldBatches(PollTimeout& timeout, Clock::time_point now) const;
  /// A `crash` fault: every socket closed at once (linger 0), nothing more sent.
  void crash();
  /// A `restart` fault (restart_ set): the passes in flight dropped, every open stream ended
  /// `shutdown`, a fresh engine, the KV-event and FPM publishers started over (AllBlocksCleared
  /// first unless cleared=false); with down_ms, down_until_ set.
  Status restartWorker();
  /// While a restarted worker is down (down_until_): reads nothing and runs no pass, only the
  /// stop event and the fault admin are served. False when a stop came first.
  bool stayDown();
  /// The request faults of a new submit on `rank`: true when an `error` fault answered it;
  /// `silent` set when a `silent` fault takes it (recorded here; accepted, then left unanswered).
  bool submitFaults(const net::RoutedEnvelope& from, const std::string& id, std::uint32_t rank,
                    std::optional<FaultPlan::PendingAbort>& abort, bool& silent);
  /// Output signal `s` of a request an `abort` fault cuts: true when it is past the cut (not
  /// delivered; the stream ends after the pass, endAborted).
  bool cutByAbort(const engine::OutputSignal& s);
  /// Ends the streams cutByAbort cut in this pass: finish `error`, the request cancelled.
  void endAborted();
  /// The fault admin's commands waiting for this worker: armed or disarmed now.
  void applyAdminCommands();
  /// The faults armed here with their firings, as the admin interface lists them.
  std::vector<FaultAdmin::Listed> adminListing() const;

  ServiceConfig config_;
  ServerOptions options_;
  engine::Engine engine_;
  std::shared_ptr<spdlog::logger> log_;
  net::StopEvent stop_event_;
  PassTimer pass_timer_;  // fires at the earliest pass end
  LatenessStats lateness_;
  std::uint64_t resyncs_ = 0;
  bool stopping_ = false;
  Clock::time_point start_ = Clock::now();
  LoopClock clock_{start_};
  Clock::time_point accept_from_ = start_;

  // The context: options_.context when given (shared by a fleet), else one of this server's own.
  std::shared_ptr<zmq::context_t> context_owner_ =
      options_.context ? options_.context : std::make_shared<zmq::context_t>(1);
  zmq::context_t& context_ = *context_owner_;
  std::optional<net::CurveServerKeys> curve_;  // set iff security.curve
  std::unique_ptr<net::ZapHandler> zap_;       // before every socket: destroyed after them
  zmq::socket_t submit_;
  zmq::socket_t cancel_;
  std::unique_ptr<net::ConnectionMonitor> submit_monitor_;
  std::vector<int> closed_fds_;  // scratch: submit connections that closed
  std::vector<Rank> ranks_;
  net::PollSet poll_;
  zmq::socket_t handoff_;                         // prefill worker: handoff ROUTER
  PrefillHolds holds_{config_.engine};            // prefill: KV held for decode workers
  PendingHandoffs pending_;                       // decode: handoffs waiting for their KV
  std::map<std::string, zmq::socket_t> sources_;  // decode: DEALER per prefill worker
  net::CurveClientKeys handoff_client_;           // decode: CURVE toward sources (or disabled)

  RouteTable routes_;
  OutputBatcher batcher_;
  std::vector<std::string> gone_;                   // scratch: clients found gone while delivering
  std::vector<protocol::RequestOutputView> views_;  // scratch: queued outputs being encoded
  std::uint64_t reads_since_trim_ = 0;              // client messages read since the last trimHeap
  Clock::time_point last_trim_ = start_;
  std::size_t iterations_since_check_ = 0;  // debug builds: loop turns since the routes' check
  AddressSpaceProbe address_space_;         // refuses submits when memory runs out

  // The fault admin interface (null: off); before metrics_, whose HTTP server reads it.
  std::shared_ptr<FaultAdmin> admin_ = options_.fault_admin;
  std::map<std::uint32_t, std::uint64_t> fired_;  // injections per fault id (admin listing)
  bool admin_stale_ = false;                      // fired_ changed since the last publish

  MetricsPublisher metrics_;  // after log_ and start_, which it is built from

  FaultPlan faults_;
  std::shared_ptr<FaultLog> fault_log_;
  std::vector<Injection> injections_;  // scratch: what the plan injected, to record
  std::unordered_map<engine::RequestId, FaultPlan::PendingAbort> aborts_;  // armed `abort`s
  std::vector<engine::RequestId> aborting_;  // scratch: streams cut in this pass
  bool crashed_ = false;
  struct PendingRestart {
    bool cleared = true;
    double down_ms = 0.0;
  };
  std::optional<PendingRestart> restart_;        // a `restart` fault fired: restart now
  std::optional<Clock::time_point> down_until_;  // a restarted worker is down until then
  bool hang_reported_ = false;                   // /health already told when to fail
  bool metrics_frozen_ = false;                  // a `metrics_freeze` fault fired
};

}  // namespace mocker::service
