// RouteTable: (client, request id) ↔ engine id, delivery state and owed terminals, with its
// invariant checker (contract in route_table.h).
#include "service/route_table.h"

#include <algorithm>

#include "base/check.h"

namespace mocker::service {

Route& RouteTable::open(const std::string& client, const std::string& request_id,
                        engine::RequestId id, std::uint32_t rank, bool delimiter) {
  ClientEntry& owner = clients_[client];
  owner.delimiter = delimiter;
  ++owner.num_routes;
  const auto [it, inserted] = routes_.emplace(
      id, Route{client, request_id, rank, RouteState::Active, /*delivered=*/0, &owner});
  MOCKER_CHECK(inserted);
  const bool key_inserted = by_key_.emplace(Key{client, request_id}, id).second;
  MOCKER_CHECK(key_inserted);
  return it->second;
}

std::optional<engine::RequestId> RouteTable::findByKey(const std::string& client,
                                                       const std::string& request_id) const {
  const auto it = by_key_.find(Key{client, request_id});
  if (it == by_key_.end()) return std::nullopt;
  return it->second;
}

ClientEntry* RouteTable::findClient(const std::string& client) {
  const auto it = clients_.find(client);
  return it == clients_.end() ? nullptr : &it->second;
}

void RouteTable::oweTerminal(engine::RequestId id, protocol::FinishReason finish,
                             std::string reason) {
  Route& route = routes_.at(id);
  MOCKER_CHECK(route.state == RouteState::Active);
  route.state = RouteState::Cancelling;
  route.owner->owed.push_back(
      {.id = route.id, .index = route.delivered, .finish = finish, .reason = std::move(reason)});
  route.owner->owed_ids.push_back(id);
  ++num_owed_;
}

void RouteTable::close(engine::RequestId id) {
  const auto it = routes_.find(id);
  if (it == routes_.end()) return;
  ClientEntry& owner = *it->second.owner;
  if (it->second.state == RouteState::Cancelling) {
    const auto pos = std::find(owner.owed_ids.begin(), owner.owed_ids.end(), id);
    if (pos != owner.owed_ids.end()) {
      owner.owed.erase(owner.owed.begin() + (pos - owner.owed_ids.begin()));
      owner.owed_ids.erase(pos);
      --num_owed_;
    }
  }
  by_key_.erase(Key{it->second.client, it->second.id});
  const auto c = clients_.find(it->second.client);
  routes_.erase(it);
  --owner.num_routes;
  eraseClientIfIdle(c);
}

void RouteTable::eraseClientIfIdle(std::unordered_map<std::string, ClientEntry>::iterator it) {
  // Forget idle clients so that many short-lived DEALERs do not accumulate state.
  if (it->second.num_routes == 0 && it->second.owed.empty()) clients_.erase(it);
}

const std::vector<std::string>& RouteTable::clientsOwed() {
  owed_scratch_.clear();
  if (num_owed_ == 0) return owed_scratch_;
  for (const auto& [client, entry] : clients_) {
    if (!entry.owed.empty()) owed_scratch_.push_back(client);
  }
  std::sort(owed_scratch_.begin(), owed_scratch_.end());
  return owed_scratch_;
}

std::span<const protocol::RequestOutput> RouteTable::owed(const std::string& client) const {
  const auto it = clients_.find(client);
  if (it == clients_.end()) return {};
  return it->second.owed;
}

void RouteTable::settleOwed(const std::string& client) {
  const auto it = clients_.find(client);
  if (it == clients_.end()) return;
  ClientEntry& entry = it->second;
  // Closing the last route erases the entry: take the ids out first.
  std::vector<engine::RequestId> ids = std::move(entry.owed_ids);
  num_owed_ -= entry.owed.size();
  entry.owed.clear();
  entry.owed_ids.clear();
  for (engine::RequestId id : ids) close(id);
}

bool RouteTable::noteUnroutable(ClientEntry& client, SteadyTime now) {
  if (!client.unroutable_since) client.unroutable_since = now;
  return now - *client.unroutable_since >= gone_after_;
}

std::vector<RemovedRoute> RouteTable::removeClient(const std::string& client) {
  std::vector<RemovedRoute> active;
  const auto c = clients_.find(client);
  if (c == clients_.end()) return active;
  // The client's keys are one range of the ordered key map.
  auto it = by_key_.lower_bound(Key{client, std::string()});
  while (it != by_key_.end() && it->first.first == client) {
    const auto route = routes_.find(it->second);
    if (route->second.state == RouteState::Active) {
      active.push_back({route->first, route->second.rank});
    }
    routes_.erase(route);
    it = by_key_.erase(it);
  }
  num_owed_ -= c->second.owed.size();
  clients_.erase(c);
  std::sort(active.begin(), active.end(),
            [](const RemovedRoute& a, const RemovedRoute& b) { return a.id < b.id; });
  return active;
}

std::vector<ClientTerminals> RouteTable::closeAll(protocol::FinishReason finish,
                                                  std::string_view reason,
                                                  std::vector<engine::RequestId>& active) {
  std::vector<engine::RequestId> ids;
  ids.reserve(routes_.size());
  for (const auto& [id, route] : routes_) ids.push_back(id);
  std::sort(ids.begin(), ids.end());
  std::map<std::string, ClientTerminals> by_client;
  const auto terminalsOf = [&](const std::string& client) -> ClientTerminals& {
    ClientTerminals& t = by_client[client];
    t.client = client;
    t.delimiter = clients_.at(client).delimiter;
    return t;
  };
  for (engine::RequestId id : ids) {
    const Route& route = routes_.at(id);
    if (route.state != RouteState::Active) continue;
    active.push_back(id);
    terminalsOf(route.client)
        .batch.outputs.push_back({.id = route.id,
                                  .index = route.delivered,
                                  .finish = finish,
                                  .reason = std::string(reason)});
  }
  for (auto& [client, entry] : clients_) {
    if (entry.owed.empty()) continue;
    auto& outputs = terminalsOf(client).batch.outputs;
    for (auto& o : entry.owed) outputs.push_back(std::move(o));
  }
  routes_.clear();
  by_key_.clear();
  clients_.clear();
  num_owed_ = 0;
  std::vector<ClientTerminals> out;
  out.reserve(by_client.size());
  for (auto& [client, t] : by_client) out.push_back(std::move(t));
  return out;
}

std::vector<std::string> RouteTable::clientsOnConnection(int fd) const {
  std::vector<std::string> out;
  for (const auto& [client, entry] : clients_) {
    if (entry.connection_fd == fd) out.push_back(client);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<protocol::ClientRoutes> RouteTable::routesPerClient() const {
  std::vector<protocol::ClientRoutes> out;
  out.reserve(clients_.size());
  for (const auto& [client, entry] : clients_) {
    if (entry.num_routes > 0) out.push_back({client, entry.num_routes});
  }
  std::sort(out.begin(), out.end(),
            [](const protocol::ClientRoutes& a, const protocol::ClientRoutes& b) {
              return a.client < b.client;
            });
  return out;
}

Status RouteTable::checkInvariants() const {
  const auto fail = [](std::string what) -> Status {
    return Error{ErrorCode::Internal, "route table: " + std::move(what)};
  };
  // 1. Every route is reachable by its key and its id, and by nothing else.
  if (by_key_.size() != routes_.size()) {
    return fail(std::to_string(by_key_.size()) + " keys for " + std::to_string(routes_.size()) +
                " routes");
  }
  std::unordered_map<std::string, std::uint64_t> counted;
  std::size_t num_cancelling = 0;
  for (const auto& [id, route] : routes_) {
    const auto key = by_key_.find(Key{route.client, route.id});
    if (key == by_key_.end() || key->second != id) {
      return fail("route " + std::to_string(id.value()) + " is not reachable by its key");
    }
    // 2. The owner pointer is the client's entry.
    const auto c = clients_.find(route.client);
    if (c == clients_.end() || &c->second != route.owner) {
      return fail("route " + std::to_string(id.value()) + " does not point at its client entry");
    }
    ++counted[route.client];
    // 3. Cancelling ⇔ owed, exactly once.
    const auto& ids = route.owner->owed_ids;
    const auto times = std::count(ids.begin(), ids.end(), id);
    if (route.state == RouteState::Cancelling) ++num_cancelling;
    if ((route.state == RouteState::Cancelling) != (times == 1) || times > 1) {
      return fail("route " + std::to_string(id.value()) + " is owed " + std::to_string(times) +
                  " terminal(s)");
    }
  }
  std::size_t num_owed = 0;
  for (const auto& [client, entry] : clients_) {
    // 2. An entry exists iff it has a route or an owed terminal; num_routes is exact.
    if (entry.num_routes == 0 && entry.owed.empty()) return fail("idle client entry kept");
    if (entry.num_routes != counted[client]) {
      return fail("client has " + std::to_string(counted[client]) + " routes, counts " +
                  std::to_string(entry.num_routes));
    }
    if (entry.owed.size() != entry.owed_ids.size()) return fail("owed and owed_ids differ");
    for (std::size_t i = 0; i < entry.owed.size(); ++i) {
      const auto r = routes_.find(entry.owed_ids[i]);
      if (r == routes_.end()) return fail("owed terminal without a route");
      const protocol::RequestOutput& o = entry.owed[i];
      if (o.id != r->second.id || o.index != r->second.delivered || !o.finish ||
          !o.tokens.empty()) {
        return fail("owed terminal does not match its route '" + r->second.id + "'");
      }
    }
    num_owed += entry.owed.size();
  }
  if (num_owed != num_owed_ || num_owed != num_cancelling) {
    return fail(std::to_string(num_owed) + " owed terminals, " + std::to_string(num_cancelling) +
                " cancelling routes, counter " + std::to_string(num_owed_));
  }
  return {};
}

}  // namespace mocker::service
