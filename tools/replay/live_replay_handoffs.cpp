// LiveReplay's disaggregated hops (tools/replay/detail/live_loop.h; tools/replay/README.md,
// Disaggregated replay): a prefill server's handoff sent on to a decode server, and the prefill
// servers' terminals.
#include <optional>
#include <string>
#include <vector>

#include "base/check.h"
#include "tools/replay/detail/live_loop.h"

namespace mocker::replay::detail {

void LiveReplay::onHandoff(LiveRequest& r, const protocol::Handoff& handoff, double now) {
  LiveHandoffStats& h = *stats_.handoff;
  const std::size_t index = sent_.indexOf(r);
  ++h.handoffs;
  r.handoff_ms = now;
  h.handoff_ms.push_back(now - r.send_ms);
  h.transfer_ms.push_back(handoff.ticket.transfer_ms);
  // The prefill server's part is done: its load leaves the kv router's view.
  router_.released(index);
  const std::uint32_t d = router_.routeDecode(index);  // hop 2 (decode_router.h)
  r.decode_target = d;
  ++h.per_decode_target[d];
  MOCKER_CHECK(r.submit.has_value());
  protocol::SubmitRequest request = std::move(*r.submit);
  r.submit.reset();
  request.id = sent_.wireId(index);
  request.handoff = handoff.ticket;
  const Status status = clients_[num_prefill_ + d]->submit(request);
  if (!status) {
    ++stats_.send_failures;
    warnOnce("submit to decode server " + std::to_string(d) + " failed: " + status.error().message);
    ++h.prefill_cancels;
    (void)clients_[r.target]->cancel(request.id);  // release the held KV
    end(index, nowMs(), TerminalStatus::Failed);
  }
}

void LiveReplay::onPrefillOutput(std::uint32_t target, const protocol::RequestOutput& o,
                                 double now) {
  LiveRequest* r = sent_.find(target, o.id);
  if (!r) {
    ++stats_.late_messages;
    return;
  }
  health_.progressed(target, now);
  if (!o.tokens.empty()) {
    stats_.handoff->prefill_tokens += o.tokens.size();
    warnOnce("prefill server " + std::to_string(target) +
             " sent output tokens (is it a --worker-type prefill server?)");
  }
  if (!o.finish) return;
  ++stats_.handoff->ended_on_prefill;
  const TerminalStatus status = terminalStatusOf(*o.finish);
  if (status == TerminalStatus::Completed && !r->admitted) {
    // A 0-token request completes on its prefill server (nothing to decode), admitted there.
    collector_.onAdmission(r->handle, r->ack_ms.value_or(now), o.cached_tokens.value_or(0), false);
    r->admitted = true;
  }
  countFinish(status, stats_);
  if (status != TerminalStatus::Completed) {
    warnOnce(std::string("request ended on its prefill server, ") + terminalStatusName(status) +
             (o.reason.empty() ? std::string() : ": " + o.reason));
  }
  end(sent_.indexOf(*r), now, status, parseWireStopReason(o.reason));
}

}  // namespace mocker::replay::detail
