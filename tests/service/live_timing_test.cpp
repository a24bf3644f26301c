// Live timing: passes follow the modelled timeline (lateness is caught up, not inherited) and the
// service reports how late it published them (stats_reply.timing). Real sockets, a real server
// thread; the timing assertions are sanity bounds with a wide margin, not performance targets.
#include <gtest/gtest.h>

#include <chrono>

#include "live_service.h"

namespace mocker::service {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using testing::collect;
using testing::LiveService;
using testing::prompt;
using testing::TestConfig;

std::optional<protocol::StatsReply> statsOf(Client& c) {
  if (!c.send(protocol::StatsRequest{})) return std::nullopt;
  const auto deadline = Clock::now() + 10s;
  while (Clock::now() < deadline) {
    auto msg = c.receive(100ms);
    if (!msg || !*msg) continue;
    if (auto* s = std::get_if<protocol::StatsReply>(&**msg)) return *s;
  }
  return std::nullopt;
}

// One stream of N tokens, one pass each, every pass 1 ms modelled at speedup 10: 0.1 ms of wall
// time per pass, N·0.1 ms in all. A schedule that starts each pass when the loop reaches it adds
// the loop's work between passes (tens of microseconds) to every pass, so the stream runs
// 15-40 % long; anchored to the modelled timeline it takes the modelled time plus one wake-up.
TEST(LiveTimingTest, ManyShortPassesTakeTheirModelledTimeWithoutDrift) {
  constexpr std::uint32_t kTokens = 3000;
  constexpr double kSpeedup = 10;
  auto config = TestConfig().paced(/*prefill_ms=*/1, /*decode_ms=*/1).numGpuBlocks(4096).build();
  config.engine.speedup_ratio = kSpeedup;
  LiveService svc(std::move(config));
  auto c = svc.client();
  const auto sent = Clock::now();
  ASSERT_TRUE(c->submit({.id = "long", .prompt = prompt(4), .max_tokens = kTokens}));
  const auto streams = collect(*c, {"long"}, nullptr, 60s);
  const double wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - sent).count();
  ASSERT_EQ(streams.at("long").tokens.size(), kTokens);
  const double modelled_ms = kTokens * 1.0 / kSpeedup;  // 300 ms
  EXPECT_GE(wall_ms, modelled_ms * 0.999) << "passes ran ahead of the modelled timeline";
  EXPECT_LE(wall_ms, modelled_ms * 1.08 + 5)
      << "lateness accumulated over " << kTokens << " passes";

  const auto stats = statsOf(*c);
  ASSERT_TRUE(stats && stats->timing);
  const protocol::PassTiming& t = *stats->timing;
  EXPECT_GE(t.passes, kTokens);
  EXPECT_LE(t.lateness_p50_ms, t.lateness_p99_ms);
  EXPECT_LE(t.lateness_p99_ms, t.lateness_max_ms);
  EXPECT_LE(t.lateness_mean_ms, t.lateness_max_ms);
}

// The error of a stream's end-to-end time does not grow with its length: 300 and 3000 passes
// end within the same few milliseconds of their modelled end.
TEST(LiveTimingTest, EndToEndErrorDoesNotGrowWithOutputLength) {
  constexpr double kSpeedup = 10;
  auto config = TestConfig().paced(1, 1).numGpuBlocks(4096).build();
  config.engine.speedup_ratio = kSpeedup;
  LiveService svc(std::move(config));
  auto c = svc.client();
  double excess_ms[2] = {};
  const std::uint32_t lengths[2] = {300, 3000};
  for (int i = 0; i < 2; ++i) {
    const std::string id = i == 0 ? "short" : "long";
    const auto sent = Clock::now();
    ASSERT_TRUE(c->submit({.id = id, .prompt = prompt(4), .max_tokens = lengths[i]}));
    const auto streams = collect(*c, {id}, nullptr, 60s);
    ASSERT_EQ(streams.at(id).tokens.size(), lengths[i]);
    excess_ms[i] = std::chrono::duration<double, std::milli>(Clock::now() - sent).count() -
                   lengths[i] / kSpeedup;
  }
  EXPECT_GE(excess_ms[0], -0.5);
  EXPECT_GE(excess_ms[1], -0.5);
  // 2,700 more passes: at 10 µs inherited per pass that alone would be 27 ms.
  RecordProperty("excess_short_ms", std::to_string(excess_ms[0]));
  RecordProperty("excess_long_ms", std::to_string(excess_ms[1]));
  EXPECT_LT(excess_ms[1] - excess_ms[0], 15.0)
      << "short: +" << excess_ms[0] << " ms, long: +" << excess_ms[1] << " ms";
}

// Unpaced (speedup 0) passes are not timed: stats say so with zero passes.
TEST(LiveTimingTest, UnpacedServiceTimesNoPasses) {
  LiveService svc(TestConfig().build());
  auto c = svc.client();
  ASSERT_TRUE(c->submit({.id = "a", .prompt = prompt(4), .max_tokens = 50}));
  collect(*c, {"a"});
  const auto stats = statsOf(*c);
  ASSERT_TRUE(stats && stats->timing);
  EXPECT_EQ(stats->timing->passes, 0u);
  EXPECT_EQ(stats->timing->lateness_max_ms, 0.0);
}

}  // namespace
}  // namespace mocker::service
