// Test fixture for the live service: runs a real service::Server on a thread with ephemeral
// loopback endpoints, and helpers that wait on real sockets with deadlines (never sleeps).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <thread>

#include <spdlog/spdlog.h>

#include "net/client.h"
#include "service/server.h"

namespace mocker::service::testing {

/// How many times slower than an optimised build this build runs the service: sanitizer builds
/// (GCC and Clang define these macros under -fsanitize) check every access, and their invariant
/// checks (no NDEBUG) run too. Volume tests scale their deadlines, and paces that must cover a
/// client's whole submit burst, by it; nothing else changes.
#if defined(__SANITIZE_THREAD__)
inline constexpr int kSlowdown = 16;
#elif defined(__SANITIZE_ADDRESS__)
inline constexpr int kSlowdown = 8;
#else
inline constexpr int kSlowdown = 1;
#endif

using namespace std::chrono_literals;

/// Small engine, no pacing, every endpoint ephemeral, publishers off unless a test turns them on.
inline ServiceConfig testConfig() {
  ServiceConfig c;
  c.engine.num_gpu_blocks = 256;
  c.engine.block_size = 4;
  c.engine.speedup_ratio = 0;
  for (EndpointConfig* ep : {&c.endpoints.submit, &c.endpoints.cancel, &c.endpoints.kv_events,
                             &c.endpoints.kv_replay, &c.endpoints.fpm, &c.endpoints.handoff}) {
    ep->endpoint = "tcp://127.0.0.1:*";
  }
  c.kv_events.enabled = false;
  c.fpm.enabled = false;
  c.endpoints.http.enabled = false;  // on (ephemeral port) in the tests of /metrics
  c.endpoints.http.endpoint = "127.0.0.1:0";
  c.service.linger_ms = 0;
  return c;
}

/// testConfig() plus the knobs the live tests turn, read as one line per test:
///   LiveService svc(TestConfig().paced(/*prefill_ms=*/1, /*decode_ms=*/5).maxNumSeqs(2).build());
class TestConfig {
 public:
  /// Passes take their fixed modelled duration in wall time (speedup 1), so a request stays in
  /// flight long enough to be observed, cancelled or stopped.
  TestConfig& paced(double prefill_ms, double decode_ms) {
    config_.engine.speedup_ratio = 1;
    config_.engine.timing_model = engine::TimingModelKind::Fixed;
    config_.engine.fixed_prefill_ms = prefill_ms;
    config_.engine.fixed_decode_ms = decode_ms;
    return *this;
  }
  TestConfig& maxNumSeqs(std::uint32_t n) {
    config_.engine.max_num_seqs = n;
    return *this;
  }
  TestConfig& numGpuBlocks(std::uint32_t n) {
    config_.engine.num_gpu_blocks = n;
    return *this;
  }
  TestConfig& dpSize(std::uint32_t n) {
    config_.engine.dp_size = n;
    return *this;
  }
  TestConfig& allowEmptyOutput() {
    config_.engine.allow_empty_output = true;
    return *this;
  }
  TestConfig& blockSize(std::uint32_t n) {
    config_.engine.block_size = n;
    return *this;
  }
  TestConfig& maxNumBatchedTokens(std::uint32_t n) {
    config_.engine.max_num_batched_tokens = n;
    return *this;
  }
  /// service.max_buffered_outputs: undelivered output signals a request may have waiting in
  /// the service (beyond what ZeroMQ holds) before it is abandoned.
  TestConfig& maxBufferedOutputs(std::uint32_t n) {
    config_.service.max_buffered_outputs = n;
    return *this;
  }
  /// The submit ROUTER's send high-water mark: how many messages a client may fall behind.
  TestConfig& submitSndhwm(std::uint32_t n) {
    config_.service.submit_sndhwm = n;
    return *this;
  }
  /// Submits are read only while fewer than `n` requests wait in the engine; the rest queue in
  /// ZeroMQ without bound (submit_rcvhwm unlimited).
  TestConfig& submitBacklog(std::uint32_t n) {
    config_.service.max_submit_backlog = n;
    config_.service.submit_rcvhwm = 0;
    return *this;
  }
  ServiceConfig build() const { return config_; }

 private:
  ServiceConfig config_ = testConfig();
};

class LiveService {
 public:
  /// Without `running`, the sockets are bound (clients can connect and send; ZeroMQ queues
  /// what they send) but nothing is read until start().
  explicit LiveService(ServiceConfig config, ServerOptions options = {}, bool running = true) {
    spdlog::set_level(spdlog::level::warn);
    auto server = Server::create(std::move(config), options);
    EXPECT_TRUE(server.has_value()) << (server ? "" : server.error().toString());
    if (!server) return;
    server_ = std::move(*server);
    if (running) start();
  }
  void start() {
    if (server_ && !thread_.joinable()) thread_ = std::thread([this] { status_ = server_->run(); });
  }
  ~LiveService() { stop(); }

  /// Stops the server and waits for run() to return.
  void stop() {
    if (thread_.joinable()) {
      server_->requestStop();
      thread_.join();
      EXPECT_TRUE(status_.has_value());
    }
  }

  const BoundEndpoints& endpoints() const { return server_->endpoints(); }
  const Server& server() const { return *server_; }

  std::unique_ptr<net::Client> client(net::ClientOptions options = {}) const {
    options.submit_endpoint = endpoints().submit;
    options.cancel_endpoint = endpoints().cancel;
    auto c = net::Client::connect(std::move(options));
    EXPECT_TRUE(c.has_value());
    return std::move(*c);
  }

