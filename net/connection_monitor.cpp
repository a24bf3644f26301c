// Connection-close events of a socket, for the serve loop (contract in connection_monitor.h).
#include "net/connection_monitor.h"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>

#include <poll.h>

#include "net/zmq_io.h"

namespace mocker::net {

ConnectionMonitor::ConnectionMonitor(zmq::socket_t&& events)
    : events_(std::move(events)), notify_fd_(events_.get(zmq::sockopt::fd)) {}

bool ConnectionMonitor::mayHaveEvents() {
  if (!drained_) return true;
  ::pollfd item{notify_fd_, POLLIN, 0};
  return ::poll(&item, 1, 0) != 0;  // readable, or the poll failed: let a drain tell
}

Result<std::unique_ptr<ConnectionMonitor>> ConnectionMonitor::create(zmq::context_t& context,
                                                                     zmq::socket_t& watched,
                                                                     const std::string& name,
                                                                     int event_mask) {
  // Unique in the process: several servers may share one context (a fleet), and an inproc
  // name is bound once per context.
  static std::atomic<std::uint64_t> next_id{0};
  const std::string endpoint =
      "inproc://mocker-monitor-" + name + "-" + std::to_string(next_id.fetch_add(1));
  if (zmq_socket_monitor(watched.handle(), endpoint.c_str(), event_mask) != 0) {
    return Error{ErrorCode::IoError,
                 "connection monitor '" + name + "': " + zmq_strerror(zmq_errno())};
  }
  try {
    zmq::socket_t events(context, zmq::socket_type::pair);
    events.set(zmq::sockopt::linger, 0);
    events.connect(endpoint);
    return std::unique_ptr<ConnectionMonitor>(new ConnectionMonitor(std::move(events)));
  } catch (const zmq::error_t& e) {
    return Error{ErrorCode::IoError, "connection monitor '" + name + "': " + e.what()};
  }
}

bool ConnectionMonitor::drainEvents(std::vector<std::pair<std::uint16_t, std::uint32_t>>& events) {
  std::vector<zmq::message_t> parts;
  RecvOutcome got;
  while ((got = tryRecvMultipart(events_, parts)) == RecvOutcome::Received) {
    // Frame 0: u16 event, u32 value (the descriptor for DISCONNECTED), native byte order.
    if (parts.size() != 2 || parts[0].size() != 6) continue;
    std::uint16_t event = 0;
    std::uint32_t value = 0;
    std::memcpy(&event, parts[0].data(), sizeof event);
    std::memcpy(&value, static_cast<const char*>(parts[0].data()) + 2, sizeof value);
    events.emplace_back(event, value);
  }
  drained_ = got == RecvOutcome::Empty;
  return drained_;
}

void ConnectionMonitor::drainClosed(std::vector<int>& fds) {
  std::vector<std::pair<std::uint16_t, std::uint32_t>> events;
  drainEvents(events);
  for (const auto& [event, value] : events) {
    if (event == ZMQ_EVENT_DISCONNECTED) fds.push_back(static_cast<int>(value));
  }
}

int connectionFd(const zmq::message_t& message) { return zmq_msg_get(message.handle(), ZMQ_SRCFD); }

std::optional<std::string> peerUserId(const zmq::message_t& message) {
  const char* v = zmq_msg_gets(message.handle(), "User-Id");
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

}  // namespace mocker::net
