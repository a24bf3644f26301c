// The live service loop (see server.h for the design).
//
// Per pass of rank r:   start: step(r, now) → PassResult held "in flight", deadline computed
//                       wait:  poll cancels/submits/replay until the deadline
//                       end:   KV events + FPM → outputs (one OutputBatch per client) → stats
// Routes map (client routing id, client request id) ↔ internal engine id; an engine id is
// never reused, so a late output or cancel can never reach a newer request with the same
// client id.
#include "service/server.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <thread>
#include <unordered_map>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "engine/engine.h"
#include "protocol/client.h"
#include "protocol/kv_events.h"
#include "protocol/limits.h"
#include "publishers/fpm_publisher.h"
#include "publishers/kv_event_publisher.h"
#include "publishers/zmq_sinks.h"
#include "service/stop_event.h"
#include "service/zmq_io.h"

namespace mocker::service {
namespace {

using Clock = std::chrono::steady_clock;
using protocol::ClientMessage;
using protocol::FinishReason;

/// Submits read per loop iteration before cancels are looked at again (cancel latency bound).
constexpr int kSubmitsPerIteration = 64;
/// How often a client owed a terminal message is retried while nothing else wakes the loop.
constexpr auto kOwedRetryInterval = std::chrono::milliseconds(5);
/// A client whose sends keep failing with EHOSTUNREACH this long is considered gone.
constexpr auto kGoneAfter = std::chrono::milliseconds(1000);

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

}  // namespace

class Server::Impl {
 public:
  Impl(ServiceConfig config, ServerOptions options, engine::Engine&& engine)
      : config_(std::move(config)),
        options_(options),
        engine_(std::move(engine)),
        log_(serveLogger()) {}

  Status init();
  Status run();
  void requestStop() { stop_event_.notify(); }

  BoundEndpoints endpoints;
  ServerCounters counters;

 private:
  enum class RouteState { Active, Cancelling };
  struct ClientState;
  struct Route {
    std::string client;
    std::string id;
    std::uint32_t rank = 0;
    RouteState state = RouteState::Active;
    std::uint32_t delivered = 0;  // output tokens the client has been sent (next index)
    // The owning client's state (clients_ never erases a client that still has routes, and
    // unordered_map elements do not move), so the per-token path needs no string lookup.
    ClientState* owner = nullptr;
  };
  struct ClientState {
    bool delimiter = false;  // the client frames payloads with an empty delimiter (REQ style)
    std::uint64_t routes = 0;
    std::vector<protocol::RequestOutput> owed;  // terminals not yet delivered (backpressure)
    std::vector<engine::RequestId> owed_ids;    // their routes, closed once delivered
    std::optional<Clock::time_point> unroutable_since;  // first EHOSTUNREACH of a streak
    std::uint64_t batch_epoch = 0;                      // completePass bookkeeping (pass_epoch_)
    std::size_t batch_index = 0;
  };
  struct Rank {
    std::optional<engine::PassResult> in_flight;
    Clock::time_point deadline{};
    bool stalled = false;  // a pass made no progress: wait for input before stepping again
    std::unique_ptr<publishers::ZmqPubSink> kv_sink;
    std::unique_ptr<publishers::KvEventPublisher> kv;
    std::unique_ptr<publishers::ZmqReplayServer> replay;
    std::unique_ptr<publishers::ZmqPubSink> fpm_sink;
    std::unique_ptr<publishers::FpmPublisher> fpm;
  };

  double engineNowMs() const {
    return std::chrono::duration<double, std::milli>(Clock::now() - start_).count();
  }
  Clock::time_point wallAt(double engine_ms) const {
    return start_ + std::chrono::duration_cast<Clock::duration>(
                        std::chrono::duration<double, std::milli>(engine_ms));
  }

  Result<zmq::socket_t> makeRouter(const EndpointConfig& ep, std::string& resolved);
  SendOutcome sendTo(zmq::socket_t& socket, const std::string& client,
                     std::vector<std::byte>&& payload);
  void reply(zmq::socket_t& socket, const std::string& client, const ClientMessage& message);

