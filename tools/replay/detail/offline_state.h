// The offline replay loop's bookkeeping (tools/replay/offline_replay.cpp): what it remembers
// per submitted request, the time-ordered queues of router load changes, handoffs and KV events
// (each ordered by time, then by the order it was queued: deterministic), a (worker, rank) slot,
// and the engine's terminal and length-limit kinds in the report's terms.
#pragma once

#include <cstdint>
#include <functional>
#include <queue>
#include <vector>

#include "engine/types.h"
#include "tools/replay/collector.h"

namespace mocker::replay::detail {

/// What the loop remembers about a submitted request, indexed by its engine id.
struct Tracked {
  RequestHandle handle = 0;
  std::uint32_t session = 0;
  std::uint32_t turn = 0;
  bool live = false;
  bool first_token = false;  ///< the kv router's load saw its prefill end
  // Failure drills (tools/replay/offline_faults.h).
  std::uint32_t rank = 0;         ///< the DP rank it was submitted to
  double arrival_ms = 0.0;        ///< a hung rank's requests time out from here
  std::uint32_t tokens = 0;       ///< output tokens streamed so far (with abort_after only)
  std::uint32_t abort_after = 0;  ///< an `abort` fault: the stream ends after this many; 0 = none
  bool aborted = false;           ///< ended by its abort: later outputs of its pass are dropped
  // Decode worker: where its KV came from, and when the prefill pass ended.
  std::uint32_t source_worker = 0;
  double prefill_end_ms = 0.0;
};

/// A change of the kv router's load, effective from `time_ms` (a pass's outputs carry times up
/// to its end, which can be after a dispatch that the loop handles later).
struct LoadChange {
  double time_ms = 0.0;
  std::uint64_t seq = 0;
  RequestHandle handle = 0;
  bool ended = false;  ///< false: first token (prefill done)
};
struct LoadChangeLater {
  bool operator()(const LoadChange& a, const LoadChange& b) const {
    return a.time_ms != b.time_ms ? a.time_ms > b.time_ms : a.seq > b.seq;
  }
};

/// A handoff on its way to a decode worker, delivered at the prefill pass end.
struct PendingHandoff {
  double time_ms = 0.0;
  std::uint64_t seq = 0;
  engine::HandoffTicket ticket;
  Tracked request;  // source_worker set
};
struct PendingHandoffLater {
  bool operator()(const PendingHandoff& a, const PendingHandoff& b) const {
    return a.time_ms != b.time_ms ? a.time_ms > b.time_ms : a.seq > b.seq;
  }
};

/// One (worker, rank) pair: a global rank.
struct Slot {
  std::uint32_t worker = 0;
  std::uint32_t rank = 0;
  double clock_ms = 0.0;  ///< next pass start (or end of the pass in flight)
  bool blocked = false;   ///< last pass did nothing: wait for a new dispatch
  bool down = false;      ///< crashed or hung (a fault): no pass, no request routed to it
  std::uint64_t in_flight = 0;
  std::priority_queue<double, std::vector<double>, std::greater<>> pending_terminals;
};

/// KV events of one pass, visible to the router from `visible_ms` on.
struct PendingEvents {
  double visible_ms = 0.0;
  std::uint64_t seq = 0;
  std::uint32_t slot = 0;
  std::vector<engine::KvEvent> events;
};
struct PendingEventsLater {
  bool operator()(const PendingEvents& a, const PendingEvents& b) const {
    return a.visible_ms != b.visible_ms ? a.visible_ms > b.visible_ms : a.seq > b.seq;
  }
};

inline StopReason toReason(engine::LengthLimit limit) {
  switch (limit) {
    case engine::LengthLimit::None:
      return StopReason::None;
    case engine::LengthLimit::MaxModelLen:
      return StopReason::MaxModelLen;
    case engine::LengthLimit::KvCapacity:
      return StopReason::KvCapacity;
    case engine::LengthLimit::MaxNumBatchedTokens:
      return StopReason::MaxNumBatchedTokens;
  }
  return StopReason::None;
}

inline TerminalStatus toStatus(engine::Terminal t) {
  switch (t) {
    case engine::Terminal::Completed:
      return TerminalStatus::Completed;
    case engine::Terminal::Rejected:
      return TerminalStatus::Rejected;
    case engine::Terminal::Cancelled:
      return TerminalStatus::Cancelled;
    case engine::Terminal::Failed:
      return TerminalStatus::Failed;
    case engine::Terminal::None:
      break;
  }
  return TerminalStatus::Incomplete;
}

}  // namespace mocker::replay::detail
