// RouteTable: which client owns which engine request, what it has been sent, and what it is
// still owed. No sockets, no clock reads, no engine calls: the serve loop asks, acts on the
// sockets and the engine, and reports back.
//
// A route joins (client routing id, client request id) to the engine id the engine assigned.
// Engine ids are never reused, so a late output or cancel cannot reach a newer request that
// reuses a client's id. A route is
//   Active      its outputs stream to the client as passes complete;
//   Ending      the engine finished it and that last output waits in the client's queue;
//   Cancelling  the stream is over in the engine (client cancel, backpressure, client gone) and
//               the client is owed one terminal message, waiting in the client's queue.
// The route closes when its terminal reached the client (or the client is gone).
//
// Each client has one FIFO queue of what it is owed but could not be sent yet (its pipe was
// full): acks, buffered outputs, terminals — sent in that order before anything newer, so a
// request's ack always precedes its outputs and its outputs precede its terminal. A route holds
// at most `buffer_cap` undelivered output signals in the queue (service.max_buffered_outputs,
// capped at the request's output length); one more and the caller abandons the request.
//
// Invariants (checkInvariants):
//   1. every route is reachable by its key and its engine id, and by nothing else;
//   2. a client entry exists iff it has a route; its num_routes counts its routes, and every
//      route's `owner` points at its client's entry; every queued item belongs to an open route
//      of that client; each non-empty principal's route count is the sum over its entries;
//   3. per route, in its client's queue: at most one Ack, before any of its outputs; its
//      outputs continue each other (index = previous index + previous tokens) and end at
//      `delivered`; their signals sum to `buffered` ≤ buffer_cap; the last one has a finish
//      iff the route is Ending or Cancelling (a Cancelling route's terminal has no tokens,
//      no signal and index = delivered), and no other has one; an Active route has no finish.
//
// Hot path: find(engine id) is one hash lookup and returns a stable pointer (nodes never move;
// a route is only erased by close, settle, removeClient and clear), whose `owner` gives the
// client entry without a string lookup.
//
// Not thread-safe. Owned and used by the service thread only.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/result.h"
#include "engine/types.h"
#include "protocol/client.h"

namespace mocker::service {

using SteadyTime = std::chrono::steady_clock::time_point;

struct ClientEntry;

enum class RouteState { Active, Ending, Cancelling };

/// One open request stream.
struct Route {
  std::string client;  ///< routing id of the submitting client
  std::string id;      ///< the client's request id
  std::uint32_t rank = 0;
  RouteState state = RouteState::Active;
  std::uint32_t delivered = 0;  ///< output tokens sent or queued for the client (= next index)
  std::uint32_t buffered = 0;   ///< output signals waiting in the client's queue
  std::uint32_t buffer_cap = std::numeric_limits<std::uint32_t>::max();  ///< bound of buffered
  ClientEntry* owner = nullptr;  ///< the client's entry (stable while the route exists)
};

/// One item a client is owed, in its queue: the submit_ack of `route`, or one output entry of
/// it (tokens and/or its terminal).
struct Pending {
  enum class Kind { Ack, Output };
  engine::RequestId route;
  Kind kind = Kind::Output;
  protocol::RequestOutput output;  ///< Output only
  std::uint32_t signals = 0;       ///< output signals it holds (counted against buffer_cap)
};

/// Where a client's outputs of the current pass are collected (OutputBatcher bookkeeping: the
/// batch of pass `epoch` is the batcher's batch number `index`).
struct BatchSlot {
  std::uint64_t epoch = 0;
  std::size_t index = 0;
};

/// Per-client state, alive while the client has routes.
struct ClientEntry {
  bool delimiter = false;  ///< the client frames payloads with an empty delimiter (REQ style)
  /// Who the client is beyond its routing id: its CURVE public key (Z85), empty without CURVE.
  std::string principal;
  /// The submit connection its messages arrive on (ZMQ_SRCFD); its close ends the client.
  int connection_fd = -1;
  std::uint64_t num_routes = 0;
  std::deque<Pending> queue;                   ///< owed to the client, oldest first
  std::optional<SteadyTime> unroutable_since;  ///< first failed send of a streak
  BatchSlot batch_slot;
};

/// A route removed by removeClient while it was still Active (its engine request must go).
struct RemovedRoute {
  engine::RequestId id;
  std::uint32_t rank = 0;
  friend bool operator==(const RemovedRoute&, const RemovedRoute&) = default;
};

class RouteTable final {
 public:
  /// A client whose sends keep failing as unroutable this long is considered gone.
  explicit RouteTable(std::chrono::milliseconds gone_after = std::chrono::milliseconds(1000))
      : gone_after_(gone_after) {}
  RouteTable(const RouteTable&) = delete;
  RouteTable& operator=(const RouteTable&) = delete;

  /// Opens an Active route. `principal` is the client's CURVE public key ("" without CURVE),
  /// recorded on a new client entry. REQUIRES: !findByKey(client, request_id), `id` not in the
  /// table, and an existing entry of `client` has this principal. May throw std::bad_alloc, and
  /// then leaves the table unchanged.
  Route& open(const std::string& client, const std::string& request_id, engine::RequestId id,
              std::uint32_t rank, bool delimiter,
              std::uint32_t buffer_cap = std::numeric_limits<std::uint32_t>::max(),
              const std::string& principal = std::string());

