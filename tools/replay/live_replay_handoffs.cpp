// LiveReplay's disaggregated hops (tools/replay/detail/live_loop.h; tools/replay/README.md,
// Disaggregated replay): a prefill server's handoff sent on to a decode server, and the prefill
// servers' terminals.
#include <optional>
#include <string>
#include <utility>
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
  MOCKER_CHECK(r.submit.has_value());
  // With migration on, the submit stays kept until the end: a decode server that goes down
  // loses the request, which is then migrated with the tokens it streamed. After such a
  // migration the decode hop is asked for the rest (the prompt the prefill server prefilled).
  protocol::SubmitRequest request = !r.generated.empty() ? migratedSubmit(*r.submit, r.generated)
                                    : options_.migration_limit == 0 ? std::move(*r.submit)
                                                                    : *r.submit;
  if (options_.migration_limit == 0) r.submit.reset();
  request.id = sent_.wireId(index);
  request.handoff = handoff.ticket;
  // Hop 2 (decode_router.h) among the decode servers that are routable (worker_health.h). A
  // submit that cannot be sent (the server's connection closed: it never left) goes to the
  // next routable one; the prefill server holds the KV meanwhile.
  std::vector<bool> routable = decode_health_.routable();
  bool refused = false;
  while (const std::optional<std::uint32_t> d = router_.routeDecode(index, routable)) {
    const Status status = clients_[num_prefill_ + *d]->submit(request);
    if (status) {
      r.decode_target = *d;
      ++h.per_decode_target[*d];
      decode_health_.sent(*d, index, now);
      return;
    }
    router_.decodeEnded(*d);
    routable[*d] = false;
    refused = true;
    ++stats_.send_failures;
    warnOnce(
        "submit to decode server " + std::to_string(*d) +
        " could not be sent (its connection is gone; the handoff goes to the next decode server "
        "up, if any): " +
        status.error().message);
  }
  // No decode server to send it to: it fails at once (as at hop 1 with every server down),
  // and the prefill server's held KV is released.
  if (refused) {
    warnOnce("a handoff could not be sent to any decode server: failed");
  } else {
    ++stats_.no_decode_worker;
    warnOnce("every decode server was down: handed-off requests failed at once");
  }
  ++h.prefill_cancels;
  (void)clients_[r.target]->cancel(request.id);
  end(index, nowMs(), TerminalStatus::Failed);
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
