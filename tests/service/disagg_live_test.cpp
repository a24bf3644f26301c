// Disaggregated prefill/decode, live (service/README.md "Disaggregated prefill/decode (live)"):
// a prefill worker and a decode worker, each a real Server on ephemeral loopback ports; every hop
// is a real ZeroMQ message — the client's submit and the `handoff` on the prefill worker, the
// ticket's submit on the decode worker, its kv_fetch / kv_release to the prefill worker's
// handoff ROUTER and the kv_fetch_reply. Plus the cancels at each stage, hostile tickets and
// handoff-socket messages, and a decode worker process killed mid-handoff.
#include <gtest/gtest.h>

#include <signal.h>

#include <chrono>
#include <cstdio>
#include <zmq.hpp>

#include "protocol/client.h"
#include "protocol/limits.h"
#include "tests/service/disagg_test_util.h"
#include "tests/service/http_probe.h"
#include "tests/service/live_service.h"
#include "tests/service/serve_process.h"

namespace mocker::service {
namespace {

using namespace std::chrono_literals;
using protocol::FinishReason;
using testing::awaitAck;
using testing::awaitMessage;
using testing::collect;
using testing::eventually;
using testing::kSlowdown;
using testing::LiveService;
using testing::prompt;
using testing::stats;
using testing::Stream;
using testing::TestConfig;
using Clock = std::chrono::steady_clock;

constexpr std::uint32_t kPrompt = testing::kDisaggPrompt;  // 5 blocks of 4
// 1 ms of modelled transfer per token: 1e6 bytes per token at 1 GB/s.
constexpr double kTransferMsPerToken = 1.0;

ServiceConfig workerConfig(engine::WorkerType type, double prefill_ms = 10, double decode_ms = 2) {
  return testing::disaggWorker(type, prefill_ms, decode_ms);
}

protocol::SubmitRequest request(const std::string& id, std::uint32_t max_tokens = 4) {
  return testing::disaggRequest(id, max_tokens);
}

/// Submits `id` to the prefill worker and returns its handoff (after the ack).
std::optional<protocol::Handoff> prefill(net::Client& client, const std::string& id,
                                         std::uint32_t max_tokens = 4) {
  return testing::prefillHop(client, id, max_tokens);
}

protocol::SubmitRequest withTicket(const std::string& id, const protocol::HandoffTicket& t,
                                   std::uint32_t max_tokens = 4) {
  protocol::SubmitRequest r = request(id, max_tokens);
  r.handoff = t;
  return r;
}

/// A raw DEALER to a prefill worker's handoff ROUTER (what a decode worker uses).
class HandoffPeer {
 public:
  explicit HandoffPeer(const std::string& endpoint) : socket_(context_, zmq::socket_type::dealer) {
    socket_.set(zmq::sockopt::linger, 0);
    socket_.connect(endpoint);
  }
  void send(const protocol::ClientMessage& m) { sendRaw(protocol::encodeClientMessage(m)); }
  void sendRaw(const std::vector<std::byte>& payload) {
    socket_.send(zmq::buffer(payload.data(), payload.size()), zmq::send_flags::none);
  }
  std::optional<protocol::ClientMessage> receive(std::chrono::milliseconds timeout) {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, timeout) <= 0) return std::nullopt;
    zmq::message_t msg;
    if (!socket_.recv(msg)) return std::nullopt;
    auto m = protocol::decodeClientMessage({static_cast<const std::byte*>(msg.data()), msg.size()});
    EXPECT_TRUE(m.has_value());
    if (!m) return std::nullopt;
    return *m;
  }

 private:
  zmq::context_t context_;
  zmq::socket_t socket_;
};

std::uint64_t held(net::Client& c) { return stats(c).ranks.at(0).held.value_or(999); }