  void drainCancels();
  void handleCancelSocketMessage(std::vector<zmq::message_t>& parts);
  int drainSubmits(int budget);
  void handleSubmitSocketMessage(std::vector<zmq::message_t>& parts);
  void handleSubmit(const std::string& client, protocol::SubmitRequest&& req);
  void handleCancel(zmq::socket_t& reply_socket, const std::string& sender,
                    const protocol::CancelRequest& req);
  std::optional<std::string> splitEnvelope(std::vector<zmq::message_t>& parts,
                                           std::span<const std::byte>& payload, bool& delimiter);

  void startPasses();
  void completeDuePasses(bool force);
  void completePass(std::uint32_t r);
  // One request's outputs within one pass: tokens [token_begin, +token_count) of pass_tokens_.
  struct OutputEntry {
    engine::RequestId id;
    // The request's route: routes_ nodes are stable, and none is erased between completePass
    // filling the batch and deliver() finishing it.
    Route* route = nullptr;
    std::uint32_t index = 0;
    std::size_t token_begin = 0;
    std::uint32_t token_count = 0;
    std::optional<FinishReason> finish;
    std::string_view reason;  // static text
    std::optional<std::uint32_t> cached_tokens;
  };
  // One client's outputs of one pass (scratch reused across passes).
  struct PassBatch {
    std::string client;
    std::vector<OutputEntry> entries;
    std::vector<engine::RequestId> terminal;
  };
  void deliver();
  /// Records an EHOSTUNREACH for the client; true once it has lasted kGoneAfter.
  bool noteUnroutable(ClientState& cs);
  void abandon(engine::RequestId id, const std::string& why);
  void closeRoute(engine::RequestId id);
  void dropClient(const std::string& client);
  void retryOwed();
  void heartbeats();
  void shutdown();
  bool submitsPaused() const;
  std::uint32_t chooseRank() const;

  ServiceConfig config_;
  ServerOptions options_;
  engine::Engine engine_;
  std::shared_ptr<spdlog::logger> log_;
  StopEvent stop_event_;
  bool stopping_ = false;
  Clock::time_point start_ = Clock::now();
  Clock::time_point accept_from_ = start_;

  zmq::context_t context_{1};
  zmq::socket_t submit_;
  zmq::socket_t cancel_;
  std::vector<Rank> ranks_;

  std::unordered_map<engine::RequestId, Route> routes_;
  std::map<std::pair<std::string, std::string>, engine::RequestId> by_key_;
  std::unordered_map<std::string, ClientState> clients_;
  std::uint64_t pass_epoch_ = 0;
  std::vector<PassBatch> batches_;  // the first num_batches_ belong to the pass being delivered
  std::size_t num_batches_ = 0;
  std::vector<std::uint32_t> pass_tokens_;
};

Result<zmq::socket_t> Server::Impl::makeRouter(const EndpointConfig& ep, std::string& resolved) {
  try {
    zmq::socket_t s(context_, zmq::socket_type::router);
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

Status Server::Impl::init() {
  if (!stop_event_.valid()) return Error{ErrorCode::IoError, "eventfd failed"};
  MOCKER_TRY(submit_, makeRouter(config_.endpoints.submit, endpoints.submit));
  MOCKER_TRY(cancel_, makeRouter(config_.endpoints.cancel, endpoints.cancel));
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
                                .linger_ms = static_cast<int>(config_.service.linger_ms)}));
      endpoints.kv_events.push_back(rank.kv_sink->endpoint());
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
        MOCKER_TRY(rank.replay,
                   publishers::ZmqReplayServer::create(
                       context_,
                       {.endpoint = rep, .linger_ms = static_cast<int>(config_.service.linger_ms)},
                       *rank.kv));
        endpoints.kv_replay.push_back(rank.replay->endpoint());
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
                                .linger_ms = static_cast<int>(config_.service.linger_ms)}));
      endpoints.fpm.push_back(rank.fpm_sink->endpoint());
      MOCKER_TRY(rank.fpm, publishers::FpmPublisher::create(
                               {.worker_id = config_.fpm.worker_id,
                                .dp_rank = r,
                                .heartbeat_interval_s = config_.service.fpm_heartbeat_interval_s},
                               *rank.fpm_sink));
    }
  }
  if (config_.service.startup_time_s) {
    accept_from_ = start_ + std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double>(*config_.service.startup_time_s));
  }
  return {};
}

