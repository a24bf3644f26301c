// Real-socket tests of the ZMQ adapters: ephemeral tcp ports on 127.0.0.1, no sleeps — every
// wait is a zmq::poll with a deadline.
#include "publishers/zmq_sinks.h"

#include <gtest/gtest.h>
#include <zmq.hpp>

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <optional>
#include <string>

#include "protocol/framing.h"
#include "publishers/kv_event_publisher.h"
#include "tests/testing/recording_frame_sink.h"

namespace mocker::publishers {
namespace {

using Clock = std::chrono::steady_clock;
using Bytes = std::vector<std::byte>;
constexpr auto kDeadline = std::chrono::seconds(20);

std::vector<engine::KvEvent> storedEvents(std::uint64_t hash) {
  return {engine::BlockStored{.block_hashes = {hash},
                              .parent_block_hash = std::nullopt,
                              .token_ids = {1, 2},
                              .block_size = 2}};
}

// Receives one whole multipart message if one is ready.
std::optional<Message> tryRecv(zmq::socket_t& s) {
  zmq::message_t part;
  if (!s.recv(part, zmq::recv_flags::dontwait)) return std::nullopt;
  Message m;
  for (;;) {
    const auto* p = static_cast<const std::byte*>(part.data());
    m.emplace_back(p, p + part.size());
    if (!part.more()) return m;
    part.rebuild();
    (void)s.recv(part, zmq::recv_flags::none);
  }
}

// Waits up to `timeout` for `s` to become readable.
bool waitReadable(zmq::socket_t& s, std::chrono::milliseconds timeout) {
  zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
  return zmq::poll(&item, 1, timeout) > 0;
}

std::uint64_t seqOf(const Bytes& frame) { return *protocol::decodeSeqNo(frame); }

// Slow-joiner handshake: publish probe batches until the SUB sees one; returns its seq.
std::uint64_t handshake(KvEventPublisher& publisher, zmq::socket_t& sub) {
  const auto deadline = Clock::now() + kDeadline;
  while (Clock::now() < deadline) {
    publisher.publishPass(storedEvents(1), 0.0);
    if (waitReadable(sub, std::chrono::milliseconds(20))) {
      const auto m = tryRecv(sub);
      if (m) return seqOf(m->at(1));
    }
  }
  ADD_FAILURE() << "SUB never received a probe";
  return 0;
}

// After the handshake, publishes `n` batches and checks that the SUB receives every seq from
// the first probe it saw through the last one published, in order and without gaps.
void expectEveryBatchArrives(KvEventPublisher& publisher, zmq::socket_t& sub, std::size_t n) {
  std::uint64_t expected = handshake(publisher, sub) + 1;
  std::uint64_t last = 0;
  for (std::size_t i = 0; i < n; ++i) last = *publisher.publishPass(storedEvents(1000 + i), 1.0);
  const auto deadline = Clock::now() + kDeadline;
  while (expected <= last && Clock::now() < deadline) {
    if (!waitReadable(sub, std::chrono::milliseconds(100))) continue;
    while (auto m = tryRecv(sub)) {
      ASSERT_EQ(m->size(), 3u);
      ASSERT_EQ(seqOf(m->at(1)), expected);
      const auto batch = protocol::decodeKvEventBatch(m->at(2));
      ASSERT_TRUE(batch.has_value()) << batch.error().toString();
      ++expected;
    }
  }
  EXPECT_EQ(expected, last + 1);
}

TEST(ZmqPubSinkTest, SubSeesEveryBatchAfterTheHandshake) {
  zmq::context_t ctx;
  auto sink = ZmqPubSink::create(ctx, {.endpoint = "tcp://127.0.0.1:*"});
  ASSERT_TRUE(sink.has_value()) << sink.error().toString();
  EXPECT_NE((*sink)->endpoint().find("tcp://127.0.0.1:"), std::string::npos);
  EXPECT_EQ((*sink)->endpoint().find('*'), std::string::npos);
  auto publisher = KvEventPublisher::create({.topic = "kv-events"}, **sink);
  ASSERT_TRUE(publisher.has_value());
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::linger, 0);
  sub.set(zmq::sockopt::subscribe, "kv-events");
  sub.connect((*sink)->endpoint());
  expectEveryBatchArrives(**publisher, sub, 200);
  EXPECT_EQ((*publisher)->numBatchesDropped(), 0u);
}

TEST(ZmqPubSinkTest, ConnectModeDialsABoundSub) {
  zmq::context_t ctx;
  zmq::socket_t sub(ctx, zmq::socket_type::sub);
  sub.set(zmq::sockopt::linger, 0);
  sub.set(zmq::sockopt::subscribe, "");
  sub.bind("tcp://127.0.0.1:*");
  const std::string endpoint = sub.get(zmq::sockopt::last_endpoint);
  auto sink = ZmqPubSink::create(ctx, {.endpoint = endpoint, .connect = true});
  ASSERT_TRUE(sink.has_value()) << sink.error().toString();
  EXPECT_EQ((*sink)->endpoint(), endpoint);
  auto publisher = KvEventPublisher::create({}, **sink);
  ASSERT_TRUE(publisher.has_value());
  expectEveryBatchArrives(**publisher, sub, 20);
}

TEST(ZmqPubSinkTest, SendErrorIsCountedAndKeptNotSwallowed) {
  zmq::context_t ctx;
  auto sink = ZmqPubSink::create(ctx, {.endpoint = "tcp://127.0.0.1:*", .linger_ms = 0});
  ASSERT_TRUE(sink.has_value()) << sink.error().toString();
  auto publisher = KvEventPublisher::create({}, **sink);
  ASSERT_TRUE(publisher.has_value());
  ctx.shutdown();  // every later operation on the socket fails with ETERM
  EXPECT_EQ((*publisher)->publishPass(storedEvents(1), 0.0), 0u);
  EXPECT_EQ((*publisher)->publishPass(storedEvents(2), 0.0), 1u);
  EXPECT_EQ((*publisher)->numBatchesDropped(), 2u);
  EXPECT_EQ((*publisher)->ringSize(), 2u);  // still replayable
  EXPECT_EQ((*sink)->numErrors(), 2u);
  const auto error = (*sink)->takeError();
  ASSERT_TRUE(error.has_value());
  EXPECT_NE(error->find("PUB '" + (*sink)->endpoint() + "': send failed"), std::string::npos)
      << *error;
  EXPECT_FALSE((*sink)->takeError().has_value());  // reported once
}

TEST(ZmqPubSinkTest, BindFailureNamesTheEndpoint) {
  zmq::context_t ctx;
  const auto r = ZmqPubSink::create(ctx, {.endpoint = "bogus://x"});
  ASSERT_FALSE(r.has_value());
  EXPECT_EQ(r.error().code, ErrorCode::IoError);
  EXPECT_NE(r.error().message.find("bogus://x"), std::string::npos);
  auto first = ZmqPubSink::create(ctx, {.endpoint = "tcp://127.0.0.1:*"});
  ASSERT_TRUE(first.has_value());
  const auto again = ZmqPubSink::create(ctx, {.endpoint = (*first)->endpoint()});
  ASSERT_FALSE(again.has_value());  // address in use
  EXPECT_NE(again.error().message.find((*first)->endpoint()), std::string::npos);
}

// Runs a DEALER replay exchange: sends `request`, services the ROUTER and collects replies
// until the end marker (or the deadline).
std::vector<Message> dealerReplay(ZmqReplayServer& server, zmq::socket_t& dealer,
                                  std::uint64_t start) {
  const auto seq = protocol::encodeSeqNo(start);
  dealer.send(zmq::const_buffer(nullptr, 0), zmq::send_flags::sndmore);
  dealer.send(zmq::const_buffer(seq.data(), seq.size()), zmq::send_flags::none);
  std::vector<Message> replies;
  const auto deadline = Clock::now() + kDeadline;
  while (Clock::now() < deadline) {
    zmq::pollitem_t items[] = {{server.pollHandle(), 0, ZMQ_POLLIN, 0},
                               {dealer.handle(), 0, ZMQ_POLLIN, 0}};
    zmq::poll(items, 2, std::chrono::milliseconds(100));
    if (items[0].revents & ZMQ_POLLIN) server.serviceReadable();
    while (auto m = tryRecv(dealer)) {
      replies.push_back(*m);
      const Bytes& seq_frame = m->size() >= 2 ? (*m)[m->size() - 2] : Bytes{};
      if (seq_frame.size() == 8 && seqOf(seq_frame) == protocol::kReplayEndMarker) {
        return replies;
      }
    }
  }
  ADD_FAILURE() << "no end marker before the deadline";
  return replies;
}

TEST(ZmqReplayServerTest, DealerGetsBufferedBatchesThenTheEndMarker) {
  for (ReplayLayout layout : {ReplayLayout::R1, ReplayLayout::R2}) {
    SCOPED_TRACE(std::string(toString(layout)));
    zmq::context_t ctx;
    testing::RecordingFrameSink live;
    auto publisher = KvEventPublisher::create({.topic = "t", .replay_layout = layout}, live);
    ASSERT_TRUE(publisher.has_value());
    for (std::uint64_t i = 0; i < 5; ++i) (*publisher)->publishPass(storedEvents(i + 1), 0.0);
    auto server = ZmqReplayServer::create(ctx, {.endpoint = "tcp://127.0.0.1:*"}, **publisher);
    ASSERT_TRUE(server.has_value()) << server.error().toString();
    zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
    dealer.set(zmq::sockopt::linger, 0);
    dealer.connect((*server)->endpoint());

    const auto replies = dealerReplay(**server, dealer, 2);
    ASSERT_EQ(replies.size(), 4u);  // seq 2, 3, 4, end marker
    const std::size_t width =
        layout == ReplayLayout::R1 ? 3 : 4;  // DEALER sees ["", (topic), seq, payload]
    for (std::size_t i = 0; i < 3; ++i) {
      ASSERT_EQ(replies[i].size(), width);
      EXPECT_TRUE(replies[i][0].empty());
      if (layout == ReplayLayout::R2) {
        EXPECT_EQ(testing::frameText(replies[i][1]), "t");
      }
      EXPECT_EQ(seqOf(replies[i][width - 2]), 2 + i);
      EXPECT_EQ(replies[i][width - 1], live.messages()[2 + i][2]);
    }
    ASSERT_EQ(replies[3].size(), width);
    EXPECT_TRUE(replies[3][width - 1].empty());
    EXPECT_EQ((*publisher)->numReplayRequests(), 1u);
  }
}

TEST(ZmqReplayServerTest, MalformedRequestIsIgnoredAndTheServerKeepsServing) {
  zmq::context_t ctx;
  testing::RecordingFrameSink live;
  auto publisher = KvEventPublisher::create({}, live);
  ASSERT_TRUE(publisher.has_value());
  (*publisher)->publishPass(storedEvents(1), 0.0);
  auto server = ZmqReplayServer::create(ctx, {.endpoint = "tcp://127.0.0.1:*"}, **publisher);
  ASSERT_TRUE(server.has_value());
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.connect((*server)->endpoint());
  // No empty delimiter: [identity, seq] at the ROUTER → ignored and counted.
  const auto seq = protocol::encodeSeqNo(0);
  dealer.send(zmq::const_buffer(seq.data(), seq.size()), zmq::send_flags::none);
  const auto deadline = Clock::now() + kDeadline;
  while ((*publisher)->numMalformedReplayRequests() == 0 && Clock::now() < deadline) {
    zmq::pollitem_t item{(*server)->pollHandle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, std::chrono::milliseconds(100)) > 0) (*server)->serviceReadable();
  }
  EXPECT_EQ((*publisher)->numMalformedReplayRequests(), 1u);
  const auto replies = dealerReplay(**server, dealer, 0);  // a valid one still works
  ASSERT_EQ(replies.size(), 2u);
  EXPECT_EQ(seqOf(replies[0][1]), 0u);
}

