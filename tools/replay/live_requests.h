// The live replay's requests as the driver tracks them (tools/replay/live_replay.h): one entry
// per dispatch, named "r<dispatch index>" on the wire, the connection whose messages speak for it
// (the prefill server until the handoff, then the decode server), and the request timeouts in
// deadline order. No sockets, no clock: the loop passes times in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <queue>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/client.h"
#include "tools/replay/collector.h"

namespace mocker::replay {

/// "r<index>".
std::string liveRequestId(std::size_t index);
/// The index of an id "r<decimal>" as liveRequestId spells it (no leading zero), nullopt for any
/// other string.
std::optional<std::size_t> parseLiveRequestId(std::string_view id);
/// The terminal a finish reason records (length → completed, rejected, cancelled, error and
/// shutdown → failed).
TerminalStatus terminalStatusOf(protocol::FinishReason reason);

/// A request the driver sent.
struct LiveRequest {
  RequestHandle handle = 0;
  std::uint32_t session = 0;
  std::uint32_t turn = 0;
  std::uint32_t target = 0;        ///< the (prefill) server of hop 1
  std::optional<double> ack_ms{};  ///< submit_ack (disaggregated: the prefill server's)
  double send_ms = 0.0;
  // Disaggregated.
  std::optional<double> handoff_ms{};                       ///< handoff received
  std::optional<double> decode_ack_ms{};                    ///< the decode server's submit_ack
  std::optional<std::uint32_t> decode_target{};             ///< set ⇔ the decode submit was sent
  std::optional<protocol::SubmitRequest> decode_request{};  ///< kept until the handoff
  std::uint32_t tokens = 0;                                 ///< output tokens received so far
  bool admitted = false;                                    ///< onAdmission recorded
  bool live = true;                                         ///< no terminal recorded yet
};

/// Every request of a run, by dispatch index. Connections are numbered prefill servers first
/// (0 .. num_prefill-1), then decode servers.
class LiveRequests {
 public:
  explicit LiveRequests(std::uint32_t num_prefill) : num_prefill_(num_prefill) {}

  void reserve(std::size_t n) { sent_.reserve(n); }
  std::size_t size() const { return sent_.size(); }
  LiveRequest& operator[](std::size_t index) { return sent_[index]; }
  std::size_t indexOf(const LiveRequest& r) const {
    return static_cast<std::size_t>(&r - sent_.data());
  }
  /// A new request; its index is size() before the call.
  LiveRequest& add(LiveRequest request) { return sent_.emplace_back(std::move(request)); }

  /// The live request `id` names on connection `connection`, or nullptr (unknown id, ended, or
  /// not that connection's: a prefill server's messages end with its handoff).
  LiveRequest* find(std::uint32_t connection, std::string_view id);
  /// The connection that holds request `index` now (where a cancel goes).
  std::uint32_t holder(std::size_t index) const;

  /// Request `index` times out at `time_ms` unless it ends first.
  void setDeadline(std::size_t index, double time_ms) { deadlines_.push({time_ms, index}); }
  /// The earliest deadline of a live request; +inf when none.
  double nextDeadlineMs();
  /// The live request whose deadline is the earliest and at or before `now_ms` (taken off).
  std::optional<std::size_t> takeExpired(double now_ms);

 private:
  struct Deadline {
    double time_ms = 0.0;
    std::size_t request = 0;
    bool operator>(const Deadline& o) const {
      return time_ms != o.time_ms ? time_ms > o.time_ms : request > o.request;
    }
  };
  std::uint32_t num_prefill_ = 0;
  std::vector<LiveRequest> sent_;
  std::priority_queue<Deadline, std::vector<Deadline>, std::greater<>> deadlines_;
};

}  // namespace mocker::replay
