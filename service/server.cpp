// The serve loop (see server.h for the design): sockets, the engine, and the glue between them.
//
// Per pass of rank r:   start: step(r, now) -> PassResult held "in flight", deadline computed
//                       wait:  poll cancels/submits/replay until the deadline
//                       end:   KV events + FPM -> outputs (OutputBatcher, one message per client)
// Request bookkeeping is the RouteTable's; this file decides what to do on each socket outcome:
// a failed output send abandons the streams of that message (cancel in the engine, owe the
// terminal), an owed terminal is retried until it is sent or the client is gone.
#include "service/server.h"

#include <malloc.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/random.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <limits>
#include <map>
#include <new>
#include <optional>
#include <zmq.hpp>

#include "base/check.h"
#include "engine/engine.h"
#include "protocol/client.h"
#include "protocol/kv_events.h"
#include "protocol/limits.h"
#include "publishers/fpm_publisher.h"
#include "publishers/kv_event_publisher.h"
#include "publishers/zmq_sinks.h"
#include "service/connection_monitor.h"
#include "service/loop_clock.h"
#include "service/metrics_publisher.h"
#include "service/output_batcher.h"
#include "service/route_table.h"
#include "service/security.h"
#include "service/stop_event.h"
#include "service/zap_handler.h"
#include "service/zmq_io.h"

namespace mocker::service {
namespace {

using Clock = std::chrono::steady_clock;
using protocol::ClientMessage;
using protocol::FinishReason;

/// Submits read per loop iteration before cancels are looked at again (cancel latency bound).
constexpr int kSubmitsPerIteration = 64;
/// Submits read per iteration even when a pass end is due (the rest wait for the next iteration,
/// after the pass is published): progress for submits, bounded delay for passes.
constexpr int kSubmitsPastDeadline = 8;
/// How often a client owed a terminal message is retried while nothing else wakes the loop.
constexpr auto kOwedRetryInterval = std::chrono::milliseconds(5);
/// ZMQ_MAXMSGSIZE of the replay ROUTER: a request is 9 bytes; larger frames drop the peer. With
/// CURVE the handshake commands must fit as well.
const std::int64_t kReplayMaxMessageBytes = publishers::ZmqReplayConfig{}.max_request_bytes;
constexpr std::int64_t kCurveReplayMaxMessageBytes = 1024;
/// A client whose sends keep failing with EHOSTUNREACH this long is considered gone.
constexpr auto kGoneAfter = std::chrono::milliseconds(1000);
/// How far behind the modelled timeline a rank's next pass may start (catching up by running
/// passes back to back) before the schedule gives up and starts it now (a resync: lateness is
/// then inherited, and counted).
constexpr double kMaxCatchUpMs = 100.0;
/// After client traffic, free heap memory is handed back to the OS at most this often.
constexpr auto kTrimInterval = std::chrono::milliseconds(1000);
/// Address space a submit must leave unused: what the passes running the already queued work
/// may still need (memory follows the tokens generated). Below it, submits are refused.
constexpr std::size_t kSubmitHeadroomBytes = std::size_t{64} << 20;
/// The headroom is probed once this many bytes of requests were accepted since the last probe
/// (a probe costs ~10 µs; 1 MiB is ~1,500 small requests, or every request of 256 k tokens).
constexpr std::size_t kProbeEveryBytes = std::size_t{1} << 20;
/// What a queued request costs besides its token ids (engine record, queue slot, route).
constexpr std::size_t kRequestOverheadBytes = 640;

/// True if `bytes` more of address space can still be mapped (RLIMIT_AS, overcommit): maps and
/// unmaps them without touching a page (~10 µs on this 2-core VM under load).
bool addressSpaceLeft(std::size_t bytes) {
  void* probe = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (probe == MAP_FAILED) return false;
  munmap(probe, bytes);
  return true;
}

double unixSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::shared_ptr<spdlog::logger> serveLogger() {
  auto logger = spdlog::get("serve");
  if (!logger) {
    logger = spdlog::default_logger()->clone("serve");
    spdlog::register_logger(logger);
  }
  return logger;
}

// A message owning `payload`'s buffer: libzmq frees it (from its I/O thread) once written, so
// an output batch of a few KiB is not copied again. Small payloads are copied, which is cheaper.
zmq::message_t adoptPayload(std::vector<std::byte>&& payload) {
  constexpr std::size_t kCopyBelow = 256;
  if (payload.size() < kCopyBelow) return zmq::message_t(payload.data(), payload.size());
  auto owned = std::make_unique<std::vector<std::byte>>(std::move(payload));
  zmq::message_t msg(
      owned->data(), owned->size(),
      [](void* /*data*/, void* hint) { delete static_cast<std::vector<std::byte>*>(hint); },
      owned.get());
  owned.release();  // libzmq owns it now
  return msg;
}

/// Who sent a message, beyond its routing id (service/README.md, "Ownership").
struct Peer {
  std::string principal;  ///< the CURVE public key (Z85); empty without CURVE
  int connection_fd = -1;
};

/// Whether a bound endpoint is reachable only from this host (loopback, ipc, inproc).
bool loopbackOnly(const std::string& endpoint) {
  if (!endpoint.starts_with("tcp://")) return true;
  const std::string host = endpoint.substr(6, endpoint.rfind(':') - 6);
  return host == "localhost" || host.starts_with("127.") || host == "[::1]" || host == "::1";
}

/// An unguessable handoff key (protocol::kHandoffKeyBytes bytes from the OS's random source).
std::string randomHandoffKey() {
  std::string key(protocol::kHandoffKeyBytes, '\0');
  std::size_t got = 0;
  while (got < key.size()) {
    const ssize_t n = getrandom(key.data() + got, key.size() - got, 0);
    if (n > 0) {
      got += static_cast<std::size_t>(n);
    } else {
      MOCKER_CHECK(n < 0 && errno == EINTR);  // getrandom(2) only fails that way here
    }
  }
  return key;
}

/// Sends one message on a decode worker's DEALER to a prefill worker, without blocking; false if
/// it could not be queued (the pipe is full, or the socket failed).
bool sendToSource(zmq::socket_t& dealer, const ClientMessage& message) {
  const std::vector<std::byte> payload = protocol::encodeClientMessage(message);
  try {
    return dealer.send(zmq::buffer(payload.data(), payload.size()), zmq::send_flags::dontwait)
        .has_value();
  } catch (const zmq::error_t&) {
    return false;
  }
}

Peer peerOf(const std::vector<zmq::message_t>& parts) {
  if (parts.empty()) return {};
  return {peerUserId(parts.back()).value_or(std::string()), connectionFd(parts.back())};
}

}  // namespace

class Server::Impl {
 public:
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
    std::unique_ptr<publishers::ZmqPubSink> kv_sink;
    std::unique_ptr<publishers::KvEventPublisher> kv;
    std::unique_ptr<publishers::ZmqReplayServer> replay;
    std::unique_ptr<publishers::ZmqPubSink> fpm_sink;
    std::unique_ptr<publishers::FpmPublisher> fpm;
  };

  double engineNowMs() const { return clock_.engineMs(Clock::now()); }