// Waits for a ZMQ_EVENT_DISCONNECTED on `monitor` (a PAIR connected to a socket monitor).
bool waitDisconnected(zmq::socket_t& monitor) {
  const auto deadline = Clock::now() + kDeadline;
  while (Clock::now() < deadline) {
    if (!waitReadable(monitor, std::chrono::milliseconds(100))) continue;
    const auto event = tryRecv(monitor);  // [event id (2 B) + value (4 B), address]
    if (!event || event->at(0).size() < 2) continue;
    std::uint16_t id = 0;
    std::memcpy(&id, event->at(0).data(), sizeof id);
    if (id == ZMQ_EVENT_DISCONNECTED) return true;
  }
  return false;
}

TEST(ZmqReplayServerTest, RepliesToARequesterThatLeftAreCountedAsUnroutable) {
  zmq::context_t ctx;
  testing::RecordingFrameSink live;
  auto publisher = KvEventPublisher::create({}, live);
  ASSERT_TRUE(publisher.has_value());
  for (std::uint64_t i = 0; i < 3; ++i) (*publisher)->publishPass(storedEvents(i + 1), 0.0);
  auto server = ZmqReplayServer::create(ctx, {.endpoint = "tcp://127.0.0.1:*"}, **publisher);
  ASSERT_TRUE(server.has_value()) << server.error().toString();
  const std::string monitor_ep = "inproc://replay-monitor-" + std::to_string(::getpid());
  ASSERT_EQ(zmq_socket_monitor((*server)->pollHandle(), monitor_ep.c_str(), ZMQ_EVENT_DISCONNECTED),
            0);
  zmq::socket_t monitor(ctx, zmq::socket_type::pair);
  monitor.set(zmq::sockopt::linger, 0);
  monitor.connect(monitor_ep);

  // A requester asks for a replay and leaves before the server answers. The ROUTER learns that
  // the peer is gone from libzmq's I/O thread a moment after the disconnect event, so some or
  // all of a round's replies may still go into the dying pipe (a sent prefix, the rest dropped:
  // never a hole); such a round is repeated with a new requester until one finds it gone.
  ReplayServiceResult r;
  int rounds = 0;
  std::uint64_t unroutable_before = 0;
  std::uint64_t dropped_before = 0;
  const auto deadline = Clock::now() + kDeadline;
  do {
    ++rounds;
    unroutable_before = (*server)->numRepliesUnroutable();
    dropped_before = (*server)->numRepliesDropped();
    {
      zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
      dealer.set(zmq::sockopt::linger, 0);
      dealer.connect((*server)->endpoint());
      const auto seq = protocol::encodeSeqNo(0);
      dealer.send(zmq::const_buffer(nullptr, 0), zmq::send_flags::sndmore);
      dealer.send(zmq::const_buffer(seq.data(), seq.size()), zmq::send_flags::none);
      zmq::pollitem_t item{(*server)->pollHandle(), 0, ZMQ_POLLIN, 0};
      ASSERT_EQ(zmq::poll(&item, 1, kDeadline), 1);  // the request is queued, not read yet
    }
    ASSERT_TRUE(waitDisconnected(monitor));
    r = (*server)->serviceReadable();
    ASSERT_EQ(r.num_read, 1u);
    EXPECT_FALSE(r.error.has_value());
    EXPECT_EQ(r.num_replies_sent + r.num_replies_dropped, 4u);  // seq 0, 1, 2 and the end marker
  } while (r.num_replies_sent > 0 && Clock::now() < deadline);
  ASSERT_EQ(r.num_replies_sent, 0u) << "after " << rounds << " round(s)";
  EXPECT_EQ(r.num_replies_dropped, 4u);
  EXPECT_EQ((*server)->numRepliesUnroutable() - unroutable_before, 4u);
  EXPECT_EQ((*server)->numRepliesDropped() - dropped_before, 4u);
  EXPECT_EQ((*publisher)->numReplayRequests(), static_cast<std::uint64_t>(rounds));
  ASSERT_EQ(zmq_socket_monitor((*server)->pollHandle(), nullptr, 0), 0);
}

