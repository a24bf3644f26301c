// LiveKvIndex (tools/index/live_kv_index.h): the socket-free layout (subscriptions from the
// servers' endpoints, global rank offsets, an overlap reply spread over global ranks), the
// start-up errors, and the whole thing against two real in-process `mocker serve` services
// (tests/service/live_service.h), one of them with two DP ranks. Waits poll with a deadline.
#include <gtest/gtest.h>

#include <chrono>

#include "engine/block_hash.h"
#include "tests/service/live_service.h"
#include "tools/index/live_kv_index.h"

namespace mocker::index {
namespace {

using namespace std::chrono_literals;
using service::testing::kSlowdown;
using service::testing::LiveService;

TEST(LiveKvLayout, SubscriptionsPerRankWithTheFirstEndpointOffsetForLaterRanks) {
  const std::vector<LiveKvServer> servers{
      {.submit_endpoint = "tcp://127.0.0.1:5555",
       .kv_events = {"tcp://127.0.0.1:5557"},
       .kv_replay = {"tcp://127.0.0.1:5558"},
       .ranks = 2},
      {.submit_endpoint = "tcp://10.0.0.2:7000",
       .kv_events = {"tcp://10.0.0.2:7002"},
       .kv_replay = {"tcp://10.0.0.2:7003"},
       .ranks = 1},
  };
  const auto subs = liveKvSubscriptions(servers);
  ASSERT_TRUE(subs.has_value()) << subs.error().message;
  const std::vector<WorkerEndpoint> expected{
      {.worker_id = 0,
       .dp_rank = 0,
       .events = "tcp://127.0.0.1:5557",
       .replay = "tcp://127.0.0.1:5558",
       .snapshot = "tcp://127.0.0.1:5555"},
      {.worker_id = 0,
       .dp_rank = 1,
       .events = "tcp://127.0.0.1:5558",
       .replay = "tcp://127.0.0.1:5559",
       .snapshot = "tcp://127.0.0.1:5555"},
      {.worker_id = 1,
       .dp_rank = 0,
       .events = "tcp://10.0.0.2:7002",
       .replay = "tcp://10.0.0.2:7003",
       .snapshot = "tcp://10.0.0.2:7000"},
  };
  EXPECT_EQ(*subs, expected);
  EXPECT_EQ(liveKvRankOffsets(servers), (std::vector<std::uint32_t>{0, 2}));
}

TEST(LiveKvLayout, OneEndpointPerRankIsTakenAsGiven) {
  const std::vector<LiveKvServer> servers{{.submit_endpoint = "tcp://h:1",
                                           .kv_events = {"tcp://h:10", "tcp://h:20"},
                                           .kv_replay = {"tcp://h:11", "tcp://h:21"},
                                           .ranks = 2}};
  const auto subs = liveKvSubscriptions(servers);
  ASSERT_TRUE(subs.has_value()) << subs.error().message;
  ASSERT_EQ(subs->size(), 2u);
  EXPECT_EQ((*subs)[1].events, "tcp://h:20");
  EXPECT_EQ((*subs)[1].replay, "tcp://h:21");
}

TEST(LiveKvLayout, ErrorsNameTheServerAndWhatIsMissing) {
  const auto fails = [](LiveKvServer server, const std::string& needle) {
    const auto r = liveKvSubscriptions({server});
    ASSERT_FALSE(r.has_value()) << needle;
    EXPECT_NE(r.error().message.find(needle), std::string::npos) << r.error().message;
    EXPECT_NE(r.error().message.find(server.submit_endpoint), std::string::npos)
        << r.error().message;
  };
  fails({.submit_endpoint = "tcp://h:1", .kv_replay = {"tcp://h:3"}}, "KV-event endpoint");
  fails({.submit_endpoint = "tcp://h:1", .kv_events = {"tcp://h:2"}}, "KV replay endpoint");
  fails({.submit_endpoint = "tcp://h:1",
         .kv_events = {"tcp://h:2", "tcp://h:4"},
         .kv_replay = {"tcp://h:3", "tcp://h:5"},
         .ranks = 3},
        "more DP ranks than KV-event endpoints");
  // Rank 1 of a wildcard port cannot be derived.
  const auto wildcard = liveKvSubscriptions({{.submit_endpoint = "tcp://h:1",
                                              .kv_events = {"tcp://h:*"},
                                              .kv_replay = {"tcp://h:3"},
                                              .ranks = 2}});
  ASSERT_FALSE(wildcard.has_value());
  EXPECT_NE(wildcard.error().message.find("tcp://h:*"), std::string::npos)
      << wildcard.error().message;
}

TEST(LiveKvLayout, SpreadOverlapsByGlobalRankIgnoringWhatIsOutsideTheLayout) {
  const std::vector<LiveKvServer> servers{{.submit_endpoint = "a", .ranks = 1},
                                          {.submit_endpoint = "b", .ranks = 2}};
  const OverlapReply reply{
      .num_blocks = 6,
      .workers = {{.worker_id = 0, .blocks = 2, .ranks = {{.dp_rank = 0, .blocks = 2}}},
                  {.worker_id = 1,
                   .blocks = 6,
                   .ranks = {{.dp_rank = 1, .blocks = 6, .cached = 40},
                             {.dp_rank = 2, .blocks = 9, .cached = 9}}},  // no rank 2
                  {.worker_id = 5, .blocks = 3, .ranks = {{.dp_rank = 0, .blocks = 3}}}}};
  std::vector<std::uint32_t> overlaps(3, 77);
  std::vector<std::uint64_t> cached(3, 77);
  spreadOverlaps(reply, servers, overlaps, cached);
  EXPECT_EQ(overlaps, (std::vector<std::uint32_t>{2, 0, 6}));
  EXPECT_EQ(cached, (std::vector<std::uint64_t>{0, 0, 40}));
}

TEST(LiveKvIndexStart, RefusesAnEmptyFleetAZeroBlockSizeAndMissingEndpoints) {
  auto r = LiveKvIndex::start({.block_size = 4});
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("at least one server"), std::string::npos);
  r = LiveKvIndex::start({.servers = {{.submit_endpoint = "tcp://127.0.0.1:1"}}});
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("block size"), std::string::npos);
  r = LiveKvIndex::start({.servers = {{.submit_endpoint = "tcp://127.0.0.1:1"}}, .block_size = 4});
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("KV-event endpoint"), std::string::npos);
}

