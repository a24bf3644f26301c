#include "tools/replay/live_router.h"

#include <algorithm>

#include "base/check.h"
#include "engine/lora.h"
#include "tools/replay/decode_router.h"
#include "tools/replay/worker_health.h"

namespace mocker::replay {

LiveRouter::LiveRouter(LiveRouterConfig config, KvOverlapQuery query)
    : config_(std::move(config)),
      query_(std::move(query)),
      rng_(config_.seed),
      decode_in_flight_(config_.num_decode, 0) {
  MOCKER_CHECK(!config_.ranks_per_server.empty());
  if (config_.kind != RouterKind::Kv) return;
  MOCKER_CHECK(query_ != nullptr);
  for (std::uint32_t s = 0; s < config_.ranks_per_server.size(); ++s) {
    for (std::uint32_t r = 0; r < config_.ranks_per_server[s]; ++r) candidates_.emplace_back(s, r);
  }
  MOCKER_CHECK(!candidates_.empty());
  kv_.emplace(candidates_.size(), config_.kv_block_size, config_.kv, config_.seed);
  overlaps_.assign(candidates_.size(), 0);
  cached_.assign(candidates_.size(), 0);
}

std::optional<LiveRoute> LiveRouter::route(std::uint64_t request,
                                           std::span<const std::uint32_t> prompt,
                                           const std::vector<bool>& routable,
                                           const std::optional<std::string>& lora) {
  MOCKER_CHECK(routable.size() == config_.ranks_per_server.size());
  const std::uint64_t call = calls_++;
  const auto up = static_cast<std::uint64_t>(std::count(routable.begin(), routable.end(), true));
  if (up == 0) return std::nullopt;
  switch (config_.kind) {
    case RouterKind::Kv:
      return routeKv(request, prompt, routable, lora);
    case RouterKind::Random:
      return LiveRoute{.server = nthRoutable(routable, rng_.uniformIndex(up))};
    case RouterKind::RoundRobin:
    case RouterKind::KvPrefix:  // refused before a live run
      break;
  }
  return LiveRoute{.server = nthRoutable(routable, call % up)};
}

std::optional<LiveRoute> LiveRouter::routeKv(std::uint64_t request,
                                             std::span<const std::uint32_t> prompt,
                                             const std::vector<bool>& routable,
                                             const std::optional<std::string>& lora) {
  std::vector<bool> excluded(candidates_.size());
  for (std::size_t g = 0; g < candidates_.size(); ++g)
    excluded[g] = !routable[candidates_[g].first];
  kv_->setExcluded(std::move(excluded));
  hashes_.clear();
  engine::extendSequenceHashes(prompt, config_.kv_block_size,
                               engine::adapterSeeds(config_.kv_hash_seeds, lora), hashes_);
  LiveRoute route;
  if (const Status s = query_(hashes_, overlaps_, cached_); !s) {
    route.query_error = s.error().message;
    std::fill(overlaps_.begin(), overlaps_.end(), 0);
    std::fill(cached_.begin(), cached_.end(), 0);
  }
  const auto prompt_tokens = static_cast<std::uint32_t>(prompt.size());
  const std::uint32_t g = kv_->select(hashes_, prompt_tokens, overlaps_, cached_);
  kv_->load().add(request, g, hashes_,
                  newPrefillTokens(prompt_tokens, overlaps_[g], config_.kv_block_size));
  route.server = candidates_[g].first;
  route.rank = candidates_[g].second;
  route.cached_prefix = overlaps_[g] > 0;
  return route;
}

void LiveRouter::prefillDone(std::uint64_t request) {
  if (kv_) kv_->load().prefillDone(request);
}

void LiveRouter::released(std::uint64_t request) {
  if (kv_) kv_->load().remove(request);
}

std::optional<std::uint32_t> LiveRouter::routeDecode(std::uint64_t request,
                                                     const std::vector<bool>& routable) {
  MOCKER_CHECK(!decode_in_flight_.empty());
  MOCKER_CHECK(routable.size() == decode_in_flight_.size());
  // The rule over the routable servers alone: their loads, in order (round robin and random
  // take the k-th of them).
  std::vector<std::uint32_t> in_flight;
  for (std::uint32_t d = 0; d < routable.size(); ++d) {
    if (routable[d]) in_flight.push_back(decode_in_flight_[d]);
  }
  if (in_flight.empty()) return std::nullopt;
  const std::uint32_t k =
      pickDecodeWorker(decodeRouterKindFor(config_.decode_kind), config_.seed, request, in_flight);
  const std::uint32_t d = nthRoutable(routable, k);
  ++decode_in_flight_[d];
  return d;
}

void LiveRouter::decodeEnded(std::uint32_t decode_server) {
  MOCKER_CHECK(decode_in_flight_[decode_server] > 0);
  --decode_in_flight_[decode_server];
}

}  // namespace mocker::replay