  // Disaggregated prefill/decode (service/README.md "Disaggregated prefill/decode (live)").
  /// Prefill worker: a request whose KV is held for a decode worker, by its handoff key.
  struct Held {
    engine::RequestId id;
    double prefill_end_ms = 0.0;   ///< engine time its prefill pass ended
    std::uint32_t max_tokens = 0;  ///< transferable tokens: the prompt rounded up to blocks
    bool fetching = false;         ///< a kv_fetch is being answered (at its transfer end)
  };
  /// Prefill worker: a kv_fetch answered at its modelled transfer end.
  struct PendingFetch {
    Clock::time_point due;
    std::string key;
    std::string peer;  ///< the decode worker's routing id on the handoff ROUTER
    bool delimiter = false;
  };
  /// Decode worker: a handoff submit waiting for its KV (until ready or failed).
  struct PendingHandoff {
    std::string source;
    std::string key;
    std::optional<Clock::time_point> deadline;  ///< set when its kv_fetch went out
  };
  bool isPrefill() const { return config_.engine.worker_type == engine::WorkerType::Prefill; }
  bool isDecode() const { return config_.engine.worker_type == engine::WorkerType::Decode; }
  /// Prefill: sends the `handoff` of each ticket of a completed pass (or ends its request).
  void publishHandoffs(const engine::PassResult& pass);
  /// Prefill: frees held request `key` in the engine and closes its route.
  void releaseHeld(std::unordered_map<std::string, Held>::iterator it);
  void handleHandoffSocketMessage(std::vector<zmq::message_t>& parts);
  /// Prefill: answers the kv_fetches whose transfer end has come.
  void answerDueFetches();
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
                                   const char* zap_domain = kZapDomain);
  Status startSecurity();
  /// CURVE for the PUB sockets when security.curve_publishers (else nothing).
  std::function<void(zmq::socket_t&)> publisherSecurity() {
    if (!config_.security.curve_publishers) return {};
    return [this](zmq::socket_t& s) { secure(s); };
  }
  /// Sets CURVE server options on a socket about to bind (no-op without CURVE).
  void secure(zmq::socket_t& socket, const char* zap_domain = kZapDomain) const {
    if (curve_) makeCurveServer(socket, *curve_, zap_domain);
  }
  /// Warns when `endpoint` is bound where other hosts can reach it and CURVE is off for it.
  void warnIfExposed(const std::string& what, const std::string& endpoint, bool curve_on,
                     bool publisher = false) const;
  /// The limit a submit would break, as the error to answer it with; nullopt if none.
  std::optional<Error> limitBroken(const std::string& client, const Peer& peer,
                                   const protocol::SubmitRequest& req);
  SendOutcome sendTo(zmq::socket_t& socket, const std::string& client, bool delimiter,
                     std::vector<std::byte>&& payload);
  void reply(zmq::socket_t& socket, const RoutedEnvelope& to, const ClientMessage& message);

  // Requests: read and answer.
  void drainCancels();
  std::optional<ClientMessage> decodeRequest(zmq::socket_t& socket, const RoutedEnvelope& from);
  void handleCancelSocketMessage(std::vector<zmq::message_t>& parts);
  /// Reads up to `budget` submit-socket messages, stopping early (after kSubmitsPastDeadline)
  /// once `until` (the next pass end) has passed: a burst of large submits must not make the
  /// pass late.
  int drainSubmits(int budget, std::optional<Clock::time_point> until = std::nullopt);
  void handleSubmitSocketMessage(std::vector<zmq::message_t>& parts);
  /// Accepts one submit. Throws std::bad_alloc (engine and route table unchanged) when it runs
  /// out of memory; drainSubmits turns that into a `resource_exhausted` error.
  void handleSubmit(const RoutedEnvelope& from, const Peer& peer, protocol::SubmitRequest&& req);
  /// Answers a submit-socket message that ran out of memory with `resource_exhausted`.
  void refuseOutOfMemory(std::vector<zmq::message_t>& parts);
  void handleCancel(zmq::socket_t& reply_socket, const RoutedEnvelope& from, const Peer& peer,
                    const protocol::CancelRequest& req);
  protocol::StatsReply statsReply(const RoutedEnvelope& from, const Peer& peer) const;
  bool submitsPaused() const;
  std::uint32_t chooseRank() const;

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

  // Streams that end early: cancel in the engine, owe the client its terminal.
  void cancelInEngine(engine::RequestId id, std::uint32_t rank);
  /// The KV-event batch whose state the engine's cache of rank `r` is in now: the last one
  /// published, or the next one when a running pass has events still to publish at its end.
  std::optional<std::uint64_t> lastKvSeq(std::uint32_t r) const;
  void abandon(engine::RequestId id, std::string why);
  /// Forgets `client`, cancelling its active requests (counted in `cancelled`).
  void dropClient(const std::string& client, std::uint64_t& cancelled);
  void endClosedConnections();
  /// What flush() left: the queue is empty, still waiting (pipe full), or the client is gone.
  enum class Flush { Done, Blocked, Gone };
  /// Sends `client`'s queue in order, as many messages as its pipe takes.
  Flush flush(const std::string& client);
  void retryOwed();
  /// Queues entry `e` of a batch that could not be sent, or abandons its request when its
  /// buffer is full.
  void bufferOrAbandon(const OutputBatcher::Entry& e);
  void shutdown();

  ServiceConfig config_;
  ServerOptions options_;
  engine::Engine engine_;
  std::shared_ptr<spdlog::logger> log_;
  StopEvent stop_event_;
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
  std::optional<CurveServerKeys> curve_;  // set iff security.curve
  std::unique_ptr<ZapHandler> zap_;       // before every socket: destroyed after them
  zmq::socket_t submit_;
  zmq::socket_t cancel_;
  std::unique_ptr<ConnectionMonitor> submit_monitor_;
  std::vector<int> closed_fds_;  // scratch: submit connections that closed
  std::vector<Rank> ranks_;
  zmq::socket_t handoff_;                                          // prefill worker: handoff ROUTER
  std::unordered_map<std::string, Held> held_;                     // prefill: by handoff key
  std::unordered_map<engine::RequestId, std::string> held_keys_;   // prefill: engine id → key
  std::vector<PendingFetch> fetches_;                              // prefill: kv_fetches, any order
  std::unordered_map<engine::RequestId, PendingHandoff> pending_;  // decode: waiting for KV
  std::unordered_map<std::string, engine::RequestId> pending_keys_;  // decode: key → engine id
  std::map<std::string, zmq::socket_t> sources_;  // decode: DEALER per prefill worker
  CurveClientKeys handoff_client_;                // decode: CURVE toward sources (or disabled)

  RouteTable routes_;
  OutputBatcher batcher_;
  std::vector<std::string> gone_;                   // scratch: clients found gone while delivering
  std::vector<protocol::RequestOutputView> views_;  // scratch: queued outputs being encoded
  std::uint64_t reads_since_trim_ = 0;              // client messages read since the last trimHeap
  Clock::time_point last_trim_ = start_;
  std::size_t iterations_since_check_ = 0;  // debug builds: loop turns since the routes' check
  std::size_t unprobed_bytes_ = 0;          // request bytes accepted since the last headroom probe

  MetricsPublisher metrics_;  // after log_ and start_, which it is built from
};

Result<zmq::socket_t> Server::Impl::makeRouter(const EndpointConfig& ep, std::string& resolved,
                                               const char* zap_domain) {
  try {
    zmq::socket_t s(context_, zmq::socket_type::router);
    secure(s, zap_domain);
    s.set(zmq::sockopt::router_mandatory, 1);
    s.set(zmq::sockopt::linger, static_cast<int>(config_.service.linger_ms));
    s.set(zmq::sockopt::sndhwm, static_cast<int>(config_.service.submit_sndhwm));
    s.set(zmq::sockopt::rcvhwm, static_cast<int>(config_.service.submit_rcvhwm));
    s.set(zmq::sockopt::maxmsgsize, config_.service.max_message_size);
    if (ep.connect) {
      s.connect(ep.endpoint);
      resolved = ep.endpoint;
    } else {
      s.bind(ep.endpoint);
      resolved = s.get(zmq::sockopt::last_endpoint);
    }
    return s;
  } catch (const zmq::error_t& e) {
    return Error{ErrorCode::IoError, "endpoint '" + ep.endpoint + "': " + e.what()};
  }
}

Status Server::Impl::startSecurity() {
  if (isDecode()) {
    MOCKER_TRY(handoff_client_, loadHandoffClientKeys(config_.security));
  }
  if (!config_.security.curve) return {};
  MOCKER_TRY(curve_, loadCurveServerKeys(config_.security));
  // The handler is bound before any CURVE socket: a CURVE socket without one accepts any key.
  MOCKER_TRY(zap_, ZapHandler::start(context_, {{kZapDomain, curve_->allowed_clients},
                                                {kHandoffZapDomain, curve_->allowed_workers}}));
  log_->info("CURVE on: server public key {}, {} client key(s) allowed", curve_->public_key,
             curve_->allowed_clients.size());
  if (isPrefill()) {
    log_->info("CURVE on the handoff socket: {} worker key(s) allowed",
               curve_->allowed_workers.size());
  }
  return {};
}

void Server::Impl::warnIfExposed(const std::string& what, const std::string& endpoint,
                                 bool curve_on, bool publisher) const {
  if (curve_on || loopbackOnly(endpoint)) return;
  if (publisher) {
    log_->warn(
        "{} is bound to {}, reachable from other hosts, without CURVE: anyone who can connect "
        "can subscribe (set [security] curve_publishers = true, or bind to 127.0.0.1)",
        what, endpoint);
    return;
  }
  log_->warn(
      "{} is bound to {}, reachable from other hosts, without CURVE: anyone who can connect can "
      "submit, cancel and read as any client (set [security] curve = true, or bind to 127.0.0.1)",
      what, endpoint);
}

Status Server::Impl::init() {
  if (!stop_event_.valid()) return Error{ErrorCode::IoError, "eventfd failed"};
  if (!pass_timer_.valid()) return Error{ErrorCode::IoError, "timerfd_create failed"};
  MOCKER_TRY_VOID(startSecurity());
  MOCKER_TRY(submit_, makeRouter(config_.endpoints.submit, endpoints.submit));
  MOCKER_TRY(cancel_, makeRouter(config_.endpoints.cancel, endpoints.cancel));
  MOCKER_TRY(submit_monitor_, ConnectionMonitor::create(context_, submit_, "submit"));
  const bool curve_on = curve_.has_value();
  if (!config_.endpoints.submit.connect) warnIfExposed("submit", endpoints.submit, curve_on);
  if (!config_.endpoints.cancel.connect) warnIfExposed("cancel", endpoints.cancel, curve_on);
  if (isPrefill()) {
    MOCKER_TRY(handoff_,
               makeRouter(config_.endpoints.handoff, endpoints.handoff, kHandoffZapDomain));
    if (!config_.endpoints.handoff.connect) warnIfExposed("handoff", endpoints.handoff, curve_on);
  }
  const std::uint32_t dp = config_.engine.dp_size;
  ranks_.resize(dp);
  const bool events_on = config_.kv_events.enabled && config_.engine.enable_prefix_caching;
  for (std::uint32_t r = 0; r < dp; ++r) {
    Rank& rank = ranks_[r];
    if (config_.kv_events.enabled) {
      MOCKER_TRY(const std::string ep, rankEndpoint(config_.endpoints.kv_events, r));
      MOCKER_TRY(rank.kv_sink,
                 publishers::ZmqPubSink::create(
                     context_, {.endpoint = ep,
                                .connect = config_.endpoints.kv_events.connect,
                                .sndhwm = static_cast<int>(config_.kv_events.hwm),
                                .linger_ms = static_cast<int>(config_.service.linger_ms),
                                .configure = publisherSecurity()}));
      endpoints.kv_events.push_back(rank.kv_sink->endpoint());
      if (!config_.endpoints.kv_events.connect) {
        warnIfExposed("kv_events[" + std::to_string(r) + "]", rank.kv_sink->endpoint(),
                      config_.security.curve_publishers, /*publisher=*/true);
      }
      publishers::KvEventPublisherConfig kc;
      kc.dp_rank = r;
      kc.topic = config_.kv_events.topic;
      kc.encoding.layout = config_.kv_events.layout;
      kc.encoding.parent_root = config_.kv_events.parent_root;
      kc.encoding.force_uint64_hashes = config_.kv_events.force_uint64_hashes;
      kc.buffer_steps = config_.kv_events.buffer_steps;
      kc.replay_layout = config_.kv_events.replay_layout;
      MOCKER_TRY(rank.kv, publishers::KvEventPublisher::create(kc, *rank.kv_sink));
      if (config_.kv_events.replay_enabled) {
        MOCKER_TRY(const std::string rep, rankEndpoint(config_.endpoints.kv_replay, r));
        MOCKER_TRY(rank.replay, publishers::ZmqReplayServer::create(
                                    context_,
                                    {.endpoint = rep,
                                     .connect = config_.endpoints.kv_replay.connect,
                                     .linger_ms = static_cast<int>(config_.service.linger_ms),
                                     // A CURVE handshake's commands (HELLO is 200 bytes) pass
                                     // through ZMQ_MAXMSGSIZE too: 64 bytes refuses them all.
                                     .max_request_bytes = curve_on ? kCurveReplayMaxMessageBytes
                                                                   : kReplayMaxMessageBytes,
                                     .configure = [this](zmq::socket_t& s) { secure(s); }},
                                    *rank.kv));
        endpoints.kv_replay.push_back(rank.replay->endpoint());
        warnIfExposed("kv_replay[" + std::to_string(r) + "]", rank.replay->endpoint(), curve_on);
      }
      if (config_.kv_events.clear_on_start && events_on) {
        rank.kv->publishEvents({protocol::AllBlocksClearedEvent{}}, unixSeconds());
      }
    }
    if (config_.fpm.enabled) {
      MOCKER_TRY(const std::string ep, rankEndpoint(config_.endpoints.fpm, r));
      MOCKER_TRY(rank.fpm_sink,
                 publishers::ZmqPubSink::create(
                     context_, {.endpoint = ep,
                                .connect = config_.endpoints.fpm.connect,
                                .linger_ms = static_cast<int>(config_.service.linger_ms),
                                .configure = publisherSecurity()}));
      endpoints.fpm.push_back(rank.fpm_sink->endpoint());
      if (!config_.endpoints.fpm.connect) {
        warnIfExposed("fpm[" + std::to_string(r) + "]", rank.fpm_sink->endpoint(),
                      config_.security.curve_publishers, /*publisher=*/true);
      }
      MOCKER_TRY(rank.fpm, publishers::FpmPublisher::create(
                               {.worker_id = config_.fpm.worker_id,
                                .dp_rank = r,
                                .heartbeat_interval_s = config_.service.fpm_heartbeat_interval_s},
                               *rank.fpm_sink));
    }
  }
  if (options_.external_http) {
    metrics_.serveExternally();
  } else if (config_.endpoints.http.enabled) {
    MOCKER_TRY(endpoints.http, metrics_.startHttp(config_.endpoints.http));
  }
  if (config_.service.startup_time_s) {
    accept_from_ = start_ + std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double>(*config_.service.startup_time_s));
  }
  return {};
}

