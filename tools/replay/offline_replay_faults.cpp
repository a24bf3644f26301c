// OfflineReplay's failure drills (tools/replay/detail/offline_loop.h, offline_faults.h): a
// slow pass stretched, a worker crashed or a rank hung (the requests they hold ended), a stream
// aborted after its tokens.
#include <algorithm>
#include <utility>
#include <vector>

#include "base/check.h"
#include "tools/replay/detail/offline_loop.h"

namespace mocker::replay::detail {

void OfflineReplay::stretch(engine::PassResult& pass, double factor) {
  const auto at = [&pass, factor](double t) {
    return pass.start_ms + (t - pass.start_ms) * factor;
  };
  pass.end_ms = at(pass.end_ms);
  pass.prefill_ms *= factor;
  pass.decode_ms *= factor;
  for (engine::OutputSignal& sig : pass.outputs) sig.time_ms = at(sig.time_ms);
  for (engine::HandoffTicket& t : pass.handoffs) t.prefill_end_ms = at(t.prefill_end_ms);
}

void OfflineReplay::crash(std::uint32_t worker, double time_ms) {
  for (std::uint32_t r = 0; r < workers_[worker].dpSize(); ++r) {
    markDown(first_slot_[worker] + r);
  }
  for (Tracked& t : tracked_[worker]) {
    if (!t.live) continue;
    ++faults_.stats().failed_by_crash;
    endHeld(t, time_ms, TerminalStatus::Failed);
  }
}

void OfflineReplay::hang(std::uint32_t g, double time_ms) {
  const Slot& slot = slots_[g];
  markDown(g);
  for (Tracked& t : tracked_[slot.worker]) {
    if (!t.live || t.rank != slot.rank) continue;
    ++faults_.stats().timed_out;
    endHeld(t, std::max(time_ms, t.arrival_ms + options_.faults.request_timeout_ms),
            TerminalStatus::Cancelled);
  }
}

void OfflineReplay::markDown(std::uint32_t g) {
  if (slots_[g].down) return;
  slots_[g].down = true;
  ++num_down_;
  refreshNextPass(g);
  if (options_.router == RouterKind::Kv) {
    std::vector<bool> excluded(slots_.size());
    for (std::uint32_t i = 0; i < slots_.size(); ++i) excluded[i] = slots_[i].down;
    cost_router_.setExcluded(std::move(excluded));
  }
}

void OfflineReplay::endHeld(Tracked& t, double time_ms, TerminalStatus status) {
  t.live = false;
  pending_aborts_.erase(t.handle);
  if (options_.router == RouterKind::Kv) {
    load_changes_.push({time_ms, next_load_seq_++, t.handle, true});
  }
  end(t.handle, t.session, t.turn, time_ms, status);
}

void OfflineReplay::abortStream(Slot& slot, engine::RequestId id, Tracked& t, double time_ms) {
  auto pending = pending_aborts_.find(t.handle);
  MOCKER_CHECK(pending != pending_aborts_.end());
  service::Injection injection = std::move(pending->second);
  pending_aborts_.erase(pending);
  injection.time_ms = time_ms;
  faults_.record(std::move(injection));
  ++faults_.stats().aborted;
  t.live = false;
  t.aborted = true;
  workers_[slot.worker].cancel(id);
  if (options_.router == RouterKind::Kv) {
    load_changes_.push({time_ms, next_load_seq_++, t.handle, true});
  }
  slot.pending_terminals.push(time_ms);
  end(t.handle, t.session, t.turn, time_ms, TerminalStatus::Failed);
}

}  // namespace mocker::replay::detail
