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

#include <algorithm>
#include <chrono>
#include <zmq.hpp>

#include "base/check.h"
#include "publishers/zmq_sinks.h"
#include "service/detail/server_impl.h"
#include "service/logging.h"
#include "service/security_keys.h"

namespace mocker::service {

std::shared_ptr<spdlog::logger> Server::Impl::serveLogger() {
  auto logger = spdlog::get("serve");
  if (!logger) {
    logger = spdlog::default_logger()->clone("serve");
    spdlog::register_logger(logger);
  }
  return logger;
}

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
    resolved = publishers::openEndpoint(s, ep.endpoint, ep.connect);
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
  MOCKER_TRY(zap_, net::ZapHandler::start(context_,
                                          {{net::kZapDomain, curve_->allowed_clients},
                                           {net::kHandoffZapDomain, curve_->allowed_workers}},
                                          defaultLoggerSink()));
  log_->info("CURVE on: server public key {}, {} client key(s) allowed", curve_->public_key,
             curve_->allowed_clients.size());
  if (isPrefill()) {
    log_->info("CURVE on the handoff socket: {} worker key(s) allowed",
               curve_->allowed_workers.size());
  }
  return {};
}

Status Server::Impl::init() {
  if (!stop_event_.valid()) return Error{ErrorCode::IoError, "eventfd failed"};
  if (!pass_timer_.valid()) return Error{ErrorCode::IoError, "timerfd_create failed"};
  MOCKER_TRY_VOID(startSecurity());
  MOCKER_TRY(submit_, makeRouter(config_.endpoints.submit, endpoints.submit));
  MOCKER_TRY(cancel_, makeRouter(config_.endpoints.cancel, endpoints.cancel));
  MOCKER_TRY(submit_monitor_, net::ConnectionMonitor::create(context_, submit_, "submit"));
  const bool curve_on = curve_.has_value();
  if (!config_.endpoints.submit.connect) warnIfExposed(*log_, "submit", endpoints.submit, curve_on);
  if (!config_.endpoints.cancel.connect) warnIfExposed(*log_, "cancel", endpoints.cancel, curve_on);
  if (isPrefill()) {
    MOCKER_TRY(handoff_,
               makeRouter(config_.endpoints.handoff, endpoints.handoff, net::kHandoffZapDomain));
    if (!config_.endpoints.handoff.connect) {
      warnIfExposed(*log_, "handoff", endpoints.handoff, curve_on);
    }
  }
  ranks_.resize(config_.engine.dp_size);
  const RankPublishers::Sockets sockets{
      .context = context_, .secure = [this](zmq::socket_t& s) { secure(s); }, .curve_on = curve_on};
  for (std::uint32_t r = 0; r < ranks_.size(); ++r) {
    MOCKER_TRY(ranks_[r].pub, RankPublishers::open(config_, r, sockets, endpoints, *log_));
  }
  MOCKER_TRY_VOID(initFaults());
  if (options_.external_http) {
    metrics_.serveExternally();
  } else if (config_.endpoints.http.enabled) {
    MOCKER_TRY(endpoints.http, metrics_.startHttp(config_.endpoints.http, admin_.get()));
  }
  if (config_.service.startup_time_s) {
    accept_from_ = start_ + std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double>(*config_.service.startup_time_s));
  }
  return {};
}

// --- Passes: start, complete at the deadline, deliver outputs -----------------------------