 private:
  std::unique_ptr<Server> server_;
  std::thread thread_;
  Status status_;
};

/// Everything one request's stream delivered.
struct Stream {
  std::vector<std::uint32_t> tokens;
  std::vector<std::uint32_t> indices;  // index of each output entry
  std::optional<protocol::FinishReason> finish;
  std::string reason;
  bool acked = false;
  std::optional<std::string> rejected;
  std::optional<std::uint32_t> cached_tokens;  // prefix-cache hits, from the first output
};

/// Folds one received message into `streams` (outputs, acks, rejects); anything else goes to
/// `others` when given.
inline void absorb(std::map<std::string, Stream>& streams, protocol::ClientMessage&& msg,
                   std::vector<protocol::ClientMessage>* others) {
  if (auto* b = std::get_if<protocol::OutputBatch>(&msg)) {
    for (const auto& o : b->outputs) {
      Stream& s = streams[o.id];
      EXPECT_FALSE(s.finish.has_value()) << "output after the terminal for " << o.id;
      EXPECT_EQ(o.index, s.tokens.size()) << "out-of-order output for " << o.id;
      s.indices.push_back(o.index);
      s.tokens.insert(s.tokens.end(), o.tokens.begin(), o.tokens.end());
      if (o.cached_tokens) s.cached_tokens = o.cached_tokens;
      if (o.finish) {
        s.finish = o.finish;
        s.reason = o.reason;
      }
    }
  } else if (auto* a = std::get_if<protocol::SubmitAck>(&msg)) {
    streams[a->id].acked = true;
  } else if (auto* r = std::get_if<protocol::SubmitReject>(&msg)) {
    streams[r->id].rejected = r->reason;
  } else if (others) {
    others->push_back(std::move(msg));
  }
}

/// Receives on `client` until every id in `ids` has ended (finish or reject) or the deadline
/// passes; other messages (cancel replies, errors) are appended to `others`. `streams` may carry
/// what was already received (outputs of other requests are recorded too, so pass the result on
/// to a later call that waits for them).
inline std::map<std::string, Stream> collect(net::Client& client,
                                             const std::vector<std::string>& ids,
                                             std::vector<protocol::ClientMessage>* others = nullptr,
                                             std::chrono::milliseconds timeout = 10s,
                                             std::map<std::string, Stream> streams = {}) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const auto done = [&] {
    for (const auto& id : ids) {
      const Stream& s = streams[id];
      if (!s.finish && !s.rejected) return false;
    }
    return true;
  };
  while (!done() && std::chrono::steady_clock::now() < deadline) {
    auto msg = client.receive(50ms);
    if (!msg) {
      ADD_FAILURE() << "undecodable message: " << msg.error().message;
      break;
    }
    if (*msg) absorb(streams, std::move(**msg), others);
  }
  EXPECT_TRUE(done()) << "streams did not end before the deadline";
  return streams;
}

/// Receives until `id` is acknowledged (or rejected), folding everything into `streams`.
inline bool awaitAck(net::Client& client, const std::string& id,
                     std::map<std::string, Stream>& streams,
                     std::vector<protocol::ClientMessage>* others = nullptr,
                     std::chrono::milliseconds timeout = 10s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!streams[id].acked && !streams[id].rejected &&
         std::chrono::steady_clock::now() < deadline) {
    auto msg = client.receive(50ms);
    if (msg && *msg) absorb(streams, std::move(**msg), others);
  }
  return streams[id].acked;
}

/// Waits for the next message of type T (skipping others into `skipped`), or fails.
template <typename T>
std::optional<T> awaitMessage(net::Client& client, std::chrono::milliseconds timeout = 10s,
                              std::vector<protocol::ClientMessage>* skipped = nullptr) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    auto msg = client.receive(50ms);
    if (!msg || !*msg) continue;
    if (auto* t = std::get_if<T>(&**msg)) return *t;
    if (skipped) skipped->push_back(std::move(**msg));
  }
  ADD_FAILURE() << "no message of the expected type before the deadline";
  return std::nullopt;
}

/// One stats round trip; nullopt if no reply came within `timeout`.
inline std::optional<protocol::StatsReply> tryStats(net::Client& client,
                                                    std::chrono::milliseconds timeout) {
  if (!client.send(protocol::StatsRequest{}).has_value()) return std::nullopt;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    auto msg = client.receive(50ms);
    if (!msg || !*msg) continue;
    if (auto* r = std::get_if<protocol::StatsReply>(&**msg)) return *r;
  }
  return std::nullopt;
}

inline protocol::StatsReply stats(net::Client& client) {
  auto r = tryStats(client, 10s);
  EXPECT_TRUE(r.has_value()) << "no stats reply before the deadline";
  return r.value_or(protocol::StatsReply{});
}

/// Polls stats until `pred` holds or the deadline passes. A round trip that gets no reply within
/// 2 s is retried (and counted in the failure message) rather than failing at once.
template <typename Pred>
bool eventually(net::Client& client, Pred pred, std::chrono::milliseconds timeout = 10s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int unanswered = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    const auto r = tryStats(client, 2s);
    if (!r) {
      ++unanswered;
      continue;
    }
    if (!r->ranks.empty() && pred(*r)) return true;
  }
  ADD_FAILURE() << "condition not reached before the deadline (" << unanswered
                << " stats requests unanswered)";
  return false;
}

inline std::vector<std::uint32_t> prompt(std::uint32_t n, std::uint32_t first = 1) {
  std::vector<std::uint32_t> p(n);
  for (std::uint32_t i = 0; i < n; ++i) p[i] = first + i;
  return p;
}

}  // namespace mocker::service::testing
