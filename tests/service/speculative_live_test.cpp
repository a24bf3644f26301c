// Speculative decoding through the live service, over real ZeroMQ sockets on ephemeral loopback
// ports: a burst reaches the client as one output entry carrying several tokens (the engine emits
// a burst's tokens in one pass; engine/README.md "Speculative decoding").
#include <gtest/gtest.h>

#include "engine/engine.h"
#include "live_service.h"

namespace mocker::service {
namespace {

using protocol::FinishReason;
using testing::collect;
using testing::LiveService;
using testing::prompt;
using testing::TestConfig;

ServiceConfig speculative(std::vector<double> rates) {
  ServiceConfig c = TestConfig().build();
  c.engine.spec_num_draft_tokens = 2;
  c.engine.spec_accept_rates = std::move(rates);
  return c;
}

// k = 2, every draft accepted, max_tokens 7 ⇒ bursts 3, 3, 1: entries at indices 0, 3, 6.
TEST(SpeculativeLiveTest, BurstsArriveAsMultiTokenEntries) {
  LiveService svc(speculative({1.0, 1.0}));
  auto c = svc.client();
  ASSERT_TRUE(c->submit({.id = "s", .prompt = prompt(10), .max_tokens = 7}));
  auto streams = collect(*c, {"s"});
  const auto& s = streams["s"];
  EXPECT_EQ(s.indices, (std::vector<std::uint32_t>{0, 3, 6}));
  ASSERT_EQ(s.tokens.size(), 7u);
  for (std::uint32_t k = 0; k < 7; ++k) {
    EXPECT_EQ(s.tokens[k], engine::syntheticToken(0, engine::RequestId{1}, k)) << k;
  }
  EXPECT_EQ(s.finish, FinishReason::Length);
  EXPECT_EQ(s.reason, "");
}

// Rates [0, 0]: one token per pass, as without drafts.
TEST(SpeculativeLiveTest, RejectedDraftsGiveOneTokenPerEntry) {
  LiveService svc(speculative({0.0, 0.0}));
  auto c = svc.client();
  ASSERT_TRUE(c->submit({.id = "s", .prompt = prompt(10), .max_tokens = 4}));
  auto streams = collect(*c, {"s"});
  EXPECT_EQ(streams["s"].indices, (std::vector<std::uint32_t>{0, 1, 2, 3}));
}

}  // namespace
}  // namespace mocker::service
