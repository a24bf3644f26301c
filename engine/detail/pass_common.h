// Pieces of a pass result that every scheduler fills the same way (engine.md §2.4, §9, §10).
//
// Internal to engine/. Pure functions.
#pragma once

#include <cstdint>

#include "engine/detail/stats.h"
#include "engine/types.h"

namespace mocker::engine::detail {

/// Stamps the pass end (start + prefill + decode) on the result and on every signal, and the
/// FPM wall time in seconds.
inline void stampPassEnd(PassResult& out, double now_ms) {
  out.end_ms = now_ms + out.prefill_ms + out.decode_ms;
  for (OutputSignal& s : out.outputs) s.time_ms = out.end_ms;
  out.fpm.wall_time = (out.end_ms - now_ms) / 1000.0;
}

/// FPM queue fields from the incrementally maintained waiting-queue moments (§9.1).
inline void fillQueued(QueuedStats& q, const RunningMoments& prefill,
                       const RunningMoments& decode) {
  q.num_prefill_requests = prefill.count();
  q.sum_prefill_tokens = prefill.sum();
  q.var_prefill_length = prefill.variance();
  q.num_decode_requests = decode.count();
  q.sum_decode_kv_tokens = decode.sum();
  q.var_decode_kv_tokens = decode.variance();
}

/// Load metrics (§10) with the derived usage and hit-rate fields.
struct LoadCounts {
  std::uint32_t dp_rank = 0;
  std::uint64_t active_blocks = 0;
  std::uint64_t total_blocks = 0;
  std::uint64_t running = 0;
  std::uint64_t waiting = 0;
  std::uint64_t preemptions = 0;
  std::uint64_t prefix_queries_tokens = 0;
  std::uint64_t prefix_hits_tokens = 0;
};
inline LoadMetrics makeLoadMetrics(const LoadCounts& c) {
  LoadMetrics m;
  m.dp_rank = c.dp_rank;
  m.active_blocks = c.active_blocks;
  m.total_blocks = c.total_blocks;
  m.kv_usage = c.total_blocks == 0
                   ? 0.0
                   : static_cast<double>(c.active_blocks) / static_cast<double>(c.total_blocks);
  m.running_requests = c.running;
  m.waiting_requests = c.waiting;
  m.preemptions_total = c.preemptions;
  m.prefix_cache_queries_tokens = c.prefix_queries_tokens;
  m.prefix_cache_hits_tokens = c.prefix_hits_tokens;
  m.prefix_cache_hit_rate = c.prefix_queries_tokens == 0
                                ? 0.0
                                : static_cast<double>(c.prefix_hits_tokens) /
                                      static_cast<double>(c.prefix_queries_tokens);
  return m;
}

}  // namespace mocker::engine::detail
