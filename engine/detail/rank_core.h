// RankCore: the per-DP-rank scheduler interface the Engine facade dispatches to. One
// implementation per engine family (vllm/trtllm in scheduler.h, sglang in sglang_scheduler.h).
//
// Internal to engine/. Not thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/result.h"
#include "engine/lora.h"
#include "engine/types.h"

namespace mocker::engine::detail {

/// A request after validation, as handed to a rank.
struct AcceptedRequest {
  RequestId id;
  std::vector<std::uint32_t> tokens;    // prompt
  std::uint32_t max_output_tokens = 0;  // effective (plan length when planned)
  std::optional<std::vector<std::uint32_t>> output_token_ids;
  std::uint32_t lora_id = 0;                            // LoRA adapter id (0 = none)
  std::string lora_name;                                // its name (empty = none)
  std::optional<std::uint64_t> lora_key;                // its hash key (block_hash.h)
  std::shared_ptr<const PromptSource> deferred_prompt;  // the prompt, when `tokens` is empty
  std::vector<std::uint64_t> prompt_hashes;             // Request::prompt_hashes (or empty)
};

/// Adds `request` to a scheduler's lookup map and the back of its waiting queue with the strong
/// guarantee: if either allocation throws (std::bad_alloc), both are left unchanged. Returns the
/// map entry. REQUIRES: `request.id` is not in `requests`.
template <typename ReqMap, typename Req>
typename ReqMap::iterator enqueueWaiting(ReqMap& requests, std::deque<RequestId>& waiting,
                                         Req&& request) {
  const RequestId id = request.id;
  const auto it = requests.try_emplace(id, std::forward<Req>(request)).first;
  try {
    waiting.push_back(id);
  } catch (...) {
    requests.erase(it);
    throw;
  }
  return it;
}

class RankCore {
 public:
  virtual ~RankCore() = default;
  /// Queues `request`. May throw std::bad_alloc, and then leaves the rank unchanged.
  virtual void submit(AcceptedRequest&& request) = 0;
  /// True if the request was waiting or running (and is now gone).
  virtual bool cancel(RequestId id) = 0;
  virtual PassResult step(double now_ms) = 0;
  virtual bool hasWork() const = 0;
  virtual LoadMetrics loadMetrics() const = 0;
  virtual std::vector<std::uint64_t> cachedBlockHashes() const = 0;
  /// Sorted hashes a KV offload tier holds (Medium::Cpu = G2, Disk = G3; Gpu = the pool's
  /// cachedBlockHashes). Empty when the tier is off.
  virtual std::vector<std::uint64_t> tierBlockHashes(Medium medium) const {
    return medium == Medium::Gpu ? cachedBlockHashes() : std::vector<std::uint64_t>{};
  }
  virtual bool clearCache() = 0;
  /// Engine::setKvEvents: a rank may stop building its KV events (the engine drops whatever a
  /// rank still returns); nothing else may change.
  virtual void setKvEvents(bool /*enabled*/) {}
  /// Engine::setKvEventTokens: whether BlockStored carries token ids.
  virtual void setKvEventTokens(bool /*enabled*/) {}
  virtual Status checkInvariants() const = 0;
  /// LoRA adapters of the running and waiting requests (empty when LoRA is off).
  virtual LoraUsage loraUsage() const { return {}; }
  /// lora_load at `now_ms` (Engine::loadLora): adapter `id` becomes resident; true if it was
  /// not (a load: the rank is busy for lora_load_ms from max(now_ms, its last pass's end)).
  virtual bool loadLora(std::uint32_t /*id*/, double /*now_ms*/) { return false; }
  /// lora_unload (Engine::unloadLora): adapter `id` is no longer resident; true if it was.
  virtual bool unloadLora(std::uint32_t /*id*/) { return false; }

  // Disaggregation (README "Disaggregated prefill/decode"); both scheduler families implement
  // them over detail::HandoffBook.
  /// Decode worker: queues a handoff for a reservation at `now_ms` (tried at once). May throw
  /// std::bad_alloc, and then leaves the rank unchanged.
  virtual void submitHandoff(AcceptedRequest&& request, const HandoffTicket& ticket,
                             double now_ms) = 0;
  /// Prefill worker: frees the blocks of a held request. True if it was held.
  virtual bool releaseHeld(RequestId id) = 0;
  /// The earliest modelled time at which a pass has something to do without new input: a
  /// reserved handoff's activation or a hold's timeout. nullopt if none.
  virtual std::optional<double> nextTimerMs() const = 0;
  /// Decode worker: the KV of reserved handoff `id`, submitted with its ready time unknown, is
  /// in place at `now_ms`. True if `id` was such a reserved handoff.
  virtual bool handoffReady(RequestId /*id*/, double /*now_ms*/) { return false; }
  /// Decode worker: appends the reservations made since the last call of handoffs whose ready
  /// time is unknown, in reservation order.
  virtual void takeReservations(std::vector<HandoffReservation>& /*out*/) {}
};

}  // namespace mocker::engine::detail
