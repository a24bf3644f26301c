// ZeroMQ adapters of the publishers: ZmqPubSink (a FrameSink over a PUB socket, for KV events
// and forward-pass metrics) and ZmqReplayServer (the KV-event replay ROUTER, docs/wire.md).
//
// Endpoints: both sockets BIND unless `connect = true` is configured (we do not copy vLLM's
// guess-from-the-address rule; set connect for consumers that bind their SUB, such as
// llm-d's older indexer, or for a replay ROUTER that dials a fixed broker). The caller applies
// the DP-rank offset (base/endpoint.h, offsetEndpoint) first.
//
// Each object owns its socket and must be used by one thread only (the one that created it);
// neither copyable nor movable. Sends never block. The zmq::context_t must outlive them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>

#include "base/result.h"
#include "publishers/frame_sink.h"

namespace zmq {
class context_t;
class socket_t;
}  // namespace zmq

namespace mocker::publishers {

class KvEventPublisher;

/// Binds `socket` to `endpoint`, or connects it with `connect`; returns the endpoint as resolved
/// (a bound wildcard or port 0 becomes the address and port the kernel chose; a connect
/// returns `endpoint` unchanged). Throws zmq::error_t like bind/connect. The one opener of every
/// configurable socket (the publishers' and the service's).
std::string openEndpoint(zmq::socket_t& socket, const std::string& endpoint, bool connect);

struct ZmqPubConfig {
  std::string endpoint;  ///< e.g. "tcp://*:5557", "tcp://127.0.0.1:*", "ipc:///tmp/kv"
  bool connect = false;  ///< connect instead of bind
  int sndhwm = 100'000;  ///< ZMQ_SNDHWM; beyond it PUB drops silently (consumers see a gap)
  int linger_ms = 1000;  ///< ZMQ_LINGER at close
  /// Called on the new socket before bind/connect, e.g. to set CURVE options (may throw
  /// zmq::error_t, reported like a bind error). Empty: nothing.
  std::function<void(zmq::socket_t&)> configure;
};

class ZmqPubSink final : public FrameSink {
 public:
  /// Creates the PUB socket, sets options and binds/connects. Errors name the endpoint.
  static Result<std::unique_ptr<ZmqPubSink>> create(zmq::context_t& context,
                                                    const ZmqPubConfig& config);
  ~ZmqPubSink() override;
  ZmqPubSink(const ZmqPubSink&) = delete;
  ZmqPubSink& operator=(const ZmqPubSink&) = delete;

  /// Non-blocking multipart send. Dropped only if libzmq refuses the first part (EAGAIN or an
  /// error); a PUB at its high-water mark drops silently and reports Sent. An error (not EAGAIN)
  /// is counted and kept for takeError().
  SendResult send(std::span<const Frame> frames) override;

  /// Send errors so far (any zmq error other than EAGAIN), e.g. ETERM once the context shuts down.
  std::uint64_t numErrors() const { return num_errors_; }
  /// The first error since the last call, naming the endpoint; the owner logs it.
  std::optional<std::string> takeError() { return std::exchange(pending_error_, std::nullopt); }

  /// The resolved endpoint (ZMQ_LAST_ENDPOINT: a wildcard port becomes the real one).
  const std::string& endpoint() const { return endpoint_; }

 private:
  explicit ZmqPubSink(std::unique_ptr<zmq::socket_t> socket, std::string endpoint);
  std::unique_ptr<zmq::socket_t> socket_;
  std::string endpoint_;
  std::uint64_t num_errors_ = 0;
  std::optional<std::string> pending_error_;
};

struct ZmqReplayConfig {
  std::string endpoint;
  bool connect = false;  ///< connect (to a peer that binds, e.g. a replay broker) instead of bind
  int sndhwm = 100'000;  ///< a client that does not read loses replies beyond this
  int linger_ms = 1000;
  std::int64_t max_request_bytes = 64;  ///< ZMQ_MAXMSGSIZE: larger frames disconnect the peer
  /// Called on the new socket before bind, e.g. to set CURVE options. Empty: nothing.
  std::function<void(zmq::socket_t&)> configure;
};

/// What one ZmqReplayServer::serviceReadable() call did.
struct ReplayServiceResult {
  std::size_t num_read = 0;          ///< request messages read (well-formed or not)
  std::size_t num_replies_sent = 0;  ///< reply messages handed to ZeroMQ
  std::size_t num_replies_dropped = 0;
  /// A receive or send failed with something other than "would block" / "peer gone" (the call
  /// stopped there); the text names the operation and the endpoint. The caller logs it.
  std::optional<std::string> error;
};

// The ROUTER is in ROUTER_MANDATORY mode, so a reply that cannot be delivered is seen and
// counted instead of vanishing: the requester is gone (EHOSTUNREACH, numRepliesUnroutable) or
// not reading (its pipe is at `sndhwm`). Once one reply of a request is not sent, the rest of
// that request's replies (end marker included) are dropped too, so a requester never sees a
// replay with a hole in it: it times out and asks again. Every dropped reply message counts in
// numRepliesDropped.
class ZmqReplayServer {
 public:
  /// Binds (or connects) the ROUTER. `publisher` must outlive the server.
  static Result<std::unique_ptr<ZmqReplayServer>> create(zmq::context_t& context,
                                                         const ZmqReplayConfig& config,
                                                         KvEventPublisher& publisher);
  ~ZmqReplayServer();
  ZmqReplayServer(const ZmqReplayServer&) = delete;
  ZmqReplayServer& operator=(const ZmqReplayServer&) = delete;

  /// The socket handle for zmq_poll (zmq_pollitem_t::socket), polled for ZMQ_POLLIN.
  void* pollHandle() const;

  /// Reads every pending request without blocking, answers each through the publisher and
  /// sends the replies without blocking.
  ReplayServiceResult serviceReadable();

  /// The resolved endpoint (bound: ZMQ_LAST_ENDPOINT; connected: as configured).
  const std::string& endpoint() const { return endpoint_; }
  /// Reply messages not sent, for any reason (totals over the server's life).
  std::uint64_t numRepliesDropped() const { return num_replies_dropped_; }
  /// Of those, the replies whose requester was gone (EHOSTUNREACH) when its first was sent.
  std::uint64_t numRepliesUnroutable() const { return num_replies_unroutable_; }
  /// Receive or send errors other than would-block and unroutable.
  std::uint64_t numErrors() const { return num_errors_; }

 private:
  enum class SendOutcome { Sent, WouldBlock, Unroutable, Failed };
  ZmqReplayServer(std::unique_ptr<zmq::socket_t> socket, std::string endpoint,
                  KvEventPublisher& publisher);
  SendOutcome sendReply(const Message& reply, std::string& error);
  std::unique_ptr<zmq::socket_t> socket_;
  std::string endpoint_;
  KvEventPublisher* publisher_;
  std::uint64_t num_replies_dropped_ = 0;
  std::uint64_t num_replies_unroutable_ = 0;
  std::uint64_t num_errors_ = 0;
};

}  // namespace mocker::publishers
