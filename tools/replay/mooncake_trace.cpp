// Mooncake JSONL: each non-blank line becomes a flat record of the known top-level keys
// (hash_ids straight into a vector, values of unknown keys ignored), which is then validated and
// appended to its session (rows without session_id are sessions of their own, named
// request_<line>). Reading a line into that record is detail/trace_row.h (a strict scanner for
// the usual shape, nlohmann-json's SAX for the rest; no DOM); an agentic trace's dependency graph
// is resolved by detail/agentic_graph.h once every line is read. Per-session state remembers the
// previous accepted row's timestamp so that a later turn without `delay` gets `timestamp − previous
// timestamp`.
#include "tools/replay/mooncake_trace.h"
#include "engine/lora.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/enum_names.h"
#include "base/lines.h"
#include "tools/replay/detail/agentic_graph.h"
#include "tools/replay/detail/trace_row.h"

namespace mocker::replay {
namespace {

using namespace detail;  // the row reader and the agentic graph (tools/replay/detail/)

struct SessionState {
  std::size_t index = 0;                 // into sessions
  std::optional<double> last_timestamp;  // raw, of the previous accepted turn
  std::uint64_t cumulative_tokens = 0;   // mooncake-delta: Σ (input + output) of earlier turns
};

constexpr std::uint64_t kMaxU32 = std::numeric_limits<std::uint32_t>::max();

class Parser {
 public:
  Parser(const TraceOptions& options, TraceFormat format) : options_(options), format_(format) {}

