// VllmScheduler: one DP rank of a vLLM v1-style continuous-batching engine
// (../shared/spec/engine.md §5) over a paged, prefix-cached BlockPool (§4), including the
// TensorRT-LLM guaranteed-no-evict variant (§6) selected by engine_type = trtllm.
//
// Owns its requests (stored once, keyed by RequestId; queues hold ids), its pool and its
// counters. Per-pass cost is proportional to the requests scheduled in that pass, not to all
// requests in the system: queue statistics are maintained incrementally and cancelled waiting
// requests are dropped lazily when they reach the head.
//
// Not thread-safe. Owned by the Engine facade.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <unordered_map>
#include <vector>

#include "engine/block_pool.h"
#include "engine/config.h"
#include "engine/detail/rank_core.h"
#include "engine/detail/stats.h"
#include "engine/timing_model.h"

namespace mocker::engine {

class VllmScheduler final : public detail::RankCore {
 public:
  /// REQUIRES: validated config with engine_type vllm or trtllm; `config` outlives this object.
  VllmScheduler(const EngineConfig& config, std::uint32_t dp_rank);

  void submit(detail::AcceptedRequest&& request) override;
  bool cancel(RequestId id) override;
  PassResult step(double now_ms) override;
  bool hasWork() const override { return num_waiting_ > 0 || !running_.empty(); }
  LoadMetrics loadMetrics() const override;
  std::vector<std::uint64_t> cachedBlockHashes() const override { return pool_.cachedHashes(); }
  bool clearCache() override { return pool_.clearCache(); }
  Status checkInvariants() const override;

 private:
  enum class ReqState : std::uint8_t { Waiting, Preempted, Running, Finished };

  struct Req {
    RequestId id;
    std::vector<std::uint32_t> tokens;  // prompt followed by every sampled output token
    std::uint32_t prompt_len = 0;
    std::uint32_t max_output = 0;
    std::optional<std::vector<std::uint32_t>> plan;
    std::uint32_t num_computed = 0;
    std::vector<BlockId> blocks;        // index = block position in the sequence
    std::vector<std::uint64_t> hashes;  // sequence hashes of full blocks, grown lazily
    std::uint32_t num_finalized = 0;    // blocks [0, num_finalized) are cache-visible
    ReqState state = ReqState::Waiting;
    std::uint32_t num_preemptions = 0;
    bool admitted_before = false;
    bool head_checked = false;
    std::uint32_t first_cached_tokens = 0;

    std::uint32_t len() const { return static_cast<std::uint32_t>(tokens.size()); }
    std::uint32_t generated() const { return len() - prompt_len; }
  };

  // One request's work in the current pass.
  struct Scheduled {
    RequestId id;
    std::uint32_t num_tokens;       // tokens computed this pass
    std::uint32_t computed_before;  // num_computed before this pass
    std::uint32_t len_at_schedule;
    std::uint32_t prompt_len;
  };

  struct PrefixMatch {
    std::uint32_t hit_blocks = 0;     // blocks claimed from the cache (after the §4.3 cap)
    std::uint32_t active_blocks = 0;  // of those, blocks currently active
  };

  bool isTrtllm() const { return config_.engine_type == EngineType::Trtllm; }
  std::uint32_t blocksFor(std::uint64_t tokens) const {
    return static_cast<std::uint32_t>((tokens + block_size_ - 1) / block_size_);
  }

  PrefixMatch lookupPrefix(Req& r);
  bool acquire(Req& r, std::uint32_t target_tokens, std::uint32_t hit_blocks,
               std::vector<KvEvent>& events);
  void finalizeBlocks(Req& r, std::vector<KvEvent>& events);
  void releaseBlocks(Req& r);
  void preempt(std::size_t running_index);
  void removeFromWaitingStats(const Req& r);
  void addToWaitingStats(const Req& r);
  /// Why a fresh head request can never run (§5.5, §6), or nullopt. Without `cached_tokens` the
  /// chunked-prefill-off check (which needs the prefix lookup) is skipped.
  std::optional<Terminal> rejectionReason(Req& r, std::optional<std::uint32_t> cached_tokens) const;
  void finish(RequestId id);
  std::uint32_t nextToken(const Req& r) const;
  bool reachedEnd(const Req& r) const;

  const EngineConfig& config_;
  const std::uint32_t dp_rank_;
  const std::uint32_t block_size_;
  const TimingModel timing_;
  BlockPool pool_;
  const std::uint32_t max_len_;  // min(max_model_len, N·B): generation stops there

  std::unordered_map<RequestId, Req> requests_;  // lookup only; order comes from the queues
  std::deque<RequestId> waiting_;  // may hold ids of cancelled requests (dropped at the head)
  std::vector<Req*> running_;      // nodes of requests_ (stable until erased)
  std::uint64_t num_waiting_ = 0;

  detail::RunningMoments queued_prefill_;  // prompt lengths of never-run waiting requests
  detail::RunningMoments queued_decode_;   // lengths of preempted waiting requests

  std::uint64_t preemptions_total_ = 0;
  std::uint64_t prefix_queries_tokens_ = 0;
  std::uint64_t prefix_hits_tokens_ = 0;

  // Per-pass scratch (kept as members to reuse their capacity).
  std::vector<Scheduled> scheduled_;
};

}  // namespace mocker::engine
