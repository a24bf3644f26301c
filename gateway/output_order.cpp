#include "gateway/output_order.h"

#include <algorithm>
#include <tuple>

namespace mocker::gateway {

void sortForHandling(std::vector<OutputKey>& keys) {
  std::sort(keys.begin(), keys.end(), [](const OutputKey& a, const OutputKey& b) {
    if (a.first_tokens != b.first_tokens) return a.first_tokens;
    // First tokens: oldest first. The rest: newest first. Ties (the same request twice, which
    // a worker does not send): message order.
    if (a.dispatch != b.dispatch)
      return a.first_tokens ? a.dispatch < b.dispatch : a.dispatch > b.dispatch;
    return a.index < b.index;
  });
}

std::size_t firstTokensEnd(const std::vector<OutputKey>& keys) {
  const auto it =
      std::find_if(keys.begin(), keys.end(), [](const OutputKey& k) { return !k.first_tokens; });
  return static_cast<std::size_t>(it - keys.begin());
}

void burstKeys(const std::vector<BurstEntry>& entries, std::size_t messages,
               std::vector<OutputKey>& keys, std::unordered_set<std::uint64_t>& seen) {
  keys.clear();
  seen.clear();
  for (std::size_t k = 0; k < entries.size(); ++k) {
    const BurstEntry& e = entries[k];
    const bool first_entry = messages < 2 || seen.insert(e.dispatch).second;
    keys.push_back({.index = static_cast<std::uint32_t>(k),
                    .first_tokens = first_entry && e.has_tokens && !e.had_tokens,
                    .dispatch = e.dispatch});
  }
}

}  // namespace mocker::gateway
