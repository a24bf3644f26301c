// Request ownership without authentication (service/README.md, "Ownership"): a request belongs
// to the client that submitted it; other clients can neither cancel it, see it in `stats`, nor
// receive its stream by taking the routing id after the owner's connection closed. Real sockets
// on ephemeral loopback ports; every wait is a poll with a deadline.
#include <gtest/gtest.h>

#include "live_service.h"

namespace mocker::service {
namespace {

using namespace std::chrono_literals;
using protocol::FinishReason;
using testing::LiveService;
using testing::prompt;
using testing::TestConfig;

// A paced request that keeps streaming for ~10 s unless something ends it.
protocol::SubmitRequest longRequest(const std::string& id) {
  return {.id = id, .prompt = prompt(8), .max_tokens = 10000};
}

TEST(OwnershipTest, CancelNamingAnotherClientIsRefusedAndTheStreamGoesOn) {
  // 10 ms decode passes: the owner reads nothing while the other client's cancels and the stats
  // round trip go on, and its stream must not overflow its pipe and output buffer meanwhile
  // (~1,000 passes). At 1 ms passes a TSan build on a loaded machine took longer than that and
  // the service rightly cancelled the owner as a slow reader.
  LiveService svc(TestConfig().paced(1, 10).build());
  auto owner = svc.client({.routing_id = "owner"});
  auto other = svc.client({.routing_id = "other"});
  ASSERT_TRUE(owner->submit(longRequest("r")));
  std::map<std::string, testing::Stream> seen;
  ASSERT_TRUE(testing::awaitAck(*owner, "r", seen));

  ASSERT_TRUE(other->cancel("r", std::string("owner")));
  const auto err = testing::awaitMessage<protocol::ErrorReply>(*other);
  ASSERT_TRUE(err);
  EXPECT_EQ(err->code, ErrorCode::PermissionDenied);
  EXPECT_EQ(err->id, std::optional<std::string>("r"));
  EXPECT_NE(err->message.find("another client's routing id"), std::string::npos) << err->message;
  // Without `client` the id is looked up among the sender's own requests only.
  ASSERT_TRUE(other->cancel("r"));
  const auto nf = testing::awaitMessage<protocol::CancelReply>(*other);
  ASSERT_TRUE(nf);
  EXPECT_EQ(nf->result, protocol::CancelResult::NotFound);

  // The owner's stream is untouched: it is still running and only its owner can end it.
  EXPECT_EQ(testing::stats(*owner).routes, 1u);
  ASSERT_TRUE(owner->cancel("r", std::string("owner")));  // naming itself is allowed
  // (The stats round trip skipped some outputs: wait for the terminal entry itself.)
  std::optional<protocol::RequestOutput> terminal;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!terminal && std::chrono::steady_clock::now() < deadline) {
    auto m = owner->receive(50ms);
    if (!m || !*m) continue;
    if (auto* b = std::get_if<protocol::OutputBatch>(&**m)) {
      for (const auto& o : b->outputs) {
        if (o.id == "r" && o.finish) terminal = o;
      }
    }
  }
  ASSERT_TRUE(terminal);
  EXPECT_EQ(terminal->finish, FinishReason::Cancelled);
  EXPECT_EQ(terminal->reason, "cancelled");
}

TEST(OwnershipTest, StatsListsOnlyTheSendersOwnClientEntry) {
  LiveService svc(TestConfig().paced(1, 1).build());
  auto a = svc.client({.routing_id = "alice"});
  auto b = svc.client({.routing_id = "bob"});
  std::map<std::string, testing::Stream> seen_a;
  std::map<std::string, testing::Stream> seen_b;
  ASSERT_TRUE(a->submit(longRequest("a1")));
  ASSERT_TRUE(a->submit(longRequest("a2")));
  ASSERT_TRUE(b->submit(longRequest("b1")));
  ASSERT_TRUE(testing::awaitAck(*a, "a2", seen_a));
  ASSERT_TRUE(testing::awaitAck(*b, "b1", seen_b));
  const auto sa = testing::stats(*a);
  EXPECT_EQ(sa.routes, 3u);  // the total is service-wide
  EXPECT_EQ(sa.clients, (std::vector<protocol::ClientRoutes>{{"alice", 2}}));
  const auto sb = testing::stats(*b);
  EXPECT_EQ(sb.clients, (std::vector<protocol::ClientRoutes>{{"bob", 1}}));
  auto c = svc.client({.routing_id = "carol"});
  EXPECT_TRUE(testing::stats(*c).clients.empty());
}

// Before: a new DEALER that took a disconnected client's routing id received that client's
// live stream for up to a second. Now the owner's requests end with its connection.
TEST(OwnershipTest, NewPeerTakingAClosedClientsRoutingIdGetsNothingOfItsStreams) {
  LiveService svc(TestConfig().paced(1, 1).build());
  {
    auto victim = svc.client({.routing_id = "victim"});
    ASSERT_TRUE(victim->submit(longRequest("secret")));
    // Wait until tokens flow.
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    bool streaming = false;
    while (!streaming && std::chrono::steady_clock::now() < deadline) {
      auto m = victim->receive(50ms);
      streaming = m && *m && std::holds_alternative<protocol::OutputBatch>(**m);
    }
    ASSERT_TRUE(streaming);
  }  // the victim's sockets close mid-stream
  auto thief = svc.client({.routing_id = "victim"});
  // For 1.5 s (longer than the service's 1 s unroutable grace) it must receive nothing of the
  // first client's stream. (It may receive nothing at all: a peer that connects while the old
  // connection is not yet torn down is held back by the ROUTER as a duplicate routing id.)
  const auto until = std::chrono::steady_clock::now() + 1500ms;
  while (std::chrono::steady_clock::now() < until) {
    ASSERT_TRUE(thief->send(protocol::StatsRequest{}));
    auto m = thief->receive(100ms);
    ASSERT_TRUE(m) << m.error().message;
    if (!*m) continue;
    if (auto* st = std::get_if<protocol::StatsReply>(&**m)) {
      EXPECT_TRUE(st->clients.empty());
    } else {
      ADD_FAILURE() << "the new peer received " << protocol::messageType(**m);
    }
  }
  // The first client's request ended with its connection.
  auto observer = svc.client();
  EXPECT_TRUE(testing::eventually(*observer, [](const protocol::StatsReply& r) {
    return r.routes == 0 && r.ranks.at(0).running == 0;
  }));
}

}  // namespace
}  // namespace mocker::service
