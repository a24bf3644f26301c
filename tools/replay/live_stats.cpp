#include "tools/replay/live_stats.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "protocol/detail/client_names.h"
#include "tools/replay/stats.h"

namespace mocker::replay {

std::uint64_t handoffExpiredOf(const protocol::StatsReply& reply) {
  std::uint64_t n = 0;
  for (const protocol::RankStats& r : reply.ranks) n += r.handoff_expired.value_or(0);
  return n;
}

LiveTimingSummary summarizeLiveTiming(const LiveReplayStats& stats, bool closed_loop,
                                      std::size_t num_prefill) {
  // Beyond these the live timelines drift measurably from the model (service/README.md,
  // "Live timing").
  constexpr double kMaxDispatchLagP99Ms = 1.0;
  constexpr double kMaxLatenessP99Ms = 1.0;
  LiveTimingSummary summary;
  std::vector<std::string>& warnings = summary.warnings;
  std::ostringstream fmt;
  fmt.setf(std::ios::fixed);
  fmt.precision(3);
  if (!closed_loop) {
    fmt << "Live timing: driver dispatch lag mean " << stats.mean_dispatch_lag_ms << " ms, p99 "
        << stats.p99_dispatch_lag_ms << " ms, max " << stats.max_dispatch_lag_ms << " ms\n";
    if (stats.p99_dispatch_lag_ms > kMaxDispatchLagP99Ms) {
      std::ostringstream w;
      w.setf(std::ios::fixed);
      w.precision(3);
      w << "live timing not faithful: the driver sent requests late (dispatch lag p99 "
        << stats.p99_dispatch_lag_ms << " ms > " << kMaxDispatchLagP99Ms
        << " ms): this machine does not keep up with the arrival rate";
      warnings.push_back(w.str());
    }
  }
  for (std::size_t t = 0; t < stats.timing_end.size(); ++t) {
    const std::string who = num_prefill == 0  ? "server " + std::to_string(t)
                            : t < num_prefill ? "prefill server " + std::to_string(t)
                                              : "decode server " + std::to_string(t - num_prefill);
    const auto& end = stats.timing_end[t];
    if (!end) {
      fmt << "Live timing: " << who << " reports no pass timing\n";
      continue;
    }
    const protocol::PassTiming start = t < stats.timing_start.size() && stats.timing_start[t]
                                           ? *stats.timing_start[t]
                                           : protocol::PassTiming{};
    const std::uint64_t passes = end->passes >= start.passes ? end->passes - start.passes : 0;
    const std::uint64_t resyncs = end->resyncs >= start.resyncs ? end->resyncs - start.resyncs : 0;
    const double mean = passes == 0 ? 0.0
                                    : (end->lateness_mean_ms * static_cast<double>(end->passes) -
                                       start.lateness_mean_ms * static_cast<double>(start.passes)) /
                                          static_cast<double>(passes);
    fmt << "Live timing: " << who << " published " << passes << " passes, lateness mean "
        << std::max(mean, 0.0) << " ms during the run; since it started: p50 "
        << end->lateness_p50_ms << " ms, p99 " << end->lateness_p99_ms << " ms, max "
        << end->lateness_max_ms << " ms; " << resyncs << " resyncs\n";
    if (resyncs > 0 || end->lateness_p99_ms > kMaxLatenessP99Ms) {
      std::ostringstream w;
      w.setf(std::ios::fixed);
      w.precision(3);
      w << "live timing not faithful: " << who << " published passes late (lateness p99 "
        << end->lateness_p99_ms << " ms, " << resyncs
        << " resyncs): its timelines are stretched against the model";
      warnings.push_back(w.str());
    }
  }
  summary.text = fmt.str();
  return summary;
}

HandoffReport summarizeLiveHandoffs(const LiveHandoffStats& stats) {
  return {.handoffs = stats.handoffs,
          .activations = stats.activations,
          .refused = stats.decode_rejects,
          .expired_holds = stats.expired_holds,
          .transfer_ms = summarize(stats.transfer_ms),
          .queue_ms = {},
          .wait_ms = summarize(stats.wait_ms)};
}

std::string formatLiveHandoffs(const LiveHandoffStats& stats) {
  std::ostringstream out;
  out.setf(std::ios::fixed);
  out.precision(3);
  const auto row = [&out](const char* what, const std::vector<double>& samples) {
    const Distribution d = summarize(samples);
    out << "Live handoff: " << what << " (ms, n " << samples.size() << "): p50 " << d.p50
        << ", p99 " << d.p99 << ", max " << d.max << "\n";
  };
  row("handoff received - dispatch", stats.handoff_ms);
  row("decode ack - handoff received", stats.decode_ack_ms);
  row("first decode token - decode ack", stats.first_token_ms);
  out << "Live handoff: " << stats.handoffs << " handoffs, " << stats.decode_acks
      << " decode acks, " << stats.activations << " decode streams started, "
      << stats.decode_rejects << " decode rejects, " << stats.ended_on_prefill
      << " ended on the prefill server, " << stats.expired_holds << " expired holds";
  if (stats.prefill_tokens > 0) out << ", " << stats.prefill_tokens << " prefill tokens ignored";
  out << "\n";
  return out.str();
}

void summarizeDispatchLag(std::vector<double>& lags, LiveReplayStats& stats) {
  if (lags.empty()) return;
  double sum = 0.0;
  for (const double l : lags) sum += l;
  stats.mean_dispatch_lag_ms = sum / static_cast<double>(lags.size());
  const auto k = static_cast<std::size_t>(std::ceil(0.99 * static_cast<double>(lags.size()))) - 1;
  std::nth_element(lags.begin(), lags.begin() + static_cast<std::ptrdiff_t>(k), lags.end());
  stats.p99_dispatch_lag_ms = lags[k];
}

void countFinish(TerminalStatus status, LiveReplayStats& stats) {
  switch (status) {
    case TerminalStatus::Rejected:
      ++stats.finish_rejected;
      break;
    case TerminalStatus::Cancelled:
      ++stats.finish_cancelled;
      break;
    case TerminalStatus::Failed:
      ++stats.finish_failed;
      break;
    default:
      break;
  }
}

void recordStatsReply(const protocol::StatsReply& reply, std::uint32_t target, double now_ms,
                      LiveReplayStats& stats, ReplayCollector& collector) {
  stats.timing_end[target] = reply.timing;
  stats.handoff_expired_end[target] = handoffExpiredOf(reply);
  if (reply.faults) stats.faults_end[target] = reply.faults;
  const std::uint32_t ranks = stats.ranks_per_target[target];
  for (const protocol::RankStats& rs : reply.ranks) {
    if (rs.dp_rank >= ranks) continue;
    collector.onEngineSample({.time_ms = now_ms,
                              .dp_rank = stats.rank_offset[target] + rs.dp_rank,
                              .kv_usage = rs.kv_usage,
                              .num_running = rs.running,
                              .num_waiting = rs.waiting,
                              .preemptions_total = rs.preemptions});
  }
}

void sumExpiredHolds(std::size_t num_prefill, LiveReplayStats& stats) {
  if (!stats.handoff) return;
  for (std::size_t t = 0; t < num_prefill; ++t) {
    const std::uint64_t start = stats.handoff_expired_start[t];
    const std::uint64_t end = stats.handoff_expired_end[t];
    stats.handoff->expired_holds += end >= start ? end - start : 0;
  }
}

std::optional<std::vector<std::pair<std::string, std::uint64_t>>> liveServerFaults(
    const LiveReplayStats& stats) {
  const auto reported = [](const std::optional<protocol::FaultCounts>& f) { return f.has_value(); };
  if (std::none_of(stats.faults_end.begin(), stats.faults_end.end(), reported) &&
      std::none_of(stats.faults_start.begin(), stats.faults_start.end(), reported)) {
    return std::nullopt;
  }
  std::vector<std::pair<std::string, std::uint64_t>> out;
  for (const auto& [name, member] : protocol::detail::kFaultCountKeys) {
    std::uint64_t n = 0;
    for (std::size_t t = 0; t < stats.faults_end.size(); ++t) {
      if (!stats.faults_end[t]) continue;
      const std::uint64_t end = (*stats.faults_end[t]).*member;
      const std::uint64_t start = t < stats.faults_start.size() && stats.faults_start[t]
                                      ? (*stats.faults_start[t]).*member
                                      : 0;
      n += end >= start ? end - start : 0;
    }
    out.emplace_back(name, n);
  }
  return out;
}

}  // namespace mocker::replay
