#include "tools/replay/live_requests.h"

#include <charconv>
#include <limits>

namespace mocker::replay {

std::string liveRequestId(std::size_t index) {
  // Built by appending: GCC 12 reports a false -Wrestrict on "r" + to_string.
  std::string id(1, 'r');
  id.append(std::to_string(index));
  return id;
}

std::optional<std::size_t> parseLiveRequestId(std::string_view id) {
  if (id.size() < 2 || id[0] != 'r') return std::nullopt;
  // Only liveRequestId's spelling: "r07" or "r00" would otherwise speak for r7 / r0.
  if (id[1] == '0' && id.size() > 2) return std::nullopt;
  std::size_t index = 0;
  const char* first = id.data() + 1;
  const char* last = id.data() + id.size();
  const auto [ptr, ec] = std::from_chars(first, last, index);
  if (ec != std::errc{} || ptr != last) return std::nullopt;
  return index;
}

TerminalStatus terminalStatusOf(protocol::FinishReason reason) {
  switch (reason) {
    case protocol::FinishReason::Length:
      return TerminalStatus::Completed;
    case protocol::FinishReason::Rejected:
      return TerminalStatus::Rejected;
    case protocol::FinishReason::Cancelled:
      return TerminalStatus::Cancelled;
    case protocol::FinishReason::Error:
    case protocol::FinishReason::Shutdown:
      return TerminalStatus::Failed;
  }
  return TerminalStatus::Failed;
}

LiveRequest* LiveRequests::find(std::uint32_t connection, std::string_view id) {
  const std::optional<std::size_t> index = parseLiveRequestId(id);
  if (!index || *index >= sent_.size()) return nullptr;
  LiveRequest& r = sent_[*index];
  if (!r.live) return nullptr;
  if (connection >= num_prefill_) {  // a decode server
    return r.decode_target && *r.decode_target == connection - num_prefill_ ? &r : nullptr;
  }
  // A prefill server's messages end with its handoff.
  if (r.target != connection || r.decode_target) return nullptr;
  return &r;
}

std::uint32_t LiveRequests::holder(std::size_t index) const {
  const LiveRequest& r = sent_[index];
  return r.decode_target ? num_prefill_ + *r.decode_target : r.target;
}

double LiveRequests::nextDeadlineMs() {
  while (!deadlines_.empty() && !sent_[deadlines_.top().request].live) deadlines_.pop();
  return deadlines_.empty() ? std::numeric_limits<double>::infinity() : deadlines_.top().time_ms;
}

std::optional<std::size_t> LiveRequests::takeExpired(double now_ms) {
  if (nextDeadlineMs() > now_ms) return std::nullopt;
  const std::size_t index = deadlines_.top().request;
  deadlines_.pop();
  return index;
}

}  // namespace mocker::replay
