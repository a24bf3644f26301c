#include "engine/engine.h"

// syntheticToken hashes 20 bytes per output token: XXH3's primitives, inlined.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <new>
#include <string>

#include "engine/detail/pass.h"
#include "engine/scheduler.h"
#include "engine/sglang_scheduler.h"

namespace mocker::engine {
namespace {

/// Upper bound on prompt + output tokens of one request: keeps u32 positions and block
/// arithmetic far from overflow (2^28 tokens ≈ 1 GiB of token ids).
constexpr std::uint64_t kMaxRequestTokens = std::uint64_t{1} << 28;

std::unique_ptr<detail::RankCore> makeRank(const EngineConfig& config, std::uint32_t rank) {
  switch (config.engine_type) {
    case EngineType::Vllm:
    case EngineType::Trtllm:
      return std::make_unique<VllmScheduler>(config, rank);
    case EngineType::Sglang:
      return std::make_unique<SglangScheduler>(config, rank);
  }
  MOCKER_CHECK_MSG(false, "unknown engine_type");
  return nullptr;
}

}  // namespace

std::uint32_t syntheticToken(std::uint64_t token_seed, RequestId id, std::uint32_t k) {
  // XXH3-64, seed 0, of the 20 bytes token_seed (LE u64) ‖ id (LE u64) ‖ k (LE u32), computed
  // from the words themselves: XXH3 of 17–128 bytes (here 20) is len·P1 plus mix16B of bytes
  // [0, 16) and of the last 16, [4, 20), against secret words 0–3, then its avalanche. Built
  // in a byte buffer, the bytes were stored one by one and read back 8 at a time (two
  // store-forwarding stalls per output token). engine_tests pins it against
  // XXH3_64bits_withSeed over the byte buffer.
  constexpr std::uint64_t kLen = 20;
  const std::uint64_t id_value = id.value();
  const std::uint64_t head = token_seed;                                   // bytes [0, 8)
  const std::uint64_t mid = id_value;                                      // bytes [8, 16)
  const std::uint64_t at4 = (token_seed >> 32) | (id_value << 32);         // bytes [4, 12)
  const std::uint64_t at12 = (id_value >> 32) | (std::uint64_t{k} << 32);  // bytes [12, 20)
  const xxh_u8* secret = XXH3_kSecret;
  std::uint64_t acc = kLen * XXH_PRIME64_1;
  acc += XXH3_mul128_fold64(head ^ XXH_readLE64(secret), mid ^ XXH_readLE64(secret + 8));
  acc += XXH3_mul128_fold64(at4 ^ XXH_readLE64(secret + 16), at12 ^ XXH_readLE64(secret + 24));
  return 1000 + static_cast<std::uint32_t>(XXH3_avalanche(acc) % 31000);
}

Engine::Engine(EngineConfig config) : config_(std::make_unique<EngineConfig>(std::move(config))) {
  MOCKER_CHECK(validateEngineConfig(*config_).has_value());
  ranks_.reserve(config_->dp_size);
  for (std::uint32_t r = 0; r < config_->dp_size; ++r) ranks_.push_back(makeRank(*config_, r));
}

Engine::~Engine() = default;
Engine::Engine(Engine&&) noexcept = default;
Engine& Engine::operator=(Engine&&) noexcept = default;

Result<Engine> Engine::create(EngineConfig config) {
  MOCKER_TRY_VOID(validateEngineConfig(config));
  return Engine(std::move(config));
}

const EngineConfig& Engine::config() const { return *config_; }
std::uint32_t Engine::blockSize() const { return effectiveBlockSize(*config_); }
std::uint32_t Engine::dpSize() const { return config_->dp_size; }

Result<RequestId> Engine::submit(Request request) {
  if (request.deferred_prompt && !request.tokens.empty()) {
    return invalidArgument("tokens: a request with a deferred prompt has no tokens of its own");
  }
  const std::uint64_t prompt_size =
      request.deferred_prompt ? request.deferred_prompt->size() : request.tokens.size();
  if (prompt_size == 0) return invalidArgument("tokens: the prompt must not be empty");
  if (request.dp_rank >= config_->dp_size) {
    return invalidArgument("dp_rank " + std::to_string(request.dp_rank) +
                           " is out of range (dp_size " + std::to_string(config_->dp_size) + ")");
  }
  const std::uint64_t output =
      request.output_token_ids ? request.output_token_ids->size() : request.max_output_tokens;
  if (output == 0 && !config_->allow_empty_output) {
    return invalidArgument(
        "max_output_tokens: a request must produce at least one token (allow_empty_output is "
        "off)");
  }
  if (prompt_size + output > kMaxRequestTokens) {
    return invalidArgument("request too large: prompt + output tokens exceed " +
                           std::to_string(kMaxRequestTokens));
  }
  if (!request.prompt_hashes.empty() && request.prompt_hashes.size() != prompt_size / blockSize()) {
    return invalidArgument("prompt_hashes: " + std::to_string(request.prompt_hashes.size()) +
                           " hashes for " + std::to_string(prompt_size / blockSize()) +
                           " full blocks");
  }
  if (config_->engine_type == EngineType::Sglang) request.prompt_hashes.clear();
  std::uint32_t lora_id = 0;
  std::optional<std::uint64_t> lora_key;
  if (request.lora) {
    MOCKER_TRY_VOID(checkLoraName(*request.lora, "lora"));
    if (config_->max_loras == 0) {
      return invalidArgument("lora: adapter '" + *request.lora +
                             "' named, but LoRA is off on this engine (max_loras 0)");
    }
    MOCKER_TRY(lora_id, loras_.intern(*request.lora));
    lora_key = loraHashKey(*request.lora, config_->hash_seed);
  }
  const RequestId id{next_id_++};
  detail::AcceptedRequest accepted{id,
                                   std::move(request.tokens),
                                   static_cast<std::uint32_t>(output),
                                   std::move(request.output_token_ids),
                                   lora_id,
                                   std::move(request.lora).value_or(std::string()),
                                   lora_key,
                                   std::move(request.deferred_prompt),
                                   std::move(request.prompt_hashes)};
  try {
    ranks_[request.dp_rank]->submit(std::move(accepted));
  } catch (const std::bad_alloc&) {
    // Client input never aborts the process: the rank is unchanged, the request is refused.
    return Error{ErrorCode::ResourceExhausted,
                 "out of memory: the engine could not queue the request"};
  }
  return id;
}

Result<RequestId> Engine::submitHandoff(HandoffTicket ticket, std::uint32_t dp_rank,
                                        double now_ms) {
  if (config_->worker_type != WorkerType::Decode) {
    return invalidArgument("handoff: this worker's worker_type is " +
                           std::string(toString(config_->worker_type)) +
                           ", only a decode worker accepts handoffs");
  }
  if (ticket.block_size != blockSize()) {
    return invalidArgument("handoff: block_size " + std::to_string(ticket.block_size) +
                           " of the prefill worker differs from this decode worker's " +
                           std::to_string(blockSize()) + " (both must use the same block size)");
  }
  if (ticket.tokens.empty()) return invalidArgument("handoff: the prompt must not be empty");
  if (dp_rank >= config_->dp_size) {
    return invalidArgument("dp_rank " + std::to_string(dp_rank) + " is out of range (dp_size " +
                           std::to_string(config_->dp_size) + ")");
  }
  // ready_ms = +infinity: unknown until handoffReady (a live decode worker fetches the KV).
  if ((!std::isfinite(ticket.ready_ms) &&
       ticket.ready_ms != std::numeric_limits<double>::infinity()) ||
      !std::isfinite(ticket.prefill_end_ms)) {
    return invalidArgument(
        "handoff: prefill_end_ms must be finite and ready_ms finite or +infinity (unknown)");
  }
  const std::uint64_t output =
      ticket.output_token_ids ? ticket.output_token_ids->size() : ticket.max_output_tokens;
  if (ticket.tokens.size() + output > kMaxRequestTokens) {
    return invalidArgument("request too large: prompt + output tokens exceed " +
                           std::to_string(kMaxRequestTokens));
  }
  const detail::EffectiveLimit limit = detail::effectiveLimit(*config_);
  if (ticket.tokens.size() >= limit.tokens) {
    return invalidArgument("handoff: a prompt of " + std::to_string(ticket.tokens.size()) +
                           " tokens reaches this decode worker's " +
                           std::string(lengthLimitName(limit.binding)) + " limit (" +
                           std::to_string(limit.tokens) + " tokens)");
  }
  const RequestId id{next_id_++};
  detail::AcceptedRequest accepted{id, ticket.tokens, static_cast<std::uint32_t>(output),
                                   ticket.output_token_ids};
  try {
    ranks_[dp_rank]->submitHandoff(std::move(accepted), ticket, now_ms);
  } catch (const std::bad_alloc&) {
    return Error{ErrorCode::ResourceExhausted,
                 "out of memory: the engine could not queue the handoff"};
  }
  return id;
}

CancelResult Engine::releaseHandoff(RequestId source_id) {
  for (auto& rank : ranks_) {
    if (rank->releaseHeld(source_id)) return CancelResult::Applied;
  }
  return CancelResult::Noop;
}

std::vector<HandoffReservation> Engine::takeReservations() {
  std::vector<HandoffReservation> out;
  for (auto& rank : ranks_) rank->takeReservations(out);
  return out;
}

CancelResult Engine::handoffReady(RequestId id, double now_ms) {
  if (!std::isfinite(now_ms)) return CancelResult::Noop;
  for (auto& rank : ranks_) {
    if (rank->handoffReady(id, now_ms)) return CancelResult::Applied;
  }
  return CancelResult::Noop;
}

std::optional<double> Engine::nextTimerMs(std::uint32_t dp_rank) const {
  return ranks_.at(dp_rank)->nextTimerMs();
}

CancelResult Engine::cancel(RequestId id) {
  for (auto& rank : ranks_) {
    if (rank->cancel(id)) return CancelResult::Applied;
  }
  return CancelResult::Noop;
}

PassResult Engine::step(std::uint32_t dp_rank, double now_ms) {
  MOCKER_CHECK(dp_rank < ranks_.size());
  PassResult pass = ranks_[dp_rank]->step(now_ms);
  // Ranks that build their events anyway (vllm / trtllm: one per block) drop them here.
  if (!kv_events_) pass.kv_events.clear();
  return pass;
}

void Engine::setKvEvents(bool enabled) {
  kv_events_ = enabled;
  for (auto& rank : ranks_) rank->setKvEvents(enabled);
}

void Engine::setKvEventTokens(bool enabled) {
  for (auto& rank : ranks_) rank->setKvEventTokens(enabled);
}

bool Engine::hasWork(std::uint32_t dp_rank) const { return ranks_.at(dp_rank)->hasWork(); }

bool Engine::hasWork() const {
  return std::any_of(ranks_.begin(), ranks_.end(), [](const auto& r) { return r->hasWork(); });
}

LoadMetrics Engine::loadMetrics(std::uint32_t dp_rank) const {
  return ranks_.at(dp_rank)->loadMetrics();
}

std::vector<std::uint64_t> Engine::cachedBlockHashes(std::uint32_t dp_rank) const {
  return ranks_.at(dp_rank)->cachedBlockHashes();
}

std::vector<std::uint64_t> Engine::tierBlockHashes(std::uint32_t dp_rank, Medium medium) const {
  return ranks_.at(dp_rank)->tierBlockHashes(medium);
}

std::optional<KvEvent> Engine::resetPrefixCache(std::uint32_t dp_rank) {
  if (!ranks_.at(dp_rank)->clearCache()) return std::nullopt;
  return KvEvent{AllBlocksCleared{}};
}

Status Engine::checkInvariantsForTest(std::uint32_t dp_rank) const {
  return ranks_.at(dp_rank)->checkInvariants();
}

LoraUsage Engine::loraUsage(std::uint32_t dp_rank) const { return ranks_.at(dp_rank)->loraUsage(); }

LengthBound effectiveLengthLimit(const EngineConfig& config) {
  const detail::EffectiveLimit limit = detail::effectiveLimit(config);
  return {.tokens = limit.tokens, .binding = limit.binding};
}

namespace {

Status checkLoraOp(const EngineConfig& config, std::string_view name, std::string_view op) {
  MOCKER_TRY_VOID(checkLoraName(name, "name"));
  if (config.max_loras == 0) {
    return Error{ErrorCode::Unsupported,
                 std::string(op) + ": LoRA is off on this engine (max_loras 0)"};
  }
  return {};
}

}  // namespace

Result<bool> Engine::loadLora(std::string_view name, double now_ms) {
  MOCKER_TRY_VOID(checkLoraOp(*config_, name, "lora_load"));
  auto id = loras_.intern(name);
  if (!id) {
    return invalidArgument("name: this engine already knows " + std::to_string(kMaxLoraAdapters) +
                           " adapters (the most it interns)");
  }
  bool loaded = false;
  for (auto& rank : ranks_) loaded = rank->loadLora(*id, now_ms) || loaded;
  return loaded;
}

Result<bool> Engine::unloadLora(std::string_view name) {
  MOCKER_TRY_VOID(checkLoraOp(*config_, name, "lora_unload"));
  const std::uint32_t id = loras_.find(name);
  if (id == 0) return false;  // never named here: nothing resident
  bool held = false;
  for (auto& rank : ranks_) held = rank->unloadLora(id) || held;
  return held;
}

void discardOutputs(PassResult& pass, RequestId id) {
  std::erase_if(pass.outputs, [id](const OutputSignal& s) { return s.id == id; });
}

}  // namespace mocker::engine
