// Client over real sockets without a server: a plain ROUTER on an ephemeral loopback port plays
// the service, so each outcome of a send or receive can be produced on purpose.
#include "net/client.h"

#include <gtest/gtest.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <poll.h>

#include <algorithm>
#include <array>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "net/zmq_io.h"

namespace mocker::net {
namespace {

using namespace std::chrono_literals;

// A one-shot timerfd on CLOCK_MONOTONIC, like the live replay's wake-up timer.
struct OneShotTimer {
  int fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  OneShotTimer() = default;
  OneShotTimer(const OneShotTimer&) = delete;
  OneShotTimer& operator=(const OneShotTimer&) = delete;
  ~OneShotTimer() {
    if (fd >= 0) ::close(fd);
  }
  bool armIn(std::chrono::nanoseconds delay) const {
    itimerspec spec{};
    spec.it_value.tv_sec = static_cast<time_t>(delay / 1s);
    spec.it_value.tv_nsec = static_cast<long>((delay % 1s).count());
    return timerfd_settime(fd, 0, &spec, nullptr) == 0;
  }
};

struct FakeService {
  zmq::context_t ctx;
  zmq::socket_t submit{ctx, zmq::socket_type::router};
  zmq::socket_t cancel{ctx, zmq::socket_type::router};
  FakeService() {
    for (zmq::socket_t* s : {&submit, &cancel}) {
      s->set(zmq::sockopt::linger, 0);
      s->bind("tcp://127.0.0.1:*");
    }
  }
  std::unique_ptr<Client> connect(ClientOptions options = {}) {
    options.submit_endpoint = submit.get(zmq::sockopt::last_endpoint);
    options.cancel_endpoint = cancel.get(zmq::sockopt::last_endpoint);
    options.routing_id = "client-a";
    auto c = Client::connect(std::move(options));
    EXPECT_TRUE(c.has_value());
    return std::move(*c);
  }
  // Waits (with a deadline) for the client's first message, so the ROUTER can route to it.
  void awaitHello() {
    zmq::pollitem_t item{submit.handle(), 0, ZMQ_POLLIN, 0};
    ASSERT_EQ(zmq::poll(&item, 1, 10000ms), 1);
    std::vector<zmq::message_t> parts;
    ASSERT_EQ(tryRecvMultipart(submit, parts), RecvOutcome::Received);
  }
  // Both ROUTERs learn client `c`'s routing id (each reads a message from it), so either can
  // send to it.
  void introduce(Client& c) {
    ASSERT_TRUE(c.send(protocol::StatsRequest{}));
    awaitHello();
    ASSERT_TRUE(c.cancel("r0"));
    zmq::pollitem_t item{cancel.handle(), 0, ZMQ_POLLIN, 0};
    ASSERT_EQ(zmq::poll(&item, 1, 10000ms), 1);
    std::vector<zmq::message_t> parts;
    ASSERT_EQ(tryRecvMultipart(cancel, parts), RecvOutcome::Received);
  }
};

TEST(ClientTest, NonBlockingSendToAPeerThatNeverTakesSaysItWouldBlock) {
  // Nothing is bound at these inproc names: messages queue in the pending pipe up to the
  // high-water mark, then a non-blocking send must fail instead of blocking.
  auto c = Client::connect({.submit_endpoint = "inproc://client-test-nobody",
                            .cancel_endpoint = "inproc://client-test-nobody-cancel",
                            .sndhwm = 4,
                            .nonblocking_send = true});
  ASSERT_TRUE(c.has_value());
  const auto firstFailure = [](const auto& send) -> std::optional<std::string> {
    for (int i = 0; i < 100000; ++i) {
      const Status s = send();
      if (!s) return s.error().message;
    }
    return std::nullopt;
  };
  const auto submit_error = firstFailure([&] { return (*c)->send(protocol::StatsRequest{}); });
  ASSERT_TRUE(submit_error.has_value());
  EXPECT_EQ(*submit_error, "send: would block (high-water mark reached)");
  const auto cancel_error = firstFailure([&] { return (*c)->cancel("r1"); });
  ASSERT_TRUE(cancel_error.has_value());
  EXPECT_EQ(*cancel_error, "send cancel: would block (high-water mark reached)");
}

// refuse_without_connection (the live replay's submit sockets): a send with no completed
// connection fails at once instead of queueing for whoever comes back on the endpoint — before
// the connection, and after the service went away.
TEST(ClientTest, ImmediateSendWithoutAConnectionFailsAtOnce) {
  auto service = std::make_unique<FakeService>();
  auto c = service->connect(
      {.nonblocking_send = true, .refuse_without_connection = true, .watch_connection = true});
  const auto waitFor = [&c](ConnectionEvent wanted) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < deadline) {
      const std::array<Client*, 1> clients{c.get()};
      ASSERT_TRUE(Client::waitReadable(clients, 100ms));
      for (const ConnectionEvent e : c->takeConnectionEvents()) {
        if (e == wanted) return;
      }
    }
    FAIL() << "no connection event in 10 s";
  };
  waitFor(ConnectionEvent::Connected);
  // Connected: sends go out (the handshake's pipe may reach the socket just after the event).
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!c->send(protocol::StatsRequest{})) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "no send went out in 10 s";
  }
  service->awaitHello();
  service.reset();  // the service goes away
  waitFor(ConnectionEvent::Closed);
  // The monitor reported the close: the next send is refused (one in the instant before the
  // report would still queue).
  Status refused;
  const auto closed_deadline = std::chrono::steady_clock::now() + 10s;
  while ((refused = c->submit({.id = "r1", .prompt = {1}, .max_tokens = 1}))) {
    ASSERT_LT(std::chrono::steady_clock::now(), closed_deadline) << "sends still queued after 10 s";
  }
  EXPECT_EQ(refused.error().message,
            "send: would block (no connection to the service, or high-water mark reached)");
  // The cancel socket is not watched: a cancel still queues.
  EXPECT_TRUE(c->cancel("r1"));
}

