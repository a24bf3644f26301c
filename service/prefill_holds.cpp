#include "service/prefill_holds.h"

#include <sys/random.h>

#include <algorithm>
#include <cerrno>

#include "base/check.h"
#include "protocol/limits.h"

namespace mocker::service {

std::string randomHandoffKey() {
  std::string key(protocol::kHandoffKeyBytes, '\0');
  std::size_t got = 0;
  while (got < key.size()) {
    const ssize_t n = getrandom(key.data() + got, key.size() - got, 0);
    if (n > 0) {
      got += static_cast<std::size_t>(n);
    } else {
      MOCKER_CHECK(n < 0 && errno == EINTR);  // getrandom(2) only fails that way here
    }
  }
  return key;
}

void PrefillHolds::hold(const std::string& key, engine::RequestId id, double prefill_end_ms,
                        std::uint32_t max_tokens) {
  held_.emplace(key, Held{.id = id, .prefill_end_ms = prefill_end_ms, .max_tokens = max_tokens});
  keys_.emplace(id, key);
}

std::optional<PrefillHolds::Clock::time_point> PrefillHolds::fetch(
    const std::string& key, std::uint32_t tokens, Requester from, Clock::time_point now,
    const LoopClock* paced_clock, Clock::duration late) {
  const auto it = held_.find(key);
  if (it == held_.end() || it->second.fetching) return std::nullopt;
  // Ready at the modelled transfer end: the prefill pass's end plus the transfer of the tokens
  // asked for (at most the prompt's blocks), on the engine's formula.
  it->second.fetching = true;
  const double ready_ms = it->second.prefill_end_ms +
                          engine::kvTransferMs(engine_, std::min(tokens, it->second.max_tokens));
  const Clock::time_point due = (paced_clock ? paced_clock->wallAt(ready_ms) : now) + late;
  fetches_.push_back({.due = due, .key = key, .to = std::move(from)});
  return due;
}

std::vector<PrefillHolds::DueFetch> PrefillHolds::takeDue(Clock::time_point now) {
  std::vector<PendingFetch> due;
  std::erase_if(fetches_, [&](PendingFetch& f) {
    if (f.due > now) return false;
    due.push_back(std::move(f));
    return true;
  });
  std::sort(due.begin(), due.end(),
            [](const PendingFetch& a, const PendingFetch& b) { return a.due < b.due; });
  std::vector<DueFetch> out;
  out.reserve(due.size());
  for (PendingFetch& f : due) {
    DueFetch d{.key = std::move(f.key), .to = std::move(f.to), .held = std::nullopt};
    if (const auto it = held_.find(d.key); it != held_.end()) {  // else cancelled or expired
      d.held = it->second.id;
      erase(it);
    }
    out.push_back(std::move(d));
  }
  return out;
}

std::optional<engine::RequestId> PrefillHolds::release(const std::string& key) {
  const auto it = held_.find(key);
  if (it == held_.end()) return std::nullopt;
  const engine::RequestId id = it->second.id;
  std::erase_if(fetches_, [&](const PendingFetch& f) { return f.key == key; });
  erase(it);
  return id;
}

bool PrefillHolds::forget(engine::RequestId id) {
  const auto k = keys_.find(id);
  if (k == keys_.end()) return false;
  erase(held_.find(k->second));
  return true;
}

std::optional<PrefillHolds::Expired> PrefillHolds::expire(engine::RequestId id) {
  const auto k = keys_.find(id);
  if (k == keys_.end()) return std::nullopt;
  Expired out{.key = k->second, .fetches = {}};
  std::erase_if(fetches_, [&](PendingFetch& f) {
    if (f.key != out.key) return false;
    out.fetches.push_back(std::move(f.to));
    return true;
  });
  erase(held_.find(out.key));
  return out;
}

std::vector<engine::RequestId> PrefillHolds::takeAll() {
  std::vector<engine::RequestId> ids;
  ids.reserve(held_.size());
  for (const auto& [key, h] : held_) ids.push_back(h.id);
  held_.clear();
  keys_.clear();
  fetches_.clear();
  return ids;
}

std::optional<PrefillHolds::Clock::time_point> PrefillHolds::nextDue() const {
  std::optional<Clock::time_point> next;
  for (const PendingFetch& f : fetches_) {
    if (!next || f.due < *next) next = f.due;
  }
  return next;
}

void PrefillHolds::erase(std::unordered_map<std::string, Held>::iterator it) {
  MOCKER_CHECK(it != held_.end());
  keys_.erase(it->second.id);
  held_.erase(it);
}

}  // namespace mocker::service