SendOutcome Server::Impl::sendTo(zmq::socket_t& socket, const std::string& client,
                                 std::vector<std::byte>&& payload) {
  const auto it = clients_.find(client);
  const bool delimiter = it != clients_.end() && it->second.delimiter;
  std::string error;
  const SendOutcome out =
      trySendRouted(socket, client, delimiter, adoptPayload(std::move(payload)), &error);
  if (out != SendOutcome::Failed) return out;
  log_->error("send to a client failed: {}", error);
  return SendOutcome::Unroutable;
}

void Server::Impl::reply(zmq::socket_t& socket, const std::string& client,
                         const ClientMessage& message) {
  // Replies (acks, errors, stats) are best effort: a client that does not read loses them.
  // Whether a client is gone is decided only by its streams (see noteUnroutable).
  sendTo(socket, client, protocol::encodeClientMessage(message));
}

bool Server::Impl::noteUnroutable(ClientState& cs) {
  // libzmq's ROUTER_MANDATORY also answers EHOSTUNREACH for a live peer whose pipe was full and
  // has not been re-activated yet, so one EHOSTUNREACH does not prove the client is gone: its
  // streams are abandoned like on EAGAIN, and only a client that stays unroutable for
  // kGoneAfter is dropped.
  const auto now = Clock::now();
  if (!cs.unroutable_since) cs.unroutable_since = now;
  return now - *cs.unroutable_since >= kGoneAfter;
}

std::optional<std::string> Server::Impl::splitEnvelope(std::vector<zmq::message_t>& parts,
                                                       std::span<const std::byte>& payload,
                                                       bool& delimiter) {
  // ROUTER sees [identity, payload] from a DEALER, [identity, "", payload] from a REQ (or a
  // DEALER that adds the delimiter itself).
  delimiter = parts.size() == 3 && parts[1].size() == 0;
  if (parts.size() != 2 && !delimiter) {
    return "expected one payload frame after the routing id (got " +
           std::to_string(parts.size() - 1) + " frames)";
  }
  const zmq::message_t& p = parts.back();
  payload = {static_cast<const std::byte*>(p.data()), p.size()};
  if (p.size() > protocol::kMaxMessageBytes) {
    return "message of " + std::to_string(p.size()) + " bytes exceeds the limit of " +
           std::to_string(protocol::kMaxMessageBytes);
  }
  return std::nullopt;
}

void Server::Impl::drainCancels() {
  std::vector<zmq::message_t> parts;
  drainSocket(
      cancel_, parts, -1, [&](std::vector<zmq::message_t>& p) { handleCancelSocketMessage(p); },
      [&](std::string_view error) { log_->warn("cancel socket receive failed: {}", error); });
}

void Server::Impl::handleCancelSocketMessage(std::vector<zmq::message_t>& parts) {
  const std::string client = parts.front().to_string();
  std::span<const std::byte> payload;
  bool delimiter = false;
  if (auto bad = splitEnvelope(parts, payload, delimiter)) {
    ++counters.malformed_messages;
    reply(cancel_, client, protocol::ErrorReply{ErrorCode::Corruption, *bad, std::nullopt});
    return;
  }
  auto msg = protocol::decodeClientMessage(payload);
  if (!msg) {
    ++counters.malformed_messages;
    reply(cancel_, client,
          protocol::ErrorReply{msg.error().code, msg.error().message,
                               protocol::peekRequestId(payload)});
    return;
  }
  if (auto* c = std::get_if<protocol::CancelRequest>(&*msg)) {
    handleCancel(cancel_, client, *c);
  } else {
    ++counters.malformed_messages;
    reply(cancel_, client,
          protocol::ErrorReply{ErrorCode::InvalidArgument,
                               "the cancel socket accepts only \"cancel\" messages (got \"" +
                                   std::string(protocol::messageType(*msg)) + "\")",
                               std::nullopt});
  }
}

int Server::Impl::drainSubmits(int budget) {
  std::vector<zmq::message_t> parts;
  int n = 0;
  // One message at a time: a submit may pause further submits (backlog limit).
  while (n < budget && !submitsPaused()) {
    const int got = drainSocket(
        submit_, parts, 1, [&](std::vector<zmq::message_t>& p) { handleSubmitSocketMessage(p); },
        [&](std::string_view error) { log_->warn("submit socket receive failed: {}", error); });
    if (got == 0) break;
    n += got;
  }
  return n;
}

