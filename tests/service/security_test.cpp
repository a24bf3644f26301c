// CURVE (service/README.md, "Security") with real keys over TCP loopback: only allow-listed keys
// get through, the client's public key is its identity (cancel, stats, reconnect), key files
// and `writeKeyPair`; and the warning for a service reachable from other hosts without CURVE.
#include <gtest/gtest.h>
#include <spdlog/sinks/ostream_sink.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <zmq.hpp>

#include "live_service.h"
#include "net/security.h"
#include "service/security_keys.h"
#include "tests/testing/temp_dir.h"

namespace mocker::service {
namespace {

using namespace std::chrono_literals;
using mocker::testing::TempDir;
using testing::LiveService;
using testing::prompt;
using testing::TestConfig;

struct KeyPair {
  std::string public_key;
  std::string secret_key;
};

KeyPair newKeyPair() {
  std::array<char, 41> pub{};
  std::array<char, 41> sec{};
  EXPECT_EQ(zmq_curve_keypair(pub.data(), sec.data()), 0);
  return {pub.data(), sec.data()};
}

/// A CURVE service allowing `allowed` (plus the other defaults of TestConfig).
ServiceConfig curveConfig(const KeyPair& server, const std::vector<KeyPair>& allowed) {
  ServiceConfig c = TestConfig().paced(1, 1).build();
  c.security.curve = true;
  c.security.server_secret_key = server.secret_key;
  for (const KeyPair& k : allowed) c.security.client_public_keys.push_back(k.public_key);
  return c;
}

net::ClientOptions as(const KeyPair& server, const KeyPair& client, std::string routing_id = {}) {
  return {.routing_id = std::move(routing_id),
          .curve_server_key = server.public_key,
          .curve_public_key = client.public_key,
          .curve_secret_key = client.secret_key};
}

/// Options of a client the service refuses: its handshake never completes, so its DEALER may
/// have no peer to queue a message for, and a blocking send would wait forever.
net::ClientOptions refused(net::ClientOptions options) {
  options.nonblocking_send = true;
  return options;
}

protocol::SubmitRequest longRequest(const std::string& id) {
  return {.id = id, .prompt = prompt(8), .max_tokens = 10000};
}

TEST(SecurityTest, AllowListedKeyStreamsAndUnlistedKeyGetsNothing) {
  const KeyPair server = newKeyPair();
  const KeyPair alice = newKeyPair();
  const KeyPair mallory = newKeyPair();
  LiveService svc(curveConfig(server, {alice}));
  auto a = svc.client(as(server, alice));
  ASSERT_TRUE(a->submit({.id = "r", .prompt = prompt(8), .max_tokens = 5}));
  auto s = testing::collect(*a, {"r"});
  EXPECT_EQ(s["r"].tokens.size(), 5u);

  auto m = svc.client(refused(as(server, mallory)));
  (void)m->submit({.id = "x", .prompt = prompt(8), .max_tokens = 5});  // queued or refused
  // Its handshakes (submit and cancel socket) are refused by the ZAP handler...
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (svc.server().numRefusedHandshakes() < 2 && std::chrono::steady_clock::now() < deadline) {
    auto got = m->receive(20ms);
    ASSERT_TRUE(got);
    EXPECT_FALSE(got->has_value()) << "an unlisted key received a message";
  }
  EXPECT_GE(svc.server().numRefusedHandshakes(), 2u);
  // ...so nothing of it reached the service.
  EXPECT_EQ(testing::stats(*a).routes, 0u);
  auto got = m->receive(100ms);
  ASSERT_TRUE(got);
  EXPECT_FALSE(got->has_value());
}

TEST(SecurityTest, ClientWithoutCurveCannotTalkToACurveService) {
  const KeyPair server = newKeyPair();
  const KeyPair alice = newKeyPair();
  LiveService svc(curveConfig(server, {alice}));
  auto plain = svc.client(refused({}));
  (void)plain->send(protocol::StatsRequest{});  // queued or refused: nothing may come back
  auto got = plain->receive(300ms);
  ASSERT_TRUE(got);
  EXPECT_FALSE(got->has_value());
}

TEST(SecurityTest, IdentityIsThePublicKeyForCancelAndStats) {
  const KeyPair server = newKeyPair();
  const KeyPair alice = newKeyPair();
  const KeyPair bob = newKeyPair();
  LiveService svc(curveConfig(server, {alice, bob}));
  auto a1 = svc.client(as(server, alice, "alice-1"));
  auto a2 = svc.client(as(server, alice, "alice-2"));
  auto b = svc.client(as(server, bob, "bob"));
  std::map<std::string, testing::Stream> s1;
  std::map<std::string, testing::Stream> s2;
  std::map<std::string, testing::Stream> sb;
  ASSERT_TRUE(a1->submit(longRequest("r")));
  ASSERT_TRUE(a2->submit(longRequest("r2")));
  ASSERT_TRUE(b->submit(longRequest("rb")));
  ASSERT_TRUE(testing::awaitAck(*a1, "r", s1));
  ASSERT_TRUE(testing::awaitAck(*a2, "r2", s2));
  ASSERT_TRUE(testing::awaitAck(*b, "rb", sb));

  // Stats: a key sees every routing id of its own, nothing of the other key.
  EXPECT_EQ(testing::stats(*a2).clients,
            (std::vector<protocol::ClientRoutes>{{"alice-1", 1}, {"alice-2", 1}}));
  EXPECT_EQ(testing::stats(*b).clients, (std::vector<protocol::ClientRoutes>{{"bob", 1}}));

  // Bob cannot cancel Alice's request, even naming her routing id.
  ASSERT_TRUE(b->cancel("r", std::string("alice-1")));
  const auto nf = testing::awaitMessage<protocol::CancelReply>(*b);
  ASSERT_TRUE(nf);
  EXPECT_EQ(nf->result, protocol::CancelResult::NotFound);
  // Alice can, from her other routing id (the same key).
  ASSERT_TRUE(a2->cancel("r", std::string("alice-1")));
  const auto ok = testing::awaitMessage<protocol::CancelReply>(*a2);
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->result, protocol::CancelResult::Applied);
  auto done = testing::collect(*a1, {"r"}, nullptr, 10s, s1);
  EXPECT_EQ(done["r"].finish, protocol::FinishReason::Cancelled);
}

TEST(SecurityTest, PerClientLimitCountsEveryRoutingIdOfAKey) {
  const KeyPair server = newKeyPair();
  const KeyPair alice = newKeyPair();
  const KeyPair bob = newKeyPair();
  ServiceConfig config = curveConfig(server, {alice, bob});
  config.limits.max_requests_per_client = 2;
  LiveService svc(config);
  auto a1 = svc.client(as(server, alice, "alice-1"));
  auto a2 = svc.client(as(server, alice, "alice-2"));
  auto a3 = svc.client(as(server, alice, "alice-3"));
  auto b = svc.client(as(server, bob, "bob"));
  std::map<std::string, testing::Stream> s1;
  std::map<std::string, testing::Stream> s2;
  ASSERT_TRUE(a1->submit(longRequest("r1")));
  ASSERT_TRUE(testing::awaitAck(*a1, "r1", s1));
  ASSERT_TRUE(a2->submit(longRequest("r2")));
  ASSERT_TRUE(testing::awaitAck(*a2, "r2", s2));
  // A third routing id of the same key is the same client: its submit breaks the limit.
  ASSERT_TRUE(a3->submit(longRequest("r3")));
  const auto refused = testing::awaitMessage<protocol::ErrorReply>(*a3);
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->code, ErrorCode::ResourceExhausted);
  EXPECT_EQ(refused->id, "r3");
  EXPECT_NE(refused->message.find("limits.max_requests_per_client: this client (its CURVE key) "
                                  "already has 2 requests in flight"),
            std::string::npos)
      << refused->message;
  // Another key is another client.
  std::map<std::string, testing::Stream> sb;
  ASSERT_TRUE(b->submit(longRequest("rb")));
  ASSERT_TRUE(testing::awaitAck(*b, "rb", sb));
  // Room again once one of the key's requests has ended, on any of its routing ids.
  ASSERT_TRUE(a1->cancel("r1"));
  auto done = testing::collect(*a1, {"r1"}, nullptr, 10s, s1);
  EXPECT_EQ(done["r1"].finish, protocol::FinishReason::Cancelled);
  std::map<std::string, testing::Stream> s3;
  ASSERT_TRUE(a3->submit(longRequest("r3")));
  ASSERT_TRUE(testing::awaitAck(*a3, "r3", s3));
}