TEST(ZmqReplayServerTest, ARequesterThatDoesNotReadGetsAPrefixAndTheRestIsCounted) {
  zmq::context_t ctx;
  testing::RecordingFrameSink live;
  auto publisher = KvEventPublisher::create({}, live);
  ASSERT_TRUE(publisher.has_value());
  for (std::uint64_t i = 0; i < 50; ++i) (*publisher)->publishPass(storedEvents(i + 1), 0.0);
  // inproc: the pipe holds the server's SNDHWM + the dealer's RCVHWM = 2 messages, exactly.
  const std::string ep = "inproc://replay-full-" + std::to_string(::getpid());
  auto server = ZmqReplayServer::create(ctx, {.endpoint = ep, .sndhwm = 1}, **publisher);
  ASSERT_TRUE(server.has_value()) << server.error().toString();
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  dealer.set(zmq::sockopt::rcvhwm, 1);
  dealer.connect(ep);
  const auto seq = protocol::encodeSeqNo(0);
  dealer.send(zmq::const_buffer(nullptr, 0), zmq::send_flags::sndmore);
  dealer.send(zmq::const_buffer(seq.data(), seq.size()), zmq::send_flags::none);
  zmq::pollitem_t item{(*server)->pollHandle(), 0, ZMQ_POLLIN, 0};
  ASSERT_EQ(zmq::poll(&item, 1, kDeadline), 1);

  const ReplayServiceResult r = (*server)->serviceReadable();
  EXPECT_EQ(r.num_read, 1u);
  EXPECT_EQ(r.num_replies_sent, 2u);
  EXPECT_EQ(r.num_replies_dropped, 49u);  // 51 replies: seq 0..49 and the end marker
  EXPECT_EQ((*server)->numRepliesDropped(), 49u);
  EXPECT_EQ((*server)->numRepliesUnroutable(), 0u);
  // The requester sees seq 0 and 1, then nothing: no later batch, no end marker.
  std::vector<std::uint64_t> got;
  while (waitReadable(dealer, std::chrono::milliseconds(0)))
    got.push_back(seqOf(tryRecv(dealer)->at(1)));
  EXPECT_EQ(got, (std::vector<std::uint64_t>{0, 1}));
}

