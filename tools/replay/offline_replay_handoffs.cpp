// OfflineReplay's disaggregated prefill/decode handoffs (tools/replay/detail/offline_loop.h;
// tools/replay/README.md, Disaggregated replay): new handoffs leave for the decode side, are
// delivered to a decode worker, and release their prefill sources when activated.
#include <algorithm>
#include <utility>

#include "base/check.h"
#include "tools/replay/detail/offline_loop.h"

namespace mocker::replay::detail {

void OfflineReplay::deliverHandoff() {
  PendingHandoff h = handoffs_.top();
  handoffs_.pop();
  HandoffStats& hs = *stats_.handoff;
  // No decode worker is ever down: crash and hang are refused in a disaggregated run.
  const std::uint32_t g =
      route(h.time_ms, h.ticket.tokens, std::nullopt, options_.disagg->decode_router, num_prefill_,
            static_cast<std::uint32_t>(workers_.size()), hs.handoffs, false)
          .value();
  ++hs.handoffs;
  Slot& slot = slots_[g];
  ++hs.per_decode_worker[slot.worker - num_prefill_];
  const double at = std::max(h.time_ms, slot.clock_ms);
  const engine::RequestId source = h.ticket.source_id;
  Result<engine::RequestId> id =
      workers_[slot.worker].submitHandoff(std::move(h.ticket), slot.rank, at);
  if (!id) {
    // The decode worker cannot take it (its limits are smaller): rejected, source dropped.
    ++hs.refused;
    workers_[h.request.source_worker].cancel(source);
    unblockWorker(h.request.source_worker);
    end(h.request.handle, h.request.session, h.request.turn, h.time_ms, TerminalStatus::Rejected);
    return;
  }
  track(slot.worker, *id, h.request);
  ++slot.in_flight;
  slot.blocked = false;
  if (slot.clock_ms < at) slot.clock_ms = at;
  refreshNextPass(g);
}

void OfflineReplay::unblockWorker(std::uint32_t worker) {
  for (std::uint32_t r = 0; r < workers_[worker].dpSize(); ++r) {
    const std::uint32_t g = first_slot_[worker] + r;
    slots_[g].blocked = false;
    refreshNextPass(g);
  }
}

void OfflineReplay::handleHandoffs(Slot& slot, engine::PassResult& pass) {
  HandoffStats& hs = *stats_.handoff;
  auto& tracked = tracked_[slot.worker];
  for (engine::HandoffTicket& t : pass.handoffs) {
    Tracked& source = tracked[static_cast<std::size_t>(t.source_id.value())];
    source.live = false;
    slot.pending_terminals.push(t.prefill_end_ms);  // leaves the prefill worker's load
    if (options_.router == RouterKind::Kv) {
      load_changes_.push({t.prefill_end_ms, next_load_seq_++, source.handle, true});
    }
    Tracked request = source;
    request.live = true;
    request.source_worker = slot.worker;
    request.prefill_end_ms = t.prefill_end_ms;
    const double at = t.prefill_end_ms;
    handoffs_.push({at, next_handoff_seq_++, std::move(t), request});
  }
  for (const engine::HandoffActivation& a : pass.activations) {
    const Tracked& t = tracked[static_cast<std::size_t>(a.id.value())];
    ++hs.activations;
    hs.transfer_ms.push_back(a.ready_ms - t.prefill_end_ms);
    hs.queue_ms.push_back(a.reserved_ms - a.submitted_ms);
    hs.wait_ms.push_back(a.activated_ms - t.prefill_end_ms);
    // The decode worker has the KV: the source is released (noop if its hold expired).
    workers_[t.source_worker].releaseHandoff(a.source_id);
    unblockWorker(t.source_worker);
  }
  hs.expired_holds += pass.expired_holds.size();
}

}  // namespace mocker::replay::detail