void Server::Impl::handleSubmitSocketMessage(std::vector<zmq::message_t>& parts) {
  const std::string client = parts.front().to_string();
  std::span<const std::byte> payload;
  bool delimiter = false;
  const auto bad = splitEnvelope(parts, payload, delimiter);
  if (!bad) clients_[client].delimiter = delimiter;
  if (bad) {
    ++counters.malformed_messages;
    reply(submit_, client, protocol::ErrorReply{ErrorCode::Corruption, *bad, std::nullopt});
    return;
  }
  auto msg = protocol::decodeClientMessage(payload);
  if (!msg) {
    ++counters.malformed_messages;
    log_->debug("malformed message from a client: {}", msg.error().message);
    reply(submit_, client,
          protocol::ErrorReply{msg.error().code, msg.error().message,
                               protocol::peekRequestId(payload)});
    return;
  }
  std::visit(
      [&](auto&& m) {
        using T = std::decay_t<decltype(m)>;
        if constexpr (std::is_same_v<T, protocol::SubmitRequest>) {
          if (stopping_) {
            reply(submit_, client, protocol::SubmitReject{m.id, "the service is shutting down"});
            return;
          }
          handleSubmit(client, std::move(m));
        } else if constexpr (std::is_same_v<T, protocol::CancelRequest>) {
          handleCancel(submit_, client, m);
        } else if constexpr (std::is_same_v<T, protocol::StatsRequest>) {
          protocol::StatsReply s;
          for (std::uint32_t r = 0; r < engine_.dpSize(); ++r) {
            const engine::LoadMetrics l = engine_.loadMetrics(r);
            s.ranks.push_back({r, l.active_blocks, l.total_blocks, l.kv_usage, l.running_requests,
                               l.waiting_requests, l.preemptions_total,
                               l.prefix_cache_queries_tokens, l.prefix_cache_hits_tokens});
          }
          s.routes = routes_.size();
          std::map<std::string, std::uint64_t> sorted;
          for (const auto& [id, st] : clients_) {
            if (st.routes > 0) sorted[id] = st.routes;
          }
          for (const auto& [id, count] : sorted) s.clients.push_back({id, count});
          reply(submit_, client, s);
        } else if constexpr (std::is_same_v<T, protocol::KvSnapshotRequest>) {
          protocol::KvSnapshotReply s;
          for (std::uint32_t r = 0; r < engine_.dpSize(); ++r) {
            if (m.dp_rank && *m.dp_rank != r) continue;
            s.ranks.push_back({r, engine_.cachedBlockHashes(r)});
          }
          if (m.dp_rank && *m.dp_rank >= engine_.dpSize()) {
            reply(submit_, client,
                  protocol::ErrorReply{ErrorCode::InvalidArgument,
                                       "dp_rank " + std::to_string(*m.dp_rank) +
                                           " is out of range (dp_size " +
                                           std::to_string(engine_.dpSize()) + ")",
                                       std::nullopt});
            return;
          }
          reply(submit_, client, s);
        } else {
          ++counters.malformed_messages;
          reply(submit_, client,
                protocol::ErrorReply{ErrorCode::InvalidArgument,
                                     "unexpected message type \"" +
                                         std::string(protocol::messageType(ClientMessage{m})) +
                                         "\" from a client",
                                     std::nullopt});
        }
      },
      std::move(*msg));
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

void Server::Impl::handleSubmit(const std::string& client, protocol::SubmitRequest&& req) {
  ++counters.submits;
  const auto key = std::make_pair(client, req.id);
  if (by_key_.contains(key)) {
    ++counters.rejected_submits;
    reply(submit_, client,
          protocol::SubmitReject{req.id, "duplicate active request id '" + req.id + "'"});
    return;
  }
  const std::uint32_t rank = req.dp_rank.value_or(chooseRank());
  engine::Request er{.tokens = std::move(req.prompt),
                     .max_output_tokens = req.max_tokens,
                     .output_token_ids = std::move(req.output_tokens),
                     .dp_rank = rank,
                     .arrival_ms = engineNowMs()};
  auto id = engine_.submit(std::move(er));
  if (!id) {
    ++counters.rejected_submits;
    reply(submit_, client, protocol::SubmitReject{req.id, id.error().message});
    return;
  }
  ClientState& owner = clients_[client];
  ++owner.routes;
  routes_.emplace(*id, Route{client, req.id, rank, RouteState::Active, 0, &owner});
  by_key_.emplace(key, *id);
  ranks_[rank].stalled = false;
  const auto outcome =
      sendTo(submit_, client, protocol::encodeClientMessage(protocol::SubmitAck{req.id, rank}));
  if (outcome != SendOutcome::Sent) {
    if (outcome == SendOutcome::Unroutable) noteUnroutable(owner);
    abandon(*id, "backpressure: the client is not reading (submit socket high-water mark)");
  } else {
    owner.unroutable_since.reset();
  }
}

void Server::Impl::handleCancel(zmq::socket_t& reply_socket, const std::string& sender,
                                const protocol::CancelRequest& req) {
  const std::string owner = req.client.value_or(sender);
  const auto it = by_key_.find({owner, req.id});
  if (it == by_key_.end() || routes_.at(it->second).state != RouteState::Active) {
    ++counters.cancels_not_found;
    reply(reply_socket, sender, protocol::CancelReply{req.id, protocol::CancelResult::NotFound});
    return;
  }
  const engine::RequestId id = it->second;
  Route& route = routes_.at(id);
  // Applied even while a pass is in flight: the request leaves the engine now and its outputs
  // of that pass are dropped; other requests' outputs are untouched (§13.4).
  engine_.cancel(id);
  ranks_[route.rank].stalled = false;
  if (auto& in_flight = ranks_[route.rank].in_flight) engine::discardOutputs(*in_flight, id);
  ++counters.cancels_applied;
  route.state = RouteState::Cancelling;
  ClientState& cs = clients_[owner];
  cs.owed.push_back({.id = req.id,
                     .index = route.delivered,
                     .finish = FinishReason::Cancelled,
                     .reason = "cancelled"});
  cs.owed_ids.push_back(id);
  // Reply last: replying may find the sender gone and drop its routes (including this one).
  reply(reply_socket, sender, protocol::CancelReply{req.id, protocol::CancelResult::Applied});
  retryOwed();
}

void Server::Impl::abandon(engine::RequestId id, const std::string& why) {
  Route& route = routes_.at(id);
  if (route.state != RouteState::Active) return;
  engine_.cancel(id);
  if (auto& in_flight = ranks_[route.rank].in_flight) engine::discardOutputs(*in_flight, id);
  route.state = RouteState::Cancelling;
  ++counters.backpressure_cancels;
  ClientState& cs = clients_[route.client];
  cs.owed.push_back(
      {.id = route.id, .index = route.delivered, .finish = FinishReason::Cancelled, .reason = why});
  cs.owed_ids.push_back(id);
  log_->debug("request '{}' abandoned: {}", route.id, why);
}

void Server::Impl::closeRoute(engine::RequestId id) {
  const auto it = routes_.find(id);
  if (it == routes_.end()) return;
  by_key_.erase({it->second.client, it->second.id});
  const auto c = clients_.find(it->second.client);
  routes_.erase(it);
  if (c == clients_.end()) return;
  if (c->second.routes > 0) --c->second.routes;
  // Forget idle clients so that many short-lived DEALERs do not accumulate state.
  if (c->second.routes == 0 && c->second.owed.empty()) clients_.erase(c);
}

void Server::Impl::dropClient(const std::string& client) {
  // The peer is gone (EHOSTUNREACH): cancel everything it had; nothing can be delivered.
  std::vector<engine::RequestId> ids;
  for (const auto& [id, route] : routes_) {
    if (route.client == client) ids.push_back(id);
  }
  std::sort(ids.begin(), ids.end());
  for (engine::RequestId id : ids) {
    const Route& route = routes_.at(id);
    if (route.state == RouteState::Active) {
      engine_.cancel(id);
      ranks_[route.rank].stalled = false;
      if (auto& in_flight = ranks_[route.rank].in_flight) engine::discardOutputs(*in_flight, id);
      ++counters.unroutable_cancels;
    }
    closeRoute(id);
  }
  if (!ids.empty()) log_->info("client gone: cancelled {} request(s)", ids.size());
  clients_.erase(client);
}

void Server::Impl::retryOwed() {
  std::vector<std::string> gone;
  std::vector<engine::RequestId> delivered;
  for (auto& [client, cs] : clients_) {
    if (cs.owed.empty()) continue;
    protocol::OutputBatch batch{std::move(cs.owed)};
    cs.owed.clear();
    const auto outcome = sendTo(submit_, client, protocol::encodeClientMessage(batch));
    if (outcome != SendOutcome::Sent) {
      if (outcome == SendOutcome::Unroutable && noteUnroutable(cs)) {
        gone.push_back(client);
      } else {
        cs.owed = std::move(batch.outputs);
      }
      continue;
    }
    cs.unroutable_since.reset();
    ++counters.output_messages;
    delivered.insert(delivered.end(), cs.owed_ids.begin(), cs.owed_ids.end());
    cs.owed_ids.clear();
  }
  for (engine::RequestId id : delivered) closeRoute(id);
  for (const auto& c : gone) dropClient(c);
}

bool Server::Impl::submitsPaused() const {
  if (Clock::now() < accept_from_) return true;
  std::uint64_t waiting = 0;
  for (std::uint32_t r = 0; r < engine_.dpSize(); ++r) {
    waiting += engine_.loadMetrics(r).waiting_requests;
  }
  return waiting >= config_.service.max_submit_backlog;
}

void Server::Impl::startPasses() {
  for (std::uint32_t r = 0; r < ranks_.size(); ++r) {
    Rank& rank = ranks_[r];
    if (rank.in_flight || rank.stalled || !engine_.hasWork(r)) continue;
    const double now_ms = engineNowMs();
    engine::PassResult pass = engine_.step(r, now_ms);
    if (!pass.did_work) {
      rank.stalled = true;  // nothing can progress until a submit or cancel arrives
      continue;
    }
    ++counters.passes;
    if (config_.engine.kv_event_visibility == engine::KvEventVisibility::PassStart && rank.kv) {
      rank.kv->publishPass(pass.kv_events, unixSeconds());
      pass.kv_events.clear();
    }
    // Durations are already divided by speedup_ratio; 0 means "do not wait" (§8.4).
    rank.deadline = config_.engine.speedup_ratio > 0 ? wallAt(pass.end_ms) : Clock::now();
    rank.in_flight = std::move(pass);
  }
}

void Server::Impl::completeDuePasses(bool force) {
  const auto now = Clock::now();
  for (std::uint32_t r = 0; r < ranks_.size(); ++r) {
    if (ranks_[r].in_flight && (force || ranks_[r].deadline <= now)) completePass(r);
  }
}

void Server::Impl::completePass(std::uint32_t r) {
  Rank& rank = ranks_[r];
  engine::PassResult pass = std::move(*rank.in_flight);
  rank.in_flight.reset();
  // 1. KV events and forward-pass metrics.
  if (rank.kv) rank.kv->publishPass(pass.kv_events, unixSeconds());
  if (rank.fpm) rank.fpm->onPass(pass.fpm, engineNowMs());
  // 2. Outputs, one batch per client (in order of each client's first signal), each request's
  //    tokens merged in order. This runs for every token: lookups are by engine id only, ids
  //    and tokens are borrowed (views into routes and one per-pass token buffer), and the
  //    per-client scratch is reused across passes.
  ++pass_epoch_;
  num_batches_ = 0;
  pass_tokens_.clear();
  for (const engine::OutputSignal& s : pass.outputs) {
    const auto it = routes_.find(s.id);
    if (it == routes_.end() || it->second.state != RouteState::Active) continue;
    Route& route = it->second;
    ClientState& cs = *route.owner;
    if (cs.batch_epoch != pass_epoch_) {
      cs.batch_epoch = pass_epoch_;
      cs.batch_index = num_batches_;
      if (num_batches_ == batches_.size()) batches_.emplace_back();
      PassBatch& fresh = batches_[num_batches_++];
      fresh.client = route.client;
      fresh.entries.clear();
      fresh.terminal.clear();
    }
    PassBatch& pb = batches_[cs.batch_index];
    // Tokens of one request in one pass are consecutive signals: extend its entry.
    if (pb.entries.empty() || pb.entries.back().id != s.id || pb.entries.back().finish) {
      pb.entries.push_back(
          {.id = s.id, .route = &route, .index = s.index, .token_begin = pass_tokens_.size()});
    }
    OutputEntry& e = pb.entries.back();
    if (s.token) {
      pass_tokens_.push_back(*s.token);
      ++e.token_count;
    }
    if (s.cached_tokens) e.cached_tokens = s.cached_tokens;
    switch (s.terminal) {
      case engine::Terminal::None:
        break;
      case engine::Terminal::Completed:
        e.finish = FinishReason::Length;
        break;
      case engine::Terminal::Rejected:
        e.finish = FinishReason::Rejected;
        e.reason =
            "the request can never be scheduled (prompt longer than max_model_len, the KV pool "
            "or, with chunked prefill off, the token budget)";
        break;
      case engine::Terminal::Cancelled:
        e.finish = FinishReason::Cancelled;
        break;
      case engine::Terminal::Failed:
        e.finish = FinishReason::Error;
        e.reason = "the timing model produced a non-finite pass time";
        break;
    }
    if (s.terminal != engine::Terminal::None) pb.terminal.push_back(s.id);
  }
  deliver();
}

void Server::Impl::deliver() {
  std::vector<std::string> gone;
  std::vector<protocol::RequestOutputView> views;
  for (std::size_t b = 0; b < num_batches_; ++b) {
    PassBatch& pb = batches_[b];
    const std::string& client = pb.client;
    views.clear();
    for (const OutputEntry& e : pb.entries) {
      views.push_back({e.route->id, e.index,
                       std::span(pass_tokens_).subspan(e.token_begin, e.token_count), e.finish,
                       e.reason, e.cached_tokens});
    }
    const auto outcome = sendTo(submit_, client, protocol::encodeOutputBatch(views));
    ClientState& owner = *pb.entries.front().route->owner;
    if (outcome == SendOutcome::Sent) {
      owner.unroutable_since.reset();
      ++counters.output_messages;
      for (const OutputEntry& e : pb.entries) e.route->delivered += e.token_count;
      for (engine::RequestId id : pb.terminal) closeRoute(id);
      continue;
    }
    if (outcome == SendOutcome::Unroutable) {
      ++counters.unroutable_sends;
      if (noteUnroutable(owner)) {
        gone.push_back(client);
        continue;
      }
    }
    // Would block (or unroutable for now): every stream in this batch is abandoned — cancelled
    // in the engine now, its terminal owed until the client is writable again.
    for (const OutputEntry& e : pb.entries) {
      Route& route = *e.route;
      if (route.state != RouteState::Active) continue;
      if (e.finish) {
        // Finished in the engine already; the client still needs its end of stream.
        route.state = RouteState::Cancelling;
        ++counters.backpressure_cancels;
        ClientState& cs = *route.owner;
        cs.owed.push_back({.id = route.id,
                           .index = route.delivered,
                           .finish = FinishReason::Cancelled,
                           .reason = "backpressure: outputs dropped, the client is not reading"});
        cs.owed_ids.push_back(e.id);
      } else {
        abandon(e.id, "backpressure: outputs dropped, the client is not reading");
      }
    }
  }
  for (const auto& c : gone) dropClient(c);
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

void Server::Impl::shutdown() {
  log_->info("shutting down: {} open request(s){}", routes_.size(),
             options_.drain ? " (draining)" : "");
  // Publish what the in-flight passes produced, then end every open stream.
  completeDuePasses(/*force=*/true);
  std::vector<engine::RequestId> ids;
  for (const auto& [id, route] : routes_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  std::map<std::string, protocol::OutputBatch> batches;
  for (engine::RequestId id : ids) {
    Route& route = routes_.at(id);
    if (route.state == RouteState::Active) {
      engine_.cancel(id);
      batches[route.client].outputs.push_back({.id = route.id,
                                               .index = route.delivered,
                                               .finish = FinishReason::Shutdown,
                                               .reason = "the service is stopping"});
    } else {
      // Owed terminals (backpressure or cancel) go out with the shutdown batch.
    }
  }
  for (auto& [client, cs] : clients_) {
    for (auto& o : cs.owed) batches[client].outputs.push_back(std::move(o));
    cs.owed.clear();
    cs.owed_ids.clear();
  }
  for (auto& [client, batch] : batches) {
    if (sendTo(submit_, client, protocol::encodeClientMessage(batch)) == SendOutcome::Sent) {
      ++counters.output_messages;
    }
  }
  for (engine::RequestId id : ids) closeRoute(id);
  heartbeats();
  if (!routes_.empty()) log_->error("{} route(s) left after shutdown", routes_.size());
}

Status Server::Impl::run() {
  std::vector<zmq::pollitem_t> items;
  bool draining = false;
  while (true) {
    // Passes whose modelled time has elapsed are published; idle ranks with work start one.
    completeDuePasses(false);
    if (!draining || !routes_.empty()) startPasses();
    if (draining && routes_.empty()) break;

    auto timeout = std::chrono::milliseconds(-1);
    const auto now = Clock::now();
    // zmq_poll counts whole milliseconds. Pass deadlines round down, so the last sub-millisecond
    // of a pass is spent polling with timeout 0 (a pass is in flight: the loop is not idle) and
    // passes shorter than 1 ms of wall time (high speedup ratios) are not stretched to 1 ms.
    // Everything else (heartbeats, retries) rounds up.
    const auto until = [&](Clock::time_point t, bool precise = false) {
      const auto ms = precise ? std::chrono::floor<std::chrono::milliseconds>(t - now)
                              : std::chrono::ceil<std::chrono::milliseconds>(t - now);
      const auto clamped = std::max(ms, std::chrono::milliseconds(0));
      if (timeout.count() < 0 || clamped < timeout) timeout = clamped;
    };
    for (std::uint32_t r = 0; r < ranks_.size(); ++r) {
      if (ranks_[r].in_flight) until(ranks_[r].deadline, /*precise=*/true);
      if (ranks_[r].fpm) {
        if (auto due = ranks_[r].fpm->nextHeartbeatDue()) until(wallAt(*due));
      }
    }
    for (const auto& [c, cs] : clients_) {
      if (!cs.owed.empty()) until(now + kOwedRetryInterval);
    }
    const bool submit_readable = !submitsPaused();
    if (!submit_readable && Clock::now() < accept_from_) until(accept_from_);

    items.clear();
    items.push_back({nullptr, stop_event_.fd(), ZMQ_POLLIN, 0});
    items.push_back({cancel_.handle(), 0, ZMQ_POLLIN, 0});
    items.push_back({submit_.handle(), 0, static_cast<short>(submit_readable ? ZMQ_POLLIN : 0), 0});
    for (const Rank& rank : ranks_) {
      if (rank.replay) items.push_back({rank.replay->pollHandle(), 0, ZMQ_POLLIN, 0});
    }
    try {
      zmq::poll(items, timeout);
    } catch (const zmq::error_t& e) {
      if (e.num() != EINTR) return Error{ErrorCode::IoError, std::string("poll: ") + e.what()};
    }
    if (items[0].revents & ZMQ_POLLIN) {
      stop_event_.drain();
      if (!stopping_) {
        stopping_ = true;
        if (!options_.drain) break;
        draining = true;
        log_->info("draining {} open request(s) before exit", routes_.size());
      }
    }
    drainCancels();  // always first: a cancel never waits behind submits
    drainSubmits(kSubmitsPerIteration);
    for (Rank& rank : ranks_) {
      if (rank.replay) rank.replay->serviceReadable();
    }
    retryOwed();
    heartbeats();
  }
  shutdown();
  return {};
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() = default;

Result<std::unique_ptr<Server>> Server::create(ServiceConfig config, ServerOptions options) {
  MOCKER_TRY_VOID(validateServiceConfig(config));
  MOCKER_TRY(engine::Engine engine, engine::Engine::create(config.engine));
  auto impl = std::make_unique<Impl>(std::move(config), options, std::move(engine));
  MOCKER_TRY_VOID(impl->init());
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

const BoundEndpoints& Server::endpoints() const { return impl_->endpoints; }
Status Server::run() { return impl_->run(); }
void Server::requestStop() { impl_->requestStop(); }
const ServerCounters& Server::counters() const { return impl_->counters; }

}  // namespace mocker::service
