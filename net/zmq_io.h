// Non-blocking ZeroMQ I/O with every outcome as a value: the receive loops of `mocker serve` and
// `mocker index` and their routed replies go through these few functions instead of each writing
// its own try/catch around recv_multipart and send.
//
//   std::vector<zmq::message_t> parts;
//   while (true) {
//     const RecvOutcome got = tryRecvMultipart(socket, parts);
//     if (got == RecvOutcome::Empty) break;
//     if (got == RecvOutcome::Failed) { log(lastIoError()); break; }
//     handle(parts);
//   }
//
// Or with a budget: drainSocket(socket, parts, 64, handle, onError).
//
// Thread-compatible: a socket is used by one thread at a time, as ZeroMQ requires.
#pragma once

#include <poll.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>
#include <zmq.hpp>

#include "base/result.h"

namespace mocker::net {

/// What a non-blocking receive found.
enum class RecvOutcome {
  Received,  ///< one whole multipart message is in `parts`
  Empty,     ///< nothing queued (EAGAIN)
  Failed,    ///< the socket reported an error (text in `error`, when given)
};

/// What a non-blocking send did. Nothing of the message was sent unless it is Sent.
enum class SendOutcome {
  Sent,
  WouldBlock,  ///< the peer's pipe is full (HWM reached); try again later
  Unroutable,  ///< ROUTER_MANDATORY: no peer with that routing id (EHOSTUNREACH)
  Failed,      ///< any other error (text in `error`, when given)
};

/// Receives one multipart message without blocking into `parts` (cleared first).
[[nodiscard]] RecvOutcome tryRecvMultipart(zmq::socket_t& socket,
                                           std::vector<zmq::message_t>& parts,
                                           std::string* error = nullptr);

/// Receives up to `budget` messages (budget < 0: until the socket is empty), calling
/// `on_message(parts)` for each. On a receive error calls `on_error(text)` and stops. Returns
/// the number of messages handed to `on_message`.
template <typename OnMessage, typename OnError>
int drainSocket(zmq::socket_t& socket, std::vector<zmq::message_t>& parts, int budget,
                OnMessage&& on_message, OnError&& on_error) {
  int n = 0;
  std::string error;
  while (budget < 0 || n < budget) {
    const RecvOutcome got = tryRecvMultipart(socket, parts, &error);
    if (got == RecvOutcome::Empty) break;
    if (got == RecvOutcome::Failed) {
      on_error(std::string_view(error));
      break;
    }
    ++n;
    on_message(parts);
  }
  return n;
}

/// Sends `frames` as one multipart message without blocking. The first frame decides: if it is
/// not accepted nothing is sent (WouldBlock / Unroutable / Failed); once it is, ZeroMQ queues the
/// rest atomically.
[[nodiscard]] SendOutcome trySendMultipart(zmq::socket_t& socket,
                                           std::span<const zmq::const_buffer> frames,
                                           std::string* error = nullptr);

/// Sends [routing id, (empty delimiter if `delimiter`), payload] on a ROUTER without blocking;
/// the payload message is moved in (zero-copy messages keep their free callback).
[[nodiscard]] SendOutcome trySendRouted(zmq::socket_t& router, std::string_view routing_id,
                                        bool delimiter, zmq::message_t&& payload,
                                        std::string* error = nullptr);

/// A message read from a ROUTER, split into its envelope and payload: [routing id, payload] from
/// a DEALER, [routing id, "", payload] from a REQ (or a DEALER that adds the delimiter itself).
struct RoutedEnvelope {
  std::string routing_id;
  bool delimiter = false;              ///< the sender framed the payload with an empty delimiter
  std::span<const std::byte> payload;  ///< borrowed from the parts; empty when `error` is set
  /// Why the message is refused: Corruption for a frame count the protocol does not have,
  /// InvalidArgument for a payload over the size limit (the codes a decoder gives the same
  /// faults).
  std::optional<Error> error;
};

/// Splits `parts` (as received from a ROUTER). A message of any other shape, or whose payload
/// exceeds `max_payload_bytes`, gets `error`; `routing_id` and `delimiter` are always set, so
/// the sender can be told.
RoutedEnvelope splitRoutedEnvelope(const std::vector<zmq::message_t>& parts,
                                   std::size_t max_payload_bytes);

/// Lower-case name of an outcome ("would_block"), for logs and tests.
std::string_view sendOutcomeName(SendOutcome outcome);

/// A poll set rebuilt each loop turn, whose entries are named by the slot add() returned (not by
/// their position): the loop keeps the slots of what it added and asks readable(slot).
///
/// It does what zmq_poll does with fewer system calls. zmq_poll asks every ZeroMQ socket for its
/// events (ZMQ_EVENTS: libzmq's `getpid` and `poll` on the socket's mailbox) twice per call, on
/// either side of the wait. Here a socket is asked once before the wait only if it may be readable
/// without its mailbox descriptor (ZMQ_FD) saying so — an `Always` socket, one that was readable
/// last time — and after the wait only if its descriptor fired. That is exact because a socket's
/// state changes without a mailbox signal only through operations on the socket itself: a send or
/// receive may process the mailbox's commands (so the descriptor no longer fires for them).
class PollSet {
 public:
  using Slot = std::size_t;
  /// Consecutive slots [begin, end) (e.g. one per DP rank).
  struct Range {
    Slot begin = 0;
    Slot end = 0;
  };
  /// When a ZeroMQ socket must be asked before the wait.
  enum class Wake {
    /// Every turn: the loop may leave messages queued or send on it between reads.
    Always,
    /// Only when it was readable last time (or its descriptor fired): for a socket the loop
    /// reads until EAGAIN whenever it touches it (sends, if any, before that final receive), so
    /// between turns it is empty until its mailbox signals.
    OnSignal,
  };

  void clear() { items_.clear(); }
  /// A ZeroMQ socket (its handle); `wanted` false polls it for nothing (kept in the set, never
  /// readable).
  Slot add(void* socket_handle, bool wanted = true, Wake wake = Wake::Always);
  /// A file descriptor (eventfd, timerfd).
  Slot addFd(int fd);
  /// The next slot add() will return (the start of a Range).
  Slot next() const { return items_.size(); }
  /// Waits up to `timeout` (-1: no limit) for a readable entry. An interrupted wait (EINTR)
  /// reports only the sockets found readable before it; ZeroMQ errors throw zmq::error_t.
  void poll(std::chrono::milliseconds timeout);
  bool readable(Slot slot) const;
  bool anyReadable(Range range) const;
  /// ZMQ_EVENTS queries made by poll() so far (each costs libzmq two system calls).
  std::uint64_t numEventQueries() const { return num_event_queries_; }

 private:
  struct Item {
    void* socket = nullptr;  ///< nullptr: `fd` is a plain descriptor
    int fd = -1;
    bool wanted = true;
    Wake wake = Wake::Always;
    bool readable = false;
  };
  bool askReadable(Item& item);

  std::vector<Item> items_;
  std::vector<::pollfd> fds_;
  /// OnSignal sockets found readable by the last poll(): asked before the next wait.
  std::vector<void*> readable_last_;
  std::uint64_t num_event_queries_ = 0;
};

}  // namespace mocker::net