// --- Sends: every message to a client goes through sendTo ---------------------------------

SendOutcome Server::Impl::sendTo(zmq::socket_t& socket, const std::string& client, bool delimiter,
                                 std::vector<std::byte>&& payload) {
  std::string error;
  const SendOutcome out =
      trySendRouted(socket, client, delimiter, adoptPayload(std::move(payload)), &error);
  if (out != SendOutcome::Failed) return out;
  log_->error("send to a client failed: {}", error);
  return SendOutcome::Unroutable;
}

void Server::Impl::reply(zmq::socket_t& socket, const RoutedEnvelope& to,
                         const ClientMessage& message) {
  // Replies (acks, errors, stats) are best effort: a client that does not read loses them (and
  // they are counted). Whether a client is gone is decided only by its streams.
  const SendOutcome out =
      sendTo(socket, to.routing_id, to.delimiter, protocol::encodeClientMessage(message));
  if (out != SendOutcome::Sent) {
    ++counters.dropped_replies;
    log_->debug("reply \"{}\" not sent: {}", protocol::messageType(message), sendOutcomeName(out));
  }
}

// --- Requests: read from the cancel and submit sockets, answered at once -----------------

void Server::Impl::drainCancels() {
  std::vector<zmq::message_t> parts;
  drainSocket(
      cancel_, parts, -1, [&](std::vector<zmq::message_t>& p) { handleCancelSocketMessage(p); },
      [&](std::string_view error) { log_->warn("cancel socket receive failed: {}", error); });
}

std::optional<ClientMessage> Server::Impl::decodeRequest(zmq::socket_t& socket,
                                                         const RoutedEnvelope& from) {
  if (from.error) {
    ++counters.malformed_messages;
    reply(socket, from, protocol::ErrorReply{from.error->code, from.error->message, std::nullopt});
    return std::nullopt;
  }
  auto msg = protocol::decodeClientMessage(from.payload);
  if (!msg) {
    ++counters.malformed_messages;
    log_->debug("malformed message from a client: {}", msg.error().message);
    reply(socket, from,
          protocol::ErrorReply{msg.error().code, msg.error().message,
                               protocol::peekRequestId(from.payload)});
    return std::nullopt;
  }
  return std::move(*msg);
}

void Server::Impl::handleCancelSocketMessage(std::vector<zmq::message_t>& parts) {
  ++reads_since_trim_;
  const RoutedEnvelope from = splitRoutedEnvelope(parts, protocol::kMaxMessageBytes);
  auto msg = decodeRequest(cancel_, from);
  if (!msg) return;
  if (auto* c = std::get_if<protocol::CancelRequest>(&*msg)) {
    handleCancel(cancel_, from, peerOf(parts), *c);
  } else {
    ++counters.malformed_messages;
    reply(cancel_, from,
          protocol::ErrorReply{ErrorCode::InvalidArgument,
                               "the cancel socket accepts only \"cancel\" messages (got \"" +
                                   std::string(protocol::messageType(*msg)) + "\")",
                               std::nullopt});
  }
}

int Server::Impl::drainSubmits(int budget, std::optional<Clock::time_point> until) {
  std::vector<zmq::message_t> parts;
  std::string error;
  int n = 0;
  // One message at a time: a submit may pause further submits (backlog limit).
  while (n < budget && !submitsPaused() &&
         !(until && n >= kSubmitsPastDeadline && Clock::now() >= *until)) {
    const RecvOutcome got = tryRecvMultipart(submit_, parts, &error);
    if (got == RecvOutcome::Failed) log_->warn("submit socket receive failed: {}", error);
    if (got != RecvOutcome::Received) break;
    ++n;
    try {
      handleSubmitSocketMessage(parts);
    } catch (const std::bad_alloc&) {
      // No client input aborts the service: a message whose decoding or queueing ran out of
      // memory is refused with `resource_exhausted` (every step left its state unchanged) and
      // the loop keeps serving the others.
      refuseOutOfMemory(parts);
    }
  }
  return n;
}

void Server::Impl::refuseOutOfMemory(std::vector<zmq::message_t>& parts) {
  ++counters.rejected_submits;
  try {
    const RoutedEnvelope from = splitRoutedEnvelope(parts, protocol::kMaxMessageBytes);
    reply(submit_, from,
          protocol::ErrorReply{ErrorCode::ResourceExhausted,
                               "out of memory: the service could not accept this message (retry "
                               "later)",
                               from.error ? std::nullopt : protocol::peekRequestId(from.payload)});
  } catch (const std::bad_alloc&) {
    ++counters.dropped_replies;  // not even the refusal fits; the client may retry
  }
}

void Server::Impl::handleSubmitSocketMessage(std::vector<zmq::message_t>& parts) {
  ++reads_since_trim_;
  // A connection that closed before this message arrived is forgotten first: its descriptor may
  // be the one this message came on.
  endClosedConnections();
  const RoutedEnvelope from = splitRoutedEnvelope(parts, protocol::kMaxMessageBytes);
  const Peer peer = peerOf(parts);
  if (ClientEntry* known = from.error ? nullptr : routes_.findClient(from.routing_id)) {
    if (known->connection_fd != peer.connection_fd || known->principal != peer.principal) {
      // Another connection holds this routing id now, so the one that owned these requests is
      // closed: they end here and nothing of them reaches the newcomer.
      dropClient(from.routing_id, counters.disconnect_cancels);
    } else {
      known->delimiter = from.delimiter;  // streams go back framed the way it last framed
    }
  }
  auto msg = decodeRequest(submit_, from);
  if (!msg) return;
  std::visit(
      [&](auto&& m) {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, protocol::SubmitRequest>) {
          if (stopping_) {
            reply(submit_, from, protocol::SubmitReject{m.id, "the service is shutting down"});
            return;
          }
          handleSubmit(from, peer, std::move(m));
        } else if constexpr (std::is_same_v<T, protocol::CancelRequest>) {
          handleCancel(submit_, from, peer, m);
        } else if constexpr (std::is_same_v<T, protocol::StatsRequest>) {
          reply(submit_, from, statsReply(from, peer));
        } else if constexpr (std::is_same_v<T, protocol::KvSnapshotRequest>) {
          protocol::KvSnapshotReply s;
          // The reply must stay within the protocol's limits: 9 bytes per hash at most.
          std::size_t bytes = 64;
          std::size_t most = 0;
          for (std::uint32_t r = 0; r < engine_.dpSize(); ++r) {
            if (m.dp_rank && *m.dp_rank != r) continue;
            s.ranks.push_back({r, engine_.cachedBlockHashes(r), lastKvSeq(r)});
            bytes += 32 + 9 * s.ranks.back().block_hashes.size();
            most = std::max(most, s.ranks.back().block_hashes.size());
          }
          if (bytes > protocol::kMaxMessageBytes || most > protocol::kMaxSnapshotBlocksPerRank) {
            reply(submit_, from,
                  protocol::ErrorReply{
                      ErrorCode::InvalidArgument,
                      "kv_snapshot: the reply would take up to " + std::to_string(bytes) +
                          " bytes (" + std::to_string(most) +
                          " block hashes on the largest rank), over the message limit of " +
                          std::to_string(protocol::kMaxMessageBytes) + " bytes and " +
                          std::to_string(protocol::kMaxSnapshotBlocksPerRank) +
                          " hashes per rank; ask for one rank at a time (dp_rank)",
                      std::nullopt});
            return;
          }
          if (m.dp_rank && *m.dp_rank >= engine_.dpSize()) {
            reply(submit_, from,
                  protocol::ErrorReply{ErrorCode::InvalidArgument,
                                       "dp_rank " + std::to_string(*m.dp_rank) +
                                           " is out of range (dp_size " +
                                           std::to_string(engine_.dpSize()) + ")",
                                       std::nullopt});
            return;
          }
          reply(submit_, from, s);
        } else {
          ++counters.malformed_messages;
          reply(submit_, from,
                protocol::ErrorReply{ErrorCode::InvalidArgument,
                                     "unexpected message type \"" +
                                         std::string(protocol::messageType(ClientMessage{m})) +
                                         "\" from a client",
                                     std::nullopt});
        }
      },
      std::move(*msg));
}

