// Non-blocking ZeroMQ receive/send with every outcome as a value (contract in zmq_io.h).
#include "net/zmq_io.h"

#include "base/enum_names.h"

#include <algorithm>
#include <cerrno>
#include <iterator>
#include <zmq_addon.hpp>

namespace mocker::net {
namespace {

constexpr EnumNames<SendOutcome, 4> kSendOutcomes{{{"sent", SendOutcome::Sent},
                                                   {"would_block", SendOutcome::WouldBlock},
                                                   {"unroutable", SendOutcome::Unroutable},
                                                   {"failed", SendOutcome::Failed}}};

SendOutcome classify(const zmq::error_t& e, std::string* error) {
  if (e.num() == EAGAIN) return SendOutcome::WouldBlock;
  if (e.num() == EHOSTUNREACH) return SendOutcome::Unroutable;
  if (error) *error = e.what();
  return SendOutcome::Failed;
}

}  // namespace

RecvOutcome tryRecvMultipart(zmq::socket_t& socket, std::vector<zmq::message_t>& parts,
                             std::string* error) {
  parts.clear();
  try {
    const auto got =
        zmq::recv_multipart(socket, std::back_inserter(parts), zmq::recv_flags::dontwait);
    return got ? RecvOutcome::Received : RecvOutcome::Empty;
  } catch (const zmq::error_t& e) {
    if (error) *error = e.what();
    parts.clear();
    return RecvOutcome::Failed;
  }
}

SendOutcome trySendMultipart(zmq::socket_t& socket, std::span<const zmq::const_buffer> frames,
                             std::string* error) {
  if (frames.empty()) return SendOutcome::Sent;
  try {
    for (std::size_t i = 0; i < frames.size(); ++i) {
      const bool last = i + 1 == frames.size();
      auto flags = last ? zmq::send_flags::none : zmq::send_flags::sndmore;
      if (i == 0) flags = flags | zmq::send_flags::dontwait;
      // Frames after the first cannot block: ZeroMQ accepts a multipart message whole.
      if (!socket.send(frames[i], flags)) return SendOutcome::WouldBlock;
    }
    return SendOutcome::Sent;
  } catch (const zmq::error_t& e) {
    return classify(e, error);
  }
}

SendOutcome trySendRouted(zmq::socket_t& router, std::string_view routing_id, bool delimiter,
                          zmq::message_t&& payload, std::string* error) {
  try {
    // With ROUTER_MANDATORY the routing-id frame reports EAGAIN (peer's pipe full) or
    // EHOSTUNREACH (peer gone); once it is accepted the rest of the message cannot block.
    if (!router.send(zmq::buffer(routing_id),
                     zmq::send_flags::sndmore | zmq::send_flags::dontwait)) {
      return SendOutcome::WouldBlock;
    }
    const bool rest_sent =
        (!delimiter || router.send(zmq::message_t(), zmq::send_flags::sndmore)) &&
        router.send(std::move(payload), zmq::send_flags::none);
    if (!rest_sent) {  // cannot happen: ZeroMQ queues the rest of an accepted message
      if (error) *error = "message cut short after its routing id";
      return SendOutcome::Failed;
    }
    return SendOutcome::Sent;
  } catch (const zmq::error_t& e) {
    return classify(e, error);
  }
}

RoutedEnvelope splitRoutedEnvelope(const std::vector<zmq::message_t>& parts,
                                   std::size_t max_payload_bytes) {
  RoutedEnvelope out;
  if (parts.empty()) {
    out.error = Error{ErrorCode::Corruption, "empty message"};
    return out;
  }
  out.routing_id = parts.front().to_string();
  out.delimiter = parts.size() == 3 && parts[1].size() == 0;
  if (parts.size() != 2 && !out.delimiter) {
    out.error =
        Error{ErrorCode::Corruption, "expected one payload frame after the routing id (got " +
                                         std::to_string(parts.size() - 1) + " frames)"};
    return out;
  }
  const zmq::message_t& p = parts.back();
  if (p.size() > max_payload_bytes) {
    out.error = Error{ErrorCode::InvalidArgument, "message of " + std::to_string(p.size()) +
                                                      " bytes exceeds the limit of " +
                                                      std::to_string(max_payload_bytes)};
    return out;
  }
  out.payload = {static_cast<const std::byte*>(p.data()), p.size()};
  return out;
}

std::string_view sendOutcomeName(SendOutcome outcome) { return enumName(kSendOutcomes, outcome); }

PollSet::Slot PollSet::add(void* socket_handle, bool wanted, Wake wake) {
  items_.push_back({.socket = socket_handle, .wanted = wanted, .wake = wake});
  return items_.size() - 1;
}

PollSet::Slot PollSet::addFd(int fd) {
  items_.push_back({.fd = fd});
  return items_.size() - 1;
}

bool PollSet::askReadable(Item& item) {
  int events = 0;
  std::size_t size = sizeof events;
  ++num_event_queries_;
  if (zmq_getsockopt(item.socket, ZMQ_EVENTS, &events, &size) != 0) throw zmq::error_t();
  item.readable = (events & ZMQ_POLLIN) != 0;
  return item.readable;
}

void PollSet::poll(std::chrono::milliseconds timeout) {
  // Before the wait: each socket whose readiness its descriptor may not show.
  bool ready = false;
  fds_.clear();
  for (Item& item : items_) {
    item.readable = false;
    if (item.socket == nullptr) {
      fds_.push_back({item.fd, POLLIN, 0});
      continue;
    }
    if (!item.wanted) {
      fds_.push_back({-1, 0, 0});  // a negative descriptor: poll() skips it
      continue;
    }
    int fd = -1;
    std::size_t size = sizeof fd;
    if (zmq_getsockopt(item.socket, ZMQ_FD, &fd, &size) != 0) throw zmq::error_t();
    fds_.push_back({fd, POLLIN, 0});
    const bool was_readable = std::find(readable_last_.begin(), readable_last_.end(),
                                        item.socket) != readable_last_.end();
    if (item.wake == Wake::Always || was_readable) ready = askReadable(item) || ready;
  }
  // One wait, none when something is readable already (the descriptors are still read).
  const int ms = ready ? 0
                       : static_cast<int>(std::min<std::chrono::milliseconds::rep>(
                             timeout.count() < 0 ? -1 : timeout.count(), 1 << 30));
  const int rc = ::poll(fds_.data(), static_cast<nfds_t>(fds_.size()), ms);
  if (rc < 0 && errno != EINTR) throw zmq::error_t();
  readable_last_.clear();
  for (std::size_t i = 0; i < items_.size(); ++i) {
    Item& item = items_[i];
    const bool fired = rc > 0 && (fds_[i].revents & POLLIN) != 0;
    if (item.socket == nullptr) {
      item.readable = fired;
    } else if (item.wanted && fired && !item.readable) {
      askReadable(item);  // its mailbox signalled: commands may have made it readable
    }
    if (item.readable && item.wake == Wake::OnSignal) readable_last_.push_back(item.socket);
  }
}

bool PollSet::readable(Slot slot) const { return slot < items_.size() && items_[slot].readable; }

bool PollSet::anyReadable(Range range) const {
  for (Slot s = range.begin; s < range.end; ++s) {
    if (readable(s)) return true;
  }
  return false;
}

}  // namespace mocker::net