  /// Parses and appends one non-blank line.
  Status addLine(std::string_view line_text, std::size_t line) {
    Row row;
    MOCKER_TRY_VOID(readRow(line_text, row, scratch_));

    MOCKER_TRY(const Scalar* ts_field, findField(row, kTimestamp, kCreatedTime));
    MOCKER_TRY(const Scalar* in_field, findField(row, kInputLength, kInputTokens));
    MOCKER_TRY(const Scalar* out_field, findField(row, kOutputLength, kOutputTokens));
    MOCKER_TRY(const Scalar* session_field, findField(row, kSessionId, kUnknown));
    MOCKER_TRY(const Scalar* delay_field, findField(row, kDelay, kDelayMs));
    MOCKER_TRY(const Scalar* request_field, findField(row, kRequestId, kUnknown));
    MOCKER_TRY(const Scalar* lora_field, findField(row, kLora, kUnknown));

    Turn turn;
    turn.line = line;

    if (out_field == nullptr) return invalidArgument("missing required key 'output_length'");
    MOCKER_TRY(const std::uint64_t output_length,
               nonNegativeInteger(*out_field, "output_length", kMaxU32));
    turn.output_length = static_cast<std::uint32_t>(output_length);

    if (row.hash == Row::Hash::Absent || row.hash == Row::Hash::Null) {
      return invalidArgument("missing required key 'hash_ids'");
    }
    if (row.hash == Row::Hash::NotArray) return invalidArgument("'hash_ids' must be an array");
    if (row.bad_hash_id) {
      return invalidArgument("'hash_ids' must contain unsigned integers (got " + *row.bad_hash_id +
                             ")");
    }
    if (row.hash_ids.empty()) return invalidArgument("'hash_ids' must not be empty");
    turn.hash_ids = std::move(row.hash_ids);

    const std::uint64_t capacity =
        static_cast<std::uint64_t>(turn.hash_ids.size()) * options_.trace_block_size;
    std::uint64_t input_length = capacity;
    if (in_field != nullptr) {
      MOCKER_TRY(input_length, nonNegativeInteger(*in_field, "input_length",
                                                  std::numeric_limits<std::uint64_t>::max()));
      if (format_ == TraceFormat::Agentic && input_length > capacity) {
        return invalidArgument("'input_length' " + std::to_string(input_length) + " exceeds the " +
                               std::to_string(capacity) + " tokens its hash_ids can synthesize (" +
                               std::to_string(turn.hash_ids.size()) + " ids × trace_block_size " +
                               std::to_string(options_.trace_block_size) + ")");
      }
      input_length = std::min(input_length, capacity);  // clamp (docs/traces.md, Token synthesis)
    }
    if (input_length == 0) return invalidArgument("'input_length' is 0");
    if (input_length > kMaxU32) {
      return invalidArgument("'input_length' is too large (" + std::to_string(input_length) + ")");
    }
    turn.input_length = static_cast<std::uint32_t>(input_length);
    if (format_ == TraceFormat::MooncakeDelta) {
      const std::uint64_t blocks =
          (input_length + options_.trace_block_size - 1) / options_.trace_block_size;
      if (blocks != turn.hash_ids.size()) {
        return invalidArgument(
            "'hash_ids' has " + std::to_string(turn.hash_ids.size()) + " ids but a delta of " +
            std::to_string(input_length) + " tokens fills " + std::to_string(blocks) +
            " blocks of trace_block_size " + std::to_string(options_.trace_block_size));
      }
    }

    std::optional<double> timestamp;
    if (ts_field != nullptr) {
      MOCKER_TRY(timestamp, nonNegativeNumber(*ts_field, "timestamp"));
    }
    std::optional<double> delay;
    if (delay_field != nullptr) {
      MOCKER_TRY(delay, nonNegativeNumber(*delay_field, "delay"));
    }
    if (request_field != nullptr) {
      MOCKER_TRY(turn.request_id, identifier(*request_field, "request_id"));
    }
    if (lora_field != nullptr) {
      MOCKER_TRY(turn.lora, identifier(*lora_field, "lora"));
      MOCKER_TRY_VOID(engine::checkLoraName(*turn.lora, "'lora'"));
    }
    if (format_ == TraceFormat::Agentic) {
      return addAgenticRow(row, std::move(turn), timestamp, delay, session_field);
    }

    // Session bookkeeping: validate everything before mutating state.
    std::string session_id;
    SessionState* state = nullptr;
    if (session_field != nullptr) {
      MOCKER_TRY(session_id, identifier(*session_field, "session_id"));
      if (auto it = by_id_.find(session_id); it != by_id_.end()) state = &it->second;
    } else {
      session_id = "request_" + std::to_string(line);
    }
    const std::uint64_t turn_tokens = std::uint64_t{turn.input_length} + turn.output_length;

    if (state == nullptr) {  // first turn of a new session
      if (delay && *delay != 0.0) {
        return invalidArgument("first turn of session '" + session_id + "' has a non-zero delay (" +
                               delay_field->describe() + ")");
      }
      if (!timestamp && options_.require_timestamps) {
        return invalidArgument("first turn of session '" + session_id + "' has no 'timestamp'");
      }
      turn.delay_after_previous_ms = 0.0;
      Session session;
      session.session_id = session_id;
      session.first_arrival_ms = timestamp;
      session.turns.push_back(std::move(turn));
      if (session_field != nullptr) {
        by_id_.emplace(session_id, SessionState{sessions_.size(), timestamp, turn_tokens});
      }
      sessions_.push_back(std::move(session));
      return {};
    }

    if (format_ == TraceFormat::MooncakeDelta &&
        state->cumulative_tokens + turn.input_length > kMaxU32) {
      return invalidArgument("the cumulative prompt of session '" + session_id + "' would reach " +
                             std::to_string(state->cumulative_tokens + turn.input_length) +
                             " tokens (at most " + std::to_string(kMaxU32) +
                             "): earlier prompts and outputs plus this delta");
    }
    if (delay) {
      turn.delay_after_previous_ms = *delay;
    } else if (timestamp && state->last_timestamp) {
      const double diff = *timestamp - *state->last_timestamp;
      if (diff < 0.0) {
        return invalidArgument("timestamp goes backwards within session '" + session_id +
                               "' and no 'delay' is given");
      }
      turn.delay_after_previous_ms = diff;
    }
    sessions_[state->index].turns.push_back(std::move(turn));
    if (timestamp) state->last_timestamp = timestamp;
    state->cumulative_tokens += turn_tokens;
    return {};
  }

  /// Agentic: the accepted rows' dependency graph resolved (detail/agentic_graph.h).
  Result<std::vector<Session>> finishAgentic(std::vector<LineError>& skipped) {
    return resolveAgenticGraph(agentic_, options_, skipped);
  }

