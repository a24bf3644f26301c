// HandoffBook: the disaggregation bookkeeping both scheduler families share (engine/README.md,
// Disaggregated prefill/decode). A rank is a prefill worker (holds), a decode worker
// (reservations) or neither; the book keeps ids, counters and times, the scheduler keeps the
// requests, their states and their KV:
//
//   prefill worker   hold() ─ stampTickets() ─ releaseHeld() | expire() | unhold() on cancel
//   decode worker    enqueue() ─ reserveHead() ─ activateDue() ─ admitFront() | cancel()
//
// The hold deadlines are kept in pass-end order (a rank's pass ends never decrease), so the
// earliest deadline is at the front; ids that stopped being held are dropped lazily.
//
// Internal to engine/. Not thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <optional>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/result.h"
#include "engine/config.h"
#include "engine/detail/pass.h"
#include "engine/types.h"

namespace mocker::engine::detail {

/// Decode-worker bookkeeping of one handoff, until its request is admitted.
struct Handoff {
  RequestId source_id;
  std::uint32_t source_dp_rank = 0;
  std::uint32_t cached_tokens = 0;  // reused on the prefill worker (the client's view)
  double submitted_ms = 0.0;
  double prefill_end_ms = 0.0;
  double ticket_ready_ms = 0.0;  // full-prompt charge, computed by the source
  double reserved_ms = 0.0;
  double ready_ms = 0.0;
  std::uint32_t transferable_tokens = 0;
  std::uint32_t resident_tokens = 0;
};

class HandoffBook {
 public:
  // Prefill worker.
  /// `r` completed its prompt and is now held: its ticket goes into `out` (times are stamped by
  /// stampTickets when the pass ends).
  void hold(const RequestRecord& r, std::uint32_t dp_rank, std::uint32_t block_size,
            PassResult& out);
  /// A held request was released or cancelled (its KV is freed by the scheduler).
  void unhold() { --num_held_; }
  /// Pass end: stamps the pass's tickets with prefill_end_ms, transfer_ms and ready_ms and
  /// schedules their hold deadlines (kv_hold_timeout_ms).
  void stampTickets(PassResult& out, const EngineConfig& config);
  // The templates below take the scheduler's request map (id → request whose `state` has a Held
  // enumerator) and `release_kv(request)`, which frees that request's KV.
  /// Releases held request `id` (the decode side has its KV): true if it was held, and then it is
  /// forgotten.
  template <typename ReqMap, typename ReleaseKv>
  bool releaseHeld(ReqMap& requests, RequestId id, ReleaseKv&& release_kv) {
    if (!dropHeld(requests, id, release_kv)) return false;
    --num_held_;
    dropStale(requests);
    return true;
  }
  /// Releases every hold whose deadline is <= now_ms; each is reported in out.expired_holds and
  /// counted.
  template <typename ReqMap, typename ReleaseKv>
  void expire(PassResult& out, double now_ms, ReqMap& requests, ReleaseKv&& release_kv) {
    while (!deadlines_.empty() && deadlines_.front().first <= now_ms) {
      const RequestId id = deadlines_.front().second;
      deadlines_.pop_front();
      if (!dropHeld(requests, id, release_kv)) continue;
      --num_held_;
      ++expired_;
      out.expired_holds.push_back(id);
    }
    dropStale(requests);
  }
  /// Drops deadlines of requests that are no longer held from the front (after a cancel).
  template <typename ReqMap>
  void dropStale(const ReqMap& requests) {
    while (!deadlines_.empty() && !isHeld(requests, deadlines_.front().second)) {
      deadlines_.pop_front();
    }
  }

