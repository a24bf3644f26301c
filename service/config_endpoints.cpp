// The configuration's endpoint rules (contract in service/detail/config_check.h): per-rank
// endpoints, collisions between bound sockets, the HTTP endpoint, the advertised handoff.
#include <charconv>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/endpoint.h"
#include "service/config.h"
#include "service/detail/config_check.h"

namespace mocker::service {
namespace {

using detail::issue;

/// A tcp:// endpoint, parsed; nullopt for other schemes and malformed text.
std::optional<Endpoint> tcpEndpoint(std::string_view text) {
  auto ep = parseEndpoint(text);
  if (!ep || !ep->isTcp()) return std::nullopt;
  return std::move(*ep);
}

bool isWildcardTcp(std::string_view endpoint) {
  const auto ep = tcpEndpoint(endpoint);
  return ep && ep->wildcardPort();
}

/// Whether two bound endpoints would fight over the same address.
bool collide(std::string_view a, std::string_view b) {
  if (isWildcardTcp(a) || isWildcardTcp(b)) return false;  // ephemeral ports never collide
  const auto ta = tcpEndpoint(a);
  const auto tb = tcpEndpoint(b);
  if (ta && tb) {
    if (ta->port != tb->port) return false;
    const auto any = [](const std::string& h) { return h == "*" || h == "0.0.0.0"; };
    return ta->host == tb->host || any(ta->host) || any(tb->host);
  }
  return a == b;
}

/// A socket address the service binds, for the collision checks.
struct Bound {
  std::string key;
  std::string address;
  std::uint32_t rank;
};

}  // namespace

Result<std::string> rankEndpoint(const EndpointConfig& endpoint, std::uint32_t dp_rank) {
  // Every rank binds its own ephemeral port.
  if (isWildcardTcp(endpoint.endpoint)) return endpoint.endpoint;
  return offsetEndpoint(endpoint.endpoint, dp_rank);
}

namespace detail {
namespace {

/// Every bound socket's endpoint per DP rank into `bound`: scheme, DP offset, and no two on one
/// address.
std::optional<ConfigError> checkBoundSockets(const ServiceConfig& c, std::vector<Bound>& bound) {
  const KvEventsConfig& kv = c.kv_events;
  const bool prefill = c.engine.worker_type == engine::WorkerType::Prefill;
  struct Socket {
    std::string key;
    const EndpointConfig* endpoint;
    bool per_rank;
    bool enabled;
  };
  const std::vector<Socket> sockets = {
      {"endpoints.submit", &c.endpoints.submit, false, true},
      {"endpoints.cancel", &c.endpoints.cancel, false, true},
      {"endpoints.kv_events", &c.endpoints.kv_events, true, kv.enabled},
      {"endpoints.kv_replay", &c.endpoints.kv_replay, true, kv.enabled && kv.replay_enabled},
      {"endpoints.fpm", &c.endpoints.fpm, true, c.fpm.enabled},
      {"endpoints.handoff", &c.endpoints.handoff, false, prefill},
  };
  // Only endpoints on one tcp port, or equal non-tcp endpoints, can collide: each is checked
  // against those alone (dp_size 1024 binds 3,072 endpoints; all pairs took a third of a second).
  std::unordered_map<std::string, std::vector<std::size_t>> same_port;  // indices into `bound`
  const auto collisionKey = [](const std::string& address) {
    const auto ep = tcpEndpoint(address);
    return ep ? "tcp:" + ep->port : address;
  };
  for (const Socket& sock : sockets) {
    if (!sock.enabled) continue;
    const std::string key = sock.key + ".endpoint";
    if (sock.endpoint->endpoint.empty()) return issue(key, "must not be empty");
    const std::uint32_t ranks = sock.per_rank ? c.engine.dp_size : 1;
    for (std::uint32_t r = 0; r < ranks; ++r) {
      auto address = rankEndpoint(*sock.endpoint, r);
      if (!address) {
        return ConfigError{{key, "engine.dp_size"},
                           invalidArgument(key + ": " + address.error().message)};
      }
      if (sock.endpoint->connect || isWildcardTcp(*address)) continue;  // ephemeral: no collision
      std::vector<std::size_t>& candidates = same_port[collisionKey(*address)];
      for (const std::size_t i : candidates) {
        const Bound& other = bound[i];
        if (collide(*address, other.address)) {
          return issue(key,
                       "(" + *address + " for dp_rank " + std::to_string(r) + ") collides with " +
                           other.key + " (" + other.address + " for dp_rank " +
                           std::to_string(other.rank) +
                           "); per-rank endpoints use port + dp_rank, so space the base "
                           "ports at least dp_size (" +
                           std::to_string(c.engine.dp_size) + ") apart",
                       {other.key, "engine.dp_size"});
        }
      }
      candidates.push_back(bound.size());
      bound.push_back({key, *address, r});
    }
  }
  return std::nullopt;
}

/// A prefill worker's handoff ticket names an endpoint decode workers connect to: a wildcard
/// host is not one.
std::optional<ConfigError> checkHandoffAdvertise(const ServiceConfig& c) {
  const std::string& adv = c.endpoints.handoff_advertise;
  if (adv.empty()) {
    const auto bound_at = tcpEndpoint(c.endpoints.handoff.endpoint);
    if (!c.endpoints.handoff.connect && bound_at && bound_at->wildcardHost()) {
      return issue("endpoints.handoff.endpoint",
                   "binds a wildcard host (" + c.endpoints.handoff.endpoint +
                       "), which decode workers cannot connect to: set "
                       "endpoints.handoff.advertise to the endpoint they should use "
                       "(tcp://HOST:PORT)",
                   {"endpoints.handoff.advertise"});
    }
  } else if (c.fleet.num_workers > 1) {
    return issue("endpoints.handoff.advertise",
                 "names one endpoint, but each of the fleet.num_workers = " +
                     std::to_string(c.fleet.num_workers) + " workers binds its own handoff socket",
                 {"fleet.num_workers"});
  } else if (const auto ep = tcpEndpoint(adv);
             !ep || ep->host.empty() || ep->wildcardHost() || ep->port.empty() ||
             ep->port.find_first_not_of("0123456789") != std::string::npos) {
    return issue("endpoints.handoff.advertise",
                 "must be tcp://HOST:PORT with a connectable host and port (got '" + adv + "')");
  }
  return std::nullopt;
}

/// The HTTP server binds HOST:PORT over TCP: the same address space as the tcp:// sockets.
std::optional<ConfigError> checkHttpEndpoint(const ServiceConfig& c,
                                             const std::vector<Bound>& bound) {
  if (c.endpoints.http.enabled) {
    const std::string key = "endpoints.http.endpoint";
    auto hp = parseHttpEndpoint(c.endpoints.http.endpoint);
    if (!hp) return issue(key, hp.error().message);
    if (hp->port != 0) {
      const std::string address = "tcp://" + hp->host + ":" + std::to_string(hp->port);
      for (const Bound& other : bound) {
        if (collide(address, other.address)) {
          return issue(key,
                       "(" + c.endpoints.http.endpoint + ") collides with " + other.key + " (" +
                           other.address + " for dp_rank " + std::to_string(other.rank) + ")",
                       {other.key});
        }
      }
    }
  }
  return std::nullopt;
}

}  // namespace

std::optional<ConfigError> checkEndpoints(const ServiceConfig& c) {
  std::vector<Bound> bound;
  if (auto e = checkBoundSockets(c, bound)) return e;
  if (c.engine.worker_type == engine::WorkerType::Prefill) {
    if (auto e = checkHandoffAdvertise(c)) return e;
  }
  return checkHttpEndpoint(c, bound);
}

}  // namespace detail

Result<HttpHostPort> parseHttpEndpoint(std::string_view endpoint) {
  std::string shown(1, '\'');  // (built in steps: g++ 12 -Wrestrict misfires on "'" + s)
  shown.append(endpoint);
  shown += '\'';
  if (endpoint.find("://") != std::string_view::npos) {
    return invalidArgument(shown + " must be HOST:PORT without a scheme (e.g. 127.0.0.1:8000)");
  }
  const auto colon = endpoint.rfind(':');
  if (colon == std::string_view::npos) {
    return invalidArgument(shown + " must be HOST:PORT (e.g. 127.0.0.1:8000; port 0 = ephemeral)");
  }
  std::string_view host = endpoint.substr(0, colon);
  const std::string_view port_text = endpoint.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
    if (host.empty() || host.find_first_not_of("0123456789abcdefABCDEF:.") != host.npos) {
      return invalidArgument(shown + ": the bracketed host is not an IPv6 address");
    }
  } else if (host.empty() ||
             host.find_first_not_of("abcdefghijklmnopqrstuvwxyz"
                                    "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-") != host.npos) {
    return invalidArgument(shown +
                           ": the host must be an IPv4 address, a host name, * is not accepted "
                           "(use 0.0.0.0), IPv6 goes in brackets ([::1]:8000)");
  }
  std::uint32_t port = 0;
  const auto [end, ec] =
      std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc() || end != port_text.data() + port_text.size() ||
      port > 65535) {
    return invalidArgument(shown + ": the port must be a decimal number in [0, 65535]");
  }
  return HttpHostPort{std::string(host), static_cast<std::uint16_t>(port)};
}

}  // namespace mocker::service
