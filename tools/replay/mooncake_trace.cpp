// Mooncake JSONL: each non-blank line is parsed with nlohmann-json (no exceptions), validated,
// and appended to its session (rows without session_id are sessions of their own, named
// request_<line>). Per-session state remembers the previous accepted row's timestamp so that a
// later turn without `delay` gets `timestamp − previous timestamp` (§2.3).
#include "tools/replay/mooncake_trace.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace mocker::replay {
namespace {

using nlohmann::json;

/// Looks up `key` or its `alias`; null values count as absent. Both present ⇒ error.
Result<const json*> findField(const json& obj, const char* key, const char* alias) {
  const json* found = nullptr;
  if (auto it = obj.find(key); it != obj.end() && !it->is_null()) found = &*it;
  if (alias != nullptr) {
    if (auto it = obj.find(alias); it != obj.end() && !it->is_null()) {
      if (found != nullptr) {
        return invalidArgument(std::string("both '") + key + "' and its alias '" + alias +
                               "' are present");
      }
      found = &*it;
    }
  }
  return found;
}

/// A finite number >= 0 (ms).
Result<double> nonNegativeNumber(const json& v, const char* name) {
  if (!v.is_number()) return invalidArgument(std::string("'") + name + "' must be a number");
  const double d = v.get<double>();
  if (!std::isfinite(d)) return invalidArgument(std::string("'") + name + "' must be finite");
  if (d < 0.0) {
    return invalidArgument(std::string("'") + name + "' must be >= 0 (got " + v.dump() + ")");
  }
  return d;
}

/// A non-negative integer (integral floats such as 12.0 are accepted) no larger than `max`.
Result<std::uint64_t> nonNegativeInteger(const json& v, const char* name, std::uint64_t max) {
  std::uint64_t value = 0;
  if (v.is_number_unsigned()) {
    value = v.get<std::uint64_t>();
  } else if (v.is_number_integer()) {
    return invalidArgument(std::string("'") + name + "' must be >= 0 (got " + v.dump() + ")");
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || d < 0.0 || d != std::floor(d) || d > static_cast<double>(max)) {
      return invalidArgument(std::string("'") + name + "' must be a non-negative integer (got " +
                             v.dump() + ")");
    }
    value = static_cast<std::uint64_t>(d);
  } else {
    return invalidArgument(std::string("'") + name + "' must be an integer");
  }
  if (value > max) {
    return invalidArgument(std::string("'") + name + "' is too large (got " + v.dump() + ")");
  }
  return value;
}

/// An identifier given as a string or an integer.
Result<std::string> identifier(const json& v, const char* name) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return v.dump();
  return invalidArgument(std::string("'") + name + "' must be a string");
}

struct SessionState {
  std::size_t index = 0;                 // into sessions
  std::optional<double> last_timestamp;  // raw, of the previous accepted turn
};

class Parser {
 public:
  explicit Parser(const TraceOptions& options) : options_(options) {}

