// Mooncake JSONL: each non-blank line becomes a flat record of the known top-level keys
// (hash_ids straight into a vector, values of unknown keys ignored), which is then validated and
// appended to its session (rows without session_id are sessions of their own, named
// request_<line>). Lines of the usual shape (non-negative numbers, plain strings, null, integer
// arrays) go through a small strict scanner (detail/flat_json.h); every other line, including
// every malformed one, goes through nlohmann-json's SAX interface, which owns the error
// messages. Neither builds a DOM. Per-session state remembers the previous accepted row's
// timestamp so that a later turn without `delay` gets `timestamp − previous timestamp`.
#include "tools/replay/mooncake_trace.h"

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/replay/detail/flat_json.h"

namespace mocker::replay {
namespace {

using nlohmann::json;

/// A top-level value as seen by the SAX handler.
struct Scalar {
  enum class Kind : std::uint8_t { Absent, Null, Bool, Int, Uint, Float, String, Other };
  Kind kind = Kind::Absent;
  std::int64_t i = 0;
  std::uint64_t u = 0;
  double f = 0.0;
  std::string s{};

  /// Present and not null (null counts as absent).
  bool present() const { return kind != Kind::Absent && kind != Kind::Null; }
  bool isNumber() const { return kind == Kind::Int || kind == Kind::Uint || kind == Kind::Float; }
  double asDouble() const {
    return kind == Kind::Int    ? static_cast<double>(i)
           : kind == Kind::Uint ? static_cast<double>(u)
                                : f;
  }
  /// The value as it would print in JSON (for error messages).
  std::string describe() const {
    switch (kind) {
      case Kind::Int:
        return std::to_string(i);
      case Kind::Uint:
        return std::to_string(u);
      case Kind::Float: {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.17g", f);
        return buf;
      }
      case Kind::String:
        return "\"" + s + "\"";
      case Kind::Bool:
        return i != 0 ? "true" : "false";
      case Kind::Null:
      case Kind::Absent:
        return "null";
      case Kind::Other:
        return "an object or array";
    }
    return "?";
  }
};

enum Field : std::uint8_t {
  kTimestamp,
  kCreatedTime,
  kInputLength,
  kInputTokens,
  kOutputLength,
  kOutputTokens,
  kSessionId,
  kDelay,
  kDelayMs,
  kRequestId,
  kNumScalarFields,
  kHashIds = kNumScalarFields,
  kUnknown,
};

constexpr const char* kFieldNames[] = {
    "timestamp",  "created_time", "input_length", "input_tokens", "output_length", "output_tokens",
    "session_id", "delay",        "delay_ms",     "request_id",   "hash_ids"};

Field fieldOf(std::string_view key) {
  for (std::uint8_t f = 0; f <= kHashIds; ++f) {
    if (key == kFieldNames[f]) return static_cast<Field>(f);
  }
  return kUnknown;
}

/// One parsed line: the known keys only.
struct Row {
  Scalar fields[kNumScalarFields];
  enum class Hash : std::uint8_t { Absent, Null, NotArray, Array } hash = Hash::Absent;
  std::vector<std::uint64_t> hash_ids;
  std::optional<std::string> bad_hash_id;  // description of the first non-unsigned element

  const Scalar& operator[](Field f) const { return fields[f]; }
};

/// nlohmann SAX handler filling a Row. Never throws; errors are recorded and parsing stops.
class RowSax {
 public:
  explicit RowSax(Row& row) : row_(row) {}