protocol::StatsReply Server::Impl::statsReply(const RoutedEnvelope& from, const Peer& peer) const {
  protocol::StatsReply s;
  for (std::uint32_t r = 0; r < engine_.dpSize(); ++r) {
    const engine::LoadMetrics l = engine_.loadMetrics(r);
    s.ranks.push_back({r, l.active_blocks, l.total_blocks, l.kv_usage, l.running_requests,
                       l.waiting_requests, l.preemptions_total, l.prefix_cache_queries_tokens,
                       l.prefix_cache_hits_tokens});
    if (config_.engine.worker_type != engine::WorkerType::Aggregated) {
      s.ranks.back().held = l.held_requests;
      s.ranks.back().pending_handoffs = l.pending_handoffs;
      s.ranks.back().handoff_expired = l.handoff_expired;
    }
  }
  s.routes = routes_.numRoutes();
  s.client_entries = routes_.numClients();
  s.timing = protocol::PassTiming{.passes = lateness_.count(),
                                  .resyncs = resyncs_,
                                  .lateness_mean_ms = lateness_.meanMs(),
                                  .lateness_p50_ms = lateness_.quantileMs(0.5),
                                  .lateness_p99_ms = lateness_.quantileMs(0.99),
                                  .lateness_max_ms = lateness_.maxMs()};
  s.engine =
      protocol::EngineInfo{.engine_type = std::string(engine::toString(config_.engine.engine_type)),
                           .worker_type = std::string(engine::toString(config_.engine.worker_type)),
                           .block_size = engine::effectiveBlockSize(config_.engine),
                           .speedup_ratio = config_.engine.speedup_ratio};
  // Only the sender's own entries: its routing id, or with CURVE every routing id of its key.
  for (protocol::ClientRoutes& c : routes_.routesPerClient()) {
    const bool own = peer.principal.empty() ? c.client == from.routing_id
                                            : routes_.principalOf(c.client) == peer.principal;
    if (own) s.clients.push_back(std::move(c));
  }
  fitStatsReply(s);
  return s;
}

bool Server::Impl::submitsPaused() const {
  std::uint64_t waiting = 0;
  for (std::uint32_t r = 0; r < engine_.dpSize(); ++r) {
    waiting += engine_.loadMetrics(r).waiting_requests;
  }
  return waiting >= config_.service.max_submit_backlog;
}

std::uint32_t Server::Impl::chooseRank() const {
  // Least loaded rank (running + waiting), lowest index on ties.
  std::uint32_t best = 0;
  std::uint64_t best_load = std::numeric_limits<std::uint64_t>::max();
  for (std::uint32_t r = 0; r < engine_.dpSize(); ++r) {
    const auto l = engine_.loadMetrics(r);
    const std::uint64_t load = l.running_requests + l.waiting_requests;
    if (load < best_load) {
      best = r;
      best_load = load;
    }
  }
  return best;
}

std::optional<Error> Server::Impl::limitBroken(const std::string& client, const Peer& peer,
                                               const protocol::SubmitRequest& req) {
  const LimitsConfig& lim = config_.limits;
  const std::uint64_t output =
      req.output_tokens ? req.output_tokens->size() : std::uint64_t{req.max_tokens};
  const std::uint64_t tokens = req.prompt.size() + output;
  if (tokens > lim.max_request_tokens) {
    return Error{ErrorCode::InvalidArgument,
                 "limits.max_request_tokens: " + std::to_string(req.prompt.size()) + " prompt + " +
                     std::to_string(output) + " output tokens = " + std::to_string(tokens) +
                     " exceeds the limit of " + std::to_string(lim.max_request_tokens)};
  }
  const ClientEntry* entry = routes_.findClient(client);
  if (entry == nullptr && routes_.numClients() >= lim.max_clients) {
    return Error{ErrorCode::ResourceExhausted,
                 "limits.max_clients: " + std::to_string(routes_.numClients()) +
                     " clients already have requests in flight (limit " +
                     std::to_string(lim.max_clients) + ")"};
  }
  // With CURVE the client is its key, whatever routing ids it uses; without, its routing id.
  const std::uint64_t client_routes = !peer.principal.empty()
                                          ? routes_.routesOfPrincipal(peer.principal)
                                      : entry != nullptr ? entry->num_routes
                                                         : 0;
  if (client_routes >= lim.max_requests_per_client) {
    return Error{ErrorCode::ResourceExhausted,
                 "limits.max_requests_per_client: this client " +
                     std::string(peer.principal.empty() ? "" : "(its CURVE key) ") +
                     "already has " + std::to_string(client_routes) +
                     " requests in flight (limit " + std::to_string(lim.max_requests_per_client) +
                     ")"};
  }
  if (routes_.numRoutes() >= lim.max_requests) {
    return Error{ErrorCode::ResourceExhausted,
                 "limits.max_requests: " + std::to_string(routes_.numRoutes()) +
                     " requests are in flight (limit " + std::to_string(lim.max_requests) + ")"};
  }
  return std::nullopt;
}

void Server::Impl::handleSubmit(const RoutedEnvelope& from, const Peer& peer,
                                protocol::SubmitRequest&& req) {
  ++counters.submits;
  const std::string client(from.routing_id);
  if (auto broken = limitBroken(client, peer, req)) {
    ++counters.rejected_submits;
    ++counters.limit_rejections;
    reply(submit_, from, protocol::ErrorReply{broken->code, std::move(broken->message), req.id});
    return;
  }
  if (routes_.findByKey(client, req.id)) {
    ++counters.rejected_submits;
    reply(submit_, from,
          protocol::SubmitReject{req.id, "duplicate active request id '" + req.id + "'"});
    return;
  }
  const std::size_t cost =
      kRequestOverheadBytes +
      sizeof(std::uint32_t) *
          (req.prompt.size() + (req.output_tokens ? req.output_tokens->size() : 0));
  if (unprobed_bytes_ + cost >= kProbeEveryBytes) {
    if (!addressSpaceLeft(kSubmitHeadroomBytes)) {
      ++counters.rejected_submits;
      reply(submit_, from,
            protocol::ErrorReply{ErrorCode::ResourceExhausted,
                                 "out of memory: less than 64 MiB of address space left for the "
                                 "queued work; the request was not queued (retry later)",
                                 req.id});
      return;
    }
    unprobed_bytes_ = 0;
  }
  const std::uint32_t rank = req.dp_rank.value_or(chooseRank());
  const auto prompt_tokens = static_cast<std::uint32_t>(req.prompt.size());
  const std::uint64_t output_len =
      req.output_tokens ? req.output_tokens->size() : std::uint64_t{req.max_tokens};
  const double er_arrival_ms = engineNowMs();
  Result<engine::RequestId> id = engine::RequestId{0};
  if (req.handoff || isDecode()) {
    id = submitHandoff(req, rank, er_arrival_ms);
  } else {
    engine::Request er{.tokens = std::move(req.prompt),
                       .max_output_tokens = req.max_tokens,
                       .output_token_ids = std::move(req.output_tokens),
                       .dp_rank = rank,
                       // The client's arrival_ms is informational: the engine's clock starts
                       // when the service receives the request.
                       .arrival_ms = er_arrival_ms};
    id = engine_.submit(std::move(er));
  }
  if (!id) {
    ++counters.rejected_submits;
    if (id.error().code == ErrorCode::ResourceExhausted) {
      reply(submit_, from, protocol::ErrorReply{id.error().code, id.error().message, req.id});
    } else {
      reply(submit_, from, protocol::SubmitReject{req.id, id.error().message});
    }
    return;
  }
  metrics_.onSubmit(*id, rank, engineNowMs(), prompt_tokens);
  // At most max_buffered_outputs undelivered signals, capped at the request's output length
  // (Dynamo's min(output_len, 8)), at least 1.
  const auto cap = static_cast<std::uint32_t>(std::max<std::uint64_t>(
      1, std::min<std::uint64_t>(config_.service.max_buffered_outputs, output_len)));
  ClientEntry* opened = nullptr;
  try {
    opened = routes_.open(client, req.id, *id, rank, from.delimiter, cap, peer.principal).owner;
  } catch (const std::bad_alloc&) {
    (void)engine_.cancel(*id);  // both unchanged: the caller refuses with resource_exhausted
    throw;
  }
  if (req.handoff && isDecode()) {
    try {
      pending_keys_.emplace(req.handoff->key, *id);
      pending_.emplace(*id, PendingHandoff{req.handoff->source, req.handoff->key, std::nullopt});
    } catch (const std::bad_alloc&) {
      pending_keys_.erase(req.handoff->key);
      routes_.close(*id);
      (void)engine_.cancel(*id);
      throw;
    }
  }
  ClientEntry& owner = *opened;
  owner.connection_fd = peer.connection_fd;
  unprobed_bytes_ += cost;
  Rank& woken = ranks_[rank];
  woken.stalled = false;
  // An idle rank starts its next pass at this arrival on the modelled timeline (a busy one at
  // its current pass's end, which it already holds).
  if (!woken.in_flight && !woken.anchor_ms) woken.anchor_ms = er_arrival_ms;
  // The ack goes before anything else of this request: sent now if nothing older waits for
  // the client, else queued behind what does (and then sent first of this request's items).
  if (owner.queue.empty()) {
    const auto outcome = sendTo(submit_, client, from.delimiter,
                                protocol::encodeClientMessage(protocol::SubmitAck{req.id, rank}));
    if (outcome == SendOutcome::Sent) {
      RouteTable::noteRoutable(owner);
      return;
    }
    if (outcome == SendOutcome::Unroutable) (void)routes_.noteUnroutable(owner, Clock::now());
  }
  ++counters.queued_acks;
  routes_.oweAck(*id);
}

