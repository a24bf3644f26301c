// Engine benchmark for the three engine types on one synthetic workload: 500 requests with
// prompts of 2,000–8,000 tokens built from shared 512-token prefix blocks, 50–200 output tokens,
// arrivals every 20 ms, 16384 KV blocks of each engine's default size (SGLang page_size 64),
// run to completion through OfflineDriver on the virtual clock. Measures the simulator's CPU
// time, not modelled time. Target: sglang and trtllm within 2x of vllm.
//
//   cmake -B build-bench -DMOCKER_BUILD_BENCHMARKS=ON
//   cmake --build build-bench --target sglang_benchmark
//   build-bench/tests/bench/sglang_benchmark
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "engine/engine.h"
#include "engine/offline_driver.h"

namespace mocker::engine {
namespace {

std::vector<TimedArrival> workload() {
  std::mt19937_64 rng(7);
  const auto uniform = [&](std::uint32_t lo, std::uint32_t hi) {
    return static_cast<std::uint32_t>(lo + rng() % (hi - lo + 1));
  };
  // 16 shared 512-token blocks; a prompt is a chain of shared blocks then a unique tail.
  constexpr std::uint32_t kBlock = 512;
  std::vector<std::vector<std::uint32_t>> blocks(16);
  for (std::uint32_t b = 0; b < blocks.size(); ++b) {
    for (std::uint32_t t = 0; t < kBlock; ++t) blocks[b].push_back(1 + b * kBlock + t);
  }
  std::vector<TimedArrival> out;
  for (std::uint32_t i = 0; i < 500; ++i) {
    const std::uint32_t len = uniform(2000, 8000);
    std::vector<std::uint32_t> tokens;
    tokens.reserve(len);
    const std::uint32_t shared = uniform(0, len / kBlock);
    std::uint32_t b = uniform(0, 3);
    for (std::uint32_t k = 0; k < shared; ++k, b = (b * 5 + 1) % 16) {
      tokens.insert(tokens.end(), blocks[b].begin(), blocks[b].end());
    }
    while (tokens.size() < len) tokens.push_back(uniform(10000, 60000));
    out.push_back(
        {20.0 * i, Request{.tokens = std::move(tokens), .max_output_tokens = uniform(50, 200)}, i});
  }
  return out;
}

void runEngine(benchmark::State& state, EngineType type) {
  const std::vector<TimedArrival> arrivals = workload();
  EngineConfig config;
  config.engine_type = type;
  config.num_gpu_blocks = 16384;
  if (type == EngineType::Sglang) config.sglang.page_size = 64;
  std::uint64_t passes = 0, tokens = 0;
  for (auto _ : state) {
    state.PauseTiming();
    auto engine = Engine::create(config);
    if (!engine) {
      state.SkipWithError(engine.error().message.c_str());
      return;
    }
    OfflineDriver driver(*engine);
    for (const TimedArrival& a : arrivals) driver.add(a);
    state.ResumeTiming();
    passes = driver.run();
    tokens = 0;
    for (const auto& t : driver.timelines()) tokens += t.tokens.size();
    benchmark::DoNotOptimize(tokens);
  }
  state.counters["passes"] = static_cast<double>(passes);
  state.counters["output_tokens"] = static_cast<double>(tokens);
}

void BM_Vllm(benchmark::State& state) { runEngine(state, EngineType::Vllm); }
void BM_Trtllm(benchmark::State& state) { runEngine(state, EngineType::Trtllm); }
void BM_Sglang(benchmark::State& state) { runEngine(state, EngineType::Sglang); }

BENCHMARK(BM_Vllm)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Trtllm)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Sglang)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace mocker::engine

BENCHMARK_MAIN();