// A send reads the monitor to decide whether to refuse (refuse_without_connection). The close it
// found there must still wake waitReadable: the monitor socket will not announce it again. (It
// did not: the live replay's next wait missed the close of a killed worker that a refused send
// had seen first, never declared it down, and the requests it held waited out their timeout.)
TEST(ClientTest, ACloseASendFoundFirstStillWakesWaitReadable) {
  auto service = std::make_unique<FakeService>();
  auto c = service->connect(
      {.nonblocking_send = true, .refuse_without_connection = true, .watch_connection = true});
  const std::array<Client*, 1> clients{c.get()};
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!c->send(protocol::StatsRequest{})) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "no send went out in 10 s";
    ASSERT_TRUE(Client::waitReadable(clients, 10ms));
  }
  service->awaitHello();
  (void)c->takeConnectionEvents();
  service.reset();
  // Only sends look at the monitor here, until one is refused: that one read the close.
  const auto closed_deadline = std::chrono::steady_clock::now() + 10s;
  while (c->send(protocol::StatsRequest{})) {
    ASSERT_LT(std::chrono::steady_clock::now(), closed_deadline) << "sends still queued after 10 s";
    ::usleep(1000);  // not a wait for the event: a pace for the sends that look for it
  }
  const auto start = std::chrono::steady_clock::now();
  auto ready = Client::waitReadable(clients, 5000ms);
  ASSERT_TRUE(ready.has_value());
  EXPECT_LT(std::chrono::steady_clock::now() - start, 1000ms) << "the wait missed the close";
  EXPECT_EQ(*ready, std::vector<std::size_t>{0});
  const std::vector<ConnectionEvent> events = c->takeConnectionEvents();
  EXPECT_NE(std::find(events.begin(), events.end(), ConnectionEvent::Closed), events.end());
}

