// KvIndex: the prefix index of which (worker, dp_rank) holds which KV block (kv_index.h).
#include "tools/index/kv_index.h"

#include <algorithm>
#include <bit>
#include <type_traits>
#include <utility>

#include "base/check.h"

namespace mocker::index {
namespace {

constexpr std::size_t kInitialCapacity = 1024;  // power of two
constexpr std::uint32_t kMaskSources = 64;

template <class... Ts>
struct Overloaded : Ts... {
  using Ts::operator()...;
};
template <class... Ts>
Overloaded(Ts...) -> Overloaded<Ts...>;

}  // namespace

KvIndex::KvIndex()
    : table_(kInitialCapacity),
      mask_(kInitialCapacity - 1),
      shift_(64 - std::countr_zero(kInitialCapacity)) {}
KvIndex::~KvIndex() = default;
KvIndex::KvIndex(KvIndex&&) noexcept = default;
KvIndex& KvIndex::operator=(KvIndex&&) noexcept = default;

std::uint32_t KvIndex::registerSource(WorkerRank source) {
  const auto [it, inserted] =
      source_ids_.emplace(source, static_cast<std::uint32_t>(sources_.size()));
  if (inserted) {
    sources_.push_back(source);
    blocks_per_source_.push_back(0);
  }
  return it->second;
}

std::optional<std::uint32_t> KvIndex::sourceIndex(WorkerRank source) const {
  const auto it = source_ids_.find(source);
  if (it == source_ids_.end()) return std::nullopt;
  return it->second;
}

// Fibonacci hashing: robust even for small sequential test keys.
std::size_t KvIndex::home(std::uint64_t hash) const {
  return static_cast<std::size_t>((hash * 0x9E37'79B9'7F4A'7C15ull) >> shift_);
}

KvIndex::Entry* KvIndex::find(std::uint64_t hash) {
  for (std::size_t i = home(hash);; i = (i + 1) & mask_) {
    Entry& e = table_[i];
    if (!e.occupied()) return nullptr;
    if (e.hash == hash) return &e;
  }
}

const KvIndex::Entry* KvIndex::find(std::uint64_t hash) const {
  return const_cast<KvIndex*>(this)->find(hash);
}

KvIndex::Entry& KvIndex::findOrInsert(std::uint64_t hash) {
  // Grow at 50 % load so probe runs stay short.
  if (2 * (size_ + 1) > table_.size()) grow();
  for (std::size_t i = home(hash);; i = (i + 1) & mask_) {
    Entry& e = table_[i];
    if (!e.occupied()) {
      e.hash = hash;  // caller adds an owner, which makes it occupied
      ++size_;
      return e;
    }
    if (e.hash == hash) return e;
  }
}

void KvIndex::eraseAt(std::size_t slot) {
  // Backward-shift deletion: move later members of the probe run into the hole when their home
  // position does not lie cyclically in (hole, j].
  std::size_t hole = slot;
  for (std::size_t j = (slot + 1) & mask_;; j = (j + 1) & mask_) {
    if (!table_[j].occupied()) break;
    const std::size_t h = home(table_[j].hash);
    const bool in_range = hole <= j ? (hole < h && h <= j) : (hole < h || h <= j);
    if (in_range) continue;
    table_[hole] = table_[j];
    hole = j;
  }
  table_[hole] = Entry{};
  --size_;
}

void KvIndex::grow() {
  std::vector<Entry> old = std::move(table_);
  table_.assign(old.size() * 2, Entry{});
  mask_ = table_.size() - 1;
  shift_ = 64 - std::countr_zero(table_.size());
  for (const Entry& e : old) {
    if (!e.occupied()) continue;
    std::size_t i = home(e.hash);
    while (table_[i].occupied()) i = (i + 1) & mask_;
    table_[i] = e;
  }
}

bool KvIndex::holds(const Entry& e, std::uint32_t source) const {
  if (source < kMaskSources) return (e.mask >> source) & 1u;
  if (e.overflow == kNoOverflow) return false;
  const auto& list = overflow_[e.overflow];
  return std::binary_search(list.begin(), list.end(), source);
}

bool KvIndex::addOwner(Entry& e, std::uint32_t source) {
  if (source < kMaskSources) {
    const std::uint64_t bit = std::uint64_t{1} << source;
    if (e.mask & bit) return false;
    e.mask |= bit;
    return true;
  }
  if (e.overflow == kNoOverflow) {
    if (free_overflow_.empty()) {
      e.overflow = static_cast<std::uint32_t>(overflow_.size());
      overflow_.emplace_back();
    } else {
      e.overflow = free_overflow_.back();
      free_overflow_.pop_back();
    }
  }
  auto& list = overflow_[e.overflow];
  const auto it = std::lower_bound(list.begin(), list.end(), source);
  if (it != list.end() && *it == source) return false;
  list.insert(it, source);
  return true;
}

bool KvIndex::removeOwner(Entry& e, std::uint32_t source) {
  if (source < kMaskSources) {
    const std::uint64_t bit = std::uint64_t{1} << source;
    if (!(e.mask & bit)) return false;
    e.mask &= ~bit;
    return true;
  }
  if (e.overflow == kNoOverflow) return false;
  auto& list = overflow_[e.overflow];
  const auto it = std::lower_bound(list.begin(), list.end(), source);
  if (it == list.end() || *it != source) return false;
  list.erase(it);
  if (list.empty()) {
    free_overflow_.push_back(e.overflow);
    e.overflow = kNoOverflow;
  }
  return true;
}

void KvIndex::applyStored(WorkerRank source, std::span<const std::uint64_t> block_hashes,
                          std::optional<std::uint64_t> parent_block_hash) {
  const std::uint32_t src = registerSource(source);
  ++counters_.events_applied;
  ++counters_.stored_events;
  if (parent_block_hash) {
    const Entry* parent = find(*parent_block_hash);
    if (parent == nullptr || !holds(*parent, src)) ++counters_.stored_with_unknown_parent;
  }
  std::uint64_t added = 0;
  for (std::size_t i = 0; i < block_hashes.size(); ++i) {
    if (i + kPrefetchAhead < block_hashes.size()) prefetch(block_hashes[i + kPrefetchAhead]);
    Entry& e = findOrInsert(block_hashes[i]);
    if (addOwner(e, src)) {
      ++added;
    } else {
      ++counters_.duplicate_stores;
    }
  }
  counters_.blocks_stored += added;
  blocks_per_source_[src] += added;
  num_pairs_ += added;
}

void KvIndex::applyRemoved(WorkerRank source, std::span<const std::uint64_t> block_hashes) {
  const std::uint32_t src = registerSource(source);
  ++counters_.events_applied;
  ++counters_.removed_events;
  for (std::size_t i = 0; i < block_hashes.size(); ++i) {
    if (i + kPrefetchAhead < block_hashes.size()) prefetch(block_hashes[i + kPrefetchAhead]);
    Entry* e = find(block_hashes[i]);
    if (e == nullptr || !removeOwner(*e, src)) {
      ++counters_.unknown_removes;
      continue;
    }
    ++counters_.blocks_removed;
    --blocks_per_source_[src];
    --num_pairs_;
    if (!e->occupied()) eraseAt(static_cast<std::size_t>(e - table_.data()));
  }
}

template <typename Pred>
void KvIndex::dropSources(Pred drop) {
  std::vector<Entry> old = std::move(table_);
  table_.assign(old.size(), Entry{});
  size_ = 0;
  for (Entry e : old) {
    if (!e.occupied()) continue;
    for (std::uint32_t s = 0; s < kMaskSources && e.mask != 0; ++s) {
      if (((e.mask >> s) & 1u) && drop(s)) e.mask &= ~(std::uint64_t{1} << s);
    }
    if (e.overflow != kNoOverflow) {
      auto& list = overflow_[e.overflow];
      std::erase_if(list, drop);
      if (list.empty()) {
        free_overflow_.push_back(e.overflow);
        e.overflow = kNoOverflow;
      }
    }
    if (!e.occupied()) continue;
    std::size_t i = home(e.hash);
    while (table_[i].occupied()) i = (i + 1) & mask_;
    table_[i] = e;
    ++size_;
  }
  num_pairs_ = 0;
  for (std::uint32_t s = 0; s < blocks_per_source_.size(); ++s) {
    if (drop(s)) blocks_per_source_[s] = 0;
    num_pairs_ += blocks_per_source_[s];
  }
}

void KvIndex::applyCleared(WorkerRank source) {
  const std::uint32_t src = registerSource(source);
  ++counters_.events_applied;
  ++counters_.cleared_events;
  if (blocks_per_source_[src] == 0) return;
  dropSources([src](std::uint32_t s) { return s == src; });
}

void KvIndex::apply(const engine::KvEvent& event, WorkerRank source) {
  std::visit(Overloaded{
                 [&](const engine::BlockStored& e) {
                   applyStored(source, e.block_hashes, e.parent_block_hash);
                 },
                 [&](const engine::BlockRemoved& e) {
                   applyRemoved(source, std::span<const std::uint64_t>(&e.block_hash, 1));
                 },
                 [&](const engine::AllBlocksCleared&) { applyCleared(source); },
             },
             event);
}

void KvIndex::removeWorker(std::uint64_t worker_id) {
  std::vector<bool> dropped(sources_.size(), false);
  bool any = false;
  for (std::uint32_t s = 0; s < sources_.size(); ++s) {
    if (sources_[s].worker_id == worker_id && blocks_per_source_[s] > 0) {
      dropped[s] = true;
      any = true;
    }
  }
  if (any) dropSources([&dropped](std::uint32_t s) { return bool(dropped[s]); });
}

void KvIndex::overlapBlocks(std::span<const std::uint64_t> block_hashes,
                            std::vector<std::uint32_t>& blocks_by_source) const {
  const std::size_t n_sources = sources_.size();
  blocks_by_source.assign(n_sources, 0);
  if (n_sources == 0 || block_hashes.empty()) return;
  // Sources still matching every hash so far: a mask for the first 64, a list beyond.
  std::uint64_t alive =
      n_sources >= kMaskSources ? ~std::uint64_t{0} : (std::uint64_t{1} << n_sources) - 1;
  std::vector<std::uint32_t> alive_overflow;
  for (std::uint32_t s = kMaskSources; s < n_sources; ++s) alive_overflow.push_back(s);
  const auto n = static_cast<std::uint32_t>(block_hashes.size());
  for (std::uint32_t i = 0; i < n; ++i) {
    // A long prompt's probes are cache misses once many sources fill the table: overlap them.
    if (i + kPrefetchAhead < n) prefetch(block_hashes[i + kPrefetchAhead]);
    const Entry* e = find(block_hashes[i]);
    const std::uint64_t owners = e ? e->mask : 0;
    std::uint64_t dropped = alive & ~owners;
    while (dropped != 0) {
      blocks_by_source[static_cast<std::size_t>(std::countr_zero(dropped))] = i;
      dropped &= dropped - 1;
    }
    alive &= owners;
    if (!alive_overflow.empty()) {
      std::erase_if(alive_overflow, [&](std::uint32_t s) {
        if (e != nullptr && holds(*e, s)) return false;
        blocks_by_source[s] = i;
        return true;
      });
    }
    if (alive == 0 && alive_overflow.empty()) return;
  }
  while (alive != 0) {
    blocks_by_source[static_cast<std::size_t>(std::countr_zero(alive))] = n;
    alive &= alive - 1;
  }
  for (const std::uint32_t s : alive_overflow) blocks_by_source[s] = n;
}

std::vector<Overlap> KvIndex::overlapsByHashes(std::span<const std::uint64_t> block_hashes) const {
  std::vector<std::uint32_t> blocks;
  overlapBlocks(block_hashes, blocks);
  std::vector<Overlap> out;
  out.reserve(blocks.size());
  for (std::size_t s = 0; s < blocks.size(); ++s) out.push_back({sources_[s], blocks[s]});
  return out;
}

std::vector<Overlap> KvIndex::overlapsByTokens(std::span<const std::uint32_t> tokens,
                                               std::uint32_t block_size,
                                               const engine::HashSeeds& seeds) const {
  MOCKER_CHECK(block_size >= 1);
  return overlapsByHashes(engine::sequenceHashes(tokens, block_size, seeds));
}

std::map<std::uint64_t, std::uint32_t> KvIndex::perWorker(const std::vector<Overlap>& overlaps) {
  std::map<std::uint64_t, std::uint32_t> out;
  for (const Overlap& o : overlaps) {
    auto& best = out[o.source.worker_id];
    best = std::max(best, o.blocks);
  }
  return out;
}

std::vector<std::uint64_t> KvIndex::snapshot(WorkerRank source) const {
  std::vector<std::uint64_t> out;
  const auto src = sourceIndex(source);
  if (!src || blocks_per_source_[*src] == 0) return out;
  out.reserve(blocks_per_source_[*src]);
  for (const Entry& e : table_) {
    if (e.occupied() && holds(e, *src)) out.push_back(e.hash);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::uint64_t KvIndex::numBlocks(WorkerRank source) const {
  const auto src = sourceIndex(source);
  return src ? blocks_per_source_[*src] : 0;
}

bool KvIndex::holds(WorkerRank source, std::uint64_t hash) const {
  const auto src = sourceIndex(source);
  if (!src) return false;
  const Entry* e = find(hash);
  return e != nullptr && holds(*e, *src);
}

SnapshotDiff diffSnapshot(const KvIndex& index, WorkerRank source,
                          std::vector<std::uint64_t> worker_hashes) {
  std::sort(worker_hashes.begin(), worker_hashes.end());
  worker_hashes.erase(std::unique(worker_hashes.begin(), worker_hashes.end()), worker_hashes.end());
  const std::vector<std::uint64_t> ours = index.snapshot(source);
  SnapshotDiff diff;
  std::set_difference(worker_hashes.begin(), worker_hashes.end(), ours.begin(), ours.end(),
                      std::back_inserter(diff.missing_in_index));
  std::set_difference(ours.begin(), ours.end(), worker_hashes.begin(), worker_hashes.end(),
                      std::back_inserter(diff.extra_in_index));
  return diff;
}

}  // namespace mocker::index