void Server::Impl::handleCancel(zmq::socket_t& reply_socket, const RoutedEnvelope& from,
                                const Peer& peer, const protocol::CancelRequest& req) {
  // A cancel applies only to the sender's own requests (service/README.md, "Ownership"). Without
  // CURVE the sender is its routing id, so `client` may only repeat it; with CURVE it is its key,
  // and `client` may name any routing id the same key submitted from.
  const std::string owner = req.client.value_or(std::string(from.routing_id));
  if (peer.principal.empty() && owner != from.routing_id) {
    ++counters.cancels_denied;
    reply(reply_socket, from,
          protocol::ErrorReply{ErrorCode::PermissionDenied,
                               "client: names another client's routing id; without CURVE "
                               "authentication a cancel applies only to the sender's own requests",
                               req.id});
    return;
  }
  const auto id = routes_.findByKey(owner, req.id);
  if (!id || routes_.find(*id)->state != RouteState::Active ||
      routes_.find(*id)->owner->principal != peer.principal) {
    ++counters.cancels_not_found;
    reply(reply_socket, from, protocol::CancelReply{req.id, protocol::CancelResult::NotFound});
    return;
  }
  if (held_keys_.contains(*id)) {
    // Handed off already (the `handoff` replaced its stream): the held KV is freed, and nothing
    // more is sent for it.
    cancelInEngine(*id, routes_.find(*id)->rank);
    routes_.close(*id);
    ++counters.cancels_applied;
    reply(reply_socket, from, protocol::CancelReply{req.id, protocol::CancelResult::Applied});
    return;
  }
  // Applied even while a pass is in flight: the request leaves the engine now and its outputs
  // of that pass are dropped; other requests' outputs are untouched.
  cancelInEngine(*id, routes_.find(*id)->rank);
  ++counters.cancels_applied;
  routes_.oweTerminal(*id, FinishReason::Cancelled, "cancelled");
  // The canceller learns first; then the stream's terminal goes out at once if it can.
  reply(reply_socket, from, protocol::CancelReply{req.id, protocol::CancelResult::Applied});
  retryOwed();
}

// --- Streams that end early: cancelled in the engine, terminal owed to the client --------

void Server::Impl::cancelInEngine(engine::RequestId id, std::uint32_t rank) {
  engine_.cancel(id);
  metrics_.onAbort(id, engineNowMs());
  ranks_[rank].stalled = false;
  if (auto& in_flight = ranks_[rank].in_flight) {
    engine::discardOutputs(*in_flight, id);
    // A prompt completed by the in-flight pass is not handed off.
    std::erase_if(in_flight->handoffs,
                  [id](const engine::HandoffTicket& t) { return t.source_id == id; });
  }
  // Prefill: a held request's key names nothing any more (a kv_fetch of it gets not_found).
  if (const auto k = held_keys_.find(id); k != held_keys_.end()) {
    held_.erase(k->second);
    held_keys_.erase(k);
  }
  // Decode: a handoff still waiting for its KV frees it at the source.
  if (const auto p = pending_.find(id); p != pending_.end()) {
    if (zmq::socket_t* dealer = sourceSocket(p->second.source)) {
      if (!sendToSource(*dealer, protocol::KvRelease{p->second.key})) {
        log_->warn(
            "kv_release to {} not sent (its pipe is full or it is gone): the prefill "
            "worker frees the KV at its hold timeout",
            p->second.source);
      }
    }
    pending_keys_.erase(p->second.key);
    pending_.erase(p);
  }
}

std::optional<std::uint64_t> Server::Impl::lastKvSeq(std::uint32_t r) const {
  const Rank& rank = ranks_[r];
  if (!rank.kv) return std::nullopt;
  const std::uint64_t next = rank.kv->nextSeq();
  // step() has already changed the cache; the pass's events go out when it completes.
  if (rank.in_flight && !rank.in_flight->kv_events.empty()) return next;
  if (next == 0) return std::nullopt;
  return next - 1;
}

void Server::Impl::abandon(engine::RequestId id, std::string why) {
  const Route& route = *routes_.find(id);
  if (route.state != RouteState::Active) return;
  cancelInEngine(id, route.rank);
  ++counters.backpressure_cancels;
  log_->debug("request '{}' abandoned: {}", route.id, why);
  routes_.oweTerminal(id, FinishReason::Cancelled, std::move(why));
}

void Server::Impl::dropClient(const std::string& client, std::uint64_t& cancelled) {
  // The peer is gone (unroutable for kGoneAfter, or its connection closed): cancel everything it
  // had; nothing can be delivered.
  const std::vector<RemovedRoute> active = routes_.removeClient(client);
  for (const RemovedRoute& r : active) {
    cancelInEngine(r.id, r.rank);
    ++cancelled;
  }
  if (!active.empty()) log_->info("client gone: cancelled {} request(s)", active.size());
}

Server::Impl::Flush Server::Impl::flush(const std::string& client) {
  ClientEntry* entry = routes_.findClient(client);
  // Messages start small and double while sends succeed: a client with a long queue is often
  // still not writable (or takes one message), and encoding its whole queue only to have the
  // send refused would cost O(queue) on every retry. The work a refused send wastes is at most
  // twice what the previous message carried.
  std::size_t max_entries = 64;
  while (entry && !entry->queue.empty()) {
    const std::deque<Pending>& queue = entry->queue;
    std::size_t n = 0;
    std::vector<std::byte> payload;
    const bool outputs = queue.front().kind == Pending::Kind::Output;
    if (!outputs) {
      const Route& route = *routes_.find(queue.front().route);
      payload = protocol::encodeClientMessage(protocol::SubmitAck{route.id, route.rank});
      n = 1;
    } else {
      // Consecutive outputs, as many as one message may hold.
      OutputMessageBudget budget;
      views_.clear();
      for (const Pending& p : queue) {
        const protocol::RequestOutput& o = p.output;
        if (p.kind != Pending::Kind::Output || views_.size() == max_entries ||
            !budget.tryAdd(o.id.size(), o.reason.size(), o.tokens.size())) {
          break;
        }
        views_.push_back({o.id, o.index, o.tokens, o.finish, o.reason, o.cached_tokens});
      }
      n = views_.size();
      payload = protocol::encodeOutputBatch(views_);
    }
    const auto outcome = sendTo(submit_, client, entry->delimiter, std::move(payload));
    if (outcome != SendOutcome::Sent) {
      if (outcome == SendOutcome::Unroutable) {
        ++counters.unroutable_sends;
        if (routes_.noteUnroutable(*entry, Clock::now())) {
          dropClient(client, counters.unroutable_cancels);
          return Flush::Gone;
        }
      }
      return Flush::Blocked;
    }
    max_entries *= 2;
    RouteTable::noteRoutable(*entry);
    if (outputs) ++counters.output_messages;
    routes_.settle(client, n);  // may close the client's last route, and its entry
    entry = routes_.findClient(client);
  }
  return Flush::Done;
}

void Server::Impl::endClosedConnections() {
  submit_monitor_->drainClosed(closed_fds_);
  for (const int fd : closed_fds_) {
    for (const std::string& client : routes_.clientsOnConnection(fd)) {
      dropClient(client, counters.disconnect_cancels);
    }
  }
  closed_fds_.clear();
}

void Server::Impl::retryOwed() {
  endClosedConnections();
  if (!routes_.anyOwed()) return;
  const std::vector<std::string> owing = routes_.clientsOwed();  // copy: the table changes below
  for (const std::string& client : owing) (void)flush(client);
}

// --- Passes: start, complete at the deadline, deliver outputs -----------------------------

void Server::Impl::startPasses() {
  for (std::uint32_t r = 0; r < ranks_.size(); ++r) {
    Rank& rank = ranks_[r];
    if (rank.in_flight) continue;
    const double now_ms = engineNowMs();
    // A disaggregated rank also has timed work without input: a hold's timeout, an activation.
    const std::optional<double> timer = engine_.nextTimerMs(r);
    const bool timer_due = timer && *timer <= now_ms;
    if (timer_due) rank.stalled = false;
    if (rank.stalled || !(engine_.hasWork(r) || timer_due)) {
      rank.anchor_ms.reset();  // idle: the next pass starts when work arrives
      continue;
    }
    if (!engine_.hasWork(r)) rank.anchor_ms.reset();  // woken by its timer: starts now
    // Anchored to the modelled timeline: the time the loop took to get here since the previous
    // pass's modelled end (publishing it, reading, waking up) is caught up, not inherited.
    const PassStart at =
        paced() ? passStart(rank.anchor_ms, now_ms, kMaxCatchUpMs) : PassStart{now_ms, false};
    if (at.resynced) ++resyncs_;
    engine::PassResult pass = engine_.step(r, at.start_ms);
    if (!pass.did_work) {
      rank.stalled = true;  // nothing can progress until a submit or cancel arrives
      rank.anchor_ms.reset();
      continue;
    }
    ++counters.passes;
    if (config_.engine.kv_event_visibility == engine::KvEventVisibility::PassStart && rank.kv) {
      rank.kv->publishPass(pass.kv_events, unixSeconds());
      pass.kv_events.clear();
    }
    // Durations are already divided by speedup_ratio; 0 means "do not wait".
    rank.deadline = paced() ? clock_.wallAt(pass.end_ms) : Clock::now();
    rank.anchor_ms = pass.end_ms;
    rank.in_flight = std::move(pass);
  }
}

void Server::Impl::completeDuePasses(bool force) {
  const auto now = Clock::now();
  for (std::uint32_t r = 0; r < ranks_.size(); ++r) {
    Rank& rank = ranks_[r];
    if (!rank.in_flight || (!force && rank.deadline > now)) continue;
    completePass(r, /*timed=*/paced() && !force);
  }
}

