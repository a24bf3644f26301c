// Engine::submit under allocation failure: this binary replaces the global operator new so that
// a test can make exactly the k-th allocation from now on throw std::bad_alloc. For every k
// until a submit no longer allocates that many times, the submit must either succeed or be
// refused with ResourceExhausted leaving the rank unchanged (strong guarantee) — never let the
// exception escape — and the engine must then run every queued request to completion.
//
// A separate test binary: the replacement operator new applies to the whole program.
#include <gtest/gtest.h>

#include <cstdlib>
#include <new>
#include <string>

#include "engine/engine.h"

namespace {

long g_fail_in = -1;  // allocations left before the one that fails; -1: never fail

}  // namespace

void* operator new(std::size_t size) {
  if (g_fail_in == 0) {
    g_fail_in = -1;  // one failure only: the error path may allocate again
    throw std::bad_alloc();
  }
  if (g_fail_in > 0) --g_fail_in;
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
// The replacement new allocates with malloc, so its delete frees with free (g++ cannot see that).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#pragma GCC diagnostic pop

namespace mocker::engine {
namespace {

std::vector<std::uint32_t> prompt(std::uint32_t first) {
  std::vector<std::uint32_t> v;
  for (std::uint32_t t = first; t < first + 16; ++t) v.push_back(t);
  return v;
}

class SubmitOomTest : public ::testing::TestWithParam<EngineType> {};

TEST_P(SubmitOomTest, EveryAllocationFailureRefusesCleanlyAndLeavesTheEngineWorking) {
  EngineConfig cfg{.engine_type = GetParam(), .num_gpu_blocks = 64, .block_size = 4};
  if (GetParam() == EngineType::Sglang) {
    cfg.block_size = 0;
    cfg.sglang.page_size = 4;
  }
  Engine engine(cfg);
  std::uint64_t queued = 0;
  int refused = 0;
  for (long k = 0;; ++k) {
    Request request{.tokens = prompt(static_cast<std::uint32_t>(100 * k)), .max_output_tokens = 3};
    g_fail_in = k;
    const Result<RequestId> id = engine.submit(std::move(request));
    const bool failure_fired = g_fail_in == -1;
    g_fail_in = -1;
    if (id) {
      ++queued;
    } else {
      EXPECT_EQ(id.error().code, ErrorCode::ResourceExhausted) << id.error().toString();
      ++refused;
    }
    const Status ok = engine.checkInvariantsForTest(0);
    ASSERT_TRUE(ok.has_value()) << "k = " << k << ": " << ok.error().message;
    ASSERT_EQ(engine.loadMetrics(0).waiting_requests, queued) << "k = " << k;
    if (!failure_fired) break;  // the submit made fewer than k + 1 allocations
  }
  EXPECT_GT(refused, 0);
  double now = 0.0;
  std::uint64_t completed = 0;
  for (int pass = 0; pass < 10000 && engine.hasWork(0); ++pass) {
    const PassResult p = engine.step(0, now);
    now = p.end_ms;
    for (const OutputSignal& s : p.outputs) completed += s.terminal == Terminal::Completed;
  }
  EXPECT_EQ(completed, queued);
  EXPECT_FALSE(engine.hasWork(0));
}

INSTANTIATE_TEST_SUITE_P(EngineTypes, SubmitOomTest,
                         ::testing::Values(EngineType::Vllm, EngineType::Trtllm,
                                           EngineType::Sglang),
                         [](const ::testing::TestParamInfo<EngineType>& param_info) {
                           return std::string(toString(param_info.param));
                         });

}  // namespace
}  // namespace mocker::engine
