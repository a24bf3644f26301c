#include "tools/replay/live_replay.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <variant>

#include "base/check.h"
#include "net/client.h"
#include "service/loop_clock.h"
#include "tools/index/live_kv_index.h"
#include "tools/replay/detail/live_loop.h"
#include "tools/replay/live_connect.h"
#include "tools/replay/live_requests.h"
#include "tools/replay/turn_schedule.h"

namespace mocker::replay {
namespace detail {
namespace {

/// Messages drained from one server before the loop looks at its timers again.
constexpr int kMaxDrainPerWake = 256;
constexpr double kProgressEveryMs = 100.0;
/// How long the final stats round trip may take (pass timing of every server).
constexpr int kFinalStatsWaitMs = 2000;
/// Distinct reject / error reasons kept as warnings.
constexpr std::size_t kMaxReasonWarnings = 5;

}  // namespace

LiveReplay::LiveReplay(const Workload& workload, const LiveReplayOptions& options,
                       ReplayCollector& collector,
                       std::vector<std::unique_ptr<net::Client>> clients, LiveReplayStats stats,
                       std::unique_ptr<index::LiveKvIndex> kv_index)
    : workload_(workload),
      options_(options),
      collector_(collector),
      clients_(std::move(clients)),
      synth_(workload.trace_block_size),
      stats_(std::move(stats)),
      stats_pending_(clients_.size(), false),
      num_prefill_(static_cast<std::uint32_t>(options.targets.size())),
      schedule_(workload, options.concurrency.has_value()),
      sent_(num_prefill_),
      health_(num_prefill_, options.worker_health),
      decode_health_(static_cast<std::uint32_t>(options.decode_targets.size()),
                     options.worker_health),
      kv_index_(std::move(kv_index)),
      router_(liveRouterConfig(options, stats_.ranks_per_target),
              [this](std::span<const std::uint64_t> hashes, std::vector<std::uint32_t>& overlaps,
                     std::vector<std::uint64_t>& cached) {
                return kv_index_->overlaps(hashes, overlaps, cached);
              }) {
  for (const auto& c : clients_) client_ptrs_.push_back(c.get());
  if (!options.decode_targets.empty()) {
    stats_.handoff.emplace();
    stats_.handoff->per_decode_target.assign(options.decode_targets.size(), 0);
  }
  stats_.timing_end = stats_.timing_start;
  stats_.handoff_expired_end = stats_.handoff_expired_start;
  stats_.faults_end = stats_.faults_start;
  stats_.per_target.assign(num_prefill_, 0);
  total_turns_ = workload.numTurns();
  sent_.reserve(total_turns_);
}

LiveReplayStats LiveReplay::run() {
  (void)service::tightenTimerSlack();  // dispatch at the due time, not up to 50 µs after it
  start_ = Clock::now();
  next_stats_ms_ = options_.stats_interval_ms > 0 ? 0.0 : kInf;
  double now = 0.0;
  while (true) {
    now = nowMs();
    // Health first: no request goes to a server whose down deadline has passed (a request
    // sent after `now` must not be failed, or migrated, by a declaration stamped `now`).
    checkHealth(now);
    dispatchDue(now);
    expireTimeouts(now);
    pollStats(now);
    if (options_.progress && now - last_progress_ms_ >= kProgressEveryMs) {
      last_progress_ms_ = now;
      reportProgress(now);
    }
    if (schedule_.empty() && in_flight_ == 0) break;
    double wake = std::min({nextDispatchMs(), sent_.nextDeadlineMs(), next_stats_ms_,
                            health_.nextDeadlineMs(), decode_health_.nextDeadlineMs()});
    if (options_.progress) wake = std::min(wake, last_progress_ms_ + kProgressEveryMs);
    // Something is always pending here: an eligible turn (due, or waiting for a closed-loop
    // slot that a request in flight will free) or a request in flight with a deadline.
    MOCKER_CHECK(wake < kInf);
    const double wait = std::max(0.0, wake - nowMs());
    // The poll timeout is whole milliseconds (rounded up, a backstop); the timerfd wakes the
    // loop at the due time itself, so requests are not sent up to 1 ms late (0.5 ms on average).
    const auto timeout = std::chrono::milliseconds(static_cast<std::int64_t>(std::ceil(wait)));
    int wake_fd = -1;
    if (wake_timer_.valid() && wait > 0.0) {
      wake_timer_.armAt(start_ + std::chrono::duration_cast<Clock::duration>(
                                     std::chrono::duration<double, std::milli>(wake)));
      wake_fd = wake_timer_.fd();
    }
    const Result<std::vector<std::size_t>> ready =
        net::Client::waitReadable(client_ptrs_, timeout, wake_fd);
    if (const auto armed = wake_timer_.armedAt(); armed && Clock::now() >= *armed) {
      wake_timer_.acknowledge();
    }
    if (!ready) {
      warnOnce("poll failed: " + ready.error().message);
      continue;
    }
    for (const std::size_t t : *ready) drain(static_cast<std::uint32_t>(t));
  }
  stats_.wall_ms = now;
  // One last stats round trip per server: their pass timing over the whole run.
  finalStatsRoundTrip(client_ptrs_, stats_pending_, kFinalStatsWaitMs,
                      [this](std::uint32_t t) { drain(t); });
  sumExpiredHolds(num_prefill_, stats_);
  if (kv_index_) {
    const index::IndexStats s = kv_index_->stats();
    stats_.kv_batches_applied = s.batches_applied;
    stats_.kv_gaps_detected = s.gaps_detected;
    stats_.kv_gaps_healed = s.gaps_healed;
    stats_.kv_resyncs = s.resyncs;
  }
  stats_.health = health_.transitions();
  stats_.decode_health = decode_health_.transitions();
  summarizeDispatchLag(dispatch_lags_, stats_);
  stats_.warnings.insert(stats_.warnings.end(), synth_.warnings().begin(), synth_.warnings().end());
  if (options_.progress) reportProgress(now);
  return std::move(stats_);
}

double LiveReplay::nowMs() const {
  return std::chrono::duration<double, std::milli>(Clock::now() - start_).count();
}

double LiveReplay::nextDispatchMs() const {
  if (schedule_.empty()) return kInf;
  if (options_.concurrency && in_flight_ >= *options_.concurrency) return kInf;
  return schedule_.top().time_ms;
}

void LiveReplay::warnOnce(std::string message) {
  if (std::find(stats_.warnings.begin(), stats_.warnings.end(), message) != stats_.warnings.end()) {
    return;
  }
  if (reason_warnings_ >= kMaxReasonWarnings) return;
  ++reason_warnings_;
  stats_.warnings.push_back(std::move(message));
}

void LiveReplay::dispatchDue(double now) {
  while (!schedule_.empty() && schedule_.top().time_ms <= now &&
         (!options_.concurrency || in_flight_ < *options_.concurrency)) {
    dispatchOne();
  }
}

void LiveReplay::dispatchOne() {
  const EligibleTurn next = schedule_.pop();
  const Session& session = workload_.sessions[next.session];
  const Turn& turn = session.turns[next.turn];
  const std::size_t index = sent_.size();
  // No `arrival_ms` on the wire: the service stamps a request with its own receive time on
  // its engine clock, so a driver-clock value would only be decoded and then discarded.
  protocol::SubmitRequest request{.id = liveRequestId(index),
                                  .prompt = schedule_.prompt(next, synth_.synthesize(turn)),
                                  .max_tokens = turn.output_length,
                                  .lora = turn.lora};
  const std::optional<std::uint32_t> routed = route(index, request);
  const std::uint32_t target = routed.value_or(0);
  const double send_ms = nowMs();
  const RequestHandle handle =
      collector_.onArrival({.session_id = session.session_id,
                            .turn_index = next.turn,
                            .request_id = turn.request_id,
                            .input_length = static_cast<std::uint32_t>(request.prompt.size()),
                            .requested_output_length = turn.output_length,
                            .lora = turn.lora},
                           send_ms);
  MOCKER_CHECK(handle == index);
  LiveRequest& sent =
      sent_.add({.handle = handle, .session = next.session, .turn = next.turn, .target = target});
  ++in_flight_;
  stats_.max_in_flight = std::max(stats_.max_in_flight, in_flight_);
  if (!options_.concurrency) {
    const double lag = std::max(0.0, send_ms - next.time_ms);
    stats_.max_dispatch_lag_ms = std::max(stats_.max_dispatch_lag_ms, lag);
    dispatch_lags_.push_back(lag);
  }
  sent.send_ms = send_ms;
  if (!routed) {
    ++stats_.no_worker;
    warnOnce("every server was down: requests failed at once");
    end(index, send_ms, TerminalStatus::Failed);
    return;
  }
  ++stats_.per_target[target];
  if (stats_.handoff || options_.migration_limit > 0) sent.submit = request;
  sent_.setDeadline(index, send_ms + options_.request_timeout_ms);
  const Status status = clients_[target]->submit(request);
  if (status) {
    health_.sent(target, index, send_ms);
    return;
  }
  // Lost like a request held by a server that went down: migrated while the limit allows.
  ++stats_.send_failures;
  const double now = nowMs();
  if (recoverLost(index, now, target)) {
    warnOnce("submit to server " + std::to_string(target) +
             " could not be sent: migrated to another server (" + status.error().message + ")");
    return;
  }
  const char* why = options_.migration_limit == 0 ? "migration off, --migration-limit 0"
                    : sent_[index].migrations >= options_.migration_limit
                        ? "its re-sends failed too, up to the migration limit"
                        : "no other server up to migrate it to";
  warnOnce("submit to server " + std::to_string(target) + " could not be sent: failed (" + why +
           "): " + status.error().message);
  end(index, now, TerminalStatus::Failed);
}

void LiveReplay::end(std::size_t index, double time_ms, TerminalStatus status, StopReason reason) {
  LiveRequest& r = sent_[index];
  MOCKER_CHECK(r.live);
  r.live = false;
  r.submit.reset();
  r.generated = {};
  if (r.decode_target) {
    router_.decodeEnded(*r.decode_target);
    decode_health_.released(*r.decode_target, index);
  }
  router_.released(index);
  health_.released(r.target, index);
  collector_.onTerminal(r.handle, time_ms, status, reason);
  --in_flight_;
  ++ended_;
  schedule_.ended(r.session, r.turn, time_ms);
}

void LiveReplay::expireTimeouts(double now) {
  while (const std::optional<std::size_t> index = sent_.takeExpired(now)) {
    // Best effort: a server that is gone never answers, and a full queue must not block.
    // Disaggregated: the worker that holds it — the decode server once it was submitted there.
    (void)clients_[sent_.holder(*index)]->cancel(sent_.wireId(*index));
    ++stats_.timeouts;
    end(*index, now, TerminalStatus::Cancelled);
  }
}

void LiveReplay::pollStats(double now) {
  if (now < next_stats_ms_) return;
  for (std::uint32_t t = 0; t < clients_.size(); ++t) {
    // One request outstanding per server: a silent server does not pile them up.
    if (stats_pending_[t]) continue;
    if (clients_[t]->send(protocol::StatsRequest{})) stats_pending_[t] = true;
  }
  next_stats_ms_ = now + options_.stats_interval_ms;
}

void LiveReplay::drain(std::uint32_t target) {
  for (const net::ConnectionEvent e : clients_[target]->takeConnectionEvents()) {
    const auto [health, w] = healthOf(target);
    if (e == net::ConnectionEvent::Closed) {
      health->connectionClosed(w, nowMs());
    } else {
      health->connected(w, nowMs());
    }
  }
  for (int i = 0; i < kMaxDrainPerWake; ++i) {
    Result<std::optional<protocol::ClientMessage>> msg = clients_[target]->receiveReady();
    if (!msg) {
      ++stats_.undecodable;
      warnOnce("server " + std::to_string(target) +
               " sent a message that does not decode: " + msg.error().message);
      continue;
    }
    if (!*msg) return;
    handle(target, **msg, nowMs());
  }
}

void LiveReplay::handle(std::uint32_t target, const protocol::ClientMessage& msg, double now) {
  const bool prefill_hop = stats_.handoff && target < num_prefill_;
  const auto [health, w] = healthOf(target);  // the prefill or the decode servers' rule
  health->answered(w, now);
  if (const auto* ack = std::get_if<protocol::SubmitAck>(&msg)) {
    if (LiveRequest* r = sent_.find(target, ack->id)) {
      health->acked(w, sent_.indexOf(*r), now);
      if (stats_.handoff && r->handoff_ms) {  // the decode server's ack
        r->decode_ack_ms = now;
        ++stats_.handoff->decode_acks;
        stats_.handoff->decode_ack_ms.push_back(now - *r->handoff_ms);
      } else {
        r->ack_ms = now;  // admission (disaggregated: the prefill admission, as offline)
      }
    } else {
      ++stats_.late_messages;
    }
  } else if (const auto* reject = std::get_if<protocol::SubmitReject>(&msg)) {
    LiveRequest* r = sent_.find(target, reject->id);
    if (!r) {
      ++stats_.late_messages;
      return;
    }
    ++stats_.submit_rejects;
    health->progressed(w, now);
    if (stats_.handoff && !prefill_hop) {
      // The decode server refused the handoff: the prefill server still holds the KV.
      ++stats_.handoff->decode_rejects;
      warnOnce("decode server " + std::to_string(target - num_prefill_) +
               " rejected a handoff: " + reject->reason);
      ++stats_.handoff->prefill_cancels;
      (void)clients_[r->target]->cancel(reject->id);
    } else {
      warnOnce("submit rejected: " + reject->reason);
    }
    end(sent_.indexOf(*r), now, TerminalStatus::Rejected);
  } else if (const auto* handoff = std::get_if<protocol::Handoff>(&msg)) {
    LiveRequest* r = prefill_hop ? sent_.find(target, handoff->id) : nullptr;
    if (!r) {
      ++stats_.late_messages;
      if (!prefill_hop) warnOnce("server " + std::to_string(target) + " sent a handoff");
      return;
    }
    health_.progressed(target, now);
    health_.released(target, sent_.indexOf(*r));
    onHandoff(*r, *handoff, now);
  } else if (const auto* batch = std::get_if<protocol::OutputBatch>(&msg)) {
    for (const protocol::RequestOutput& o : batch->outputs) {
      if (prefill_hop) {
        onPrefillOutput(target, o, now);
      } else {
        onOutput(target, o, now);
      }
    }
  } else if (const auto* error = std::get_if<protocol::ErrorReply>(&msg)) {
    ++stats_.error_replies;
    warnOnce("server " + std::to_string(target) + " error: " + error->message);
    if (error->id) {
      if (LiveRequest* r = sent_.find(target, *error->id)) {
        health->progressed(w, now);
        end(sent_.indexOf(*r), now, TerminalStatus::Failed);
      }
    }
  } else if (const auto* reply = std::get_if<protocol::StatsReply>(&msg)) {
    stats_pending_[target] = false;
    recordStatsReply(*reply, target, now, stats_, collector_);
  }
  // cancel_reply and anything else: nothing to record.
}

void LiveReplay::onOutput(std::uint32_t target, const protocol::RequestOutput& o, double now) {
  LiveRequest* r = sent_.find(target, o.id);
  if (!r) {
    ++stats_.late_messages;
    return;
  }
  const auto [health, w] = healthOf(target);
  health->progressed(w, now);
  if (!r->admitted && (!o.tokens.empty() || o.finish == protocol::FinishReason::Length)) {
    // Admission = the ack's receive time; reuse = cached_tokens of the first output (absent
    // on a 0-token completion, which the engine reports without a first token).
    const std::uint32_t reused = o.cached_tokens.value_or(0);
    collector_.onAdmission(r->handle, r->ack_ms.value_or(now), reused, false);
    r->admitted = true;
    if (stats_.handoff && r->handoff_ms) {
      ++stats_.handoff->activations;
      stats_.handoff->wait_ms.push_back(now - *r->handoff_ms);
      if (r->decode_ack_ms) stats_.handoff->first_token_ms.push_back(now - *r->decode_ack_ms);
    }
  }
  if (!o.tokens.empty()) router_.prefillDone(sent_.indexOf(*r));
  // Indices count from 0 again on the server a migration sent it to.
  if (r->token_base + o.index != r->tokens) ++stats_.index_gaps;
  for (std::size_t k = 0; k < o.tokens.size(); ++k) collector_.onToken(r->handle, now);
  schedule_.received(r->session, r->turn, o.tokens);
  if (r->submit) r->generated.insert(r->generated.end(), o.tokens.begin(), o.tokens.end());
  r->tokens = r->token_base + o.index + static_cast<std::uint32_t>(o.tokens.size());
  if (!o.finish) return;
  const TerminalStatus status = terminalStatusOf(*o.finish);
  countFinish(status, stats_);
  if (status != TerminalStatus::Completed && !o.reason.empty()) {
    warnOnce(std::string("request ended ") + terminalStatusName(status) + ": " + o.reason);
  }
  end(sent_.indexOf(*r), now, status, parseWireStopReason(o.reason));
}

void LiveReplay::reportProgress(double now) {
  options_.progress(
      {.dispatched = sent_.size(), .ended = ended_, .total = total_turns_, .elapsed_ms = now});
}

}  // namespace detail

Result<LiveReplayStats> runLiveReplay(const Workload& workload, const LiveReplayOptions& options,
                                      ReplayCollector& collector) {
  MOCKER_TRY_VOID(validateLiveReplayOptions(workload, options));
  LiveReplayStats stats;
  std::vector<LiveTarget> all_servers = options.targets;
  all_servers.insert(all_servers.end(), options.decode_targets.begin(),
                     options.decode_targets.end());
  MOCKER_TRY(auto clients,
             connectServers(all_servers, options.curve, options.connect_timeout_ms, stats));
  // The kv router hashes with the servers' block size (the copy lives as long as the replay).
  LiveReplayOptions resolved = options;
  if (options.router == RouterKind::Kv) {
    std::vector<std::string> servers;
    for (const LiveTarget& t : options.targets) servers.push_back(t.submit_endpoint);
    const std::vector<std::optional<protocol::EngineInfo>> engines(
        stats.engines.begin(),
        stats.engines.begin() + static_cast<std::ptrdiff_t>(options.targets.size()));
    MOCKER_TRY(resolved.kv_block_size, resolveKvBlockSize(options.kv_block_size, engines, servers));
    stats.kv_block_size = resolved.kv_block_size;
  }
  if (workload.sessions.empty()) {
    stats.per_target.assign(options.targets.size(), 0);
    return stats;
  }
  std::unique_ptr<index::LiveKvIndex> kv_index;
  if (options.router == RouterKind::Kv) {
    MOCKER_TRY(kv_index, index::LiveKvIndex::start(
                             liveKvIndexConfig(options.targets, stats.ranks_per_target,
                                               resolved.kv_block_size, resolved.kv_hash_seeds)));
    MOCKER_TRY_VOID(kv_index->waitCaughtUp(
        detail::LiveReplay::Clock::now() +
        std::chrono::duration_cast<detail::LiveReplay::Clock::duration>(
            std::chrono::duration<double, std::milli>(options.connect_timeout_ms))));
  }
  detail::LiveReplay replay(workload, resolved, collector, std::move(clients), std::move(stats),
                            std::move(kv_index));
  return replay.run();
}

}  // namespace mocker::replay