// What a service sent before its connection closed stays readable after the close, also on a
// client that refuses sends without a connection. (With ZMQ_IMMEDIATE, which that client used
// before, libzmq drops every unread message with the connection: the last tokens of a dying
// worker were lost, and the live replay migrated a request whose every token had been sent.)
TEST(ClientTest, MessagesSentBeforeTheServiceClosedAreStillReceived) {
  auto service = std::make_unique<FakeService>();
  auto c = service->connect(
      {.nonblocking_send = true, .refuse_without_connection = true, .watch_connection = true});
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!c->send(protocol::StatsRequest{})) {
    ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "no send went out in 10 s";
    const std::array<Client*, 1> clients{c.get()};
    ASSERT_TRUE(Client::waitReadable(clients, 10ms));
    (void)c->takeConnectionEvents();
  }
  service->awaitHello();
  constexpr int kMessages = 20;
  for (int i = 0; i < kMessages; ++i) {
    const auto ack = protocol::encodeClientMessage(protocol::SubmitAck{"r" + std::to_string(i), 0});
    const std::array<zmq::const_buffer, 2> frames{zmq::str_buffer("client-a"),
                                                  zmq::buffer(ack.data(), ack.size())};
    ASSERT_EQ(trySendMultipart(service->submit, frames), SendOutcome::Sent);
  }
  // The service closes only once its messages are on the wire (linger), then goes away; the
  // client reads nothing until it has seen the close.
  service->submit.set(zmq::sockopt::linger, 10000);
  service.reset();
  bool closed = false;
  for (const auto close_deadline = std::chrono::steady_clock::now() + 10s; !closed;) {
    ASSERT_LT(std::chrono::steady_clock::now(), close_deadline) << "no close reported in 10 s";
    const std::array<Client*, 1> clients{c.get()};
    ASSERT_TRUE(Client::waitReadable(clients, 10ms));
    for (const ConnectionEvent e : c->takeConnectionEvents()) {
      closed = closed || e == ConnectionEvent::Closed;
    }
  }
  for (int i = 0; i < kMessages; ++i) {
    auto got = c->receive(10s);
    ASSERT_TRUE(got.has_value()) << got.error().message;
    ASSERT_TRUE(got->has_value()) << "message " << i << " of " << kMessages << " lost";
    EXPECT_EQ(std::get<protocol::SubmitAck>(**got),
              (protocol::SubmitAck{"r" + std::to_string(i), 0}));
  }
}

// Both sockets carry one routing id, so a cancel endpoint equal to the submit endpoint would put
// two connections with that id on one ROUTER, which refuses whichever comes second: at random the
// submit socket's messages were lost (`mocker stats` waited out its timeout). Refused at connect;
// a client without a cancel endpoint has no cancel socket, and its submits all arrive.
TEST(ClientTest, CancelEndpointIsAnotherAddressOrNone) {
  FakeService service;
  const std::string submit = service.submit.get(zmq::sockopt::last_endpoint);
  const auto same = Client::connect({.submit_endpoint = submit, .cancel_endpoint = submit});
  ASSERT_FALSE(same.has_value());
  EXPECT_NE(same.error().message.find("is the submit endpoint"), std::string::npos)
      << same.error().message;

  for (int attempt = 0; attempt < 20; ++attempt) {
    auto c = Client::connect({.submit_endpoint = submit, .cancel_endpoint = ""});
    ASSERT_TRUE(c.has_value());
    ASSERT_TRUE((*c)->send(protocol::StatsRequest{}));
    service.awaitHello();
    const Status cancel = (*c)->cancel("r1");
    ASSERT_FALSE(cancel);
    EXPECT_EQ(cancel.error().message,
              "cancel 'r1': this client was connected without a cancel endpoint");
  }
}

TEST(ClientTest, ReceivesOneFrameMessagesAndRefusesOthers) {
  FakeService svc;
  auto c = svc.connect();
  ASSERT_TRUE(c->send(protocol::StatsRequest{}));
  svc.awaitHello();
  const auto ack = protocol::encodeClientMessage(protocol::SubmitAck{"r1", 0});
  const std::array<zmq::const_buffer, 2> good{zmq::str_buffer("client-a"),
                                              zmq::buffer(ack.data(), ack.size())};
  ASSERT_EQ(trySendMultipart(svc.submit, good), SendOutcome::Sent);
  auto got = c->receive(10s);
  ASSERT_TRUE(got.has_value()) << got.error().message;
  ASSERT_TRUE(got->has_value());
  EXPECT_EQ(std::get<protocol::SubmitAck>(**got), (protocol::SubmitAck{"r1", 0}));

  const std::array<zmq::const_buffer, 3> two_frames{
      zmq::str_buffer("client-a"), zmq::str_buffer(""), zmq::buffer(ack.data(), ack.size())};
  ASSERT_EQ(trySendMultipart(svc.submit, two_frames), SendOutcome::Sent);
  auto bad = c->receive(10s);
  ASSERT_FALSE(bad.has_value());
  EXPECT_NE(bad.error().message.find("got 2 frames"), std::string::npos) << bad.error().message;

  // Nothing queued: nullopt after the timeout.
  auto none = c->receive(0ms);
  ASSERT_TRUE(none.has_value());
  EXPECT_FALSE(none->has_value());
}