// The whole two-hop flow: ack and handoff from P (no tokens), ack and every token from D — the
// tokens an aggregated worker streams for the same request — first token no earlier than the
// modelled prefill + transfer; P's hold released by the fetch; D caches the prompt's blocks.
TEST(DisaggLiveTest, TwoHopStreamsWhatAnAggregatedWorkerStreams) {
  LiveService p(workerConfig(engine::WorkerType::Prefill));
  LiveService d(workerConfig(engine::WorkerType::Decode));
  LiveService agg(workerConfig(engine::WorkerType::Aggregated));
  ASSERT_FALSE(p.endpoints().handoff.empty());
  EXPECT_TRUE(d.endpoints().handoff.empty()) << "only a prefill worker binds a handoff socket";
  auto pc = p.client();
  auto dc = d.client();

  const auto start = Clock::now();
  const auto h = prefill(*pc, "r1", 6);
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(h->id, "r1");
  EXPECT_EQ(h->ticket.source, p.endpoints().handoff);
  EXPECT_EQ(h->ticket.key.size(), protocol::kHandoffKeyBytes);
  EXPECT_EQ(h->ticket.block_size, 4u);
  EXPECT_EQ(h->ticket.prompt_len, kPrompt);
  EXPECT_EQ(h->ticket.cached_tokens, 0u);
  EXPECT_DOUBLE_EQ(h->ticket.transfer_ms, kPrompt * kTransferMsPerToken);
  EXPECT_EQ(held(*pc), 1u);

  ASSERT_TRUE(dc->submit(withTicket("d1", h->ticket, 6)).has_value());
  std::map<std::string, Stream> streams;
  ASSERT_TRUE(awaitAck(*dc, "d1", streams));
  // Token 0 carries the ticket's cached_tokens.
  std::optional<protocol::OutputBatch> first;
  while (!first) {
    auto b = awaitMessage<protocol::OutputBatch>(*dc, 10s * kSlowdown);
    ASSERT_TRUE(b.has_value());
    if (!b->outputs.empty()) first = *b;
  }
  const double ttft_ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count();
  ASSERT_FALSE(first->outputs[0].tokens.empty());
  EXPECT_EQ(first->outputs[0].index, 0u);
  EXPECT_EQ(first->outputs[0].cached_tokens, std::optional<std::uint32_t>(0));
  // Modelled: prefill 10 ms, then the transfer of 20 tokens (20 ms), then the decode pass.
  EXPECT_GE(ttft_ms, 10.0 + kPrompt * kTransferMsPerToken);
  std::printf("two-hop TTFT %.1f ms (modelled: prefill 10 ms + transfer %.0f ms + decode 2 ms)\n",
              ttft_ms, kPrompt * kTransferMsPerToken);
  testing::absorb(streams, protocol::ClientMessage{*first}, nullptr);
  streams = collect(*dc, {"d1"}, nullptr, 10s * kSlowdown, std::move(streams));
  EXPECT_EQ(streams["d1"].finish, FinishReason::Length);
  EXPECT_EQ(streams["d1"].tokens.size(), 6u);

  auto ac = agg.client();
  ASSERT_TRUE(ac->submit(request("a1", 6)).has_value());
  const auto agg_streams = collect(*ac, {"a1"}, nullptr, 10s * kSlowdown);
  EXPECT_EQ(streams["d1"].tokens, agg_streams.at("a1").tokens);

  // P released the hold when it answered the fetch; its route is gone.
  EXPECT_TRUE(eventually(
      *pc, [](const protocol::StatsReply& s) { return s.ranks[0].held == 0u && s.routes == 0; }));
  EXPECT_EQ(stats(*pc).ranks[0].handoff_expired, std::optional<std::uint64_t>(0));
  // D holds the prompt's KV: its five blocks are cached.
  ASSERT_TRUE(dc->send(protocol::KvSnapshotRequest{}).has_value());
  const auto snap = awaitMessage<protocol::KvSnapshotReply>(*dc);
  ASSERT_TRUE(snap.has_value());
  EXPECT_GE(snap->ranks.at(0).block_hashes.size(), kPrompt / 4);
  const auto ds = stats(*dc);
  EXPECT_EQ(ds.ranks[0].pending_handoffs, std::optional<std::uint64_t>(0));
  EXPECT_FALSE(stats(*ac).ranks[0].held.has_value()) << "aggregated ranks omit the handoff fields";
  p.stop();
  EXPECT_EQ(p.server().counters().handoffs_sent, 1u);
  EXPECT_EQ(p.server().counters().kv_fetches_ready, 1u);
}

