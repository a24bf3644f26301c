#include "engine/offline_driver.h"

#include <limits>

#include "base/check.h"

namespace mocker::engine {

OfflineDriver::OfflineDriver(Engine& engine) : engine_(engine), rank_clock_(engine.dpSize(), 0.0) {}

void OfflineDriver::add(TimedArrival arrival) {
  const std::uint64_t seq = next_seq_++;
  pending_.push({arrival.arrival_ms, seq});
  pending_arrivals_.emplace(seq, std::move(arrival));
}

void OfflineDriver::submitNext() {
  const Pending p = pending_.top();
  pending_.pop();
  auto node = pending_arrivals_.extract(p.seq);
  TimedArrival& a = node.mapped();
  RequestTimeline t;
  t.tag = a.tag;
  t.arrival_ms = a.arrival_ms;
  t.input_length = a.request.deferred_prompt ? a.request.deferred_prompt->size()
                                             : static_cast<std::uint32_t>(a.request.tokens.size());
  t.requested_output_length = a.request.output_token_ids
                                  ? static_cast<std::uint32_t>(a.request.output_token_ids->size())
                                  : a.request.max_output_tokens;
  const std::uint32_t rank = a.request.dp_rank;
  a.request.arrival_ms = a.arrival_ms;
  Result<RequestId> id = engine_.submit(std::move(a.request));
  const std::size_t index = timelines_.size();
  if (!id) {
    t.terminal = Terminal::Rejected;
    t.terminal_ms = a.arrival_ms;
    refusals_.emplace_back(index, id.error());
    timelines_.push_back(std::move(t));
    return;
  }
  t.id = *id;
  index_.emplace(*id, index);
  timelines_.push_back(std::move(t));
  // An idle rank wakes up at the arrival; a busy one picks it up at its next pass boundary.
  if (rank < rank_clock_.size() && rank_clock_[rank] < p.arrival_ms) {
    rank_clock_[rank] = p.arrival_ms;
  }
}

void OfflineDriver::record(const PassResult& pass) {
  for (const Admission& a : pass.admissions) {
    RequestTimeline& t = timelines_[index_.at(a.id)];
    if (!t.first_admit_ms) {
      t.first_admit_ms = pass.start_ms;
      t.reused_first = a.reused_input_tokens;
    }
    t.reused_last = a.reused_input_tokens;
    ++t.admission_count;
  }
  for (const OutputSignal& s : pass.outputs) {
    const auto it = index_.find(s.id);
    MOCKER_CHECK(it != index_.end());
    RequestTimeline& t = timelines_[it->second];
    if (s.token) {
      t.token_ms.push_back(s.time_ms);
      t.tokens.push_back(*s.token);
    }
    if (s.terminal != Terminal::None) {
      t.terminal = s.terminal;
      t.terminal_ms = s.time_ms;
      index_.erase(it);
    }
  }
}

std::uint64_t OfflineDriver::run(const PassObserver& observer) {
  std::uint64_t passes = 0;
  constexpr double kInf = std::numeric_limits<double>::infinity();
  while (true) {
    // Earliest busy rank.
    std::uint32_t best = 0;
    double best_clock = kInf;
    for (std::uint32_t r = 0; r < rank_clock_.size(); ++r) {
      if (engine_.hasWork(r) && rank_clock_[r] < best_clock) {
        best = r;
        best_clock = rank_clock_[r];
      }
    }
    const double next_arrival = pending_.empty() ? kInf : pending_.top().arrival_ms;
    if (next_arrival == kInf && best_clock == kInf) break;
    if (next_arrival <= best_clock) {
      // Idle ranks have no clock of their own: an arrival just wakes its rank up.
      submitNext();
      continue;
    }
    PassResult pass = engine_.step(best, best_clock);
    now_ms_ = std::max(now_ms_, pass.end_ms);
    if (!pass.did_work) {
      // Work that cannot progress until something arrives or a timer fires (a KV transfer of
      // the offload tiers, a handoff's activation).
      const std::optional<double> timer = engine_.nextTimerMs(best);
      const double wake = std::min(next_arrival, timer && *timer > best_clock ? *timer : kInf);
      if (wake == kInf) break;
      rank_clock_[best] = wake;
      continue;
    }
    ++passes;
    rank_clock_[best] = pass.end_ms;
    record(pass);
    if (observer) observer(pass, *this);
  }
  return passes;
}

}  // namespace mocker::engine