// receive(0ms) looks only at what is queued (no poll call): polled with a deadline, it still
// picks up a message that arrives later; a positive timeout still waits for one.
TEST(ClientTest, ZeroTimeoutReceiveTakesWhatArrivedAndAPositiveOneWaits) {
  FakeService svc;
  auto c = svc.connect();
  ASSERT_TRUE(c->send(protocol::StatsRequest{}));
  svc.awaitHello();
  const auto ack = protocol::encodeClientMessage(protocol::SubmitAck{"r1", 0});
  const std::array<zmq::const_buffer, 2> frames{zmq::str_buffer("client-a"),
                                                zmq::buffer(ack.data(), ack.size())};
  ASSERT_EQ(trySendMultipart(svc.submit, frames), SendOutcome::Sent);
  std::optional<protocol::ClientMessage> got;
  for (const auto deadline = std::chrono::steady_clock::now() + 20s;
       !got && std::chrono::steady_clock::now() < deadline;) {
    auto r = c->receive(0ms);
    ASSERT_TRUE(r.has_value()) << r.error().message;
    got = std::move(*r);
  }
  ASSERT_TRUE(got.has_value());
  EXPECT_EQ(std::get<protocol::SubmitAck>(*got), (protocol::SubmitAck{"r1", 0}));
  const auto t0 = std::chrono::steady_clock::now();
  auto none = c->receive(20ms);
  ASSERT_TRUE(none.has_value());
  EXPECT_FALSE(none->has_value());
  EXPECT_GE(std::chrono::steady_clock::now(), t0 + 20ms);
}

// After a drain, poll(2) on the notification fds wakes for what arrives next (on either socket;
// drain() is called only when one polled readable, so a missed notification fails the test),
// and drain() takes every queued message in order — a bad one handed as an error, the rest
// still taken.
TEST(ClientTest, NotifyFdsWakeForWhatArrivesAfterADrain) {
  FakeService svc;
  auto c = svc.connect();
  svc.introduce(*c);
  if (::testing::Test::HasFatalFailure()) return;
  const auto fds = c->notifyFds();
  std::array<pollfd, 2> pfds{pollfd{.fd = fds[0], .events = POLLIN, .revents = 0},
                             pollfd{.fd = fds[1], .events = POLLIN, .revents = 0}};
  std::vector<std::string> got;  // "ack <id>", "cancel <id>" or "error"
  const auto sink = [&](Result<protocol::ClientMessage>&& m) {
    if (!m) {
      got.push_back("error");
    } else if (const auto* a = std::get_if<protocol::SubmitAck>(&*m)) {
      got.push_back("ack " + a->id);
    } else if (const auto* r = std::get_if<protocol::CancelReply>(&*m)) {
      got.push_back("cancel " + r->id);
    }
  };
  c->drain({false, false}, sink);  // sent on both since: drained to empty regardless of fds
  EXPECT_TRUE(got.empty());

  const auto send = [](zmq::socket_t& router, const protocol::ClientMessage& m) {
    const auto bytes = protocol::encodeClientMessage(m);
    const std::array<zmq::const_buffer, 2> frames{zmq::str_buffer("client-a"),
                                                  zmq::buffer(bytes.data(), bytes.size())};
    ASSERT_EQ(trySendMultipart(router, frames), SendOutcome::Sent);
  };
  const std::array<zmq::const_buffer, 2> junk{zmq::str_buffer("client-a"), zmq::str_buffer("?")};
  send(svc.submit, protocol::SubmitAck{"r1", 0});
  ASSERT_EQ(trySendMultipart(svc.submit, junk), SendOutcome::Sent);
  send(svc.submit, protocol::SubmitAck{"r2", 0});
  send(svc.cancel, protocol::CancelReply{.id = "r0"});
  const std::vector<std::string> want{"ack r1", "error", "ack r2", "cancel r0"};
  for (const auto deadline = std::chrono::steady_clock::now() + 20s;
       got.size() < want.size() && std::chrono::steady_clock::now() < deadline;) {
    if (::poll(pfds.data(), pfds.size(), 1000) <= 0) continue;
    c->drain({pfds[0].revents != 0, pfds[1].revents != 0}, sink);
  }
  // Per socket in order; the two sockets' messages in either order (they race).
  std::vector<std::string> submit_side;
  for (const auto& g : got) {
    if (g != "cancel r0") submit_side.push_back(g);
  }
  EXPECT_EQ(submit_side, (std::vector<std::string>{"ack r1", "error", "ack r2"}));
  EXPECT_EQ(std::count(got.begin(), got.end(), "cancel r0"), 1);
}