// Cancel on the prefill worker before its prompt completes: a normal cancelled stream, no
// handoff; after the handoff (before the decode submit): applied, the KV is freed, and the
// decode worker's fetch finds nothing.
TEST(DisaggLiveTest, CancelOnThePrefillWorkerBeforeAndAfterTheHandoff) {
  LiveService p(workerConfig(engine::WorkerType::Prefill, /*prefill_ms=*/300));
  LiveService d(workerConfig(engine::WorkerType::Decode));
  auto pc = p.client();
  ASSERT_TRUE(pc->submit(request("early")).has_value());
  std::map<std::string, Stream> streams;
  ASSERT_TRUE(awaitAck(*pc, "early", streams));
  ASSERT_TRUE(pc->send(protocol::CancelRequest{.id = "early"}).has_value());
  std::vector<protocol::ClientMessage> others;
  streams = collect(*pc, {"early"}, &others, 10s * kSlowdown, std::move(streams));
  EXPECT_EQ(streams["early"].finish, FinishReason::Cancelled);
  for (const auto& m : others) {
    EXPECT_FALSE(std::holds_alternative<protocol::Handoff>(m)) << "no handoff after a cancel";
  }

  const auto h = prefill(*pc, "late");
  ASSERT_TRUE(h.has_value());
  EXPECT_EQ(held(*pc), 1u);
  ASSERT_TRUE(pc->send(protocol::CancelRequest{.id = "late"}).has_value());
  const auto r = awaitMessage<protocol::CancelReply>(*pc);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->result, protocol::CancelResult::Applied);
  EXPECT_EQ(held(*pc), 0u);
  EXPECT_EQ(stats(*pc).routes, 0u);
  ASSERT_TRUE(pc->send(protocol::CancelRequest{.id = "late"}).has_value());
  const auto again = awaitMessage<protocol::CancelReply>(*pc);
  ASSERT_TRUE(again.has_value());
  EXPECT_EQ(again->result, protocol::CancelResult::NotFound);

  auto dc = d.client();
  ASSERT_TRUE(dc->submit(withTicket("d", h->ticket)).has_value());
  const auto ds = collect(*dc, {"d"}, nullptr, 10s * kSlowdown);
  EXPECT_TRUE(ds.at("d").acked);
  EXPECT_EQ(ds.at("d").finish, FinishReason::Error);
  EXPECT_TRUE(ds.at("d").reason.starts_with("handoff: the prefill worker at " + h->ticket.source +
                                            " holds no KV"))
      << ds.at("d").reason;
  EXPECT_TRUE(ds.at("d").tokens.empty());
}

// /metrics of a prefill worker: a handed-off request finishes `length` at its prefill, as vLLM's
// prefill instance counts its max_tokens = 1 request — one time to first token, its prompt
// tokens, no generation token — and releasing its KV later (here a cancel of the held request)
// does not count it again as `abort`.
TEST(DisaggLiveTest, PrefillWorkerMetricsCountAHandoffAsLengthAtThePrefill) {
  LiveService p(testing::withHttp(workerConfig(engine::WorkerType::Prefill, /*prefill_ms=*/20)));
  auto pc = p.client();
  ASSERT_TRUE(prefill(*pc, "a").has_value());
  ASSERT_TRUE(prefill(*pc, "b").has_value());
  ASSERT_TRUE(pc->send(protocol::CancelRequest{.id = "a"}).has_value());
  const auto r = awaitMessage<protocol::CancelReply>(*pc);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->result, protocol::CancelResult::Applied);
  EXPECT_EQ(held(*pc), 1u);

  auto http = testing::httpClient(p.endpoints().http);
  const std::string r0 = R"({model_name="mocker",engine="0")";
  const auto count = [&](const std::string& text, const std::string& series) {
    return testing::sample(text, series + r0 + "}");
  };
  const auto finished = [&](const std::string& text, const char* reason) {
    return testing::sample(
        text, "vllm:request_success_total" + r0 + ",finished_reason=\"" + reason + "\"}");
  };
  std::string text;
  ASSERT_TRUE(testing::pollUntil(
      http, "/metrics",
      [&](int status, const std::string& body) {
        return status == 200 && finished(body, "length") == 2;
      },
      5s * kSlowdown, &text))
      << text;
  EXPECT_EQ(finished(text, "abort"), 0) << text;
  EXPECT_EQ(count(text, "vllm:time_to_first_token_seconds_count"), 2);
  // Arrival to the end of a 20 ms prefill pass, for each: the pass is anchored at the arrival
  // the engine saw, and /metrics records that same arrival (a second clock reading, taken after
  // the engine's submit, could be late by however long the loop thread was descheduled).
  EXPECT_GE(count(text, "vllm:time_to_first_token_seconds_sum"), 2 * 0.0199);
  EXPECT_EQ(count(text, "vllm:e2e_request_latency_seconds_count"), 2);
  EXPECT_EQ(count(text, "vllm:prompt_tokens_total"), 2.0 * kPrompt);
  EXPECT_EQ(count(text, "vllm:generation_tokens_total"), 0);
  EXPECT_EQ(count(text, "vllm:inter_token_latency_seconds_count"), 0);
}

