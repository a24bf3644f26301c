// PendingHandoffs: a decode worker's side of a live handoff (service/README.md, "Disaggregated
// prefill/decode (live)"). A submit carrying a prefill worker's ticket waits here for its KV: from
// the submit (add), through the kv_fetch sent to the source when the engine reserved its blocks
// (sent, with the fetch deadline), until the kv_fetch_reply arrives (remove) or the deadline
// passes (expired). No sockets, no clock reads, no engine calls.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/types.h"

namespace mocker::service {

class PendingHandoffs {
 public:
  using Clock = std::chrono::steady_clock;
  struct Handoff {
    std::string source;                         ///< the prefill worker's handoff endpoint
    std::string key;                            ///< the handoff key the KV is held under there
    std::optional<Clock::time_point> deadline;  ///< set when its kv_fetch went out
  };

  /// Request `id` waits for the KV held at `source` under `key` (a key no other request of this
  /// worker waits for: see hasKey). Throws std::bad_alloc with nothing added.
  void add(engine::RequestId id, const std::string& source, const std::string& key);
  /// Its kv_fetch went out: it fails unless the reply comes by `deadline`. False if unknown.
  bool sent(engine::RequestId id, Clock::time_point deadline);
  /// The requests whose kv_fetch got no reply by `now`, in engine id order (still pending:
  /// the caller fails each one).
  std::vector<engine::RequestId> expired(Clock::time_point now) const;
  /// Request `id` no longer waits (its KV arrived, it failed or was cancelled): what it waited
  /// for, or nullopt if it did not wait.
  std::optional<Handoff> remove(engine::RequestId id);
  /// Every pending handoff, in one order (shutdown); none is left after.
  std::vector<Handoff> takeAll();

  const Handoff* find(engine::RequestId id) const;
  /// The request waiting for `key`'s KV.
  std::optional<engine::RequestId> byKey(const std::string& key) const;
  bool hasKey(const std::string& key) const { return keys_.contains(key); }
  std::size_t size() const { return pending_.size(); }
  /// The earliest fetch deadline (when the loop must wake up).
  std::optional<Clock::time_point> nextDeadline() const;

 private:
  std::unordered_map<engine::RequestId, Handoff> pending_;
  std::unordered_map<std::string, engine::RequestId> keys_;  // key → engine id
};

}  // namespace mocker::service
