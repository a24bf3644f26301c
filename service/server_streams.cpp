// The serve loop's streams (service/detail/server_impl.h): a pass's outputs delivered per
// client, what a client is owed but could not be sent (flush, retries), and streams that end
// early — cancelled in the engine, their terminal owed to the client.
#include <algorithm>
#include <zmq.hpp>

#include "base/check.h"
#include "protocol/limits.h"
#include "service/detail/server_impl.h"

namespace mocker::service {

// --- Streams that end early: cancelled in the engine, terminal owed to the client --------

void Server::Impl::cancelInEngine(engine::RequestId id, std::uint32_t rank) {
  engine_.cancel(id);
  if (!aborts_.empty()) aborts_.erase(id);  // an armed `abort` fault ends with its request
  metrics_.onAbort(id, engineNowMs());
  ranks_[rank].stalled = false;
  if (auto& in_flight = ranks_[rank].in_flight) {
    engine::discardOutputs(*in_flight, id);
    // A prompt completed by the in-flight pass is not handed off.
    std::erase_if(in_flight->handoffs,
                  [id](const engine::HandoffTicket& t) { return t.source_id == id; });
  }
  // Prefill: a held request's key names nothing any more (a kv_fetch of it gets not_found).
  (void)holds_.forget(id);
  // Decode: a handoff still waiting for its KV frees it at the source.
  if (const auto p = pending_.remove(id)) {
    if (zmq::socket_t* dealer = sourceSocket(p->source)) {
      if (!sendToSource(*dealer, protocol::KvRelease{p->key})) {
        log_->warn(
            "kv_release to {} not sent (its pipe is full or it is gone): the prefill "
            "worker frees the KV at its hold timeout",
            p->source);
      }
    }
  }
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
  const ClientEntry* entry = routes_.findClient(client);
  if (entry == nullptr) return;
  const std::uint64_t routes = entry->num_routes;
  const std::size_t owed = entry->queue.size();
  const std::vector<RemovedRoute> active = routes_.removeClient(client);
  for (const RemovedRoute& r : active) {
    cancelInEngine(r.id, r.rank);
    ++cancelled;
  }
  ++counters.clients_gone;
  log_->info("client gone: {} stream(s), {} cancelled in the engine, {} owed item(s) dropped",
             routes, active.size(), owed);
}

Server::Impl::Flush Server::Impl::flush(const std::string& client) {
  ClientEntry* entry = routes_.findClient(client);
  // Messages start small and double while sends succeed: a client with a long queue is often
  // still not writable (or takes one message), and encoding its whole queue only to have the
  // send refused would cost O(queue) on every retry. The work a refused send wastes is at most
  // twice what the previous message carried. The doubling stops at the protocol's limit (left
  // unbounded, 58 sends in one flush wrapped it to 0, and every later message of that flush was
  // an empty output batch until the pipe filled: 400,000 of them in the ack-flood test).
  std::size_t max_entries = 64;
  while (entry && !entry->queue.empty()) {
    const std::deque<Pending>& queue = entry->queue;
    std::size_t n = 0;
    zmq::message_t payload;
    const bool outputs = queue.front().kind == Pending::Kind::Output;
    if (!outputs) {
      const Route& route = *routes_.find(queue.front().route);
      const auto ack = protocol::encodeClientMessage(protocol::SubmitAck{route.id, route.rank});
      payload = zmq::message_t(ack.data(), ack.size());
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
      MOCKER_CHECK(n > 0);  // the first entry always fits (OutputMessageBudget)
      payload = encodeOutputMessage(views_);
    }
    const auto outcome = sendTo(submit_, client, entry->delimiter, std::move(payload));
    if (outcome != net::SendOutcome::Sent) {
      if (outcome == net::SendOutcome::Unroutable) {
        ++counters.unroutable_sends;
        if (routes_.noteUnroutable(*entry, Clock::now())) {
          dropClient(client, counters.unroutable_cancels);
          return Flush::Gone;
        }
      }
      return Flush::Blocked;
    }
    max_entries = std::min(max_entries * 2, std::size_t{protocol::kMaxOutputsPerMessage});
    RouteTable::noteRoutable(*entry);
    if (outputs) ++counters.output_messages;
    routes_.settle(client, n);  // may close the client's last route, and its entry
    entry = routes_.findClient(client);
  }
  return Flush::Done;
}

void Server::Impl::endClosedConnections() {
  if (submit_monitor_->mayHaveEvents()) submit_monitor_->drainClosed(closed_fds_);
  endConnectionsFoundClosed();
}

void Server::Impl::endConnectionsFoundClosed() {
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

void Server::Impl::deliver() {
  gone_.clear();
  // A closed connection's routing id may be taken by a new peer, which must not get these
  // outputs: the connections that closed are looked up once per pass, right before its sends
  // (one receive on the monitor per client batch cost two system calls each; a poll of its
  // descriptor when it has nothing, one).
  if (submit_monitor_->mayHaveEvents()) submit_monitor_->drainClosed(closed_fds_);
  for (OutputBatcher::ClientBatch& batch : batcher_.batches()) {
    if (!closed_fds_.empty() && std::find(closed_fds_.begin(), closed_fds_.end(),
                                          batch.owner->connection_fd) != closed_fds_.end()) {
      continue;  // endClosedConnections, below, ends the client (a disconnect, not unroutable)
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
      if (outcome == net::SendOutcome::Unroutable) {
        ++counters.unroutable_sends;
        if (routes_.noteUnroutable(owner, Clock::now())) {
          gone_.push_back(batch.client);
          begin = n;  // dropClient cancels them all
        }
      }
      if (outcome != net::SendOutcome::Sent) break;
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
  // The clients whose batches were skipped above end now. A close reported during the sends
  // signals the monitor's descriptor: the loop's next wait returns for it.
  endConnectionsFoundClosed();
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

}  // namespace mocker::service
