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

}  // namespace mocker::gateway
