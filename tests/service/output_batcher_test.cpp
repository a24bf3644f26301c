#include "service/output_batcher.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "protocol/limits.h"

namespace mocker::service {
namespace {

using engine::OutputSignal;
using engine::RequestId;
using engine::Terminal;
using protocol::FinishReason;
using protocol::RequestOutput;

// Routes of the scenarios: engine id → (client, request id).
struct RouteSpec {
  std::uint64_t engine_id;
  const char* client;
  const char* id;
};
const std::vector<RouteSpec> kRoutes = {
    {1, "A", "a1"}, {2, "B", "b1"}, {3, "A", "a2"}, {4, "B", "b2"}, {5, "C", "c1"}};

OutputSignal token(std::uint64_t id, std::uint32_t index, std::uint32_t tok,
                   Terminal terminal = Terminal::None) {
  return {.id = RequestId(id), .token = tok, .index = index, .terminal = terminal};
}
OutputSignal endWithoutToken(std::uint64_t id, std::uint32_t index, Terminal terminal) {
  return {.id = RequestId(id), .token = std::nullopt, .index = index, .terminal = terminal};
}

struct ExpectedBatch {
  std::string client;
  std::vector<RequestOutput> outputs;
  std::vector<std::uint64_t> terminal;
};

struct Scenario {
  const char* name;
  std::vector<OutputSignal> signals;
  std::vector<ExpectedBatch> batches;  // in order
};

const std::string kRejectedReason =
    "the request can never be scheduled (prompt longer than max_model_len, the KV pool or, with "
    "chunked prefill off, the token budget)";

std::vector<Scenario> scenarios() {
  OutputSignal first = token(1, 0, 11);
  first.cached_tokens = 16;
  return {
      {"one request, one token",
       {token(1, 4, 40)},
       {{"A", {{.id = "a1", .index = 4, .tokens = {40}}}, {}}}},
      {"clients in order of their first signal; requests in signal order",
       {token(2, 0, 20), token(1, 0, 10), token(3, 2, 30), token(4, 1, 21)},
       {{"B",
         {{.id = "b1", .index = 0, .tokens = {20}}, {.id = "b2", .index = 1, .tokens = {21}}},
         {}},
        {"A",
         {{.id = "a1", .index = 0, .tokens = {10}}, {.id = "a2", .index = 2, .tokens = {30}}},
         {}}}},
      {"consecutive tokens of a request merge into one entry",
       {token(1, 3, 10), token(1, 4, 11), token(1, 5, 12)},
       {{"A", {{.id = "a1", .index = 3, .tokens = {10, 11, 12}}}, {}}}},
      {"interleaved tokens of a request start a new entry",
       {token(1, 3, 10), token(2, 0, 20), token(1, 4, 11)},
       {{"A",
         {{.id = "a1", .index = 3, .tokens = {10}}, {.id = "a1", .index = 4, .tokens = {11}}},
         {}},
        {"B", {{.id = "b1", .index = 0, .tokens = {20}}}, {}}}},
      {"a completed request ends its entry with finish length",
       {token(1, 6, 10, Terminal::Completed), token(3, 0, 30)},
       {{"A",
         {{.id = "a1", .index = 6, .tokens = {10}, .finish = FinishReason::Length},
          {.id = "a2", .index = 0, .tokens = {30}}},
         {1}}}},
      {"terminals without a token carry their reason",
       {endWithoutToken(5, 0, Terminal::Rejected), endWithoutToken(2, 3, Terminal::Failed),
        endWithoutToken(4, 2, Terminal::Cancelled), endWithoutToken(1, 9, Terminal::Completed)},
       {{"C",
         {{.id = "c1", .index = 0, .finish = FinishReason::Rejected, .reason = kRejectedReason}},
         {5}},
        {"B",
         {{.id = "b1",
           .index = 3,
           .finish = FinishReason::Error,
           .reason = "the timing model produced a non-finite pass time"},
          {.id = "b2", .index = 2, .finish = FinishReason::Cancelled}},
         {2, 4}},
        {"A", {{.id = "a1", .index = 9, .finish = FinishReason::Length}}, {1}}}},
      {"cached tokens ride on the first token",
       {first},
       {{"A", {{.id = "a1", .index = 0, .tokens = {11}, .cached_tokens = 16}}, {}}}},
      {"no signals, no batches", {}, {}},
  };
}

class OutputBatcherTest : public ::testing::Test {
 protected:
  OutputBatcherTest() {
    for (const RouteSpec& r : kRoutes) {
      table_.open(r.client, r.id, RequestId(r.engine_id), 0, false);
    }
  }
  void feed(const std::vector<OutputSignal>& signals) {
    batcher_.beginPass();
    for (const OutputSignal& s : signals) batcher_.add(s, *table_.find(s.id));
  }
  void expectBatches(const std::vector<ExpectedBatch>& expected, const std::string& name) {
    const auto batches = batcher_.batches();
    ASSERT_EQ(batches.size(), expected.size()) << name;
    for (std::size_t i = 0; i < expected.size(); ++i) {
      EXPECT_EQ(batches[i].client, expected[i].client) << name << " batch " << i;
      EXPECT_EQ(batches[i].owner, table_.findClient(expected[i].client)) << name << " batch " << i;
      std::vector<std::uint64_t> terminal;
      for (RequestId id : batches[i].terminal) terminal.push_back(id.value());
      EXPECT_EQ(terminal, expected[i].terminal) << name << " batch " << i;
      // What the client receives: the encoded message decodes to the expected entries.
      const zmq::message_t message = batcher_.encode(batches[i], 0, batches[i].entries.size());
      auto decoded = protocol::decodeClientMessage(
          {static_cast<const std::byte*>(message.data()), message.size()});
      ASSERT_TRUE(decoded.has_value()) << name;
      const auto* batch = std::get_if<protocol::OutputBatch>(&*decoded);
      ASSERT_NE(batch, nullptr) << name;
      EXPECT_EQ(batch->outputs, expected[i].outputs) << name << " batch " << i;
    }
  }

