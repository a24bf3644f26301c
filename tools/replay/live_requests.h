// The live replay's requests as the driver tracks them (tools/replay/live_replay.h): one entry
// per dispatch, named "r<dispatch index>" on the wire ("r<index>.<k>" after its k-th migration),
// the connection whose messages speak for it (the prefill server until the handoff, then the
// decode server), the submit a migration re-sends, and the request timeouts in deadline order.
// No sockets, no clock: the loop passes times in.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <queue>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "protocol/client.h"
#include "tools/replay/collector.h"

namespace mocker::replay {

/// "r<index>" (attempt 0), "r<index>.<attempt>" after a request's attempt-th migration: a server
/// that held an earlier attempt may still answer for it, and must not be taken for the new one.
std::string liveRequestId(std::size_t index, std::uint32_t attempt = 0);
struct LiveRequestId {
  std::size_t index = 0;
  std::uint32_t attempt = 0;
  friend bool operator==(const LiveRequestId&, const LiveRequestId&) = default;
};
/// The index and attempt of an id as liveRequestId spells it (decimals without a leading zero,
/// no ".0"), nullopt for any other string.
std::optional<LiveRequestId> parseLiveRequestId(std::string_view id);
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
  std::optional<double> handoff_ms{};            ///< handoff received
  std::optional<double> decode_ack_ms{};         ///< the decode server's submit_ack
  std::optional<std::uint32_t> decode_target{};  ///< set ⇔ the decode submit was sent
  /// The submit as first sent, kept while it may be sent again: until the handoff
  /// (disaggregated: hop 2 sends it with the ticket) and, with migration on, until the end.
  std::optional<protocol::SubmitRequest> submit{};
  // Migration (live_replay.h).
  std::uint32_t migrations = 0;          ///< times re-sent to another server (the wire attempt)
  std::uint32_t token_base = 0;          ///< tokens received before the current attempt
  std::vector<std::uint32_t> generated;  ///< with migration on: every output token so far
  std::uint32_t tokens = 0;              ///< output tokens received so far
  bool admitted = false;                 ///< onAdmission recorded
  bool live = true;                      ///< no terminal recorded yet
};

/// What a migration sends (Dynamo's request migration): the original prompt followed by every
/// token generated so far, for the rest of max_tokens (and of output_tokens, when planned), no DP
/// rank and no handoff ticket (the router picks again; hop 1 of a disaggregated run).
protocol::SubmitRequest migratedSubmit(const protocol::SubmitRequest& original,
                                       std::span<const std::uint32_t> generated);

/// What becomes of a live request whose server can no longer finish it: the server went down
/// while holding it, or the submit to it could not be sent (live_replay.h "Migration").
enum class LostRequestStep : std::uint8_t {
  /// Migration on and nothing left to generate (only the finish was lost with the server): every
  /// output token streamed, or prompt + output reached the server's length limit. It ends
  /// completed (finish `length`) and nothing is re-sent — a re-send would ask for 0 tokens, or
  /// send a prompt at the limit, which a server refuses.
  Complete,
  Resend,  ///< re-sent to another server (migratedSubmit), its migrations < the limit
  Fail,    ///< migration off (limit 0), its limit reached, or no submit kept: it ends failed
};
struct LostRequestOutcome {
  LostRequestStep step = LostRequestStep::Fail;
  /// Complete at the length limit before the requested output: the limit (the report's
  /// "cut short by" count, as the lost finish's reason would have said); else None.
  StopReason cut_short_by = StopReason::None;
};
/// The step for request `r` under `migration_limit` (0 = migration off), given the length limit
/// of the server that held it (stats_reply.engine; nullopt or a length_limit of 0: unknown). A
/// request's output length is its planned output_tokens' size when it has them, else
/// max_tokens; a request of 0 output tokens (allow_empty_output) is never complete before its
/// server says so.
LostRequestOutcome lostRequestStep(const LiveRequest& r, std::uint32_t migration_limit,
                                   const std::optional<protocol::EngineInfo>& server = {});

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

  /// The live request `id` names on connection `connection`, or nullptr (unknown id, ended, an
  /// earlier attempt's id, or not that connection's: a prefill server's messages end with its
  /// handoff).
  LiveRequest* find(std::uint32_t connection, std::string_view id);
  /// The connection that holds request `index` now (where a cancel goes).
  std::uint32_t holder(std::size_t index) const;
  /// The id of request `index`'s current attempt on the wire.
  std::string wireId(std::size_t index) const {
    return liveRequestId(index, sent_[index].migrations);
  }

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
