// Test harness for engine scenarios: drives an Engine step by step on a virtual clock (each pass
// starts at the previous pass's end), and after EVERY step checks the engine's invariants, the
// token budget, max_num_seqs, and that the KV events replayed into one set per tier (medium)
// reproduce exactly that tier's hashes (so every Removed was Stored before in the same tier,
// Stored happens only on 0 → 1 copies; the offload tiers' events are checked the same way).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <deque>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "engine/engine.h"

namespace mocker::engine::testing {

/// The reference test defaults: vllm, block_size 4, 16 blocks.
inline EngineConfig specConfig() { return EngineConfig{.num_gpu_blocks = 16, .block_size = 4}; }

/// The same defaults for any engine type: 16 blocks (SGLang: pages) of 4 tokens.
inline EngineConfig specConfig(EngineType type) {
  if (type == EngineType::Sglang) {
    EngineConfig c;
    c.engine_type = EngineType::Sglang;
    c.num_gpu_blocks = 16;
    c.sglang.page_size = 4;
    return c;
  }
  EngineConfig c = specConfig();
  c.engine_type = type;
  return c;
}

inline std::vector<std::uint32_t> range(std::uint32_t first, std::uint32_t last) {
  std::vector<std::uint32_t> v(last - first + 1);
  std::iota(v.begin(), v.end(), first);
  return v;
}

inline std::vector<std::uint32_t> concat(std::vector<std::uint32_t> a,
                                         const std::vector<std::uint32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class Harness {
 public:
  explicit Harness(EngineConfig config) : engine_(std::move(config)) {
    visible_.resize(engine_.dpSize() * kTiers);
    now_.resize(engine_.dpSize(), 0.0);
  }

  Engine& engine() { return engine_; }

  RequestId submit(std::vector<std::uint32_t> tokens, std::uint32_t max_output,
                   std::uint32_t dp_rank = 0) {
    auto id = engine_.submit(
        Request{.tokens = std::move(tokens), .max_output_tokens = max_output, .dp_rank = dp_rank});
    EXPECT_TRUE(id.has_value()) << (id ? "" : id.error().toString());
    return id ? *id : RequestId{};
  }

  /// One pass of `rank` at its clock; checks every per-step invariant.
  const PassResult& step(std::uint32_t rank = 0) {
    passes_.push_back(engine_.step(rank, now_[rank]));
    const PassResult& p = passes_.back();
    now_[rank] = p.end_ms;
    const std::string where = "pass " + std::to_string(passes_.size());
    const Status ok = engine_.checkInvariantsForTest(rank);
    EXPECT_TRUE(ok.has_value()) << where << ": " << (ok ? "" : ok.error().message);
    const EngineConfig& c = engine_.config();
    const std::uint64_t scheduled_tokens =
        p.fpm.scheduled.sum_prefill_tokens + p.fpm.scheduled.num_decode_requests;
    if (c.engine_type == EngineType::Sglang) {
      // max_num_batched_tokens does not apply; every chunk is charged against rem_chunk.
      EXPECT_LE(p.fpm.scheduled.sum_prefill_tokens, c.sglang.chunked_prefill_size) << where;
    } else if (c.max_num_batched_tokens) {
      EXPECT_LE(scheduled_tokens, *c.max_num_batched_tokens) << where;
    }
    if (c.max_num_seqs) {
      EXPECT_LE(p.load.running_requests, *c.max_num_seqs) << where;
    }
    EXPECT_EQ(p.dp_rank, rank) << where;
    const auto vis = [&](Medium m) -> std::set<std::uint64_t>& {
      return visible_[rank * kTiers + static_cast<std::size_t>(m)];
    };
    for (const KvEvent& e : p.kv_events) {
      if (const auto* s = std::get_if<BlockStored>(&e)) {
        // GPU runs carry their tokens; an offload tier's stored block carries none (vLLM's).
        if (s->medium == Medium::Gpu) {
          EXPECT_EQ(s->token_ids.size(), s->block_hashes.size() * s->block_size) << where;
        }
        for (std::uint64_t h : s->block_hashes) {
          EXPECT_TRUE(vis(s->medium).insert(h).second)
              << where << ": Stored twice without Removed in " << mediumName(s->medium);
        }
      } else if (const auto* r = std::get_if<BlockRemoved>(&e)) {
        EXPECT_EQ(vis(r->medium).erase(r->block_hash), 1u)
            << where << ": Removed a hash never Stored in " << mediumName(r->medium);
      } else {
        vis(Medium::Gpu).clear();
      }
    }
    // With KV events off (Engine::setKvEvents) there is nothing to reproduce the tiers from.
    if (!engine_.kvEvents()) {
      EXPECT_TRUE(p.kv_events.empty()) << where;
      return p;
    }
    for (Medium m : {Medium::Gpu, Medium::Cpu, Medium::Disk}) {
      const auto held = engine_.tierBlockHashes(rank, m);
      EXPECT_EQ(std::set<std::uint64_t>(held.begin(), held.end()), vis(m))
          << where << ": events do not reproduce the " << mediumName(m) << " tier";
    }
    return p;
  }

  /// Steps rank 0 until it has no work; returns the number of passes.
  int runUntilIdle(std::uint32_t rank = 0, int max_passes = 100000) {
    int n = 0;
    while (engine_.hasWork(rank) && n < max_passes) {
      // Nothing to do until a timer (an offload-tier transfer, a handoff): wake up for it.
      if (!step(rank).did_work) {
        if (const auto timer = engine_.nextTimerMs(rank)) advanceTo(*timer, rank);
      }
      ++n;
    }
    EXPECT_FALSE(engine_.hasWork(rank)) << "still busy after " << n << " passes";
    return n;
  }

  double now(std::uint32_t rank = 0) const { return now_[rank]; }
  /// Moves rank's clock forward to `t` (the next step starts there); never backwards.
  void advanceTo(double t, std::uint32_t rank = 0) { now_[rank] = std::max(now_[rank], t); }
  const std::deque<PassResult>& passes() const { return passes_; }

  /// Output signals of `id` across all passes so far.
  std::vector<OutputSignal> signalsOf(RequestId id) const {
    std::vector<OutputSignal> out;
    for (const auto& p : passes_) {
      for (const auto& s : p.outputs) {
        if (s.id == id) out.push_back(s);
      }
    }
    return out;
  }

 private:
  static constexpr std::size_t kTiers = 3;  // GPU, CPU, DISK
  Engine engine_;
  std::vector<double> now_;
  std::vector<std::set<std::uint64_t>> visible_;
  // A deque: step() returns references that must stay valid as later passes are appended.
  std::deque<PassResult> passes_;
};

inline std::vector<BlockStored> storedEvents(const PassResult& p) {
  std::vector<BlockStored> out;
  for (const auto& e : p.kv_events) {
    if (const auto* s = std::get_if<BlockStored>(&e)) out.push_back(*s);
  }
  return out;
}

inline std::vector<std::uint64_t> removedHashes(const PassResult& p) {
  std::vector<std::uint64_t> out;
  for (const auto& e : p.kv_events) {
    if (const auto* r = std::get_if<BlockRemoved>(&e)) {
      out.push_back(r->block_hash);
    }
  }
  return out;
}

/// Expects two runs' passes to be the same pass (times, work, admissions, outputs, forward-pass
/// metrics, load; and the KV events when `with_events`).
inline void expectSamePass(const PassResult& a, const PassResult& b, bool with_events) {
  EXPECT_EQ(a.start_ms, b.start_ms);
  EXPECT_EQ(a.end_ms, b.end_ms);
  EXPECT_EQ(a.did_work, b.did_work);
  EXPECT_EQ(a.admissions, b.admissions);
  EXPECT_EQ(a.outputs, b.outputs);
  if (with_events) {
    EXPECT_EQ(a.kv_events, b.kv_events);
  }
  EXPECT_EQ(a.fpm, b.fpm);
  EXPECT_EQ(a.load, b.load);
}

/// A seeded random workload for tier soaks: `requests` prompts over 5 shared prefix groups
/// (group g's prompt starts g * 100 + 1 and is `min_len` + 4 * k tokens long, k < `len_steps`),
/// up to 5 unique tokens after it, 1-4 output tokens; 0-2 steps between submits (advancing to
/// the next timer when a step did no work), and a cancel of an earlier request one time in
/// seven. The caller runs the harness until idle and checks what it soaks.
inline void randomTierSoak(Harness& h, int requests, std::uint32_t min_len,
                           std::uint32_t len_steps) {
  std::mt19937 mt(7);
  const auto rng = [&] { return static_cast<std::uint32_t>(mt()); };
  std::vector<RequestId> ids;
  for (int i = 0; i < requests; ++i) {
    const std::uint32_t group = rng() % 5;
    auto prompt = range(group * 100 + 1, group * 100 + min_len + 4 * (rng() % len_steps));
    for (std::uint32_t k = rng() % 6; k > 0; --k) prompt.push_back(1000 + rng() % 50);
    ids.push_back(h.submit(prompt, 1 + rng() % 4));
    for (std::uint32_t s = rng() % 3; s > 0 && h.engine().hasWork(0); --s) {
      if (!h.step().did_work) {
        if (const auto t = h.engine().nextTimerMs(0)) h.advanceTo(*t);
      }
    }
    if (rng() % 7 == 0) (void)h.engine().cancel(ids[rng() % ids.size()]);
  }
}

}  // namespace mocker::engine::testing
