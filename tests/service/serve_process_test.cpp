// `mocker serve` as a child process: what only a real process shows — when it prints `ready`,
// and what its memory does under many short-lived clients.
#include <gtest/gtest.h>

#include <zmq.hpp>

#include <filesystem>
#include <fstream>
#include <iterator>

#include "live_service.h"
#include "serve_process.h"

namespace mocker::service {
namespace {

using namespace std::chrono_literals;
using testing::ServeProcess;
using Clock = std::chrono::steady_clock;

double secondsSince(Clock::time_point t0, Clock::time_point t) {
  return std::chrono::duration<double>(t - t0).count();
}

// `ready` means serving: with --startup-time 2 it is printed only once the delay is over, and a
// submit sent during startup (the endpoints are printed at once) is not answered before then.
TEST(ServeProcessTest, ReadyOnlyAfterTheStartupDelayAndNothingServedBefore) {
  constexpr double kDelay = 2.0;
  ServeProcess serve({"--startup-time", "2", "--speedup-ratio", "0"});
  // Endpoint lines come first (submit, then cancel, ...); read up to the two a client needs.
  ASSERT_EQ(serve.readEndpoints(Clock::now() + 10s, "cancel"), "cancel") << "no endpoint lines";
  // The submit goes out during startup unless the process printed `ready` at once.
  auto c = net::Client::connect({.submit_endpoint = serve.endpoints.at("submit"),
                                 .cancel_endpoint = serve.endpoints.at("cancel")});
  ASSERT_TRUE(c);
  ASSERT_TRUE((*c)->submit({.id = "early", .prompt = testing::prompt(4), .max_tokens = 2}));
  const auto sent = Clock::now();
  std::optional<Clock::time_point> ready_at;
  std::optional<Clock::time_point> acked_at;
  std::map<std::string, testing::Stream> streams;
  const auto deadline = Clock::now() + 20s;
  while ((!ready_at || !streams["early"].finish) && Clock::now() < deadline) {
    if (!ready_at) {
      // Short waits on stdout, interleaved with the client.
      if (auto l = serve.readEndpoints(Clock::now() + 10ms)) {
        ASSERT_EQ(*l, "ready");
        ready_at = Clock::now();
      }
    }
    auto m = (*c)->receive(10ms);
    ASSERT_TRUE(m) << m.error().message;
    if (*m) {
      testing::absorb(streams, std::move(**m), nullptr);
      if (streams["early"].acked && !acked_at) acked_at = Clock::now();
    }
  }
  ASSERT_TRUE(ready_at) << "no `ready` line";
  ASSERT_TRUE(acked_at) << "the early submit was never served";
  const double ready_s = secondsSince(serve.launched, *ready_at);
  const double acked_s = secondsSince(serve.launched, *acked_at);
  std::printf("startup %.1f s: submit sent at %.3f s, `ready` at %.3f s, ack at %.3f s\n", kDelay,
              secondsSince(serve.launched, sent), ready_s, acked_s);
  EXPECT_LT(secondsSince(serve.launched, sent), kDelay) << "the submit was not sent during startup";
  EXPECT_GE(ready_s, kDelay);
  EXPECT_GE(acked_s, kDelay) << "a submit sent during startup was served before the delay ended";
  EXPECT_EQ(streams["early"].tokens.size(), 2u);
  EXPECT_EQ(serve.stop(), 0);
}

// The start-up log line names the worker type, so a prefill or decode worker started by mistake
// as the other kind (or as an aggregated one) shows in its first line.
TEST(ServeProcessTest, StartupLogLineNamesTheWorkerType) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("mocker-serve-log-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  for (const auto& [args, expected] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{}, "mocker serve: 1 aggregated worker(s)"},
           {{"--worker-type", "prefill", "--handoff-endpoint", "tcp://127.0.0.1:*"},
            "mocker serve: 1 prefill worker(s)"},
           {{"--worker-type", "decode"}, "mocker serve: 1 decode worker(s)"},
       }) {
    SCOPED_TRACE(expected);
    const std::filesystem::path log = dir / "stderr";
    std::vector<std::string> all = {"--speedup-ratio", "0"};
    all.insert(all.end(), args.begin(), args.end());
    ServeProcess serve(all, log.string());
    // `ready` is printed after the start-up line was logged (and flushed: spdlog writes each
    // stderr line at once).
    ASSERT_TRUE(serve.awaitReady());
    std::ifstream in(log);
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(text.find(expected), std::string::npos) << text;
    EXPECT_EQ(serve.stop(), 0);
  }
  std::filesystem::remove_all(dir);
}