TEST(SecurityTest, ReconnectWithTheSameRoutingIdButAnotherKeyGetsNothing) {
  const KeyPair server = newKeyPair();
  const KeyPair alice = newKeyPair();
  const KeyPair bob = newKeyPair();
  LiveService svc(curveConfig(server, {alice, bob}));
  {
    auto a = svc.client(as(server, alice, "shared"));
    std::map<std::string, testing::Stream> seen;
    ASSERT_TRUE(a->submit(longRequest("secret")));
    ASSERT_TRUE(testing::awaitAck(*a, "secret", seen));
  }  // Alice's connections close mid-stream
  auto thief = svc.client(as(server, bob, "shared"));
  auto observer = svc.client(as(server, bob, "observer"));
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
      ADD_FAILURE() << "the other key received " << protocol::messageType(**m);
    }
  }
  // The first client's request ended with its connection.
  EXPECT_TRUE(testing::eventually(*observer, [](const protocol::StatsReply& r) {
    return r.routes == 0 && r.ranks.at(0).running == 0;
  }));
}

// curve_publishers: the KV-event PUB reaches an allow-listed CURVE SUB only.
TEST(SecurityTest, CurvePublishersReachOnlyAllowListedSubscribers) {
  const KeyPair server = newKeyPair();
  const KeyPair alice = newKeyPair();
  const KeyPair mallory = newKeyPair();
  ServiceConfig c = curveConfig(server, {alice});
  c.security.curve_publishers = true;
  c.kv_events.enabled = true;
  LiveService svc(c);
  zmq::context_t ctx(1);
  const auto subscriber = [&](const KeyPair& who) {
    zmq::socket_t sub(ctx, zmq::socket_type::sub);
    sub.set(zmq::sockopt::linger, 0);
    sub.set(zmq::sockopt::curve_serverkey, server.public_key);
    sub.set(zmq::sockopt::curve_publickey, who.public_key);
    sub.set(zmq::sockopt::curve_secretkey, who.secret_key);
    sub.set(zmq::sockopt::subscribe, "");
    sub.connect(svc.endpoints().kv_events.at(0));
    return sub;
  };
  const auto readable = [](zmq::socket_t& sub) {
    zmq::pollitem_t item{sub.handle(), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, 0ms);
    return (item.revents & ZMQ_POLLIN) != 0;
  };
  zmq::socket_t refused = subscriber(mallory);
  zmq::socket_t allowed = subscriber(alice);
  auto client = svc.client(as(server, alice));
  // Requests with fresh prompts publish KV events; repeat until the allowed SUB has joined.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  std::uint32_t i = 0;
  while (!readable(allowed) && std::chrono::steady_clock::now() < deadline) {
    std::string id("k");  // append: g++ 12 -O3 warns falsely (-Wrestrict) on "k" + string
    id.append(std::to_string(i));
    ASSERT_TRUE(client->submit({.id = id, .prompt = prompt(8, 1000 * ++i), .max_tokens = 1}));
    testing::collect(*client, {id});
  }
  EXPECT_TRUE(readable(allowed));
  EXPECT_GT(i, 0u);
  // Once the unlisted SUB's handshake was refused, another batch still does not reach it.
  const auto refused_by = std::chrono::steady_clock::now() + 10s;
  while (svc.server().numRefusedHandshakes() == 0 &&
         std::chrono::steady_clock::now() < refused_by) {
    std::this_thread::yield();
  }
  EXPECT_GE(svc.server().numRefusedHandshakes(), 1u);
  ASSERT_TRUE(client->submit({.id = "last", .prompt = prompt(8, 999999), .max_tokens = 1}));
  testing::collect(*client, {"last"});
  EXPECT_FALSE(readable(refused));
}

