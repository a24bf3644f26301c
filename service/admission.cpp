#include "service/admission.h"

#include <sys/mman.h>

#include <limits>

namespace mocker::service {

std::optional<Error> limitBroken(const LimitsConfig& lim, RouteTable& routes,
                                 const std::string& client, const std::string& principal,
                                 const protocol::SubmitRequest& req) {
  const std::uint64_t output =
      req.output_tokens ? req.output_tokens->size() : std::uint64_t{req.max_tokens};
  const std::uint64_t tokens = req.prompt.size() + output;
  if (tokens > lim.max_request_tokens) {
    return Error{ErrorCode::InvalidArgument,
                 "limits.max_request_tokens: " + std::to_string(req.prompt.size()) + " prompt + " +
                     std::to_string(output) + " output tokens = " + std::to_string(tokens) +
                     " exceeds the limit of " + std::to_string(lim.max_request_tokens)};
  }
  const ClientEntry* entry = routes.findClient(client);
  if (entry == nullptr && routes.numClients() >= lim.max_clients) {
    return Error{ErrorCode::ResourceExhausted,
                 "limits.max_clients: " + std::to_string(routes.numClients()) +
                     " clients already have requests in flight (limit " +
                     std::to_string(lim.max_clients) + ")"};
  }
  // With CURVE the client is its key, whatever routing ids it uses; without, its routing id.
  const std::uint64_t client_routes = !principal.empty() ? routes.routesOfPrincipal(principal)
                                      : entry != nullptr ? entry->num_routes
                                                         : 0;
  if (client_routes >= lim.max_requests_per_client) {
    return Error{ErrorCode::ResourceExhausted,
                 "limits.max_requests_per_client: this client " +
                     std::string(principal.empty() ? "" : "(its CURVE key) ") + "already has " +
                     std::to_string(client_routes) + " requests in flight (limit " +
                     std::to_string(lim.max_requests_per_client) + ")"};
  }
  if (routes.numRoutes() >= lim.max_requests) {
    return Error{ErrorCode::ResourceExhausted,
                 "limits.max_requests: " + std::to_string(routes.numRoutes()) +
                     " requests are in flight (limit " + std::to_string(lim.max_requests) + ")"};
  }
  return std::nullopt;
}

bool submitsPaused(const engine::Engine& engine, std::uint64_t max_backlog) {
  std::uint64_t waiting = 0;
  for (std::uint32_t r = 0; r < engine.dpSize(); ++r) {
    waiting += engine.loadMetrics(r).waiting_requests;
  }
  return waiting >= max_backlog;
}

std::uint32_t leastLoadedRank(const engine::Engine& engine) {
  std::uint32_t best = 0;
  std::uint64_t best_load = std::numeric_limits<std::uint64_t>::max();
  for (std::uint32_t r = 0; r < engine.dpSize(); ++r) {
    const auto l = engine.loadMetrics(r);
    const std::uint64_t load = l.running_requests + l.waiting_requests;
    if (load < best_load) {
      best = r;
      best_load = load;
    }
  }
  return best;
}

bool addressSpaceLeft(std::size_t bytes) {
  void* probe = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (probe == MAP_FAILED) return false;
  munmap(probe, bytes);
  return true;
}

std::size_t AddressSpaceProbe::cost(const protocol::SubmitRequest& req) {
  return kRequestOverheadBytes +
         sizeof(std::uint32_t) *
             (req.prompt.size() + (req.output_tokens ? req.output_tokens->size() : 0));
}

bool AddressSpaceProbe::admits(std::size_t cost) {
  if (unprobed_bytes_ + cost < probe_every_bytes_) return true;
  if (!addressSpaceLeft(headroom_bytes_)) return false;
  unprobed_bytes_ = 0;
  return true;
}

}  // namespace mocker::service