// Cancel on the decode worker while its fetch waits (a 200 s transfer): applied, and its
// kv_release frees the prefill worker's hold at once; after activation: a normal cancel.
TEST(DisaggLiveTest, CancelOnTheDecodeWorkerWhileFetchingAndAfterActivation) {
  ServiceConfig pcfg = workerConfig(engine::WorkerType::Prefill);
  pcfg.engine.kv_transfer_bandwidth_gbps = 0.0001;  // 10 s per token: the fetch never ends here
  LiveService p(pcfg);
  LiveService d(workerConfig(engine::WorkerType::Decode));
  auto pc = p.client();
  auto dc = d.client();
  const auto h = prefill(*pc, "slow");
  ASSERT_TRUE(h.has_value());
  ASSERT_TRUE(dc->submit(withTicket("d", h->ticket)).has_value());
  std::map<std::string, Stream> streams;
  ASSERT_TRUE(awaitAck(*dc, "d", streams));
  EXPECT_TRUE(eventually(
      *dc, [](const protocol::StatsReply& s) { return s.ranks[0].pending_handoffs == 1u; }));
  ASSERT_TRUE(dc->send(protocol::CancelRequest{.id = "d"}).has_value());
  streams = collect(*dc, {"d"}, nullptr, 10s * kSlowdown, std::move(streams));
  EXPECT_EQ(streams["d"].finish, FinishReason::Cancelled);
  EXPECT_EQ(stats(*dc).ranks[0].pending_handoffs, std::optional<std::uint64_t>(0));
  EXPECT_TRUE(eventually(
      *pc, [](const protocol::StatsReply& s) { return s.ranks[0].held == 0u && s.routes == 0; }));

  // After activation: a plain cancel of a running stream.
  LiveService p2(workerConfig(engine::WorkerType::Prefill));
  LiveService d2(workerConfig(engine::WorkerType::Decode, 10, /*decode_ms=*/50));
  auto pc2 = p2.client();
  auto dc2 = d2.client();
  const auto h2 = prefill(*pc2, "r");
  ASSERT_TRUE(h2.has_value());
  ASSERT_TRUE(dc2->submit(withTicket("d", h2->ticket, 1000)).has_value());
  auto first = awaitMessage<protocol::OutputBatch>(*dc2, 10s * kSlowdown);
  ASSERT_TRUE(first.has_value());
  ASSERT_TRUE(dc2->send(protocol::CancelRequest{.id = "d"}).has_value());
  std::map<std::string, Stream> s2;
  s2["d"].acked = true;
  testing::absorb(s2, protocol::ClientMessage{*first}, nullptr);
  std::vector<protocol::ClientMessage> others;
  s2 = collect(*dc2, {"d"}, &others, 10s * kSlowdown, std::move(s2));
  EXPECT_EQ(s2["d"].finish, FinishReason::Cancelled);
  EXPECT_LT(s2["d"].tokens.size(), 1000u);
  d.stop();
  p.stop();
  EXPECT_EQ(p.server().counters().kv_releases, 1u);
  EXPECT_EQ(p.server().counters().kv_fetches_ready, 0u);
}

// A client whose connection closes: on the prefill worker its held requests are freed; on the
// decode worker a handoff still waiting for its KV is cancelled and released at the source.
TEST(DisaggLiveTest, ClosedClientConnectionsFreeHeldAndPendingHandoffs) {
  ServiceConfig pcfg = workerConfig(engine::WorkerType::Prefill);
  pcfg.engine.kv_transfer_bandwidth_gbps = 0.0001;  // 10 s per token: the fetch never ends here
  LiveService p(pcfg);
  LiveService d(workerConfig(engine::WorkerType::Decode));
  auto observer = p.client();
  {
    auto gone = p.client();
    ASSERT_TRUE(prefill(*gone, "r").has_value());
    EXPECT_EQ(held(*observer), 1u);
  }  // its connection closes
  EXPECT_TRUE(eventually(*observer, [](const protocol::StatsReply& s) {
    return s.ranks[0].held == 0u && s.routes == 0;
  }));

  auto pc = p.client();
  const auto h = prefill(*pc, "r2");
  ASSERT_TRUE(h.has_value());
  auto d_observer = d.client();
  {
    auto dc = d.client();
    ASSERT_TRUE(dc->submit(withTicket("d", h->ticket)).has_value());
    std::map<std::string, Stream> streams;
    ASSERT_TRUE(awaitAck(*dc, "d", streams));
    EXPECT_TRUE(eventually(*d_observer, [](const protocol::StatsReply& s) {
      return s.ranks[0].pending_handoffs == 1u;
    }));
  }
  EXPECT_TRUE(eventually(*d_observer, [](const protocol::StatsReply& s) {
    return s.ranks[0].pending_handoffs == 0u && s.routes == 0;
  }));
  EXPECT_TRUE(eventually(*observer, [](const protocol::StatsReply& s) {
    return s.ranks[0].held == 0u && s.routes == 0;
  }));
  p.stop();
  EXPECT_EQ(p.server().counters().kv_releases, 1u);
}