  /// Parses and appends one non-blank line.
  Status addLine(std::string_view line_text, std::size_t line) {
    json obj = json::parse(line_text.begin(), line_text.end(), nullptr, /*allow_exceptions=*/false);
    if (obj.is_discarded()) return invalidArgument("not valid JSON");
    if (!obj.is_object()) return invalidArgument("expected a JSON object");

    MOCKER_TRY(const json* ts_field, findField(obj, "timestamp", "created_time"));
    MOCKER_TRY(const json* in_field, findField(obj, "input_length", "input_tokens"));
    MOCKER_TRY(const json* out_field, findField(obj, "output_length", "output_tokens"));
    MOCKER_TRY(const json* hash_field, findField(obj, "hash_ids", nullptr));
    MOCKER_TRY(const json* session_field, findField(obj, "session_id", nullptr));
    MOCKER_TRY(const json* delay_field, findField(obj, "delay", "delay_ms"));
    MOCKER_TRY(const json* request_field, findField(obj, "request_id", nullptr));

    Turn turn;
    turn.line = line;
    constexpr std::uint64_t kMaxU32 = std::numeric_limits<std::uint32_t>::max();

    if (out_field == nullptr) return invalidArgument("missing required key 'output_length'");
    MOCKER_TRY(const std::uint64_t output_length,
               nonNegativeInteger(*out_field, "output_length", kMaxU32));
    turn.output_length = static_cast<std::uint32_t>(output_length);

    if (hash_field == nullptr) return invalidArgument("missing required key 'hash_ids'");
    if (!hash_field->is_array()) return invalidArgument("'hash_ids' must be an array");
    if (hash_field->empty()) return invalidArgument("'hash_ids' must not be empty");
    turn.hash_ids.reserve(hash_field->size());
    for (const json& h : *hash_field) {
      if (!h.is_number_unsigned()) {
        return invalidArgument("'hash_ids' must contain unsigned integers (got " + h.dump() + ")");
      }
      turn.hash_ids.push_back(h.get<std::uint64_t>());
    }

    const std::uint64_t capacity =
        static_cast<std::uint64_t>(turn.hash_ids.size()) * options_.trace_block_size;
    std::uint64_t input_length = capacity;
    if (in_field != nullptr) {
      MOCKER_TRY(input_length, nonNegativeInteger(*in_field, "input_length",
                                                  std::numeric_limits<std::uint64_t>::max()));
      input_length = std::min(input_length, capacity);  // §2.2 step 3: clamp
    }
    if (input_length == 0) return invalidArgument("'input_length' is 0");
    if (input_length > kMaxU32) {
      return invalidArgument("'input_length' is too large (" + std::to_string(input_length) + ")");
    }
    turn.input_length = static_cast<std::uint32_t>(input_length);

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

    // Session bookkeeping: validate everything before mutating state.
    std::string session_id;
    SessionState* state = nullptr;
    if (session_field != nullptr) {
      MOCKER_TRY(session_id, identifier(*session_field, "session_id"));
      if (auto it = by_id_.find(session_id); it != by_id_.end()) state = &it->second;
    } else {
      session_id = "request_" + std::to_string(line);
    }

    if (state == nullptr) {  // first turn of a new session
      if (delay && *delay != 0.0) {
        return invalidArgument("first turn of session '" + session_id + "' has a non-zero delay (" +
                               delay_field->dump() + ")");
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
        by_id_.emplace(session_id, SessionState{sessions_.size(), timestamp});
      }
      sessions_.push_back(std::move(session));
      return {};
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
    return {};
  }

  std::vector<Session> takeSessions() { return std::move(sessions_); }

 private:
  const TraceOptions& options_;
  std::vector<Session> sessions_;
  std::unordered_map<std::string, SessionState> by_id_;  // lookup only; order is sessions_
};

}  // namespace

Result<Workload> parseMooncakeTrace(std::string_view text, const TraceOptions& options) {
  MOCKER_TRY_VOID(validateTraceOptions(options));
  Workload workload;
  workload.trace_block_size = options.trace_block_size;
  Parser parser(options);

  std::size_t line = 0;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view row = text.substr(pos, end - pos);
    pos = end + 1;
    ++line;
    if (row.find_first_not_of(" \t\r\f\v") == std::string_view::npos) continue;  // blank
    if (Status s = parser.addLine(row, line); !s) {
      if (!options.skip_invalid) {
        return Error{s.error().code, "line " + std::to_string(line) + ": " + s.error().message};
      }
      workload.skipped_lines.push_back(LineError{line, s.error().message});
    }
  }

  workload.sessions = parser.takeSessions();
  if (workload.sessions.empty()) {
    return invalidArgument(workload.skipped_lines.empty()
                               ? "empty trace: no requests"
                               : "empty trace: every line was invalid (first: line " +
                                     std::to_string(workload.skipped_lines.front().line) + ": " +
                                     workload.skipped_lines.front().message + ")");
  }
  normalizeArrivals(workload.sessions, options.arrival_speedup_ratio);
  return workload;
}

Result<Workload> loadMooncakeTrace(const std::string& path, const TraceOptions& options) {
  MOCKER_TRY(std::string text, readTextFile(path));
  auto parsed = parseMooncakeTrace(text, options);
  if (!parsed) return parsed.error().withContext(path);
  return parsed;
}

}  // namespace mocker::replay