// The live replay's loop: waitReadable, then receiveReady until nullopt. Every message sent on
// either socket, at any moment, is reported by some wait and read (a wait that misses one runs to
// its 10 s timeout and fails the test); a client the wait reported but the caller left unread is
// reported again by the next wait (its descriptor's signal was taken by the first one's ask).
TEST(ClientTest, WaitReadableAndReceiveReadyMissNothing) {
  FakeService svc;
  auto c = svc.connect();
  svc.introduce(*c);
  if (::testing::Test::HasFatalFailure()) return;
  Client* const clients[] = {c.get()};
  const auto sendAck = [&](zmq::socket_t& router, int i) {
    const auto ack = protocol::encodeClientMessage(protocol::SubmitAck{"r" + std::to_string(i), 0});
    const std::array<zmq::const_buffer, 2> frames{zmq::str_buffer("client-a"),
                                                  zmq::buffer(ack.data(), ack.size())};
    ASSERT_EQ(trySendMultipart(router, frames), SendOutcome::Sent);
  };
  const auto readAll = [&]() {
    std::vector<std::string> ids;
    while (true) {
      auto msg = c->receiveReady();
      EXPECT_TRUE(msg.has_value());
      if (!msg || !*msg) return ids;
      ids.push_back(std::get<protocol::SubmitAck>(**msg).id);
    }
  };
  // Drain what is there (the first wait asks the sockets that were sent on).
  ASSERT_TRUE(Client::waitReadable(clients, 0ms));
  (void)readAll();
  for (int round = 0; round < 20; ++round) {
    // Alternate sockets and batch sizes; the wait must see each, receiveReady read all.
    zmq::socket_t& router = round % 2 == 0 ? svc.submit : svc.cancel;
    const int n = 1 + round % 3;
    for (int i = 0; i < n; ++i) sendAck(router, round * 10 + i);
    std::vector<std::string> got;
    for (const auto deadline = std::chrono::steady_clock::now() + 10s;
         static_cast<int>(got.size()) < n;) {
      ASSERT_LT(std::chrono::steady_clock::now(), deadline) << "round " << round << ": missed";
      const auto ready = Client::waitReadable(clients, 10000ms);
      ASSERT_TRUE(ready.has_value());
      if (ready->empty()) continue;
      if (round % 4 == 3 && got.empty()) {
        // Reported but left unread: the next wait must report it again, at once.
        const auto again = Client::waitReadable(clients, 10000ms);
        ASSERT_TRUE(again.has_value());
        ASSERT_EQ(*again, std::vector<std::size_t>{0}) << "round " << round;
      }
      for (std::string& id : readAll()) got.push_back(std::move(id));
    }
    EXPECT_EQ(static_cast<int>(got.size()), n) << "round " << round;
    EXPECT_EQ(got.front(), "r" + std::to_string(round * 10)) << "round " << round;
  }
  // Nothing left: a wait with nothing sent runs to its timeout and reports no client.
  const auto t0 = std::chrono::steady_clock::now();
  const auto none = Client::waitReadable(clients, 20ms);
  ASSERT_TRUE(none.has_value());
  EXPECT_TRUE(none->empty());
  EXPECT_GE(std::chrono::steady_clock::now(), t0 + 20ms);
}

TEST(ClientTest, WaitReadableEndsWhenTheWakeFdBecomesReadable) {
  // The live replay's precise wake-up: a timerfd in the wait ends it long before the (whole
  // millisecond) timeout, with no message from any server.
  FakeService svc;
  auto c = svc.connect();
  Client* const clients[] = {c.get()};
  OneShotTimer timer;
  ASSERT_GE(timer.fd, 0);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(timer.armIn(2ms));
  const auto ready = Client::waitReadable(clients, 60s, timer.fd);
  ASSERT_TRUE(ready.has_value()) << ready.error().toString();
  EXPECT_TRUE(ready->empty());  // no client had a message
  EXPECT_GE(std::chrono::steady_clock::now(), start + 2ms);
  EXPECT_LT(std::chrono::steady_clock::now(), start + 30s);  // the fd, not the timeout, ended it
  // Without the fd, the same wait runs to its timeout.
  const auto t0 = std::chrono::steady_clock::now();
  const auto none = Client::waitReadable(clients, 20ms);
  ASSERT_TRUE(none.has_value());
  EXPECT_TRUE(none->empty());
  EXPECT_GE(std::chrono::steady_clock::now(), t0 + 20ms);
}

}  // namespace
}  // namespace mocker::net
