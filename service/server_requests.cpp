// The serve loop's requests (service/detail/server_impl.h): every send to a client goes through
// sendTo; submits, cancels, stats and kv_snapshot are read from the submit and cancel sockets
// and answered at once.
#include <algorithm>
#include <memory>
#include <new>
#include <zmq.hpp>

#include "protocol/limits.h"
#include "service/detail/server_impl.h"

namespace mocker::service {
namespace {

// A message owning `payload`'s buffer: libzmq frees it (from its I/O thread) once written, so a
// large reply (a stats reply, a kv snapshot) is not copied again. Small payloads are copied,
// which is cheaper. Output messages do not come this way: they are encoded in place into their
// ZeroMQ message (encodeOutputMessage).
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

Server::Impl::Peer Server::Impl::peerOf(const std::vector<zmq::message_t>& parts) {
  if (parts.empty()) return {};
  return {net::peerUserId(parts.back()).value_or(std::string()), net::connectionFd(parts.back())};
}

// --- Sends: every message to a client goes through sendTo ---------------------------------

net::SendOutcome Server::Impl::sendTo(zmq::socket_t& socket, const std::string& client,
                                      bool delimiter, std::vector<std::byte>&& payload) {
  return sendTo(socket, client, delimiter, adoptPayload(std::move(payload)));
}

net::SendOutcome Server::Impl::sendTo(zmq::socket_t& socket, const std::string& client,
                                      bool delimiter, zmq::message_t&& payload) {
  std::string error;
  const net::SendOutcome out =
      net::trySendRouted(socket, client, delimiter, std::move(payload), &error);
  if (out != net::SendOutcome::Failed) return out;
  log_->error("send to a client failed: {}", error);
  return net::SendOutcome::Unroutable;
}

void Server::Impl::reply(zmq::socket_t& socket, const net::RoutedEnvelope& to,
                         const ClientMessage& message) {
  // Replies (acks, errors, stats) are best effort: a client that does not read loses them (and
  // they are counted). Whether a client is gone is decided only by its streams.
  const net::SendOutcome out =
      sendTo(socket, to.routing_id, to.delimiter, protocol::encodeClientMessage(message));
  if (out != net::SendOutcome::Sent) {
    ++counters.dropped_replies;
    log_->debug("reply \"{}\" not sent: {}", protocol::messageType(message),
                net::sendOutcomeName(out));
  }
}

// --- Requests: read from the cancel and submit sockets, answered at once -----------------

void Server::Impl::drainCancels() {
  std::vector<zmq::message_t> parts;
  net::drainSocket(
      cancel_, parts, -1, [&](std::vector<zmq::message_t>& p) { handleCancelSocketMessage(p); },
      [&](std::string_view error) { log_->warn("cancel socket receive failed: {}", error); });
}

std::optional<protocol::ClientMessage> Server::Impl::decodeRequest(
    zmq::socket_t& socket, const net::RoutedEnvelope& from) {
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
  const net::RoutedEnvelope from = net::splitRoutedEnvelope(parts, protocol::kMaxMessageBytes);
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
    const net::RecvOutcome got = net::tryRecvMultipart(submit_, parts, &error);
    if (got == net::RecvOutcome::Failed) log_->warn("submit socket receive failed: {}", error);
    if (got != net::RecvOutcome::Received) break;
    ++n;
    try {
      handleSubmitSocketMessage(parts);
    } catch (const std::bad_alloc&) {
      // No client input aborts the service: a message whose decoding or queueing ran out of
      // memory is refused with `resource_exhausted` (every step left its state unchanged) and
      // the loop keeps serving the others.
      refuseOutOfMemory(parts);
    }
    // A cancel never waits behind more than a few submits (each may be an admission, an ack
    // and error replies): the cancel socket is looked at between bounded batches of them.
    if (n % kSubmitsBetweenCancels == 0) drainCancels();
  }
  return n;
}

void Server::Impl::refuseOutOfMemory(std::vector<zmq::message_t>& parts) {
  ++counters.rejected_submits;
  try {
    const net::RoutedEnvelope from = net::splitRoutedEnvelope(parts, protocol::kMaxMessageBytes);
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
  const net::RoutedEnvelope from = net::splitRoutedEnvelope(parts, protocol::kMaxMessageBytes);
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
          reply(submit_, from, kvSnapshotReply(m));
        } else if constexpr (std::is_same_v<T, protocol::LoraLoad> ||
                             std::is_same_v<T, protocol::LoraUnload>) {
          reply(submit_, from, loraReply(m));
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

protocol::StatsReply Server::Impl::statsReply(const net::RoutedEnvelope& from,
                                              const Peer& peer) const {
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
  const engine::LengthBound limit = engine::effectiveLengthLimit(config_.engine);
  if (limit.binding != engine::LengthLimit::None) {
    s.engine->length_limit = limit.tokens;
    s.engine->length_limit_name = std::string(engine::lengthLimitName(limit.binding));
  }
  if (!faults_.empty()) {
    const auto& n = counters.faults_injected;
    const auto at = [&n](FaultKind k) { return n[static_cast<std::size_t>(k)]; };
    s.faults = protocol::FaultCounts{.crash = at(FaultKind::Crash),
                                     .hang = at(FaultKind::Hang),
                                     .slow = at(FaultKind::Slow),
                                     .error = at(FaultKind::Error),
                                     .abort = at(FaultKind::Abort),
                                     .drop = at(FaultKind::Drop),
                                     .drop_unhealable = at(FaultKind::DropUnhealable),
                                     .suppress = at(FaultKind::Suppress),
                                     .duplicate = at(FaultKind::Duplicate),
                                     .reorder = at(FaultKind::Reorder),
                                     .delay = at(FaultKind::Delay),
                                     .truncate_ring = at(FaultKind::TruncateRing),
                                     .fpm_stop = at(FaultKind::FpmStop),
                                     .metrics_freeze = at(FaultKind::MetricsFreeze),
                                     .fetch_not_found = at(FaultKind::FetchNotFound),
                                     .fetch_late = at(FaultKind::FetchLate),
                                     .fetch_never = at(FaultKind::FetchNever),
                                     .restart = at(FaultKind::Restart),
                                     .silent = at(FaultKind::Silent)};
  }
  // Only the sender's own entries: its routing id, or with CURVE every routing id of its key.
  for (protocol::ClientRoutes& c : routes_.routesPerClient()) {
    const bool own = peer.principal.empty() ? c.client == from.routing_id
                                            : routes_.principalOf(c.client) == peer.principal;
    if (own) s.clients.push_back(std::move(c));
  }
  fitStatsReply(s);
  return s;
}

protocol::ClientMessage Server::Impl::kvSnapshotReply(
    const protocol::KvSnapshotRequest& req) const {
  protocol::KvSnapshotReply s;
  // The reply must stay within the protocol's limits: 9 bytes per hash at most.
  std::size_t bytes = 64;
  std::size_t most = 0;
  for (std::uint32_t r = 0; r < engine_.dpSize(); ++r) {
    if (req.dp_rank && *req.dp_rank != r) continue;
    s.ranks.push_back({r, engine_.cachedBlockHashes(r), lastKvSeq(r)});
    bytes += 32 + 9 * s.ranks.back().block_hashes.size();
    most = std::max(most, s.ranks.back().block_hashes.size());
  }
  if (bytes > protocol::kMaxMessageBytes || most > protocol::kMaxSnapshotBlocksPerRank) {
    return protocol::ErrorReply{
        ErrorCode::InvalidArgument,
        "kv_snapshot: the reply would take up to " + std::to_string(bytes) + " bytes (" +
            std::to_string(most) +
            " block hashes on the largest rank), over the message limit of " +
            std::to_string(protocol::kMaxMessageBytes) + " bytes and " +
            std::to_string(protocol::kMaxSnapshotBlocksPerRank) +
            " hashes per rank; ask for one rank at a time (dp_rank)",
        std::nullopt};
  }
  if (req.dp_rank && *req.dp_rank >= engine_.dpSize()) {
    return protocol::ErrorReply{ErrorCode::InvalidArgument,
                                "dp_rank " + std::to_string(*req.dp_rank) +
                                    " is out of range (dp_size " +
                                    std::to_string(engine_.dpSize()) + ")",
                                std::nullopt};
  }
  return s;
}

protocol::LoraReply Server::Impl::loraReply(const protocol::LoraLoad& req) {
  return loraReply(protocol::LoraOp::Load, req.name, engine_.loadLora(req.name, engineNowMs()));
}

protocol::LoraReply Server::Impl::loraReply(const protocol::LoraUnload& req) {
  return loraReply(protocol::LoraOp::Unload, req.name, engine_.unloadLora(req.name));
}

protocol::LoraReply Server::Impl::loraReply(protocol::LoraOp op, const std::string& name,
                                            const Result<bool>& done) {
  protocol::LoraReply r{.op = op, .name = name};
  if (done) {
    r.changed = *done;
    const bool load = op == protocol::LoraOp::Load;
    log_->info(
        "lora_{} '{}': {}", load ? "load" : "unload", name,
        load ? (*done ? "loaded" : "already resident") : (*done ? "unloaded" : "was not resident"));
  } else {
    r.error = done.error().code;
    r.message = done.error().message;
  }
  return r;
}

void Server::Impl::handleSubmit(const net::RoutedEnvelope& from, const Peer& peer,
                                protocol::SubmitRequest&& req) {
  ++counters.submits;
  const std::string client(from.routing_id);
  if (auto broken = limitBroken(config_.limits, routes_, client, peer.principal, req)) {
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
  const std::size_t cost = AddressSpaceProbe::cost(req);
  if (!address_space_.admits(cost)) {
    ++counters.rejected_submits;
    reply(submit_, from,
          protocol::ErrorReply{ErrorCode::ResourceExhausted,
                               "out of memory: less than 64 MiB of address space left for the "
                               "queued work; the request was not queued (retry later)",
                               req.id});
    return;
  }
  const std::uint32_t rank = req.dp_rank.value_or(leastLoadedRank(engine_));
  std::optional<FaultPlan::PendingAbort> abort;
  bool silent = false;
  if (!faults_.empty() && submitFaults(from, req.id, rank, abort, silent)) return;
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
                       .arrival_ms = er_arrival_ms,
                       .lora = std::move(req.lora)};
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
  // A silenced request is never in the request metrics (the worker lost it). Its arrival is
  // the engine's, so the metrics' TTFT is the modelled one even if the thread was descheduled
  // since.
  if (!silent) metrics_.onSubmit(*id, rank, er_arrival_ms, prompt_tokens);
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
      pending_.add(*id, req.handoff->source, req.handoff->key);
    } catch (const std::bad_alloc&) {
      routes_.close(*id);
      (void)engine_.cancel(*id);
      throw;
    }
  }
  ClientEntry& owner = *opened;
  owner.connection_fd = peer.connection_fd;
  if (abort) aborts_.insert_or_assign(*id, std::move(*abort));
  // Silent (fault): the request leaves the engine at once (a decode worker's pending KV fetch
  // released too) while its route stays open: it is acknowledged and then nothing comes until
  // the client cancels it or goes away, as from a worker that lost it.
  if (silent) cancelInEngine(*id, rank);
  address_space_.accepted(cost);
  Rank& woken = ranks_[rank];
  // An idle rank starts its next pass at this arrival on the modelled timeline (a busy one at
  // its current pass's end, which it already holds). A silenced request gives it no work.
  if (!silent) {
    woken.stalled = false;
    if (!woken.in_flight && !woken.anchor_ms) woken.anchor_ms = er_arrival_ms;
  }
  // The ack goes before anything else of this request: sent now if nothing older waits for
  // the client, else queued behind what does (and then sent first of this request's items).
  if (owner.queue.empty()) {
    const auto outcome = sendTo(submit_, client, from.delimiter,
                                protocol::encodeClientMessage(protocol::SubmitAck{req.id, rank}));
    if (outcome == net::SendOutcome::Sent) {
      RouteTable::noteRoutable(owner);
      return;
    }
    if (outcome == net::SendOutcome::Unroutable) (void)routes_.noteUnroutable(owner, Clock::now());
  }
  ++counters.queued_acks;
  routes_.oweAck(*id);
}

void Server::Impl::handleCancel(zmq::socket_t& reply_socket, const net::RoutedEnvelope& from,
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
  if (holds_.isHeld(*id)) {
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

}  // namespace mocker::service