// Stats-only clients leave no state behind: 50,000 DEALERs, each with its own routing id, send
// one `stats`, `kv_snapshot` or undecodable message, read the reply and close. Afterwards the
// service holds no client entry (stats_reply.client_entries) and its RSS is back within 10 % of
// where it was.
TEST(ServeProcessTest, FiftyThousandShortLivedClientsLeaveNoClientEntries) {
  constexpr int kClients = 50000;
  constexpr int kWarmUp = 5000;
  constexpr int kWindow = 16;  // DEALERs open at once
  ServeProcess serve({"--speedup-ratio", "0"});
  ASSERT_TRUE(serve.awaitReady());
  const std::string endpoint = serve.endpoints.at("submit");
  auto observer = net::Client::connect({.submit_endpoint = endpoint,
                                        .cancel_endpoint = serve.endpoints.at("cancel"),
                                        .routing_id = "observer"});
  ASSERT_TRUE(observer);
  const auto entries = [&] {
    const auto r = testing::tryStats(**observer, 10s);
    EXPECT_TRUE(r && r->client_entries) << "no stats reply with client_entries";
    return r && r->client_entries ? *r->client_entries : ~std::uint64_t{0};
  };
  ASSERT_EQ(entries(), 0u);

  zmq::context_t ctx;
  const std::vector<std::byte> requests[3] = {
      protocol::encodeClientMessage(protocol::StatsRequest{}),
      protocol::encodeClientMessage(protocol::KvSnapshotRequest{}),
      {std::byte{0xc1}},  // never valid msgpack
  };
  struct Slot {
    std::optional<zmq::socket_t> socket;
    int index = -1;
  };
  const auto run = [&](int first, int count) {
    std::vector<Slot> slots(kWindow);
    int next = first;
    int done = 0;
    const auto open = [&](Slot& slot) {
      slot.index = next++;
      slot.socket.emplace(ctx, zmq::socket_type::dealer);
      slot.socket->set(zmq::sockopt::linger, 0);
      slot.socket->set(zmq::sockopt::routing_id, "short-lived-" + std::to_string(slot.index));
      slot.socket->connect(endpoint);
      const auto& bytes = requests[slot.index % 3];
      slot.socket->send(zmq::buffer(bytes.data(), bytes.size()));
    };
    for (Slot& slot : slots) {
      if (next < first + count) open(slot);
    }
    std::vector<zmq::pollitem_t> items;
    const auto deadline = Clock::now() + 120s;
    while (done < count && Clock::now() < deadline) {
      items.clear();
      for (Slot& slot : slots) {
        items.push_back({slot.socket ? slot.socket->handle() : nullptr, -1,
                         static_cast<short>(slot.socket ? ZMQ_POLLIN : 0), 0});
      }
      zmq::poll(items, 1000ms);
      for (std::size_t i = 0; i < slots.size(); ++i) {
        if (!(items[i].revents & ZMQ_POLLIN)) continue;
        Slot& slot = slots[i];
        zmq::message_t reply;
        ASSERT_TRUE(slot.socket->recv(reply, zmq::recv_flags::dontwait));
        auto m = protocol::decodeClientMessage(
            {static_cast<const std::byte*>(reply.data()), reply.size()});
        ASSERT_TRUE(m) << m.error().message;
        const int kind = slot.index % 3;
        EXPECT_TRUE((kind == 0 && std::holds_alternative<protocol::StatsReply>(*m)) ||
                    (kind == 1 && std::holds_alternative<protocol::KvSnapshotReply>(*m)) ||
                    (kind == 2 && std::holds_alternative<protocol::ErrorReply>(*m)))
            << "client " << slot.index << " got " << protocol::messageType(*m);
        slot.socket.reset();
        ++done;
        if (next < first + count) open(slot);
      }
    }
    ASSERT_EQ(done, count) << "clients left without a reply before the deadline";
  };
  // A warm-up round first, so that the baseline includes libzmq's and the allocator's
  // steady-state pools (their high-water mark under this load) rather than a cold process.
  const std::uint64_t rss_cold = serve.rssKib();
  ASSERT_NO_FATAL_FAILURE(run(0, kWarmUp));
  ASSERT_EQ(entries(), 0u);
  const std::uint64_t rss_before = serve.rssKib();
  const auto t0 = Clock::now();
  ASSERT_NO_FATAL_FAILURE(run(kWarmUp, kClients));
  const double seconds = secondsSince(t0, Clock::now());
  const std::uint64_t rss_peak_seen = serve.rssKib();
  // The clients have closed; the service notices each disconnect on its own I/O thread. Its
  // client entries must be zero at once (a reply-only client never had one) and its RSS settles.
  EXPECT_EQ(entries(), 0u);
  std::uint64_t rss_after = serve.rssKib();
  const auto settle = Clock::now() + 10s;
  while (rss_after > rss_before + rss_before / 10 && Clock::now() < settle) {
    (void)entries();  // a round trip: waits on the service instead of sleeping
    rss_after = serve.rssKib();
  }
  std::printf(
      "%d short-lived clients in %.1f s (%.0f/s): VmRSS %llu KiB cold, %llu KiB after "
      "%d warm-up clients, %llu KiB right after, %llu KiB settled (%+.1f %%)\n",
      kClients, seconds, kClients / seconds, static_cast<unsigned long long>(rss_cold),
      static_cast<unsigned long long>(rss_before), kWarmUp,
      static_cast<unsigned long long>(rss_peak_seen), static_cast<unsigned long long>(rss_after),
      100.0 * (static_cast<double>(rss_after) - static_cast<double>(rss_before)) /
          static_cast<double>(rss_before));
  EXPECT_LE(rss_after, rss_before + rss_before / 10);
  EXPECT_EQ(serve.stop(), 0);
}

}  // namespace
}  // namespace mocker::service
