// The serve loop's disaggregated prefill/decode (service/README.md "Disaggregated prefill/decode
// (live)"): the sockets and the engine around the socket-free PrefillHolds (prefill worker) and
// PendingHandoffs (decode worker).
#include <limits>
#include <zmq.hpp>

#include "protocol/limits.h"
#include "service/detail/server_impl.h"

namespace mocker::service {

bool Server::Impl::sendToSource(zmq::socket_t& dealer, const ClientMessage& message) {
  const std::vector<std::byte> payload = protocol::encodeClientMessage(message);
  try {
    return dealer.send(zmq::buffer(payload.data(), payload.size()), zmq::send_flags::dontwait)
        .has_value();
  } catch (const zmq::error_t&) {
    return false;
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
    holds_.hold(key, t.source_id, t.prefill_end_ms,
                static_cast<std::uint32_t>((t.tokens.size() + t.block_size - 1) / t.block_size *
                                           t.block_size));
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
    net::SendOutcome outcome = net::SendOutcome::WouldBlock;
    if (route->owner->queue.empty() || flush(client) == Flush::Done) {
      if (routes_.find(t.source_id) == nullptr) continue;  // the flush found the client gone
      ClientEntry& owner = *routes_.find(t.source_id)->owner;
      outcome = sendTo(submit_, client, owner.delimiter, protocol::encodeClientMessage(message));
      if (outcome == net::SendOutcome::Sent) {
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

void Server::Impl::endHeld(engine::RequestId id) {
  (void)engine_.releaseHandoff(id);
  metrics_.onAbort(id, engineNowMs());
  routes_.close(id);  // the handoff was its last message
}

void Server::Impl::replyFetch(const PrefillHolds::Requester& to, const std::string& key,
                              protocol::KvFetchResult result) {
  net::RoutedEnvelope envelope;
  envelope.routing_id = to.peer;
  envelope.delimiter = to.delimiter;
  reply(handoff_, envelope, protocol::KvFetchReply{key, result});
}

void Server::Impl::handleHandoffSocketMessage(std::vector<zmq::message_t>& parts) {
  const net::RoutedEnvelope from = net::splitRoutedEnvelope(parts, protocol::kMaxMessageBytes);
  auto msg = decodeRequest(handoff_, from);
  if (!msg) return;
  if (const auto* fetch = std::get_if<protocol::KvFetch>(&*msg)) {
    Clock::duration late{};
    if (faults_.hasFetchFaults()) {
      const std::optional<FaultPlan::FetchFaults> f = fetchFaults(fetch->key);
      if (f && f->kind == FaultKind::FetchNotFound) {
        ++counters.kv_fetches_missed;
        reply(handoff_, from,
              protocol::KvFetchReply{fetch->key, protocol::KvFetchResult::NotFound});
        return;
      }
      if (f && f->kind == FaultKind::FetchNever) return;  // the hold stays until it ends
      if (f) {
        late = std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double, std::milli>(f->late_ms));
      }
    }
    // Answered at the modelled transfer end (answerDueFetches).
    if (!holds_.fetch(fetch->key, fetch->tokens, {from.routing_id, from.delimiter}, Clock::now(),
                      paced() ? &clock_ : nullptr, late)) {
      ++counters.kv_fetches_missed;
      reply(handoff_, from, protocol::KvFetchReply{fetch->key, protocol::KvFetchResult::NotFound});
    }
    return;
  }
  if (const auto* release = std::get_if<protocol::KvRelease>(&*msg)) {
    // Released, fetched, expired or unknown: nothing to do.
    if (const auto id = holds_.release(release->key)) {
      ++counters.kv_releases;
      endHeld(*id);
    }
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

std::optional<FaultPlan::FetchFaults> Server::Impl::fetchFaults(const std::string& key) {
  const std::optional<engine::RequestId> id = holds_.fetchable(key);
  const Route* route = id ? routes_.find(*id) : nullptr;
  if (route == nullptr) return std::nullopt;  // answered not_found anyway
  FaultPlan::FetchFaults f = faults_.onFetch(route->rank, route->id, engineNowMs());
  if (!f.injection) return std::nullopt;
  injections_.push_back(std::move(*f.injection));
  recordInjections();
  return f;
}

void Server::Impl::answerDueFetches() {
  if (holds_.numFetching() == 0) return;
  for (const PrefillHolds::DueFetch& f : holds_.takeDue(Clock::now())) {
    protocol::KvFetchResult result = protocol::KvFetchResult::NotFound;
    if (f.held) {  // else cancelled or expired while transferring
      endHeld(*f.held);
      result = protocol::KvFetchResult::Ready;
      ++counters.kv_fetches_ready;
    } else {
      ++counters.kv_fetches_missed;
    }
    replyFetch(f.to, f.key, result);
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
  if (pending_.hasKey(t.key)) {
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
    net::makeCurveClient(s, handoff_client_);
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
    const PendingHandoffs::Handoff* pending = pending_.find(r.id);
    if (pending == nullptr) continue;
    const PendingHandoffs::Handoff& p = *pending;
    const std::uint32_t tokens =
        config_.engine.kv_transfer_charge == engine::KvTransferCharge::MissingBlocks
            ? r.transferable_tokens
            : r.prompt_tokens;
    zmq::socket_t* dealer = sourceSocket(p.source);
    if (dealer == nullptr || !sendToSource(*dealer, protocol::KvFetch{p.key, tokens})) {
      failHandoff(r.id, "handoff: the kv_fetch to " + p.source + " could not be sent", false);
      continue;
    }
    (void)pending_.sent(r.id, Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                 std::chrono::duration<double, std::milli>(
                                                     config_.service.handoff_fetch_timeout_ms)));
  }
}

void Server::Impl::readFetchReplies(zmq::socket_t& dealer) {
  std::vector<zmq::message_t> parts;
  std::string error;
  while (net::tryRecvMultipart(dealer, parts, &error) == net::RecvOutcome::Received) {
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
    const auto waiting = pending_.byKey(reply->key);
    if (!waiting) continue;  // cancelled meanwhile (its release went out)
    const engine::RequestId id = *waiting;
    const std::string source = pending_.find(id)->source;
    if (reply->result == protocol::KvFetchResult::NotFound) {
      failHandoff(id,
                  "handoff: the prefill worker at " + source +
                      " holds no KV for this key (expired, cancelled or already fetched)",
                  false);
      continue;
    }
    // The KV is here: the next pass at or after now activates the request.
    (void)engine_.handoffReady(id, engineNowMs());
    (void)pending_.remove(id);
    const Route* route = routes_.find(id);
    if (route != nullptr) {
      Rank& woken = ranks_[route->rank];
      woken.stalled = false;
    }
  }
}

void Server::Impl::failHandoff(engine::RequestId id, std::string why, bool release) {
  ++counters.handoff_failures;
  if (!release) (void)pending_.remove(id);  // cancelInEngine would send a kv_release
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
  for (const engine::RequestId id : pending_.expired(Clock::now())) {
    const std::string source = pending_.find(id)->source;
    failHandoff(
        id,
        "handoff: no kv_fetch_reply from " + source + " within " +
            std::to_string(static_cast<std::uint64_t>(config_.service.handoff_fetch_timeout_ms)) +
            " ms",
        true);
  }
}

}  // namespace mocker::service