TEST(SecurityTest, ServiceLoadsKeyFiles) {
  TempDir dir;
  ASSERT_TRUE(net::writeKeyPair(dir.file("server"), false));
  auto alice_pub = net::writeKeyPair(dir.file("alice"), false);
  ASSERT_TRUE(alice_pub);
  ServiceConfig c = TestConfig().build();
  c.security.curve = true;
  c.security.server_secret_key_file = dir.file("server.key");
  c.security.client_public_key_files = {dir.file("alice.pub")};
  LiveService svc(c);
  const KeyPair server{net::readKeyFile(dir.file("server.pub"), "p").value(), ""};
  const KeyPair alice{*alice_pub, net::readKeyFile(dir.file("alice.key"), "s").value()};
  auto a = svc.client(as(server, alice));
  ASSERT_TRUE(a->submit({.id = "r", .prompt = prompt(8), .max_tokens = 3}));
  EXPECT_EQ(testing::collect(*a, {"r"})["r"].tokens.size(), 3u);

  c.security.client_public_key_files = {dir.file("nobody.pub")};
  auto broken = Server::create(c);
  ASSERT_FALSE(broken);
  EXPECT_NE(broken.error().message.find("nobody.pub"), std::string::npos);
}

/// The text the "serve" logger writes while `f` runs.
template <typename F>
std::string serveLog(F&& f) {
  std::ostringstream text;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(text);
  auto previous = spdlog::get("serve");
  spdlog::drop("serve");
  auto logger = std::make_shared<spdlog::logger>("serve", sink);
  logger->set_level(spdlog::level::warn);
  spdlog::register_logger(logger);
  f();
  spdlog::drop("serve");
  if (previous) spdlog::register_logger(previous);
  return text.str();
}

TEST(SecurityTest, NonLoopbackBindWithoutCurveWarns) {
  ServiceConfig c = TestConfig().build();
  c.endpoints.submit.endpoint = "tcp://0.0.0.0:*";
  const std::string log = serveLog([&] { ASSERT_TRUE(Server::create(c)); });
  EXPECT_NE(log.find("submit is bound to tcp://0.0.0.0:"), std::string::npos) << log;
  EXPECT_NE(log.find("reachable from other hosts, without CURVE"), std::string::npos) << log;
  EXPECT_EQ(log.find("cancel is bound"), std::string::npos) << log;  // cancel is on loopback

  const KeyPair server = newKeyPair();
  ServiceConfig curve = curveConfig(server, {newKeyPair()});
  curve.endpoints.submit.endpoint = "tcp://0.0.0.0:*";
  EXPECT_EQ(serveLog([&] { ASSERT_TRUE(Server::create(curve)); }), "");
  EXPECT_EQ(serveLog([&] { ASSERT_TRUE(Server::create(TestConfig().build())); }), "");
}

}  // namespace
}  // namespace mocker::service
