// Live-service tests of what the service sends when clients are many, slow or flooding: every
// message within the protocol's limits, acks before outputs, and the per-request output buffer
// (service.max_buffered_outputs). Real sockets on ephemeral loopback ports; waits poll with a
// deadline.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <set>
#include <sstream>
#include <zmq.hpp>

#include "http_probe.h"
#include "live_service.h"
#include "protocol/limits.h"
#include "tests/testing/tcp_sockets.h"

namespace mocker::service {
namespace {

using namespace std::chrono_literals;
using protocol::FinishReason;
using testing::httpClient;
using testing::kSlowdown;
using testing::LiveService;
using testing::pollUntil;
using testing::prompt;
using testing::sample;
using testing::TestConfig;
using testing::withHttp;

std::string idOf(const char* prefix, std::uint32_t i) {
  std::string id(prefix);
  id.append(std::to_string(i));
  return id;
}

/// Receives until every id in `ids` has ended; checks that every message decodes (the client's
/// decoder enforces protocol/limits.h) and records the largest output message.
struct Receiver {
  std::map<std::string, testing::Stream> streams;
  std::size_t most_outputs = 0;                 // entries of the largest output message
  std::size_t acks_after_output = 0;            // outputs that arrived before their request's ack
  std::size_t empty_batches = 0;                // output messages without an entry (never valid)
  std::vector<protocol::ClientMessage> others;  // error replies and anything else

  void absorb(protocol::ClientMessage&& m) {
    if (auto* b = std::get_if<protocol::OutputBatch>(&m)) {
      most_outputs = std::max(most_outputs, b->outputs.size());
      empty_batches += b->outputs.empty();
      for (const auto& o : b->outputs) {
        if (!streams[o.id].acked) ++acks_after_output;
      }
    }
    testing::absorb(streams, std::move(m), &others);
  }

  /// An error reply naming a request ends it as well (e.g. `resource_exhausted`): the test then
  /// fails on the ack count with the service's message instead of waiting for the deadline.
  bool ended(const std::string& id) {
    const testing::Stream& s = streams[id];
    return s.finish || s.rejected || erroredIds().contains(id);
  }

  void until(net::Client& c, const std::vector<std::string>& ids, std::chrono::seconds timeout,
             const LiveService& svc) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    std::size_t next = 0;  // ids[0, next) have ended
    while (std::chrono::steady_clock::now() < deadline) {
      while (next < ids.size() && ended(ids[next])) ++next;
      if (next == ids.size()) {
        EXPECT_EQ(empty_batches, 0u) << "output messages without an entry";
        return;
      }
      auto m = c.receive(50ms);
      ASSERT_TRUE(m) << "undecodable message: " << m.error().message;
      if (*m) absorb(std::move(**m));
    }
    FAIL() << (ids.size() - next) << " streams did not end before the deadline\n"
           << diagnosis(ids, next, svc);
  }

 private:
  std::set<std::string> errored_;
  std::size_t errors_seen_ = 0;

  const std::set<std::string>& erroredIds() {
    for (; errors_seen_ < others.size(); ++errors_seen_) {
      const auto* e = std::get_if<protocol::ErrorReply>(&others[errors_seen_]);
      if (e && e->id) errored_.insert(*e->id);
    }
    return errored_;
  }

  /// What a stall looks like from both ends: this client's view of the streams, and the
  /// service's (does its loop still answer; does it still hold the routes; its counters).
  std::string diagnosis(const std::vector<std::string>& ids, std::size_t next,
                        const LiveService& svc) {
    std::size_t acked = 0, ended_count = 0;
    for (const auto& id : ids) {
      acked += streams[id].acked;
      ended_count += ended(id);
    }
    const testing::Stream& first = streams[ids[next]];
    std::string out = "client: " + std::to_string(acked) + " acked, " +
                      std::to_string(ended_count) + " ended, " + std::to_string(others.size()) +
                      " other messages; first open stream " + ids[next] +
                      (first.acked ? " (acked, " : " (not acked, ") +
                      std::to_string(first.tokens.size()) + " tokens)\n";
    auto observer = svc.client();
    if (const auto r = testing::tryStats(*observer, 5s)) {
      out += "service stats: " + std::to_string(r->routes) + " routes";
      for (const auto& rank : r->ranks) {
        out += "; rank " + std::to_string(rank.dp_rank) + " running " +
               std::to_string(rank.running) + " waiting " + std::to_string(rank.waiting);
      }
      out += "\n";
    } else {
      out += "service stats: no reply within 5 s (its loop is not serving)\n";
    }
    // Both ends of the client's connection live in this process: a kernel-level stall (a
    // retransmission timer backed off, a zero window) shows in its TCP sockets.
    return out + metricsLines(svc) + mocker::testing::tcpSocketsReport();
  }

