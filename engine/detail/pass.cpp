// Pass code both schedulers share: signals, Stored runs, pass end and load metrics (pass.h).
#include "engine/detail/pass.h"

#include <algorithm>
#include <utility>

#include "base/check.h"

namespace mocker::engine::detail {

RequestRecord::RequestRecord(AcceptedRequest&& request)
    : id(request.id),
      tokens(std::move(request.tokens)),
      deferred_prompt(std::move(request.deferred_prompt)),
      prompt_len(deferred_prompt ? deferred_prompt->size()
                                 : static_cast<std::uint32_t>(tokens.size())),
      max_output(request.max_output_tokens),
      requested_output(request.max_output_tokens),
      plan(std::move(request.output_token_ids)),
      lora_id(request.lora_id),
      lora_name(std::move(request.lora_name)),
      lora_key(request.lora_key) {
  // The prompt's block hashes the caller computed: the lazy hashing goes on from there.
  hashes.reserve(request.prompt_hashes.size());
  for (const std::uint64_t h : request.prompt_hashes) hashes.push_back(BlockHash{h});
}

void RequestRecord::materializeDeferred() {
  // Room for the first outputs (at most 4,096), so that sampling them does not copy the prompt.
  constexpr std::uint32_t kReservedOutputs = 4096;
  tokens.reserve(std::size_t{prompt_len} + std::min(max_output, kReservedOutputs));
  deferred_prompt->appendTo(tokens);
  MOCKER_CHECK(tokens.size() == prompt_len);
  deferred_prompt.reset();
}

EffectiveLimit vllmEffectiveLimit(const EngineConfig& config, std::uint32_t block_size) {
  EffectiveLimit limit;
  const auto consider = [&](std::uint64_t tokens, LengthLimit name) {
    if (tokens < limit.tokens) limit = {tokens, name};  // ties keep the earlier name
  };
  if (config.max_model_len) consider(*config.max_model_len, LengthLimit::MaxModelLen);
  consider(std::uint64_t{effectiveNumGpuBlocks(config)} * block_size, LengthLimit::KvCapacity);
  if (!config.enable_chunked_prefill && config.max_num_batched_tokens) {
    consider(*config.max_num_batched_tokens, LengthLimit::MaxNumBatchedTokens);
  }
  return limit;
}

EffectiveLimit sglangEffectiveLimit(const EngineConfig& config) {
  return {
      .tokens = std::uint64_t{effectiveNumGpuBlocks(config) - 1} * effectiveBlockSize(config) + 1,
      .binding = LengthLimit::KvCapacity};
}

EffectiveLimit effectiveLimit(const EngineConfig& config) {
  return config.engine_type == EngineType::Sglang
             ? sglangEffectiveLimit(config)
             : vllmEffectiveLimit(config, effectiveBlockSize(config));
}

void StoredRuns::flush(std::uint32_t end) {
  if (!in_run_) return;
  in_run_ = false;
  BlockStored stored;
  stored.block_hashes = rawHashes(std::span(r_.hashes).subspan(run_start_, end - run_start_));
  if (run_start_ > 0) stored.parent_block_hash = r_.hashes[run_start_ - 1].value();
  if (with_tokens_) {
    stored.token_ids.assign(r_.tokens.begin() + std::ptrdiff_t{run_start_} * block_size_,
                            r_.tokens.begin() + std::ptrdiff_t{end} * block_size_);
  }
  stored.block_size = block_size_;
  stored.lora_id = r_.lora_id;
  stored.lora_name = r_.lora_name;
  events_.emplace_back(std::move(stored));
}

std::vector<std::uint64_t> rawHashes(std::span<const BlockHash> hashes) {
  std::vector<std::uint64_t> out(hashes.size());
  for (std::size_t i = 0; i < hashes.size(); ++i) out[i] = hashes[i].value();
  return out;
}

void finishPass(PassResult& out, double now_ms, std::span<const Rejection> rejected,
                const RunningMoments& queued_prefill, const RunningMoments& queued_decode,
                const LoadMetrics& load) {
  for (const Rejection& r : rejected) {
    out.outputs.push_back({r.id, std::nullopt, 0, 0.0, Terminal::Rejected, {}, r.limit});
  }
  if (passFailed(out)) {
    out.prefill_ms = std::isfinite(out.prefill_ms) ? out.prefill_ms : 0.0;
    out.decode_ms = 0.0;
  }
  out.end_ms = now_ms + out.prefill_ms + out.decode_ms;
  for (OutputSignal& s : out.outputs) s.time_ms = out.end_ms;
  out.fpm.wall_time = (out.end_ms - now_ms) / 1000.0;

  QueuedStats& q = out.fpm.queued;
  q.num_prefill_requests = queued_prefill.count();
  q.sum_prefill_tokens = queued_prefill.sum();
  q.var_prefill_length = queued_prefill.variance();
  q.num_decode_requests = queued_decode.count();
  q.sum_decode_kv_tokens = queued_decode.sum();
  q.var_decode_kv_tokens = queued_decode.variance();
  out.load = load;
}

LoadMetrics makeLoadMetrics(const LoadCounts& c) {
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
  m.prefix_cache_queries_tokens = c.prefix.queries_tokens;
  m.prefix_cache_hits_tokens = c.prefix.hits_tokens;
  m.prefix_cache_hit_rate = c.prefix.queries_tokens == 0
                                ? 0.0
                                : static_cast<double>(c.prefix.hits_tokens) /
                                      static_cast<double>(c.prefix.queries_tokens);
  return m;
}

}  // namespace mocker::engine::detail
