#include "tools/replay/workload.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

namespace mocker::replay {

std::size_t Workload::numTurns() const {
  std::size_t n = 0;
  for (const Session& s : sessions) n += s.turns.size();
  return n;
}

Result<std::string> readTextFile(const std::string& path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "rb"),
                                                       &std::fclose);
  if (!file) {
    const int err = errno;
    return Error{err == ENOENT ? ErrorCode::NotFound : ErrorCode::IoError,
                 "cannot open '" + path + "': " + std::strerror(err)};
  }
  std::string text;
  char buffer[1 << 16];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, file.get())) > 0) text.append(buffer, n);
  if (std::ferror(file.get())) {
    return Error{ErrorCode::IoError, "error reading '" + path + "'"};
  }
  return text;
}

Status validateTraceOptions(const TraceOptions& options) {
  if (options.trace_block_size == 0) {
    return invalidArgument("trace_block_size must be >= 1 (got 0)");
  }
  if (!std::isfinite(options.arrival_speedup_ratio) || options.arrival_speedup_ratio <= 0.0) {
    return invalidArgument("arrival_speedup_ratio must be finite and > 0 (got " +
                           std::to_string(options.arrival_speedup_ratio) + ")");
  }
  return {};
}

void normalizeArrivals(std::vector<Session>& sessions, double arrival_speedup_ratio) {
  MOCKER_CHECK(std::isfinite(arrival_speedup_ratio) && arrival_speedup_ratio > 0.0);
  const bool all_timed = std::all_of(sessions.begin(), sessions.end(), [](const Session& s) {
    return s.first_arrival_ms.has_value();
  });
  // Dependencies (Session::wait_for) are session indices: such workloads keep their order.
  const bool has_dependencies = std::any_of(sessions.begin(), sessions.end(),
                                            [](const Session& s) { return !s.wait_for.empty(); });
  if (all_timed && !sessions.empty() && !has_dependencies) {
    std::stable_sort(sessions.begin(), sessions.end(), [](const Session& a, const Session& b) {
      return *a.first_arrival_ms < *b.first_arrival_ms;
    });
  }
  std::optional<double> origin;
  for (const Session& s : sessions) {
    if (s.first_arrival_ms && (!origin || *s.first_arrival_ms < *origin)) {
      origin = s.first_arrival_ms;
    }
  }
  for (Session& s : sessions) {
    if (s.first_arrival_ms) {
      s.first_arrival_ms = (*s.first_arrival_ms - *origin) / arrival_speedup_ratio;
    }
    for (Turn& t : s.turns) t.delay_after_previous_ms /= arrival_speedup_ratio;
    s.dependency_delay_ms /= arrival_speedup_ratio;
  }
}

SynthesizedPrompt synthesizePrompt(const Turn& turn, std::uint32_t trace_block_size) {
  SynthesizedPrompt out;
  const std::size_t capacity = turn.hash_ids.size() * std::size_t{trace_block_size};
  const std::size_t length = std::min<std::size_t>(turn.input_length, capacity);
  out.tokens.reserve(length + std::min(turn.output_length, kReservedOutputTokens));
  for (const std::uint64_t h : turn.hash_ids) {
    if (out.tokens.size() >= length) break;
    if (h > kMaxUnaliasedHashId) out.aliased_hash_id = true;
    const auto token = static_cast<std::uint32_t>(h & kMaxUnaliasedHashId);
    const std::size_t n = std::min<std::size_t>(trace_block_size, length - out.tokens.size());
    out.tokens.insert(out.tokens.end(), n, token);
  }
  return out;
}

PromptSynthesizer::PromptSynthesizer(std::uint32_t trace_block_size)
    : trace_block_size_(trace_block_size) {
  MOCKER_CHECK(trace_block_size >= 1);
}

std::vector<std::uint32_t> PromptSynthesizer::synthesize(const Turn& turn) {
  SynthesizedPrompt prompt = synthesizePrompt(turn, trace_block_size_);
  if (prompt.aliased_hash_id && warnings_.empty()) {
    std::string where =
        turn.line != 0 ? " (first seen on line " + std::to_string(turn.line) + ")" : std::string();
    warnings_.push_back("hash ids >= 2^32 are reduced mod 2^32 and may alias other ids" + where);
  }
  return std::move(prompt.tokens);
}

}  // namespace mocker::replay
