// ConnectionMonitor: tells the serve loop which connections of a socket have closed, so that a
// client's streams end with its connection and can never flow to another peer that later takes
// the same routing id (service/README.md, "Ownership").
//
// A ZeroMQ ROUTER addresses peers by routing id only; when a peer's connection closes, another
// peer may connect with the same routing id and the ROUTER will hand it whatever is sent to that
// id. The loop therefore records, per client, the file descriptor of the connection its messages
// arrived on (connectionFd), and this monitor (zmq_socket_monitor, ZMQ_EVENT_DISCONNECTED)
// reports the descriptors of connections that closed. Ordering: libzmq emits the event before it
// tears down the peer's pipe, so a drain done after receiving a message sees the close of every
// earlier connection that had the same descriptor.
//
// Not thread-safe. Owned and used by the service thread only (like the socket it watches).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "base/result.h"

namespace mocker::net {

class ConnectionMonitor final {
 public:
  /// Starts monitoring `watched` (inproc://mocker-monitor-<name> in `context`) for the
  /// ZMQ_EVENT_* of `events` (default: closed connections only).
  static Result<std::unique_ptr<ConnectionMonitor>> create(zmq::context_t& context,
                                                           zmq::socket_t& watched,
                                                           const std::string& name,
                                                           int events = ZMQ_EVENT_DISCONNECTED);
  ConnectionMonitor(const ConnectionMonitor&) = delete;
  ConnectionMonitor& operator=(const ConnectionMonitor&) = delete;

  /// For zmq_poll: readable when a connection closed.
  void* pollHandle() { return events_.handle(); }

  /// Appends the descriptors of the connections that closed since the last call (non-blocking).
  void drainClosed(std::vector<int>& fds);

  /// Appends every event reported since the last call (non-blocking): ZMQ_EVENT_* and its value.
  /// Returns true when it read until the socket was empty (then its ZMQ_FD announces the next
  /// event), false when a receive failed first.
  bool drainEvents(std::vector<std::pair<std::uint16_t, std::uint32_t>>& events);

  /// Whether events may be waiting to be drained: false only when the last drain read the socket
  /// until it was empty and its notification descriptor (ZMQ_FD) has not become readable since —
  /// one poll() of the descriptor, where a receive that finds nothing costs libzmq's mailbox
  /// check (a getpid and a poll). Exact because every drain reads until empty: the next event
  /// then signals the descriptor. (A fresh socket's first event may not: true until a drain.)
  /// A ZMQ_EVENTS query of pollHandle() that finds an event takes the descriptor's signal: drain
  /// after it without asking this.
  bool mayHaveEvents();

 private:
  explicit ConnectionMonitor(zmq::socket_t&& events);
  zmq::socket_t events_;  // PAIR connected to the monitor endpoint
  int notify_fd_ = -1;    // its ZMQ_FD
  bool drained_ = false;  // the last drain read it until empty
};

/// The descriptor of the connection a received message came from (ZMQ_SRCFD), or -1.
int connectionFd(const zmq::message_t& message);

/// The CURVE identity of the peer a received message came from: the "User-Id" metadata the ZAP
/// handler set (the client's Z85 public key), or nullopt (no CURVE, no ZAP).
std::optional<std::string> peerUserId(const zmq::message_t& message);

}  // namespace mocker::net
