// PrefillHolds: a prefill worker's side of a live handoff (service/README.md, "Disaggregated
// prefill/decode (live)"). After the pass that completes a prompt, the request's KV is held under
// an unguessable key until a decode worker fetches it (answered at the modelled transfer end),
// releases it, or the engine's hold timeout expires it. No sockets, no clock reads, no engine
// calls: the serve loop asks, acts on the handoff socket and the engine, and reports back.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/config.h"
#include "engine/types.h"
#include "service/loop_clock.h"

namespace mocker::service {

/// An unguessable handoff key (protocol::kHandoffKeyBytes bytes from the OS's random source).
std::string randomHandoffKey();

class PrefillHolds {
 public:
  using Clock = std::chrono::steady_clock;
  /// Who asked for a fetch: the decode worker's routing id on the handoff ROUTER and its framing.
  struct Requester {
    std::string peer;
    bool delimiter = false;
  };
  /// A kv_fetch whose transfer end has come: `held` is the request it releases (its KV was
  /// still held, the answer is `ready`), nullopt when the hold ended meanwhile (`not_found`).
  struct DueFetch {
    std::string key;
    Requester to;
    std::optional<engine::RequestId> held;
  };

  /// `engine` prices a transfer (engine::kvTransferMs); it must outlive the holds.
  explicit PrefillHolds(const engine::EngineConfig& engine) : engine_(engine) {}
  explicit PrefillHolds(engine::EngineConfig&&) = delete;  // a temporary would dangle

  /// Holds request `id` under `key` (a new key): its prefill pass ended at `prefill_end_ms`,
  /// and `max_tokens` tokens of KV (the prompt rounded up to blocks) can be transferred.
  void hold(const std::string& key, engine::RequestId id, double prefill_end_ms,
            std::uint32_t max_tokens);
  /// A kv_fetch of `key` for `tokens` tokens: its due time (the prefill pass's end plus the
  /// transfer of min(tokens, max_tokens), on `clock` when passes are paced, else `now`), or
  /// nullopt when `key` is not held or already being fetched (answer `not_found` at once).
  /// `late` (a fetch_late fault) is added to the due time.
  std::optional<Clock::time_point> fetch(const std::string& key, std::uint32_t tokens,
                                         Requester from, Clock::time_point now,
                                         const LoopClock* paced_clock,
                                         Clock::duration late = Clock::duration::zero());
  /// The request held under `key` and not being fetched (what a fetch would answer `ready`
  /// for), or nullopt.
  std::optional<engine::RequestId> fetchable(const std::string& key) const {
    const auto it = held_.find(key);
    if (it == held_.end() || it->second.fetching) return std::nullopt;
    return it->second.id;
  }
  /// The fetches due by `now`, earliest first, removed; each one still held releases its hold.
  std::vector<DueFetch> takeDue(Clock::time_point now);
  /// A kv_release of `key`: the held request it frees (its pending fetch is dropped), or
  /// nullopt when nothing is held under `key` (released, fetched, expired or unknown).
  std::optional<engine::RequestId> release(const std::string& key);
  /// Request `id` left the engine (cancelled): its key names nothing any more. A fetch of it
  /// in progress is answered `not_found` when due. False if `id` was not held.
  bool forget(engine::RequestId id);
  /// What expire() ended: the key, and who was fetching it (answered `not_found` at once).
  struct Expired {
    std::string key;
    std::vector<Requester> fetches;
  };
  /// The engine's hold timeout ended request `id`'s hold, and its fetches in progress (removed);
  /// nullopt if `id` was not held.
  std::optional<Expired> expire(engine::RequestId id);
  /// Every held request, in one order (shutdown); the holds and fetches are all gone after.
  std::vector<engine::RequestId> takeAll();

  bool isHeld(engine::RequestId id) const { return keys_.contains(id); }
  std::size_t numHeld() const { return held_.size(); }
  std::size_t numFetching() const { return fetches_.size(); }
  /// The earliest due time of a fetch in progress (when the loop must wake up).
  std::optional<Clock::time_point> nextDue() const;

 private:
  struct Held {
    engine::RequestId id;
    double prefill_end_ms = 0.0;
    std::uint32_t max_tokens = 0;
    bool fetching = false;  ///< a kv_fetch is being answered (at its transfer end)
  };
  struct PendingFetch {
    Clock::time_point due;
    std::string key;
    Requester to;
  };
  void erase(std::unordered_map<std::string, Held>::iterator it);

  const engine::EngineConfig& engine_;
  std::unordered_map<std::string, Held> held_;               // by handoff key
  std::unordered_map<engine::RequestId, std::string> keys_;  // engine id → key
  std::vector<PendingFetch> fetches_;                        // any order
};

}  // namespace mocker::service
