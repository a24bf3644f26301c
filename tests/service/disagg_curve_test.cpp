// Disaggregated prefill/decode with CURVE and an advertised handoff endpoint (service/README.md
// "Disaggregated prefill/decode (live)", "Security"): a CURVE prefill worker's handoff ROUTER
// accepts only the worker keys of security.worker_public_key_files; a decode worker with that key
// (security.worker_secret_key_file + handoff_server_key_file) fetches, one with a wrong key, a
// client key or none cannot (its stream ends with the fetch-deadline `handoff:` error) and the
// prefill worker keeps serving. Every hop is a real ZeroMQ socket on loopback; keys come from
// writeKeyPair (what `mocker keygen` writes) in a mkdtemp directory.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <filesystem>
#include <zmq.hpp>

#include "net/security.h"
#include "tests/service/disagg_test_util.h"
#include "tests/service/live_service.h"

namespace mocker::service {
namespace {

using namespace std::chrono_literals;
using protocol::FinishReason;
using testing::collect;
using testing::kSlowdown;
using testing::LiveService;
using testing::prompt;
using testing::Stream;
using testing::TestConfig;

class KeyDir {
 public:
  KeyDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "mocker-curve-XXXXXX").string();
    const char* made = mkdtemp(tmpl.data());
    EXPECT_NE(made, nullptr);
    path_ = tmpl;
  }
  ~KeyDir() { std::filesystem::remove_all(path_); }
  KeyDir(const KeyDir&) = delete;
  KeyDir& operator=(const KeyDir&) = delete;
  /// Writes NAME.key / NAME.pub; returns the prefix.
  std::string pair(const std::string& name) const {
    const std::string prefix = (path_ / name).string();
    EXPECT_TRUE(net::writeKeyPair(prefix, false).has_value());
    return prefix;
  }

 private:
  std::filesystem::path path_;
};

ServiceConfig worker(engine::WorkerType type) {
  return testing::disaggWorker(type, /*prefill_ms=*/5, /*decode_ms=*/1,
                               /*kv_bytes_per_token=*/1000);
}

protocol::SubmitRequest request(const std::string& id) { return testing::disaggRequest(id, 3); }

std::optional<protocol::Handoff> prefill(net::Client& client, const std::string& id) {
  return testing::prefillHop(client, id, 3);
}

/// Submits `ticket` to decode worker `d` and collects its stream.
Stream decode(LiveService& d, const std::string& id, const protocol::HandoffTicket& ticket) {
  auto dc = d.client();
  protocol::SubmitRequest r = request(id);
  r.handoff = ticket;
  EXPECT_TRUE(dc->submit(r).has_value());
  return collect(*dc, {id}, nullptr, 10s * kSlowdown)[id];
}

TEST(DisaggCurveTest, OnlyAllowListedWorkerKeysFetchFromACurvePrefillWorker) {
  KeyDir keys;
  const std::string server = keys.pair("prefill");
  const std::string client = keys.pair("client");
  const std::string decoder = keys.pair("decode");
  const std::string rogue = keys.pair("rogue");

  ServiceConfig pc = worker(engine::WorkerType::Prefill);
  pc.security.curve = true;
  pc.security.server_secret_key_file = server + ".key";
  pc.security.client_public_key_files = {client + ".pub"};
  pc.security.worker_public_key_files = {decoder + ".pub"};
  LiveService p(pc);
  auto c = p.client({.curve_server_key = net::readKeyFile(server + ".pub", "server").value(),
                     .curve_public_key = net::readKeyFile(client + ".pub", "client").value(),
                     .curve_secret_key = net::readKeyFile(client + ".key", "client").value()});

  ServiceConfig dc = worker(engine::WorkerType::Decode);
  dc.security.worker_secret_key_file = decoder + ".key";
  dc.security.handoff_server_key_file = server + ".pub";
  LiveService d(dc);

  // The allow-listed worker key: the two-hop request completes.
  const auto h1 = prefill(*c, "r1");
  ASSERT_TRUE(h1.has_value());
  const Stream ok = decode(d, "d1", h1->ticket);
  EXPECT_EQ(ok.finish, FinishReason::Length) << ok.reason;
  EXPECT_EQ(ok.tokens.size(), 3u);

  // Refused: a key not on the worker list, a client key (allowed on submit, not on the handoff
  // socket), and no CURVE at all. Each stream ends at the fetch deadline.
  const auto h2 = prefill(*c, "r2");
  ASSERT_TRUE(h2.has_value());
  const double timeout_ms = 300.0 * kSlowdown;
  std::uint64_t refused_before = p.server().numRefusedHandshakes();
  for (const std::string& secret : {rogue + ".key", client + ".key", std::string()}) {
    SCOPED_TRACE(secret.empty() ? std::string("no key") : secret);
    ServiceConfig bc = worker(engine::WorkerType::Decode);
    bc.service.handoff_fetch_timeout_ms = timeout_ms;
    if (!secret.empty()) {
      bc.security.worker_secret_key_file = secret;
      bc.security.handoff_server_key_file = server + ".pub";
    }
    LiveService bad(bc);
    const Stream refused = decode(bad, "x", h2->ticket);
    EXPECT_EQ(refused.finish, FinishReason::Error);
    EXPECT_TRUE(refused.reason.starts_with("handoff: no kv_fetch_reply from " + h2->ticket.source +
                                           " within"))
        << refused.reason;
    EXPECT_TRUE(refused.tokens.empty());
    if (!secret.empty()) {
      // The prefill worker's ZAP handler refused the handshake (a plain DEALER's is refused by
      // the CURVE mechanism itself, before ZAP).
      EXPECT_GT(p.server().numRefusedHandshakes(), refused_before);
      refused_before = p.server().numRefusedHandshakes();
    }
  }
  // The prefill worker kept serving: r2's KV is still held, and the allowed decode worker
  // fetches it.
  EXPECT_EQ(testing::stats(*c).ranks.at(0).held, std::optional<std::uint64_t>(1));
  const Stream later = decode(d, "d2", h2->ticket);
  EXPECT_EQ(later.finish, FinishReason::Length) << later.reason;
  EXPECT_EQ(later.tokens.size(), 3u);
  p.stop();  // the counters are the loop thread's: read them once it has ended
  EXPECT_EQ(p.server().counters().kv_fetches_ready, 2u);
}

