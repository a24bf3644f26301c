// LiveReplay's routing under worker health, down declarations and migration
// (tools/replay/detail/live_loop.h; tools/replay/README.md, "Workers that fail").
#include <optional>
#include <string>
#include <vector>

#include "base/check.h"
#include "tools/replay/detail/live_loop.h"

namespace mocker::replay::detail {

std::optional<std::uint32_t> LiveReplay::route(std::size_t index,
                                               protocol::SubmitRequest& request) {
  return route(index, request, health_.routable());
}

std::optional<std::uint32_t> LiveReplay::route(std::size_t index, protocol::SubmitRequest& request,
                                               const std::vector<bool>& routable) {
  const std::optional<LiveRoute> pick =
      router_.route(index, request.prompt, routable, request.lora);
  if (!pick) return std::nullopt;
  if (pick->query_error) {
    ++stats_.kv_query_failures;
    warnOnce("kv router: " + *pick->query_error + " (routed as if nothing were cached)");
  }
  if (pick->cached_prefix) ++stats_.kv_routed_hits;
  request.dp_rank = pick->rank;
  return pick->server;
}

void LiveReplay::checkHealth(double now) {
  health_.advance(now);
  for (const std::uint32_t w : health_.takeNewlyDown()) {
    for (std::size_t i = 0; i < sent_.size(); ++i) {
      const LiveRequest& r = sent_[i];
      if (!r.live || r.target != w || r.decode_target) continue;
      (void)clients_[w]->cancel(sent_.wireId(i));  // best effort: it may be gone
      if (!recoverLost(i, now, std::nullopt)) {
        ++stats_.failed_by_down;
        end(i, now, TerminalStatus::Failed);
      }
    }
  }
  // Disaggregated: the decode servers, by the same rule. A request handed to one that went
  // down is lost with it: before its first decode token the prefill server may still hold its
  // KV (a cancel releases it; "not_found" when the decode server had fetched it).
  decode_health_.advance(now);
  for (const std::uint32_t d : decode_health_.takeNewlyDown()) {
    for (std::size_t i = 0; i < sent_.size(); ++i) {
      const LiveRequest& r = sent_[i];
      if (!r.live || r.decode_target != d) continue;
      (void)clients_[num_prefill_ + d]->cancel(sent_.wireId(i));  // best effort: it may be gone
      if (!r.admitted) {
        ++stats_.handoff->prefill_cancels;
        (void)clients_[r.target]->cancel(sent_.wireId(i));
      }
      if (!recoverLost(i, now, std::nullopt)) {
        ++stats_.failed_by_down;
        end(i, now, TerminalStatus::Failed);
      }
    }
  }
}

bool LiveReplay::recoverLost(std::size_t index, double now, std::optional<std::uint32_t> refused) {
  LiveRequest& r = sent_[index];
  std::vector<bool> excluded(num_prefill_, false);
  if (refused) excluded[*refused] = true;
  while (true) {
    // The length limit of the server that held it (its decode server once handed off).
    const LostRequestOutcome lost =
        lostRequestStep(r, options_.migration_limit, stats_.engines[sent_.holder(index)]);
    switch (lost.step) {
      case LostRequestStep::Fail:
        return false;
      case LostRequestStep::Complete:
        ++stats_.completed_when_lost;
        end(index, now, TerminalStatus::Completed, lost.cut_short_by);
        return true;
      case LostRequestStep::Resend:
        break;
    }
    health_.released(r.target, index);
    router_.released(index);
    if (r.decode_target) {
      // Lost on the decode hop: re-sent through hop 1 (a new prefill, then a new handoff).
      router_.decodeEnded(*r.decode_target);
      decode_health_.released(*r.decode_target, index);
      r.decode_target.reset();
      r.handoff_ms.reset();
      r.decode_ack_ms.reset();
    }
    protocol::SubmitRequest request = migratedSubmit(*r.submit, r.generated);
    request.id = liveRequestId(index, r.migrations + 1);
    std::vector<bool> routable = health_.routable();
    for (std::uint32_t t = 0; t < num_prefill_; ++t) routable[t] = routable[t] && !excluded[t];
    const std::optional<std::uint32_t> target = route(index, request, routable);
    if (!target) {
      warnOnce("no server up to migrate a request to");
      return false;
    }
    if (r.migrations++ == 0) ++stats_.migrated_requests;
    ++stats_.migrations;
    ++stats_.per_target[*target];
    collector_.onMigration(r.handle);
    r.target = *target;
    r.token_base = r.tokens;
    if (!r.admitted) r.ack_ms.reset();  // admission: the new server's ack
    if (const Status s = clients_[*target]->submit(request); !s) {
      ++stats_.send_failures;
      warnOnce("migration to server " + std::to_string(*target) +
               " could not be sent (migrated again while the limit allows): " + s.error().message);
      excluded[*target] = true;
      continue;
    }
    health_.sent(*target, index, now);
    return true;
  }
}

}  // namespace mocker::replay::detail
