// `mocker index`'s per-tier overlap ("tiers": true) over its real query socket, fed by a real
// in-process worker with a host tier over PUB/SUB: blocks the worker offloads are answered in
// the CPU tier, and the answer is what the worker then reuses (its cached_tokens); after the
// onboarding the same prefix is answered on the GPU. The in-process index and engine are
// compared pass by pass in index_tiers_test.cpp; this is the same answer on the wire.
#include <gtest/gtest.h>

#include "tests/service/live_service.h"
#include "tests/tools/index_live_harness.h"

namespace mocker::index {
namespace {

using service::testing::collect;
using service::testing::LiveService;
using service::testing::prompt;
using testing::RunningIndex;

std::optional<TierBlocks> tiersOf(const OverlapReply& r) {
  if (r.workers.size() != 1 || r.workers[0].ranks.size() != 1) return std::nullopt;
  return r.workers[0].ranks[0].tiers;
}

TEST(IndexTiersLive, OffloadedBlocksAreAnsweredInTheHostTierAndOnboardedOnTheGpu) {
  // 8 GPU blocks of 4 tokens and a 64-block host tier, offload on eviction.
  service::ServiceConfig config = testing::eventsConfig(publishers::ReplayLayout::R1, 8, 10000);
  config.engine.num_g2_blocks = 64;
  config.engine.kv_bytes_per_token = 1000;
  LiveService svc(config);
  RunningIndex index(testing::indexConfig({testing::endpointOf(svc, 7)}));
  testing::waitLive(svc, index);
  auto client = svc.client();
  const auto run = [&](const std::string& id, std::vector<std::uint32_t> tokens) {
    EXPECT_TRUE(client->submit({.id = id, .prompt = std::move(tokens), .max_tokens = 1}));
    return collect(*client, {id}).at(id);
  };
  // 17 tokens: 4 full blocks the next admission of the same prompt can reuse whole (the last
  // token is computed anyway).
  const std::vector<std::uint32_t> a = prompt(17, 0);
  run("a", a);
  const OverlapQuery query{.id = "t", .tokens = a, .tiers = true};
  const auto on_gpu = index.overlapEventually(query, [](const OverlapReply& r) {
    return tiersOf(r) == TierBlocks{.gpu = 4, .cpu = 0, .disk = 0};
  });
  ASSERT_TRUE(on_gpu && tiersOf(*on_gpu)) << "a's 4 blocks never answered on the GPU";
  EXPECT_EQ(*tiersOf(*on_gpu), (TierBlocks{.gpu = 4, .cpu = 0, .disk = 0}));

  // 31 prompt tokens take all 8 GPU blocks: a's are evicted and offloaded to host memory.
  run("flush", prompt(31, 5000));
  const auto on_host = index.overlapEventually(query, [](const OverlapReply& r) {
    return tiersOf(r) == TierBlocks{.gpu = 0, .cpu = 4, .disk = 0};
  });
  ASSERT_TRUE(on_host && tiersOf(*on_host));
  EXPECT_EQ(*tiersOf(*on_host), (TierBlocks{.gpu = 0, .cpu = 4, .disk = 0}))
      << "a's blocks were not answered in host memory after the flush";
  EXPECT_EQ(on_host->workers[0].blocks, 0u) << "a plain overlap counts GPU blocks only";

  // The worker reuses exactly what the index answered: 4 host blocks, onboarded.
  const auto again = run("a-again", a);
  ASSERT_EQ(again.tokens.size(), 1u);
  EXPECT_EQ(again.cached_tokens, 4u * 4u);
  const auto back = index.overlapEventually(
      query, [](const OverlapReply& r) { return tiersOf(r) && tiersOf(r)->gpu == 4; });
  ASSERT_TRUE(back && tiersOf(*back));
  EXPECT_EQ(tiersOf(*back)->gpu, 4u) << "the onboarded blocks were not answered on the GPU";
}

}  // namespace
}  // namespace mocker::index
