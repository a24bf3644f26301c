// KvIndex apply and query throughput (the index must keep up with >= 1 M blocks/s of
// KV events). Events are generated up front; the timed loop only applies or queries them.
//
//   cmake -DMOCKER_BUILD_BENCHMARKS=ON ... && build/tests/bench/kv_index_benchmark
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "tools/index/kv_index.h"

namespace mocker::index {
namespace {

std::uint64_t mix(std::uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

/// Stored events of `blocks_per_event` fresh hashes for 4 workers × 2 ranks, then the Removed
/// events of the same hashes one by one (as the engine emits them on eviction).
struct Stream {
  std::vector<std::vector<std::uint64_t>> stored;
  std::vector<WorkerRank> source;
};

Stream makeStream(std::size_t events, std::size_t blocks_per_event) {
  Stream s;
  std::uint64_t next = 1;
  for (std::size_t e = 0; e < events; ++e) {
    std::vector<std::uint64_t> hashes;
    for (std::size_t b = 0; b < blocks_per_event; ++b) hashes.push_back(mix(next++));
    s.stored.push_back(std::move(hashes));
    s.source.push_back({e % 4, static_cast<std::uint32_t>((e / 4) % 2)});
  }
  return s;
}

// One iteration = store every block of the stream, then remove every block: 2 block operations
// per block. items_per_second counts block operations.
void BM_ApplyStoredThenRemoved(benchmark::State& state) {
  const auto blocks_per_event = static_cast<std::size_t>(state.range(0));
  const Stream s = makeStream(100000 / blocks_per_event, blocks_per_event);
  std::int64_t ops = 0;
  for (auto _ : state) {
    KvIndex index;
    for (std::size_t e = 0; e < s.stored.size(); ++e) {
      index.applyStored(s.source[e], s.stored[e], std::nullopt);
    }
    for (std::size_t e = 0; e < s.stored.size(); ++e) {
      for (const std::uint64_t h : s.stored[e]) {
        index.applyRemoved(s.source[e], std::span<const std::uint64_t>(&h, 1));
      }
    }
    benchmark::DoNotOptimize(index.numBlocksIndexed());
    ops += static_cast<std::int64_t>(2 * s.stored.size() * blocks_per_event);
  }
  state.SetItemsProcessed(ops);
}
BENCHMARK(BM_ApplyStoredThenRemoved)->Arg(1)->Arg(16)->Arg(64);

// Overlap query of a 256-block sequence against an index holding it on 8 sources at different
// depths (a KV-aware router's per-request cost).
void BM_OverlapQuery(benchmark::State& state) {
  KvIndex index;
  std::vector<std::uint64_t> chain;
  for (std::uint64_t i = 0; i < 256; ++i) chain.push_back(mix(i + 1));
  for (std::uint32_t w = 0; w < 8; ++w) {
    index.applyStored({w, 0}, std::span(chain).first(32 * (w + 1)), std::nullopt);
  }
  std::vector<std::uint32_t> blocks;
  for (auto _ : state) {
    index.overlapBlocks(chain, blocks);
    benchmark::DoNotOptimize(blocks.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * 256);
}
BENCHMARK(BM_OverlapQuery);

}  // namespace
}  // namespace mocker::index
