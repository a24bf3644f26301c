#include "service/route_table.h"

#include <gtest/gtest.h>

#include <map>
#include <random>
#include <string>
#include <vector>

namespace mocker::service {
namespace {

using namespace std::chrono_literals;
using engine::RequestId;
using protocol::FinishReason;

RequestId rid(std::uint64_t v) { return RequestId(v); }

void expectValid(const RouteTable& t, const char* after) {
  const Status s = t.checkInvariants();
  EXPECT_TRUE(s.has_value()) << "after " << after << ": " << (s ? "" : s.error().message);
}

TEST(RouteTableTest, OpenFindsByEngineIdAndByKey) {
  RouteTable t;
  Route& r = t.open("A", "r1", rid(7), /*rank=*/1, /*delimiter=*/true);
  expectValid(t, "open");
  EXPECT_EQ(t.find(rid(7)), &r);
  EXPECT_EQ(t.find(rid(8)), nullptr);
  EXPECT_EQ(t.findByKey("A", "r1"), rid(7));
  EXPECT_EQ(t.findByKey("B", "r1"), std::nullopt);
  EXPECT_EQ(r.client, "A");
  EXPECT_EQ(r.id, "r1");
  EXPECT_EQ(r.rank, 1u);
  EXPECT_EQ(r.state, RouteState::Active);
  EXPECT_EQ(r.delivered, 0u);
  ASSERT_NE(t.findClient("A"), nullptr);
  EXPECT_EQ(r.owner, t.findClient("A"));
  EXPECT_TRUE(r.owner->delimiter);
  EXPECT_EQ(t.numRoutes(), 1u);
  EXPECT_EQ(t.numClients(), 1u);
}

TEST(RouteTableTest, SameRequestIdOfTwoClientsIsTwoRoutes) {
  RouteTable t;
  t.open("A", "x", rid(1), 0, false);
  t.open("B", "x", rid(2), 0, false);
  expectValid(t, "two opens");
  EXPECT_EQ(t.findByKey("A", "x"), rid(1));
  EXPECT_EQ(t.findByKey("B", "x"), rid(2));
  EXPECT_EQ(t.routesPerClient(), (std::vector<protocol::ClientRoutes>{{"A", 1}, {"B", 1}}));
}

TEST(RouteTableTest, ClosingTheLastRouteForgetsTheClient) {
  RouteTable t;
  t.open("A", "r1", rid(1), 0, false);
  t.open("A", "r2", rid(2), 0, false);
  t.close(rid(1));
  expectValid(t, "first close");
  EXPECT_NE(t.findClient("A"), nullptr);
  EXPECT_EQ(t.findByKey("A", "r1"), std::nullopt);
  t.close(rid(2));
  expectValid(t, "second close");
  EXPECT_EQ(t.findClient("A"), nullptr);
  EXPECT_EQ(t.numClients(), 0u);
  t.close(rid(2));  // closing an absent route is a no-op
  expectValid(t, "repeated close");
}

TEST(RouteTableTest, OwedTerminalContinuesAtTheDeliveredIndexUntilSettled) {
  RouteTable t;
  Route& r = t.open("A", "r1", rid(1), 0, false);
  r.delivered = 5;
  t.oweTerminal(rid(1), FinishReason::Cancelled, "cancelled");
  expectValid(t, "oweTerminal");
  EXPECT_EQ(r.state, RouteState::Cancelling);
  EXPECT_TRUE(t.anyOwed());
  EXPECT_EQ(t.clientsOwed(), std::vector<std::string>{"A"});
  ASSERT_EQ(t.findClient("A")->queue.size(), 1u);
  EXPECT_EQ(t.findClient("A")->queue[0].output,
            (protocol::RequestOutput{
                .id = "r1", .index = 5, .finish = FinishReason::Cancelled, .reason = "cancelled"}));
  // The key stays taken while the terminal is owed: the client id is not reusable yet.
  EXPECT_EQ(t.findByKey("A", "r1"), rid(1));
  t.settle("A", 1);
  expectValid(t, "settle");
  EXPECT_FALSE(t.anyOwed());
  EXPECT_EQ(t.find(rid(1)), nullptr);
  EXPECT_EQ(t.findClient("A"), nullptr);
}

TEST(RouteTableTest, ClosingACancellingRouteDropsItsOwedTerminal) {
  RouteTable t;
  t.open("A", "r1", rid(1), 0, false);
  t.open("A", "r2", rid(2), 0, false);
  t.oweTerminal(rid(1), FinishReason::Cancelled, "one");
  t.oweTerminal(rid(2), FinishReason::Cancelled, "two");
  t.close(rid(1));
  expectValid(t, "close of a cancelling route");
  ASSERT_EQ(t.findClient("A")->queue.size(), 1u);
  EXPECT_EQ(t.findClient("A")->queue[0].output.reason, "two");
}

// A client's queue keeps its order: an ack, then buffered outputs continuing the stream, then a
// terminal; settling part of it keeps the rest, and the route closes with its terminal.
TEST(RouteTableTest, QueueHoldsAckThenOutputsThenTerminalInOrder) {
  RouteTable t;
  Route& r = t.open("A", "r1", rid(1), 0, false, /*buffer_cap=*/3);
  r.delivered = 2;  // two tokens were sent directly
  t.oweAck(rid(1));
  expectValid(t, "oweAck");
  EXPECT_TRUE(t.bufferOutput(rid(1), {.id = "r1", .index = 2, .tokens = {7, 8}}, 2));
  expectValid(t, "buffer 2");
  EXPECT_EQ(r.delivered, 4u);
  EXPECT_EQ(r.buffered, 2u);
  // Two more signals would exceed the cap of 3: refused, nothing queued.
  EXPECT_FALSE(t.bufferOutput(rid(1), {.id = "r1", .index = 4, .tokens = {9, 10}}, 2));
  expectValid(t, "refused");
  EXPECT_EQ(t.findClient("A")->queue.size(), 2u);
  t.oweTerminal(rid(1), FinishReason::Cancelled, "backpressure");
  expectValid(t, "oweTerminal");
  const auto& q = t.findClient("A")->queue;
  ASSERT_EQ(q.size(), 3u);
  EXPECT_EQ(q[0].kind, Pending::Kind::Ack);
  EXPECT_EQ(q[1].output.tokens, (std::vector<std::uint32_t>{7, 8}));
  EXPECT_EQ(q[2].output.index, 4u);
  EXPECT_EQ(q[2].output.finish, FinishReason::Cancelled);
  t.settle("A", 2);
  expectValid(t, "settle ack and outputs");
  EXPECT_EQ(r.buffered, 0u);
  EXPECT_EQ(t.numRoutes(), 1u);
  t.settle("A", 1);
  expectValid(t, "settle terminal");
  EXPECT_EQ(t.numRoutes(), 0u);
  EXPECT_EQ(t.numClients(), 0u);
  EXPECT_FALSE(t.anyOwed());
}

// An engine terminal that had to wait makes the route Ending: it closes once that is sent.
TEST(RouteTableTest, BufferedEngineTerminalEndsTheRouteWhenSettled) {
  RouteTable t;
  Route& r = t.open("A", "r1", rid(1), 0, false);
  t.open("A", "r2", rid(2), 0, false);
  EXPECT_TRUE(t.bufferOutput(
      rid(1), {.id = "r1", .index = 0, .tokens = {5}, .finish = FinishReason::Length}, 1));
  expectValid(t, "buffered terminal");
  EXPECT_EQ(r.state, RouteState::Ending);
  t.settle("A", 1);
  expectValid(t, "settled");
  EXPECT_EQ(t.find(rid(1)), nullptr);
  EXPECT_NE(t.findClient("A"), nullptr);  // r2 is still open
}

TEST(RouteTableTest, UnroutableStreakLastsUntilGoneAfterAndResetsOnASend) {
  RouteTable t(100ms);
  t.open("A", "r1", rid(1), 0, false);
  ClientEntry& a = *t.findClient("A");
  const SteadyTime t0{};
  struct Row {
    std::chrono::milliseconds at;
    bool routable;  // a send got through at `at` instead
    bool gone;
  };
  const std::vector<Row> rows = {
      {0ms, false, false},   {99ms, false, false},  {100ms, false, true},
      {150ms, true, false},  // streak over
      {160ms, false, false}, {259ms, false, false}, {260ms, false, true},
  };
  for (const Row& row : rows) {
    if (row.routable) {
      RouteTable::noteRoutable(a);
      continue;
    }
    EXPECT_EQ(t.noteUnroutable(a, t0 + row.at), row.gone) << "at " << row.at.count() << " ms";
  }
}

TEST(RouteTableTest, RemoveClientReturnsItsActiveRoutesAscendingAndForgetsIt) {
  RouteTable t;
  t.open("A", "z", rid(9), 1, false);
  t.open("A", "a", rid(3), 0, false);
  t.open("A", "m", rid(5), 1, false);
  t.open("B", "b", rid(4), 0, false);
  t.open("AB", "c", rid(6), 0, false);  // a longer id with the same prefix is another client
  t.oweTerminal(rid(5), FinishReason::Cancelled, "cancelled");
  const auto removed = t.removeClient("A");
  expectValid(t, "removeClient");
  EXPECT_EQ(removed, (std::vector<RemovedRoute>{{rid(3), 0}, {rid(9), 1}}));
  EXPECT_EQ(t.findClient("A"), nullptr);
  EXPECT_FALSE(t.anyOwed());
  EXPECT_EQ(t.numRoutes(), 2u);
  EXPECT_EQ(t.findByKey("AB", "c"), rid(6));
  EXPECT_TRUE(t.removeClient("nobody").empty());
}

TEST(RouteTableTest, EndAllQueuesATerminalForEveryActiveStreamAfterWhatIsOwed) {
  RouteTable t;
  t.open("B", "b1", rid(4), 0, true);
  Route& a2 = t.open("A", "a2", rid(2), 0, false);
  t.open("A", "a1", rid(3), 0, false);
  Route& a0 = t.open("A", "a0", rid(1), 0, false);
  a2.delivered = 7;
  a0.delivered = 2;
  t.oweTerminal(rid(1), FinishReason::Cancelled, "cancelled");
  const auto active = t.endAll(FinishReason::Shutdown, "stopping");
  expectValid(t, "endAll");
  EXPECT_EQ(active, (std::vector<RequestId>{rid(2), rid(3), rid(4)}));
  const auto outputs = [&](const std::string& client) {
    std::vector<protocol::RequestOutput> out;
    for (const Pending& p : t.findClient(client)->queue) out.push_back(p.output);
    return out;
  };
  const auto shutdown = [](const char* id, std::uint32_t index) {
    return protocol::RequestOutput{
        .id = id, .index = index, .finish = FinishReason::Shutdown, .reason = "stopping"};
  };
  EXPECT_EQ(outputs("A"),
            (std::vector<protocol::RequestOutput>{
                {.id = "a0", .index = 2, .finish = FinishReason::Cancelled, .reason = "cancelled"},
                shutdown("a2", 7),
                shutdown("a1", 0)}));
  EXPECT_EQ(outputs("B"), (std::vector<protocol::RequestOutput>{shutdown("b1", 0)}));
  EXPECT_EQ(t.clientsOwed(), (std::vector<std::string>{"A", "B"}));
  t.clear();
  expectValid(t, "clear");
  EXPECT_EQ(t.numRoutes(), 0u);
  EXPECT_EQ(t.numClients(), 0u);
  EXPECT_FALSE(t.anyOwed());
}

// The invariants hold after every operation of a long random sequence, and the table agrees
// with a plain model of it (which routes exist, in which state, and how much is owed).
TEST(RouteTableTest, RoutesOfAPrincipalCountEveryRoutingIdOfItsKey) {
  RouteTable t;
  t.open("alice-1", "r1", rid(1), 0, false, 8, "key-a");
  t.open("alice-2", "r1", rid(2), 0, false, 8, "key-a");
  t.open("alice-2", "r2", rid(3), 0, false, 8, "key-a");
  t.open("bob", "r1", rid(4), 0, false, 8, "key-b");
  t.open("plain", "r1", rid(5), 0, false);
  expectValid(t, "opens");
  EXPECT_EQ(t.routesOfPrincipal("key-a"), 3u);
  EXPECT_EQ(t.routesOfPrincipal("key-b"), 1u);
  EXPECT_EQ(t.routesOfPrincipal("key-c"), 0u);
  EXPECT_EQ(t.findClient("alice-2")->principal, "key-a");
  EXPECT_EQ(t.findClient("plain")->principal, "");
  t.close(rid(2));
  expectValid(t, "close");
  EXPECT_EQ(t.routesOfPrincipal("key-a"), 2u);
  // A settled terminal closes its route too.
  t.oweTerminal(rid(1), FinishReason::Cancelled, "cancelled");
  t.settle("alice-1", 1);
  expectValid(t, "settle");
  EXPECT_EQ(t.routesOfPrincipal("key-a"), 1u);
  EXPECT_EQ(t.removeClient("alice-2").size(), 1u);
  expectValid(t, "removeClient");
  EXPECT_EQ(t.routesOfPrincipal("key-a"), 0u);
  EXPECT_EQ(t.routesOfPrincipal("key-b"), 1u);
  t.clear();
  expectValid(t, "clear");
  EXPECT_EQ(t.routesOfPrincipal("key-b"), 0u);
}

TEST(RouteTableTest, InvariantsHoldThroughARandomSequence) {
  struct ModelRoute {
    std::string client;
    std::string id;
    bool cancelling = false;  // or ending: its terminal is queued
    bool acked = true;
  };
  std::mt19937_64 rng(20240611);
  const std::vector<std::string> clients = {"A", "B", "C", "AB"};
  // Their CURVE keys: A and AB share one, B has none.
  const std::map<std::string, std::string> principal = {
      {"A", "key-1"}, {"B", ""}, {"C", "key-2"}, {"AB", "key-1"}};
  RouteTable t(10ms);
  std::map<std::uint64_t, ModelRoute> model;
  std::uint64_t next_id = 1;
  SteadyTime now{};
  const auto pick = [&](std::size_t n) {
    return static_cast<std::size_t>(std::uniform_int_distribution<std::size_t>(0, n - 1)(rng));
  };
  const auto randomRoute = [&]() -> std::optional<std::uint64_t> {
    if (model.empty()) return std::nullopt;
    auto it = model.begin();
    std::advance(it, static_cast<std::ptrdiff_t>(pick(model.size())));
    return it->first;
  };
  for (int step = 0; step < 5000; ++step) {
    const std::string& client = clients[pick(clients.size())];
    std::string req("r");  // append: g++ 12 -O3 warns falsely (-Wrestrict) on "r" + string
    req.append(std::to_string(pick(6)));
    std::string op;
    switch (pick(10)) {
      case 0:
      case 1:
        op = "open";
        if (!t.findByKey(client, req)) {
          t.open(client, req, rid(next_id), static_cast<std::uint32_t>(pick(2)), pick(2) == 1,
                 /*buffer_cap=*/static_cast<std::uint32_t>(1 + pick(6)), principal.at(client));
          model[next_id++] = {client, req, false, true};
        }
        break;
      case 2:
        op = "deliver";
        if (auto id = randomRoute(); id && !model[*id].cancelling) {
          Route& r = *t.find(rid(*id));
          if (r.buffered > 0) break;  // a direct send only while nothing of it waits
          r.delivered += 1;
        }
        break;
      case 8:
        op = "oweAck";
        if (auto id = randomRoute();
            id && model[*id].acked && t.find(rid(*id))->buffered == 0 && !model[*id].cancelling) {
          // Only a route with nothing queued can still owe its ack (the ack comes first).
          bool queued = false;
          for (const Pending& p : t.findClient(model[*id].client)->queue)
            queued |= p.route == rid(*id);
          if (queued) break;
          t.oweAck(rid(*id));
          model[*id].acked = false;
        }
        break;
      case 9:
        op = "bufferOutput";
        if (auto id = randomRoute(); id && !model[*id].cancelling) {
          Route& r = *t.find(rid(*id));
          const bool last = pick(4) == 0;
          protocol::RequestOutput out{.id = r.id, .index = r.delivered, .tokens = {1, 2}};
          if (last) out.finish = FinishReason::Length;
          if (t.bufferOutput(rid(*id), std::move(out), 2)) model[*id].cancelling = last;
        }
        break;
      case 3:
        op = "oweTerminal";
        if (auto id = randomRoute(); id && !model[*id].cancelling) {
          t.oweTerminal(rid(*id), FinishReason::Cancelled, "x");
          model[*id].cancelling = true;
        }
        break;
      case 4:
        op = "close";
        if (auto id = randomRoute()) {
          t.close(rid(*id));
          model.erase(*id);
        }
        break;
      case 5: {
        op = "settle";
        ClientEntry* e = t.findClient(client);
        if (!e) break;
        const std::size_t n = pick(e->queue.size() + 1);
        std::vector<std::uint64_t> ended;
        for (std::size_t i = 0; i < n; ++i) {
          const Pending& p = e->queue[i];
          if (p.kind == Pending::Kind::Ack) model[p.route.value()].acked = true;
          if (p.output.finish) ended.push_back(p.route.value());
        }
        t.settle(client, n);
        for (std::uint64_t id : ended) model.erase(id);
        break;
      }
      case 6: {
        op = "removeClient";
        const auto removed = t.removeClient(client);
        std::size_t active = 0;
        for (const auto& [id, m] : model) active += m.client == client && !m.cancelling;
        EXPECT_EQ(removed.size(), active) << "step " << step;
        std::erase_if(model, [&](const auto& kv) { return kv.second.client == client; });
        break;
      }
      case 7:
        op = "noteUnroutable";
        now += 3ms;
        if (ClientEntry* e = t.findClient(client)) (void)t.noteUnroutable(*e, now);
        break;
    }
    const Status s = t.checkInvariants();
    ASSERT_TRUE(s.has_value()) << "step " << step << " " << op << ": " << s.error().message;
    ASSERT_EQ(t.numRoutes(), model.size()) << "step " << step << " " << op;
    std::size_t queued = 0;
    for (const std::string& c : clients) {
      if (const ClientEntry* e = t.findClient(c)) queued += e->queue.size();
    }
    ASSERT_EQ(t.numQueued(), queued) << "step " << step << " " << op;
    ASSERT_EQ(t.anyOwed(), queued > 0) << "step " << step << " " << op;
  }
}

// checkInvariants is not vacuous: it notices a route whose counterpart bookkeeping is broken.
TEST(RouteTableTest, CheckInvariantsReportsABrokenTable) {
  RouteTable t;
  Route& r = t.open("A", "r1", rid(1), 0, false);
  r.owner->num_routes = 2;
  EXPECT_FALSE(t.checkInvariants().has_value());
  r.owner->num_routes = 1;
  EXPECT_TRUE(t.checkInvariants().has_value());
  r.state = RouteState::Cancelling;  // cancelling without a queued terminal
  EXPECT_FALSE(t.checkInvariants().has_value());
}

}  // namespace
}  // namespace mocker::service