service::ServiceConfig eventsConfig(std::uint32_t dp_size) {
  service::ServiceConfig c = service::testing::TestConfig().dpSize(dp_size).build();
  c.kv_events.enabled = true;
  c.kv_events.replay_enabled = true;
  return c;
}

LiveKvServer serverOf(const LiveService& svc, std::uint32_t ranks) {
  return {.submit_endpoint = svc.endpoints().submit,
          .kv_events = svc.endpoints().kv_events,
          .kv_replay = svc.endpoints().kv_replay,
          .ranks = ranks};
}

TEST(LiveKvIndexLive, OverlapsNameTheRankThatServedThePrompt) {
  LiveService a(eventsConfig(1));
  LiveService b(eventsConfig(2));
  auto index = LiveKvIndex::start({.servers = {serverOf(a, 1), serverOf(b, 2)}, .block_size = 4});
  ASSERT_TRUE(index.has_value()) << index.error().message;
  ASSERT_EQ((*index)->numRanks(), 3u);
  const auto deadline = std::chrono::steady_clock::now() + 20s * kSlowdown;
  const Status caught_up = (*index)->waitCaughtUp(deadline);
  ASSERT_TRUE(caught_up.has_value()) << caught_up.error().message;

  // 22 tokens = 5 full blocks of 4, served by b's rank 1 (global rank 1 + 1 = 2).
  const std::vector<std::uint32_t> served = service::testing::prompt(22, 5000);
  {
    auto client = b.client();
    ASSERT_TRUE(
        client->submit({.id = "p", .prompt = served, .max_tokens = 2, .dp_rank = 1}).has_value());
    service::testing::collect(*client, {"p"});
  }
  const std::vector<std::uint64_t> hashes = engine::sequenceHashes(served, 4, engine::HashSeeds{});
  std::vector<std::uint32_t> overlaps;
  std::vector<std::uint64_t> cached;
  while (std::chrono::steady_clock::now() < deadline) {
    const Status s = (*index)->overlaps(hashes, overlaps, cached);
    ASSERT_TRUE(s.has_value()) << s.error().message;
    if (overlaps.at(2) == 5) break;
  }
  EXPECT_EQ(overlaps, (std::vector<std::uint32_t>{0, 0, 5}));
  ASSERT_EQ(cached.size(), 3u);
  EXPECT_EQ(cached[0], 0u);
  EXPECT_EQ(cached[1], 0u);
  EXPECT_GE(cached[2], 5u);
  EXPECT_GE((*index)->stats().batches_applied, 1u);

  // A prompt shorter than a block is still answered: no overlap anywhere, the cache sizes stay.
  const Status empty = (*index)->overlaps({}, overlaps, cached);
  ASSERT_TRUE(empty.has_value()) << empty.error().message;
  EXPECT_EQ(overlaps, (std::vector<std::uint32_t>{0, 0, 0}));
  EXPECT_GE(cached[2], 5u);
}

}  // namespace
}  // namespace mocker::index