  bool null() { return scalar(Scalar{.kind = Scalar::Kind::Null}); }
  bool boolean(bool v) { return scalar(Scalar{.kind = Scalar::Kind::Bool, .i = v ? 1 : 0}); }
  bool number_integer(json::number_integer_t v) {
    if (inHashIds()) {
      row_.bad_hash_id.emplace(std::to_string(v));
      return true;
    }
    return scalar(Scalar{.kind = Scalar::Kind::Int, .i = v});
  }
  bool number_unsigned(json::number_unsigned_t v) {
    if (inHashIds()) {
      row_.hash_ids.push_back(v);
      return true;
    }
    return scalar(Scalar{.kind = Scalar::Kind::Uint, .u = v});
  }
  bool number_float(json::number_float_t v, const json::string_t& text) {
    if (inHashIds()) {
      row_.bad_hash_id.emplace(text);
      return true;
    }
    return scalar(Scalar{.kind = Scalar::Kind::Float, .f = v});
  }
  bool string(json::string_t& v) {
    if (inHashIds()) {
      row_.bad_hash_id.emplace("\"" + v + "\"");
      return true;
    }
    return scalar(Scalar{.kind = Scalar::Kind::String, .s = std::move(v)});
  }
  bool binary(json::binary_t&) { return scalar(Scalar{.kind = Scalar::Kind::Other}); }
  bool start_object(std::size_t) {
    if (depth_ == 0) top_level_object_ = true;
    openContainer(/*is_array=*/false);
    return true;
  }
  bool key(json::string_t& k) {
    if (depth_ == 1) key_ = fieldOf(k);
    return true;
  }
  bool end_object() {
    --depth_;
    return true;
  }
  bool start_array(std::size_t) {
    if (depth_ == 0) {
      not_object_ = true;
      return false;
    }
    openContainer(/*is_array=*/true);
    return true;
  }
  bool end_array() {
    --depth_;
    if (depth_ == 1) in_hash_ids_ = false;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) {
    syntax_error_ = true;
    return false;
  }

  bool notObject() const { return not_object_ || (!syntax_error_ && !top_level_object_); }
  bool syntaxError() const { return syntax_error_; }

 private:
  bool inHashIds() const { return in_hash_ids_ && depth_ == 2; }

  /// A container value: at depth 1 it is the value of key_; inside hash_ids it is a bad element.
  void openContainer(bool is_array) {
    if (depth_ == 1) {
      if (key_ == kHashIds) {
        row_.hash = is_array ? Row::Hash::Array : Row::Hash::NotArray;
        row_.hash_ids.clear();  // a repeated key replaces the earlier value, as in a DOM
        row_.bad_hash_id.reset();
        in_hash_ids_ = is_array;
      } else if (key_ < kNumScalarFields) {
        row_.fields[key_] = Scalar{.kind = Scalar::Kind::Other};
      }
    } else if (inHashIds()) {
      row_.bad_hash_id.emplace(is_array ? "an array" : "an object");
    }
    ++depth_;
  }

  bool scalar(Scalar v) {
    if (depth_ == 0) {
      not_object_ = true;
      return false;
    }
    if (depth_ != 1) return true;  // inside an unknown key's value
    if (key_ == kHashIds) {
      row_.hash = v.kind == Scalar::Kind::Null ? Row::Hash::Null : Row::Hash::NotArray;
    } else if (key_ < kNumScalarFields) {
      row_.fields[key_] = std::move(v);
    }
    return true;
  }