 private:
  Status addAgenticRow(const Row& row, Turn turn, std::optional<double> timestamp,
                       std::optional<double> delay, const Scalar* session_field) {
    AgenticRow r;
    r.line = turn.line;
    if (!turn.request_id) return invalidArgument("missing required key 'request_id'");
    if (turn.request_id->find_first_not_of(" \t") == std::string::npos) {
      return invalidArgument("'request_id' must not be empty");
    }
    r.request_id = *turn.request_id;
    MOCKER_TRY(r.wait_for, idList(row, kWaitFor));
    MOCKER_TRY(r.branches, idList(row, kBranches));
    for (const std::vector<std::string>* list : {&r.wait_for, &r.branches}) {
      for (const std::string& id : *list) {
        if (id == r.request_id) {
          return invalidArgument(std::string("'") +
                                 (list == &r.wait_for ? "wait_for" : "branches") +
                                 "' names the row's own request_id '" + id + "'");
        }
      }
    }
    if (const Scalar& p = row[kPrefixReset]; p.present() && p.kind != Scalar::Kind::Bool) {
      return invalidArgument("'prefix_reset' must be true or false (got " + p.describe() + ")");
    }
    double tool_wait = 0.0;
    if (row[kToolWaitMs].present()) {
      MOCKER_TRY(tool_wait, nonNegativeNumber(row[kToolWaitMs], "tool_wait_ms"));
    }
    r.dependency_delay_ms = delay.value_or(0.0) + tool_wait;
    if (!std::isfinite(r.dependency_delay_ms)) {
      return invalidArgument("'delay' + 'tool_wait_ms' is not finite");
    }
    if (r.wait_for.empty()) {
      if (r.dependency_delay_ms != 0.0) {
        return invalidArgument(
            "a row without 'wait_for' has a non-zero 'delay'/'tool_wait_ms' (they count from "
            "the end of its dependencies; use 'timestamp')");
      }
      if (!timestamp && options_.require_timestamps) {
        return invalidArgument("a row without 'wait_for' has no 'timestamp'");
      }
    }
    if (auto [it, inserted] = agentic_lines_.emplace(r.request_id, r.line); !inserted) {
      return invalidArgument("duplicate request_id '" + r.request_id + "' (first on line " +
                             std::to_string(it->second) + ")");
    }
    if (session_field != nullptr) {
      MOCKER_TRY(r.session.session_id, identifier(*session_field, "session_id"));
    } else {
      r.session.session_id = "request_" + std::to_string(r.line);
    }
    r.session.first_arrival_ms = timestamp;
    r.session.turns.push_back(std::move(turn));
    agentic_.push_back(std::move(r));
    return {};
  }

 public:
  std::vector<Session> takeSessions() { return std::move(sessions_); }

 private:
  const TraceOptions& options_;
  TraceFormat format_;
  std::vector<Session> sessions_;
  std::vector<AgenticRow> agentic_;                             // agentic rows, file order
  std::unordered_map<std::string, std::size_t> agentic_lines_;  // request_id → line
  std::unordered_map<std::string, SessionState> by_id_;         // lookup only; order is sessions_
  RowScratch scratch_;                                          // fast-scanner scratch
};

}  // namespace

std::string_view toString(TraceFormat format) {
  static constexpr EnumNames<TraceFormat, 3> kNames{{{"mooncake", TraceFormat::Mooncake},
                                                     {"mooncake-delta", TraceFormat::MooncakeDelta},
                                                     {"agentic", TraceFormat::Agentic}}};
  return enumName(kNames, format);
}

Result<Workload> parseMooncakeTrace(std::string_view text, const TraceOptions& options,
                                    TraceFormat format) {
  MOCKER_TRY_VOID(validateTraceOptions(options));
  Workload workload;
  workload.trace_block_size = options.trace_block_size;
  workload.cumulative_prompts = format == TraceFormat::MooncakeDelta;
  Parser parser(options, format);

  for (const auto [row, line] : Lines(text)) {
    if (row.find_first_not_of(" \t\r\f\v") == std::string_view::npos) continue;  // blank
    if (Status s = parser.addLine(row, line); !s) {
      if (!options.skip_invalid) {
        return Error{s.error().code, "line " + std::to_string(line) + ": " + s.error().message};
      }
      workload.skipped_lines.push_back(LineError{line, s.error().message});
    }
  }

  if (format == TraceFormat::Agentic) {
    MOCKER_TRY(workload.sessions, parser.finishAgentic(workload.skipped_lines));
  } else {
    workload.sessions = parser.takeSessions();
  }
  if (workload.sessions.empty()) {
    return invalidArgument(workload.skipped_lines.empty()
                               ? "empty trace: no requests"
                               : "empty trace: every line was invalid (first: line " +
                                     std::to_string(workload.skipped_lines.front().line) + ": " +
                                     workload.skipped_lines.front().message + ")");
  }
  // Agentic sessions keep file order (wait_for holds session indices) and were normalised above.
  if (format != TraceFormat::Agentic) {
    normalizeArrivals(workload.sessions, options.arrival_speedup_ratio);
  }
  return workload;
}

Result<Workload> loadMooncakeTrace(const std::string& path, const TraceOptions& options,
                                   TraceFormat format) {
  MOCKER_TRY(std::string text, readTextFile(path));
  auto parsed = parseMooncakeTrace(text, options, format);
  if (!parsed) return parsed.error().withContext(path);
  return parsed;
}

}  // namespace mocker::replay