TEST(DisaggCurveTest, BrokenWorkerKeyFilesAreStartupErrors) {
  KeyDir keys;
  const std::string server = keys.pair("prefill");
  ServiceConfig dc = worker(engine::WorkerType::Decode);
  dc.security.worker_secret_key_file = server + ".missing";
  dc.security.handoff_server_key_file = server + ".pub";
  auto d = Server::create(dc);
  ASSERT_FALSE(d);
  EXPECT_NE(d.error().message.find("security.worker_secret_key_file"), std::string::npos)
      << d.error().message;

  ServiceConfig pc = worker(engine::WorkerType::Prefill);
  pc.security.curve = true;
  pc.security.server_secret_key_file = server + ".key";
  pc.security.client_public_keys = {net::readKeyFile(server + ".pub", "p").value()};
  pc.security.worker_public_key_files = {server + ".nobody"};
  auto p = Server::create(pc);
  ASSERT_FALSE(p);
  EXPECT_NE(p.error().message.find("security.worker_public_key_files"), std::string::npos)
      << p.error().message;
}

// The advertised endpoint goes into the ticket instead of the bound one; without it, the bound
// endpoint does, and a decode worker fetches through it; a wildcard bind needs it.
TEST(DisaggCurveTest, TicketsNameTheAdvertisedEndpoint) {
  ServiceConfig sc = worker(engine::WorkerType::Prefill);
  sc.endpoints.handoff.endpoint = "tcp://0.0.0.0:*";
  sc.endpoints.handoff_advertise = "tcp://prefill-0.example:5561";
  LiveService advertised(sc);
  EXPECT_TRUE(advertised.endpoints().handoff.starts_with("tcp://0.0.0.0:"));
  auto c = advertised.client();
  const auto h = prefill(*c, "r");
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->ticket.source, "tcp://prefill-0.example:5561");

  LiveService first(worker(engine::WorkerType::Prefill));
  // Without advertise, the bound endpoint.
  auto fc = first.client();
  const auto hf = prefill(*fc, "f");
  ASSERT_TRUE(hf.has_value());
  EXPECT_EQ(hf->ticket.source, first.endpoints().handoff);
  LiveService d(worker(engine::WorkerType::Decode));
  const Stream s = decode(d, "d", hf->ticket);
  EXPECT_EQ(s.finish, FinishReason::Length) << s.reason;

  // A wildcard bind without advertise does not start.
  ServiceConfig bad = worker(engine::WorkerType::Prefill);
  bad.endpoints.handoff.endpoint = "tcp://*:*";
  auto refused = Server::create(bad);
  ASSERT_FALSE(refused);
  EXPECT_NE(refused.error().message.find("endpoints.handoff.advertise"), std::string::npos)
      << refused.error().message;
  EXPECT_NE(refused.error().message.find("endpoints.handoff.endpoint"), std::string::npos);
}

}  // namespace
}  // namespace mocker::service
