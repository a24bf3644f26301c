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
  void drainEvents(std::vector<std::pair<std::uint16_t, std::uint32_t>>& events);

 private:
  explicit ConnectionMonitor(zmq::socket_t&& events) : events_(std::move(events)) {}
  zmq::socket_t events_;  // PAIR connected to the monitor endpoint
};

/// The descriptor of the connection a received message came from (ZMQ_SRCFD), or -1.
int connectionFd(const zmq::message_t& message);

/// The CURVE identity of the peer a received message came from: the "User-Id" metadata the ZAP
/// handler set (the client's Z85 public key), or nullopt (no CURVE, no ZAP).
std::optional<std::string> peerUserId(const zmq::message_t& message);

}  // namespace mocker::net