void Server::Impl::completePass(std::uint32_t r, bool timed) {
  Rank& rank = ranks_[r];
  engine::PassResult pass = std::move(*rank.in_flight);
  rank.in_flight.reset();
  // Clients whose connection closed are forgotten before their outputs are batched.
  endClosedConnections();
  // 1. KV events and forward-pass metrics (a send error is counted by the sink, logged here).
  if (rank.kv) rank.kv->publishPass(pass.kv_events, unixSeconds());
  if (rank.fpm) rank.fpm->onPass(pass.fpm, engineNowMs());
  for (publishers::ZmqPubSink* sink : {rank.kv_sink.get(), rank.fpm_sink.get()}) {
    if (auto error = sink ? sink->takeError() : std::nullopt) log_->warn("{}", *error);
  }
  // Lateness: when the outputs go out (after the KV events and FPM) against the modelled end.
  if (timed) {
    lateness_.record(
        std::chrono::duration<double, std::milli>(Clock::now() - rank.deadline).count());
  }
  // 2. Outputs, one message per client. This runs for every token: one route lookup by engine
  //    id, the rest is the batcher's reused scratch.
  batcher_.beginPass();
  metrics_.onAdmissions(pass);
  for (const engine::OutputSignal& s : pass.outputs) {
    Route* route = routes_.find(s.id);
    const bool active = route && route->state == RouteState::Active;
    metrics_.onOutput(r, s, active);
    if (active) batcher_.add(s, *route);
  }
  deliver();
  // 3. Prefill worker: the handoffs of the prompts this pass completed, and the holds that timed
  //    out at its start (their routes end without a message: the handoff was the last one).
  if (!pass.handoffs.empty()) publishHandoffs(pass);
  for (const engine::RequestId id : pass.expired_holds) {
    const auto k = held_keys_.find(id);
    if (k == held_keys_.end()) continue;
    ++counters.handoff_expired;
    log_->info(
        "handoff: request '{}' held its KV for kv_hold_timeout_ms ({} ms) without a fetch "
        "or release; released",
        routes_.find(id) ? routes_.find(id)->id : std::string("?"),
        config_.engine.kv_hold_timeout_ms.value_or(0.0));
    // A fetch in progress learns at once that there is nothing to transfer any more.
    std::erase_if(fetches_, [&](const PendingFetch& f) {
      if (f.key != k->second) return false;
      ++counters.kv_fetches_missed;
      RoutedEnvelope to;
      to.routing_id = f.peer;
      to.delimiter = f.delimiter;
      reply(handoff_, to, protocol::KvFetchReply{f.key, protocol::KvFetchResult::NotFound});
      return true;
    });
    metrics_.onAbort(id, engineNowMs());
    held_.erase(k->second);
    held_keys_.erase(k);
    routes_.close(id);
  }
}

void Server::Impl::deliver() {
  gone_.clear();
  // A closed connection's routing id may be taken by a new peer, which must not get these
  // outputs: the connections that closed are looked up once per pass, right before its sends
  // (one receive on the monitor per client batch cost two system calls each).
  submit_monitor_->drainClosed(closed_fds_);
  for (OutputBatcher::ClientBatch& batch : batcher_.batches()) {
    if (!closed_fds_.empty() && std::find(closed_fds_.begin(), closed_fds_.end(),
                                          batch.owner->connection_fd) != closed_fds_.end()) {
      gone_.push_back(batch.client);
      continue;
    }
    // What the client is already owed goes first; while some of it waits, so does this pass.
    if (!batch.owner->queue.empty() && flush(batch.client) == Flush::Gone) continue;
    ClientEntry& owner = *batch.owner;  // alive: the batch's routes are open
    const std::size_t n = batch.entries.size();
    std::size_t begin = 0;
    // `begin < n` first: once the last entry closed the client's last route, `owner` is gone.
    while (begin < n && owner.queue.empty()) {
      // As many messages as the protocol's limits need (one, unless the client has very many
      // streams in this pass).
      const std::size_t end = batcher_.messageEnd(batch, begin);
      const auto outcome =
          sendTo(submit_, batch.client, owner.delimiter, batcher_.encode(batch, begin, end));
      if (outcome == SendOutcome::Unroutable) {
        ++counters.unroutable_sends;
        if (routes_.noteUnroutable(owner, Clock::now())) {
          gone_.push_back(batch.client);
          begin = n;  // dropClient cancels them all
        }
      }
      if (outcome != SendOutcome::Sent) break;
      RouteTable::noteRoutable(owner);
      ++counters.output_messages;
      // Closing may erase `owner` with its last route, which only happens at the last entry.
      for (std::size_t i = begin; i < end; ++i) {
        const OutputBatcher::Entry& e = batch.entries[i];
        if (e.finish) {
          routes_.close(e.id);
        } else {
          e.route->delivered += e.token_count;
        }
      }
      begin = end;
    }
    // Not sent (the client's pipe is full, or it is unroutable for now): each entry waits in
    // the client's queue, within its request's buffer; a request over its buffer is abandoned.
    for (std::size_t i = begin; i < n; ++i) bufferOrAbandon(batch.entries[i]);
  }
  for (const auto& c : gone_) dropClient(c, counters.unroutable_cancels);
  endClosedConnections();
}

void Server::Impl::serviceReplays() {
  for (Rank& rank : ranks_) {
    if (!rank.replay) continue;
    const publishers::ReplayServiceResult r = rank.replay->serviceReadable();
    if (r.error) log_->warn("{}", *r.error);
    if (r.num_replies_dropped > 0) {
      log_->debug("replay: {} reply message(s) to {} not sent (requester gone or not reading)",
                  r.num_replies_dropped, rank.replay->endpoint());
    }
  }
}

void Server::Impl::bufferOrAbandon(const OutputBatcher::Entry& e) {
  constexpr std::string_view kWhy = "backpressure: outputs dropped, the client is not reading";
  if (e.route->state != RouteState::Active) return;
  const auto tokens = batcher_.tokens(e);
  protocol::RequestOutput out{.id = e.route->id,
                              .index = e.index,
                              .tokens = {tokens.begin(), tokens.end()},
                              .finish = e.finish,
                              .reason = std::string(e.reason),
                              .cached_tokens = e.cached_tokens};
  // One signal per token; a terminal without a token is a signal too.
  const std::uint32_t signals = std::max<std::uint32_t>(e.token_count, 1);
  if (routes_.bufferOutput(e.id, std::move(out), signals)) {
    ++counters.buffered_outputs;
    return;
  }
  if (e.finish) {
    // Finished in the engine already; the client still needs its end of stream.
    ++counters.backpressure_cancels;
    routes_.oweTerminal(e.id, FinishReason::Cancelled, std::string(kWhy));
  } else {
    abandon(e.id, std::string(kWhy));
  }
}

void Server::Impl::heartbeats() {
  const double now_ms = engineNowMs();
  for (std::uint32_t r = 0; r < ranks_.size(); ++r) {
    Rank& rank = ranks_[r];
    if (rank.fpm && !rank.in_flight && (!engine_.hasWork(r) || rank.stalled)) {
      rank.fpm->onIdle(now_ms);
    }
  }
}

void Server::Impl::trimHeap() {
  // Every client connection costs libzmq (on its I/O thread) and the loop some heap; glibc keeps
  // freed chunks for reuse, so a burst of connections would leave the RSS at its peak for good.
  // After client traffic, at most once per kTrimInterval, free pages go back to the OS.
  const auto now = Clock::now();
  if (reads_since_trim_ == 0 || now - last_trim_ < kTrimInterval) return;
  malloc_trim(0);
  reads_since_trim_ = 0;
  last_trim_ = now;
}

// --- Metrics: what a snapshot shows besides the recorded requests ------------------------

void Server::Impl::collectMetrics(std::vector<engine::LoadMetrics>& load,
                                  ServiceMetrics& service) const {
  for (std::uint32_t r = 0; r < engine_.dpSize(); ++r) load.push_back(engine_.loadMetrics(r));
  service = {.backpressure_cancels = counters.backpressure_cancels,
             .disconnect_cancels = counters.disconnect_cancels,
             .malformed_messages = counters.malformed_messages,
             .rejected_submits = counters.rejected_submits,
             .limit_rejections = counters.limit_rejections,
             .output_messages = counters.output_messages,
             .passes = counters.passes};
  for (const Rank& rank : ranks_) {
    if (!rank.kv) continue;
    service.kv_event_batches_published += rank.kv->numBatchesSent();
    service.replay_requests_served += rank.kv->numReplayRequests();
  }
}

// --- Disaggregated prefill/decode ---------------------------------------------------------

void Server::Impl::publishHandoffs(const engine::PassResult& pass) {
  for (const engine::HandoffTicket& t : pass.handoffs) {
    Route* route = routes_.find(t.source_id);
    if (route == nullptr || route->state != RouteState::Active) {
      (void)engine_.releaseHandoff(t.source_id);  // its client is gone: nobody fetches it
      continue;
    }
    const std::string key = randomHandoffKey();
    held_.emplace(
        key, Held{.id = t.source_id,
                  .prefill_end_ms = t.prefill_end_ms,
                  .max_tokens = static_cast<std::uint32_t>((t.tokens.size() + t.block_size - 1) /
                                                           t.block_size * t.block_size)});
    held_keys_.emplace(t.source_id, key);
    const std::string client = route->client;
    const protocol::Handoff message{
        .id = route->id,
        .ticket = {.source = config_.endpoints.handoff_advertise.empty()
                                 ? endpoints.handoff
                                 : config_.endpoints.handoff_advertise,
                   .key = key,
                   .source_rank = t.source_dp_rank,
                   .block_size = t.block_size,
                   .prompt_len = static_cast<std::uint32_t>(t.tokens.size()),
                   .cached_tokens = t.cached_tokens,
                   .transfer_ms = t.transfer_ms}};
    // After everything older the client is owed (its ack); a handoff is never queued: a client
    // that cannot take it now loses the request like a stream it does not read.
    SendOutcome outcome = SendOutcome::WouldBlock;
    if (route->owner->queue.empty() || flush(client) == Flush::Done) {
      if (routes_.find(t.source_id) == nullptr) continue;  // the flush found the client gone
      ClientEntry& owner = *routes_.find(t.source_id)->owner;
      outcome = sendTo(submit_, client, owner.delimiter, protocol::encodeClientMessage(message));
      if (outcome == SendOutcome::Sent) {
        RouteTable::noteRoutable(owner);
        ++counters.handoffs_sent;
        metrics_.onHandoff(t.source_id, t.prefill_end_ms);
        continue;
      }
    }
    if (routes_.find(t.source_id) != nullptr) {
      abandon(t.source_id,
              "backpressure: the handoff could not be sent, the client is not reading");
    }
  }
}

