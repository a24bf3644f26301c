#include "gateway/kv_routing.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "engine/block_hash.h"
#include "engine/lora.h"

namespace mocker::gateway {

Result<std::unique_ptr<KvRouting>> KvRouting::start(KvRoutingOptions options) {
  MOCKER_TRY_VOID(replay::validateKvRouterConfig(options.router));
  std::vector<std::pair<std::size_t, std::uint32_t>> candidates;
  for (std::size_t w = 0; w < options.index.servers.size(); ++w) {
    for (std::uint32_t r = 0; r < options.index.servers[w].ranks; ++r)
      candidates.emplace_back(w, r);
  }
  MOCKER_TRY(auto index, index::LiveKvIndex::start(options.index));
  return std::unique_ptr<KvRouting>(
      new KvRouting(std::move(index), std::move(candidates), options));
}

KvRouting::KvRouting(std::unique_ptr<index::LiveKvIndex> index,
                     std::vector<std::pair<std::size_t, std::uint32_t>> candidates,
                     const KvRoutingOptions& options)
    : index_(std::move(index)),
      candidates_(std::move(candidates)),
      block_size_(options.index.block_size),
      seeds_(options.index.seeds),
      router_(candidates_.size(), options.index.block_size, options.router, options.seed),
      overlaps_(candidates_.size(), 0),
      cached_(candidates_.size(), 0) {}

KvRouting::Pick KvRouting::route(std::span<const std::uint32_t> prompt, std::uint64_t key,
                                 const std::optional<std::string>& lora) {
  hashes_.clear();
  engine::extendSequenceHashes(prompt, block_size_, engine::adapterSeeds(seeds_, lora), hashes_);
  if (const Status s = index_->overlaps(hashes_, overlaps_, cached_); !s) {
    if (query_failures_++ == 0) {
      spdlog::warn("gateway: kv router: {} (routed as if nothing were cached)", s.error().message);
    }
    std::fill(overlaps_.begin(), overlaps_.end(), 0);
    std::fill(cached_.begin(), cached_.end(), 0);
  }
  const auto prompt_tokens = static_cast<std::uint32_t>(prompt.size());
  const std::uint32_t g = router_.select(hashes_, prompt_tokens, overlaps_, cached_);
  router_.load().add(key, g, hashes_,
                     replay::newPrefillTokens(prompt_tokens, overlaps_[g], block_size_));
  ++routed_;
  if (overlaps_[g] > 0) ++routed_cached_;
  return {.worker = candidates_[g].first,
          .dp_rank = candidates_[g].second,
          .overlap_blocks = overlaps_[g]};
}

KvRoutingFigures KvRouting::figures() const {
  return {.routed = routed_,
          .routed_cached = routed_cached_,
          .query_failures = query_failures_,
          .index = index_->stats()};
}

}  // namespace mocker::gateway
