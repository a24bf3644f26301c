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

namespace {

/// Prompt length of `turn`: input_length, capped at what its hash ids cover.
std::size_t promptLength(const Turn& turn, std::uint32_t trace_block_size) {
  return std::min<std::size_t>(turn.input_length, turn.hash_ids.size() * trace_block_size);
}

/// Appends the `length` prompt tokens of `turn` to `out`; true if an id used was >= 2^32.
bool appendTurnTokens(const Turn& turn, std::uint32_t trace_block_size, std::size_t length,
                      std::vector<std::uint32_t>& out) {
  bool aliased = false;
  std::size_t written = 0;
  for (const std::uint64_t h : turn.hash_ids) {
    if (written >= length) break;
    if (h > kMaxUnaliasedHashId) aliased = true;
    const auto token = static_cast<std::uint32_t>(h & kMaxUnaliasedHashId);
    const std::size_t n = std::min<std::size_t>(trace_block_size, length - written);
    out.insert(out.end(), n, token);
    written += n;
  }
  return aliased;
}

/// True if a hash id that `turn`'s prompt uses is >= 2^32 (appendTurnTokens' flag).
bool usesAliasedId(const Turn& turn, std::uint32_t trace_block_size) {
  const std::size_t used =
      (promptLength(turn, trace_block_size) + trace_block_size - 1) / trace_block_size;
  return std::any_of(turn.hash_ids.begin(),
                     turn.hash_ids.begin() + static_cast<std::ptrdiff_t>(used),
                     [](std::uint64_t h) { return h > kMaxUnaliasedHashId; });
}

/// A turn's prompt, synthesized when the engine first needs it.
class TurnPrompt final : public engine::PromptSource {
 public:
  TurnPrompt(const Turn& turn, std::uint32_t trace_block_size)
      : turn_(turn),
        trace_block_size_(trace_block_size),
        length_(static_cast<std::uint32_t>(promptLength(turn, trace_block_size))) {}

  std::uint32_t size() const override { return length_; }
  void appendTo(std::vector<std::uint32_t>& out) const override {
    appendTurnTokens(turn_, trace_block_size_, length_, out);
  }

 private:
  const Turn& turn_;
  const std::uint32_t trace_block_size_;
  const std::uint32_t length_;
};

}  // namespace

SynthesizedPrompt synthesizePrompt(const Turn& turn, std::uint32_t trace_block_size) {
  SynthesizedPrompt out;
  const std::size_t length = promptLength(turn, trace_block_size);
  out.tokens.reserve(length + std::min(turn.output_length, kReservedOutputTokens));
  out.aliased_hash_id = appendTurnTokens(turn, trace_block_size, length, out.tokens);
  return out;
}

PromptSynthesizer::PromptSynthesizer(std::uint32_t trace_block_size)
    : trace_block_size_(trace_block_size) {
  MOCKER_CHECK(trace_block_size >= 1);
}

std::vector<std::uint32_t> PromptSynthesizer::synthesize(const Turn& turn) {
  SynthesizedPrompt prompt = synthesizePrompt(turn, trace_block_size_);
  noteAliasing(turn, prompt.aliased_hash_id);
  return std::move(prompt.tokens);
}

std::shared_ptr<const engine::PromptSource> PromptSynthesizer::defer(const Turn& turn) {
  noteAliasing(turn, usesAliasedId(turn, trace_block_size_));
  return std::make_shared<const TurnPrompt>(turn, trace_block_size_);
}

void PromptSynthesizer::noteAliasing(const Turn& turn, bool aliased) {
  if (aliased && warnings_.empty()) {
    std::string where =
        turn.line != 0 ? " (first seen on line " + std::to_string(turn.line) + ")" : std::string();
    warnings_.push_back("hash ids >= 2^32 are reduced mod 2^32 and may alias other ids" + where);
  }
}

}  // namespace mocker::replay
