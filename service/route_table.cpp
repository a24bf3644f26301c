// RouteTable: (client, request id) ↔ engine id, delivery state and per-client queues, with its
// invariant checker (contract in route_table.h).
#include "service/route_table.h"

#include <algorithm>
#include <new>

#include "base/check.h"

namespace mocker::service {

Route& RouteTable::open(const std::string& client, const std::string& request_id,
                        engine::RequestId id, std::uint32_t rank, bool delimiter,
                        std::uint32_t buffer_cap, const std::string& principal) {
  // Strong guarantee: an allocation failure (std::bad_alloc) leaves the table unchanged.
  const auto [owner_it, new_client] = clients_.try_emplace(client);
  ClientEntry& owner = owner_it->second;
  MOCKER_CHECK(new_client || owner.principal == principal);
  Route* route = nullptr;
  std::uint64_t* principal_routes = nullptr;
  try {
    if (new_client) owner.principal = principal;
    if (!principal.empty()) principal_routes = &routes_per_principal_[principal];
    Route fresh{.client = client, .id = request_id, .rank = rank, .owner = &owner};
    fresh.buffer_cap = buffer_cap;
    const auto [it, inserted] = routes_.emplace(id, std::move(fresh));
    MOCKER_CHECK(inserted);
    route = &it->second;
    try {
      const bool key_inserted = by_key_.emplace(Key{client, request_id}, id).second;
      MOCKER_CHECK(key_inserted);
    } catch (const std::bad_alloc&) {
      routes_.erase(it);
      throw;
    }
  } catch (const std::bad_alloc&) {
    if (principal_routes != nullptr && *principal_routes == 0) {
      routes_per_principal_.erase(principal);
    }
    if (new_client) clients_.erase(owner_it);
    throw;
  }
  owner.delimiter = delimiter;
  ++owner.num_routes;
  if (principal_routes != nullptr) ++*principal_routes;
  return *route;
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

void RouteTable::oweAck(engine::RequestId id) {
  Route& route = routes_.at(id);
  route.owner->queue.push_back({.route = id, .kind = Pending::Kind::Ack});
  ++num_queued_;
}

bool RouteTable::bufferOutput(engine::RequestId id, protocol::RequestOutput&& out,
                              std::uint32_t signals) {
  Route& route = routes_.at(id);
  MOCKER_CHECK(route.state == RouteState::Active && out.index == route.delivered && signals >= 1);
  if (std::uint64_t{route.buffered} + signals > route.buffer_cap) return false;
  route.buffered += signals;
  route.delivered += static_cast<std::uint32_t>(out.tokens.size());
  if (out.finish) route.state = RouteState::Ending;
  route.owner->queue.push_back(
      {.route = id, .kind = Pending::Kind::Output, .output = std::move(out), .signals = signals});
  ++num_queued_;
  return true;
}

void RouteTable::oweTerminal(engine::RequestId id, protocol::FinishReason finish,
                             std::string reason) {
  Route& route = routes_.at(id);
  MOCKER_CHECK(route.state == RouteState::Active);
  route.state = RouteState::Cancelling;
  route.owner->queue.push_back({.route = id,
                                .kind = Pending::Kind::Output,
                                .output = {.id = route.id,
                                           .index = route.delivered,
                                           .finish = finish,
                                           .reason = std::move(reason)}});
  ++num_queued_;
}

void RouteTable::close(engine::RequestId id) {
  const auto it = routes_.find(id);
  if (it == routes_.end()) return;
  ClientEntry& owner = *it->second.owner;
  if (!owner.queue.empty()) {
    num_queued_ -= std::erase_if(owner.queue, [&](const Pending& p) { return p.route == id; });
  }
  erase(it);
}

void RouteTable::erase(std::unordered_map<engine::RequestId, Route>::iterator it) {
  ClientEntry& owner = *it->second.owner;
  by_key_.erase(Key{it->second.client, it->second.id});
  const auto c = clients_.find(it->second.client);
  routes_.erase(it);
  --owner.num_routes;
  dropPrincipalRoutes(owner.principal, 1);
  eraseClientIfIdle(c);
}

void RouteTable::dropPrincipalRoutes(const std::string& principal, std::uint64_t n) {
  if (principal.empty() || n == 0) return;
  const auto it = routes_per_principal_.find(principal);
  MOCKER_CHECK(it != routes_per_principal_.end() && it->second >= n);
  it->second -= n;
  if (it->second == 0) routes_per_principal_.erase(it);
}

void RouteTable::eraseClientIfIdle(std::unordered_map<std::string, ClientEntry>::iterator it) {
  // Forget idle clients so that many short-lived DEALERs do not accumulate state. (Every
  // queued item belongs to a route, so a client without routes has an empty queue.)
  if (it->second.num_routes == 0) {
    num_queued_ -= it->second.queue.size();
    clients_.erase(it);
  }
}

const std::vector<std::string>& RouteTable::clientsOwed() {
  owed_scratch_.clear();
  if (num_queued_ == 0) return owed_scratch_;
  for (const auto& [client, entry] : clients_) {
    if (!entry.queue.empty()) owed_scratch_.push_back(client);
  }
  std::sort(owed_scratch_.begin(), owed_scratch_.end());
  return owed_scratch_;
}

void RouteTable::settle(const std::string& client, std::size_t n) {
  auto it = clients_.find(client);
  MOCKER_CHECK(it != clients_.end() && n <= it->second.queue.size());
  for (std::size_t i = 0; i < n; ++i) {
    // The entry goes with the last route it holds: look it up again each time.
    ClientEntry& entry = it->second;
    Pending item = std::move(entry.queue.front());
    entry.queue.pop_front();
    --num_queued_;
    if (item.kind == Pending::Kind::Ack) continue;
    routes_.at(item.route).buffered -= item.signals;
    if (item.output.finish) {
      // A terminal is its route's last item: nothing else of it is queued.
      erase(routes_.find(item.route));
      it = clients_.find(client);
      if (it == clients_.end()) {
        MOCKER_CHECK(i + 1 == n);
        return;
      }
    }
  }
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
  num_queued_ -= c->second.queue.size();
  dropPrincipalRoutes(c->second.principal, c->second.num_routes);
  clients_.erase(c);
  std::sort(active.begin(), active.end(),
            [](const RemovedRoute& a, const RemovedRoute& b) { return a.id < b.id; });
  return active;
}

std::vector<engine::RequestId> RouteTable::endAll(protocol::FinishReason finish,
                                                  std::string_view reason) {
  std::vector<engine::RequestId> active;
  for (const auto& [id, route] : routes_) {
    if (route.state == RouteState::Active) active.push_back(id);
  }
  std::sort(active.begin(), active.end());
  for (engine::RequestId id : active) oweTerminal(id, finish, std::string(reason));
  return active;
}

void RouteTable::clear() {
  routes_.clear();
  by_key_.clear();
  clients_.clear();
  routes_per_principal_.clear();
  num_queued_ = 0;
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
  }
  // 3. Per route, walk its items in its client's queue.
  struct Seen {
    bool ack = false;
    bool output = false;
    bool finished = false;
    std::uint32_t next_index = 0;
    std::uint64_t signals = 0;
  };
  std::unordered_map<engine::RequestId, Seen> seen;
  std::size_t num_queued = 0;
  for (const auto& [client, entry] : clients_) {
    // 2. An entry exists iff it has a route; num_routes is exact.
    if (entry.num_routes == 0) return fail("idle client entry kept");
    if (entry.num_routes != counted[client]) {
      return fail("client has " + std::to_string(counted[client]) + " routes, counts " +
                  std::to_string(entry.num_routes));
    }
    num_queued += entry.queue.size();
    for (const Pending& p : entry.queue) {
      const auto r = routes_.find(p.route);
      if (r == routes_.end() || r->second.owner != &entry) {
        return fail("queued item of route " + std::to_string(p.route.value()) +
                    " that is not an open route of this client");
      }
      Seen& s = seen[p.route];
      const auto name = [&] { return "route '" + r->second.id + "': "; };  // only on failure
      if (s.finished) return fail(name() + "an item after its terminal");
      if (p.kind == Pending::Kind::Ack) {
        if (s.ack || s.output) return fail(name() + "ack queued twice or after an output");
        s.ack = true;
        continue;
      }
      if (!s.output) s.next_index = p.output.index;
      if (p.output.index != s.next_index || p.output.id != r->second.id) {
        return fail(name() + "queued outputs do not continue each other");
      }
      s.output = true;
      s.next_index += static_cast<std::uint32_t>(p.output.tokens.size());
      s.signals += p.signals;
      s.finished = p.output.finish.has_value();
    }
  }
  if (num_queued != num_queued_) {
    return fail(std::to_string(num_queued) + " queued items, counter " +
                std::to_string(num_queued_));
  }
  // 2. Each principal's count is the sum over its entries.
  std::unordered_map<std::string, std::uint64_t> per_principal;
  for (const auto& [client, entry] : clients_) {
    if (!entry.principal.empty()) per_principal[entry.principal] += entry.num_routes;
  }
  if (per_principal != routes_per_principal_) {
    return fail("routes per principal do not sum over the principals' client entries");
  }
  for (const auto& [id, route] : routes_) {
    const Seen s = seen.count(id) ? seen.at(id) : Seen{};
    const std::string name = "route '" + route.id + "': ";
    if (s.signals != route.buffered || route.buffered > route.buffer_cap) {
      return fail(name + "buffered " + std::to_string(route.buffered) + ", queued signals " +
                  std::to_string(s.signals) + ", cap " + std::to_string(route.buffer_cap));
    }
    if (s.output && s.next_index != route.delivered) {
      return fail(name + "queued outputs end at " + std::to_string(s.next_index) + ", delivered " +
                  std::to_string(route.delivered));
    }
    if (s.finished != (route.state != RouteState::Active)) {
      return fail(name + (s.finished ? "a queued terminal on an active route"
                                     : "ending or cancelling without a queued terminal"));
    }
  }
  return {};
}

}  // namespace mocker::service
