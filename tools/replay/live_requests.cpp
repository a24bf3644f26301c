#include "tools/replay/live_requests.h"

#include <algorithm>
#include <charconv>
#include <limits>

namespace mocker::replay {

std::string liveRequestId(std::size_t index, std::uint32_t attempt) {
  // Built by appending: GCC 12 reports a false -Wrestrict on "r" + to_string.
  std::string id(1, 'r');
  id.append(std::to_string(index));
  if (attempt > 0) {
    id.push_back('.');
    id.append(std::to_string(attempt));
  }
  return id;
}

namespace {

/// A decimal without a leading zero (liveRequestId's spelling: "07" would speak for 7).
template <typename T>
std::optional<T> parseCanonical(std::string_view text) {
  if (text.empty() || (text[0] == '0' && text.size() > 1)) return std::nullopt;
  T value = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || ptr != text.data() + text.size()) return std::nullopt;
  return value;
}

}  // namespace

std::optional<LiveRequestId> parseLiveRequestId(std::string_view id) {
  if (id.empty() || id[0] != 'r') return std::nullopt;
  id.remove_prefix(1);
  const std::size_t dot = id.find('.');
  const std::optional<std::size_t> index = parseCanonical<std::size_t>(id.substr(0, dot));
  if (!index) return std::nullopt;
  if (dot == std::string_view::npos) return LiveRequestId{.index = *index};
  const std::optional<std::uint32_t> attempt = parseCanonical<std::uint32_t>(id.substr(dot + 1));
  if (!attempt || *attempt == 0) return std::nullopt;
  return LiveRequestId{.index = *index, .attempt = *attempt};
}

protocol::SubmitRequest migratedSubmit(const protocol::SubmitRequest& original,
                                       std::span<const std::uint32_t> generated) {
  protocol::SubmitRequest next = original;
  next.prompt.insert(next.prompt.end(), generated.begin(), generated.end());
  const auto done = static_cast<std::uint32_t>(
      std::min<std::size_t>(generated.size(), std::numeric_limits<std::uint32_t>::max()));
  next.max_tokens = original.max_tokens > done ? original.max_tokens - done : 0;
  if (next.output_tokens) {
    auto& planned = *next.output_tokens;
    planned.erase(planned.begin(),
                  planned.begin() + static_cast<std::ptrdiff_t>(
                                        std::min<std::size_t>(generated.size(), planned.size())));
  }
  next.dp_rank.reset();
  next.handoff.reset();
  return next;
}

LostRequestOutcome lostRequestStep(const LiveRequest& r, std::uint32_t migration_limit,
                                   const std::optional<protocol::EngineInfo>& server) {
  if (migration_limit == 0 || !r.submit) return {};
  const protocol::SubmitRequest& s = *r.submit;
  const std::uint64_t output = s.output_tokens ? s.output_tokens->size() : s.max_tokens;
  if (output > 0 && r.generated.size() >= output) return {.step = LostRequestStep::Complete};
  // The server stops a stream when prompt + output reaches its limit L (engine "Length limits").
  if (output > 0 && !r.generated.empty() && server && server->length_limit != 0 &&
      s.prompt.size() + r.generated.size() >= server->length_limit) {
    return {.step = LostRequestStep::Complete,
            .cut_short_by = parseWireStopReason(server->length_limit_name + ": ")};
  }
  return {.step = r.migrations < migration_limit ? LostRequestStep::Resend : LostRequestStep::Fail};
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
  const std::optional<LiveRequestId> parsed = parseLiveRequestId(id);
  if (!parsed || parsed->index >= sent_.size()) return nullptr;
  LiveRequest& r = sent_[parsed->index];
  if (!r.live || r.migrations != parsed->attempt) return nullptr;
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
