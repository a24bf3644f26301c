#include "net/zmq_io.h"

#include <gtest/gtest.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

namespace mocker::net {
namespace {

// inproc pairs: no ports, no timing; every outcome is deterministic.
struct RouterDealer {
  zmq::context_t ctx;
  zmq::socket_t router{ctx, zmq::socket_type::router};
  zmq::socket_t dealer{ctx, zmq::socket_type::dealer};
  explicit RouterDealer(int dealer_rcvhwm = 1000) {
    router.set(zmq::sockopt::router_mandatory, 1);
    router.set(zmq::sockopt::sndhwm, dealer_rcvhwm);
    dealer.set(zmq::sockopt::routing_id, "client-a");
    dealer.set(zmq::sockopt::rcvhwm, dealer_rcvhwm);
    router.bind("inproc://zmq-io-test");
    dealer.connect("inproc://zmq-io-test");
  }
  /// The dealer says hello so that the router learns its routing id (and can route to it).
  void greet() {
    const std::array<zmq::const_buffer, 1> hello{zmq::str_buffer("hello")};
    ASSERT_EQ(trySendMultipart(dealer, hello), SendOutcome::Sent);
    zmq::pollitem_t item{router.handle(), 0, ZMQ_POLLIN, 0};
    ASSERT_EQ(zmq::poll(&item, 1, std::chrono::milliseconds(10000)), 1);
    std::vector<zmq::message_t> parts;
    ASSERT_EQ(tryRecvMultipart(router, parts), RecvOutcome::Received);
  }
};

std::string text(const zmq::message_t& m) { return m.to_string(); }

TEST(ZmqIoTest, EmptySocketReportsEmptyAndClearsParts) {
  RouterDealer s;
  std::vector<zmq::message_t> parts;
  parts.emplace_back("stale", 5);
  EXPECT_EQ(tryRecvMultipart(s.router, parts), RecvOutcome::Empty);
  EXPECT_TRUE(parts.empty());
}

TEST(ZmqIoTest, ReceivesWholeMultipartMessages) {
  RouterDealer s;
  const std::array<zmq::const_buffer, 2> frames{zmq::str_buffer("one"), zmq::str_buffer("two")};
  ASSERT_EQ(trySendMultipart(s.dealer, frames), SendOutcome::Sent);
  std::vector<zmq::message_t> parts;
  // The router may need a moment to see the inproc peer's message: poll with a deadline.
  zmq::pollitem_t item{s.router.handle(), 0, ZMQ_POLLIN, 0};
  ASSERT_EQ(zmq::poll(&item, 1, std::chrono::milliseconds(10000)), 1);
  ASSERT_EQ(tryRecvMultipart(s.router, parts), RecvOutcome::Received);
  ASSERT_EQ(parts.size(), 3U);
  EXPECT_EQ(text(parts[0]), "client-a");
  EXPECT_EQ(text(parts[1]), "one");
  EXPECT_EQ(text(parts[2]), "two");
  EXPECT_EQ(tryRecvMultipart(s.router, parts), RecvOutcome::Empty);
}

TEST(ZmqIoTest, DrainSocketHonoursTheBudgetAndCountsMessages) {
  RouterDealer s;
  for (int i = 0; i < 5; ++i) {
    const std::string body = std::to_string(i);
    const std::array<zmq::const_buffer, 1> frames{zmq::buffer(body)};
    ASSERT_EQ(trySendMultipart(s.dealer, frames), SendOutcome::Sent);
  }
  zmq::pollitem_t item{s.router.handle(), 0, ZMQ_POLLIN, 0};
  ASSERT_EQ(zmq::poll(&item, 1, std::chrono::milliseconds(10000)), 1);
  std::vector<zmq::message_t> parts;
  std::vector<std::string> seen;
  int errors = 0;
  const auto on_message = [&](std::vector<zmq::message_t>& p) { seen.push_back(text(p.back())); };
  const auto on_error = [&](std::string_view) { ++errors; };
  EXPECT_EQ(drainSocket(s.router, parts, 2, on_message, on_error), 2);
  EXPECT_EQ(seen, (std::vector<std::string>{"0", "1"}));
  EXPECT_EQ(drainSocket(s.router, parts, -1, on_message, on_error), 3);
  EXPECT_EQ(seen, (std::vector<std::string>{"0", "1", "2", "3", "4"}));
  EXPECT_EQ(drainSocket(s.router, parts, -1, on_message, on_error), 0);
  EXPECT_EQ(errors, 0);
}

TEST(ZmqIoTest, RoutedSendToAnUnknownPeerIsUnroutable) {
  RouterDealer s;
  EXPECT_EQ(trySendRouted(s.router, "nobody", false, zmq::message_t("x", 1)),
            SendOutcome::Unroutable);
}

TEST(ZmqIoTest, RoutedSendReachesThePeerWithOrWithoutDelimiter) {
  RouterDealer s;
  ASSERT_NO_FATAL_FAILURE(s.greet());
  std::vector<zmq::message_t> parts;

  ASSERT_EQ(trySendRouted(s.router, "client-a", false, zmq::message_t("plain", 5)),
            SendOutcome::Sent);
  ASSERT_EQ(trySendRouted(s.router, "client-a", true, zmq::message_t("req", 3)), SendOutcome::Sent);
  zmq::pollitem_t in{s.dealer.handle(), 0, ZMQ_POLLIN, 0};
  ASSERT_EQ(zmq::poll(&in, 1, std::chrono::milliseconds(10000)), 1);
  ASSERT_EQ(tryRecvMultipart(s.dealer, parts), RecvOutcome::Received);
  ASSERT_EQ(parts.size(), 1U);
  EXPECT_EQ(text(parts[0]), "plain");
  ASSERT_EQ(tryRecvMultipart(s.dealer, parts), RecvOutcome::Received);
  ASSERT_EQ(parts.size(), 2U);
  EXPECT_EQ(parts[0].size(), 0U);
  EXPECT_EQ(text(parts[1]), "req");
}

TEST(ZmqIoTest, RoutedSendToAFullPeerWouldBlockAndSendsNothing) {
  RouterDealer s(/*dealer_rcvhwm=*/1);
  ASSERT_NO_FATAL_FAILURE(s.greet());
  std::vector<zmq::message_t> parts;
  // The dealer never reads: the pipe fills after a bounded number of messages.
  int sent = 0;
  SendOutcome out = SendOutcome::Sent;
  while (sent < 100000) {
    out = trySendRouted(s.router, "client-a", false, zmq::message_t("x", 1));
    if (out != SendOutcome::Sent) break;
    ++sent;
  }
  EXPECT_EQ(out, SendOutcome::WouldBlock);
  EXPECT_GE(sent, 1);
  EXPECT_LT(sent, 100000);
  // Whole messages only: the dealer reads exactly `sent` one-frame messages.
  int read = 0;
  while (tryRecvMultipart(s.dealer, parts) == RecvOutcome::Received) {
    ASSERT_EQ(parts.size(), 1U);
    ++read;
  }
  EXPECT_EQ(read, sent);
}

TEST(ZmqIoTest, MultipartSendWithoutAPeerWouldBlockAndSendsNothing) {
  zmq::context_t ctx;
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);  // connected to nothing
  dealer.set(zmq::sockopt::linger, 0);
  const std::array<zmq::const_buffer, 2> request{zmq::const_buffer(), zmq::str_buffer("seq")};
  EXPECT_EQ(trySendMultipart(dealer, request), SendOutcome::WouldBlock);
}

TEST(ZmqIoTest, MultipartSendToAFullPeerWouldBlockAndNeverSendsAPart) {
  // The shape of `mocker index`'s replay request: ["", start_seq]. If the first frame is refused
  // the second must not go out alone (the ROUTER would read [id, seq]: a malformed request).
  zmq::context_t ctx;
  zmq::socket_t router(ctx, zmq::socket_type::router);
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  router.set(zmq::sockopt::rcvhwm, 1);
  dealer.set(zmq::sockopt::sndhwm, 1);
  router.bind("inproc://zmq-io-full");
  dealer.connect("inproc://zmq-io-full");
  int sent = 0;
  SendOutcome out = SendOutcome::Sent;
  while (sent < 100000) {  // the router never reads: the pipe fills after a few messages
    const std::string seq = "seq" + std::to_string(sent);
    const std::array<zmq::const_buffer, 2> request{zmq::const_buffer(), zmq::buffer(seq)};
    out = trySendMultipart(dealer, request);
    if (out != SendOutcome::Sent) break;
    ++sent;
  }
  EXPECT_EQ(out, SendOutcome::WouldBlock);
  EXPECT_GE(sent, 1);
  EXPECT_LT(sent, 100000);
  // Refused sends left nothing behind: the router reads exactly the `sent` whole requests.
  zmq::pollitem_t item{router.handle(), 0, ZMQ_POLLIN, 0};
  ASSERT_EQ(zmq::poll(&item, 1, std::chrono::milliseconds(10000)), 1);
  std::vector<zmq::message_t> parts;
  int read = 0;
  while (tryRecvMultipart(router, parts) == RecvOutcome::Received) {
    ASSERT_EQ(parts.size(), 3U) << "message " << read;
    EXPECT_EQ(parts[1].size(), 0U) << "message " << read;
    EXPECT_EQ(text(parts[2]), "seq" + std::to_string(read));
    ++read;
  }
  EXPECT_EQ(read, sent);
}

TEST(ZmqIoTest, SplitRoutedEnvelopeAcceptsDealerAndReqShapesOnly) {
  struct Row {
    const char* name;
    std::vector<std::string> frames;  // as a ROUTER receives them, routing id first
    bool delimiter;
    std::string payload;  // empty when refused
    std::string error;    // fragment; empty when accepted
    ErrorCode code = ErrorCode::Corruption;
  };
  const std::vector<Row> rows = {
      {"dealer", {"id", "body"}, false, "body", ""},
      {"req (empty delimiter)", {"id", "", "body"}, true, "body", ""},
      {"dealer sending an empty payload", {"id", ""}, false, "", ""},
      {"two payload frames", {"id", "a", "b"}, false, "", "(got 2 frames)"},
      {"three payload frames", {"id", "", "b", "c"}, false, "", "(got 3 frames)"},
      {"no payload frame", {"id"}, false, "", "(got 0 frames)"},
      {"payload over the limit",
       {"id", "0123456789"},
       false,
       "",
       "10 bytes exceeds the limit of 8",
       ErrorCode::InvalidArgument},
      {"payload at the limit", {"id", "", "01234567"}, true, "01234567", ""},
  };
  for (const Row& row : rows) {
    std::vector<zmq::message_t> parts;
    for (const std::string& f : row.frames) parts.emplace_back(f.data(), f.size());
    const RoutedEnvelope env = splitRoutedEnvelope(parts, /*max_payload_bytes=*/8);
    EXPECT_EQ(env.routing_id, "id") << row.name;
    EXPECT_EQ(env.delimiter, row.delimiter) << row.name;
    const std::string payload(reinterpret_cast<const char*>(env.payload.data()),
                              env.payload.size());
    EXPECT_EQ(payload, row.payload) << row.name;
    if (row.error.empty()) {
      EXPECT_FALSE(env.error.has_value()) << row.name << ": " << env.error->message;
    } else {
      ASSERT_TRUE(env.error.has_value()) << row.name;
      EXPECT_EQ(env.error->code, row.code) << row.name;
      EXPECT_NE(env.error->message.find(row.error), std::string::npos)
          << row.name << ": " << env.error->message;
    }
  }
}

TEST(ZmqIoTest, OutcomeNames) {
  EXPECT_EQ(sendOutcomeName(SendOutcome::Sent), "sent");
  EXPECT_EQ(sendOutcomeName(SendOutcome::WouldBlock), "would_block");
  EXPECT_EQ(sendOutcomeName(SendOutcome::Unroutable), "unroutable");
  EXPECT_EQ(sendOutcomeName(SendOutcome::Failed), "failed");
}

TEST(PollSetTest, SlotsNameWhatWasAddedAndOnlyReadableOnesReport) {
  RouterDealer s;
  zmq::context_t ctx;
  zmq::socket_t quiet(ctx, zmq::socket_type::pull);
  quiet.bind("inproc://poll-set-quiet");
  PollSet poll;
  const PollSet::Slot dealer = poll.add(s.dealer.handle());
  const PollSet::Range ranks{poll.next(), poll.next()};  // an empty range
  const PollSet::Slot router = poll.add(s.router.handle());
  const PollSet::Slot unwanted = poll.add(quiet.handle(), /*wanted=*/false);
  EXPECT_EQ(router, dealer + 1);
  EXPECT_EQ(unwanted, router + 1);
  const std::array<zmq::const_buffer, 1> hello{zmq::str_buffer("hello")};
  ASSERT_EQ(trySendMultipart(s.dealer, hello), SendOutcome::Sent);
  poll.poll(std::chrono::milliseconds(10000));
  EXPECT_TRUE(poll.readable(router));
  EXPECT_FALSE(poll.readable(dealer));
  EXPECT_FALSE(poll.readable(unwanted));
  EXPECT_FALSE(poll.readable(unwanted + 1));  // past the set: never readable
  EXPECT_FALSE(poll.anyReadable(ranks));
  EXPECT_TRUE(poll.anyReadable({dealer, unwanted + 1}));
  // Rebuilt for the next turn: nothing is readable until polled again.
  poll.clear();
  const PollSet::Slot again = poll.add(s.router.handle());
  EXPECT_EQ(again, 0u);
  EXPECT_FALSE(poll.readable(again));
}

// An OnSignal socket is asked only when its mailbox descriptor fires or it was readable last
// time: a message it holds, unread, is reported again by the next poll (its descriptor no longer
// fires for it), and once it is read until EAGAIN the next message wakes the wait.
TEST(PollSetTest, OnSignalSocketStaysReadableUntilReadAndWakesForTheNextMessage) {
  RouterDealer s;
  const std::array<zmq::const_buffer, 1> hello{zmq::str_buffer("hello")};
  std::vector<zmq::message_t> parts;
  PollSet poll;
  const auto turn = [&](std::chrono::milliseconds timeout) {
    poll.clear();
    const PollSet::Slot slot = poll.add(s.router.handle(), true, PollSet::Wake::OnSignal);
    poll.poll(timeout);
    return poll.readable(slot);
  };
  ASSERT_EQ(trySendMultipart(s.dealer, hello), SendOutcome::Sent);
  EXPECT_TRUE(turn(std::chrono::milliseconds(10000)));
  EXPECT_TRUE(turn(std::chrono::milliseconds(0))) << "still queued: reported again";
  EXPECT_TRUE(turn(std::chrono::milliseconds(0)));
  ASSERT_EQ(tryRecvMultipart(s.router, parts), RecvOutcome::Received);
  ASSERT_EQ(tryRecvMultipart(s.router, parts), RecvOutcome::Empty);
  EXPECT_FALSE(turn(std::chrono::milliseconds(0)));
  ASSERT_EQ(trySendMultipart(s.dealer, hello), SendOutcome::Sent);
  EXPECT_TRUE(turn(std::chrono::milliseconds(10000))) << "the next message woke the wait";
}

// An Always socket is asked before every wait: readable even when an operation on it (here a
// ZMQ_EVENTS query of our own) already took the mailbox's signal for the message it holds.
TEST(PollSetTest, AlwaysSocketIsReadableWithoutASignal) {
  RouterDealer s;
  const std::array<zmq::const_buffer, 1> hello{zmq::str_buffer("hello")};
  ASSERT_EQ(trySendMultipart(s.dealer, hello), SendOutcome::Sent);
  // Until the message is seen: each query processes the mailbox's commands.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!(s.router.get(zmq::sockopt::events) & ZMQ_POLLIN)) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "the message never arrived";
    zmq::pollitem_t item{s.router.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(100));
  }
  PollSet poll;
  const PollSet::Slot slot = poll.add(s.router.handle());
  const std::uint64_t before = poll.numEventQueries();
  poll.poll(std::chrono::milliseconds(10000));
  EXPECT_TRUE(poll.readable(slot));
  EXPECT_EQ(poll.numEventQueries(), before + 1) << "asked once, before the wait";
}

// Plain descriptors and sockets in one wait: an eventfd that is written wakes it.
TEST(PollSetTest, ADescriptorWakesTheWait) {
  RouterDealer s;
  const int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  PollSet poll;
  // Settle the sockets' start-up commands (the connection's attach) first.
  for (int i = 0; i < 3; ++i) {
    poll.clear();
    poll.add(s.router.handle(), true, PollSet::Wake::OnSignal);
    poll.poll(std::chrono::milliseconds(0));
  }
  const std::uint64_t one = 1;
  ASSERT_EQ(::write(fd, &one, sizeof one), static_cast<ssize_t>(sizeof one));
  poll.clear();
  const PollSet::Slot router = poll.add(s.router.handle(), true, PollSet::Wake::OnSignal);
  const PollSet::Slot event = poll.addFd(fd);
  poll.poll(std::chrono::milliseconds(10000));
  EXPECT_TRUE(poll.readable(event));
  EXPECT_FALSE(poll.readable(router));
  ::close(fd);
}

}  // namespace
}  // namespace mocker::net
