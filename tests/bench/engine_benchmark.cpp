// Engine micro-benchmarks: block hashing, block-pool allocate/finalize/release, and a full
// offline engine run at several batch sizes. Figures only; no assertions on timing.
#include <benchmark/benchmark.h>

#include <numeric>
#include <vector>

#include "engine/block_hash.h"
#include "engine/block_pool.h"
#include "engine/offline_driver.h"

namespace mocker::engine {
namespace {

std::vector<std::uint32_t> iota(std::size_t n, std::uint32_t first = 1) {
  std::vector<std::uint32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

void BM_ContentHash64(benchmark::State& state) {
  const auto tokens = iota(64);
  for (auto _ : state) benchmark::DoNotOptimize(contentHash(tokens, kDefaultHashSeed));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations()) * 256);
}
BENCHMARK(BM_ContentHash64);

void BM_SequenceHashes(benchmark::State& state) {
  const auto tokens = iota(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) benchmark::DoNotOptimize(sequenceHashes(tokens, 64, HashSeeds{}));
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * state.range(0));
}
BENCHMARK(BM_SequenceHashes)->Arg(1024)->Arg(16384);

// One request's worth of pool traffic: allocate 16 blocks, finalize them, release them (they go
// inactive), in a pool that is full of inactive blocks so every allocation evicts.
void BM_PoolAllocateFinalizeRelease(benchmark::State& state) {
  BlockPool pool(4096);
  std::vector<KvEvent> events;
  std::vector<BlockId> blocks;
  std::uint64_t next_hash = 1;
  for (auto _ : state) {
    blocks.clear();
    events.clear();
    for (int i = 0; i < 16; ++i) blocks.push_back(pool.allocatePrivate(events));
    for (BlockId b : blocks) pool.finalize(b, BlockHash{next_hash++ * 0x9E3779B97F4A7C15ull});
    for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) pool.release(*it);
    benchmark::DoNotOptimize(events.data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(state.iterations()) * 16);
}
BENCHMARK(BM_PoolAllocateFinalizeRelease);

// A full offline run: `range(0)` requests arriving together, 1,024-token prompts sharing a
// 512-token prefix, 64 output tokens each, default engine config (16384 × 64-token blocks).
void BM_EngineRun(benchmark::State& state) {
  const auto n = static_cast<std::uint32_t>(state.range(0));
  const auto prefix = iota(512, 7);
  std::uint64_t tokens = 0;
  for (auto _ : state) {
    state.PauseTiming();
    Engine engine(EngineConfig{});
    OfflineDriver driver(engine);
    for (std::uint32_t i = 0; i < n; ++i) {
      std::vector<std::uint32_t> prompt;
      prompt.reserve(1024 + 64);
      prompt = prefix;
      const auto suffix = iota(512, 100000 + 512 * i);
      prompt.insert(prompt.end(), suffix.begin(), suffix.end());
      driver.add({0.0, Request{.tokens = std::move(prompt), .max_output_tokens = 64}, i});
    }
    state.ResumeTiming();
    driver.run();
    tokens += std::uint64_t{n} * (1024 + 64);
    benchmark::DoNotOptimize(driver.timelines().data());
  }
  state.SetItemsProcessed(static_cast<std::int64_t>(tokens));
}
BENCHMARK(BM_EngineRun)->Arg(16)->Arg(256)->Arg(1024)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace mocker::engine

BENCHMARK_MAIN();