  /// The service's own counters from /metrics ("" without an HTTP endpoint).
  static std::string metricsLines(const LiveService& svc) {
    if (svc.endpoints().http.empty()) return "";
    auto http = httpClient(svc.endpoints().http);
    const auto got = http.Get("/metrics");
    if (!got) return "/metrics: no answer\n";
    std::string out;
    std::istringstream lines(got->body);
    for (std::string line; std::getline(lines, line);) {
      if ((line.starts_with("mocker:") && !line.starts_with("mocker:faults_injected")) ||
          line.starts_with("vllm:num_requests")) {
        out += line + "\n";
      }
    }
    return out;
  }
};

// More than 65,536 streams of one client open at shutdown: their `shutdown` terminals are
// split over several messages, each within kMaxOutputsPerMessage.
TEST(ServerBackpressureTest, ShutdownTerminalsOfMoreThan65536StreamsAreSplit) {
  constexpr std::uint32_t kStreams = 70000;
  LiveService svc(
      TestConfig().paced(1, 1000).maxNumSeqs(1).submitBacklog(kStreams).submitSndhwm(0).build());
  auto c = svc.client({.rcvhwm = 0, .sndhwm = 0});
  std::vector<std::string> ids;
  for (std::uint32_t i = 0; i < kStreams; ++i) {
    ids.push_back(idOf("s", i));
    ASSERT_TRUE(c->submit({.id = ids.back(), .prompt = prompt(4), .max_tokens = 1000000}));
  }
  auto observer = svc.client();
  ASSERT_TRUE(testing::eventually(
      *observer, [&](const protocol::StatsReply& r) { return r.routes == kStreams; },
      60s * kSlowdown));
  svc.stop();
  Receiver rx;
  ASSERT_NO_FATAL_FAILURE(rx.until(*c, ids, 60s * kSlowdown, svc));
  std::size_t shutdown = 0;
  for (const auto& id : ids) shutdown += rx.streams[id].finish == FinishReason::Shutdown;
  EXPECT_EQ(shutdown, kStreams);
  EXPECT_LE(rx.most_outputs, protocol::kMaxOutputsPerMessage);
  std::printf("%u shutdown terminals; largest output message %zu entries\n", kStreams,
              rx.most_outputs);
}

// One pass that produces more than 65,536 outputs for one client: the pass's batch is split.
TEST(ServerBackpressureTest, OnePassWithMoreThan65536OutputsOfOneClientIsSplit) {
  constexpr std::uint32_t kRequests = 70000;
  // Every submit is sent before the service reads any (a client encoding 70,000 submits on a
  // loaded machine takes seconds); then the first request's prefill pass takes 4 s
  // (× kSlowdown) while the service reads the rest from its socket (about 1 s on an idle
  // 2-core machine, 4 s at load 12), and all of them are prefilled together in the next pass,
  // each emitting its one token there.
  LiveService svc(TestConfig()
                      .paced(4000 * kSlowdown, 1)
                      .numGpuBlocks(2 * kRequests)
                      .maxNumSeqs(2 * kRequests)
                      .maxNumBatchedTokens(2 * kRequests)
                      .submitBacklog(2 * kRequests)
                      .submitSndhwm(0)
                      .build(),
                  {}, /*running=*/false);
  auto c = svc.client({.rcvhwm = 0, .sndhwm = 0});
  std::vector<std::string> ids;
  for (std::uint32_t i = 0; i < kRequests; ++i) {
    ids.push_back(idOf("p", i));
    ASSERT_TRUE(c->submit({.id = ids.back(), .prompt = {i}, .max_tokens = 1}));
  }
  svc.start();
  Receiver rx;
  ASSERT_NO_FATAL_FAILURE(rx.until(*c, ids, 60s * kSlowdown, svc));
  std::size_t complete = 0;
  for (const auto& id : ids) {
    complete += rx.streams[id].finish == FinishReason::Length && rx.streams[id].tokens.size() == 1;
  }
  EXPECT_EQ(complete, kRequests);
  EXPECT_LE(rx.most_outputs, protocol::kMaxOutputsPerMessage);
  EXPECT_GT(rx.most_outputs, 60000u) << "the requests did not share one pass";
  std::printf("%u one-token requests; largest output message %zu entries\n", kRequests,
              rx.most_outputs);
}

// A flood of submits from one DEALER that reads nothing meanwhile (small receive HWM): every
// request that was accepted gets its submit_ack before any output or terminal of it — also
// when the flood overflows the requests' buffers and they end `cancelled` (buffer 1).
TEST(ServerBackpressureTest, FloodedClientGetsEveryAckBeforeThatRequestsOutputs) {
  constexpr std::uint32_t kSubmits = 50000;
  // Every wait ends by this deadline, inside ctest's 300 s: a stall fails with its phase named
  // instead of a silent timeout (a normal run takes 7 s under ASan, 30 s with four in parallel).
  const auto start = std::chrono::steady_clock::now();
  const auto test_deadline = start + 270s;
  const auto budget = [&](std::chrono::seconds want) {
    const auto left = std::chrono::duration_cast<std::chrono::seconds>(
        test_deadline - std::chrono::steady_clock::now());
    return std::max(1s, std::min(want, left));
  };
  const auto phase = [&](std::uint32_t buffer, const char* what) {
    std::printf("[flood] buffer %u: %s at %.1f s\n", buffer, what,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    std::fflush(stdout);
  };
  for (const std::uint32_t buffer : {8u, 1u}) {
    SCOPED_TRACE("max_buffered_outputs " + std::to_string(buffer));
    LiveService svc(withHttp(TestConfig().numGpuBlocks(4096).maxBufferedOutputs(buffer).build()));
    // The kernel's default receive buffer, not a tiny one: through a 4 KiB SO_RCVBUF on
    // loopback the kernel drops segments whenever this reader lags (TcpExtRcvPruned), and each
    // retransmission that finds the buffer still full doubles the timer, so a reader slowed by a
    // sanitizer on a loaded machine saw nothing for minutes in either direction (three CI
    // stalls near f16000). The overflow (buffer 1) needs no tiny buffer: the flood's outputs
    // are megabytes, beyond the service's 4 MiB send buffer at most and this socket's 128 KiB.
    auto c = svc.client({.rcvhwm = 10, .sndhwm = 0});
    std::vector<std::string> ids;
    for (std::uint32_t i = 0; i < kSubmits; ++i) {
      ids.push_back(idOf("f", i));
      ASSERT_TRUE(c->submit({.id = ids.back(), .prompt = prompt(4, i), .max_tokens = 3}));
    }
    phase(buffer, "submitted");
    if (buffer == 1) {
      // The client reads nothing until the service has abandoned a request: the overflow is
      // then a fact, not a race between this reader and the service (a fast reader can keep up
      // with the whole flood). The outputs of 50,000 requests are megabytes; the pipe holds
      // a few kilobytes and a few messages.
      auto http = httpClient(svc.endpoints().http);
      std::string text;
      ASSERT_TRUE(pollUntil(
          http, "/metrics",
          [](int status, const std::string& body) {
            return status == 200 &&
                   sample(body, R"(mocker:backpressure_cancels_total{model_name="mocker"})") > 0;
          },
          budget(120s * kSlowdown), &text))
          << "no request was abandoned while the client read nothing\n"
          << text;
      phase(buffer, "a request was abandoned");
    }
    Receiver rx;
    ASSERT_NO_FATAL_FAILURE(rx.until(*c, ids, budget(120s * kSlowdown), svc));
    phase(buffer, "every stream ended");
    std::size_t acked = 0, cancelled = 0, unacked_terminals = 0;
    for (const auto& id : ids) {
      const testing::Stream& s = rx.streams[id];
      acked += s.acked;
      cancelled += s.finish == FinishReason::Cancelled;
      unacked_terminals += s.finish && !s.acked;
    }
    std::printf(
        "%u submits, buffer %u: %zu acked, %zu cancelled, %zu outputs before their ack, "
        "%zu terminals without an ack\n",
        kSubmits, buffer, acked, cancelled, rx.acks_after_output, unacked_terminals);
    EXPECT_EQ(acked, kSubmits);
    EXPECT_EQ(rx.acks_after_output, 0u);
    EXPECT_EQ(unacked_terminals, 0u);
    if (buffer == 1) {
      EXPECT_GT(cancelled, 0u) << "the flood did not overflow any buffer";
    }
  }
}

// A client that never reads has its request cancelled once its buffer overflows; a concurrent
// request of another client completes with all its tokens, one per pass, meanwhile. The buffer
// (400 signals) is larger than the fast request's whole output (300 tokens), so the fast stream
// cannot overflow however late this process's threads run on a loaded machine (with 2, a CI run
// at load 10 cancelled it after 177 passes: the service's own I/O thread lagged 32 messages);
// the slow request, a million tokens long, overflows it whatever the scheduling.
TEST(ServerBackpressureTest, SlowReaderOverItsBufferIsCancelledOthersCompleteEveryPass) {
  LiveService svc(TestConfig()
                      .paced(0, 1)
                      .maxBufferedOutputs(400)
                      .submitSndhwm(32)
                      .numGpuBlocks(1000000)
                      .build());
  // The kernel's default receive buffer (see FloodedClientGetsEveryAckBeforeThatRequestsOutputs
  // for why not a tiny one): it takes the slow stream's first few thousand messages, then its
  // pipe and buffer fill all the same.
  auto slow = svc.client({.rcvhwm = 1});
  auto fast = svc.client();
  auto observer = svc.client();
  const std::string slow_id(protocol::kMaxRequestIdBytes, 's');  // ~300 bytes per message
  ASSERT_TRUE(slow->submit({.id = slow_id, .prompt = prompt(8), .max_tokens = 1000000}));
  // The slow client reads its ack (so its request is in the engine), then nothing more: the
  // request runs until its pipe and its 2-signal buffer are full, then is abandoned — nothing
  // of it runs any more. (Not "running == 1, then 0" seen through stats: a slow build can
  // overflow the buffer, and even deliver the terminal, between two stats round trips.)
  ASSERT_TRUE(testing::awaitMessage<protocol::SubmitAck>(*slow, 30s * kSlowdown));
  ASSERT_TRUE(testing::eventually(
      *observer,
      [](const protocol::StatsReply& r) {
        return r.ranks.at(0).running == 0 && r.ranks.at(0).waiting == 0;
      },
      60s * kSlowdown));
  ASSERT_TRUE(fast->submit({.id = "f", .prompt = prompt(8, 500), .max_tokens = 300}));
  auto fs = testing::collect(*fast, {"f"}, nullptr, 30s * kSlowdown);
  EXPECT_EQ(fs["f"].tokens.size(), 300u);
  EXPECT_EQ(fs["f"].finish, FinishReason::Length);
  EXPECT_EQ(fs["f"].indices.size(), 300u) << "the fast stream should get one token per pass";
  // The slow client reads now: its tokens, without a gap, then a backpressure cancel.
  auto ss = testing::collect(*slow, {slow_id}, nullptr, 30s * kSlowdown);
  EXPECT_EQ(ss[slow_id].finish, FinishReason::Cancelled);
  EXPECT_NE(ss[slow_id].reason.find("backpressure"), std::string::npos) << ss[slow_id].reason;
}

// The other side of the bound: a client that stops reading for a while, but whose request fits
// in its buffer, loses nothing — the outputs wait in the service and arrive once it reads.
TEST(ServerBackpressureTest, ReaderThatFallsBehindWithinItsBufferLosesNothing) {
  // ~300 bytes per message: 9 MB, twice what the kernel holds at most for a client that reads
  // nothing (this socket's default 128 KiB, the service's send buffer at most 4 MiB). A tiny
  // SO_RCVBUF would hold less but invites the kernel's drops and backed-off retransmissions
  // once the reader lags (see FloodedClientGetsEveryAckBeforeThatRequestsOutputs): this test
  // stalled once in CI after 399 tokens.
  constexpr std::uint32_t kTokens = 30000;
  // With /metrics: a stall's diagnosis shows whether the service forgot the client
  // (mocker:clients_gone_total, mocker:unroutable_sends_total) or still holds its queue.
  LiveService svc(withHttp(
      TestConfig().maxBufferedOutputs(kTokens).submitSndhwm(1).numGpuBlocks(100000).build()));
  auto slow = svc.client({.rcvhwm = 1});
  auto observer = svc.client();
  const std::string id(protocol::kMaxRequestIdBytes, 'b');
  ASSERT_TRUE(slow->submit({.id = id, .prompt = prompt(8), .max_tokens = kTokens}));
  // The request finishes in the engine while the client reads nothing: most of its outputs
  // can only be waiting in the service.
  ASSERT_TRUE(testing::eventually(
      *observer,
      [](const protocol::StatsReply& r) {
        return r.ranks.at(0).running == 0 && r.ranks.at(0).waiting == 0 && r.routes == 1;
      },
      60s * kSlowdown));
  Receiver rx;
  ASSERT_NO_FATAL_FAILURE(rx.until(*slow, {id}, 30s * kSlowdown, svc));
  EXPECT_EQ(rx.streams[id].tokens.size(), kTokens);
  EXPECT_EQ(rx.streams[id].finish, FinishReason::Length) << rx.streams[id].reason;
}

// A kv_snapshot_reply that would exceed the 16 MiB message limit (2 ranks × 2^20 cached block
// hashes, 9 bytes each) is refused with an error saying so and what to ask instead; one rank's
// snapshot fits and is sent.
TEST(ServerBackpressureTest, KvSnapshotOverTheMessageLimitIsRefusedPerRankFits) {
  constexpr std::uint32_t kTokens = protocol::kMaxTokensPerRequest;  // 2^20, block_size 1
  LiveService svc(TestConfig().blockSize(1).numGpuBlocks(kTokens + 16).dpSize(2).build());
  auto c = svc.client();
  for (std::uint32_t r = 0; r < 2; ++r) {
    ASSERT_TRUE(c->submit({.id = idOf("big", r),
                           .prompt = prompt(kTokens, 1 + r * kTokens),
                           .max_tokens = 1,
                           .dp_rank = r}));
  }
  Receiver rx;
  ASSERT_NO_FATAL_FAILURE(rx.until(*c, {"big0", "big1"}, 120s * kSlowdown, svc));
  ASSERT_TRUE(c->send(protocol::KvSnapshotRequest{}));
  std::vector<protocol::ClientMessage> skipped;
  auto err = testing::awaitMessage<protocol::ErrorReply>(*c, 30s, &skipped);
  ASSERT_TRUE(err) << "no error reply (got " << skipped.size() << " other messages)";
  EXPECT_EQ(err->code, ErrorCode::InvalidArgument);
  EXPECT_NE(err->message.find("16777216"), std::string::npos) << err->message;
  EXPECT_NE(err->message.find("dp_rank"), std::string::npos) << err->message;
  ASSERT_TRUE(c->send(protocol::KvSnapshotRequest{.dp_rank = 1}));
  auto snap = testing::awaitMessage<protocol::KvSnapshotReply>(*c, 30s * kSlowdown);
  ASSERT_TRUE(snap);
  ASSERT_EQ(snap->ranks.size(), 1u);
  EXPECT_EQ(snap->ranks[0].block_hashes.size(), kTokens);
}

}  // namespace
}  // namespace mocker::service
