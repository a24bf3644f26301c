#include "service/pending_handoffs.h"

#include <algorithm>
#include <new>

namespace mocker::service {

void PendingHandoffs::add(engine::RequestId id, const std::string& source, const std::string& key) {
  keys_.emplace(key, id);
  try {
    pending_.emplace(id, Handoff{source, key, std::nullopt});
  } catch (const std::bad_alloc&) {
    keys_.erase(key);
    throw;
  }
}

bool PendingHandoffs::sent(engine::RequestId id, Clock::time_point deadline) {
  const auto it = pending_.find(id);
  if (it == pending_.end()) return false;
  it->second.deadline = deadline;
  return true;
}

std::vector<engine::RequestId> PendingHandoffs::expired(Clock::time_point now) const {
  std::vector<engine::RequestId> late;
  for (const auto& [id, p] : pending_) {
    if (p.deadline && *p.deadline <= now) late.push_back(id);
  }
  std::sort(late.begin(), late.end());
  return late;
}

std::optional<PendingHandoffs::Handoff> PendingHandoffs::remove(engine::RequestId id) {
  const auto it = pending_.find(id);
  if (it == pending_.end()) return std::nullopt;
  Handoff h = std::move(it->second);
  keys_.erase(h.key);
  pending_.erase(it);
  return h;
}

std::vector<PendingHandoffs::Handoff> PendingHandoffs::takeAll() {
  std::vector<Handoff> all;
  all.reserve(pending_.size());
  for (auto& [id, p] : pending_) all.push_back(std::move(p));
  pending_.clear();
  keys_.clear();
  return all;
}

const PendingHandoffs::Handoff* PendingHandoffs::find(engine::RequestId id) const {
  const auto it = pending_.find(id);
  return it == pending_.end() ? nullptr : &it->second;
}

std::optional<engine::RequestId> PendingHandoffs::byKey(const std::string& key) const {
  const auto it = keys_.find(key);
  if (it == keys_.end()) return std::nullopt;
  return it->second;
}

std::optional<PendingHandoffs::Clock::time_point> PendingHandoffs::nextDeadline() const {
  std::optional<Clock::time_point> next;
  for (const auto& [id, p] : pending_) {
    if (p.deadline && (!next || *p.deadline < *next)) next = p.deadline;
  }
  return next;
}

}  // namespace mocker::service