  RouteTable table_;
  OutputBatcher batcher_;
};

TEST_F(OutputBatcherTest, GroupsEachPassPerClientInSignalOrder) {
  for (const Scenario& s : scenarios()) {
    feed(s.signals);
    expectBatches(s.batches, s.name);
  }
}

// Scratch is reused: a pass after a bigger one shows only its own outputs.
TEST_F(OutputBatcherTest, EachPassStartsEmpty) {
  feed({token(1, 0, 10), token(2, 0, 20), token(5, 0, 50)});
  ASSERT_EQ(batcher_.batches().size(), 3u);
  feed({token(5, 1, 51)});
  expectBatches({{"C", {{.id = "c1", .index = 1, .tokens = {51}}}, {}}}, "second pass");
}

TEST_F(OutputBatcherTest, EntriesPointAtTheirRoutes) {
  feed({token(1, 0, 10), token(1, 1, 11), token(3, 0, 30)});
  const auto batches = batcher_.batches();
  ASSERT_EQ(batches.size(), 1u);
  ASSERT_EQ(batches[0].entries.size(), 2u);
  EXPECT_EQ(batches[0].entries[0].route, table_.find(RequestId(1)));
  EXPECT_EQ(batches[0].entries[0].token_count, 2u);
  EXPECT_EQ(batches[0].entries[1].route, table_.find(RequestId(3)));
  const std::vector<std::uint32_t> tokens(batcher_.tokens(batches[0].entries[0]).begin(),
                                          batcher_.tokens(batches[0].entries[0]).end());
  EXPECT_EQ(tokens, (std::vector<std::uint32_t>{10, 11}));
}

TEST(WireFinishTest, MapsEveryEngineTerminal) {
  EXPECT_EQ(wireFinish(Terminal::None).finish, std::nullopt);
  EXPECT_EQ(wireFinish(Terminal::Completed).finish, FinishReason::Length);
  EXPECT_TRUE(wireFinish(Terminal::Completed).reason.empty());
  EXPECT_EQ(wireFinish(Terminal::Rejected).finish, FinishReason::Rejected);
  EXPECT_EQ(wireFinish(Terminal::Rejected).reason, kRejectedReason);
  EXPECT_EQ(wireFinish(Terminal::Cancelled).finish, FinishReason::Cancelled);
  EXPECT_EQ(wireFinish(Terminal::Failed).finish, FinishReason::Error);
}

// Every output message cut by OutputMessageBudget decodes (the decoder enforces
// protocol/limits.h): many small entries stop at kMaxOutputsPerMessage, large ones at 16 MiB.
TEST(OutputMessageBudgetTest, CutsAtTheEntryAndByteLimits) {
  const auto fill = [](std::size_t id_bytes, std::size_t num_tokens) {
    OutputMessageBudget budget;
    while (budget.tryAdd(id_bytes, 0, num_tokens)) {
    }
    return budget.entries();
  };
  EXPECT_EQ(fill(8, 1), protocol::kMaxOutputsPerMessage);
  const std::size_t big = fill(protocol::kMaxRequestIdBytes, 200);  // ~1.4 KB per entry
  EXPECT_LT(big, protocol::kMaxOutputsPerMessage);
  std::vector<protocol::RequestOutputView> views;
  const std::string id(protocol::kMaxRequestIdBytes, 'x');
  const std::vector<std::uint32_t> tokens(200, 4294967295u);  // 5 bytes each: the largest form
  for (std::size_t i = 0; i < big; ++i) views.push_back({id, 4294967295u, tokens});
  const auto bytes = protocol::encodeOutputBatch(views);
  EXPECT_LE(bytes.size(), protocol::kMaxMessageBytes);
  EXPECT_GT(bytes.size(), protocol::kMaxMessageBytes * 9 / 10) << "the bound is too loose";
  EXPECT_TRUE(protocol::decodeClientMessage(bytes).has_value());
}

TEST(OutputMessageBudgetTest, StatsReplyListsNoMoreClientsThanOneMessageCarries) {
  protocol::StatsReply many;
  for (std::size_t i = 0; i < 70000; ++i) many.clients.push_back({std::to_string(i), 1});
  fitStatsReply(many);
  EXPECT_EQ(many.clients.size(), protocol::kMaxStatsClients);
  protocol::StatsReply large;
  for (std::size_t i = 0; i < 65536; ++i) {
    large.clients.push_back(
        {std::string(protocol::kMaxRoutingIdBytes - 8, 'c') + std::to_string(10000000 + i), 1});
  }
  fitStatsReply(large);
  EXPECT_LT(large.clients.size(), 65536u);
  const auto bytes = protocol::encodeClientMessage(large);
  EXPECT_LE(bytes.size(), protocol::kMaxMessageBytes);
  EXPECT_TRUE(protocol::decodeClientMessage(bytes).has_value());
}

// A stream cut short by a length limit, and a rejected prompt, name the binding limit first
// (protocol/README.md §1.2); a stream that ended at its own max_tokens has no reason.
TEST(WireFinishTest, LengthLimitsAreNamedFirstInTheReason) {
  using engine::LengthLimit;
  for (LengthLimit limit :
       {LengthLimit::MaxModelLen, LengthLimit::KvCapacity, LengthLimit::MaxNumBatchedTokens}) {
    const std::string prefix = std::string(engine::lengthLimitName(limit)) + ": ";
    for (Terminal t : {Terminal::Completed, Terminal::Rejected}) {
      const WireFinish f = wireFinish(t, limit);
      EXPECT_EQ(f.reason.substr(0, prefix.size()), prefix) << f.reason;
    }
    EXPECT_EQ(wireFinish(Terminal::Completed, limit).finish, FinishReason::Length);
  }
  EXPECT_TRUE(wireFinish(Terminal::Completed, LengthLimit::None).reason.empty());
}

}  // namespace
}  // namespace mocker::service
