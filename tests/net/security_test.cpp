// CURVE keys and the ZAP handler over real sockets: key files, client settings, and a CURVE
// ROUTER on an ephemeral loopback port whose handler accepts one key and refuses another.
#include "net/security.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <array>
#include <chrono>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>

#include "net/connection_monitor.h"
#include "net/zap_handler.h"
#include "net/zmq_io.h"
#include "tests/testing/temp_dir.h"

namespace mocker::net {
namespace {

using namespace std::chrono_literals;
using testing::TempDir;

CurveClientKeys clientKeys(const std::string& server_public, const std::string& secret) {
  return {.server_public_key = server_public,
          .public_key = curvePublicKey(secret),
          .secret_key = secret};
}

TEST(CurveKeysTest, KeyFilesFromWriteKeyPair) {
  TempDir dir;
  const std::string prefix = dir.file("server");
  auto pub = writeKeyPair(prefix, /*force=*/false);
  ASSERT_TRUE(pub) << pub.error().message;
  struct stat st {};
  ASSERT_EQ(::stat((prefix + ".key").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  ASSERT_EQ(::stat((prefix + ".pub").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0644u);
  auto secret = readKeyFile(prefix + ".key", "secret");
  ASSERT_TRUE(secret);
  EXPECT_EQ(curvePublicKey(*secret), *pub);
  EXPECT_EQ(readKeyFile(prefix + ".pub", "public").value(), *pub);

  auto again = writeKeyPair(prefix, /*force=*/false);
  ASSERT_FALSE(again);
  EXPECT_NE(again.error().message.find("already exists (use --force"), std::string::npos);
  EXPECT_EQ(readKeyFile(prefix + ".pub", "public").value(), *pub);  // untouched
  auto forced = writeKeyPair(prefix, /*force=*/true);
  ASSERT_TRUE(forced);
  EXPECT_NE(*forced, *pub);

  std::ofstream(dir.file("bad.pub")) << "not a key\n";
  auto bad = readKeyFile(dir.file("bad.pub"), "security.client_public_key_files");
  ASSERT_FALSE(bad);
  EXPECT_NE(bad.error().message.find("bad.pub': the first line is not a Z85 key"),
            std::string::npos)
      << bad.error().message;
  EXPECT_FALSE(readKeyFile(dir.file("missing.pub"), "x"));
}

TEST(CurveKeysTest, ClientSettingsAreAllOrNothingAndMustMatch) {
  TempDir dir("mocker-net-security");
  ASSERT_TRUE(writeKeyPair(dir.file("server"), false));
  ASSERT_TRUE(writeKeyPair(dir.file("alice"), false));
  ASSERT_TRUE(writeKeyPair(dir.file("bob"), false));
  auto alice = loadCurveClientKeys(dir.file("server.pub"), dir.file("alice.key"));
  ASSERT_TRUE(alice) << alice.error().message;
  EXPECT_TRUE(alice->enabled());
  EXPECT_EQ(alice->public_key, readKeyFile(dir.file("alice.pub"), "public").value());
  EXPECT_TRUE(checkCurveClientKeys(*alice));
  EXPECT_TRUE(checkCurveClientKeys({}));  // no CURVE at all
  EXPECT_FALSE(CurveClientKeys{}.enabled());

  CurveClientKeys mixed = *alice;
  mixed.public_key = readKeyFile(dir.file("bob.pub"), "public").value();
  auto wrong = checkCurveClientKeys(mixed);
  ASSERT_FALSE(wrong);
  EXPECT_NE(wrong.error().message.find("does not belong to its secret key"), std::string::npos);
  CurveClientKeys partial;
  partial.server_public_key = alice->server_public_key;
  EXPECT_FALSE(checkCurveClientKeys(partial));

  auto missing = loadCurveClientKeys(dir.file("nobody.pub"), dir.file("alice.key"));
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().message.find("--curve-server-key-file"), std::string::npos);
}

// What the handler's thread reported (LogSink), read by the test's thread.
struct RecordedLog {
  std::mutex mutex;
  std::vector<std::pair<LogLevel, std::string>> lines;
  LogSink sink() {
    return [this](LogLevel level, std::string_view message) {
      std::lock_guard lock(mutex);
      lines.emplace_back(level, std::string(message));
    };
  }
  std::vector<std::pair<LogLevel, std::string>> snapshot() {
    std::lock_guard lock(mutex);
    return lines;
  }
};

TEST(ZapHandlerTest, AcceptsAllowListedKeysByNameAndReportsRefusedOnes) {
  std::array<char, 41> server_pub{}, server_sec{}, alice_pub{}, alice_sec{}, mallory_pub{},
      mallory_sec{};
  ASSERT_EQ(zmq_curve_keypair(server_pub.data(), server_sec.data()), 0);
  ASSERT_EQ(zmq_curve_keypair(alice_pub.data(), alice_sec.data()), 0);
  ASSERT_EQ(zmq_curve_keypair(mallory_pub.data(), mallory_sec.data()), 0);
  zmq::context_t ctx;
  RecordedLog log;
  auto zap = ZapHandler::start(ctx, kZapDomain, {alice_pub.data()}, log.sink());
  ASSERT_TRUE(zap) << zap.error().message;

  zmq::socket_t router(ctx, zmq::socket_type::router);
  router.set(zmq::sockopt::linger, 0);
  makeCurveServer(
      router, CurveServerKeys{.public_key = server_pub.data(), .secret_key = server_sec.data()});
  router.bind("tcp://127.0.0.1:*");
  const std::string endpoint = router.get(zmq::sockopt::last_endpoint);
  const auto dealer = [&](const char* secret) {
    zmq::socket_t s(ctx, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 0);
    makeCurveClient(s, clientKeys(server_pub.data(), secret));
    s.connect(endpoint);
    return s;
  };
  zmq::socket_t mallory = dealer(mallory_sec.data());
  zmq::socket_t alice = dealer(alice_sec.data());
  const std::array<zmq::const_buffer, 1> hello{zmq::str_buffer("hello")};
  ASSERT_EQ(trySendMultipart(alice, hello), SendOutcome::Sent);
  (void)trySendMultipart(mallory, hello);  // never delivered: its handshake is refused

  // Alice's message arrives, named by her key (the User-Id the handler set).
  zmq::pollitem_t item{router.handle(), 0, ZMQ_POLLIN, 0};
  ASSERT_EQ(zmq::poll(&item, 1, 10s), 1);
  std::vector<zmq::message_t> parts;
  ASSERT_EQ(tryRecvMultipart(router, parts), RecvOutcome::Received);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[1].to_string(), "hello");
  EXPECT_EQ(peerUserId(parts[1]), std::optional<std::string>(alice_pub.data()));

  // Mallory's handshake is refused and reported through the sink, naming her key and the domain.
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  std::vector<std::pair<LogLevel, std::string>> lines;
  while (((*zap)->numRefused() == 0 || (lines = log.snapshot()).empty()) &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_GE((*zap)->numRefused(), 1u);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0].first, LogLevel::Warn);
  EXPECT_NE(lines[0].second.find(std::string("refused: client key ") + mallory_pub.data() +
                                 " is not in the allow-list of mocker"),
            std::string::npos)
      << lines[0].second;
  EXPECT_EQ(tryRecvMultipart(router, parts), RecvOutcome::Empty);  // nothing of Mallory's
}

}  // namespace
}  // namespace mocker::net
