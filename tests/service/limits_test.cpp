// [limits] over real sockets: each limit refuses the submit that would break it with an `error`
// naming the limit, leaves everything else running, and admits again once there is room.
#include <gtest/gtest.h>

#include "live_service.h"

namespace mocker::service {
namespace {

using namespace std::chrono_literals;
using testing::LiveService;
using testing::prompt;
using testing::TestConfig;

ServiceConfig limited(void (*set)(LimitsConfig&)) {
  ServiceConfig c = TestConfig().paced(1, 1).build();
  set(c.limits);
  return c;
}

/// Submits `id` and waits for its ack or an error naming it; returns the error (nullopt: acked).
std::optional<protocol::ErrorReply> submitExpectingAckOrError(net::Client& c, const std::string& id,
                                                              std::uint32_t max_tokens = 100000,
                                                              std::uint32_t prompt_len = 8) {
  EXPECT_TRUE(c.submit({.id = id, .prompt = prompt(prompt_len), .max_tokens = max_tokens}));
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline) {
    auto m = c.receive(50ms);
    if (!m || !*m) continue;
    if (auto* a = std::get_if<protocol::SubmitAck>(&**m); a && a->id == id) return std::nullopt;
    if (auto* e = std::get_if<protocol::ErrorReply>(&**m); e && e->id == id) return *e;
  }
  ADD_FAILURE() << "neither an ack nor an error for " << id;
  return protocol::ErrorReply{};
}

/// Waits for the terminal entry of `id` (earlier outputs of it may have been skipped).
void awaitTerminal(net::Client& c, const std::string& id) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline) {
    auto m = c.receive(50ms);
    if (!m || !*m) continue;
    if (auto* b = std::get_if<protocol::OutputBatch>(&**m)) {
      for (const auto& o : b->outputs) {
        if (o.id == id && o.finish) return;
      }
    }
  }
  ADD_FAILURE() << "no terminal for " << id;
}

TEST(LimitsTest, RequestsPerClient) {
  LiveService svc(limited([](LimitsConfig& l) { l.max_requests_per_client = 2; }));
  auto a = svc.client();
  auto b = svc.client();
  EXPECT_FALSE(submitExpectingAckOrError(*a, "a1"));
  EXPECT_FALSE(submitExpectingAckOrError(*a, "a2"));
  const auto refused = submitExpectingAckOrError(*a, "a3");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->code, ErrorCode::ResourceExhausted);
  EXPECT_NE(refused->message.find("limits.max_requests_per_client"), std::string::npos)
      << refused->message;
  EXPECT_FALSE(submitExpectingAckOrError(*b, "b1"));  // another client is not affected
  // Room again once one of a's requests has ended.
  ASSERT_TRUE(a->cancel("a1"));
  awaitTerminal(*a, "a1");
  EXPECT_FALSE(submitExpectingAckOrError(*a, "a3"));
}

TEST(LimitsTest, RequestsInTotal) {
  LiveService svc(limited([](LimitsConfig& l) { l.max_requests = 3; }));
  auto a = svc.client();
  auto b = svc.client();
  EXPECT_FALSE(submitExpectingAckOrError(*a, "a1"));
  EXPECT_FALSE(submitExpectingAckOrError(*a, "a2"));
  EXPECT_FALSE(submitExpectingAckOrError(*b, "b1"));
  const auto refused = submitExpectingAckOrError(*b, "b2");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->code, ErrorCode::ResourceExhausted);
  EXPECT_NE(refused->message.find("limits.max_requests:"), std::string::npos) << refused->message;
  ASSERT_TRUE(a->cancel("a1"));
  awaitTerminal(*a, "a1");
  EXPECT_FALSE(submitExpectingAckOrError(*b, "b2"));
}

TEST(LimitsTest, ConnectedClients) {
  LiveService svc(limited([](LimitsConfig& l) { l.max_clients = 1; }));
  auto a = svc.client();
  auto b = svc.client();
  EXPECT_FALSE(submitExpectingAckOrError(*a, "a1"));
  EXPECT_FALSE(submitExpectingAckOrError(*a, "a2"));  // the same client is no new client
  const auto refused = submitExpectingAckOrError(*b, "b1");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->code, ErrorCode::ResourceExhausted);
  EXPECT_NE(refused->message.find("limits.max_clients"), std::string::npos) << refused->message;
  // Once a holds nothing it no longer counts.
  ASSERT_TRUE(a->cancel("a1"));
  ASSERT_TRUE(a->cancel("a2"));
  awaitTerminal(*a, "a1");
  awaitTerminal(*a, "a2");
  EXPECT_FALSE(submitExpectingAckOrError(*b, "b1"));
}

TEST(LimitsTest, PromptPlusOutputTokensPerRequest) {
  LiveService svc(limited([](LimitsConfig& l) { l.max_request_tokens = 12; }));
  auto a = svc.client();
  EXPECT_FALSE(submitExpectingAckOrError(*a, "fits", /*max_tokens=*/4, /*prompt_len=*/8));
  const auto refused = submitExpectingAckOrError(*a, "big", /*max_tokens=*/5, /*prompt_len=*/8);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->code, ErrorCode::InvalidArgument);
  EXPECT_EQ(refused->message,
            "limits.max_request_tokens: 8 prompt + 5 output tokens = 13 exceeds the limit of 12");
  // A planned output counts with its length, whatever max_tokens says.
  ASSERT_TRUE(a->submit({.id = "plan",
                         .prompt = prompt(8),
                         .max_tokens = 1,
                         .output_tokens = std::vector<std::uint32_t>(6, 7)}));
  const auto planned = testing::awaitMessage<protocol::ErrorReply>(*a);
  ASSERT_TRUE(planned);
  EXPECT_EQ(planned->id, std::optional<std::string>("plan"));
  EXPECT_NE(planned->message.find("8 prompt + 6 output tokens"), std::string::npos)
      << planned->message;
}

}  // namespace
}  // namespace mocker::service
