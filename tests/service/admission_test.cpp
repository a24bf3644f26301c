#include "service/admission.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace mocker::service {
namespace {

using engine::RequestId;

protocol::SubmitRequest request(std::uint32_t prompt_len, std::uint32_t max_tokens) {
  return {.id = "r", .prompt = std::vector<std::uint32_t>(prompt_len, 7), .max_tokens = max_tokens};
}

TEST(AdmissionTest, MaxRequestTokensCountsPromptAndOutput) {
  LimitsConfig lim;
  lim.max_request_tokens = 100;
  RouteTable routes;
  EXPECT_EQ(limitBroken(lim, routes, "A", "", request(60, 40)), std::nullopt);
  const auto broken = limitBroken(lim, routes, "A", "", request(60, 41));
  ASSERT_TRUE(broken);
  EXPECT_EQ(broken->code, ErrorCode::InvalidArgument);
  EXPECT_EQ(broken->message,
            "limits.max_request_tokens: 60 prompt + 41 output tokens = 101 exceeds the limit of "
            "100");
  // Planned output tokens count instead of max_tokens.
  protocol::SubmitRequest planned = request(60, 1000);
  planned.output_tokens = std::vector<std::uint32_t>(40, 1);
  EXPECT_EQ(limitBroken(lim, routes, "A", "", planned), std::nullopt);
}

TEST(AdmissionTest, MaxClientsRefusesOnlyANewClient) {
  LimitsConfig lim;
  lim.max_clients = 1;
  RouteTable routes;
  routes.open("A", "a1", RequestId(1), 0, false);
  EXPECT_EQ(limitBroken(lim, routes, "A", "", request(1, 1)), std::nullopt);
  const auto broken = limitBroken(lim, routes, "B", "", request(1, 1));
  ASSERT_TRUE(broken);
  EXPECT_EQ(broken->code, ErrorCode::ResourceExhausted);
  EXPECT_EQ(broken->message,
            "limits.max_clients: 1 clients already have requests in flight (limit 1)");
}

TEST(AdmissionTest, PerClientLimitCountsTheRoutingIdOrWithCurveTheKey) {
  LimitsConfig lim;
  lim.max_requests_per_client = 2;
  RouteTable routes;
  routes.open("A", "a1", RequestId(1), 0, false, 8, "key");
  routes.open("B", "b1", RequestId(2), 0, false, 8, "key");
  // Without CURVE: routing id A has one route.
  EXPECT_EQ(limitBroken(lim, routes, "A", "", request(1, 1)), std::nullopt);
  // With CURVE: its key has two, over both routing ids (and a third routing id).
  const auto broken = limitBroken(lim, routes, "C", "key", request(1, 1));
  ASSERT_TRUE(broken);
  EXPECT_EQ(broken->message,
            "limits.max_requests_per_client: this client (its CURVE key) already has 2 requests "
            "in flight (limit 2)");
}

TEST(AdmissionTest, MaxRequestsCountsEveryRoute) {
  LimitsConfig lim;
  lim.max_requests = 2;
  RouteTable routes;
  routes.open("A", "a1", RequestId(1), 0, false);
  EXPECT_EQ(limitBroken(lim, routes, "B", "", request(1, 1)), std::nullopt);
  routes.open("B", "b1", RequestId(2), 0, false);
  const auto broken = limitBroken(lim, routes, "C", "", request(1, 1));
  ASSERT_TRUE(broken);
  EXPECT_EQ(broken->message, "limits.max_requests: 2 requests are in flight (limit 2)");
}

TEST(AdmissionTest, LeastLoadedRankAndBacklogFollowTheEngine) {
  engine::EngineConfig config;
  config.dp_size = 3;
  auto engine = engine::Engine::create(config);
  ASSERT_TRUE(engine) << engine.error().message;
  EXPECT_EQ(leastLoadedRank(*engine), 0u);  // ties go to the lowest index
  EXPECT_FALSE(submitsPaused(*engine, 1));
  for (std::uint32_t rank : {0u, 0u, 2u}) {
    ASSERT_TRUE(engine->submit({.tokens = {1, 2, 3}, .max_output_tokens = 4, .dp_rank = rank}));
  }
  EXPECT_EQ(leastLoadedRank(*engine), 1u);
  EXPECT_TRUE(submitsPaused(*engine, 3));
  EXPECT_FALSE(submitsPaused(*engine, 4));
}

TEST(AdmissionTest, AddressSpaceProbeProbesOncePerBudgetOfBytes) {
  EXPECT_TRUE(addressSpaceLeft(4096));
  EXPECT_FALSE(addressSpaceLeft(std::size_t{1} << 62));  // beyond any x86-64 address space
  const protocol::SubmitRequest req = request(10, 5);
  EXPECT_EQ(AddressSpaceProbe::cost(req), AddressSpaceProbe::kRequestOverheadBytes + 40);

  AddressSpaceProbe starved(/*headroom_bytes=*/std::size_t{1} << 62, /*probe_every_bytes=*/1000);
  EXPECT_TRUE(starved.admits(100));  // under the budget: no probe
  starved.accepted(950);
  EXPECT_FALSE(starved.admits(50));  // 1,000 bytes since the last probe: probed, refused
  EXPECT_EQ(starved.unprobedBytes(), 950u);

  AddressSpaceProbe roomy(/*headroom_bytes=*/4096, /*probe_every_bytes=*/1000);
  roomy.accepted(999);
  EXPECT_TRUE(roomy.admits(1));  // probed, room left: counting starts afresh
  EXPECT_EQ(roomy.unprobedBytes(), 0u);
}

}  // namespace
}  // namespace mocker::service