// Hostile tickets and handoff-socket messages: each refused with a message naming what is wrong,
// and both workers keep serving.
TEST(DisaggLiveTest, HostileTicketsAndHandoffMessagesAreRefused) {
  LiveService p(workerConfig(engine::WorkerType::Prefill));
  LiveService d(workerConfig(engine::WorkerType::Decode));
  LiveService agg(workerConfig(engine::WorkerType::Aggregated));
  auto pc = p.client();
  auto dc = d.client();
  auto ac = agg.client();
  const auto h = prefill(*pc, "r");
  ASSERT_TRUE(h.has_value());

  const auto rejected = [](net::Client& c, const protocol::SubmitRequest& r) {
    EXPECT_TRUE(c.submit(r).has_value());
    const auto s = collect(c, {r.id}, nullptr, 10s * kSlowdown);
    return s.at(r.id).rejected.value_or("(not rejected)");
  };
  protocol::HandoffTicket t = h->ticket;
  t.block_size = 8;
  EXPECT_EQ(rejected(*dc, withTicket("bs", t)),
            "handoff: the ticket's block_size 8 differs from this decode worker's 4 (prefill and "
            "decode workers must use the same block size)");
  protocol::SubmitRequest shorter = withTicket("len", h->ticket);
  shorter.prompt.pop_back();
  EXPECT_EQ(rejected(*dc, shorter),
            "handoff: the prompt has 19 tokens, the ticket's prompt_len is 20");
  EXPECT_TRUE(rejected(*dc, request("plain"))
                  .starts_with("handoff: this is a decode worker: a submit must carry"));
  EXPECT_TRUE(
      rejected(*pc, withTicket("onp", h->ticket))
          .starts_with("handoff: this worker's worker_type is prefill; only a decode worker"));
  EXPECT_TRUE(rejected(*ac, withTicket("ona", h->ticket))
                  .starts_with("handoff: this worker's worker_type is aggregated; only a decode"));
  t = h->ticket;
  t.source = "ipc:///tmp/x";
  EXPECT_EQ(rejected(*dc, withTicket("ipc", t)),
            "handoff: source 'ipc:///tmp/x' is not a tcp:// endpoint");

  // A wrong key: the fetch finds nothing.
  t = h->ticket;
  t.key[0] = static_cast<char>(t.key[0] ^ 0x5a);
  ASSERT_TRUE(dc->submit(withTicket("wrong", t)).has_value());
  const auto wrong = collect(*dc, {"wrong"}, nullptr, 10s * kSlowdown);
  EXPECT_EQ(wrong.at("wrong").finish, FinishReason::Error);
  EXPECT_TRUE(wrong.at("wrong").reason.starts_with("handoff: the prefill worker at"));

  // The handoff socket: garbage, a message of another type, an unknown key, a short key.
  HandoffPeer peer(p.endpoints().handoff);
  peer.sendRaw({std::byte{0xc1}, std::byte{0x00}});
  auto e = peer.receive(10s);
  ASSERT_TRUE(e.has_value());
  ASSERT_TRUE(std::holds_alternative<protocol::ErrorReply>(*e));
  EXPECT_EQ(std::get<protocol::ErrorReply>(*e).code, ErrorCode::Corruption);
  peer.send(protocol::StatsRequest{});
  e = peer.receive(10s);
  ASSERT_TRUE(e.has_value());
  ASSERT_TRUE(std::holds_alternative<protocol::ErrorReply>(*e));
  EXPECT_NE(std::get<protocol::ErrorReply>(*e).message.find("accepts only \"kv_fetch\""),
            std::string::npos);
  peer.send(protocol::KvFetch{.key = std::string(16, 'x'), .tokens = 4});
  e = peer.receive(10s);
  ASSERT_TRUE(e.has_value());
  ASSERT_TRUE(std::holds_alternative<protocol::KvFetchReply>(*e));
  EXPECT_EQ(std::get<protocol::KvFetchReply>(*e).result, protocol::KvFetchResult::NotFound);
  peer.sendRaw(protocol::encodeClientMessage(protocol::KvRelease{std::string(16, 'y')}));
  // A short key does not decode: an error naming the key.
  {
    std::vector<std::byte> bad =
        protocol::encodeClientMessage(protocol::KvRelease{std::string(16, 'z')});
    // Shorten the bin: "c4 10" + 16 bytes → "c4 0f" + 15 bytes.
    ASSERT_EQ(bad[bad.size() - 17], std::byte{0x10});
    bad[bad.size() - 17] = std::byte{0x0f};
    bad.pop_back();
    peer.sendRaw(bad);
    e = peer.receive(10s);
    ASSERT_TRUE(e.has_value());
    ASSERT_TRUE(std::holds_alternative<protocol::ErrorReply>(*e));
    EXPECT_EQ(std::get<protocol::ErrorReply>(*e).message, "key: must be exactly 16 bytes, got 15");
  }
  // Still serving: the real ticket's KV is fetched through the decode worker.
  ASSERT_TRUE(dc->submit(withTicket("good", h->ticket)).has_value());
  const auto good = collect(*dc, {"good"}, nullptr, 10s * kSlowdown);
  EXPECT_EQ(good.at("good").finish, FinishReason::Length);
  EXPECT_EQ(good.at("good").tokens.size(), 4u);
  EXPECT_EQ(held(*pc), 0u);
}

