// Disaggregation bookkeeping both schedulers share (handoff.h).
#include "engine/detail/handoff.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace mocker::engine::detail {

void HandoffBook::hold(const RequestRecord& r, std::uint32_t dp_rank, std::uint32_t block_size,
                       PassResult& out) {
  HandoffTicket t;
  t.source_id = r.id;
  t.source_dp_rank = dp_rank;
  t.tokens.assign(r.tokens.begin(), r.tokens.begin() + r.prompt_len);
  t.max_output_tokens = r.requested_output;
  t.output_token_ids = r.plan;
  t.cached_tokens = r.first_cached_tokens;
  t.block_size = block_size;
  out.handoffs.push_back(std::move(t));
  ++num_held_;
}

void HandoffBook::stampTickets(PassResult& out, const EngineConfig& config) {
  for (HandoffTicket& t : out.handoffs) {
    t.prefill_end_ms = out.end_ms;
    t.transfer_ms = kvTransferMs(config, t.tokens.size());
    t.ready_ms = t.prefill_end_ms + t.transfer_ms;
    if (config.kv_hold_timeout_ms) {
      deadlines_.emplace_back(out.end_ms + *config.kv_hold_timeout_ms, t.source_id);
    }
  }
}

void HandoffBook::enqueueRecord(RequestId id, const HandoffTicket& ticket, std::uint32_t prompt_len,
                                double now_ms) {
  const Handoff h{.source_id = ticket.source_id,
                  .source_dp_rank = ticket.source_dp_rank,
                  .cached_tokens = std::min(ticket.cached_tokens, prompt_len),
                  .submitted_ms = now_ms,
                  .prefill_end_ms = ticket.prefill_end_ms,
                  .ticket_ready_ms = ticket.ready_ms};
  handoffs_.try_emplace(id, h);
  try {
    queue_.push_back(id);
  } catch (...) {
    handoffs_.erase(id);
    throw;
  }
}

void HandoffBook::reserveHead(const EngineConfig& config, double now_ms,
                              std::uint32_t resident_blocks, std::uint32_t fresh_blocks,
                              std::uint32_t block_size, std::uint32_t prompt_len) {
  const RequestId id = queue_.front();
  Handoff& h = handoffs_.at(id);
  h.reserved_ms = now_ms;
  h.resident_tokens = std::min(resident_blocks * block_size, prompt_len);
  h.transferable_tokens = fresh_blocks * block_size;
  // ready_ms = +infinity: unknown until ready() (a live decode worker fetches the KV first).
  const bool unknown = h.ticket_ready_ms == std::numeric_limits<double>::infinity();
  h.ready_ms = unknown ? h.ticket_ready_ms
               : config.kv_transfer_charge == KvTransferCharge::FullPrompt
                   ? h.ticket_ready_ms
                   : h.prefill_end_ms + kvTransferMs(config, h.transferable_tokens);
  if (unknown) {
    reservations_.push_back({.id = id,
                             .reserved_ms = now_ms,
                             .transferable_tokens = h.transferable_tokens,
                             .resident_tokens = h.resident_tokens,
                             .prompt_tokens = prompt_len});
  }
  queue_.pop_front();
  reserved_.push_back(id);
}

bool HandoffBook::ready(RequestId id, double now_ms) {
  if (std::find(reserved_.begin(), reserved_.end(), id) == reserved_.end()) return false;
  Handoff& h = handoffs_.at(id);
  if (std::isfinite(h.ready_ms)) return false;
  h.ready_ms = now_ms;
  return true;
}

void HandoffBook::takeReservations(std::vector<HandoffReservation>& out, std::uint32_t dp_rank) {
  // A reservation cancelled since has nothing to fetch.
  for (HandoffReservation r : reservations_) {
    if (std::find(reserved_.begin(), reserved_.end(), r.id) == reserved_.end()) continue;
    r.dp_rank = dp_rank;
    out.push_back(r);
  }
  reservations_.clear();
}

HandoffActivation HandoffBook::activation(RequestId id, const Handoff& h, double at) {
  return {.id = id,
          .source_id = h.source_id,
          .source_dp_rank = h.source_dp_rank,
          .submitted_ms = h.submitted_ms,
          .reserved_ms = h.reserved_ms,
          .ready_ms = h.ready_ms,
          .activated_ms = at,
          .transferable_tokens = h.transferable_tokens,
          .resident_tokens = h.resident_tokens};
}

void HandoffBook::admitFront(RequestRecord& r, PassResult& out, PrefixCacheCounters& counters) {
  const RequestId id = activated_.front();
  activated_.pop_front();
  const auto it = handoffs_.find(id);
  const Handoff& h = it->second;
  // reused input = prompt tokens that were resident here; the client's cached_tokens are the
  // prefill worker's.
  out.admissions.push_back({id, h.resident_tokens, false});
  r.first_cached_tokens = h.cached_tokens;
  r.admitted_before = true;
  counters.queries_tokens += r.prompt_len;
  counters.hits_tokens += h.resident_tokens;
  handoffs_.erase(it);
}

void HandoffBook::cancel(RequestId id) {
  if (handoffs_.erase(id) == 0) return;
  if (const auto it = std::find(queue_.begin(), queue_.end(), id); it != queue_.end()) {
    queue_.erase(it);
  } else if (const auto r = std::find(reserved_.begin(), reserved_.end(), id);
             r != reserved_.end()) {
    reserved_.erase(r);
  } else {
    activated_.erase(std::find(activated_.begin(), activated_.end(), id));
  }
}

std::optional<double> HandoffBook::nextTimerMs() const {
  std::optional<double> next;
  const auto consider = [&next](double t) {
    if (!next || t < *next) next = t;
  };
  if (!deadlines_.empty()) consider(deadlines_.front().first);
  for (RequestId id : reserved_) {
    const Handoff& h = handoffs_.at(id);
    // An unknown ready time (+infinity) is no timer: ready() sets it.
    if (std::isfinite(h.ready_ms)) consider(std::max(h.ready_ms, h.reserved_ms));
  }
  return next;
}

Status HandoffBook::checkQueues(
    std::unordered_map<RequestId, int>& seen, std::uint64_t num_held,
    const std::function<std::optional<Phase>(RequestId)>& phase_of) const {
  const auto fail = [](const std::string& what) {
    return Error{ErrorCode::Internal, "handoff invariant: " + what};
  };
  if (num_held != num_held_) return fail("held count mismatch");
  const auto check = [&](RequestId id, Phase phase) -> Status {
    if (++seen[id] > 1) return fail("handoff twice in the queues");
    const auto actual = phase_of(id);
    if (!actual) return fail("unknown id in a handoff queue");
    if (*actual != phase) return fail("handoff in the wrong queue for its state");
    if (!handoffs_.contains(id)) return fail("queued handoff without its record");
    return {};
  };
  for (RequestId id : queue_) MOCKER_TRY_VOID(check(id, Phase::Queued));
  for (RequestId id : reserved_) MOCKER_TRY_VOID(check(id, Phase::Reserved));
  for (RequestId id : activated_) MOCKER_TRY_VOID(check(id, Phase::Activated));
  if (handoffs_.size() != numPending() + activated_.size()) return fail("stale handoff record");
  return {};
}

}  // namespace mocker::engine::detail
