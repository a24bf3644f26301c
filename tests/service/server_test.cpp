// Live-service tests over real ZeroMQ sockets on ephemeral loopback ports: what a client sees
// end to end. The bookkeeping behind it has its own socket-free tests (route_table_test,
// output_batcher_test, loop_clock_test). Waiting is always a poll with a deadline.
#include <gtest/gtest.h>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "live_service.h"
#include "net/zmq_io.h"
#include "protocol/framing.h"
#include "protocol/limits.h"

namespace mocker::service {
namespace {

using namespace std::chrono_literals;
using protocol::FinishReason;
using protocol::SubmitRequest;
using testing::collect;
using testing::LiveService;
using testing::prompt;
using testing::TestConfig;

// "prefix<i>" (built with append: g++ 12 -O3 gives a false -Wrestrict on literal + string).
std::string idOf(const char* prefix, std::uint32_t i) {
  std::string id(prefix);
  id.append(std::to_string(i));
  return id;
}

TEST(ServerTest, StreamCompletesInOrderWithOneTerminal) {
  LiveService svc(TestConfig().build());
  auto c = svc.client();
  ASSERT_TRUE(c->submit({.id = "a", .prompt = prompt(10), .max_tokens = 20}));
  auto streams = collect(*c, {"a"});
  const auto& s = streams["a"];
  EXPECT_TRUE(s.acked);
  EXPECT_EQ(s.tokens.size(), 20u);
  EXPECT_EQ(s.finish, FinishReason::Length);
  EXPECT_EQ(s.tokens[0], 24979u);  // the first request has internal id 1
}

TEST(ServerTest, PlannedOutputTokensComeBackVerbatim) {
  LiveService svc(TestConfig().build());
  auto c = svc.client();
  const std::vector<std::uint32_t> plan{5, 6, 7, 8};
  ASSERT_TRUE(c->submit({.id = "p", .prompt = prompt(6), .max_tokens = 99, .output_tokens = plan}));
  EXPECT_EQ(collect(*c, {"p"})["p"].tokens, plan);
}

TEST(ServerTest, TwoClientsInterleaveWithoutMixing) {
  LiveService svc(TestConfig().build());
  auto a = svc.client();
  auto b = svc.client();
  for (std::uint32_t i = 0; i < 4; ++i) {
    const std::string id = idOf("r", i);
    ASSERT_TRUE(a->submit({.id = id,
                           .prompt = prompt(8, 100),
                           .max_tokens = 12,
                           .output_tokens = std::vector<std::uint32_t>(12, 1000 + i)}));
    ASSERT_TRUE(b->submit({.id = id,
                           .prompt = prompt(8, 100),
                           .max_tokens = 9,
                           .output_tokens = std::vector<std::uint32_t>(9, 2000 + i)}));
  }
  const std::vector<std::string> ids{"r0", "r1", "r2", "r3"};
  auto sa = collect(*a, ids);
  auto sb = collect(*b, ids);
  for (std::uint32_t i = 0; i < 4; ++i) {
    const std::string id = idOf("r", i);
    EXPECT_EQ(sa[id].tokens, std::vector<std::uint32_t>(12, 1000 + i)) << id;
    EXPECT_EQ(sb[id].tokens, std::vector<std::uint32_t>(9, 2000 + i)) << id;
  }
}

TEST(ServerTest, DuplicateActiveIdRejectedThenReusable) {
  // Paced: the first request keeps running for a while.
  LiveService svc(TestConfig().paced(1, 1).build());
  auto c = svc.client();
  ASSERT_TRUE(c->submit({.id = "x", .prompt = prompt(4), .max_tokens = 50}));
  ASSERT_TRUE(c->submit({.id = "x", .prompt = prompt(4), .max_tokens = 5}));
  std::vector<protocol::ClientMessage> skipped;
  auto reject = testing::awaitMessage<protocol::SubmitReject>(*c, 10s, &skipped);
  ASSERT_TRUE(reject);
  EXPECT_NE(reject->reason.find("duplicate"), std::string::npos);
  std::map<std::string, testing::Stream> seen;
  for (auto& m : skipped) testing::absorb(seen, std::move(m), nullptr);
  EXPECT_EQ(collect(*c, {"x"}, nullptr, 10s, seen)["x"].tokens.size(), 50u);
  ASSERT_TRUE(c->submit({.id = "x", .prompt = prompt(4), .max_tokens = 5}));
  auto again = collect(*c, {"x"});
  EXPECT_EQ(again["x"].tokens.size(), 5u);
  EXPECT_NE(again["x"].tokens[0], 24979u);  // a new internal id, not id 1 again
}

TEST(ServerTest, InvalidSubmitsAreRejectedWithReason) {
  ServiceConfig config = TestConfig().build();
  // Above the protocol's own bound, so the 2^28 rule (not the configured limit) refuses "huge".
  config.limits.max_request_tokens = 1u << 30;
  LiveService svc(std::move(config));
  auto c = svc.client();
  ASSERT_TRUE(c->submit({.id = "rank", .prompt = prompt(4), .max_tokens = 1, .dp_rank = 3}));
  ASSERT_TRUE(c->submit({.id = "zero", .prompt = prompt(4), .max_tokens = 0}));
  ASSERT_TRUE(c->submit({.id = "empty", .prompt = {}, .max_tokens = 1}));
  // protocol/README.md §4: prompt + output tokens of one request ≤ 2^28.
  ASSERT_TRUE(c->submit({.id = "huge", .prompt = prompt(4), .max_tokens = (1u << 28) - 3}));
  auto s = collect(*c, {"rank", "zero", "empty", "huge"});
  EXPECT_NE(s["huge"].rejected.value_or("").find("268435456"), std::string::npos);
  EXPECT_NE(s["rank"].rejected.value_or("").find("dp_rank 3"), std::string::npos);
  EXPECT_NE(s["zero"].rejected.value_or("").find("max_output_tokens"), std::string::npos);
  EXPECT_NE(s["empty"].rejected.value_or("").find("prompt"), std::string::npos);
}

TEST(ServerTest, EmptyOutputAllowedByConfig) {
  LiveService svc(TestConfig().allowEmptyOutput().build());
  auto c = svc.client();
  ASSERT_TRUE(c->submit({.id = "z", .prompt = prompt(4), .max_tokens = 0}));
  auto s = collect(*c, {"z"});
  EXPECT_TRUE(s["z"].tokens.empty());
  EXPECT_EQ(s["z"].finish, FinishReason::Length);
}

TEST(ServerTest, NeverFittingPromptEndsRejected) {
  LiveService svc(TestConfig().numGpuBlocks(4).build());
  auto c = svc.client();
  ASSERT_TRUE(c->submit({.id = "big", .prompt = prompt(17), .max_tokens = 1}));
  auto s = collect(*c, {"big"});
  EXPECT_TRUE(s["big"].acked);
  EXPECT_EQ(s["big"].finish, FinishReason::Rejected);
  EXPECT_FALSE(s["big"].reason.empty());
}

// A cancel of a request still waiting for admission (max_num_seqs 1), of an unknown id, and of a
// finished one.
TEST(ServerTest, CancelBeforeAdmissionUnknownAndAfterCompletion) {
  LiveService svc(TestConfig().paced(1, 2).maxNumSeqs(1).build());
  auto c = svc.client();
  ASSERT_TRUE(c->submit({.id = "run", .prompt = prompt(4), .max_tokens = 400}));
  ASSERT_TRUE(c->submit({.id = "wait", .prompt = prompt(4, 50), .max_tokens = 5}));
  std::vector<protocol::ClientMessage> others;
  std::map<std::string, testing::Stream> seen;
  ASSERT_TRUE(testing::awaitAck(*c, "wait", seen, &others));
  ASSERT_TRUE(c->cancel("wait"));
  auto s = collect(*c, {"wait"}, &others, 10s, seen);
  EXPECT_TRUE(s["wait"].tokens.empty());
  EXPECT_EQ(s["wait"].finish, FinishReason::Cancelled);
  ASSERT_TRUE(c->cancel("nobody"));
  auto s2 = collect(*c, {"run"}, &others, 10s, s);
  EXPECT_EQ(s2["run"].tokens.size(), 400u);
  ASSERT_TRUE(c->cancel("run"));
  std::vector<protocol::CancelReply> replies;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (replies.size() < 3 && std::chrono::steady_clock::now() < deadline) {
    for (auto& m : others) {
      if (auto* r = std::get_if<protocol::CancelReply>(&m)) replies.push_back(*r);
    }
    others.clear();
    if (replies.size() < 3) {
      if (auto r = testing::awaitMessage<protocol::CancelReply>(*c, 5s)) replies.push_back(*r);
    }
  }
  ASSERT_EQ(replies.size(), 3u);
  EXPECT_EQ(replies[0], (protocol::CancelReply{"wait", protocol::CancelResult::Applied}));
  EXPECT_EQ(replies[1], (protocol::CancelReply{"nobody", protocol::CancelResult::NotFound}));
  EXPECT_EQ(replies[2], (protocol::CancelReply{"run", protocol::CancelResult::NotFound}));
}

// A cancel that arrives while a pass is in flight is applied before the pass ends; that
// request's outputs of the pass are dropped, the other request's are delivered.
TEST(ServerTest, CancelMidStreamDuringAnInFlightPass) {
  LiveService svc(TestConfig().paced(0, 20).build());
  auto c = svc.client();
  ASSERT_TRUE(c->submit({.id = "keep", .prompt = prompt(4), .max_tokens = 30}));
  ASSERT_TRUE(c->submit({.id = "drop", .prompt = prompt(4, 77), .max_tokens = 1000}));
  // Wait for the first token of "drop", then cancel it while the next pass is in flight.
  std::map<std::string, testing::Stream> seen;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (seen["drop"].tokens.empty() && std::chrono::steady_clock::now() < deadline) {
    auto m = c->receive(50ms);
    if (!m || !*m) continue;
    if (auto* b = std::get_if<protocol::OutputBatch>(&**m)) {
      for (const auto& o : b->outputs) {
        seen[o.id].tokens.insert(seen[o.id].tokens.end(), o.tokens.begin(), o.tokens.end());
      }
    }
  }
  ASSERT_FALSE(seen["drop"].tokens.empty());
  ASSERT_TRUE(c->cancel("drop"));
  std::vector<protocol::ClientMessage> others;
  auto s = collect(*c, {"drop", "keep"}, &others, 10s, seen);
  EXPECT_EQ(s["drop"].finish, FinishReason::Cancelled);
  EXPECT_LT(s["drop"].tokens.size(), 30u);
  EXPECT_EQ(s["keep"].tokens.size(), 30u);
  // The cancelled request left the engine: nothing runs and its blocks are back (it would still
  // be decoding for ~20 s otherwise).
  auto observer = svc.client();
  EXPECT_TRUE(testing::eventually(
      *observer,
      [](const protocol::StatsReply& r) {
        return r.ranks.at(0).running == 0 && r.ranks.at(0).active_blocks == 0 && r.routes == 0;
      },
      5s));
  EXPECT_EQ(s["keep"].finish, FinishReason::Length);
  bool applied = false;
  for (const auto& m : others) {
    if (auto* r = std::get_if<protocol::CancelReply>(&m)) {
      applied |= r->result == protocol::CancelResult::Applied;
    }
  }
  EXPECT_TRUE(applied);
}

// A client that never reads, with a tiny high-water mark, has its requests cancelled; another
// client's stream completes in full meanwhile and the slow one learns of the cancel later.
TEST(ServerTest, SlowReaderIsCancelledOthersUnaffected) {
  // A small pipe, and a buffer of 400 signals per request: more than the fast request's whole
  // output (300 tokens), so no stall of this process's threads can cancel it (with the default
  // of 8, a 40 ms stall on a loaded machine or under TSan did), while each slow request, a
  // million tokens long, overflows it whatever the scheduling.
  LiveService svc(TestConfig()
                      .paced(0, 1)
                      .submitSndhwm(32)
                      .maxBufferedOutputs(400)
                      .numGpuBlocks(1000000)
                      .maxNumSeqs(512)
                      .build());
  // The kernel's default receive buffer, not a tiny one (a tiny SO_RCVBUF on loopback invites
  // the kernel's drops and backed-off retransmissions once the reader lags; see
  // server_backpressure_test.cpp): it only delays the overflow by a few thousand messages.
  auto slow = svc.client({.rcvhwm = 2});
  auto fast = svc.client();
  auto observer = svc.client();
  std::vector<std::string> slow_ids;
  for (std::uint32_t i = 0; i < 100; ++i) {  // ~2 KB per pass for the slow client
    slow_ids.push_back(idOf("s", i));
    ASSERT_TRUE(slow->submit(
        {.id = slow_ids.back(), .prompt = prompt(8, 1000 * i), .max_tokens = 1000000}));
  }
  ASSERT_TRUE(fast->submit({.id = "f", .prompt = prompt(8, 500), .max_tokens = 300}));
  auto fs = collect(*fast, {"f"});
  EXPECT_EQ(fs["f"].tokens.size(), 300u);
  EXPECT_EQ(fs["f"].finish, FinishReason::Length);
  // Once the slow client's pipe is full its streams are abandoned: nothing runs any more.
  EXPECT_TRUE(testing::eventually(
      *observer,
      [](const protocol::StatsReply& r) {
        return r.ranks.at(0).running == 0 && r.ranks.at(0).active_blocks == 0;
      },
      60s));
  // The slow client now reads: every stream ends with a backpressure cancel.
  auto ss = collect(*slow, slow_ids, nullptr, 30s);
  for (const auto& id : slow_ids) {
    EXPECT_EQ(ss[id].finish, FinishReason::Cancelled) << id;
    EXPECT_NE(ss[id].reason.find("backpressure"), std::string::npos) << id;
  }
  EXPECT_TRUE(
      testing::eventually(*observer, [](const protocol::StatsReply& r) { return r.routes == 0; }));
}

TEST(ServerTest, DisconnectedClientHasItsRequestsCancelled) {
  // 50 ms decode passes: the client that never reads must not reach the backpressure bound
  // (its pipe full, then max_buffered_outputs more) before the observer has seen its three
  // streams running. With 1 ms passes a slow (TSan) run saw them cancelled for backpressure
  // first, and waited for "running == 3" in vain.
  LiveService svc(TestConfig().paced(1, 50).build());
  auto observer = svc.client();
  {
    auto gone = svc.client();
    for (std::uint32_t i = 0; i < 3; ++i) {
      ASSERT_TRUE(
          gone->submit({.id = idOf("g", i), .prompt = prompt(40, 10 * i), .max_tokens = 100000}));
    }
    ASSERT_TRUE(testing::eventually(
        *observer, [](const protocol::StatsReply& r) { return r.ranks.at(0).running == 3; }));
  }  // the client disconnects mid-stream
  EXPECT_TRUE(testing::eventually(*observer, [](const protocol::StatsReply& r) {
    return r.routes == 0 && r.ranks.at(0).active_blocks == 0 && r.ranks.at(0).running == 0;
  }));
  svc.stop();  // the counters are the loop's: read them once it has ended
  EXPECT_EQ(svc.server().counters().clients_gone, 1u);
  EXPECT_EQ(svc.server().counters().disconnect_cancels, 3u);
}

TEST(ServerTest, ShutdownEndsEveryOpenStream) {
  LiveService svc(TestConfig().paced(1, 5).maxNumSeqs(2).build());
  auto c = svc.client();
  for (std::uint32_t i = 0; i < 4; ++i) {  // 2 running, 2 waiting
    ASSERT_TRUE(
        c->submit({.id = idOf("q", i), .prompt = prompt(8, 100 * i), .max_tokens = 100000}));
  }
  auto observer = svc.client();  // stats on another client: polling must not eat c's outputs
  ASSERT_TRUE(testing::eventually(*observer, [](const protocol::StatsReply& r) {
    return r.ranks.at(0).running == 2 && r.ranks.at(0).waiting == 2;
  }));
  svc.stop();
  auto s = collect(*c, {"q0", "q1", "q2", "q3"});
  for (const auto& [id, st] : s) EXPECT_EQ(st.finish, FinishReason::Shutdown) << id;
}

TEST(ServerTest, DrainFinishesInFlightRequestsOnStop) {
  LiveService svc(TestConfig().paced(1, 1).build(), {.drain = true});
  auto c = svc.client();
  ASSERT_TRUE(c->submit({.id = "d", .prompt = prompt(8), .max_tokens = 30}));
  ASSERT_TRUE(testing::awaitMessage<protocol::SubmitAck>(*c));
  svc.stop();
  auto s = collect(*c, {"d"});
  EXPECT_EQ(s["d"].finish, FinishReason::Length);
  EXPECT_EQ(s["d"].tokens.size(), 30u);
}

// Every malformed message gets an error reply naming the problem; the service keeps serving.
TEST(ServerTest, MalformedMessagesGetErrorsAndServiceKeepsServing) {
  LiveService svc(TestConfig().build());
  auto c = svc.client();
  const auto bytes = [](std::initializer_list<int> v) {
    std::vector<std::byte> out;
    for (int b : v) out.push_back(static_cast<std::byte>(b));
    return out;
  };
  struct Bad {
    const char* name;
    std::vector<std::byte> payload;
    const char* fragment;
  };
  const std::vector<Bad> catalogue = {
      {"empty", {}, ""},
      {"not a map", bytes({0x93, 0x01, 0x02, 0x03}), ""},
      {"truncated map", bytes({0x82, 0xa1, 'v'}), ""},
      {"no version", bytes({0x81, 0xa4, 't', 'y', 'p', 'e', 0xa5, 's', 't', 'a', 't', 's'}), "v"},
      {"version 2",
       bytes({0x82, 0xa1, 'v', 0x02, 0xa4, 't', 'y', 'p', 'e', 0xa5, 's', 't', 'a', 't', 's'}),
       "version"},
      {"unknown type",
       bytes({0x82, 0xa1, 'v', 0x01, 0xa4, 't', 'y', 'p', 'e', 0xa3, 'f', 'o', 'o'}), "foo"},
      {"submit without fields",
       bytes({0x82, 0xa1, 'v', 0x01, 0xa4, 't', 'y', 'p', 'e', 0xa6, 's', 'u', 'b', 'm', 'i', 't'}),
       ""},
      {"trailing bytes",
       bytes(
           {0x82, 0xa1, 'v', 0x01, 0xa4, 't', 'y', 'p', 'e', 0xa5, 's', 't', 'a', 't', 's', 0x00}),
       "trailing"},
      {"huge array claim", bytes({0xdd, 0xff, 0xff, 0xff, 0xff}), ""},
      {"server-only type",
       bytes({0x83, 0xa1, 'v', 0x01, 0xa4, 't', 'y', 'p',  'e', 0xaa, 's',  'u', 'b',
              'm',  'i',  't', '_',  'a',  'c', 'k', 0xa2, 'i', 'd',  0xa1, 'x'}),
       ""},
  };
  for (const Bad& bad : catalogue) {
    ASSERT_TRUE(c->sendRaw(bad.payload));
    auto err = testing::awaitMessage<protocol::ErrorReply>(*c, 5s);
    ASSERT_TRUE(err) << bad.name;
    EXPECT_FALSE(err->message.empty()) << bad.name;
    EXPECT_NE(err->message.find(bad.fragment), std::string::npos)
        << bad.name << ": " << err->message;
  }
  // An oversized message (beyond the protocol limit but under ZMQ_MAXMSGSIZE).
  std::vector<std::byte> big(protocol::kMaxMessageBytes + 16, std::byte{0xc0});
  ASSERT_TRUE(c->sendRaw(big));
  auto err = testing::awaitMessage<protocol::ErrorReply>(*c, 5s);
  ASSERT_TRUE(err);
  EXPECT_NE(err->message.find("exceeds"), std::string::npos) << err->message;
  EXPECT_EQ(err->code, ErrorCode::InvalidArgument) << "a limit exceeded is invalid_argument";
  // Still serving, for this client and for others.
  ASSERT_TRUE(c->submit({.id = "ok", .prompt = prompt(4), .max_tokens = 3}));
  EXPECT_EQ(collect(*c, {"ok"})["ok"].tokens.size(), 3u);
}

/// A bare DEALER for sending bytes no well-behaved client would send.
struct RawDealer {
  zmq::context_t ctx;
  zmq::socket_t socket{ctx, zmq::socket_type::dealer};
  RawDealer() { socket.set(zmq::sockopt::linger, 0); }
  /// One reply message, waited for with a deadline.
  void receive(zmq::message_t& reply) {
    zmq::pollitem_t item{socket.handle(), 0, ZMQ_POLLIN, 0};
    ASSERT_EQ(zmq::poll(&item, 1, std::chrono::milliseconds(5000)), 1);
    ASSERT_TRUE(socket.recv(reply));
  }
};

// The error codes protocol/README.md promises: another protocol version (any integer but 1,
// negative too) is `unsupported`; a limit exceeded is `invalid_argument`; bytes of the wrong
// shape are `corruption`.
TEST(ServerTest, ErrorCodesAreTheDocumentedOnes) {
  LiveService svc(TestConfig().build());
  auto c = svc.client();
  const auto bytes = [](std::initializer_list<int> v) {
    std::vector<std::byte> out;
    for (int b : v) out.push_back(static_cast<std::byte>(b));
    return out;
  };
  struct Row {
    const char* name;
    std::vector<std::byte> payload;
    ErrorCode code;
    const char* fragment;
  };
  const std::vector<Row> rows = {
      {"v is -1",
       bytes({0x82, 0xa1, 'v', 0xff, 0xa4, 't', 'y', 'p', 'e', 0xa5, 's', 't', 'a', 't', 's'}),
       ErrorCode::Unsupported, "v: protocol version -1 is not supported"},
      {"v is 2",
       bytes({0x82, 0xa1, 'v', 0x02, 0xa4, 't', 'y', 'p', 'e', 0xa5, 's', 't', 'a', 't', 's'}),
       ErrorCode::Unsupported, "v: protocol version 2 is not supported"},
      {"v is a str",
       bytes({0x82, 0xa1, 'v', 0xa1, '1', 0xa4, 't', 'y', 'p', 'e', 0xa5, 's', 't', 'a', 't', 's'}),
       ErrorCode::Corruption, "v: expected"},
      {"over the message size limit",
       std::vector<std::byte>(protocol::kMaxMessageBytes + 1, std::byte{0xc0}),
       ErrorCode::InvalidArgument, "exceeds the limit of 16777216"},
  };
  for (const Row& row : rows) {
    ASSERT_TRUE(c->sendRaw(row.payload));
    auto err = testing::awaitMessage<protocol::ErrorReply>(*c, 5s);
    ASSERT_TRUE(err) << row.name;
    EXPECT_EQ(err->code, row.code) << row.name << ": " << err->message;
    EXPECT_NE(err->message.find(row.fragment), std::string::npos)
        << row.name << ": " << err->message;
  }
}

// A client may frame its messages with an empty delimiter frame (REQ-style envelope); the
// service then frames everything it sends that client the same way: replies, acks and outputs.
TEST(ServerTest, DelimiterFramedClientIsAnsweredWithADelimiter) {
  LiveService svc(TestConfig().build());
  RawDealer raw;
  zmq::socket_t& d = raw.socket;
  d.connect(svc.endpoints().submit);
  const auto receiveDelimited = [&](std::vector<protocol::ClientMessage>& got) {
    std::vector<zmq::message_t> parts;
    zmq::pollitem_t item{d.handle(), 0, ZMQ_POLLIN, 0};
    ASSERT_EQ(zmq::poll(&item, 1, std::chrono::milliseconds(5000)), 1);
    ASSERT_EQ(net::tryRecvMultipart(d, parts), net::RecvOutcome::Received);
    ASSERT_EQ(parts.size(), 2u) << "expected [\"\", payload]";
    EXPECT_EQ(parts[0].size(), 0u);
    auto m = protocol::decodeClientMessage(
        {static_cast<const std::byte*>(parts[1].data()), parts[1].size()});
    ASSERT_TRUE(m) << m.error().message;
    got.push_back(std::move(*m));
  };
  const auto sendDelimited = [&](const protocol::ClientMessage& m) {
    const auto bytes = protocol::encodeClientMessage(m);
    d.send(zmq::message_t(), zmq::send_flags::sndmore);
    d.send(zmq::buffer(bytes.data(), bytes.size()));
  };
  std::vector<protocol::ClientMessage> got;
  sendDelimited(protocol::StatsRequest{});
  ASSERT_NO_FATAL_FAILURE(receiveDelimited(got));
  ASSERT_TRUE(std::holds_alternative<protocol::StatsReply>(got.back()));
  sendDelimited(SubmitRequest{.id = "d", .prompt = prompt(4), .max_tokens = 3});
  std::map<std::string, testing::Stream> streams;
  while (!streams["d"].finish) {
    ASSERT_NO_FATAL_FAILURE(receiveDelimited(got));
    testing::absorb(streams, std::move(got.back()), nullptr);
  }
  EXPECT_TRUE(streams["d"].acked);
  EXPECT_EQ(streams["d"].tokens.size(), 3u);
}

TEST(ServerTest, MultiFrameMessagesAreRefused) {
  LiveService svc(TestConfig().build());
  RawDealer raw;
  zmq::socket_t& d = raw.socket;
  d.connect(svc.endpoints().submit);
  d.send(zmq::str_buffer("a"), zmq::send_flags::sndmore);
  d.send(zmq::str_buffer("b"), zmq::send_flags::none);
  zmq::message_t reply;
  ASSERT_NO_FATAL_FAILURE(raw.receive(reply));
  auto decoded =
      protocol::decodeClientMessage({static_cast<const std::byte*>(reply.data()), reply.size()});
  ASSERT_TRUE(decoded);
  auto* e = std::get_if<protocol::ErrorReply>(&*decoded);
  ASSERT_NE(e, nullptr);
  EXPECT_NE(e->message.find("one payload frame"), std::string::npos);
}

// A request id that is not UTF-8 is refused, and the error reply does not echo it: every str in
// the reply is UTF-8, so a client decoding strs as text (python msgpack raw=False) can read it.
TEST(ServerTest, RequestIdThatIsNotUtf8IsRefusedWithoutEchoingIt) {
  LiveService svc(TestConfig().build());
  RawDealer raw;
  zmq::socket_t& d = raw.socket;
  d.connect(svc.endpoints().submit);
  // {"v":1,"type":"submit","id":"\xff\xfeA","prompt":[1,2,3],"max_tokens":2}
  const std::vector<std::uint8_t> submit = {
      0x85, 0xa1, 'v',  0x01, 0xa4, 't',  'y', 'p',  'e', 0xa6, 's', 'u', 'b', 'm', 'i',  't',
      0xa2, 'i',  'd',  0xa3, 0xff, 0xfe, 'A', 0xa6, 'p', 'r',  'o', 'm', 'p', 't', 0x93, 0x01,
      0x02, 0x03, 0xaa, 'm',  'a',  'x',  '_', 't',  'o', 'k',  'e', 'n', 's', 0x02};
  d.send(zmq::buffer(submit.data(), submit.size()));
  zmq::message_t reply;
  ASSERT_NO_FATAL_FAILURE(raw.receive(reply));
  const std::string_view bytes(static_cast<const char*>(reply.data()), reply.size());
  EXPECT_EQ(bytes.find('\xff'), std::string_view::npos) << "the invalid id is echoed back";
  // The decoder refuses any str that is not UTF-8, so decoding proves the reply is clean.
  auto decoded =
      protocol::decodeClientMessage({static_cast<const std::byte*>(reply.data()), reply.size()});
  ASSERT_TRUE(decoded) << decoded.error().message;
  auto* e = std::get_if<protocol::ErrorReply>(&*decoded);
  ASSERT_NE(e, nullptr) << "got " << protocol::messageType(*decoded);
  EXPECT_EQ(e->code, ErrorCode::Corruption);
  EXPECT_EQ(e->message, "id: not valid UTF-8 (byte 0xff at offset 0)");
  EXPECT_FALSE(e->id.has_value());
  // The service keeps serving a well-formed client.
  auto c = svc.client();
  ASSERT_TRUE(c->submit({.id = "ok", .prompt = prompt(4), .max_tokens = 3}));
  EXPECT_EQ(collect(*c, {"ok"})["ok"].tokens.size(), 3u);
}

TEST(ServerTest, CancelSocketAcceptsOnlyCancels) {
  LiveService svc(TestConfig().build());
  RawDealer raw;
  zmq::socket_t& d = raw.socket;
  d.connect(svc.endpoints().cancel);
  const auto bytes = protocol::encodeClientMessage(protocol::StatsRequest{});
  d.send(zmq::buffer(bytes.data(), bytes.size()));
  zmq::message_t reply;
  ASSERT_NO_FATAL_FAILURE(raw.receive(reply));
  auto decoded =
      protocol::decodeClientMessage({static_cast<const std::byte*>(reply.data()), reply.size()});
  ASSERT_TRUE(decoded);
  ASSERT_TRUE(std::holds_alternative<protocol::ErrorReply>(*decoded));
}

// Cancels flow on their own socket while a large submission backlog waits in ZeroMQ.
TEST(ServerTest, CancelHonouredWhileTenThousandSubmitsAreQueued) {
  LiveService svc(TestConfig().paced(1, 1).maxNumSeqs(4).submitBacklog(50).build());
  auto flood = svc.client({.sndhwm = 0});
  ASSERT_TRUE(flood->submit({.id = "first", .prompt = prompt(4), .max_tokens = 100000}));
  ASSERT_TRUE(testing::awaitMessage<protocol::SubmitAck>(*flood));
  // The backlog requests are short, so the engine keeps reading the submit socket a few at a
  // time: the observer's stats request below is read within a few passes, not only once
  // long-running requests finish (seconds on a loaded machine).
  for (std::uint32_t i = 0; i < 10000; ++i) {
    ASSERT_TRUE(flood->submit({.id = idOf("b", i), .prompt = prompt(4, 1000), .max_tokens = 2}));
  }
  ASSERT_TRUE(flood->cancel("first"));
  const auto reply = testing::awaitMessage<protocol::CancelReply>(*flood, 10s);
  ASSERT_TRUE(reply);
  EXPECT_EQ(*reply, (protocol::CancelReply{"first", protocol::CancelResult::Applied}));
  auto observer = svc.client();
  const auto s = testing::stats(*observer);
  EXPECT_LE(s.ranks.at(0).waiting, 60u);  // the rest still waits in ZeroMQ, unread
}

TEST(ServerTest, StatsAndKvSnapshot) {
  LiveService svc(TestConfig().build());  // block_size 4
  auto c = svc.client();
  ASSERT_TRUE(c->submit({.id = "k", .prompt = prompt(9), .max_tokens = 1}));
  collect(*c, {"k"});
  ASSERT_TRUE(c->send(protocol::KvSnapshotRequest{}));
  auto snap = testing::awaitMessage<protocol::KvSnapshotReply>(*c);
  ASSERT_TRUE(snap);
  ASSERT_EQ(snap->ranks.size(), 1u);
  EXPECT_EQ(snap->ranks[0].block_hashes.size(), 2u);  // 9 tokens ⇒ 2 full blocks cached
  const auto s = testing::stats(*c);
  EXPECT_EQ(s.routes, 0u);
  EXPECT_EQ(s.ranks.at(0).active_blocks, 0u);
  EXPECT_EQ(s.ranks.at(0).total_blocks, 256u);
  EXPECT_EQ(s.ranks.at(0).prefix_queries_tokens, 9u);
  ASSERT_TRUE(c->send(protocol::KvSnapshotRequest{.dp_rank = 5}));
  EXPECT_TRUE(testing::awaitMessage<protocol::ErrorReply>(*c));
}

TEST(ServerTest, DpRanksGetTheirOwnRequests) {
  LiveService svc(TestConfig().dpSize(2).build());
  auto c = svc.client();
  ASSERT_TRUE(c->submit({.id = "one", .prompt = prompt(8), .max_tokens = 1, .dp_rank = 1}));
  collect(*c, {"one"});
  ASSERT_TRUE(c->send(protocol::KvSnapshotRequest{}));
  auto snap = testing::awaitMessage<protocol::KvSnapshotReply>(*c);
  ASSERT_TRUE(snap);
  ASSERT_EQ(snap->ranks.size(), 2u);
  EXPECT_TRUE(snap->ranks[0].block_hashes.empty());
  EXPECT_EQ(snap->ranks[1].block_hashes.size(), 2u);
}

TEST(ServerTest, KvReplayConnectDialsABoundPeerAndServesItReplays) {
  // endpoints.kv_replay.connect: the replay ROUTER dials a peer that binds (a replay broker);
  // before it was honoured the ROUTER bound the address itself and this bind failed.
  zmq::context_t ctx;
  zmq::socket_t broker(ctx, zmq::socket_type::dealer);
  broker.set(zmq::sockopt::linger, 0);
  broker.bind("tcp://127.0.0.1:*");
  const std::string broker_ep = broker.get(zmq::sockopt::last_endpoint);
  ServiceConfig config = TestConfig().build();
  config.kv_events.enabled = true;
  config.endpoints.kv_replay = {.endpoint = broker_ep, .connect = true};
  LiveService svc(std::move(config));
  ASSERT_EQ(svc.endpoints().kv_replay, std::vector<std::string>{broker_ep});
  auto c = svc.client();
  ASSERT_TRUE(c->submit({.id = "k", .prompt = prompt(9), .max_tokens = 1}));
  collect(*c, {"k"});  // its pass stored 2 blocks: batch 0

  // The DEALER can send once the ROUTER has connected.
  zmq::pollitem_t out{broker.handle(), 0, ZMQ_POLLOUT, 0};
  ASSERT_EQ(zmq::poll(&out, 1, 10s), 1);
  const auto start = protocol::encodeSeqNo(0);
  ASSERT_TRUE(broker.send(zmq::message_t(), zmq::send_flags::sndmore | zmq::send_flags::dontwait));
  ASSERT_TRUE(broker.send(zmq::buffer(start.data(), start.size()), zmq::send_flags::none));
  std::vector<std::uint64_t> seqs;
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < deadline &&
         (seqs.empty() || seqs.back() != protocol::kReplayEndMarker)) {
    zmq::pollitem_t in{broker.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&in, 1, 100ms) == 0) continue;
    std::vector<zmq::message_t> parts;
    ASSERT_TRUE(zmq::recv_multipart(broker, std::back_inserter(parts)));
    ASSERT_EQ(parts.size(), 3u);  // r1 at a DEALER: ["", seq, payload]
    const auto seq =
        protocol::decodeSeqNo({static_cast<const std::byte*>(parts[1].data()), parts[1].size()});
    ASSERT_TRUE(seq.has_value());
    seqs.push_back(*seq);
  }
  EXPECT_EQ(seqs, (std::vector<std::uint64_t>{0, protocol::kReplayEndMarker}));
}

}  // namespace
}  // namespace mocker::service
