// RouteTable: which client owns which engine request, what it has been sent, and which terminal
// messages it is still owed. No sockets, no clock reads, no engine calls: the serve loop asks,
// acts on the sockets and the engine, and reports back.
//
// A route joins (client routing id, client request id) to the engine id the engine assigned.
// Engine ids are never reused, so a late output or cancel cannot reach a newer request that
// reuses a client's id. A route is
//   Active      its outputs stream to the client as passes complete;
//   Cancelling  the stream is over in the engine (client cancel, backpressure, client gone) and
//               the client is owed one terminal message, queued in its ClientEntry.
// The route closes when its terminal reached the client (or the client is gone).
//
// Invariants (checkInvariants):
//   1. every route is reachable by its key and its engine id, and by nothing else;
//   2. a client entry exists iff it has a route or an owed terminal; its num_routes counts its
//      routes, and every route's `owner` points at its client's entry;
//   3. a route is Cancelling iff its engine id is in its client's owed_ids, once; owed[i] is the
//      terminal of owed_ids[i], with index = the route's `delivered`.
//
// Hot path: find(engine id) is one hash lookup and returns a stable pointer (nodes never move;
// a route is only erased by close, settleOwed, removeClient and closeAll), whose `owner` gives
// the client entry without a string lookup.
//
// Not thread-safe. Owned and used by the service thread only.
#pragma once

#include <chrono>
#include <cstdint>
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

enum class RouteState { Active, Cancelling };

/// One open request stream.
struct Route {
  std::string client;  ///< routing id of the submitting client
  std::string id;      ///< the client's request id
  std::uint32_t rank = 0;
  RouteState state = RouteState::Active;
  std::uint32_t delivered = 0;   ///< output tokens the client has been sent (= next index)
  ClientEntry* owner = nullptr;  ///< the client's entry (stable while the route exists)
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
  std::vector<protocol::RequestOutput> owed;   ///< terminals not yet delivered
  std::vector<engine::RequestId> owed_ids;     ///< their routes, closed once delivered
  std::optional<SteadyTime> unroutable_since;  ///< first failed send of a streak
  BatchSlot batch_slot;
};

/// A route removed by removeClient while it was still Active (its engine request must go).
struct RemovedRoute {
  engine::RequestId id;
  std::uint32_t rank = 0;
  friend bool operator==(const RemovedRoute&, const RemovedRoute&) = default;
};

/// One client's final terminals (closeAll).
struct ClientTerminals {
  std::string client;
  bool delimiter = false;
  protocol::OutputBatch batch;
};

class RouteTable final {
 public:
  /// A client whose sends keep failing as unroutable this long is considered gone.
  explicit RouteTable(std::chrono::milliseconds gone_after = std::chrono::milliseconds(1000))
      : gone_after_(gone_after) {}
  RouteTable(const RouteTable&) = delete;
  RouteTable& operator=(const RouteTable&) = delete;

  /// Opens an Active route. REQUIRES: !findByKey(client, request_id) and `id` not in the table.
  Route& open(const std::string& client, const std::string& request_id, engine::RequestId id,
              std::uint32_t rank, bool delimiter);

  /// The route of engine request `id`, or nullptr. Stable until that route is closed.
  Route* find(engine::RequestId id) {
    const auto it = routes_.find(id);
    return it == routes_.end() ? nullptr : &it->second;
  }
  /// The engine id of (client, request id), Active or Cancelling.
  std::optional<engine::RequestId> findByKey(const std::string& client,
                                             const std::string& request_id) const;
  /// The client's entry, or nullptr when it has no route.
  ClientEntry* findClient(const std::string& client);

  /// Ends an Active route's stream: it becomes Cancelling and its client is owed a terminal
  /// {id, index = delivered, finish, reason}. REQUIRES: find(id) is Active.
  void oweTerminal(engine::RequestId id, protocol::FinishReason finish, std::string reason);

  /// Closes the route of `id` (no-op if absent): its terminal reached the client. An owed
  /// terminal of it is dropped. The client entry goes with its last route.
  void close(engine::RequestId id);

  /// Clients that are owed terminals, ascending (scratch reused; valid until the next call).
  const std::vector<std::string>& clientsOwed();
  /// The terminals `client` is owed, in the order they were owed (empty if none).
  std::span<const protocol::RequestOutput> owed(const std::string& client) const;
  /// The owed terminals of `client` were delivered: closes their routes.
  void settleOwed(const std::string& client);
  bool anyOwed() const { return num_owed_ > 0; }

  /// Records a send to `client` that was unroutable at `now`; true once the streak has lasted
  /// gone_after (the client is gone: call removeClient).
  bool noteUnroutable(ClientEntry& client, SteadyTime now);
  /// A send to the client got through: ends an unroutable streak.
  static void noteRoutable(ClientEntry& client) { client.unroutable_since.reset(); }

  /// Forgets `client` and every route it had; returns those that were Active, ascending by id.
  std::vector<RemovedRoute> removeClient(const std::string& client);

  /// Ends every stream: each Active route gets a terminal (finish, reason) and is appended to
  /// `active` (ascending id); each client's batch holds those terminals (ascending id), then its
  /// owed ones. Returns the batches ascending by client; the table is empty afterwards.
  std::vector<ClientTerminals> closeAll(protocol::FinishReason finish, std::string_view reason,
                                        std::vector<engine::RequestId>& active);

  /// The principal of `client`'s entry ("" when it has none).
  std::string principalOf(const std::string& client) const {
    const auto it = clients_.find(client);
    return it == clients_.end() ? std::string() : it->second.principal;
  }
  /// Clients whose connection_fd is `fd`, ascending.
  std::vector<std::string> clientsOnConnection(int fd) const;

  std::size_t numRoutes() const { return routes_.size(); }
  std::size_t numClients() const { return clients_.size(); }
  /// Route counts per client, ascending by client (stats replies).
  std::vector<protocol::ClientRoutes> routesPerClient() const;

  /// Checks invariants 1–3 (O(routes + owed)); a description of the first violation otherwise.
  Status checkInvariants() const;

 private:
  using Key = std::pair<std::string, std::string>;
  void eraseClientIfIdle(std::unordered_map<std::string, ClientEntry>::iterator it);

  std::chrono::milliseconds gone_after_;
  std::unordered_map<engine::RequestId, Route> routes_;
  std::map<Key, engine::RequestId> by_key_;  // ordered: a client's routes are one range
  std::unordered_map<std::string, ClientEntry> clients_;
  std::size_t num_owed_ = 0;  // owed terminals across all clients
  std::vector<std::string> owed_scratch_;
};

}  // namespace mocker::service