TEST(ZmqReplayServerTest, ConnectModeServesAPeerThatBinds) {
  zmq::context_t ctx;
  testing::RecordingFrameSink live;
  auto publisher = KvEventPublisher::create({}, live);
  ASSERT_TRUE(publisher.has_value());
  for (std::uint64_t i = 0; i < 3; ++i) (*publisher)->publishPass(storedEvents(i + 1), 0.0);
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);  // e.g. a replay broker's socket
  dealer.set(zmq::sockopt::linger, 0);
  dealer.bind("tcp://127.0.0.1:*");
  const std::string endpoint = dealer.get(zmq::sockopt::last_endpoint);
  auto server = ZmqReplayServer::create(ctx, {.endpoint = endpoint, .connect = true}, **publisher);
  ASSERT_TRUE(server.has_value()) << server.error().toString();
  EXPECT_EQ((*server)->endpoint(), endpoint);

  const auto replies = dealerReplay(**server, dealer, 1);
  ASSERT_EQ(replies.size(), 3u);  // seq 1, 2, end marker
  EXPECT_EQ(seqOf(replies[0][1]), 1u);
  EXPECT_EQ(seqOf(replies[1][1]), 2u);
  EXPECT_EQ(seqOf(replies[2][1]), protocol::kReplayEndMarker);
}

TEST(ZmqReplayServerTest, ConnectFailureNamesTheEndpoint) {
  zmq::context_t ctx;
  testing::RecordingFrameSink live;
  auto publisher = KvEventPublisher::create({}, live);
  ASSERT_TRUE(publisher.has_value());
  const auto r =
      ZmqReplayServer::create(ctx, {.endpoint = "bogus://x", .connect = true}, **publisher);
  ASSERT_FALSE(r.has_value());
  EXPECT_NE(r.error().message.find("cannot connect replay ROUTER to 'bogus://x'"),
            std::string::npos)
      << r.error().message;
}

}  // namespace
}  // namespace mocker::publishers
