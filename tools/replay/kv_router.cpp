#include "tools/replay/kv_router.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "base/check.h"

namespace mocker::replay {

Status validateKvRouterConfig(const KvRouterConfig& config) {
  if (!std::isfinite(config.overlap_weight) || config.overlap_weight < 0) {
    return invalidArgument("router overlap weight must be finite and >= 0 (got " +
                           std::to_string(config.overlap_weight) + ")");
  }
  if (!std::isfinite(config.temperature) || config.temperature < 0) {
    return invalidArgument("router temperature must be finite and >= 0 (got " +
                           std::to_string(config.temperature) + ")");
  }
  return {};
}

std::uint64_t newPrefillTokens(std::uint32_t prompt_tokens, std::uint32_t overlap_blocks,
                               std::uint32_t block_size) {
  const std::uint64_t cached = std::uint64_t{overlap_blocks} * block_size;
  return cached >= prompt_tokens ? 0 : prompt_tokens - cached;
}

double kvCost(double overlap_weight, const KvCostInputs& in) {
  MOCKER_CHECK(in.block_size >= 1);
  const std::uint64_t prefill_tokens =
      in.queued_prefill_tokens +
      newPrefillTokens(in.prompt_tokens, in.overlap_blocks, in.block_size);
  const double prefill_blocks =
      static_cast<double>(prefill_tokens) / static_cast<double>(in.block_size);
  return overlap_weight * prefill_blocks + static_cast<double>(in.decode_blocks);
}

std::size_t selectByCost(std::span<const double> costs, std::span<const std::uint64_t> tree_sizes,
                         double temperature, SplitMix64& rng) {
  MOCKER_CHECK(!costs.empty());
  MOCKER_CHECK(tree_sizes.empty() || tree_sizes.size() == costs.size());
  const auto [lo_it, hi_it] = std::minmax_element(costs.begin(), costs.end());
  const double lo = *lo_it;
  const double hi = *hi_it;
  if (temperature == 0.0) {
    // The cheapest; ties to the smallest index tree, then uniformly at random.
    std::uint64_t best_tree = std::numeric_limits<std::uint64_t>::max();
    std::size_t tied = 0;
    for (std::size_t c = 0; c < costs.size(); ++c) {
      if (costs[c] != lo) continue;
      const std::uint64_t tree = tree_sizes.empty() ? 0 : tree_sizes[c];
      if (tree < best_tree) {
        best_tree = tree;
        tied = 1;
      } else if (tree == best_tree) {
        ++tied;
      }
    }
    std::size_t pick = tied > 1 ? static_cast<std::size_t>(rng.uniformIndex(tied)) : 0;
    for (std::size_t c = 0; c < costs.size(); ++c) {
      if (costs[c] != lo || (tree_sizes.empty() ? 0 : tree_sizes[c]) != best_tree) continue;
      if (pick == 0) return c;
      --pick;
    }
    MOCKER_CHECK(false);
  }
  const double u = rng.uniform();
  if (lo == hi) {
    return std::min(costs.size() - 1,
                    static_cast<std::size_t>(u * static_cast<double>(costs.size())));
  }
  // Softmax over −(cost − lo) / (hi − lo) / T: the cheapest has weight 1, the dearest e^(−1/T).
  double sum = 0.0;
  for (const double c : costs) sum += std::exp(-(c - lo) / (hi - lo) / temperature);
  double cumulative = 0.0;
  for (std::size_t c = 0; c < costs.size(); ++c) {
    cumulative += std::exp(-(costs[c] - lo) / (hi - lo) / temperature) / sum;
    if (u <= cumulative) return c;
  }
  return costs.size() - 1;
}

ActiveLoad::ActiveLoad(std::size_t candidates)
    : holders_(std::numeric_limits<std::size_t>::max()),
      active_blocks_(candidates, 0),
      queued_prefill_(candidates, 0) {}

void ActiveLoad::add(std::uint64_t request, std::uint32_t candidate,
                     std::span<const std::uint64_t> hashes, std::uint64_t prefill_tokens) {
  MOCKER_CHECK(candidate < active_blocks_.size());
  auto [it, inserted] = requests_.try_emplace(request);
  MOCKER_CHECK(inserted);
  Active& a = it->second;
  a.candidate = candidate;
  a.hashes.assign(hashes.begin(), hashes.end());
  a.prefill_tokens = prefill_tokens;
  for (std::size_t i = 0; i < hashes.size(); ++i) {
    if (i + kPrefetchAhead < hashes.size()) holders_.prefetch(hashes[i + kPrefetchAhead]);
    addRef(hashes[i], candidate);
  }
  queued_prefill_[candidate] += prefill_tokens;
}

void ActiveLoad::addRef(std::uint64_t hash, std::uint32_t candidate) {
  auto [e, inserted] = holders_.findOrInsert(hash);
  if (inserted) {
    *e = Holders{1, {candidate, 1}, kNoList};
    ++active_blocks_[candidate];
    return;
  }
  if (e->first.candidate == candidate) {
    ++e->first.refs;
    return;
  }
  if (e->more != kNoList) {
    for (Holder& h : lists_[e->more]) {
      if (h.candidate == candidate) {
        ++h.refs;
        return;
      }
    }
  } else if (!free_lists_.empty()) {
    e->more = free_lists_.back();
    free_lists_.pop_back();
  } else {
    e->more = static_cast<std::uint32_t>(lists_.size());
    lists_.emplace_back();
  }
  lists_[e->more].push_back({candidate, 1});
  ++e->count;
  ++active_blocks_[candidate];
}

void ActiveLoad::dropRef(std::uint64_t hash, std::uint32_t candidate) {
  Holders* e = holders_.find(hash);
  MOCKER_CHECK(e != nullptr);
  Holder* h = &e->first;
  if (h->candidate != candidate) {
    MOCKER_CHECK(e->more != kNoList);
    std::vector<Holder>& list = lists_[e->more];
    const auto it = std::find_if(list.begin(), list.end(),
                                 [&](const Holder& x) { return x.candidate == candidate; });
    MOCKER_CHECK(it != list.end());
    h = &*it;
  }
  if (--h->refs > 0) return;
  --active_blocks_[candidate];
  if (e->count == 1) {
    holders_.erase(hash);
    return;
  }
  // Another holder remains: the list's last one fills the gap (inline or in the list).
  std::vector<Holder>& list = lists_[e->more];
  *h = list.back();
  list.pop_back();
  --e->count;
  if (list.empty()) {
    free_lists_.push_back(e->more);
    e->more = kNoList;
  }
}

void ActiveLoad::prefillDone(std::uint64_t request) {
  const auto it = requests_.find(request);
  if (it == requests_.end() || !it->second.prefill_queued) return;
  it->second.prefill_queued = false;
  queued_prefill_[it->second.candidate] -= it->second.prefill_tokens;
}

void ActiveLoad::remove(std::uint64_t request) {
  const auto it = requests_.find(request);
  if (it == requests_.end()) return;
  prefillDone(request);
  const std::vector<std::uint64_t>& hashes = it->second.hashes;
  for (std::size_t i = 0; i < hashes.size(); ++i) {
    if (i + kPrefetchAhead < hashes.size()) holders_.prefetch(hashes[i + kPrefetchAhead]);
    dropRef(hashes[i], it->second.candidate);
  }
  requests_.erase(it);
}

std::uint64_t ActiveLoad::activeBlocks(std::uint32_t candidate) const {
  return active_blocks_[candidate];
}

std::uint64_t ActiveLoad::newBlocks(std::uint32_t candidate,
                                    std::span<const std::uint64_t> hashes) const {
  std::vector<std::uint64_t> held;
  heldBlocks(hashes, held);
  return hashes.size() - held[candidate];
}

void ActiveLoad::heldBlocks(std::span<const std::uint64_t> hashes,
                            std::vector<std::uint64_t>& held) const {
  held.assign(active_blocks_.size(), 0);
  for (std::size_t i = 0; i < hashes.size(); ++i) {
    if (i + kPrefetchAhead < hashes.size()) holders_.prefetch(hashes[i + kPrefetchAhead]);
    const Holders* e = holders_.find(hashes[i]);
    if (e == nullptr) continue;
    ++held[e->first.candidate];
    if (e->more == kNoList) continue;
    for (const Holder& h : lists_[e->more]) ++held[h.candidate];
  }
}

std::uint64_t ActiveLoad::queuedPrefillTokens(std::uint32_t candidate) const {
  return queued_prefill_[candidate];
}

KvCostRouter::KvCostRouter(std::size_t candidates, std::uint32_t block_size, KvRouterConfig config,
                           std::uint64_t seed)
    : block_size_(block_size), config_(config), rng_(seed), load_(candidates) {
  MOCKER_CHECK(candidates >= 1 && block_size >= 1);
  costs_.resize(candidates);
}

std::uint32_t KvCostRouter::select(std::span<const std::uint64_t> hashes,
                                   std::uint32_t prompt_tokens,
                                   std::span<const std::uint32_t> overlaps,
                                   std::span<const std::uint64_t> tree_sizes) {
  return select(hashes, prompt_tokens, overlaps, tree_sizes, 0,
                static_cast<std::uint32_t>(costs_.size()));
}

std::uint32_t KvCostRouter::select(std::span<const std::uint64_t> hashes,
                                   std::uint32_t prompt_tokens,
                                   std::span<const std::uint32_t> overlaps,
                                   std::span<const std::uint64_t> tree_sizes, std::uint32_t first,
                                   std::uint32_t last) {
  MOCKER_CHECK(overlaps.size() == costs_.size());
  MOCKER_CHECK(first < last && last <= costs_.size());
  MOCKER_CHECK(tree_sizes.empty() || tree_sizes.size() == costs_.size());
  MOCKER_CHECK(excluded_.empty() || excluded_.size() == costs_.size());
  load_.heldBlocks(hashes, held_);  // one probe per block for every candidate
  for (std::uint32_t c = first; c < last; ++c) {
    costs_[c] = kvCost(config_.overlap_weight,
                       {.prompt_tokens = prompt_tokens,
                        .block_size = block_size_,
                        .overlap_blocks = overlaps[c],
                        .queued_prefill_tokens = load_.queuedPrefillTokens(c),
                        .decode_blocks = load_.activeBlocks(c) + hashes.size() - held_[c]});
  }
  kept_.clear();
  for (std::uint32_t c = first; c < last && !excluded_.empty(); ++c) {
    if (!excluded_[c]) kept_.push_back(c);
  }
  if (!kept_.empty() && kept_.size() < last - first) {
    kept_costs_.clear();
    kept_sizes_.clear();
    for (const std::uint32_t c : kept_) {
      kept_costs_.push_back(costs_[c]);
      if (!tree_sizes.empty()) kept_sizes_.push_back(tree_sizes[c]);
    }
    return kept_[selectByCost(kept_costs_, kept_sizes_, config_.temperature, rng_)];
  }
  const std::span<const double> costs =
      std::span<const double>(costs_).subspan(first, last - first);
  const std::span<const std::uint64_t> sizes =
      tree_sizes.empty() ? tree_sizes : tree_sizes.subspan(first, last - first);
  return first + static_cast<std::uint32_t>(selectByCost(costs, sizes, config_.temperature, rng_));
}

}  // namespace mocker::replay
