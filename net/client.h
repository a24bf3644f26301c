// Client: the C++ client of `mocker serve` (protocol/README.md), used by the tools and tests.
//
// Two DEALER sockets that share one routing id: one to the submit ROUTER (submits, stats,
// kv_snapshot; receives acks, streamed outputs and errors) and one to the cancel ROUTER (cancels
// and their replies), so a cancel never queues behind this client's own submits and the service
// can match it to the client's requests.
//
//   auto client = Client::connect({.submit_endpoint = ..., .cancel_endpoint = ...});
//   client->submit({.id = "r1", .prompt = {...}, .max_tokens = 16});
//   while (auto msg = client->receive(std::chrono::seconds(1))) { ... }   // nullopt on timeout
//   client->cancel("r1");
//
// A caller driving several clients from one thread (the live replay) waits on all of them with
// Client::waitReadable and then drains each ready one with receiveReady() (or receive(0ms)).
//
// Owns its own ZeroMQ context. Not thread-safe: use one Client per thread.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/result.h"
#include "protocol/client.h"

namespace mocker::net {

struct ClientOptions {
  std::string submit_endpoint = "tcp://127.0.0.1:5555";
  /// Empty: no cancel socket (a client that only asks for stats or snapshots); cancel() then
  /// fails. Must differ from submit_endpoint: two connections with one routing id to one ROUTER
  /// race, and the ROUTER refuses whichever comes second.
  std::string cancel_endpoint = "tcp://127.0.0.1:5556";
  /// Routing id of both sockets; empty ⇒ a random 16-character id.
  std::string routing_id;
  int rcvhwm = 1000;  ///< ZMQ_RCVHWM of the submit socket (small values exercise backpressure)
  int sndhwm = 1000;
  int rcvbuf = -1;  ///< ZMQ_RCVBUF (kernel receive buffer) of the submit socket; -1 = OS default
  int linger_ms = 0;
  /// Sends never block: a send that would block (high-water mark reached, e.g. the service is
  /// gone) fails with IoError instead. Default: block like a plain ZeroMQ send.
  bool nonblocking_send = false;
  /// Refuse a submit-socket send while the submit connection is down (requires
  /// watch_connection): until its handshake succeeded, and from the moment the connection
  /// monitor reports it closed until a new handshake, a send fails at once ("would block (no
  /// connection to the service …)") instead of queueing for whichever process comes back on the
  /// endpoint. The state is the monitor's, read at each send, so a send in the instant between
  /// the close and its report still queues. Not ZMQ_IMMEDIATE: an immediate DEALER drops every
  /// message it received but the application had not read yet when the connection closes (the
  /// last tokens a dying service sent were lost). The cancel socket is unaffected.
  bool refuse_without_connection = false;
  /// CURVE (service/README.md, "Security"): the service's public key and this client's key
  /// pair, Z85 (40 characters each; `mocker keygen`). All empty: no CURVE; otherwise all three
  /// are required, and the public key must be on the service's allow-list.
  std::string curve_server_key;
  std::string curve_public_key;
  std::string curve_secret_key;
  /// Watch the submit connection (a ZeroMQ socket monitor): takeConnectionEvents() then reports
  /// when it closed (the service went away) and when a handshake with the service succeeded
  /// again (it came back), and waitReadable() wakes for those events too.
  bool watch_connection = false;
};

/// What happened to a watched submit connection (ClientOptions::watch_connection).
enum class ConnectionEvent : std::uint8_t {
  Closed,     ///< the connection closed (ZMQ_EVENT_DISCONNECTED); ZeroMQ keeps reconnecting
  Connected,  ///< a handshake with the service succeeded (ZMQ_EVENT_HANDSHAKE_SUCCEEDED)
};

class Client final {
 public:
  static Result<std::unique_ptr<Client>> connect(ClientOptions options);
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const std::string& routingId() const;

  /// Sends a message on the submit socket (submit, stats, kv_snapshot, or a cancel).
  Status send(const protocol::ClientMessage& message);
  Status submit(const protocol::SubmitRequest& request) { return send(request); }
  /// Sends a cancel on the cancel socket (for this client's request unless `client` is given).
  Status cancel(const std::string& id, std::optional<std::string> client = std::nullopt);
  /// Sends raw bytes on the submit socket (tests of malformed input).
  Status sendRaw(std::span<const std::byte> payload);

  /// The next message from either socket (cancel replies first), or nullopt after `timeout`.
  /// A message that is not exactly one frame, or does not decode, is an error. A zero timeout
  /// only looks at what is queued now (one non-blocking receive per socket, no poll call).
  Result<std::optional<protocol::ClientMessage>> receive(std::chrono::milliseconds timeout);

  /// For a loop around waitReadable: the next message from a socket that may hold one — one the
  /// last wait found holding a message, or that was sent on or not found empty since its last
  /// receive —, cancel replies first; nullopt when those are empty. A socket the wait found
  /// empty is not read (receive(0ms) would ask it: a mailbox check, two system calls): its
  /// ZMQ_FD announces its next message to the next waitReadable. Errors as receive().
  Result<std::optional<protocol::ClientMessage>> receiveReady();

  /// Waiting with one's own poll or event loop (the gateway's worker pool: one poll over every
  /// client, a syscall or two per wake-up instead of zmq_poll's mailbox check per socket): the
  /// ZeroMQ notification descriptors (ZMQ_FD) of the cancel socket ([0]) and the submit socket
  /// ([1]). libzmq's protocol: a descriptor becomes readable when something arrives for a socket
  /// that was found empty — not for each message — so wait on them only after drain() (then
  /// call drain with the sockets whose descriptor polled readable). A watched connection's
  /// events are not signalled on them (use waitReadable for those).
  std::array<int, 2> notifyFds() const;

  /// Receives every message queued now, without waiting, cancel replies first: on each socket
  /// `readable` marks ([0] cancel, [1] submit: its notifyFds() descriptor polled readable) and on
  /// each that may hold messages its descriptor will not announce (sent on, or not found empty,
  /// since its last receive). Hands each message, or its error as receive() reports it, to
  /// `sink`, in order; returns how many it handed. A socket whose receive fails is left after
  /// that error (and looked at again by the next drain).
  std::size_t drain(std::array<bool, 2> readable,
                    const std::function<void(Result<protocol::ClientMessage>&&)>& sink);

  /// The watched submit connection's events since the last call, in order (empty without
  /// ClientOptions::watch_connection). Non-blocking.
  std::vector<ConnectionEvent> takeConnectionEvents();

  /// Waits up to `timeout` (0 = just check) until at least one of `clients` has a message to
  /// receive; returns the indices (into `clients`) of those that do, ascending — empty on
  /// timeout; a watched connection's event counts as readable, also one a send already read from
  /// the monitor and takeConnectionEvents() has not returned yet. `wake_fd` (>= 0: e.g. a timerfd)
  /// also ends the wait when it becomes readable, so a caller can wake at a sub-millisecond time;
  /// the caller reads it. REQUIRES: non-null pointers.
  static Result<std::vector<std::size_t>> waitReadable(std::span<Client* const> clients,
                                                       std::chrono::milliseconds timeout,
                                                       int wake_fd = -1);

 private:
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace mocker::net