  // Decode worker.
  /// Adds `request` (built from `ticket`) to the scheduler's `requests` in state Reserving and to
  /// the back of the reservation queue. Strong guarantee: if an allocation throws, both are
  /// unchanged.
  template <typename ReqMap, typename Req>
  void enqueue(ReqMap& requests, Req&& request, const HandoffTicket& ticket, double now_ms) {
    using State = decltype(request.state);
    request.state = State::Reserving;
    const RequestId id = request.id;
    const std::uint32_t prompt_len = request.prompt_len;
    const auto it = requests.try_emplace(id, std::forward<Req>(request)).first;
    try {
      enqueueRecord(id, ticket, prompt_len, now_ms);
    } catch (...) {
      requests.erase(it);
      throw;
    }
  }
  /// True while a reservation is queued: no fresh request is admitted then.
  bool reservationQueued() const { return !queue_.empty(); }
  /// The head of the reservation queue (REQUIRES reservationQueued()).
  RequestId head() const { return queue_.front(); }
  /// The head's KV is reserved at `now_ms`: `resident_blocks` claimed from the cache, then
  /// `fresh_blocks` private ones the transfer fills. It moves to the reserved list.
  void reserveHead(const EngineConfig& config, double now_ms, std::uint32_t resident_blocks,
                   std::uint32_t fresh_blocks, std::uint32_t block_size, std::uint32_t prompt_len);
  /// Live decode worker: the KV of reserved handoff `id`, submitted with its ready time unknown
  /// (ticket.ready_ms = +infinity), is in place at `now_ms`. True if `id` was such a handoff.
  bool ready(RequestId id, double now_ms);
  /// Live decode worker: appends the reservations made since the last call of handoffs whose
  /// ready time is unknown and that are still reserved, in reservation order.
  void takeReservations(std::vector<HandoffReservation>& out, std::uint32_t dp_rank);
  /// Every reserved handoff due at `now_ms` (max(ready, reserved) <= now_ms), in reservation
  /// order: `activate(id)` puts its KV in place (the scheduler's part), then it is reported in
  /// out.activations and joins the activated queue.
  template <typename Activate>
  void activateDue(PassResult& out, double now_ms, Activate&& activate) {
    std::size_t kept = 0;
    for (const RequestId id : reserved_) {
      const Handoff& h = handoffs_.at(id);
      const double at = std::max(h.ready_ms, h.reserved_ms);
      if (at > now_ms) {
        reserved_[kept++] = id;
        continue;
      }
      activate(id);
      activated_.push_back(id);
      out.activations.push_back(activation(id, h, at));
    }
    reserved_.resize(kept);
  }
  /// Activated handoffs waiting for admission, activation order.
  const std::deque<RequestId>& activated() const { return activated_; }
  /// Admits the front activated handoff `r`: its admission reports the resident tokens as reused
  /// input, its first token will carry the prefill worker's cached tokens.
  void admitFront(RequestRecord& r, PassResult& out, PrefixCacheCounters& counters);
  /// Forgets handoff `id` whatever its state (queued, reserved or activated).
  void cancel(RequestId id);
  /// Decode worker: handoffs not yet activated (queued or reserved).
  std::uint64_t numPending() const { return queue_.size() + reserved_.size(); }
  const std::deque<RequestId>& queued() const { return queue_; }
  const std::vector<RequestId>& reserved() const { return reserved_; }

  /// The disaggregation fields of the load metrics (held, expired and pending handoffs).
  void fillLoadMetrics(LoadMetrics& m) const {
    m.held_requests = num_held_;
    m.handoff_expired = expired_;
    m.pending_handoffs = numPending();
  }

  /// Checks the book against a scheduler's requests (a map id → request with a `state` whose
  /// enumerators include Held, Reserving, Reserved and Activated): every queued, reserved and
  /// activated id is a request in that state and in no other queue (`seen` counts queue
  /// memberships, shared with the scheduler's own queues); `num_held`, the scheduler's count of
  /// Held requests, matches the book's.
  template <typename ReqMap>
  Status checkInvariants(std::unordered_map<RequestId, int>& seen, const ReqMap& requests,
                         std::uint64_t num_held) const {
    using State = decltype(requests.begin()->second.state);
    return checkQueues(seen, num_held, [&requests](RequestId id) -> std::optional<Phase> {
      const auto it = requests.find(id);
      if (it == requests.end()) return std::nullopt;
      switch (it->second.state) {
        case State::Reserving:
          return Phase::Queued;
        case State::Reserved:
          return Phase::Reserved;
        case State::Activated:
          return Phase::Activated;
        default:
          return Phase::Other;
      }
    });
  }

  /// The earliest hold deadline or activation time; nullopt if none.
  std::optional<double> nextTimerMs() const;

  /// KV events of reservations made between passes; they go out with the next pass.
  std::vector<KvEvent>& carryEvents() { return carry_events_; }

 private:
  enum class Phase : std::uint8_t { Other, Queued, Reserved, Activated };

  template <typename ReqMap>
  static bool isHeld(const ReqMap& requests, RequestId id) {
    using State = decltype(requests.begin()->second.state);
    const auto it = requests.find(id);
    return it != requests.end() && it->second.state == State::Held;
  }
  template <typename ReqMap, typename ReleaseKv>
  static bool dropHeld(ReqMap& requests, RequestId id, ReleaseKv& release_kv) {
    if (!isHeld(requests, id)) return false;
    const auto it = requests.find(id);
    release_kv(it->second);
    requests.erase(it);
    return true;
  }

  static HandoffActivation activation(RequestId id, const Handoff& h, double at);
  /// Strong guarantee: if an allocation throws, the book is unchanged.
  void enqueueRecord(RequestId id, const HandoffTicket& ticket, std::uint32_t prompt_len,
                     double now_ms);
  Status checkQueues(std::unordered_map<RequestId, int>& seen, std::uint64_t num_held,
                     const std::function<std::optional<Phase>(RequestId)>& phase_of) const;

  // Prefill worker.
  std::deque<std::pair<double, RequestId>> deadlines_;  // Held; front never stale
  std::uint64_t num_held_ = 0;
  std::uint64_t expired_ = 0;
  // Decode worker.
  std::unordered_map<RequestId, Handoff> handoffs_;  // until admission
  std::deque<RequestId> queue_;                      // reservation queue, FIFO
  std::vector<RequestId> reserved_;                  // reservation order
  std::deque<RequestId> activated_;                  // activation order
  std::vector<HandoffReservation> reservations_;     // unknown ready time, not yet taken
  std::vector<KvEvent> carry_events_;
};

}  // namespace mocker::engine::detail