void Server::Impl::releaseHeld(std::unordered_map<std::string, Held>::iterator it) {
  const engine::RequestId id = it->second.id;
  (void)engine_.releaseHandoff(id);
  metrics_.onAbort(id, engineNowMs());
  held_keys_.erase(id);
  held_.erase(it);
  routes_.close(id);  // the handoff was its last message
}

void Server::Impl::handleHandoffSocketMessage(std::vector<zmq::message_t>& parts) {
  const RoutedEnvelope from = splitRoutedEnvelope(parts, protocol::kMaxMessageBytes);
  auto msg = decodeRequest(handoff_, from);
  if (!msg) return;
  if (const auto* fetch = std::get_if<protocol::KvFetch>(&*msg)) {
    const auto it = held_.find(fetch->key);
    if (it == held_.end() || it->second.fetching) {
      ++counters.kv_fetches_missed;
      reply(handoff_, from, protocol::KvFetchReply{fetch->key, protocol::KvFetchResult::NotFound});
      return;
    }
    // Ready at the modelled transfer end: the prefill pass's end plus the transfer of the
    // tokens asked for (at most the prompt's blocks), on the engine's formula.
    it->second.fetching = true;
    const std::uint32_t tokens = std::min(fetch->tokens, it->second.max_tokens);
    const double ready_ms =
        it->second.prefill_end_ms + engine::kvTransferMs(config_.engine, tokens);
    fetches_.push_back({.due = paced() ? clock_.wallAt(ready_ms) : Clock::now(),
                        .key = fetch->key,
                        .peer = from.routing_id,
                        .delimiter = from.delimiter});
    return;
  }
  if (const auto* release = std::get_if<protocol::KvRelease>(&*msg)) {
    const auto it = held_.find(release->key);
    if (it == held_.end()) return;  // released, fetched, expired or unknown: nothing to do
    ++counters.kv_releases;
    std::erase_if(fetches_, [&](const PendingFetch& f) { return f.key == release->key; });
    releaseHeld(it);
    return;
  }
  ++counters.malformed_messages;
  reply(handoff_, from,
        protocol::ErrorReply{ErrorCode::InvalidArgument,
                             "the handoff socket accepts only \"kv_fetch\" and \"kv_release\" "
                             "messages (got \"" +
                                 std::string(protocol::messageType(*msg)) + "\")",
                             std::nullopt});
}

void Server::Impl::answerDueFetches() {
  if (fetches_.empty()) return;
  const auto now = Clock::now();
  std::vector<PendingFetch> due;
  std::erase_if(fetches_, [&](PendingFetch& f) {
    if (f.due > now) return false;
    due.push_back(std::move(f));
    return true;
  });
  std::sort(due.begin(), due.end(),
            [](const PendingFetch& a, const PendingFetch& b) { return a.due < b.due; });
  for (const PendingFetch& f : due) {
    const auto it = held_.find(f.key);
    protocol::KvFetchResult result = protocol::KvFetchResult::NotFound;
    if (it != held_.end()) {  // else cancelled or expired while transferring
      releaseHeld(it);
      result = protocol::KvFetchResult::Ready;
      ++counters.kv_fetches_ready;
    } else {
      ++counters.kv_fetches_missed;
    }
    RoutedEnvelope to;
    to.routing_id = f.peer;
    to.delimiter = f.delimiter;
    reply(handoff_, to, protocol::KvFetchReply{f.key, result});
  }
}

Result<engine::RequestId> Server::Impl::submitHandoff(const protocol::SubmitRequest& req,
                                                      std::uint32_t rank, double now_ms) {
  const auto refuse = [](std::string why) -> Result<engine::RequestId> {
    return invalidArgument("handoff: " + std::move(why));
  };
  if (!isDecode()) {
    return refuse("this worker's worker_type is " +
                  std::string(engine::toString(config_.engine.worker_type)) +
                  "; only a decode worker (engine.worker_type = decode) accepts a submit "
                  "carrying a handoff ticket");
  }
  if (!req.handoff) {
    return refuse(
        "this is a decode worker: a submit must carry the prefill worker's ticket (field "
        "'handoff'); submit the request to a prefill worker first");
  }
  const protocol::HandoffTicket& t = *req.handoff;
  if (req.prompt.size() != t.prompt_len) {
    return refuse("the prompt has " + std::to_string(req.prompt.size()) +
                  " tokens, the ticket's prompt_len is " + std::to_string(t.prompt_len));
  }
  if (t.block_size != engine_.blockSize()) {
    return refuse("the ticket's block_size " + std::to_string(t.block_size) +
                  " differs from this decode worker's " + std::to_string(engine_.blockSize()) +
                  " (prefill and decode workers must use the same block size)");
  }
  if (!t.source.starts_with("tcp://")) {
    return refuse("source '" + t.source + "' is not a tcp:// endpoint");
  }
  if (pending_keys_.contains(t.key)) {
    return refuse("another request of this worker is already waiting for this ticket's KV");
  }
  if (sourceSocket(t.source) == nullptr) {
    return Error{ErrorCode::ResourceExhausted,
                 "handoff: this decode worker already fetches from " +
                     std::to_string(sources_.size()) +
                     " prefill workers (service.max_handoff_sources); source '" + t.source +
                     "' would be one more"};
  }
  engine::HandoffTicket ticket;
  ticket.tokens = req.prompt;
  ticket.max_output_tokens = req.max_tokens;
  ticket.output_token_ids = req.output_tokens;
  ticket.cached_tokens = t.cached_tokens;
  ticket.block_size = t.block_size;
  ticket.source_dp_rank = t.source_rank;
  // The ready time is unknown until the source answers the kv_fetch (handoffReady).
  ticket.prefill_end_ms = now_ms;
  ticket.transfer_ms = t.transfer_ms;
  ticket.ready_ms = std::numeric_limits<double>::infinity();
  return engine_.submitHandoff(std::move(ticket), rank, now_ms);
}

zmq::socket_t* Server::Impl::sourceSocket(const std::string& source) {
  if (const auto it = sources_.find(source); it != sources_.end()) return &it->second;
  if (sources_.size() >= config_.service.max_handoff_sources) return nullptr;
  try {
    zmq::socket_t s(context_, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, static_cast<int>(config_.service.linger_ms));
    s.set(zmq::sockopt::maxmsgsize, config_.service.max_message_size);
    makeCurveClient(s, handoff_client_);
    s.connect(source);
    return &sources_.emplace(source, std::move(s)).first->second;
  } catch (const zmq::error_t& e) {
    log_->warn("handoff source '{}': {}", source, e.what());
    return nullptr;
  }
}

void Server::Impl::sendFetches() {
  if (!isDecode()) return;
  for (const engine::HandoffReservation& r : engine_.takeReservations()) {
    const auto it = pending_.find(r.id);
    if (it == pending_.end()) continue;
    PendingHandoff& p = it->second;
    const std::uint32_t tokens =
        config_.engine.kv_transfer_charge == engine::KvTransferCharge::MissingBlocks
            ? r.transferable_tokens
            : r.prompt_tokens;
    zmq::socket_t* dealer = sourceSocket(p.source);
    if (dealer == nullptr || !sendToSource(*dealer, protocol::KvFetch{p.key, tokens})) {
      failHandoff(r.id, "handoff: the kv_fetch to " + p.source + " could not be sent", false);
      continue;
    }
    p.deadline =
        Clock::now() +
        std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double, std::milli>(config_.service.handoff_fetch_timeout_ms));
  }
}

void Server::Impl::readFetchReplies(zmq::socket_t& dealer) {
  std::vector<zmq::message_t> parts;
  std::string error;
  while (tryRecvMultipart(dealer, parts, &error) == RecvOutcome::Received) {
    // A DEALER receives just the payload (or an empty delimiter and the payload).
    if (parts.empty() || parts.size() > 2 || (parts.size() == 2 && parts[0].size() != 0)) {
      log_->warn("handoff: a message of {} frames from a prefill worker ignored", parts.size());
      continue;
    }
    const auto& payload = parts.back();
    const auto msg = protocol::decodeClientMessage(
        {static_cast<const std::byte*>(payload.data()), payload.size()});
    const auto* reply = msg ? std::get_if<protocol::KvFetchReply>(&*msg) : nullptr;
    if (reply == nullptr) {
      log_->warn("handoff: unexpected message from a prefill worker ignored: {}",
                 msg ? std::string("type ") + std::string(protocol::messageType(*msg))
                     : msg.error().message);
      continue;
    }
    const auto k = pending_keys_.find(reply->key);
    if (k == pending_keys_.end()) continue;  // cancelled meanwhile (its release went out)
    const engine::RequestId id = k->second;
    const std::string source = pending_.at(id).source;
    if (reply->result == protocol::KvFetchResult::NotFound) {
      failHandoff(id,
                  "handoff: the prefill worker at " + source +
                      " holds no KV for this key (expired, cancelled or already fetched)",
                  false);
      continue;
    }
    // The KV is here: the next pass at or after now activates the request.
    (void)engine_.handoffReady(id, engineNowMs());
    pending_keys_.erase(k);
    pending_.erase(id);
    const Route* route = routes_.find(id);
    if (route != nullptr) {
      Rank& woken = ranks_[route->rank];
      woken.stalled = false;
    }
  }
}

void Server::Impl::failHandoff(engine::RequestId id, std::string why, bool release) {
  ++counters.handoff_failures;
  const auto p = pending_.find(id);
  if (p != pending_.end() && !release) {
    pending_keys_.erase(p->second.key);
    pending_.erase(p);  // cancelInEngine would send a kv_release
  }
  log_->info("{}", why);
  const Route* route = routes_.find(id);
  if (route == nullptr || route->state != RouteState::Active) {
    (void)engine_.cancel(id);
    return;
  }
  cancelInEngine(id, route->rank);
  routes_.oweTerminal(id, FinishReason::Error, std::move(why));
}

void Server::Impl::expireFetches() {
  const auto now = Clock::now();
  std::vector<engine::RequestId> late;
  for (const auto& [id, p] : pending_) {
    if (p.deadline && *p.deadline <= now) late.push_back(id);
  }
  std::sort(late.begin(), late.end());
  for (const engine::RequestId id : late) {
    const std::string source = pending_.at(id).source;
    failHandoff(
        id,
        "handoff: no kv_fetch_reply from " + source + " within " +
            std::to_string(static_cast<std::uint64_t>(config_.service.handoff_fetch_timeout_ms)) +
            " ms",
        true);
  }
}