  /// The route of engine request `id`, or nullptr. Stable until that route is closed.
  Route* find(engine::RequestId id) {
    const auto it = routes_.find(id);
    return it == routes_.end() ? nullptr : &it->second;
  }
  /// The engine id of (client, request id), in any state.
  std::optional<engine::RequestId> findByKey(const std::string& client,
                                             const std::string& request_id) const;
  /// The client's entry, or nullptr when it has no route.
  ClientEntry* findClient(const std::string& client);

  /// Queues the submit_ack of `id` (it could not be sent). REQUIRES: find(id), no ack queued.
  void oweAck(engine::RequestId id);
  /// Queues an output entry of Active route `id` (it could not be sent), unless the route's
  /// buffered signals would exceed its buffer_cap: then nothing is queued and false is
  /// returned (the caller abandons the request). A terminal entry makes the route Ending.
  /// REQUIRES: route Active, out.index == route.delivered, signals >= 1.
  [[nodiscard]] bool bufferOutput(engine::RequestId id, protocol::RequestOutput&& out,
                                  std::uint32_t signals);
  /// Ends an Active route's stream: it becomes Cancelling and its client is owed one terminal
  /// {id, index = delivered, finish, reason}. REQUIRES: find(id) is Active.
  void oweTerminal(engine::RequestId id, protocol::FinishReason finish, std::string reason);

  /// Closes the route of `id` (no-op if absent): its terminal reached the client. Anything
  /// still queued for it is dropped. The client entry goes with its last route.
  void close(engine::RequestId id);

  /// Clients whose queue is not empty, ascending (scratch reused; valid until the next call).
  const std::vector<std::string>& clientsOwed();
  /// The first `n` items of `client`'s queue reached the client: drops them, and closes the
  /// routes whose terminal was among them. REQUIRES: n <= the queue's size.
  void settle(const std::string& client, std::size_t n);
  bool anyOwed() const { return num_queued_ > 0; }

  /// Records a send to `client` that was unroutable at `now`; true once the streak has lasted
  /// gone_after (the client is gone: call removeClient).
  bool noteUnroutable(ClientEntry& client, SteadyTime now);
  /// A send to the client got through: ends an unroutable streak.
  static void noteRoutable(ClientEntry& client) { client.unroutable_since.reset(); }

  /// Forgets `client` and every route it had; returns those that were Active, ascending by id.
  std::vector<RemovedRoute> removeClient(const std::string& client);

  /// Ends every Active stream (ascending id): each gets the terminal (finish, reason) queued
  /// after what its client is already owed. Returns their engine ids, ascending.
  std::vector<engine::RequestId> endAll(protocol::FinishReason finish, std::string_view reason);
  /// Forgets every route and client.
  void clear();

  /// The principal of `client`'s entry ("" when it has none).
  std::string principalOf(const std::string& client) const {
    const auto it = clients_.find(client);
    return it == clients_.end() ? std::string() : it->second.principal;
  }
  /// Routes of every client entry whose principal is `principal` (a CURVE key's requests in
  /// flight across all its routing ids). REQUIRES: principal is not empty.
  std::uint64_t routesOfPrincipal(const std::string& principal) const {
    const auto it = routes_per_principal_.find(principal);
    return it == routes_per_principal_.end() ? 0 : it->second;
  }
  /// Clients whose connection_fd is `fd`, ascending.
  std::vector<std::string> clientsOnConnection(int fd) const;

  std::size_t numRoutes() const { return routes_.size(); }
  std::size_t numClients() const { return clients_.size(); }
  /// Route counts per client, ascending by client (stats replies).
  std::vector<protocol::ClientRoutes> routesPerClient() const;
  /// Items queued across all clients.
  std::size_t numQueued() const { return num_queued_; }

  /// Checks invariants 1–3 (O(routes + queued)); a description of the first violation
  /// otherwise.
  Status checkInvariants() const;

 private:
  using Key = std::pair<std::string, std::string>;
  void eraseClientIfIdle(std::unordered_map<std::string, ClientEntry>::iterator it);
  // `n` routes of clients with `principal` are gone (no-op for the empty principal).
  void dropPrincipalRoutes(const std::string& principal, std::uint64_t n);
  // Removes a route that has nothing queued (and its client entry with its last route).
  void erase(std::unordered_map<engine::RequestId, Route>::iterator it);

  std::chrono::milliseconds gone_after_;
  std::unordered_map<engine::RequestId, Route> routes_;
  std::map<Key, engine::RequestId> by_key_;  // ordered: a client's routes are one range
  std::unordered_map<std::string, ClientEntry> clients_;
  // Routes per non-empty principal, present iff positive (invariant 2 checks the counts).
  std::unordered_map<std::string, std::uint64_t> routes_per_principal_;
  std::size_t num_queued_ = 0;  // queued items across all clients
  std::vector<std::string> owed_scratch_;
};

}  // namespace mocker::service
