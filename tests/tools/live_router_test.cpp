// The live replay's routing choice without sockets (tools/replay/live_router.h): each router kind
// over the routable servers only, the kv router's cache view and load, and the decode hop.
#include "tools/replay/live_router.h"

#include <gtest/gtest.h>

#include <numeric>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "engine/lora.h"
#include "tools/replay/decode_router.h"

namespace mocker::replay {
namespace {

std::vector<std::uint32_t> prompt(std::uint32_t first, std::uint32_t n) {
  std::vector<std::uint32_t> p(n);
  std::iota(p.begin(), p.end(), first);
  return p;
}

LiveRouter plainRouter(RouterKind kind, std::uint32_t servers, std::uint64_t seed = 7) {
  return LiveRouter(
      {.kind = kind, .seed = seed, .ranks_per_server = std::vector<std::uint32_t>(servers, 1)},
      nullptr);
}

TEST(LiveRouterTest, RoundRobinCountsEveryCallAndSkipsServersThatAreNotRoutable) {
  LiveRouter router = plainRouter(RouterKind::RoundRobin, 3);
  const std::vector<bool> all{true, true, true};
  const std::vector<bool> without_1{true, false, true};
  std::vector<std::uint32_t> got;
  for (std::uint64_t k = 0; k < 3; ++k) got.push_back(router.route(k, prompt(0, 4), all)->server);
  EXPECT_EQ(got, (std::vector<std::uint32_t>{0, 1, 2}));
  // Calls 3, 4, 5 among servers 0 and 2: 3 mod 2 = 1 → 2, then 0, then 2.
  got.clear();
  for (std::uint64_t k = 3; k < 6; ++k) {
    got.push_back(router.route(k, prompt(0, 4), without_1)->server);
  }
  EXPECT_EQ(got, (std::vector<std::uint32_t>{2, 0, 2}));
  // None routable: no choice, but the call counts (call 6), so call 7 goes to 7 mod 3 = 1.
  EXPECT_FALSE(router.route(6, prompt(0, 4), {false, false, false}).has_value());
  EXPECT_EQ(router.route(7, prompt(0, 4), all)->server, 1u);
  EXPECT_FALSE(router.route(8, prompt(0, 4), all)->rank.has_value());  // the server picks
}

TEST(LiveRouterTest, RandomDrawsOnlyRoutableServersAndIsDeterministicPerSeed) {
  LiveRouter a = plainRouter(RouterKind::Random, 4, 11);
  LiveRouter b = plainRouter(RouterKind::Random, 4, 11);
  LiveRouter c = plainRouter(RouterKind::Random, 4, 12);
  const std::vector<bool> routable{true, false, true, true};
  std::set<std::uint32_t> seen;
  bool differs = false;
  for (std::uint64_t k = 0; k < 200; ++k) {
    const std::uint32_t s = a.route(k, prompt(0, 4), routable)->server;
    EXPECT_EQ(b.route(k, prompt(0, 4), routable)->server, s);
    differs |= c.route(k, prompt(0, 4), routable)->server != s;
    seen.insert(s);
  }
  EXPECT_EQ(seen, (std::set<std::uint32_t>{0, 2, 3}));
  EXPECT_TRUE(differs);
}

/// Two servers, the first with two DP ranks: candidates (0,0), (0,1), (1,0). The query answers
/// from `overlaps` (leading cached blocks by candidate) or fails when `fail` is set.
struct KvFixture {
  std::vector<std::uint32_t> overlaps{0, 0, 0};
  bool fail = false;
  std::vector<std::size_t> queried_hashes;
  LiveRouter router{{.kind = RouterKind::Kv,
                     .seed = 3,
                     .ranks_per_server = {2, 1},
                     .kv_block_size = 4,
                     .decode_kind = RouterKind::Kv,
                     .num_decode = 2},
                    [this](std::span<const std::uint64_t> hashes, std::vector<std::uint32_t>& o,
                           std::vector<std::uint64_t>& cached) -> Status {
                      queried_hashes.push_back(hashes.size());
                      if (fail) return Error{ErrorCode::IoError, "index gone"};
                      o = overlaps;
                      cached.assign(o.begin(), o.end());
                      return {};
                    }};
};

TEST(LiveRouterTest, KvGoesToTheCachedPrefixUnlessItsServerIsNotRoutable) {
  KvFixture f;
  f.overlaps = {0, 0, 2};  // server 1 holds both blocks of the prompt
  const std::optional<LiveRoute> hit = f.router.route(0, prompt(100, 8), {true, true});
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(hit->server, 1u);
  EXPECT_EQ(hit->rank, std::optional<std::uint32_t>(0));
  EXPECT_TRUE(hit->cached_prefix);
  EXPECT_FALSE(hit->query_error.has_value());
  EXPECT_EQ(f.queried_hashes, (std::vector<std::size_t>{2}));  // 8 tokens = 2 blocks of 4
  // Server 1 down: one of server 0's ranks, without the cache.
  f.overlaps = {0, 0, 2};
  const std::optional<LiveRoute> away = f.router.route(1, prompt(100, 8), {true, false});
  ASSERT_TRUE(away.has_value());
  EXPECT_EQ(away->server, 0u);
  EXPECT_FALSE(away->cached_prefix);
  EXPECT_FALSE(f.router.route(2, prompt(100, 8), {false, false}).has_value());
}

// The prompt is hashed under its adapter as the engine hashes it: server 1 holds the blocks
// adapter A's request stored there (the engine's hashes), a hit for A only, not for adapter B
// nor the base model with the same tokens.
TEST(LiveRouterTest, KvScoresAnAdaptersBlocksOnlyForThatAdapter) {
  const engine::HashSeeds seeds{};
  const std::vector<std::uint32_t> tokens = prompt(100, 8);
  const std::vector<std::uint64_t> stored =
      engine::sequenceHashes(tokens, 4, engine::adapterSeeds(seeds, std::string("A")));
  LiveRouter router{
      {.kind = RouterKind::Kv,
       .seed = 3,
       .ranks_per_server = {1, 1},
       .kv_block_size = 4,
       .kv_hash_seeds = seeds},
      [&](std::span<const std::uint64_t> hashes, std::vector<std::uint32_t>& o,
          std::vector<std::uint64_t>& cached) -> Status {
        std::uint32_t lead = 0;
        while (lead < hashes.size() && lead < stored.size() && hashes[lead] == stored[lead]) {
          ++lead;
        }
        o = {0, lead};
        cached = {0, stored.size()};
        return {};
      }};
  const std::vector<bool> all{true, true};
  const std::optional<LiveRoute> a = router.route(0, tokens, all, std::string("A"));
  EXPECT_EQ(a->server, 1u);
  EXPECT_TRUE(a->cached_prefix);
  router.released(0);
  for (const std::optional<std::string>& other :
       {std::optional<std::string>("B"), std::optional<std::string>()}) {
    const std::optional<LiveRoute> r = router.route(1, tokens, all, other);
    EXPECT_FALSE(r->cached_prefix) << other.value_or("(base)");
    router.released(1);
  }
}

TEST(LiveRouterTest, KvLoadSpreadsRequestsUntilReleasedAndAFailedQueryRoutesWithoutCache) {
  KvFixture f;
  f.fail = true;
  std::set<std::pair<std::uint32_t, std::uint32_t>> used;
  for (std::uint64_t k = 0; k < 3; ++k) {
    const std::optional<LiveRoute> r = f.router.route(k, prompt(0, 8), {true, true});
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->query_error, std::optional<std::string>("index gone"));
    used.insert({r->server, *r->rank});
  }
  EXPECT_EQ(used.size(), 3u);  // each request's load pushes the next one to another rank
  // Released (ended, or migrated away): their load is gone, and a request with the same prompt
  // after prefillDone of the others sees only their decode blocks.
  f.fail = false;
  for (std::uint64_t k = 0; k < 3; ++k) f.router.released(k);
  f.router.released(99);  // unknown: ignored
  f.overlaps = {0, 2, 0};
  EXPECT_EQ(f.router.route(3, prompt(0, 8), {true, true})->rank, std::optional<std::uint32_t>(1));
}

TEST(LiveRouterTest, DecodeHopByKindAndLoad) {
  KvFixture f;  // decode kind kv: the least loaded decode server, ties to the lowest
  const std::vector<bool> both = {true, true};
  EXPECT_EQ(f.router.routeDecode(0, both), std::optional<std::uint32_t>(0));
  EXPECT_EQ(f.router.routeDecode(1, both), std::optional<std::uint32_t>(1));
  EXPECT_EQ(f.router.routeDecode(2, both), std::optional<std::uint32_t>(0));
  f.router.decodeEnded(0);
  f.router.decodeEnded(0);
  EXPECT_EQ(f.router.routeDecode(3, both), std::optional<std::uint32_t>(0));
  LiveRouter rr({.kind = RouterKind::RoundRobin,
                 .ranks_per_server = {1},
                 .decode_kind = RouterKind::RoundRobin,
                 .num_decode = 3},
                nullptr);
  const std::vector<bool> all = {true, true, true};
  EXPECT_EQ(rr.routeDecode(4, all), std::optional<std::uint32_t>(1));  // the request key mod 3
  EXPECT_EQ(rr.routeDecode(8, all), std::optional<std::uint32_t>(2));
}

LiveRouter decodeRouter(RouterKind kind, std::uint32_t num_decode) {
  return LiveRouter({.kind = RouterKind::RoundRobin,
                     .ranks_per_server = {1},
                     .decode_kind = kind,
                     .num_decode = num_decode},
                    nullptr);
}

TEST(LiveRouterTest, DecodeHopSkipsDecodeServersThatAreNotRoutable) {
  // Every kind: a decode server left out of the mask never gets a handoff; with every one
  // routable the choice is the plain rule's (decode_router.h); none routable: nullopt.
  for (const RouterKind kind : {RouterKind::RoundRobin, RouterKind::Random, RouterKind::Kv}) {
    SCOPED_TRACE(std::string(toString(kind)));
    LiveRouter masked = decodeRouter(kind, 3);
    LiveRouter plain = decodeRouter(kind, 3);
    const std::vector<bool> all = {true, true, true};
    const std::vector<bool> one_down = {true, false, true};
    std::vector<std::uint32_t> per(3, 0);
    for (std::uint64_t k = 0; k < 60; ++k) {
      // All routable, loads kept at 0: the plain rule's choice.
      const std::optional<std::uint32_t> p = plain.routeDecode(k, all);
      ASSERT_TRUE(p.has_value());
      EXPECT_EQ(*p,
                pickDecodeWorker(decodeRouterKindFor(kind), 0, k, std::vector<std::uint32_t>(3, 0)))
          << k;
      plain.decodeEnded(*p);
      const std::optional<std::uint32_t> d = masked.routeDecode(k, one_down);
      ASSERT_TRUE(d.has_value());
      EXPECT_NE(*d, 1u);
      ++per[*d];  // kept in flight: least loaded alternates between the survivors
    }
    // Both survivors share the handoffs.
    EXPECT_GT(per[0], 0u);
    EXPECT_GT(per[2], 0u);
    EXPECT_EQ(masked.routeDecode(99, {false, false, false}), std::nullopt);
  }
  // Round robin over the routable ones: the request key mod their count picks among them.
  LiveRouter rr = decodeRouter(RouterKind::RoundRobin, 3);
  EXPECT_EQ(rr.routeDecode(0, {false, true, true}), std::optional<std::uint32_t>(1));
  EXPECT_EQ(rr.routeDecode(1, {false, true, true}), std::optional<std::uint32_t>(2));
  EXPECT_EQ(rr.routeDecode(2, {false, true, true}), std::optional<std::uint32_t>(1));
  // Least loaded (kv): the load of a server left out does not count.
  LiveRouter ll = decodeRouter(RouterKind::Kv, 2);
  EXPECT_EQ(ll.routeDecode(0, {true, true}), std::optional<std::uint32_t>(0));
  EXPECT_EQ(ll.routeDecode(1, {false, true}), std::optional<std::uint32_t>(1));
  EXPECT_EQ(ll.routeDecode(2, {false, true}), std::optional<std::uint32_t>(1));
  EXPECT_EQ(ll.routeDecode(3, {true, false}), std::optional<std::uint32_t>(0));
}

}  // namespace
}  // namespace mocker::replay