void Server::Impl::startPasses() {
  for (std::uint32_t r = 0; r < ranks_.size(); ++r) {
    Rank& rank = ranks_[r];
    if (rank.in_flight || rank.hung) continue;
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
    double slow = 1.0;
    if (!faults_.empty() && !passFaults(r, at.start_ms, slow)) {
      if (crashed_ || restart_) return;
      continue;  // hung
    }
    if (at.resynced) ++resyncs_;
    engine::PassResult pass = engine_.step(r, at.start_ms);
    if (!pass.did_work) {
      rank.stalled = true;  // nothing can progress until a submit or cancel arrives
      rank.anchor_ms.reset();
      continue;
    }
    ++counters.passes;
    ++rank.passes;
    if (slow != 1.0) {  // a `slow` fault: the pass takes factor × its modelled time
      pass.end_ms = pass.start_ms + (pass.end_ms - pass.start_ms) * slow;
      pass.prefill_ms *= slow;
      pass.decode_ms *= slow;
      pass.fpm.wall_time *= slow;
      ++counters.slowed_passes;
    }
    if (config_.engine.kv_event_visibility == engine::KvEventVisibility::PassStart && rank.pub.kv) {
      publishKvEvents(r, pass.kv_events);
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
  publishKvEvents(r, pass.kv_events);
  if (auto* fpm = rank.fpm()) fpm->onPass(pass.fpm, engineNowMs());
  rank.pub.logSinkErrors(*log_);
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
    if (active && !aborts_.empty() && cutByAbort(s)) continue;
    metrics_.onOutput(r, s, active);
    if (active) batcher_.add(s, *route);
  }
  deliver();
  if (!aborting_.empty()) endAborted();
  // 3. Prefill worker: the handoffs of the prompts this pass completed, and the holds that timed
  //    out at its start (their routes end without a message: the handoff was the last one).
  if (!pass.handoffs.empty()) publishHandoffs(pass);
  for (const engine::RequestId id : pass.expired_holds) {
    const auto waiting = holds_.expire(id);
    if (!waiting) continue;
    ++counters.handoff_expired;
    log_->info(
        "handoff: request '{}' held its KV for kv_hold_timeout_ms ({} ms) without a fetch "
        "or release; released",
        routes_.find(id) ? routes_.find(id)->id : std::string("?"),
        config_.engine.kv_hold_timeout_ms.value_or(0.0));
    // A fetch in progress learns at once that there is nothing to transfer any more.
    for (const PrefillHolds::Requester& to : waiting->fetches) {
      ++counters.kv_fetches_missed;
      replyFetch(to, waiting->key, protocol::KvFetchResult::NotFound);
    }
    metrics_.onAbort(id, engineNowMs());
    routes_.close(id);
  }
}

void Server::Impl::serviceReplays() {
  for (Rank& rank : ranks_) {
    if (!rank.pub.replay) continue;
    const publishers::ReplayServiceResult r = rank.pub.replay->serviceReadable();
    if (r.error) log_->warn("{}", *r.error);
    if (r.num_replies_dropped > 0) {
      log_->debug("replay: {} reply message(s) to {} not sent (requester gone or not reading)",
                  r.num_replies_dropped, rank.pub.replay->endpoint());
    }
  }
}

void Server::Impl::heartbeats() {
  const double now_ms = engineNowMs();
  for (std::uint32_t r = 0; r < ranks_.size(); ++r) {
    Rank& rank = ranks_[r];
    if (rank.fpm() && !rank.in_flight && (!engine_.hasWork(r) || rank.stalled)) {
      rank.fpm()->onIdle(now_ms);
    }
  }
}

void Server::Impl::trimHeap() {
  // Every client connection costs libzmq (on its I/O thread) and the loop some heap; glibc keeps
  // freed chunks for reuse, so a burst of connections would leave the RSS at its peak for good.
  // After client traffic, at most once per kTrimInterval, free pages go back to the OS.
  const auto now = Clock::now();
  if (reads_since_trim_ == 0 || now - last_trim_ < kTrimInterval) return;
  // One trim per interval for the whole process (a fleet's workers share the gate): 64
  // workers at ×10 made 4,600 madvise calls a second, 9.6 % of the fleet's CPU, before.
  Clock::time_point latest;
  if (!HeapTrimGate::process(kTrimInterval).claim(now, latest)) {
    last_trim_ = latest;  // this worker's traffic waits for the claimed interval to end
    return;
  }
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
             .unroutable_sends = counters.unroutable_sends,
             .clients_gone = counters.clients_gone,
             .malformed_messages = counters.malformed_messages,
             .rejected_submits = counters.rejected_submits,
             .limit_rejections = counters.limit_rejections,
             .output_messages = counters.output_messages,
             .passes = counters.passes,
             .faults_injected = counters.faults_injected};
  if (engine_.config().max_loras > 0) {
    const double now_s =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    const auto names = [this](const std::vector<std::uint32_t>& ids) {
      std::string out;
      for (const std::uint32_t id : ids) out += (out.empty() ? "" : ",") + engine_.loraName(id);
      return out;
    };
    for (std::uint32_t r = 0; r < engine_.dpSize(); ++r) {
      const engine::LoraUsage usage = engine_.loraUsage(r);
      service.lora.push_back({.running = names(usage.running),
                              .waiting = names(usage.waiting),
                              .max_lora = engine_.config().max_loras,
                              .time_s = now_s});
    }
  }
  for (const Rank& rank : ranks_) {
    if (!rank.pub.kv) continue;
    service.kv_event_batches_published += rank.pub.kv->numBatchesSent();
    service.replay_requests_served += rank.pub.kv->numReplayRequests();
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
  for (const engine::RequestId id : holds_.takeAll()) {
    engine_.cancel(id);
    metrics_.onAbort(id, engineNowMs());
    routes_.close(id);
  }
  // Decode: handoffs still waiting for their KV free it at their sources.
  for (const PendingHandoffs::Handoff& p : pending_.takeAll()) {
    if (zmq::socket_t* dealer = sourceSocket(p.source)) {
      (void)sendToSource(*dealer, protocol::KvRelease{p.key});
    }
  }
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

std::chrono::milliseconds Server::Impl::pollTimeout(Clock::time_point now,
                                                    std::optional<Clock::time_point>& next_end) {
  PollTimeout timeout(now);
  for (const Rank& rank : ranks_) {
    if (rank.in_flight && (!next_end || rank.deadline < *next_end)) next_end = rank.deadline;
    if (auto* fpm = rank.fpm()) {
      if (auto due = fpm->nextHeartbeatDue()) timeout.wakeBy(clock_.wallAt(*due));
    }
  }
  for (std::uint32_t r = 0; r < ranks_.size(); ++r) {
    if (ranks_[r].in_flight) continue;
    if (const auto timer = engine_.nextTimerMs(r)) timeout.wakeBy(clock_.wallAt(*timer));
  }
  if (const auto due = holds_.nextDue()) timeout.wakeBy(*due);
  wakeForHeldBatches(timeout, now);
  if (const auto deadline = pending_.nextDeadline()) timeout.wakeBy(*deadline);
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
  return timeout.value();
}

Server::Impl::PollSlots Server::Impl::fillPollSet() {
  poll_.clear();
  PollSlots slots;
  slots.stop = poll_.addFd(stop_event_.fd());
  slots.pass_timer = poll_.addFd(pass_timer_.fd());
  // The cancel socket, the connection monitor and the replay ROUTERs are read until EAGAIN
  // whenever they are touched (drainCancels, drainClosed, serviceReadable), so between turns
  // their mailbox descriptors say when they have something: no ZMQ_EVENTS query for them before
  // each wait (two system calls each). Submits are read in budgets, and acks and outputs go out
  // on the same socket: asked every turn.
  constexpr auto kOnSignal = net::PollSet::Wake::OnSignal;
  slots.cancel = poll_.add(cancel_.handle(), /*wanted=*/true, kOnSignal);
  slots.submit = poll_.add(submit_.handle(), /*wanted=*/!submitsPaused());
  slots.monitor = poll_.add(submit_monitor_->pollHandle(), /*wanted=*/true, kOnSignal);
  slots.replays.begin = poll_.next();
  for (const Rank& rank : ranks_) {
    if (rank.pub.replay) poll_.add(rank.pub.replay->pollHandle(), /*wanted=*/true, kOnSignal);
  }
  slots.replays.end = poll_.next();
  if (handoff_) slots.handoff = poll_.add(handoff_.handle());
  slots.sources.begin = poll_.next();
  for (auto& [source, dealer] : sources_) poll_.add(dealer.handle());
  slots.sources.end = poll_.next();
  if (admin_) slots.admin = poll_.addFd(admin_->wakeFd(options_.worker_index));
  return slots;
}

bool Server::Impl::serviceReadable(const PollSlots& slots,
                                   std::optional<Clock::time_point> next_end, bool& draining) {
  // Decode worker: the source DEALERs polled (map nodes are stable; submits may add sources
  // below, which were not polled).
  std::vector<zmq::socket_t*> readable_sources;
  net::PollSet::Slot slot = slots.sources.begin;
  for (auto& [source, dealer] : sources_) {
    if (slot >= slots.sources.end) break;
    if (poll_.readable(slot++)) readable_sources.push_back(&dealer);
  }
  if (poll_.readable(slots.pass_timer)) pass_timer_.acknowledge();
  if (poll_.readable(slots.stop)) {
    stop_event_.drain();
    if (!stopping_) {
      stopping_ = true;
      if (!options_.drain) return false;
      draining = true;
      metrics_.setPhase(LoopPhase::Draining);
      log_->info("draining {} open request(s) before exit", routes_.numRoutes());
    }
  }
  // Only the sockets zmq_poll found readable are read: a receive on an empty socket costs
  // libzmq two system calls (getpid, poll) for nothing.
  if (poll_.readable(slots.monitor)) {
    // Drained whatever its descriptor says now: the poll set's ZMQ_EVENTS query took the signal.
    submit_monitor_->drainClosed(closed_fds_);
    endConnectionsFoundClosed();
  }
  if (poll_.readable(slots.cancel)) drainCancels();  // first: a cancel never waits behind submits
  if (poll_.readable(slots.submit)) drainSubmits(kSubmitsPerIteration, next_end);
  if (poll_.anyReadable(slots.replays)) serviceReplays();
  if (slots.handoff && poll_.readable(*slots.handoff)) {
    std::vector<zmq::message_t> parts;
    net::drainSocket(
        handoff_, parts, kSubmitsPerIteration,
        [&](std::vector<zmq::message_t>& p) { handleHandoffSocketMessage(p); },
        [&](std::string_view error) { log_->warn("handoff socket receive failed: {}", error); });
  }
  for (zmq::socket_t* dealer : readable_sources) readFetchReplies(*dealer);
  if (slots.admin && poll_.readable(*slots.admin)) applyAdminCommands();
  if (admin_stale_) {
    admin_stale_ = false;
    admin_->publish(options_.worker_index, adminListing());
  }
  return true;
}

Status Server::Impl::run() {
  // However the loop ends, the admin interface lists what fired last (a crash) and stops
  // sending it commands.
  struct CloseAdmin {
    Impl& impl;
    ~CloseAdmin() {
      if (!impl.admin_) return;
      impl.admin_->publish(impl.options_.worker_index, impl.adminListing());
      impl.admin_->close(impl.options_.worker_index);
    }
  } close_admin{*this};
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
  bool draining = false;
  while (true) {
    // Passes whose modelled time has elapsed are published; idle ranks with work start one.
    completeDuePasses(false);
    if (!draining || routes_.numRoutes() > 0) startPasses();
    if (crashed_) {
      crash();
      return {};
    }
    if (restart_) {
      MOCKER_TRY_VOID(restartWorker());
      if (!stayDown()) break;
      continue;  // the fresh worker starts over: passes for what came in meanwhile
    }
    if (draining && routes_.numRoutes() == 0) break;
    // Disaggregation: kv_fetches of new reservations go out, due replies and deadlines.
    sendFetches();
    answerDueFetches();
    expireFetches();

    std::optional<Clock::time_point> next_end;
    const std::chrono::milliseconds timeout = pollTimeout(Clock::now(), next_end);
    const PollSlots slots = fillPollSet();
    try {
      poll_.poll(timeout);
    } catch (const zmq::error_t& e) {
      return Error{ErrorCode::IoError, std::string("poll: ") + e.what()};
    }
    if (!serviceReadable(slots, next_end, draining)) break;
    if (routes_.anyOwed()) retryOwed();
    releaseHeldBatches();
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
bool Server::crashed() const { return impl_->crashed(); }
const MetricsBoard& Server::metricsBoard() const { return impl_->metricsBoard(); }
std::uint64_t Server::numRefusedHandshakes() const { return impl_->numRefusedHandshakes(); }

}  // namespace mocker::service
