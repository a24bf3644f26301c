// Mooncake JSONL: each non-blank line becomes a flat record of the known top-level keys
// (hash_ids straight into a vector, values of unknown keys ignored), which is then validated and
// appended to its session (rows without session_id are sessions of their own, named
// request_<line>). Lines of the usual shape (non-negative numbers, plain strings, null, integer
// arrays) go through a small strict scanner (detail/flat_json.h); every other line, including
// every malformed one, goes through nlohmann-json's SAX interface, which owns the error
// messages. Neither builds a DOM. Per-session state remembers the previous accepted row's
// timestamp so that a later turn without `delay` gets `timestamp − previous timestamp`.
#include "tools/replay/mooncake_trace.h"

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
  kPrefixReset,  // agentic only
  kToolWaitMs,   // agentic only
  kNumScalarFields,
  kHashIds = kNumScalarFields,
  kWaitFor,   // agentic only: array of identifiers
  kBranches,  // agentic only: array of identifiers
  kUnknown,
};

constexpr const char* kFieldNames[] = {
    "timestamp",     "created_time", "input_length", "input_tokens", "output_length",
    "output_tokens", "session_id",   "delay",        "delay_ms",     "request_id",
    "prefix_reset",  "tool_wait_ms", "hash_ids",     "wait_for",     "branches"};