// --- Shutdown and the loop ---------------------------------------------------------------

void Server::Impl::shutdown() {
  log_->info("shutting down: {} open request(s){}", routes_.numRoutes(),
             options_.drain ? " (draining)" : "");
  // Publish what the in-flight passes produced, then end every open stream: each active one
  // gets a `shutdown` terminal after what its client is already owed (acks, buffered outputs,
  // cancel terminals), all sent in order in as many messages as the limits need.
  completeDuePasses(/*force=*/true);
  // Handed-off requests were sent their last message (the handoff): they end without another.
  while (!held_.empty()) {
    const engine::RequestId id = held_.begin()->second.id;
    engine_.cancel(id);
    metrics_.onAbort(id, engineNowMs());
    held_keys_.erase(id);
    held_.erase(held_.begin());
    routes_.close(id);
  }
  fetches_.clear();
  // Decode: handoffs still waiting for their KV free it at their sources.
  for (const auto& [id, p] : pending_) {
    if (zmq::socket_t* dealer = sourceSocket(p.source)) {
      (void)sendToSource(*dealer, protocol::KvRelease{p.key});
    }
  }
  pending_.clear();
  pending_keys_.clear();
  for (engine::RequestId id : routes_.endAll(FinishReason::Shutdown, "the service is stopping")) {
    engine_.cancel(id);
    metrics_.onAbort(id, engineNowMs());
  }
  const std::vector<std::string> owing = routes_.clientsOwed();  // copy: the table changes
  for (const std::string& client : owing) {
    if (flush(client) == Flush::Blocked) {
      ++counters.dropped_shutdown_messages;
      log_->debug("final messages to a client not sent: its pipe is full");
    }
  }
  routes_.clear();
  heartbeats();
  metrics_.publishFinal();
  metrics_.setPhase(LoopPhase::Stopped);
}

bool Server::Impl::awaitStartup() {
  // Like an engine loading its model: the sockets are bound (a client may connect and send) but
  // nothing is read, answered or published until the delay is over.
  while (true) {
    const auto now = Clock::now();
    if (now >= accept_from_) return true;
    PollTimeout timeout(now);
    timeout.wakeBy(accept_from_);
    zmq::pollitem_t item{nullptr, stop_event_.fd(), ZMQ_POLLIN, 0};
    try {
      zmq::poll(&item, 1, timeout.value());
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) throw;
    }
    if (item.revents & ZMQ_POLLIN) return false;
  }
}

Status Server::Impl::run() {
  try {
    if (!awaitStartup()) {
      log_->info("stopped during startup");
      return {};
    }
  } catch (const zmq::error_t& e) {
    return Error{ErrorCode::IoError, std::string("poll: ") + e.what()};
  }
  metrics_.setPhase(LoopPhase::Serving);
  // Pass ends are waited for on this thread: without this, each wake-up may come 50 µs late.
  if (!tightenTimerSlack())
    log_->warn("prctl(PR_SET_TIMERSLACK) failed: pass wake-ups keep the default 50 us slack");
  if (options_.on_ready) options_.on_ready();
  std::vector<zmq::pollitem_t> items;
  bool draining = false;
  while (true) {
    // Passes whose modelled time has elapsed are published; idle ranks with work start one.
    completeDuePasses(false);
    if (!draining || routes_.numRoutes() > 0) startPasses();
    if (draining && routes_.numRoutes() == 0) break;
    // Disaggregation: kv_fetches of new reservations go out, due replies and deadlines.
    sendFetches();
    answerDueFetches();
    expireFetches();

    const auto now = Clock::now();
    PollTimeout timeout(now);
    std::optional<Clock::time_point> next_end;
    for (const Rank& rank : ranks_) {
      if (rank.in_flight && (!next_end || rank.deadline < *next_end)) next_end = rank.deadline;
      if (rank.fpm) {
        if (auto due = rank.fpm->nextHeartbeatDue()) timeout.wakeBy(clock_.wallAt(*due));
      }
    }
    for (std::uint32_t r = 0; r < ranks_.size(); ++r) {
      if (ranks_[r].in_flight) continue;
      if (const auto timer = engine_.nextTimerMs(r)) timeout.wakeBy(clock_.wallAt(*timer));
    }
    for (const PendingFetch& f : fetches_) timeout.wakeBy(f.due);
    for (const auto& [id, p] : pending_) {
      if (p.deadline) timeout.wakeBy(*p.deadline);
    }
    if (routes_.anyOwed()) timeout.wakeBy(now + kOwedRetryInterval);
    if (reads_since_trim_ > 0) timeout.wakeBy(last_trim_ + kTrimInterval);
    if (const auto wake = metrics_.onTurn(now)) timeout.wakeBy(*wake);
    // The next pass end: a timerfd in the poll set wakes the loop at it, precisely and without
    // spinning (zmq_poll's timeout has whole milliseconds only).
    if (!next_end) {
      pass_timer_.disarm();
    } else if (*next_end <= now) {
      timeout.wakeNow();
    } else {
      pass_timer_.armAt(*next_end);
      if (!pass_timer_.armedAt()) timeout.wakeBy(*next_end);  // timerfd_settime failed
    }
    const bool submit_readable = !submitsPaused();

    items.clear();
    items.push_back({nullptr, stop_event_.fd(), ZMQ_POLLIN, 0});
    items.push_back({nullptr, pass_timer_.fd(), ZMQ_POLLIN, 0});
    items.push_back({cancel_.handle(), 0, ZMQ_POLLIN, 0});
    items.push_back({submit_.handle(), 0, static_cast<short>(submit_readable ? ZMQ_POLLIN : 0), 0});
    items.push_back({submit_monitor_->pollHandle(), 0, ZMQ_POLLIN, 0});
    for (const Rank& rank : ranks_) {
      if (rank.replay) items.push_back({rank.replay->pollHandle(), 0, ZMQ_POLLIN, 0});
    }
    const std::size_t first_handoff_item = items.size();
    if (handoff_) items.push_back({handoff_.handle(), 0, ZMQ_POLLIN, 0});
    for (auto& [source, dealer] : sources_) {
      items.push_back({dealer.handle(), 0, ZMQ_POLLIN, 0});
    }
    try {
      zmq::poll(items, timeout.value());
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) return Error{ErrorCode::IoError, std::string("poll: ") + e.what()};
    }
    const auto readable = [&items](std::size_t i) { return (items[i].revents & ZMQ_POLLIN) != 0; };
    // Decode worker: the source DEALERs polled (map nodes are stable; submits may add sources
    // below, which were not polled).
    std::vector<zmq::socket_t*> readable_sources;
    {
      std::size_t i = first_handoff_item + (handoff_ ? 1 : 0);
      for (auto& [source, dealer] : sources_) {
        if (i >= items.size()) break;
        if (readable(i++)) readable_sources.push_back(&dealer);
      }
    }
    if (readable(1)) pass_timer_.acknowledge();
    if (readable(0)) {
      stop_event_.drain();
      if (!stopping_) {
        stopping_ = true;
        if (!options_.drain) break;
        draining = true;
        metrics_.setPhase(LoopPhase::Draining);
        log_->info("draining {} open request(s) before exit", routes_.numRoutes());
      }
    }
    // Only the sockets zmq_poll found readable are read: a receive on an empty socket costs
    // libzmq two system calls (getpid, poll) for nothing.
    if (readable(4)) endClosedConnections();
    if (readable(2)) drainCancels();  // always first: a cancel never waits behind submits
    if (readable(3)) drainSubmits(kSubmitsPerIteration, next_end);
    if (std::any_of(items.begin() + 5,
                    items.begin() + static_cast<std::ptrdiff_t>(first_handoff_item),
                    [](const zmq::pollitem_t& i) { return (i.revents & ZMQ_POLLIN) != 0; })) {
      serviceReplays();
    }
    std::size_t item = first_handoff_item;
    if (handoff_ && readable(item++)) {
      std::vector<zmq::message_t> parts;
      drainSocket(
          handoff_, parts, kSubmitsPerIteration,
          [&](std::vector<zmq::message_t>& p) { handleHandoffSocketMessage(p); },
          [&](std::string_view error) { log_->warn("handoff socket receive failed: {}", error); });
    }
    for (zmq::socket_t* dealer : readable_sources) readFetchReplies(*dealer);
    if (routes_.anyOwed()) retryOwed();
    heartbeats();
    trimHeap();
#ifndef NDEBUG
    // Debug builds (the sanitizer stages) check the route table's invariants: every iteration
    // while it is small, about every (size / 1024)-th beyond (size: routes + queued items, what
    // one check walks), so the check costs O(1024) per
    // iteration amortised and a 70,000-stream test stays linear instead of quadratic.
    if (++iterations_since_check_ * 1024 >= routes_.numRoutes() + routes_.numQueued()) {
      iterations_since_check_ = 0;
      MOCKER_CHECK(routes_.checkInvariants().has_value());
    }
#endif
  }
  shutdown();
  return {};
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() = default;

Result<std::unique_ptr<Server>> Server::create(ServiceConfig config, ServerOptions options) {
  MOCKER_TRY_VOID(validateServiceConfig(config));
  if (options.context && config.security.curve) {
    return invalidArgument(
        "a shared ZeroMQ context cannot be used with security.curve (one ZAP handler per "
        "context): give each CURVE server its own");
  }
  MOCKER_TRY(engine::Engine engine, engine::Engine::create(config.engine));
  auto impl = std::make_unique<Impl>(std::move(config), options, std::move(engine));
  MOCKER_TRY_VOID(impl->init());
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

const BoundEndpoints& Server::endpoints() const { return impl_->endpoints; }
Status Server::run() { return impl_->run(); }
void Server::requestStop() { impl_->requestStop(); }
const ServerCounters& Server::counters() const { return impl_->counters; }
const MetricsBoard& Server::metricsBoard() const { return impl_->metricsBoard(); }
std::uint64_t Server::numRefusedHandshakes() const { return impl_->numRefusedHandshakes(); }

}  // namespace mocker::service