  Row& row_;
  std::size_t depth_ = 0;
  Field key_ = kUnknown;
  bool in_hash_ids_ = false;
  bool top_level_object_ = false;
  bool not_object_ = false;
  bool syntax_error_ = false;
};

/// Looks up `key` or its `alias`; null values count as absent. Both present ⇒ error.
Result<const Scalar*> findField(const Row& row, Field key, Field alias) {
  const Scalar* found = row[key].present() ? &row[key] : nullptr;
  if (alias != kUnknown && row[alias].present()) {
    if (found != nullptr) {
      return invalidArgument(std::string("both '") + kFieldNames[key] + "' and its alias '" +
                             kFieldNames[alias] + "' are present");
    }
    found = &row[alias];
  }
  return found;
}

/// A finite number >= 0 (ms).
Result<double> nonNegativeNumber(const Scalar& v, const char* name) {
  if (!v.isNumber()) return invalidArgument(std::string("'") + name + "' must be a number");
  const double d = v.asDouble();
  if (!std::isfinite(d)) return invalidArgument(std::string("'") + name + "' must be finite");
  if (d < 0.0) {
    return invalidArgument(std::string("'") + name + "' must be >= 0 (got " + v.describe() + ")");
  }
  return d;
}

/// A non-negative integer (integral floats such as 12.0 are accepted) no larger than `max`.
Result<std::uint64_t> nonNegativeInteger(const Scalar& v, const char* name, std::uint64_t max) {
  std::uint64_t value = 0;
  if (v.kind == Scalar::Kind::Uint) {
    value = v.u;
  } else if (v.kind == Scalar::Kind::Int) {
    return invalidArgument(std::string("'") + name + "' must be >= 0 (got " + v.describe() + ")");
  } else if (v.kind == Scalar::Kind::Float) {
    const double d = v.f;
    if (!std::isfinite(d) || d < 0.0 || d != std::floor(d) || d > static_cast<double>(max)) {
      return invalidArgument(std::string("'") + name + "' must be a non-negative integer (got " +
                             v.describe() + ")");
    }
    value = static_cast<std::uint64_t>(d);
  } else {
    return invalidArgument(std::string("'") + name + "' must be an integer");
  }
  if (value > max) {
    return invalidArgument(std::string("'") + name + "' is too large (got " + v.describe() + ")");
  }
  return value;
}

/// An identifier given as a string or an integer.
Result<std::string> identifier(const Scalar& v, const char* name) {
  if (v.kind == Scalar::Kind::String) return v.s;
  if (v.kind == Scalar::Kind::Int || v.kind == Scalar::Kind::Uint) return v.describe();
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
    Row row;
    if (detail::scanFlatJsonObject(line_text, members_, numbers_)) {
      fillRow(row);
    } else {
      RowSax sax(row);
      const bool ok = json::sax_parse(line_text.data(), line_text.data() + line_text.size(), &sax,
                                      json::input_format_t::json, /*strict=*/true);
      if (sax.syntaxError()) return invalidArgument("not valid JSON");
      if (sax.notObject() || !ok) return invalidArgument("expected a JSON object");
    }

    MOCKER_TRY(const Scalar* ts_field, findField(row, kTimestamp, kCreatedTime));
    MOCKER_TRY(const Scalar* in_field, findField(row, kInputLength, kInputTokens));
    MOCKER_TRY(const Scalar* out_field, findField(row, kOutputLength, kOutputTokens));
    MOCKER_TRY(const Scalar* session_field, findField(row, kSessionId, kUnknown));
    MOCKER_TRY(const Scalar* delay_field, findField(row, kDelay, kDelayMs));
    MOCKER_TRY(const Scalar* request_field, findField(row, kRequestId, kUnknown));

    Turn turn;
    turn.line = line;
    constexpr std::uint64_t kMaxU32 = std::numeric_limits<std::uint32_t>::max();

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
      input_length = std::min(input_length, capacity);  // clamp (docs/traces.md, Token synthesis)
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
  /// The Row the SAX handler would build, from the fast scanner's members (same rules: null
  /// counts as absent, a repeated key keeps its last value, unknown keys are ignored).
  void fillRow(Row& row) const {
    for (const detail::FlatMember& m : members_) {
      const Field field = fieldOf(m.key);
      const detail::FlatValue& v = m.value;
      if (field == kHashIds) {
        switch (v.kind) {
          case detail::FlatValue::Kind::UintArray:
            row.hash = Row::Hash::Array;
            row.hash_ids.assign(numbers_.begin() + static_cast<std::ptrdiff_t>(v.array_begin),
                                numbers_.begin() + static_cast<std::ptrdiff_t>(v.array_end));
            row.bad_hash_id.reset();
            break;
          case detail::FlatValue::Kind::Null:
            row.hash = Row::Hash::Null;
            break;
          case detail::FlatValue::Kind::Uint:
          case detail::FlatValue::Kind::Float:
          case detail::FlatValue::Kind::String:
            row.hash = Row::Hash::NotArray;
            break;
        }
      } else if (field < kNumScalarFields) {
        switch (v.kind) {
          case detail::FlatValue::Kind::Null:
            row.fields[field] = Scalar{.kind = Scalar::Kind::Null};
            break;
          case detail::FlatValue::Kind::Uint:
            row.fields[field] = Scalar{.kind = Scalar::Kind::Uint, .u = v.uint_value};
            break;
          case detail::FlatValue::Kind::Float:
            row.fields[field] = Scalar{.kind = Scalar::Kind::Float, .f = v.float_value};
            break;
          case detail::FlatValue::Kind::String:
            row.fields[field] = Scalar{.kind = Scalar::Kind::String, .s = std::string(v.text)};
            break;
          case detail::FlatValue::Kind::UintArray:
            row.fields[field] = Scalar{.kind = Scalar::Kind::Other};
            break;
        }
      }
    }
  }

  const TraceOptions& options_;
  std::vector<Session> sessions_;
  std::unordered_map<std::string, SessionState> by_id_;  // lookup only; order is sessions_
  std::vector<detail::FlatMember> members_;              // fast-scanner scratch
  std::vector<std::uint64_t> numbers_;                   // fast-scanner scratch
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