Field fieldOf(std::string_view key) {
  for (std::uint8_t f = 0; f < kUnknown; ++f) {
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
  /// wait_for / branches (agentic): identifiers (strings, or integers in decimal).
  struct IdList {
    enum class State : std::uint8_t { Absent, Null, NotArray, Array } state = State::Absent;
    std::vector<std::string> ids;
    std::optional<std::string> bad;  // description of the first element that is no identifier
  };
  IdList id_lists[2];  // [0] wait_for, [1] branches

  const Scalar& operator[](Field f) const { return fields[f]; }
  IdList& ids(Field f) { return id_lists[f == kWaitFor ? 0 : 1]; }
  const IdList& ids(Field f) const { return id_lists[f == kWaitFor ? 0 : 1]; }
};

/// nlohmann SAX handler filling a Row. Never throws; errors are recorded and parsing stops.
class RowSax {
 public:
  explicit RowSax(Row& row) : row_(row) {}

  bool null() {
    if (inIds()) return badId("null");
    return scalar(Scalar{.kind = Scalar::Kind::Null});
  }
  bool boolean(bool v) {
    if (inIds()) return badId(v ? "true" : "false");
    return scalar(Scalar{.kind = Scalar::Kind::Bool, .i = v ? 1 : 0});
  }
  bool number_integer(json::number_integer_t v) {
    if (inIds()) {
      row_.ids(ids_key_).ids.push_back(std::to_string(v));
      return true;
    }
    if (inHashIds()) {
      row_.bad_hash_id.emplace(std::to_string(v));
      return true;
    }
    return scalar(Scalar{.kind = Scalar::Kind::Int, .i = v});
  }
  bool number_unsigned(json::number_unsigned_t v) {
    if (inIds()) {
      row_.ids(ids_key_).ids.push_back(std::to_string(v));
      return true;
    }
    if (inHashIds()) {
      row_.hash_ids.push_back(v);
      return true;
    }
    return scalar(Scalar{.kind = Scalar::Kind::Uint, .u = v});
  }
  bool number_float(json::number_float_t v, const json::string_t& text) {
    if (inIds()) return badId(text);
    if (inHashIds()) {
      row_.bad_hash_id.emplace(text);
      return true;
    }
    return scalar(Scalar{.kind = Scalar::Kind::Float, .f = v});
  }
  bool string(json::string_t& v) {
    if (inIds()) {
      row_.ids(ids_key_).ids.push_back(std::move(v));
      return true;
    }
    if (inHashIds()) {
      row_.bad_hash_id.emplace("\"" + v + "\"");
      return true;
    }
    return scalar(Scalar{.kind = Scalar::Kind::String, .s = std::move(v)});
  }
  bool binary(json::binary_t&) {
    if (inIds()) return badId("binary");
    return scalar(Scalar{.kind = Scalar::Kind::Other});
  }
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
    if (depth_ == 1) {
      in_hash_ids_ = false;
      in_ids_ = false;
    }
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
  bool inIds() const { return in_ids_ && depth_ == 2; }
  bool badId(std::string what) {
    Row::IdList& list = row_.ids(ids_key_);
    if (!list.bad) list.bad = std::move(what);
    return true;
  }

  /// A container value: at depth 1 it is the value of key_; inside hash_ids it is a bad element.
  void openContainer(bool is_array) {
    if (depth_ == 1) {
      if (key_ == kHashIds) {
        row_.hash = is_array ? Row::Hash::Array : Row::Hash::NotArray;
        row_.hash_ids.clear();  // a repeated key replaces the earlier value, as in a DOM
        row_.bad_hash_id.reset();
        in_hash_ids_ = is_array;
      } else if (key_ == kWaitFor || key_ == kBranches) {
        Row::IdList& list = row_.ids(key_);
        list = Row::IdList{};  // a repeated key replaces the earlier value, as in a DOM
        list.state = is_array ? Row::IdList::State::Array : Row::IdList::State::NotArray;
        in_ids_ = is_array;
        ids_key_ = key_;
      } else if (key_ < kNumScalarFields) {
        row_.fields[key_] = Scalar{.kind = Scalar::Kind::Other};
      }
    } else if (inHashIds()) {
      row_.bad_hash_id.emplace(is_array ? "an array" : "an object");
    } else if (inIds()) {
      badId(is_array ? "an array" : "an object");
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
    } else if (key_ == kWaitFor || key_ == kBranches) {
      Row::IdList& list = row_.ids(key_);
      list = Row::IdList{};
      list.state =
          v.kind == Scalar::Kind::Null ? Row::IdList::State::Null : Row::IdList::State::NotArray;
    } else if (key_ < kNumScalarFields) {
      row_.fields[key_] = std::move(v);
    }
    return true;
  }

  Row& row_;
  std::size_t depth_ = 0;
  Field key_ = kUnknown;
  bool in_hash_ids_ = false;
  bool in_ids_ = false;
  Field ids_key_ = kWaitFor;
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
  std::uint64_t cumulative_tokens = 0;   // mooncake-delta: Σ (input + output) of earlier turns
};

/// One accepted agentic row, before the dependency graph is resolved.
struct AgenticRow {
  std::size_t line = 0;
  std::string request_id;
  std::vector<std::string> wait_for;
  std::vector<std::string> branches;
  double dependency_delay_ms = 0.0;
  Session session;  // one turn; first_arrival_ms = timestamp of a row without wait_for
};

constexpr std::uint64_t kMaxU32 = std::numeric_limits<std::uint32_t>::max();

/// A list of identifiers (wait_for, branches): absent/null ⇒ empty; each at most once.
Result<std::vector<std::string>> idList(const Row& row, Field field) {
  const Row::IdList& list = row.ids(field);
  const char* name = kFieldNames[field];
  switch (list.state) {
    case Row::IdList::State::Absent:
    case Row::IdList::State::Null:
      return std::vector<std::string>{};
    case Row::IdList::State::NotArray:
      return invalidArgument(std::string("'") + name + "' must be an array of request ids");
    case Row::IdList::State::Array:
      break;
  }
  if (list.bad) {
    return invalidArgument(std::string("'") + name + "' must contain request ids (got " +
                           *list.bad + ")");
  }
  std::unordered_map<std::string_view, bool> seen;
  for (const std::string& id : list.ids) {
    if (!seen.emplace(id, true).second) {
      return invalidArgument(std::string("'") + name + "' names '" + id + "' twice");
    }
  }
  return list.ids;
}

class Parser {
 public:
  Parser(const TraceOptions& options, TraceFormat format) : options_(options), format_(format) {}

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

  /// Agentic: resolves wait_for/branches to accepted rows, rejects cycles, and builds one
  /// single-turn session per row (file order) with normalised arrivals. Line errors go to
  /// `skipped` (skip_invalid; a row waiting for a skipped row is skipped too) or are returned.
  Result<std::vector<Session>> finishAgentic(std::vector<LineError>& skipped) {
    const std::size_t n = agentic_.size();
    std::unordered_map<std::string_view, std::uint32_t> index;  // request_id → row
    for (std::uint32_t i = 0; i < n; ++i) index.emplace(agentic_[i].request_id, i);
    std::vector<bool> dead(n, false);
    std::vector<std::vector<std::uint32_t>> deps(n);        // row → rows it waits for
    std::vector<std::vector<std::uint32_t>> dependents(n);  // row → rows waiting for it
    std::vector<std::uint32_t> to_kill;
    const auto fail = [&](std::uint32_t i, std::string message) -> Status {
      if (!options_.skip_invalid) {
        return invalidArgument("line " + std::to_string(agentic_[i].line) + ": " + message);
      }
      skipped.push_back(LineError{agentic_[i].line, std::move(message)});
      dead[i] = true;
      to_kill.push_back(i);
      return {};
    };
    for (std::uint32_t i = 0; i < n; ++i) {
      const AgenticRow& r = agentic_[i];
      bool ok = true;
      for (const std::string& id : r.branches) {
        if (!index.contains(id)) {
          MOCKER_TRY_VOID(fail(i, "'branches' names unknown request_id '" + id + "'"));
          ok = false;
          break;
        }
      }
      for (const std::string& id : r.wait_for) {
        if (!ok) break;
        auto it = index.find(id);
        if (it == index.end()) {
          MOCKER_TRY_VOID(fail(i, "'wait_for' names unknown request_id '" + id + "'"));
          ok = false;
          break;
        }
        deps[i].push_back(it->second);
        dependents[it->second].push_back(i);
      }
    }
    // Rows waiting (transitively) for a skipped row are skipped too.
    while (!to_kill.empty()) {
      const std::uint32_t d = to_kill.back();
      to_kill.pop_back();
      for (std::uint32_t i : dependents[d]) {
        if (dead[i]) continue;
        MOCKER_TRY_VOID(fail(
            i, "'wait_for' names request_id '" + agentic_[d].request_id + "', which was skipped"));
      }
    }
    // Kahn's algorithm over the live rows: what cannot be ordered is on or behind a cycle.
    std::vector<std::uint32_t> pending(n, 0);
    std::vector<std::uint32_t> queue;
    for (std::uint32_t i = 0; i < n; ++i) {
      if (dead[i]) continue;
      pending[i] = static_cast<std::uint32_t>(deps[i].size());
      if (pending[i] == 0) queue.push_back(i);
    }
    std::vector<bool> ordered(n, false);
    for (std::size_t q = 0; q < queue.size(); ++q) {
      ordered[queue[q]] = true;
      for (std::uint32_t i : dependents[queue[q]]) {
        if (!dead[i] && --pending[i] == 0) queue.push_back(i);
      }
    }
    for (std::uint32_t start = 0; start < n; ++start) {
      if (dead[start] || ordered[start]) continue;
      if (!options_.skip_invalid) return cycleError(start, deps, ordered);
      for (std::uint32_t i = start; i < n; ++i) {
        if (!dead[i] && !ordered[i]) {
          skipped.push_back(
              LineError{agentic_[i].line, "'wait_for' is on or behind a dependency cycle"});
          dead[i] = true;
        }
      }
      break;
    }
    // Line errors, rows skipped for their dependencies and cycle members: back to file order.
    std::stable_sort(skipped.begin(), skipped.end(),
                     [](const LineError& a, const LineError& b) { return a.line < b.line; });

    std::vector<std::uint32_t> session_of(n, 0);
    std::vector<Session> sessions;
    std::optional<double> min_arrival;
    for (std::uint32_t i = 0; i < n; ++i) {
      if (dead[i]) continue;
      session_of[i] = static_cast<std::uint32_t>(sessions.size());
      Session& s = sessions.emplace_back(std::move(agentic_[i].session));
      if (!deps[i].empty()) {
        s.first_arrival_ms.reset();  // released by its dependencies
      } else if (s.first_arrival_ms) {
        min_arrival = std::min(min_arrival.value_or(*s.first_arrival_ms), *s.first_arrival_ms);
      }
    }
    const double ratio = options_.arrival_speedup_ratio;
    for (std::uint32_t i = 0; i < n; ++i) {
      if (dead[i]) continue;
      Session& s = sessions[session_of[i]];
      for (std::uint32_t d : deps[i]) s.wait_for.push_back(session_of[d]);
      s.dependency_delay_ms = agentic_[i].dependency_delay_ms / ratio;
      if (s.first_arrival_ms) s.first_arrival_ms = (*s.first_arrival_ms - *min_arrival) / ratio;
    }
    return sessions;
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

  /// The error for a cycle reachable from `start`: follow unordered dependencies until a row
  /// repeats; name the cycle's row with the smallest line.
  Error cycleError(std::uint32_t start, const std::vector<std::vector<std::uint32_t>>& deps,
                   const std::vector<bool>& ordered) const {
    std::unordered_map<std::uint32_t, std::size_t> position;
    std::vector<std::uint32_t> path;
    std::uint32_t at = start;
    while (!position.contains(at)) {
      position.emplace(at, path.size());
      path.push_back(at);
      for (std::uint32_t d : deps[at]) {
        if (!ordered[d]) {
          at = d;
          break;
        }
      }
    }
    std::vector<std::uint32_t> cycle(path.begin() + static_cast<std::ptrdiff_t>(position[at]),
                                     path.end());
    const auto first = std::min_element(cycle.begin(), cycle.end());  // rows are in file order
    std::rotate(cycle.begin(), first, cycle.end());
    std::string text;
    constexpr std::size_t kShown = 8;
    for (std::size_t k = 0; k < cycle.size() && k < kShown; ++k) {
      text += "'" + agentic_[cycle[k]].request_id + "' waits for ";
    }
    text += cycle.size() > kShown ? "… (" + std::to_string(cycle.size()) + " rows) … '" +
                                        agentic_[cycle.front()].request_id + "'"
                                  : "'" + agentic_[cycle.front()].request_id + "'";
    return invalidArgument("line " + std::to_string(agentic_[cycle.front()].line) +
                           ": 'wait_for' forms a cycle: " + text);
  }

 public:
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
      } else if (field == kWaitFor || field == kBranches) {
        Row::IdList& list = row.ids(field);
        list = Row::IdList{};
        switch (v.kind) {
          case detail::FlatValue::Kind::UintArray:
            list.state = Row::IdList::State::Array;
            for (std::size_t i = v.array_begin; i < v.array_end; ++i) {
              list.ids.push_back(std::to_string(numbers_[i]));
            }
            break;
          case detail::FlatValue::Kind::Null:
            list.state = Row::IdList::State::Null;
            break;
          case detail::FlatValue::Kind::Uint:
          case detail::FlatValue::Kind::Float:
          case detail::FlatValue::Kind::String:
            list.state = Row::IdList::State::NotArray;
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
  TraceFormat format_;
  std::vector<Session> sessions_;
  std::vector<AgenticRow> agentic_;                             // agentic rows, file order
  std::unordered_map<std::string, std::size_t> agentic_lines_;  // request_id → line
  std::unordered_map<std::string, SessionState> by_id_;         // lookup only; order is sessions_
  std::vector<detail::FlatMember> members_;                     // fast-scanner scratch
  std::vector<std::uint64_t> numbers_;                          // fast-scanner scratch
};

}  // namespace

std::string_view toString(TraceFormat format) {
  switch (format) {
    case TraceFormat::Mooncake:
      return "mooncake";
    case TraceFormat::MooncakeDelta:
      return "mooncake-delta";
    case TraceFormat::Agentic:
      return "agentic";
  }
  return "mooncake";
}

Result<Workload> parseMooncakeTrace(std::string_view text, const TraceOptions& options,
                                    TraceFormat format) {
  MOCKER_TRY_VOID(validateTraceOptions(options));
  Workload workload;
  workload.trace_block_size = options.trace_block_size;
  workload.cumulative_prompts = format == TraceFormat::MooncakeDelta;
  Parser parser(options, format);

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