// A decode worker process killed (SIGKILL) after it acknowledged the handoff submit: the prefill
// worker's hold ends by kv_hold_timeout_ms (a fetch it may have sent would be answered only after
// the 200 s transfer), counted as handoff_expired.
TEST(DisaggLiveTest, ADecodeWorkerKilledMidHandoffLeavesTheHoldToItsTimeout) {
  ServiceConfig pcfg = workerConfig(engine::WorkerType::Prefill);
  pcfg.engine.kv_transfer_bandwidth_gbps = 0.0001;  // 10 s per token: the fetch never ends here
  // The hold must outlast the decode submit's way to its kv_fetch (a few loop turns), not the
  // start of a process: the decode worker is up before the prefill starts the hold.
  pcfg.engine.kv_hold_timeout_ms = 500.0 * kSlowdown;
  testing::ServeProcess d({"--worker-type", "decode", "--block-size", "4", "--num-gpu-blocks",
                           "256", "--no-kv-events", "--no-fpm", "--no-http"});
  ASSERT_TRUE(d.awaitReady());
  net::ClientOptions o;
  o.submit_endpoint = d.endpoints.at("submit");
  o.cancel_endpoint = d.endpoints.at("cancel");
  auto dc = net::Client::connect(o);
  ASSERT_TRUE(dc.has_value());

  LiveService p(pcfg);
  auto pc = p.client();
  const auto h = prefill(*pc, "r");
  ASSERT_TRUE(h.has_value());
  ASSERT_TRUE((*dc)->submit(withTicket("d", h->ticket)).has_value());
  std::map<std::string, Stream> streams;
  ASSERT_TRUE(awaitAck(**dc, "d", streams));
  // Reserved on the decode side (its kv_fetch goes out in the same loop turn).
  EXPECT_TRUE(eventually(
      **dc, [](const protocol::StatsReply& s) { return s.ranks[0].pending_handoffs == 1u; }));
  ASSERT_EQ(kill(d.pid(), SIGKILL), 0);

  EXPECT_TRUE(eventually(
      *pc,
      [](const protocol::StatsReply& s) {
        return s.ranks[0].held == 0u && s.ranks[0].handoff_expired == 1u && s.routes == 0;
      },
      10s * kSlowdown));
  p.stop();
  EXPECT_EQ(p.server().counters().handoff_expired, 1u);
  EXPECT_EQ(p.server().counters().kv_fetches_ready, 0u);
}

}  // namespace
}  // namespace mocker::service
